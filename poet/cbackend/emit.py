"""C code for a kernel program under a validated schedule and its arena plan.

The generated ``pk_model.c`` holds the schedule as constant tables (runtime/pk_runtime.h): one
``pkr_step`` per instruction; for each compute step its calls, whose tensor arguments have their
byte offsets resolved here (the arena offset of the producer's residency live at that step, plus
the view's offset inside the block); page steps with the block's offset and the node's slot in the
paging store; the graph-output copies of the compute step after which each output is first
complete.  Identical argument lists, call lists, dims and scalars are stored once.  The memory
spaces are static arrays; parameters, buffers and constants are binary files pulled in by
``pk_data.S`` (``.incbin``), never C text.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedule.core import Op
from .arena import ArenaPlan
from .hostlib import DTYPES
from .ir import SPACES, KernelProgram, LoweringError, TensorRef
from .layout import ProjectLayout

__all__ = ["Tables", "c_string", "model_source", "build_tables", "data_assembly", "config_header"]

OPS = {Op.COMPUTE: 0, Op.PAGE_OUT: 1, Op.PAGE_IN: 2, Op.FREE: 3}  # the runtime's instruction codes


def c_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.append(f"\\{ord(ch) & 0xFF:03o}" if ord(ch) < 256 else "?")
    return '"' + "".join(out) + '"'


@dataclass
class Tables:
    """The constant tables of one step, as rows of integers (C initialisers are made from them)."""

    steps: list[tuple[int, int, int, int, int, int]]  # op, ncopies, node, a, b, c
    calls: list[tuple[int, int, int, int, int]]  # kernel, nt, ns, first arg, first scalar
    args: list[tuple[int, int, int, int, int]]  # space, dtype, ndim, offset, dims
    dims: list[int]
    scalars: list[int | float]
    copies: list[tuple[int, int]]
    kernels: list[str]
    pages_bytes: int
    max_tensors: int


class _Pool:
    """Rows stored once: ``add`` returns the index of the first of a run of rows equal to ``rows``."""

    def __init__(self, rows: list):
        self.rows = rows
        self.index: dict = {}

    def add(self, rows: tuple) -> int:
        # keyed by type and repr too: 1 == 1.0 == True and 0.0 == -0.0 in Python, not in a pk_scalar
        key = tuple((type(x), repr(x)) for x in rows)
        at = self.index.get(key)
        if at is None:
            at = self.index[key] = len(self.rows)
            self.rows.extend(rows)
        return at


def _space_offsets(layout: ProjectLayout) -> dict[str, list[int]]:
    return {
        "param": [p.offset for p in layout.params],
        "grad": [p.offset for p in layout.params],
        "buffer": [b.offset for b in layout.buffers],
        "staging": [b.offset for b in layout.buffers],
        "batch": [b.offset for b in layout.batch],
        "const": [c.offset for c in layout.consts],
        "loss": [0],
    }


def build_tables(kp: KernelProgram, schedule, plan: ArenaPlan, layout: ProjectLayout) -> Tables:
    """Resolve every argument of every instruction of ``schedule`` to a space and a byte offset."""
    steps = schedule.steps
    # the residency of each node live at each step: (node) -> offset, updated as the steps run
    starts = {(r.start, r.node): off for r, off in zip(plan.residencies, plan.offsets)}
    items = _space_offsets(layout)
    dims: list[int] = []
    dims_pool = _Pool(dims)
    scalars: list = []
    scalar_pool = _Pool(scalars)
    args: list = []
    arg_pool = _Pool(args)
    calls: list = []
    call_pool = _Pool(calls)
    copies: list = []
    kernels: dict[str, int] = {}
    where: dict[int, int] = {}  # node -> arena offset of its live residency
    computed: set[int] = set()
    pages: dict[int, int] = {}
    pages_bytes = 0
    pending = list(range(len(kp.outputs)))
    rows = []
    max_t = 1

    def arg(r: TensorRef | None, what: str) -> tuple:
        if r is None:
            return (0, DTYPES["none"], 0, 0, 0)
        if r.space == "node":
            if r.index not in where:
                raise LoweringError(f"{what} reads node {r.index}, which is not in RAM there")
            space, off = 0, where[r.index] + r.offset
        else:
            space, off = SPACES.index(r.space), items[r.space][r.index] + r.offset
        d = dims_pool.add(tuple(r.sizes) + tuple(r.strides))
        return (space, DTYPES[r.dtype], len(r.sizes), off, d)

    for i, s in enumerate(steps):
        v = s.node
        nd = kp.nodes[v]
        op = OPS[s.op]
        if s.op == Op.COMPUTE:
            if nd.accumulates and v in computed:
                raise LoweringError(
                    f"step {i} computes {nd.name} again, but it adds its share into the gradient: a second "
                    f"computation would count it twice; solve without recomputing it"
                )
            computed.add(v)
            where[v] = starts[(i, v)]
            crow = []
            for c in nd.calls:
                what = f"step {i} (compute {nd.name}, {c.kernel})"
                k = kernels.setdefault(c.kernel, len(kernels))
                a = arg_pool.add(tuple(arg(r, what) for r in c.tensors))
                sc = scalar_pool.add(tuple(c.scalars)) if c.scalars else 0
                if len(c.tensors) > 255 or len(c.scalars) > 255:
                    raise LoweringError(
                        f"{what}: {len(c.tensors)} tensors and {len(c.scalars)} scalars; a call takes 255 at most"
                    )
                crow.append((k, len(c.tensors), len(c.scalars), a, sc))
                max_t = max(max_t, len(c.tensors))
            first = call_pool.add(tuple(crow)) if crow else 0
            ready = [j for j in pending if all(u in where for u in kp.outputs[j].roots)]
            c0 = len(copies)
            for j in ready:
                o = kp.outputs[j]
                what = f"step {i}: graph output {o.role} {o.name}"
                copies.append((arg_pool.add((arg(o.src, what),)), arg_pool.add((arg(o.dst, what),))))
                pending.remove(j)
            rows.append((op, len(ready), v, first, len(crow), c0))
        elif s.op in (Op.PAGE_OUT, Op.PAGE_IN):
            if s.op == Op.PAGE_IN:
                where[v] = starts[(i, v)]
            if v not in pages:
                pages[v] = pages_bytes
                pages_bytes += (nd.nbytes + 8 + 7) // 8 * 8  # the page, then its size and CRC-32
            rows.append((op, 0, v, where[v], nd.nbytes, pages[v]))
        else:
            rows.append((op, 0, v, where.pop(v), nd.nbytes, 0))
    if pending:
        missing = ", ".join(f"{kp.outputs[j].role} {kp.outputs[j].name}".strip() for j in pending)
        raise LoweringError(f"the schedule never has in RAM at once what these graph outputs are read from: {missing}")
    kernel_list = sorted(kernels, key=kernels.get)
    return Tables(rows, calls, args, dims, scalars, copies, kernel_list, pages_bytes, max_t)


def _rows(rows, fmt) -> str:
    if not rows:
        return "    {0}"
    return ",\n".join("    " + fmt(r) for r in rows)


def _scalar(x) -> str:
    if isinstance(x, float):
        return f"{{.f = {x!r}}}" if x == x and abs(x) != float("inf") else _special(x)
    return f"{{.i = {int(x)}}}"


def _special(x: float) -> str:
    if x != x:
        return "{.f = 0.0 / 0.0}"
    return "{.f = 1.0 / 0.0}" if x > 0 else "{.f = -1.0 / 0.0}"


def config_header(t: Tables) -> str:
    return (
        "/* pk_config.h: generated by poet.cbackend.emit for this step (do not edit). */\n"
        "#ifndef PK_CONFIG_H\n#define PK_CONFIG_H\n"
        f"#define PK_MAX_TENSORS {t.max_tensors}\n"
        "#endif\n"
    )


def data_assembly(params_in_ram: bool, batch_in_flash: bool = False) -> str:
    """``pk_data.S``: the binary blobs of the step, each 8-byte aligned, in the section the setting wants
    (with ``batch_in_flash``, the step's one batch as constant data too)."""
    psec = '.data.pk_params,"aw"' if params_in_ram else '.rodata.pk_params,"a"'
    parts = ["/* pk_data.S: generated by poet.cbackend.emit; the step's data, pulled in as binary files. */"]
    blobs = [
        ("pk_params_blob", psec, "params.bin"),
        ("pk_buffers_blob", '.data.pk_buffers,"aw"', "buffers.bin"),
        ("pk_consts_blob", '.rodata.pk_consts,"a"', "consts.bin"),
    ]
    if batch_in_flash:
        blobs.append(("pk_batch_blob", '.rodata.pk_batch,"a"', "batch_data.bin"))
    for sym, sec, file in blobs:
        parts += [
            f"    .section {sec}",
            "    .balign 8",
            f"    .global {sym}",
            f"{sym}:",
            f'    .incbin "{file}"',
            "    .balign 8",
        ]
    parts.append('    .section .note.GNU-stack,"",%progbits')
    return "\n".join(parts) + "\n"


def model_source(
    kp: KernelProgram, t: Tables, layout: ProjectLayout, *, names: bool = True, poison: bool = False
) -> str:
    """``pk_model.c``: the tables, the memory spaces and the ``pkr_model`` that ties them together."""
    n8 = lambda x: max(8, (x + 7) // 8 * 8)  # noqa: E731 - a C array is never empty
    grads_sym = "pk_grads" if layout.params_in_ram else "pk_grads_external"
    grads_attr = "_Alignas(8)" if layout.params_in_ram else "PK_EXTERNAL"
    mom = layout.momentum if layout.params_in_ram else 0.0
    out = [
        f"/* pk_model.c: generated by poet.cbackend.emit from a validated schedule of {kp.name} (do not edit).",
        f"   {len(t.steps)} instructions, {len(t.calls)} calls, {len(t.args)} arguments; "
        f"arena {layout.arena_bytes} B. */",
        '#include "pk_runtime.h"',
        "",
        "#ifndef PK_ARENA",
        '#define PK_ARENA __attribute__((section(".bss.PK.arena"), aligned(8)))',
        "#endif",
        "#ifndef PK_EXTERNAL",
        '#define PK_EXTERNAL __attribute__((section(".bss.PK.external"), aligned(8)))',
        "#endif",
        "",
    ]
    out += [f"PK_KERNEL({k});" for k in t.kernels]
    out += [
        "",
        "static const pk_kernel_fn kernels[] = {" + ", ".join(f"pk_{k}" for k in t.kernels) + "};",
        "static const char *const kernel_names[] = {" + ", ".join(c_string(k) for k in t.kernels) + "};",
    ]
    if names:
        out.append(
            "static const char *const node_names[] = {\n"
            + ",\n".join("    " + c_string(n.name) for n in kp.nodes)
            + "};"
        )
    out += [
        "static const int32_t dims[] = {" + (", ".join(map(str, t.dims)) or "0") + "};",
        "static const pk_scalar scalars[] = {\n" + _rows(t.scalars, _scalar) + "};",
        "static const pkr_arg args[] = {\n"
        + _rows(t.args, lambda r: f"{{{r[0]}, {r[1]}, {r[2]}, 0, {r[3]}u, {r[4]}u}}")
        + "};",
        "static const pkr_call calls[] = {\n"
        + _rows(t.calls, lambda r: f"{{{r[0]}, {r[1]}, {r[2]}, {r[3]}u, {r[4]}u}}")
        + "};",
        "static const pkr_copy copies[] = {\n" + _rows(t.copies, lambda r: f"{{{r[0]}u, {r[1]}u}}") + "};",
        "static const pkr_step steps[] = {\n"
        + _rows(t.steps, lambda r: f"{{{r[0]}, 0, {r[1]}, {r[2]}u, {r[3]}u, {r[4]}u, {r[5]}u}}")
        + "};",
    ]
    trained = [p for p in layout.params if p.name in layout.trained]
    upd = [(p.offset, p.offset, p.nbytes // 4) for p in trained]
    bupd = [(b.offset, b.offset, b.nbytes) for b in layout.buffers if b.name in layout.updated_buffers]
    ws = kp.stream
    wsb = [(b.offset, b.nbytes) for b in ws.layers] if ws is not None else []
    out += [
        "static const pkr_ws_block ws_blocks[] = {\n" + _rows(wsb, lambda r: f"{{{r[0]}u, {r[1]}u}}") + "};",
        *([f"static float ws_staging[{ws.staging_bytes // 4}];"] if ws is not None else []),
        "static const pkr_update updates[] = {\n" + _rows(upd, lambda r: f"{{{r[0]}u, {r[1]}u, {r[2]}u}}") + "};",
        "static const pkr_buffer_update buffer_updates[] = {\n"
        + _rows(bupd, lambda r: f"{{{r[0]}u, {r[1]}u, {r[2]}u}}")
        + "};",
        "",
        f"static uint8_t pk_arena[{n8(layout.arena_bytes)}] PK_ARENA;",
        f"{'static ' if layout.params_in_ram else ''}{grads_attr} uint8_t {grads_sym}[{n8(layout.param_bytes)}];",
        f"static _Alignas(8) uint8_t staging[{n8(layout.buffer_bytes)}];",
        *(
            ["extern const uint8_t pk_batch_blob[];"]
            if layout.batch_in_flash
            else [f"static _Alignas(8) uint8_t batch[{n8(layout.batch_bytes)}];"]
        ),
        "static _Alignas(8) uint8_t loss[8];",
        *([f"static float momentum_buf[{max(1, layout.param_bytes // 4)}];"] if mom else []),
        f"extern {'' if layout.params_in_ram else 'const '}uint8_t pk_params_blob[];",
        "extern uint8_t pk_buffers_blob[];",
        "extern const uint8_t pk_consts_blob[];",
        "",
        "static uint8_t *const space[PK_NSPACES] = {pk_arena, (uint8_t *)pk_params_blob, "
        f"{grads_sym}, pk_buffers_blob, staging, {'(uint8_t *)pk_batch_blob' if layout.batch_in_flash else 'batch'}, "
        "(uint8_t *)pk_consts_blob, loss};",
        "static const uint32_t space_bytes[PK_NSPACES] = {"
        + ", ".join(
            f"{x}u"
            for x in (
                layout.arena_bytes,
                layout.param_bytes,
                layout.param_bytes,
                layout.buffer_bytes,
                layout.buffer_bytes,
                layout.batch_bytes,
                layout.const_bytes,
                8,
            )
        )
        + "};",
        "",
        "const pkr_model pkr_the_model = {",
        f"    .name = {c_string(kp.name)},",
        f"    .nsteps = {len(t.steps)}u, .ncalls = {len(t.calls)}u, .nargs = {len(t.args)}u,",
        "    .steps = steps, .calls = calls, .args = args, .dims = dims, .scalars = scalars, .copies = copies,",
        "    .kernels = kernels, .kernel_names = kernel_names,",
        f"    .node_names = {'node_names' if names else 'NULL'},",
        "    .space = space, .space_bytes = space_bytes,",
        f"    .batch_bytes = {layout.batch_bytes}u, .pages_bytes = {t.pages_bytes}u,",
        f"    .nupdates = {len(upd)}u, .updates = updates,",
        f"    .nbuffer_updates = {len(bupd)}u, .buffer_updates = buffer_updates,",
        f"    .rng_seed = {int(layout.rng_seed) & 0xFFFFFFFFFFFFFFFF}ull,",
        f"    .lr = {float(layout.lr)!r}f, .momentum = {float(mom)!r}f,",
        f"    .momentum_buf = {'momentum_buf' if mom else 'NULL'},",
        f"    .params_writable = {int(layout.params_in_ram)}, .poison_freed = {int(poison)},",
        f"    .zero_grads = {int(kp.zero_grads)}, .batch_const = {int(layout.batch_in_flash)},",
        f"    .loss_bytes = {8 if layout.loss_dtype == 'float64' else 4},",
        f"    .grad_bytes = {layout.param_bytes}u, .param_bytes = {layout.param_bytes}u,",
        f"    .buffer_bytes = {layout.buffer_bytes}u,",
        f"    .ws_nblocks = {len(wsb)}u, .ws_blocks = ws_blocks, .ws_staging = {'ws_staging' if ws else 'NULL'},",
        f"    .ws_staging_bytes = {ws.staging_bytes if ws else 0}u,",
        "};",
    ]
    return "\n".join(out) + "\n"
