"""Device profiles measured or imported: files, fits, CSV import, measured costs (no timing assertions)."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest

from poet.cli import main
from poet.graph.io import load_graph
from poet.hardware import DeviceError, load_device
from poet.hardware.profile import HostProfile, OpSample, choose_power, fit_families, profile_toml
from poet.hardware.profile_import import MeasurementError, imported_graph, imported_profile_toml, read_measurements
from poet.hardware.profile_model import op_family, op_seconds, paging_seconds
from poet.hardware.profile_storage import StorageProfile, fit_latency_bandwidth

EXAMPLE_CSV = Path(__file__).resolve().parent.parent / "examples" / "board_measurements.csv"


def synthetic_profile(tmp_path, name="synth") -> Path:
    """A measured-profile file built from known numbers (no measuring)."""
    samples = [OpSample("aten.convolution.default", f, 50e-6 + f / 2e9) for f in (1e6, 4e6, 9e6)]
    samples += [OpSample("aten.add.Tensor", f, 8e-6 + f / 1e8) for f in (1e3, 1e4, 1e5)]
    fams, rate = fit_families(samples)
    sizes = (1024, 65536, 4 << 20)
    st = StorageProfile(
        str(tmp_path),
        sizes,
        tuple(2e-3 + b / 1e8 for b in sizes),
        tuple(2e-4 + b / 3e8 for b in sizes),
        write=fit_latency_bandwidth(sizes, [2e-3 + b / 1e8 for b in sizes]),
        read=fit_latency_bandwidth(sizes, [2e-4 + b / 3e8 for b in sizes]),
        cache_dropped=True,
    )
    hp = HostProfile(
        name=name,
        threads=1,
        families=fams,
        flops_per_s=rate,
        free_overhead_s=3e-6,
        power=choose_power(None, 12.5, None),
        storage=st,
        models=["synthetic"],
        page_in_overhead_s=4e-4,
        page_out_overhead_s=7e-4,
    )
    path = tmp_path / f"{name}.toml"
    path.write_text(profile_toml(hp))
    return path


# ---------------------------------------------------------------- the file
def test_profile_file_round_trips(tmp_path):
    dev = load_device(synthetic_profile(tmp_path))
    assert dev.name == "synth" and dev.threads == 1 and dev.paging_sync is True
    assert dev.free_overhead_s == pytest.approx(3e-6)
    assert dev.compute_power_w == 12.5 and dev.storage_power_w == 12.5
    fams = {f.name: f for f in dev.families}
    assert fams["conv"].latency_s == pytest.approx(50e-6, rel=1e-6)
    assert fams["conv"].flops_per_s == pytest.approx(2e9, rel=1e-6)
    assert fams["elementwise"].flops_per_s == pytest.approx(1e8, rel=1e-6)
    assert dev.write_latency_s == pytest.approx(2e-3, rel=1e-6) and dev.read_bytes_per_s == pytest.approx(3e8, rel=1e-6)
    assert dev.page_in_overhead_s == pytest.approx(4e-4) and dev.page_out_overhead_s == pytest.approx(7e-4)
    # paging: the storage fit plus each kind's overhead (and the page-in's later free)
    t_in, t_out = paging_seconds(dev, 65536)
    assert t_in == pytest.approx(2e-4 + 65536 / 3e8 + 4e-4 + 3e-6, rel=1e-6)
    assert t_out == pytest.approx(2e-3 + 65536 / 1e8 + 7e-4, rel=1e-6)
    # an op is priced by its family; an unmeasured family falls back to the fit over all ops
    assert op_seconds(dev, "aten.convolution.default", 2e6) == pytest.approx(50e-6 + 2e6 / 2e9, rel=1e-6)
    assert op_seconds(dev, "aten.mm.default", 1e6) == pytest.approx(
        fams["other"].latency_s + 1e6 / fams["other"].flops_per_s
    )


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda t: re.sub(r"\nthreads = 1\n", "\n", t), ["partial", "threads", "poet profile"]),
        (lambda t: re.sub(r"\nsync = true\n", "\n", t), ["partial", "sync"]),
        (lambda t: re.sub(r"(\[compute.families.conv\]\nlatency_s = )[^\n]+", r"\g<1>-1.0", t), ["conv", "latency_s"]),
        (
            lambda t: re.sub(r"(\[compute.families.conv\]\nlatency_s = [^\n]+\nflops_per_s = )[^\n]+", r"\g<1>nan", t),
            ["conv", "flops_per_s", "finite"],
        ),
        (lambda t: re.sub(r"\[compute.families.[a-z_]+\]\n(?:[a-z_]+ = [^\n]+\n)+", "", t), ["partial", "families"]),
        (lambda t: t.split("[storage]")[0], ["[storage]"]),
        (lambda t: re.sub(r"\nfree_overhead_s = [^\n]+", '\nfree_overhead_s = "fast"', t), ["free_overhead_s"]),
        (
            lambda t: re.sub(r"\npage_in_overhead_s = [^\n]+", "\npage_in_overhead_s = -0.001", t),
            ["page_in_overhead_s"],
        ),
        (
            lambda t: re.sub(r"\npage_out_overhead_s = [^\n]+", "\npage_out_overhead_s = nan", t),
            ["page_out_overhead_s"],
        ),
        (lambda t: t.replace("[storage]\n", "[storage]\npage_overhead_s = true\n"), ["page_overhead_s"]),
    ],
)
def test_bad_or_partial_profile_is_refused(tmp_path, edit, words):
    path = synthetic_profile(tmp_path)
    path.write_text(edit(path.read_text()))
    with pytest.raises(DeviceError) as e:
        load_device(path)
    for w in words:
        assert w in str(e.value)
    assert str(path) in str(e.value)


def test_profile_with_one_paging_overhead_still_loads(tmp_path):
    """Profiles written before page-ins and page-outs were fitted apart have one ``page_overhead_s``."""
    path = synthetic_profile(tmp_path)
    text = re.sub(r"\npage_(in|out)_overhead_s = [^\n]+", "", path.read_text())
    path.write_text(text.replace("[storage]\n", "[storage]\npage_overhead_s = 0.0005\n"))
    dev = load_device(path)
    assert dev.page_in_overhead_s == dev.page_out_overhead_s == pytest.approx(5e-4)
    path.write_text(text)  # and older ones none at all
    dev = load_device(path)
    assert dev.page_in_overhead_s == dev.page_out_overhead_s == 0.0


def test_cli_refuses_a_bad_profile_without_traceback(tmp_path, capsys):
    path = synthetic_profile(tmp_path)
    path.write_text(path.read_text().replace("threads = 1\n", ""))
    assert main(["solve", "--model", "linear", "--device", str(path), "--memory", "80%", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "partial" in err and "Traceback" not in err


# ---------------------------------------------------------------- fits
def test_storage_fit_recovers_latency_and_bandwidth():
    sizes = [1024 * 4**i for i in range(9)]
    exact = fit_latency_bandwidth(sizes, [3e-4 + b / 2.5e8 for b in sizes])
    assert exact.latency_s == pytest.approx(3e-4, rel=1e-6) and exact.bytes_per_s == pytest.approx(2.5e8, rel=1e-6)
    assert exact.max_rel_error < 1e-9
    rng = random.Random(1)
    noisy = fit_latency_bandwidth(sizes, [(3e-4 + b / 2.5e8) * (1 + rng.uniform(-0.03, 0.03)) for b in sizes])
    assert noisy.latency_s == pytest.approx(3e-4, rel=0.06) and noisy.bytes_per_s == pytest.approx(2.5e8, rel=0.06)
    assert 0 < noisy.median_rel_error <= noisy.max_rel_error < 0.06
    # no latency in the data: the fit does not go negative
    flat = fit_latency_bandwidth(sizes, [b / 1e8 + 1e-12 for b in sizes])
    assert flat.latency_s >= 0 and flat.bytes_per_s == pytest.approx(1e8, rel=1e-3)
    with pytest.raises(ValueError):
        fit_latency_bandwidth([1024], [1e-3])


def test_family_fit_and_op_families():
    assert op_family("aten.convolution.default") == "conv"
    assert op_family("aten.convolution_backward.default") == "conv_backward"
    assert op_family("aten.addmm.default") == "matmul"
    assert op_family("aten.native_batch_norm_backward.default") == "norm"
    assert op_family("aten.relu.default") == "elementwise"
    fams, rate = fit_families([OpSample("aten.mm.default", f, 1e-5 + f / 4e9) for f in (1e5, 1e6, 1e7)])
    mm = next(f for f in fams if f.name == "matmul")
    assert mm.fit.latency_s == pytest.approx(1e-5, rel=1e-6) and mm.fit.bytes_per_s == pytest.approx(4e9, rel=1e-6)
    assert rate == pytest.approx(sum((1e5, 1e6, 1e7)) / sum(1e-5 + f / 4e9 for f in (1e5, 1e6, 1e7)))


def test_family_fit_keeps_the_total():
    from poet.hardware.profile import fit_sum_preserving

    rng = random.Random(2)
    flops = [rng.uniform(1e4, 1e7) for _ in range(30)]
    secs = [(2e-5 + f / 3e9) * rng.uniform(0.7, 1.5) for f in flops]
    fit = fit_sum_preserving(flops, secs)
    assert sum(fit.predict(f) for f in flops) == pytest.approx(sum(secs), rel=1e-9)
    # times that fall with FLOPs: latency only, still the same total
    flat = fit_sum_preserving([1e3, 1e6], [2e-4, 1e-4])
    assert flat.predict(1e3) + flat.predict(1e6) == pytest.approx(3e-4, rel=1e-4)


def test_paging_overhead_fit_recovers_each_kind():
    from poet.hardware.profile import PagingSample, fit_paging_overhead

    # per run: 7 page-ins 0.3 ms and 5 page-outs 1.1 ms over the storage fit; computes 0.1 ms more per page op
    rng = random.Random(3)
    runs = []
    for _ in range(9):
        noise = [rng.uniform(0.8, 1.25) for _ in range(3)]
        runs.append(PagingSample(7 * 3e-4 * noise[0], 5 * 1.1e-3 * noise[1], 12 * 1e-4 * noise[2], 7, 5))
    runs.append(PagingSample(7 * 9e-3, 5 * 9e-3, 12 * 9e-3, 7, 5))  # one burst: the medians ignore it
    fit = fit_paging_overhead(runs)
    assert fit.page_in_direct_s == pytest.approx(3e-4, rel=0.25)
    assert fit.page_out_direct_s == pytest.approx(1.1e-3, rel=0.25)
    assert fit.other_per_page_s == pytest.approx(1e-4, rel=0.25)
    assert fit.page_in_s == pytest.approx(fit.page_in_direct_s + fit.other_per_page_s)
    assert fit.page_out_s == pytest.approx(fit.page_out_direct_s + fit.other_per_page_s)
    exact = fit_paging_overhead([PagingSample(2 * 3e-4, 2 * 5e-4, 4 * 1e-4, 2, 2)])
    assert (exact.page_in_s, exact.page_out_s) == pytest.approx((4e-4, 6e-4))
    # computes faster than in the keep-everything run: the overheads shrink but stay >= 0
    faster = fit_paging_overhead([PagingSample(2 * 1e-4, 2 * 5e-4, -4 * 3e-4, 2, 2)])
    assert faster.page_in_s == 0.0 and faster.page_out_s == pytest.approx(2e-4)
    with pytest.raises(ValueError, match="page-ins and page-outs"):
        fit_paging_overhead([PagingSample(0.0, 1e-3, 0.0, 0, 2)])
    with pytest.raises(ValueError, match="non-finite"):
        fit_paging_overhead([PagingSample(float("nan"), 1e-3, 0.0, 1, 2)])


def test_paging_calibration_prices_runs_against_the_keep_timing():
    from types import SimpleNamespace

    from poet.execute.executor import InstructionRecord
    from poet.execute.measure import PagingRuns, ProgramTiming, calibrate_paging

    # two nodes of 1000 B; the storage fit: read 0.1 ms + 1000 B at 10 MB/s, write 0.3 ms + the same
    dev = SimpleNamespace(read_latency_s=1e-4, read_bytes_per_s=1e7, write_latency_s=3e-4, write_bytes_per_s=1e7)
    graph = SimpleNamespace(nodes=[SimpleNamespace(ram_bytes=1000), SimpleNamespace(ram_bytes=1000)])
    keep = ProgramTiming((2e-3, 4e-3), (2e-3, 4e-3), (0.0, 0.0), 1e-5, 1, 6e-3, 6e-3)
    read_s, write_s = 1e-4 + 1e-4, 3e-4 + 1e-4  # the storage fit for 1000 B

    def run(k):  # page-in +50 us, page-out +200 us, computes 0.1 ms slower per page op (2 page ops)
        recs = [
            InstructionRecord("compute", 0, 0, 0, 0, busy_seconds=2e-3 + k),
            InstructionRecord("page_out", 0, 0, 0, 0, busy_seconds=write_s + 2e-4),
            InstructionRecord("free", 0, 0, 0, 0, busy_seconds=1e-5),
            InstructionRecord("page_in", 0, 0, 0, 0, busy_seconds=read_s + 5e-5),
            InstructionRecord("compute", 1, 0, 0, 0, busy_seconds=4e-3 + 2e-4 - k),
        ]
        return tuple(recs), sum(r.busy_seconds for r in recs)

    made = [run(k) for k in (0.0, 1e-5, -1e-5)]
    cal = calibrate_paging(PagingRuns(dev, graph, tuple(r for r, _ in made), tuple(t for _, t in made)), keep)
    assert cal.page_ins == 1 and cal.page_outs == 1 and cal.fit.runs == 3
    assert cal.fit.page_in_direct_s == pytest.approx(5e-5) and cal.fit.page_out_direct_s == pytest.approx(2e-4)
    assert cal.fit.other_per_page_s == pytest.approx(1e-4)
    assert cal.fit.page_in_s == pytest.approx(1.5e-4) and cal.fit.page_out_s == pytest.approx(3e-4)
    # the run without its overheads is the keep timing's computes and free plus the storage fit
    assert cal.predicted_s == pytest.approx(2e-3 + 4e-3 + 1e-5 + read_s + write_s)
    assert cal.measured_s == pytest.approx(cal.predicted_s + 5e-5 + 2e-4 + 2e-4)


def test_profile_refuses_a_bad_duration(capsys):
    from poet.cli import main

    assert main(["profile", "--out", "x.toml", "--seconds", "-1"]) == 2
    assert "--seconds must be between 0 and 3600" in capsys.readouterr().err


def test_timings_taken_apart_merge_over_all_their_runs():
    from poet.execute.measure import ProgramTiming, merge_timings

    def timing(node_runs, frees, its):
        return ProgramTiming(
            node_busy_s=tuple(sum(x) / len(x) for x in node_runs),
            node_wall_s=tuple(max(x) for x in node_runs),
            node_spread=(0.0,) * len(node_runs),
            free_busy_s=sum(frees) / len(frees),
            runs=len(its),
            iteration_busy_s=sorted(its)[len(its) // 2],
            iteration_wall_s=sorted(its)[len(its) // 2],
            node_runs_busy=node_runs,
            frees_busy=frees,
            iterations_busy=its,
            iterations_wall=its,
        )

    a = timing(((1.0, 2.0, 3.0), (10.0, 10.0, 10.0)), (0.1, 0.3), (11.0, 12.0, 13.0))
    b = timing(((6.0,), (20.0,)), (0.5,), (26.0,))
    m = merge_timings([a, b])
    assert m.runs == 4 and m.node_busy_s == pytest.approx((3.0, 12.5))  # over all 4 runs, not the mean of means
    assert m.free_busy_s == pytest.approx(0.3) and m.iteration_busy_s == pytest.approx(12.5)
    assert m.node_runs_busy[0] == (1.0, 2.0, 3.0, 6.0)
    with pytest.raises(ValueError, match="no timings"):
        merge_timings([])


def test_train_timing_leaves_the_first_step_out():
    from poet.execute.timing import steady_results

    assert steady_results([1, 2, 3, 4, 5]) == [2, 3, 4, 5]
    assert steady_results([1, 2]) == [1, 2]  # too few to leave one out


def test_power_source_is_recorded():
    assert choose_power(None, None, None).source == "none"
    assert choose_power(7.0, None, None).source == "rapl"
    assert choose_power(7.0, 3.0, 1.0) == choose_power(None, 3.0, 1.0)
    with pytest.raises(ValueError, match="--power-w"):
        choose_power(None, -1.0, None)


# ---------------------------------------------------------------- CSV import
def test_csv_example_imports_as_profile_and_graph(tmp_path):
    m = read_measurements(EXAMPLE_CSV)
    assert len(m.ops) == 12 and len(m.storage) == 6
    prof = tmp_path / "board.toml"
    prof.write_text(imported_profile_toml(m))
    dev = load_device(prof)
    assert dev.families and dev.read_latency_s > 0 and dev.write_bytes_per_s > 0
    g = imported_graph(m)
    assert [n.name for n in g.nodes][:2] == ["conv1", "bn1"]
    assert (0, 1) in g.edges and g.nodes[0].compute_time_s == 0.1389
    assert g.nodes[0].compute_energy_j == 0.001525  # energy as measured, not recomputed
    assert g.nodes[1].pagein_time_s > 0
    # through the CLI: the graph file can be scheduled by anyone
    out = tmp_path / "board.json"
    assert main(["profile", "--import", str(EXAMPLE_CSV), "--graph-out", str(out), "--quiet"]) == 0
    assert len(load_graph(out)) == 12
    assert main(["solve", "--graph", str(out), "--memory", "100%", "--quiet", "--strategy", "paging"]) == 0


def _csv(tmp_path, text: str) -> Path:
    p = tmp_path / "m.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, words",
    [
        ("name,kind,bytes\na,forward,4\n", ["missing column", "time_s"]),
        ("name,bytes,time_s\na,4,0.1\n", ["missing column", "kind"]),
        ("name,kind,bytes,time_s\na,forward,4,0.1\nb,forward,-8,0.1\n", ["row 3", "'bytes'", "negative"]),
        ("name,kind,bytes,time_s\na,forward,4,-0.5\n", ["row 2", "'time_s'", "negative"]),
        ("name,kind,bytes,time_s,flops\na,forward,4,0.1,nan\n", ["row 2", "'flops'", "finite"]),
        ("name,kind,bytes,time_s,energy_j\na,forward,4,0.1,inf\n", ["row 2", "'energy_j'", "finite"]),
        ("name,kind,bytes,time_s\na,forward,4,abc\n", ["row 2", "'time_s'", "not a number"]),
        ("name,kind,bytes,time_s\na,sideways,4,0.1\n", ["row 2", "'kind'"]),
        ("name,kind,bytes,time_s,inputs\na,forward,4,0.1,zz\n", ["row 2", "'inputs'", "zz"]),
        ("name,kind,bytes,time_s\na,forward,,0.1\n", ["row 2", "'bytes'", "empty"]),
        ("name,kind,bytes,time_s\nr,read,1024,0\n", ["row 2", "'time_s'", "greater than 0"]),
    ],
)
def test_csv_import_rejects_bad_rows(tmp_path, text, words):
    path = _csv(tmp_path, text)
    with pytest.raises(MeasurementError) as e:
        read_measurements(path)
    for w in words:
        assert w in str(e.value)


def test_csv_import_cli_names_the_row(tmp_path, capsys):
    path = _csv(tmp_path, "name,kind,bytes,time_s\na,forward,4,0.1\nb,forward,-8,0.1\n")
    assert main(["profile", "--import", str(path), "--out", str(tmp_path / "x.toml")]) == 2
    err = capsys.readouterr().err
    assert "row 3" in err and "bytes" in err and "Traceback" not in err
    assert not (tmp_path / "x.toml").exists()


def test_csv_graph_without_storage_needs_a_device(tmp_path):
    m = read_measurements(_csv(tmp_path, "name,kind,bytes,time_s\na,forward,4,0.1\nb,backward,4,0.2\n"))
    with pytest.raises(MeasurementError, match="--device"):
        imported_graph(m, power_w=1.0)
    g = imported_graph(m, device="a72")
    assert g.nodes[1].compute_energy_j == pytest.approx(0.2 * load_device("a72").compute_power_w)


# ---------------------------------------------------------------- --device PATH across commands
def test_device_path_works_across_commands(tmp_path, capsys):
    path = synthetic_profile(tmp_path)
    assert main(["solve", "--model", "linear", "--device", str(path), "--memory", "80%", "--quiet"]) == 0
    assert "on synth" in capsys.readouterr().out
    out = tmp_path / "g.json"
    assert main(["export-graph", "--model", "linear", "--device", str(path), "--out", str(out)]) == 0
    g = load_graph(out)
    dev = load_device(path)
    # priced with the measured profile: each zoo node by its op's family (linear -> matmul, ...)
    from poet.graph.zoo import build_model

    for n, plain in zip(g.nodes, build_model("linear").nodes):
        assert n.compute_time_s == pytest.approx(op_seconds(dev, plain.op, plain.flops) + dev.free_overhead_s)
    assert main(["devices"]) == 0


# ---------------------------------------------------------------- measuring (torch; small and quick)
torch = pytest.importorskip("torch")


def test_quick_profile_writes_a_complete_file_and_train_reports_prediction(tmp_path, capsys):
    out = tmp_path / "host.toml"
    assert (
        main(
            [
                "profile",
                "--quick",
                "--model",
                "mlp",
                "--out",
                str(out),
                "--dir",
                str(tmp_path),
                "--quiet",
                "--power-w",
                "15",
            ]
        )
        == 0
    )
    dev = load_device(out)
    assert dev.families and dev.threads == 1 and dev.paging_sync and dev.free_overhead_s >= 0
    assert dev.compute_power_w == 15.0 and 'power_source = "user"' in out.read_text()
    assert {"matmul", "elementwise", "other"} <= {f.name for f in dev.families}
    assert all(math.isfinite(f.latency_s) and f.flops_per_s > 0 for f in dev.families)
    assert dev.read_latency_s >= 0 and dev.write_bytes_per_s > 0
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                "--model",
                "mlp",
                "--device",
                str(out),
                "--memory",
                "90%",
                "--strategy",
                "paging",
                "--steps",
                "2",
                "--check",
                "--json",
                "--time-limit",
                "20",
            ]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    it = rep["per_iteration"]
    assert it["kind"] == "total" and it["predicted_s"] > 0 and it["measured_s"] > 0
    assert it["ratio"] == pytest.approx(it["measured_s"] / it["predicted_s"])
    assert {k["kind"] for k in rep["per_kind"]} == {"compute", "page_out", "page_in", "free"}
    assert rep["measured_peak_bytes"] == rep["predicted_peak_bytes"] <= rep["budget_bytes"]
    assert rep["check"] == {"loss_curve_identical": True, "parameters_identical": True}
    assert rep["torch_threads"] == 1 and rep["device_measured"] is True  # a profile of a machine: ratios mean something
    assert 0 < it["busy_s"] <= it["measured_s"] * (1 + 1e-9)  # busy leaves out waits for a CPU
    assert "page_in_overhead_s" in out.read_text() and "page_out_overhead_s" in out.read_text()
    assert rep["timed_steps"] == 2 and len(rep["step_busy_seconds"]) == 2
    assert all(0 < b <= w * (1 + 1e-9) for b, w in zip(rep["step_busy_seconds"], rep["step_seconds"]))


def test_measured_costs_price_each_node_and_write_a_graph(tmp_path, capsys):
    import poet
    from poet import demo_models as models

    torch.manual_seed(0)
    model, loss_fn, data = models.build("mlp")
    x, y = data.batch()
    pl = poet.plan(
        model.train(),
        x,
        loss_fn,
        targets=y,
        device="a72",
        memory="100%",
        strategy="keep-all",
        costs="measured",
        measure_runs=3,
        time_limit=10,
    )
    g = pl.graph
    assert g.meta["costs"] == "measured"
    assert all(n.compute_time_s > 0 for n in g.nodes)
    assert len({n.compute_time_s for n in g.nodes}) > 1  # each node its own measurement
    a72 = load_device("a72")
    n0 = g.nodes[0]
    assert n0.pageout_time_s == pytest.approx(a72.write_latency_s + n0.ram_bytes / a72.write_bytes_per_s)
    res = pl.run(apply=False)
    assert res.timing[-1].kind == "total" and res.timing[-1].predicted_s == pytest.approx(pl.totals.runtime_s)
    assert "time total" in res.table()
    out = tmp_path / "measured.json"
    assert (
        main(
            [
                "plan",
                "--model",
                "mlp",
                "--device",
                "a72",
                "--costs",
                "measured",
                "--strategy",
                "keep-all",
                "--graph-out",
                str(out),
                "--quiet",
                "--time-limit",
                "10",
            ]
        )
        == 0
    )
    assert load_graph(out).meta["costs"] == "measured"
    assert main(["solve", "--graph", str(out), "--memory", "70%", "--quiet"]) in (0, 2)
