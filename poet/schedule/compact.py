"""The compact step encoding of a ``poet-schedule/1`` file (docs/formats.md, "Compact steps").

A tiled BERT at 32 KiB is millions of steps; as ``{"op", "node", "stage"}`` objects that is about 40
bytes and one Python dict per step, read and written.  Here the steps are three columns: one letter
per op (a string), the node of each step as its difference from the previous step's node (small
numbers: a schedule walks the graph), and the stages as runs of equal values.  Decoding yields
:class:`Step` objects one at a time, so a reader can validate as it decodes.
"""

from __future__ import annotations

from collections.abc import Iterator

from .core import Op, Step
from .validate import ScheduleError

STEPS_ENCODING = "poet-steps/delta-1"
LETTER = {Op.COMPUTE: "c", Op.PAGE_OUT: "o", Op.PAGE_IN: "i", Op.FREE: "f"}
OP_OF = {v: Op(k) for k, v in LETTER.items()}
NO_STAGE = -1  # a run of steps without a stage


def encode_steps(steps) -> dict:
    """``steps`` as the compact object: ``ops`` (one letter each), ``nodes`` (differences), ``stages``
    (a flat list of ``stage, count`` runs; stage -1 for steps that carry none)."""
    letters: list[str] = []
    deltas: list[int] = []
    runs: list[int] = []
    prev = 0
    for st in steps:
        letters.append(LETTER[st.op])
        deltas.append(st.node - prev)
        prev = st.node
        stage = NO_STAGE if st.stage is None else st.stage
        if runs and runs[-2] == stage:
            runs[-1] += 1
        else:
            runs += [stage, 1]
    return {"encoding": STEPS_ENCODING, "count": len(letters), "ops": "".join(letters), "nodes": deltas, "stages": runs}


def is_compact(raw) -> bool:
    return isinstance(raw, dict) and "encoding" in raw


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_compact(raw, source: str) -> int:
    """The number of steps of a compact ``steps`` object; :class:`ScheduleError` naming the field at
    fault when its columns are not what :func:`encode_steps` writes."""
    where = f'{source}: "steps"'
    if raw.get("encoding") != STEPS_ENCODING:
        raise ScheduleError(
            f'{where}: unknown encoding {str(raw.get("encoding"))[:40]!r}; this version reads "{STEPS_ENCODING}" '
            'or a list of {"op", "node"} objects'
        )
    n, ops, nodes, stages = raw.get("count"), raw.get("ops"), raw.get("nodes"), raw.get("stages")
    if not _int(n) or n < 0:
        raise ScheduleError(f"{where}.count must be the number of steps (an integer >= 0), got {str(n)[:40]}")
    if not isinstance(ops, str) or len(ops) != n:
        raise ScheduleError(f"{where}.ops must be a string of {n} letters (one per step: c, o, i, f)")
    bad = set(ops) - set(OP_OF)
    if bad:
        i = next(i for i, c in enumerate(ops) if c in bad)
        raise ScheduleError(
            f"{where}.ops[{i}] is {ops[i]!r}; each letter is c (compute), o (page_out), i (page_in) or f (free)", i
        )
    if not isinstance(nodes, list) or len(nodes) != n:
        raise ScheduleError(f"{where}.nodes must be a list of {n} integers (each step's node minus the previous one's)")
    for i, d in enumerate(nodes):
        if not _int(d):
            raise ScheduleError(f"{where}.nodes[{i}] must be an integer, got {str(d)[:40]}", i)
    if not isinstance(stages, list) or len(stages) % 2:
        raise ScheduleError(f"{where}.stages must be a flat list of stage, count pairs (stage -1: none)")
    total = 0
    for k in range(0, len(stages), 2):
        stage, count = stages[k], stages[k + 1]
        if not _int(stage) or stage < NO_STAGE or not _int(count) or count < 1:
            raise ScheduleError(
                f"{where}.stages[{k}:{k + 2}] must be a stage (an integer >= 0, or -1 for none) and a count >= 1, "
                f"got {str(stages[k : k + 2])[:60]}",
                total,
            )
        total += count
    if total != n:
        raise ScheduleError(f"{where}.stages count {total} steps, not the {n} of count")
    return n


def decode_steps(raw) -> Iterator[Step]:
    """The steps of a compact object checked by :func:`check_compact`, one at a time."""
    ops, nodes, stages = raw["ops"], raw["nodes"], raw["stages"]
    node, i = 0, 0
    for k in range(0, len(stages), 2):
        stage = None if stages[k] == NO_STAGE else stages[k]
        for _ in range(stages[k + 1]):
            node += nodes[i]
            yield Step(OP_OF[ops[i]], node, stage)
            i += 1
