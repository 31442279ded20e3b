"""The Ray backend: every point of a sweep or study is one Ray task, on a local Ray or a cluster.

``--cluster ray`` starts a Ray on this machine for the run (it listens on 127.0.0.1 only and stops
with the run); ``--cluster ADDRESS`` (``ray://HOST:PORT``, ``HOST:PORT`` or ``auto``) joins a
running cluster (docs/sweeps.md, "Studies on a Ray cluster").  Each task asks for ``threads``
CPUs, which is also what its solve may use.  Tasks get the costed graph from the object store, so
the cluster's machines need poet-edge installed but not the model's files.  The rows and schedules
come back to the driver, which validates and writes them (:mod:`.runner`).

A task whose worker dies (killed, out of memory, a machine lost) is run again by Ray up to
:data:`MAX_RETRIES` times, and then sent again by the driver up to :data:`RESENDS` times before the
point is recorded as an error.  Ctrl-C cancels the tasks in flight.  ``ray`` is an optional
dependency (``pip install -e '.[cluster]'``) and is imported here only.
"""

from __future__ import annotations

import os
import socket
import time

from .grid import SweepError
from .points import solve_point

LOCAL = "ray"
MAX_RETRIES = 2  # Ray re-runs a task whose worker died this many times ...
RESENDS = 1  # ... and the driver sends it again this many times after that
INSTALL_HINT = "pip install -e '.[cluster]' (or pip install 'ray>=2.40')"


def import_ray(local: bool):
    """Import ray, with a clear message if it is missing.  For a Ray started here, every one of its
    servers listens on 127.0.0.1 only (the flag is read when ray is first imported)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if local:
        # despite its name, this makes Ray take 127.0.0.1 as this machine's address on Linux too
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise SweepError(f"--cluster needs the ray package, which is not installed: {INSTALL_HINT}") from None
    return ray


def parse_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a cluster address (``HOST:PORT`` or ``ray://HOST:PORT``); None for ``auto``."""
    if address == "auto":
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SweepError(
            f"--cluster {address!r} is not an address; give local (the default), ray (a Ray started "
            f"here), auto (a Ray already running here), HOST:PORT (a cluster's head, e.g. "
            f"HEAD:6379) or ray://HOST:PORT (its client server, e.g. ray://HEAD:10001)"
        )
    return host, int(port)


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def run_task(task, spec_d: dict, strategy: str, memory: str, runtime: str, graph, threads: int):
    """What a Ray worker runs for one point: ``task`` (normally :func:`solve_point`) on ``threads`` cores."""
    from ..solve.search.pool import limit_workers

    limit_workers(threads)
    if spec_d.get("threads") is None:
        spec_d = {**spec_d, "threads": threads}
    return task(spec_d, strategy, memory, runtime, graph)


