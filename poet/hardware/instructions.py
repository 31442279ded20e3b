"""A device profile's instruction table: what every node of a profiled program executes on an
emulated core (``poet profile --target qemu-m4``), priced with a declared clock and declared energies.

Instructions are measured (they repeat exactly from run to run); seconds and joules are not, so the
profile declares them: seconds = instructions / ``clock_hz``; energy = instructions x
``joules_per_instruction``, plus ``joules_per_byte_paged`` for each byte a page-in or page-out moves.
A graph whose nodes are all in one of the table's programs (by name) is priced node by node from
it; any other graph falls back to the profile's operator families (fitted to the same
measurements).  No torch here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..graph.core import CostedGraph, CostedNode, Graph

NODE_FIELDS = ("compute", "recompute", "page_out", "page_in", "free")


@dataclass(frozen=True)
class NodeCost:
    """Instructions of one node: its first computation (kernels, the runtime around them, graph-output
    copies), a recomputation, a page-out, a page-in and a free."""

    compute: int
    recompute: int
    page_out: int
    page_in: int
    free: int


@dataclass(frozen=True)
class ProgramCosts:
    name: str
    nodes: dict  # node name -> NodeCost


@dataclass(frozen=True)
class InstructionTable:
    clock_hz: float  # declared
    joules_per_instruction: float  # declared
    joules_per_byte_paged: float  # declared
    programs: tuple[ProgramCosts, ...]

    def program_for(self, graph: Graph) -> ProgramCosts | None:
        """The profiled program that has every node of ``graph`` (the one of the same name first)."""
        names = [nd.name for nd in graph.nodes]
        for p in sorted(self.programs, key=lambda p: p.name != graph.name):
            if all(n in p.nodes for n in names):
                return p
        return None


def _number(v, what: str, error, *, positive: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v <= 0):
        raise error(f"{what} must be a finite {'positive' if positive else 'non-negative'} number, got {v!r}")
    return float(v)


def parse_instructions(d: dict, path, error) -> InstructionTable | None:
    """The ``[instructions]`` table of a device file (None when it has none); ``error`` for what is wrong."""
    t = d.get("instructions")
    if t is None:
        return None
    if not isinstance(t, dict):
        raise error(f"{path}: [instructions] must be a table")
    declared = {
        k: _number(t.get(k), f"{path}: [instructions] {k}", error, positive=k == "clock_hz")
        for k in ("clock_hz", "joules_per_instruction", "joules_per_byte_paged")
    }
    progs = t.get("programs", {})
    if not isinstance(progs, dict) or not progs:
        raise error(f"{path}: [instructions.programs] must hold at least one profiled program's nodes")
    programs = []
    for pname, p in progs.items():
        nodes = p.get("nodes") if isinstance(p, dict) else None
        if not isinstance(nodes, dict) or not nodes:
            raise error(f"{path}: [instructions.programs.{pname}] needs a nodes table")
        costs = {}
        for nname, c in nodes.items():
            if not isinstance(c, dict):
                raise error(f"{path}: node {nname} of program {pname} must be a table of {', '.join(NODE_FIELDS)}")
            vals = []
            for k in NODE_FIELDS:
                v = c.get(k)
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise error(
                        f"{path}: node {nname} of program {pname}: {k} must be a count of instructions, got {v!r}"
                    )
                vals.append(v)
            costs[str(nname)] = NodeCost(*vals)
        programs.append(ProgramCosts(str(pname), costs))
    return InstructionTable(**declared, programs=tuple(programs))


def price_by_instructions(graph: Graph, table: InstructionTable, device_name: str, fixed_ram_bytes: int = 0):
    """``graph`` priced node by node from ``table``, or None when no profiled program has all its nodes."""
    prog = table.program_for(graph)
    if prog is None:
        return None
    hz, j, jb = table.clock_hz, table.joules_per_instruction, table.joules_per_byte_paged
    nodes = []
    for nd in graph.nodes:
        c = prog.nodes[nd.name]
        b = int(nd.output_bytes)
        nodes.append(
            CostedNode(
                name=nd.name,
                kind=nd.kind,
                ram_bytes=b,
                compute_time_s=c.compute / hz,
                compute_energy_j=c.compute * j,
                pagein_time_s=c.page_in / hz,
                pagein_energy_j=c.page_in * j + b * jb,
                pageout_time_s=c.page_out / hz,
                pageout_energy_j=c.page_out * j + b * jb,
                tile=nd.tile,
            )
        )
    meta = {"device": device_name, "param_bytes": graph.param_bytes, **graph.meta}
    meta["priced_by"] = f"instructions of {prog.name}"
    return CostedGraph(
        name=graph.name, nodes=tuple(nodes), edges=graph.edges, fixed_ram_bytes=fixed_ram_bytes, meta=meta
    )
