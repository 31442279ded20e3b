"""Streamed attention on real tensors: key/value tiles with an online softmax, backward from row statistics.

Checked: gradients of a small causal transformer match autograd within ``GRADIENT_BOUND``; no
probability block of a whole query tile x keys is ever a value (softmax and its backward are gone);
every step reads the projection tiles of its own query and key range only, and the blocks the causal
mask hides entirely are skipped; the measured peak (tiles and accumulators counted) stays within a
budget below what query-only tiling needs; masks that are not causal are left to the ordinary rules.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from poet import demo_models as models  # noqa: E402
from poet.demo_models import lm_loss  # noqa: E402
from poet.execute import Executor  # noqa: E402
from poet.execute.tiled import GRADIENT_BOUND, relative_difference, tile_program  # noqa: E402
from poet.execute.tiled_attention import STREAMED_BACKWARD_OP, STREAMED_OP  # noqa: E402
from poet.execute.tiled_attention_match import causal_offset  # noqa: E402
from poet.graph.torch_export import export_training_graph  # noqa: E402
from poet.hardware.cost import costed_program  # noqa: E402
from poet.schedule import validate  # noqa: E402
from poet.schedule.core import FEASIBLE, Budget, Schedule  # noqa: E402
from poet.solve.search.greedy import greedy_plan  # noqa: E402
from poet.solve.stage.emit import emit  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
SEQ = 32


@pytest.fixture(scope="module")
def gpt():
    torch.manual_seed(0)
    m = models.TinyGPT(vocab=20, d=8, heads=2, layers=1, max_len=SEQ).train()
    ids, y = torch.randint(0, 20, (1, SEQ)), torch.randint(0, 20, (1, SEQ))
    prog = export_training_graph(m, (ids,), lm_loss, (y,))
    ref = copy.deepcopy(m)
    loss = lm_loss(ref(ids), y)
    loss.backward()
    return prog, (ids, y), ref, loss


def _tight_schedule(tp, ram_bytes: int) -> Schedule:
    """The page rule at ``ram_bytes`` (compute in order, page out what does not fit), validated."""
    g = costed_program(tp, "m4")
    budget = Budget(ram_bytes=ram_bytes)
    plan = greedy_plan(g, budget, prefer="page")
    assert plan is not None, f"no page-rule schedule at {ram_bytes} B"
    steps = tuple(emit(g, plan))
    return Schedule(
        graph=g, budget=budget, steps=steps, status=FEASIBLE, strategy="page", totals=validate(g, steps, budget)
    )


def _check_grads(res, ref, loss):
    assert relative_difference(res.loss, loss) <= GRADIENT_BOUND
    for name, p in ref.named_parameters():
        assert relative_difference(res.grads[name], p.grad) <= GRADIENT_BOUND, name


@pytest.mark.parametrize("count", [4, 3])  # 3: tiles of 11, 10 and 11 tokens, diagonal blocks of unequal sides
def test_streamed_attention_matches_autograd_and_reads_one_key_tile_per_step(gpt, count):
    prog, batch, ref, loss = gpt
    tp, rep = tile_program(prog, count, threshold=0, min_split=0)
    ops = {op for op, _, _ in rep.tiled.values()}
    assert {STREAMED_OP, STREAMED_BACKWARD_OP} <= ops
    for fam in ("addmm", "aten.mm", "native_layer_norm.", "native_layer_norm_backward", "embedding.default"):
        assert any(fam in op for op in ops), (fam, sorted(ops))  # every other op of the step tiled by tokens
    for fam in ("embedding_dense_backward", "gelu.default", "nll_loss_forward", "nll_loss_backward", "_log_softmax."):
        assert any(fam in op for op in ops), (fam, sorted(ops))
    assert not rep.assembled, rep.assembled
    # the probabilities are never a value: softmax, its backward and the attention matmuls are gone
    left = {u.op for u in tp.units}
    assert not left & {"_softmax", "_softmax_backward_data", "bmm"}, left & {
        "_softmax",
        "_softmax_backward_data",
        "bmm",
    }
    g = tp.graph
    steps = [i for i, nd in enumerate(g.nodes) if nd.op.endswith("tile_attention_step")]
    bounds = [round(i * SEQ / count) for i in range(count + 1)]
    causal_blocks = count * (count + 1) // 2  # key tiles after the query tile are masked entirely: skipped
    assert len(steps) == causal_blocks
    for op in ("tile_attention_grad_kv", "tile_attention_grad_q"):
        assert sum(nd.op.endswith(op) for nd in g.nodes) == causal_blocks
    preds = {i: set() for i in range(len(g.nodes))}
    for u, v in g.edges:
        preds[v].add(u)
    qkv = {nd.tile.start[0]: i for i, nd in enumerate(g.nodes) if nd.tile and nd.tile.of == "addmm"}  # the first linear
    for i in steps:
        t = g.nodes[i].tile
        (a0, b0), (a1, b1) = t.start, t.stop
        assert (a0, a1) in zip(bounds, bounds[1:]) and (b0, b1) in zip(bounds, bounds[1:]) and b0 <= a0
        read = {j for j in preds[i] if g.nodes[j].tile and g.nodes[j].tile.of == "addmm"}
        assert read == {qkv[a0], qkv[b0]}, (t, read)  # Q of its query tile, K and V of its key tile only
    res = Executor(tp).run(_tight_schedule(tp, costed_program(tp, "m4").min_ram_bytes()), batch, apply=False)
    _check_grads(res, ref, loss)


def test_streaming_lowers_the_minimum_and_the_measured_peak_stays_within_it(gpt):
    prog, batch, ref, loss = gpt
    streamed, _ = tile_program(prog, 4, threshold=0, min_split=0)
    by_query, rep = tile_program(prog, 4, threshold=0, min_split=0, stream_attention=False)
    assert STREAMED_OP not in {op for op, _, _ in rep.tiled.values()}
    lo, lo_query = costed_program(streamed, "m4").min_ram_bytes(), costed_program(by_query, "m4").min_ram_bytes()
    assert lo < lo_query
    sched = _tight_schedule(streamed, lo)
    res = Executor(streamed).run(sched, batch, apply=False)
    # the executor counts every live storage: tiles, views' bases (key/value tiles), accumulators
    assert res.measured_peak_bytes == res.predicted_peak_bytes <= lo < lo_query
    _check_grads(res, ref, loss)


class BandedAttention(torch.nn.Module):
    """One attention head whose mask is not causal (a band): left to the ordinary per-op rules."""

    def __init__(self, d=8, vocab=20, band=None):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.head = torch.nn.Linear(d, vocab)
        self.band = band

    def forward(self, ids):
        q, k, v = self.qkv(self.emb(ids)).split(self.emb.embedding_dim, 2)
        att = (q @ k.transpose(-2, -1)) / 3.0
        if self.band is not None:
            i = torch.arange(ids.shape[1])
            att = att.masked_fill((i[None, :] - i[:, None]).abs() > self.band, float("-inf"))
        return self.head(att.softmax(-1) @ v)


@pytest.mark.parametrize("band", [None, 2])
def test_unmasked_attention_streams_and_other_masks_fall_back(band):
    torch.manual_seed(0)
    m = BandedAttention(band=band).train()
    ids, y = torch.randint(0, 20, (1, 12)), torch.randint(0, 20, (1, 12))
    tp, rep = tile_program(export_training_graph(m, (ids,), lm_loss, (y,)), 3, threshold=0, min_split=0)
    streamed = STREAMED_OP in {op for op, _, _ in rep.tiled.values()}
    assert streamed == (band is None)
    ref = copy.deepcopy(m)
    loss = lm_loss(ref(ids), y)
    loss.backward()
    _check_grads(
        Executor(tp).run(_tight_schedule(tp, costed_program(tp, "m4").min_ram_bytes()), (ids, y), apply=False),
        ref,
        loss,
    )


def test_causal_offset_recognises_shifted_causal_masks_only():
    i = torch.arange(6)
    for c in (0, 2):
        assert causal_offset((i[None, :] - i[:, None]) > c, 6, 6) == c
    assert causal_offset(~torch.ones(1, 1, 6, 6, dtype=torch.bool).tril(), 6, 6) == 0
    assert causal_offset((i[None, :] - i[:, None]) > -1, 6, 6) is None  # row 0 fully masked: NaN in eager too
    assert causal_offset((i[None, :] - i[:, None]).abs() > 1, 6, 6) is None
    assert causal_offset(torch.zeros(6, 6), 6, 6) is None  # not a boolean mask