class RayBackend:
    """Points as Ray tasks.  ``address``: ``"ray"`` for a Ray started here with ``jobs`` x ``threads``
    CPUs (default: this machine's cores), else the address of a running cluster.  ``task``: the
    function a worker runs for a point (tests wrap :func:`solve_point` to kill a worker)."""

    def __init__(
        self,
        address: str = LOCAL,
        *,
        jobs: int | None = None,
        threads: int | None = None,
        task=None,
        max_retries: int = MAX_RETRIES,
        resends: int = RESENDS,
    ):
        self.address = address
        self.local = address == LOCAL
        self.where = None if self.local else parse_address(address)
        self.threads = max(1, threads or 1)
        self.num_cpus = max(self.threads, (jobs * self.threads) if jobs else (os.cpu_count() or 1))
        self.task = task or solve_point
        self.max_retries, self.resends = max_retries, resends
        self.ray = None
        self.started = False  # did we start (and so must stop) Ray?
        self.refs: dict = {}  # ObjectRef -> (tag, args, sends)
        self.graphs: dict = {}  # id(graph) -> (graph, ObjectRef)
        self._slots = 1
        self._slots_at = 0.0

    def describe(self) -> str:
        if self.local:
            return f"a local Ray on 127.0.0.1 ({self.num_cpus} CPUs, {self.threads} per point)"
        return f"the Ray cluster at {self.address} ({self.threads} CPU{'s' if self.threads > 1 else ''} per point)"

    def check(self) -> None:
        """Ray is installed and, for a cluster's address, something answers there (Ray itself would
        keep trying for minutes)."""
        if self.where is not None:
            host, port = self.where
            try:
                socket.create_connection((host, port), timeout=5).close()
            except OSError as e:
                raise SweepError(
                    f"nothing answers at {host}:{port} ({e.strerror or e}); start the cluster's head "
                    f"there (ray start --head --port={port}) or check --cluster"
                ) from None
        # a cluster on this machine's loopback keeps to it too
        self.ray = import_ray(self.local or (self.where is not None and is_loopback(self.where[0])))

    def start(self) -> str | None:
        if self.ray is None:
            self.check()
        ray = self.ray
        if not ray.is_initialized():
            kw = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
            try:
                if self.local:
                    ray.init(address="local", num_cpus=self.num_cpus, object_store_memory=200 * 2**20, **kw)
                else:
                    ray.init(address=self.address, **kw)
            except (ConnectionError, ValueError, RuntimeError) as e:
                hint = (
                    ""
                    if self.local
                    else " A cluster started by `ray start` (Ray 2.5x and later) wants its "
                    "token: set RAY_AUTH_MODE=token here, with the head's ~/.ray/auth_token copied to this "
                    "machine (or RAY_AUTH_TOKEN set to it). A ray:// address needs pip install 'ray[client]'."
                )
                raise SweepError(f"cannot start or reach Ray at {self.address!r}: {e}.{hint}") from None
            self.started = True
            if self.local and any(
                n.get("NodeManagerAddress") not in ("127.0.0.1", "::1", "localhost") for n in ray.nodes()
            ):
                self.close()
                raise SweepError(
                    "the local Ray did not keep to 127.0.0.1 (ray was imported before poet could "
                    "set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0); set it in the environment, or start "
                    "Ray yourself and pass its address to --cluster"
                )
        cpus = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
        if cpus and self.threads > max(cpus):
            raise SweepError(
                f"--threads {self.threads} is more CPUs than any machine of the Ray cluster has "
                f"(at most {max(cpus):g}); use --threads {int(max(cpus))} or less"
            )
        self.remote = ray.remote(run_task).options(
            num_cpus=self.threads, max_retries=self.max_retries, retry_exceptions=False
        )
        n = self.slots()
        return (
            f"Ray: {len(cpus)} machine{'s' if len(cpus) != 1 else ''}, {sum(cpus):g} CPUs: "
            f"up to {n} point{'s' if n != 1 else ''} at once"
        )

    def slots(self) -> int:
        """Points in flight: the cluster's CPUs over the CPUs of a point (re-read now and then, as
        machines join or leave)."""
        now = time.monotonic()
        if self.ray is not None and self.ray.is_initialized() and now - self._slots_at > 10:
            cpus = self.ray.cluster_resources().get("CPU", 0)
            self._slots = max(1, int(cpus // self.threads))
            self._slots_at = now
        return self._slots

    def in_flight(self) -> int:
        return len(self.refs)

    def graph_arg(self, g):
        """The costed graph in Ray's object store (put there once per sweep)."""
        k = id(g)
        if k not in self.graphs:
            self.graphs[k] = (g, self.ray.put(g))
        return self.graphs[k][1]

    def submit(self, tag, spec_d: dict, point, graph=None, sends: int = 0) -> None:
        args = (self.task, spec_d, *point, graph, self.threads)
        self.refs[self.remote.remote(*args)] = (tag, args, sends)

    def wait(self, timeout: float | None = None) -> list:
        """Finished points as ``(tag, row, schedule, error)``; empty if none finished in ``timeout``."""
        ray = self.ray
        if not self.refs:
            return []
        ready, _ = ray.wait(list(self.refs), num_returns=1, timeout=timeout)
        if ready:  # and every other one that is ready too
            ready, _ = ray.wait(list(self.refs), num_returns=len(self.refs), timeout=0)
        lost = tuple(
            getattr(ray.exceptions, n)
            for n in (
                "WorkerCrashedError",
                "NodeDiedError",
                "ObjectLostError",
                "OwnerDiedError",
                "LocalRayletDiedError",
                "RaySystemError",
                "ActorUnschedulableError",
                "TaskUnschedulableError",
            )
            if hasattr(ray.exceptions, n)
        )
        out = []
        for ref in ready:
            tag, args, sends = self.refs.pop(ref)
            try:
                row, sched = ray.get(ref)
            except lost as e:
                if sends < self.resends:
                    self.refs[self.remote.remote(*args)] = (tag, args, sends + 1)
                    continue
                why = (
                    f"its Ray worker was lost {(sends + 1) * (self.max_retries + 1)} times "
                    f"({type(e).__name__}); run again with --retry to solve it again"
                )
                out.append((tag, None, None, why))
            except ray.exceptions.RayError as e:
                out.append((tag, None, None, f"the Ray task failed: {type(e).__name__}: {str(e)[:200]}"))
            else:
                out.append((tag, row, sched, None))
        return out

    def cancel(self) -> None:
        """Ctrl-C: stop every task in flight (their workers are killed)."""
        for ref in list(self.refs):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001, S110 - Ray may already be going down with the same Ctrl-C
                pass
        self.refs.clear()

    def close(self) -> None:
        self.refs.clear()
        self.graphs.clear()
        if self.started:
            self.started = False
            self.ray.shutdown()
