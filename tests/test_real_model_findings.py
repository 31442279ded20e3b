"""Issue 37's findings, each through the public API (``poet.plan``, ``plan.run``) against eager autograd.

* GPT-2 from ``transformers`` reads constants the trace captured (``get_attr`` nodes): they execute.
* A causal GPT whose attention output is viewed through a transpose, tiled below its untiled
  minimum: a whole tensor rebuilt from tiles keeps the traced layout, tiles keep their kernel's
  layout, and a view a tile's layout still does not allow is applied whole, with the reason reported.
* A MobileNetV2-style network tiled below its untiled minimum: its BatchNorm gradients are within
  the bound (statistics merged by Chan's formula in float64, even for inputs whose mean dwarfs
  their spread).
* The report's arithmetic at zero and at huge values: no traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import corpus_models  # noqa: E402
from numerics import bitwise_equal, eager_step, worst_tiled_error  # noqa: E402

import poet  # noqa: E402
from poet.execute import Executor, reference_schedule  # noqa: E402
from poet.execute import tiled_ops as K  # noqa: E402
from poet.execute.tiled import tile_program  # noqa: E402
from poet.graph.torch_export import export_training_graph  # noqa: E402
from poet.hardware.cost import costed_program  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
F = torch.nn.functional
nn = torch.nn


def _untiled_minimum(model, x, y, lf):
    probe = poet.plan(model, x, lf, targets=y, memory="100%", strategy="keep-all", tile="off")
    return probe.graph.min_ram_bytes(), probe.graph.fixed_ram_bytes


def test_gpt2_constants_captured_by_the_trace_execute():
    model, x, y, lf = corpus_models.build("gpt2")
    pl = poet.plan(model, x, lf, targets=y, device="m4", memory="45%", time_limit=3)
    assert pl.feasible, str(pl)
    assert any(n.op == "get_attr" for n in pl.program.gm.graph.nodes)  # the case this test is about
    eager = eager_step(model, x, y, lf)
    res = pl.run(x, y, apply=False)
    assert bitwise_equal(res, eager) == []
    assert res.measured_peak_bytes <= pl.schedule.budget.ram_bytes


class _Block(nn.Module):
    def __init__(self, d, nh):
        super().__init__()
        self.nh = nh
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.f1, self.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(B, T, self.nh, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.o(a)
        return x + self.f2(F.gelu(self.f1(self.ln2(x))))


class _CausalGPT(nn.Module):
    def __init__(self, vocab=64, d=32, nh=4, layers=2, T=32):
        super().__init__()
        self.te, self.pe = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.blocks = nn.Sequential(*[_Block(d, nh) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.te(ids) + self.pe(torch.arange(ids.shape[1]))
        return self.head(self.ln(self.blocks(x)))


@pytest.mark.parametrize("fraction", [0.9, 0.55])  # 0.55: the fused attention is tiled too
def test_causal_gpt_tiled_below_its_untiled_minimum_plans_and_runs_within_the_bound(fraction):
    torch.manual_seed(0)
    model = _CausalGPT().eval()
    x, y = (torch.randint(0, 64, (2, 32)),), (torch.randint(0, 64, (2, 32)),)
    lf = corpus_models.token_loss
    lo, fixed = _untiled_minimum(model, x, y, lf)
    budget = fixed + int((lo - fixed) * fraction)
    pl = poet.plan(model, x, lf, targets=y, memory=budget, time_limit=3)
    assert pl.tiling.tiled and pl.feasible, str(pl)
    if fraction < 0.9:
        assert any("scaled_dot_product" in op for op, _, _ in pl.tiling.report.tiled.values()), str(pl)
    res = pl.run(x, y, apply=False)
    assert res.measured_peak_bytes <= budget
    err, name = worst_tiled_error(res, eager_step(model, x, y, lf))
    assert err <= 1, (name, err)


def test_a_whole_tensor_rebuilt_from_tiles_has_the_traced_layout():
    base = torch.randn(2, 16, 4, 8)  # (B, T, heads, d): the layout attention kernels give their output
    traced = base.transpose(1, 2)  # (B, heads, T, d), tiled along T
    tiles = [traced[:, :, :5].contiguous(), traced[:, :, 5:].contiguous()]
    from poet.execute.tiled import dense_stride

    whole = K.tile_assemble(tiles, 2, dense_stride(traced))
    assert whole.stride() == traced.stride() and torch.equal(whole, traced)
    assert whole.transpose(1, 2).view(2, 16, 32).shape == (2, 16, 32)  # the traced program's view
    sliced = torch.randn(2, 16, 96)[:, :, 32:64].view(2, 16, 4, 8).transpose(1, 2)  # q of a fused qkv
    assert dense_stride(sliced) == (512, 8, 32, 1)


class _ChannelsLastHead(nn.Module):
    """Convolutions in channels-last, then a view that is only possible in that layout."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 16 * 16, 5)

    def forward(self, x):
        h = F.relu(self.c2(F.relu(self.c1(x))))
        n, c, hh, w = h.shape
        return self.fc(h.permute(0, 2, 3, 1).view(n, hh * w * c))


