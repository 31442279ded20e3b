"""A smoke grid of bench/paper.py (the bench itself is not a test): points run, resume, and the
report is written from validated rows; and the rebuilt original cost model follows its rules."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from paper import Point, load_rows, run  # noqa: E402
from paper_costs import costed, original_graph  # noqa: E402
from paper_report import write_report  # noqa: E402

from poet.graph.zoo import build_model, model_layers  # noqa: E402


def test_the_original_cost_model_reads_output_and_inputs_in_every_gradient():
    g, ours = original_graph("vgg16_cifar"), build_model("vgg16_cifar")
    layers = model_layers("vgg16_cifar").layers
    L = len(layers)
    for i, lay in enumerate(layers):
        b = L + 1 + (L - i)
        assert i in g.preds[b]
        assert all(x in g.preds[b] for x in lay.inputs if x >= 0)
        assert g.nodes[b].flops == 2 * g.nodes[i].flops
    assert len(g.edges) > len(ours.edges)
    assert costed("vgg16_cifar", "m4", "original").plain_energy_j != costed("vgg16_cifar", "m4", "ours").plain_energy_j


def test_a_tiny_grid_runs_resumes_and_writes_the_report(tmp_path, capsys):
    points = [
        Point("rq1", "linear", "m4", cost, s, 0.3, "2x", 10.0)
        for cost in ("ours", "original")
        for s in ("poet", "remat", "paging")
    ]
    points += [Point("tx2", "linear", "jetsontx2", "ours", "pofo", 0.3, None, 10.0)]
    points += [Point("tx2", "linear", "jetsontx2", "ours", "poet", 0.3, None, 10.0, "fastest")]
    out = tmp_path / "runs"
    rows = run(points, out, jobs=2)
    assert set(rows) == {p.key for p in points}
    assert all(r["validated"] for r in rows.values() if r.get("energy_j") is not None)
    assert any(r.get("energy_j") is not None for r in rows.values())
    lines = (out / "points.jsonl").read_text().splitlines()
    run(points, out, jobs=2)  # resumed: nothing runs again
    assert (out / "points.jsonl").read_text().splitlines() == lines
    assert "0 to run" in capsys.readouterr().err
    doc = tmp_path / "docs" / "paper.md"
    write_report(list(load_rows(out / "points.jsonl").values()), doc, quick=True, run_dir=out)
    text = doc.read_text()
    for head in ("## RQ1", "## RQ2", "## RQ3", "## RQ4", "## RQ5", "## TX2"):
        assert head in text
    assert "| linear | m4 | ours |" in text and "**Verdict:" in text
