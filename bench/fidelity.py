"""Fidelity of predicted time and peak RAM on this machine: profile, predict, execute, compare.

Three models (the CNN, the 2-layer BERT, the depthwise-separable CNN) under three schedules each
(keep-all, remat-heavy, paging-heavy: the rule-based schedules of ``poet.execute.reference`` with a
checkpoint every 4th forward node), at aten granularity, batch 8, one torch thread.

Per round and model: profile the storage (1 KiB .. 1 MiB sweep); then for each schedule, ``--runs``
times, one profiling run of the model's ops (``poet.execute.measure``, the measurement of ``poet
profile --model``) alternating with one execution of the schedule (paging fsync'd and dropped from
the page cache, as the storage was measured).  The ops' mean times give the family profile ("pred")
and the per-node prices (``--costs measured``, "node").  Alternating makes the profile and the runs
it predicts see the same load on a shared machine.  Rows report the median over rounds.

    python bench/fidelity.py                        # 3 rounds, 10 runs per schedule
    python bench/fidelity.py --models cnn --rounds 5 --runs 20 --json fidelity.jsonl

Columns: predicted seconds per iteration from the family profile ("pred") and from the per-node
measurements ("node"), measured wall seconds and busy seconds (wall minus the time spent waiting for
a CPU behind other processes; see poet/execute/timing.py) with their ratios to "pred", predicted and
measured peak bytes.  The load average (``uptime``) is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from poet import demo_models as models
from poet.execute.executor import Executor
from poet.execute.measure import keep_schedule, measure_program, paging_sample
from poet.execute.reference import reference_steps
from poet.graph.torch_export import export_training_graph
from poet.hardware.cost import costed_program
from poet.hardware.profile import (
    HostProfile,
    OpSample,
    choose_power,
    fit_families,
    fit_paging_overhead,
    profile_device,
)
from poet.hardware.profile_model import price_measured
from poet.hardware.profile_storage import profile_storage
from poet.schedule.core import HEURISTIC, Budget, Schedule
from poet.schedule.validate import validate

SCHEDULES = {"keep-all": "keep", "remat-heavy": "remat", "paging-heavy": "paging"}
STORAGE_SIZES = tuple(1024 * 4**i for i in range(6))  # 1 KiB .. 1 MiB: the pages here are small


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def trace(name: str, batch: int):
    torch.manual_seed(0)
    model, loss_fn, data = models.build(name, batch_size=batch)
    model.train()
    x, y = data.batch()
    return export_training_graph(model, x, loss_fn, y, name=name)


def schedule_on(graph, steps) -> Schedule:
    tot = validate(graph, steps, Budget(ram_bytes=10**18))
    budget = Budget(ram_bytes=tot.peak_ram_bytes)
    return Schedule(
        graph=graph,
        budget=budget,
        steps=tuple(steps),
        status=HEURISTIC,
        strategy="reference",
        totals=validate(graph, steps, budget),
    )


def one_round(prog, steps_by_kind: dict, directory: str, runs: int, paging_dir: str) -> dict:
    """For each schedule: ``runs`` times, one profiling run of the model's ops and one execution of the
    schedule, alternating, so that the profile and the runs it predicts see the same load; then
    predict from that profile and compare.  A schedule that pages also gets a storage sweep before
    its runs, and alternates a third run: the paging-overhead calibration of ``poet profile`` (a
    different paging schedule: all but every 3rd forward output paged)."""
    base = costed_program(prog, "m4")
    calib_steps = reference_steps(base, "paging", every=3)
    ex = Executor(prog, paging_dir=paging_dir, fsync=True, drop_cache=True)
    meter = Executor(prog)  # the profiling runs' own executor, as poet profile's
    keep = keep_schedule(prog)
    measure_program(prog, runs=1, warmup=2, executor=meter, schedule=keep)
    out = {}
    for k, steps in steps_by_kind.items():
        s = schedule_on(base, steps)
        pages = any(x.op in ("page_out", "page_in") for x in steps)
        storage = profile_storage(directory, STORAGE_SIZES, repeats=5)
        calib = schedule_on(base, calib_steps)
        node_sum = [0.0] * len(prog.groups)
        free_sum = 0.0
        walls, busys, calib_samples, peak = [], [], [], 0
        storage_dev = profile_device(
            HostProfile("host", 1, [], 1.0, 0.0, choose_power(None, None, None), storage, models=[prog.name])
        )
        kinds = {"compute": [], "page_out": [], "page_in": [], "free": []}
        ex.run(s, apply=False)  # warm-up
        for _ in range(runs):
            t = measure_program(prog, runs=1, warmup=0, executor=meter, schedule=keep)
            node_sum = [a + b for a, b in zip(node_sum, t.node_busy_s)]
            free_sum += t.free_busy_s
            if pages:
                calib_samples.append(paging_sample(ex.run(calib, apply=False).records, t, storage_dev, calib.graph))
            res = ex.run(s, apply=False)
            walls.append(res.seconds["total"])
            busys.append(res.busy_seconds["total"])
            peak = max(peak, res.measured_peak_bytes)
            for kk, v in kinds.items():
                v.append(res.busy_seconds[kk])
        node_busy = [x / runs for x in node_sum]
        free_s = free_sum / runs
        samples = [
            OpSample(prog.units[g[0]].op, prog.units[g[0]].flops, node_busy[v]) for v, g in enumerate(prog.groups)
        ]
        fams, rate = fit_families(samples)
        hp = HostProfile(
            name="host",
            threads=1,
            families=fams,
            flops_per_s=rate,
            free_overhead_s=free_s,
            power=choose_power(None, None, None),
            storage=storage,
            models=[prog.name],
        )
        if pages:  # as calibrate_paging, on the alternated runs
            over = fit_paging_overhead(calib_samples)
            hp.page_in_overhead_s, hp.page_out_overhead_s = over.page_in_s, over.page_out_s
        dev = profile_device(hp)
        g_fam = costed_program(prog, dev)
        g_node = price_measured(prog.graph, dev, node_busy, free_s, prog.fixed_ram_bytes)
        tot = validate(g_fam, list(steps), Budget(ram_bytes=10**18))
        node_tot = validate(g_node, list(steps), Budget(ram_bytes=10**18))
        pred_kind = {
            "compute": tot.compute_time_s,
            "page_out": sum(g_fam.nodes[x.node].pageout_time_s for x in steps if x.op == "page_out"),
            "page_in": sum(g_fam.nodes[x.node].pagein_time_s for x in steps if x.op == "page_in"),
        }
        out[k] = {
            "pred_s": tot.runtime_s,
            "node_pred_s": node_tot.runtime_s,
            "wall_s": statistics.median(walls),
            "busy_s": statistics.median(busys),
            "pred_peak": tot.peak_ram_bytes,
            "meas_peak": peak,
            "pred_kind": pred_kind,
            "meas_kind": {kk: statistics.median(v) for kk, v in kinds.items()},
            "recomputes": tot.recomputes,
            "page_outs": tot.page_outs,
            "page_in_overhead_s": hp.page_in_overhead_s,
            "page_out_overhead_s": hp.page_out_overhead_s,
            "storage": {
                "write_latency_s": storage.write.latency_s,
                "write_bytes_per_s": storage.write.bytes_per_s,
                "read_latency_s": storage.read.latency_s,
                "read_bytes_per_s": storage.read.bytes_per_s,
            },
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cnn,bert,dwcnn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--dir", default=None, help="storage directory (default: the temp directory)")
    ap.add_argument("--json", default=None, help="append one JSON line per row here")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    say = lambda m: print(m, file=sys.stderr, flush=True)
    directory = a.dir or tempfile.gettempdir()
    t0 = time.perf_counter()
    load0 = load()
    rows = []
    for name in [m for m in a.models.split(",") if m]:
        prog = trace(name, a.batch_size)
        base = costed_program(prog, "m4")
        steps = {label: reference_steps(base, kind, every=4) for label, kind in SCHEDULES.items()}
        rounds = []
        for r in range(a.rounds):
            with tempfile.TemporaryDirectory(dir=directory) as pages:
                rounds.append(one_round(prog, steps, directory, a.runs, pages))
            say(f"{name}: round {r + 1}/{a.rounds} done (load {load()})")
        for label in SCHEDULES:
            rs = [x[label] for x in rounds]
            med = {k: statistics.median(x[k] for x in rs) for k in ("pred_s", "node_pred_s", "wall_s", "busy_s")}
            row = {
                "model": name,
                "schedule": label,
                "nodes": len(prog.graph),
                **med,
                "ratio_wall": statistics.median(x["wall_s"] / x["pred_s"] for x in rs),
                "ratio_busy": statistics.median(x["busy_s"] / x["pred_s"] for x in rs),
                "ratio_busy_node": statistics.median(x["busy_s"] / x["node_pred_s"] for x in rs),
                "pred_peak": rs[0]["pred_peak"],
                "meas_peak": max(x["meas_peak"] for x in rs),
                "recomputes": rs[0]["recomputes"],
                "page_outs": rs[0]["page_outs"],
                "page_in_overhead_s": statistics.median(x["page_in_overhead_s"] for x in rs),
                "page_out_overhead_s": statistics.median(x["page_out_overhead_s"] for x in rs),
                "storage": [x["storage"] for x in rs],
                "kinds": {
                    kk: {
                        "pred": statistics.median(x["pred_kind"][kk] for x in rs) if kk != "free" else None,
                        "meas": statistics.median(x["meas_kind"][kk] for x in rs),
                    }
                    for kk in ("compute", "page_out", "page_in", "free")
                },
                "rounds": a.rounds,
                "runs": a.runs,
            }
            rows.append(row)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(row) + "\n")
    print(
        f"load average before {load0}, after {load()}; {os.cpu_count()} CPUs; one torch thread; "
        f"{a.rounds} rounds x {a.runs} runs per schedule; {time.perf_counter() - t0:.0f} s"
    )
    print(
        "| model | schedule | recomp | page-outs | pred ms | node-pred ms | wall ms | wall/pred | busy ms | "
        "busy/pred | busy/node-pred | pred peak B | meas peak B | peak exact |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['schedule']} | {r['recomputes']} | {r['page_outs']} | {r['pred_s'] * 1e3:.2f} | "
            f"{r['node_pred_s'] * 1e3:.2f} | {r['wall_s'] * 1e3:.2f} | {r['ratio_wall']:.2f} | "
            f"{r['busy_s'] * 1e3:.2f} | {r['ratio_busy']:.2f} | {r['ratio_busy_node']:.2f} | {r['pred_peak']} | "
            f"{r['meas_peak']} | {r['pred_peak'] == r['meas_peak']} |"
        )
    print("\nper instruction kind (ms, predicted / measured busy):")
    for r in rows:
        parts = []
        for kk, v in r["kinds"].items():
            p = "-" if v["pred"] is None else f"{v['pred'] * 1e3:.2f}"
            parts.append(f"{kk} {p} / {v['meas'] * 1e3:.2f}")
        extra = ""
        if r["page_outs"]:
            st = r["storage"][0]
            extra = (
                f"  [paging overhead in {r['page_in_overhead_s'] * 1e6:.0f} us, out "
                f"{r['page_out_overhead_s'] * 1e6:.0f} us; round 1 storage: write "
                f"{st['write_latency_s'] * 1e3:.2f} ms + {st['write_bytes_per_s'] / 1e6:.0f} MB/s, read "
                f"{st['read_latency_s'] * 1e3:.2f} ms + {st['read_bytes_per_s'] / 1e6:.0f} MB/s]"
            )
        print(f"  {r['model']:<6} {r['schedule']:<13} " + "; ".join(parts) + extra)
    within = sum(abs(r["ratio_busy"] - 1) <= 0.15 for r in rows)
    print(
        f"\nrows with busy time within 15% of the prediction: {within}/{len(rows)}; "
        f"peak bytes exact: {sum(r['pred_peak'] == r['meas_peak'] for r in rows)}/{len(rows)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
