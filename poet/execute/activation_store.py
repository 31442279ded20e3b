"""The executor's memory: the real values of the nodes in RAM, their live bytes, and the generator
states that let a recomputed seeded op (dropout) draw the same numbers again.

Live bytes count unique storages (two views of one tensor count once), excluding the storages of
fixed tensors (parameters, buffers, the batch, staged gradients): what the schedule's activations
hold, comparable with the validator's prediction.
"""

from __future__ import annotations

import torch
import torch.fx

__all__ = ["ActivationStore", "SeededReplay", "dummy_like", "flat_tensors", "unique_bytes"]


def flat_tensors(value) -> list:
    """The tensors in ``value`` (a tensor, or nested tuples and lists of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    out = []
    if isinstance(value, (tuple, list)):
        for x in value:
            out.extend(flat_tensors(x))
    return out


def unique_bytes(values, exclude=()) -> int:
    """Bytes of the distinct storages of the tensors in ``values``, skipping the keys in ``exclude``."""
    seen = set()
    total = 0
    for t in flat_tensors(list(values)):
        st = t.untyped_storage()
        k = st._cdata
        if k in seen or k in exclude:
            continue
        seen.add(k)
        total += st.nbytes()
    return total


def dummy_like(val):
    """Zeros shaped as a traced value (a tensor or nested tuples of them): inputs for a replayed draw."""
    if isinstance(val, torch.Tensor):
        return torch.zeros(tuple(val.shape), dtype=val.dtype)
    if isinstance(val, (tuple, list)):
        return type(val)(dummy_like(x) for x in val)
    return val


class ActivationStore:
    """Per poet node in RAM, its exported units' values; ``live_bytes`` counts their storages once."""

    def __init__(self, fixed_keys: set[int]):
        self.fixed_keys = fixed_keys  # storages never counted (fixed tensors)
        self.values: dict[int, dict[int, object]] = {}
        self._refs: dict[int, list] = {}  # storage key -> [references, nbytes, storage]
        self.live_bytes = 0

    def __contains__(self, node: int) -> bool:
        return node in self.values

    def add(self, node: int, vals: dict[int, object]) -> None:
        self.values[node] = vals
        self._account(list(vals.values()), +1)

    def pop(self, node: int) -> None:
        vals = self.values.pop(node)
        self._account(list(vals.values()), -1)

    def clear(self) -> None:
        self.values.clear()
        self._refs.clear()

    def _account(self, value, sign: int) -> None:
        for t in flat_tensors(value):
            st = t.untyped_storage()
            k = st._cdata
            if k in self.fixed_keys:
                continue
            if sign > 0:
                ent = self._refs.get(k)
                if ent is None:
                    self._refs[k] = [1, st.nbytes(), st]
                    self.live_bytes += st.nbytes()
                else:
                    ent[0] += 1
            else:
                ent = self._refs[k]
                ent[0] -= 1
                if ent[0] == 0:
                    self.live_bytes -= ent[1]
                    del self._refs[k]


class SeededReplay:
    """Generator states around each seeded unit, in eager order: a seeded op run for the first time
    records the state after it; run again (recomputed) it starts from the same state as the first
    time; run before an earlier seeded op, that op's draws are simulated on dummies first."""

    def __init__(self, program, seeded: list[int]):
        self.program = program
        self.seeded = seeded  # seeded units in eager order
        self.position = {u: i for i, u in enumerate(seeded)}
        self.initial = torch.get_rng_state()
        self.before: dict[int, torch.Tensor] = {}
        self.after: dict[int, torch.Tensor] = {}
        self.replays = 0  # seeded units run again with their first draw's state

    def state_before(self, u: int) -> torch.Tensor:
        """Generator state before seeded unit ``u`` in eager order (simulating skipped draws).
        Iterative: a chain of earlier seeded ops not yet run is drawn oldest first."""
        chain = [u]
        while chain[-1] not in self.before:
            i = self.position[chain[-1]]
            if i == 0:
                self.before[chain[-1]] = self.initial
                break
            prev = self.seeded[i - 1]
            if prev in self.after:
                self.before[chain[-1]] = self.after[prev]
                break
            chain.append(prev)  # an earlier seeded op not yet run: its state first
        for w in reversed(chain[:-1]):  # each now has its predecessor's state: draw it on dummies
            prev = self.seeded[self.position[w] - 1]
            if prev not in self.after:
                self._draw_on_dummies(prev)
            self.before[w] = self.after[prev]
        return self.before[u]

    def _draw_on_dummies(self, unit: int) -> None:
        n = self.program.unit_node[unit]
        args = torch.fx.node.map_arg(n.args, lambda x: dummy_like(x.meta.get("val")))
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda x: dummy_like(x.meta.get("val")))
        torch.set_rng_state(self.before[unit])
        n.target(*args, **kwargs)
        self.after[unit] = torch.get_rng_state()

    def run(self, u: int, target, args, kwargs):
        """``target(*args, **kwargs)``, seeded unit ``u``'s op, from its eager-order generator state."""
        torch.set_rng_state(self.state_before(u))
        if u in self.after:
            self.replays += 1
        out = target(*args, **kwargs)
        if u not in self.after:
            self.after[u] = torch.get_rng_state()
        return out

    def restore_initial(self) -> None:
        torch.set_rng_state(self.initial)

    def continue_as_eager(self) -> None:
        """The generator continues from where eager mode would be after the step."""
        if self.seeded:
            torch.set_rng_state(self.after[self.seeded[-1]])
