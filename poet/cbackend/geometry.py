"""Where every value of a traced training step lives: its storage and its view geometry.

The lowering needs, for each FX value a kernel reads or writes, which storage holds it (a
parameter, a buffer, a batch tensor, a constant, or the output of one aten unit) and how the value
is laid out in it (byte offset, sizes, strides).  Aliases (view, t, permute, expand, slice,
select, split + getitem ...) have no storage of their own: they are static strided views of their
base, so running the traced step once on the example batch and reading every value's storage and
strides gives all of it.  Every value is kept alive during that run, so no storage is reused and
storage identity means one tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from ..graph.torch_run import placeholder_values
from .ir import LoweringError

__all__ = ["Geometry", "StepGeometry", "TORCH_DTYPES", "capture_geometry", "dtype_name"]

TORCH_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
    torch.uint8: "uint8",
}


def dtype_name(dt, what: str) -> str:
    name = TORCH_DTYPES.get(dt)
    if name is None:
        raise LoweringError(
            f"{what} has dtype {dt}, which the C kernels do not take (supported: {', '.join(TORCH_DTYPES.values())})"
        )
    return name


@dataclass(frozen=True)
class Geometry:
    """One tensor value: storage ``storage`` (a key of :attr:`StepGeometry.owners`), viewed from
    ``offset`` bytes in with ``sizes`` and ``strides`` (elements)."""

    storage: int
    offset: int
    dtype: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass
class StepGeometry:
    """Every value's geometry (``values``: FX name -> Geometry, or a tuple of them / None for a
    tuple-valued op), who owns each storage (``owners``: key -> ('param'|'buffer'|'batch'|'const', i)
    or ('unit', u)), each storage's bytes, and the data of the constants found (``const_values``)."""

    values: dict[str, object]
    owners: dict[int, tuple[str, int]]
    storage_bytes: dict[int, int]
    const_values: list  # tensors, in 'const' index order: the loss tangent first, then get_attr constants
    const_names: list[str]


def _geometry(t: torch.Tensor, what: str) -> Geometry:
    st = t.untyped_storage()
    return Geometry(
        storage=st._cdata,
        offset=int(t.storage_offset()) * t.element_size(),
        dtype=dtype_name(t.dtype, what),
        sizes=tuple(int(s) for s in t.shape),
        strides=tuple(int(s) for s in t.stride()),
    )


def _own_storage(t):
    """A contiguous copy with a storage of its own (params and batch are placed contiguously in C)."""
    return t.detach().clone(memory_format=torch.contiguous_format) if isinstance(t, torch.Tensor) else t


def _as_meta(v):
    if isinstance(v, torch.Tensor):
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="meta")
    if isinstance(v, (tuple, list)):
        return type(v)(_as_meta(x) for x in v)
    return v


def capture_geometry(program, param_index: dict[str, int], buffer_index: dict[str, int]) -> StepGeometry:
    """Run ``program``'s joint graph once on its example batch and record every value's geometry.

    ``param_index``/``buffer_index`` number the parameters and buffers as the kernel program does.
    The generator's state is restored afterwards (dropout draws here only to run the step).  Nodes
    without ``meta['val']`` (made by a tiling rewrite) get one from this run.
    """
    p = program
    owners: dict[int, tuple[str, int]] = {}
    nbytes: dict[int, int] = {}
    values: dict[str, object] = {}
    const_values: list = []
    const_names: list[str] = []
    keep: list = []  # every value stays alive: no storage is reused while recording

    def own(t, owner, what):
        st = t.untyped_storage()
        key = st._cdata
        if key in owners:
            return key
        owners[key] = owner
        nbytes[key] = int(st.nbytes())
        return key

    phs = [_own_storage(v) for v in placeholder_values(p.placeholders, p.params, p.buffers, p.example_batch)]
    ph_vals = {}
    for (role, name, n), val in zip(p.placeholders, phs):
        if not isinstance(val, torch.Tensor):
            raise LoweringError(
                f"the step's input {n.name} ({role} {name!r}) is not a tensor; the C step reads tensors"
            )
        if role == "param":
            owner = ("param", param_index[name])
        elif role == "buffer":
            owner = ("buffer", buffer_index[name])
        elif role == "input":
            owner = ("batch", int(name))
        else:  # the loss tangent d loss / d loss = 1: a constant
            owner = ("const", len(const_values))
            const_values.append(val)
            const_names.append("tangent")
        own(val, owner, n.name)
        ph_vals[n.name] = val
        keep.append(val)

    unit_of = {name: info[1] for name, info in p.fx_info.items() if info[0] == "unit"}

    def record(n, out):
        if isinstance(out, torch.Tensor):
            values[n.name] = _geometry(out, f"value {n.name}")
        elif isinstance(out, (tuple, list)):
            values[n.name] = tuple(
                _geometry(x, f"value {n.name}[{i}]") if isinstance(x, torch.Tensor) else None for i, x in enumerate(out)
            )
        else:
            values[n.name] = None

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            keep.append(out)
            if n.op != "output" and "val" not in n.meta:
                # a node a tiling rewrite made: its shape, strides and dtype in this run, as a meta
                # tensor, so op specs read them as they read a trace's
                n.meta["val"] = _as_meta(out)
            if n.op == "placeholder":
                values[n.name] = _geometry(out, f"input {n.name}")
            elif n.op == "get_attr" and isinstance(out, torch.Tensor):
                key = out.untyped_storage()._cdata
                if key not in owners:
                    c = _own_storage(out)
                    keep.append(c)
                    own(c, ("const", len(const_values)), n.name)
                    const_values.append(c)
                    const_names.append(n.name)
                    out = c
                values[n.name] = _geometry(out, f"constant {n.name}")
            elif n.op == "call_function":
                u = unit_of.get(n.name)
                if u is not None:
                    for x in out if isinstance(out, (tuple, list)) else (out,):
                        if not isinstance(x, torch.Tensor):
                            continue
                        key = x.untyped_storage()._cdata
                        if key in owners and owners[key] != ("unit", u):
                            raise LoweringError(
                                f"op {n.name} ({n.target}) returns a view of a value it reads; the C backend "
                                f"needs every op's outputs in storage of their own"
                            )
                        own(x, ("unit", u), n.name)
                record(n, out)
            return out

    rng = torch.get_rng_state()
    try:
        with torch.enable_grad():  # as traced (see the executor)
            Recorder(p.gm, garbage_collect_values=False).run(*phs)
    except LoweringError:
        raise
    except Exception as e:
        raise LoweringError(f"running the traced step to place its tensors failed: {type(e).__name__}: {e}") from e
    finally:
        torch.set_rng_state(rng)
    return StepGeometry(values, owners, nbytes, const_values, const_names)