def _channels_last_run(monkeypatch=None):
    torch.manual_seed(0)
    model = _ChannelsLastHead().to(memory_format=torch.channels_last).train()
    x = torch.randn(2, 3, 16, 16).to(memory_format=torch.channels_last)
    y = torch.randint(0, 5, (2,))
    prog = export_training_graph(model, (x,), F.cross_entropy, (y,))
    tp, rep = tile_program(prog, 2, 0, 0)
    res = Executor(tp).run(reference_schedule(costed_program(tp, "m4"), "remat", every=4), (x, y), apply=False)
    err, name = worst_tiled_error(res, eager_step(model, (x,), (y,), F.cross_entropy))
    assert err <= 1, (name, err)
    return rep


def test_tiles_keep_their_layout_so_a_channels_last_view_stays_tiled():
    rep = _channels_last_run()
    assert not any("view" in why for why in rep.untiled.values()), rep.lines()
    assert sum("convolution.default" in op for op, _, _ in rep.tiled.values()) == 2


def test_a_view_a_tile_layout_does_not_allow_is_applied_whole_and_reported(monkeypatch):
    conv = K.tile_conv
    monkeypatch.setattr(K, "tile_conv", lambda *a: conv(*a).contiguous())  # a kernel laying tiles out otherwise
    rep = _channels_last_run()
    why = [w for w in rep.untiled.values() if "view its tiles' layout does not allow" in w]
    assert why and "view size is not compatible" in why[0], rep.lines()


class _InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride=1, t=4):
        super().__init__()
        h = cin * t
        self.pw, self.bn1 = nn.Conv2d(cin, h, 1, bias=False), nn.BatchNorm2d(h)
        self.dw, self.bn2 = nn.Conv2d(h, h, 3, stride, 1, groups=h, bias=False), nn.BatchNorm2d(h)
        self.pj, self.bn3 = nn.Conv2d(h, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.res = stride == 1 and cin == cout

    def forward(self, x):
        h = F.relu6(self.bn2(self.dw(F.relu6(self.bn1(self.pw(x))))))
        h = self.bn3(self.pj(h))
        return x + h if self.res else h


class _MobileNetV2ish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn, self.act = nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish()
        self.blocks = nn.Sequential(_InvertedResidual(8, 8), _InvertedResidual(8, 16, 2), _InvertedResidual(16, 16))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.blocks(self.act(self.bn(self.stem(x)))).mean((2, 3)))


@pytest.mark.parametrize("shift", [0.0, 300.0])
def test_mobilenet_v2_style_tiled_batchnorm_gradients_are_within_the_bound(shift):
    # shift: inputs whose mean dwarfs their spread, where E[x^2] - E[x]^2 would cancel
    torch.manual_seed(0)
    model = _MobileNetV2ish().train()
    x, y = (torch.randn(2, 3, 32, 32) + shift,), (torch.randint(0, 10, (2,)),)
    lo, fixed = _untiled_minimum(model, x, y, F.cross_entropy)
    budget = fixed + (lo - fixed) * 6 // 10
    # paging: the finding is about numerics, and paging always has a schedule above the tiled minimum
    pl = poet.plan(model, x, F.cross_entropy, targets=y, memory=budget, strategy="paging", time_limit=10)
    assert pl.tiling.tiled and pl.feasible, str(pl)
    assert any("batch_norm" in op for op, _, _ in pl.tiling.report.tiled.values())
    res = pl.run(x, y, apply=False)
    assert res.measured_peak_bytes <= budget
    err, name = worst_tiled_error(res, eager_step(model, x, y, F.cross_entropy))
    assert err <= 1, (name, err)


def _poet(*args, cwd):
    return subprocess.run([sys.executable, "-m", "poet", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_graph_of_zero_byte_nodes_at_a_percent_budget_is_reported_without_a_traceback(tmp_path):
    assert _poet("export-graph", "--model", "linear", "--device", "m4", "--out", "g.json", cwd=tmp_path).returncode == 0
    g = json.loads((tmp_path / "g.json").read_text())
    for nd in g["nodes"]:
        nd["ram_bytes"] = 0
    (tmp_path / "zero.json").write_text(json.dumps(g))
    r = _poet("solve", "--graph", "zero.json", "--memory", "80%", "--time-limit", "5", cwd=tmp_path)
    assert "Traceback" not in r.stderr and r.returncode == 0, r.stderr
    assert "the budget is 0 B" in r.stdout


def test_validate_a_schedule_with_a_huge_budget_without_a_traceback(tmp_path):
    assert _poet("export-graph", "--model", "linear", "--device", "m4", "--out", "g.json", cwd=tmp_path).returncode == 0
    r = _poet("solve", "--graph", "g.json", "--memory", "80%", "--time-limit", "5", "--out", "s.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "s.json").read_text())
    s["budget"]["ram_bytes"] = 10**400
    (tmp_path / "huge.json").write_text(json.dumps(s))
    r = _poet("validate", "huge.json", cwd=tmp_path)
    assert "Traceback" not in r.stderr and r.returncode == 0, r.stderr
    assert "1.00e+400 B" in r.stdout
