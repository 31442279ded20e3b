"""Where the parameters and their gradients live during a training step, and what moving them costs.

A step reads every weight and writes every weight gradient.  Three placements (``--weights``):

* ``flash`` (the paper's setting, the default): the parameters stay in the device's flash and are
  read there as if they were free; their gradients live outside the RAM budget.  Nothing is counted.
* ``ram``: the parameters are held in RAM for the whole step, inside the budget (as
  ``--fixed-ram params``: fixed RAM of the parameters' bytes).
* ``stream``: the parameters and their gradients live in storage (the SD card).  Every computation of
  a node that reads a weight reads the bytes it uses into a staging buffer (a recomputation reads them
  again); a node that makes a weight gradient writes it, or reads, adds to and writes back its share;
  the SGD update reads every weight and gradient and writes every weight.  The staging buffer is RAM
  the budget holds (fixed RAM), and each computation's cost includes its traffic.

:class:`WeightStore` is the graph's record of the placement (``CostedGraph.weights``, the
``"weights"`` object of a ``poet-graph/1`` file): with the storage's prices, so the validator can
price the traffic again from each node's bytes and transfers (:class:`Traffic`,
``CostedNode.weight_traffic``) and refuse a node whose cost leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import byte_count, finite_number
from .errors import GraphError

FLASH = "flash"
RAM = "ram"
STREAM = "stream"
PLACEMENTS = (FLASH, RAM, STREAM)

WEIGHTS_HELP = (
    "where the parameters and their gradients live: flash (default, the paper's setting: not counted), "
    "ram (held in the RAM budget, as --fixed-ram params), stream (in storage: every tile reads the weight "
    "bytes it uses, weight-gradient tiles read-modify-write their share, the SGD update streams through "
    "both; a staging buffer is counted in the budget)"
)


def add_weights_option(group) -> None:
    """The shared ``--weights`` and ``--staging`` options (solve, plan, train, sweep)."""
    group.add_argument("--weights", choices=PLACEMENTS, default=FLASH, help=WEIGHTS_HELP)
    group.add_argument(
        "--staging",
        default=None,
        metavar="BYTES",
        help="with --weights stream: RAM for the staging buffer that weight chunks pass through "
        "(default: 1/32 of the budget, at least 256 B; docs/weights.md)",
    )


@dataclass(frozen=True)
class Traffic:
    """What one computation of a node moves between RAM and the weight store (weights and gradients)."""

    read_bytes: int = 0
    write_bytes: int = 0
    reads: int = 0  # transfers (each pays the storage's latency once)
    writes: int = 0

    def __add__(self, o: Traffic) -> Traffic:
        return Traffic(
            self.read_bytes + o.read_bytes,
            self.write_bytes + o.write_bytes,
            self.reads + o.reads,
            self.writes + o.writes,
        )

    @property
    def empty(self) -> bool:
        return not (self.read_bytes or self.write_bytes or self.reads or self.writes)

    def to_list(self) -> list[int]:
        return [self.read_bytes, self.write_bytes, self.reads, self.writes]

    @classmethod
    def from_value(cls, raw, what: str) -> Traffic:
        """From ``[read_bytes, write_bytes, reads, writes]`` (a file's ``weight_traffic``)."""
        if not isinstance(raw, (list, tuple)) or len(raw) != 4:
            raise GraphError(f"{what} must be [read_bytes, write_bytes, reads, writes], got {str(raw)[:60]}")
        vals = [byte_count(x, f"{what}[{k}]", error=GraphError) for k, x in enumerate(raw)]
        t = cls(*vals)
        t.check(what)
        return t

    def check(self, what: str) -> None:
        for name in ("read_bytes", "write_bytes", "reads", "writes"):
            byte_count(getattr(self, name), f"{what}: {name}", error=GraphError)
        if (self.read_bytes > 0) != (self.reads > 0) or (self.write_bytes > 0) != (self.writes > 0):
            raise GraphError(f"{what}: bytes moved need at least one transfer, and a transfer moves bytes ({self})")


NO_TRAFFIC = Traffic()

_PRICES = ("read_latency_s", "read_bytes_per_s", "write_latency_s", "write_bytes_per_s", "power_w")


@dataclass(frozen=True)
class WeightStore:
    """A graph's weight placement, and under ``stream`` the storage prices its traffic is priced at.

    ``param_bytes``: the parameters (float32); ``staging_bytes``: the staging buffer (``stream``; part
    of the graph's fixed RAM).  A transfer of ``b`` bytes takes ``latency + b / bytes_per_s`` seconds and
    ``power_w`` times that in joules, as a page of activations does (docs/devices.md)."""

    placement: str
    param_bytes: int
    staging_bytes: int = 0
    # (layer name, parameter bytes) of every layer that has parameters: what the traffic is derived from
    layers: tuple[tuple[str, int], ...] = ()
    # the layers whose every record (output channel) spans all their input channels (convolution, linear):
    # a channel tile of their grad-input covers input channels, a strided share, so it reads the block
    dense: tuple[str, ...] = ()
    read_latency_s: float = 0.0
    read_bytes_per_s: float = 1.0
    write_latency_s: float = 0.0
    write_bytes_per_s: float = 1.0
    power_w: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "layers", tuple((str(k), v) for k, v in self.layers))
        object.__setattr__(self, "dense", tuple(str(k) for k in self.dense))
        odd = sorted(set(self.dense) - {k for k, _ in self.layers})
        if odd:
            raise GraphError(f"weights: dense layer(s) {', '.join(odd[:3])} are not among the layers with parameters")
        for k, v in self.layers:
            byte_count(v, f"weights: layers[{k!r}]", error=GraphError)
        if self.placement not in PLACEMENTS:
            raise GraphError(f"weights: placement {self.placement!r} is not one of {', '.join(PLACEMENTS)}")
        byte_count(self.param_bytes, "weights: param_bytes", error=GraphError)
        byte_count(self.staging_bytes, "weights: staging_bytes", error=GraphError)
        for f in _PRICES:
            finite_number(getattr(self, f), f"weights: {f}", error=GraphError, positive=f.endswith("per_s"))
        if self.placement == STREAM and (self.staging_bytes < 8 or self.staging_bytes % 4):
            raise GraphError(
                f"weights: a stream placement needs a staging buffer of at least 8 B, a multiple of 4 B "
                f"(whole float32 values), got {self.staging_bytes} B"
            )
        if self.placement == STREAM and sum(v for _, v in self.layers) != self.param_bytes:
            raise GraphError(
                f"weights: the layers' parameter bytes add up to {sum(v for _, v in self.layers)} B, "
                f"not param_bytes {self.param_bytes} B"
            )

    @property
    def streamed(self) -> bool:
        return self.placement == STREAM

    def seconds(self, t: Traffic) -> float:
        """Storage time of ``t`` (0 unless streamed: the other placements do not count it)."""
        if not self.streamed or t.empty:
            return 0.0
        return (
            t.reads * self.read_latency_s
            + t.read_bytes / self.read_bytes_per_s
            + t.writes * self.write_latency_s
            + t.write_bytes / self.write_bytes_per_s
        )

    def joules(self, t: Traffic) -> float:
        return self.seconds(t) * self.power_w

    def to_dict(self) -> dict:
        d = {"placement": self.placement, "param_bytes": self.param_bytes}
        if self.streamed:
            d["staging_bytes"] = self.staging_bytes
            d.update({f: getattr(self, f) for f in _PRICES})
            d["layers"] = dict(self.layers)
            d["dense"] = list(self.dense)
        return d

    @classmethod
    def from_dict(cls, raw) -> WeightStore:
        if not isinstance(raw, dict):
            raise GraphError('"weights" must be an object like {"placement": "stream", "param_bytes": ...}')
        unknown = sorted(set(raw) - {"placement", "param_bytes", "staging_bytes", "layers", "dense", *_PRICES})
        if unknown:
            raise GraphError(f'"weights" has unknown field(s) {", ".join(unknown)}')
        missing = [k for k in ("placement", "param_bytes") if k not in raw]
        if raw.get("placement") == STREAM:
            missing += [k for k in ("staging_bytes", "layers", *_PRICES) if k not in raw]
        if missing:
            raise GraphError(f'"weights" lacks {", ".join(missing)}')
        layers = raw.get("layers", {})
        if not isinstance(layers, dict):
            raise GraphError('"weights": "layers" must be an object {layer name: parameter bytes}')
        dense = raw.get("dense", [])  # absent in files written before it: no layer is dense
        if not isinstance(dense, list) or not all(isinstance(k, str) for k in dense):
            raise GraphError('"weights": "dense" must be a list of layer names (convolution and linear layers)')
        return cls(**{**raw, "layers": tuple(layers.items()), "dense": tuple(dense)})
