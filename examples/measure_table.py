"""The closing table of issue #3: per test model and budget, predicted vs measured.

    python examples/measure_table.py

Columns: strategy and budget; predicted peak (validator); measured peak
(activation store, unique storages, + fixed bytes); predicted time on the
device profile (m4) vs measured seconds on this host; bytes paged out/in;
recomputes.  Every run is also checked bit for bit against eager autograd.
"""

import copy
import time

import torch

import poet
from poet import demo_models as models
from poet.execute import Executor, reference_schedule
from poet.graph.torch_export import export_training_graph
from poet.hardware.cost import costed_program


def cases():
    torch.manual_seed(0)
    yield (
        "ResNet (BN+residual, dropout .3)",
        models.SmallResNet(8, 2, dropout=0.3).train(),
        torch.nn.CrossEntropyLoss(),
        (torch.randn(4, 3, 12, 12),),
        (torch.randint(0, 10, (4,)),),
    )
    torch.manual_seed(0)
    yield (
        "BERT 2-layer (dropout .2)",
        models.small_bert(dropout=0.2).train(),
        models.bert_loss,
        (torch.randint(0, 100, (2, 12)),),
        (torch.randint(0, 3, (2,)),),
    )
    torch.manual_seed(0)
    yield (
        "MLP 3-layer (dropout .5)",
        models.MLP(32, 64, 3, dropout=0.5).train(),
        torch.nn.CrossEntropyLoss(),
        (torch.randn(16, 32),),
        (torch.randint(0, 10, (16,)),),
    )


def schedule(cg, strategy, fracs, kind):
    """Keep-all, or the tightest of ``fracs`` (of the way from the hard RAM lower bound to the
    keep-all peak) the solver schedules; a rule-based schedule only where it proves none fits."""
    from poet.solve.baselines import keep_all_peak

    if strategy == "keep-all":
        return poet.solve(cg, memory="100%", strategy="keep-all"), "solver"
    lo, hi = cg.min_ram_bytes(), keep_all_peak(cg)
    for f in fracs:
        s = poet.solve(cg, memory=int(lo + f * (hi - lo)), strategy=strategy, time_limit=30)
        if s.feasible:
            return s, f"solver {f:.0%} ({s.status})"
    return reference_schedule(cg, kind, every=3), "rule-based fallback"


def main():
    rows = []
    for name, model, lf, x, y in cases():
        prog0 = export_training_graph(model, x, lf, y)
        fx_calls = sum(1 for n in prog0.gm.graph.nodes if n.op == "call_function")
        for gran in ("aten", "layer"):
            prog = prog0 if gran == "aten" else prog0.coarsen()
            cg = costed_program(prog, "m4")
            print(
                f"\n{name} [{gran}]: {fx_calls} FX aten calls (incl. views/getitem) -> {prog.aten_units} aten "
                f"units -> {len(prog.graph)} poet nodes, {len(prog.graph.edges)} edges; "
                f"fixed {cg.fixed_ram_bytes} B"
            )
            print(
                f"{'schedule':<34}{'budget B':>10}{'pred peak':>10}{'meas peak':>10}{'pred m4 s':>10}"
                f"{'host s':>9}{'out B':>9}{'in B':>9}{'recomp':>7}  autograd-equal"
            )
            for strat, fracs, kind in (
                ("keep-all", None, "keep"),
                ("remat", [0.2, 0.5, 0.8], "remat"),
                ("paging", [0.0, 0.3, 0.6], "paging"),
            ):
                s, how = schedule(cg, strat, fracs, kind)
                m = copy.deepcopy(model)
                prog.params, prog.buffers = dict(m.named_parameters()), dict(m.named_buffers())
                ref = copy.deepcopy(model)
                torch.manual_seed(1)
                rl = lf(ref(*x), *y)
                rl.backward()
                torch.manual_seed(1)
                t = time.perf_counter()
                r = Executor(prog).run(s, x + y)
                host = time.perf_counter() - t
                eq = (
                    torch.equal(r.loss, rl)
                    and all(
                        torch.equal(p.grad, m.get_parameter(k).grad)
                        for k, p in ref.named_parameters()
                        if p.grad is not None
                    )
                    and all(torch.equal(b, m.get_buffer(k)) for k, b in ref.named_buffers())
                )
                label = f"{strat} [{how}]"
                print(
                    f"{label:<34}{s.budget.ram_bytes:>10}{r.predicted_peak_bytes:>10}{r.measured_peak_bytes:>10}"
                    f"{s.totals.runtime_s:>10.3f}{host:>9.3f}{r.bytes_written:>9}{r.bytes_read:>9}"
                    f"{s.totals.recomputes:>7}  {eq}"
                )
                rows.append((name, gran, strat, eq, r.measured_peak_bytes <= s.budget.ram_bytes))
    ok = all(e and w for *_, e, w in rows)
    print("\nall runs autograd-identical and within budget:", ok)


if __name__ == "__main__":
    main()
