"""A run's resources: its backend pools, made from specs once at the start, and their changes while it runs.

Backends join a pool (waiting jobs may go to them at once; the window grows with the jobs the pools keep in
flight) and leave it (their jobs in flight run again on the others); prefetch and rows per job are tuned, and
classical worker slots added or removed (local executor), for the work dispatched from then on. ``RunHandle``,
a run in a thread of its own (``hqflow.start``), asks for these changes. None changes what the run computes.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from hqflow.backends import backend_names, is_registered, threads
from hqflow.ir.graph import CircuitCall, Graph, GraphError

from ..jobs.dispatch import Member, Pool
from .events import Wake
from .result import RunResult
from ..common.lanes import Lane
from .scheduler_config import SchedulerConfig


class Elastic:
    """One scheduler's pools and worker slots. Changes apply once :meth:`attach` gave the run's job service."""

    def __init__(self, graph: Graph, backends: dict, executor, config: SchedulerConfig, now: Callable[[], float]):
        """One pool per backend name that ``graph`` uses (by ``execute`` fragments and in classical fragments'
        ``job_backends``), its members made by ``executor`` from ``backends[name]`` (a spec or a list of
        them; a name not there is a registered backend's); ``now``: the clock the pools time jobs by."""
        self.executor, self.config, self.learners, self.prefetch = executor, config, config.learners, config.prefetch
        self.slots = {"cpu": config.cpu_workers, "gpu": config.gpu_workers}  # worker slots now, read by the loop
        # the resources whose slots a learn step's replicas take, each of them at once
        self.learning = {"gpu" if f.resource == "gpu" else "cpu" for f in graph.fragments if f.kind == "learn"}
        for resource in sorted(self.learning):
            if self.slots[resource] < self.learners:
                raise ValueError(f"learners={self.learners} run side by side on {resource} slots, but "
                                 f"{resource}_workers={self.slots[resource]}; give at least {self.learners}")
        self.service = self.window = self.events = None  # the run's, from ``attach``
        self._lock = threading.Lock()  # backends joining from other threads take their index in turn
        used = (n for f in graph.fragments for n in ((f.backend,) if isinstance(f, CircuitCall) else f.job_backends))
        self.pools: dict[str, Pool] = {}
        for name in dict.fromkeys(n for n in used if isinstance(n, str) and n):  # each once, in graph order
            specs = backends.get(name, name)
            specs = specs if isinstance(specs, list) else [specs]
            if not specs:
                raise GraphError(f"backend pool {name!r} is empty")
            if name not in backends and not is_registered(name):
                raise GraphError(f"backend {name!r} is neither a registered backend ({', '.join(backend_names())}) nor "
                                 f"a pool given to the run: hq.run(..., backends={{{name!r}: [backend, ...]}})")
            many = len(specs) > 1
            self.pools[name] = Pool(name, [self._member(s, j if many else None) for j, s in enumerate(specs)], now=now)

    def _member(self, spec, index: int | None) -> Member:
        """Backend ``spec``, made by the executor, as member ``index`` of its pool (None: the only one)."""
        backend, node = self.executor.backend(spec, self.config.max_in_flight)
        devices = backend.max_in_flight or self.config.max_in_flight
        return Member(backend, Lane("qpu", backend.name, index), devices, devices + self.prefetch, node=node)

    def attach(self, service, window, events) -> None:
        """The run's job service, its window (``hqflow.engine.window``) and its event queue: changes go to them."""
        self.service, self.window, self.events = service, window, events

    def add_backend(self, pool: str, spec) -> int:
        """A backend (an instance, a name, or ``(name, options)``) made by the run's executor joins pool
        ``pool``; returns its index. The window grows with the jobs the pools can keep in flight."""
        self._check_pool(pool)
        with self._lock:
            index = self.service.add_backend(pool, self._member(spec, len(self.pools[pool].members)))
            self.window.grow()
        return index

    def remove_backend(self, pool: str, which: int | str) -> int:
        """Take member ``which`` (its index, or the first such name still in the pool) out of pool
        ``pool``; returns how many of its jobs in flight were taken back to run elsewhere."""
        self._check_pool(pool)
        if isinstance(which, str):
            found = [i for i, m in enumerate(self.pools[pool].members)
                     if not m.removed and which in (m.handle.name, str(m.lane))]
            if not found:
                raise ValueError(f"pool {pool!r} has no backend {which!r} in it")
            which = found[0]
        return self.service.remove_backend(pool, which)

    def _check_pool(self, pool: str) -> None:
        if pool not in self.pools:
            raise ValueError(f"no backend pool named {pool!r}; pools: {', '.join(sorted(self.pools))}")

    def tune(self, prefetch: int | None = None, rows_per_job: int | None | str = "keep") -> None:
        """Prefetch and rows per job for the jobs dispatched from now on (``"keep"``: as they are)."""
        if prefetch is not None:
            if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
                raise ValueError(f"prefetch must be an integer >= 0, got {prefetch!r}")
            self.prefetch = prefetch  # for the backends that join from now on too
        self.service.tune(prefetch, rows_per_job)

    def check_workers(self, resource: str, workers: int) -> None:
        """A ``ValueError`` if ``set_workers(resource, workers)`` cannot be done."""
        if resource not in ("cpu", "gpu"):
            raise ValueError(f"resource must be 'cpu' or 'gpu', got {resource!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        if resource in self.learning and workers < self.learners:
            raise ValueError(f"the run's learn steps need {self.learners} learner slots; keep {resource} workers "
                             ">= that")
        kind = self.config.executor
        if not kind.resizable:
            raise ValueError(f"worker slots change mid-run under the local executor only, not {str(kind)!r}")

    def set_workers(self, resource: str, workers: int) -> None:
        """``workers`` classical slots of ``resource`` from now on (local executor; see ``check_workers``)."""
        self.check_workers(resource, workers)
        self.executor.pools[resource].resize(workers)
        self.slots[resource] = workers
        self.events.put(Wake())  # the dispatch loop may use the new slots at once


class RunHandle:
    """A run in a thread of its own whose backend pools change while it runs (``hqflow.start``).

        run = hq.start(graph, stream, backends={"qpu": [qpu_a, qpu_b]})
        run.remove_backend("qpu", 1)                 # its jobs in flight go to the others
        run.add_backend("qpu", ("emulated-qpu", {}))  # waiting jobs may go to it at once
        result = run.result()

    With exact backends at staleness 0 it ends with the result of an undisturbed run.
    """

    def __init__(self, scheduler, stream, initial_state=None, progress=None, on_change=None):
        """``scheduler``: a ``hqflow.engine.scheduler.Scheduler`` not yet run."""
        self.scheduler, self.elastic = scheduler, scheduler.elastic
        self._result, self._error, self._done = None, None, threading.Event()
        self._on_change = on_change
        self.plans: list = []
        """the plans in force, the first first (``hqflow.planning.planner.start`` re-plans on every change)"""
        self._thread = threads.start(self._main, "hqflow-run", (stream, initial_state, progress))

    def _main(self, stream, initial_state, progress) -> None:
        try:
            self._result = self.scheduler.run(stream, initial_state=initial_state, progress=progress)
        except BaseException as exc:  # noqa: BLE001 - result() raises it in the caller's thread
            self._error = exc
        finally:
            self.scheduler.started.set()
            self._done.set()

    def _running(self) -> None:
        """Wait for the run's start; a ``RuntimeError`` once it has ended."""
        self.scheduler.started.wait()
        if self._done.is_set():
            raise RuntimeError("the run has ended; its pools no longer change")

    def add_backend(self, pool: str, spec) -> int:
        """Add a backend (an instance, a name, or ``(name, options)``) to pool ``pool``; returns its index."""
        return self._change(self.elastic.add_backend, pool, spec)

    def remove_backend(self, pool: str, which: int | str) -> int:
        """Take a backend out of pool ``pool``: its index, or its name (the first such still in the pool).
        Its jobs in flight are cancelled and run again elsewhere (the last one may go too: jobs wait for one
        to be added). Returns how many were taken back."""
        return self._change(self.elastic.remove_backend, pool, which)

    def _change(self, change, *args) -> int:
        self._running()
        result = change(*args)
        if self._on_change is not None and not self._done.is_set():
            self._on_change(self)
        return result

    def set_workers(self, resource: str, workers: int) -> None:
        """Add or remove classical worker slots of ``resource`` (``"cpu"`` or ``"gpu"``) mid-run, under the
        ``local`` executor: a removed slot's call runs to its end first. Results do not depend on it."""
        self.elastic.check_workers(resource, workers)
        self._running()
        self.elastic.set_workers(resource, workers)

    def tune(self, prefetch: int | None = None, rows_per_job: int | None | str = "keep") -> None:
        """Change, mid-run, the jobs each backend keeps ahead (``prefetch``) and the rows per job (None:
        uncut); they hold for jobs dispatched from now on. Neither changes what the run computes."""
        self._running()
        self.elastic.tune(prefetch, rows_per_job)

    def members(self) -> dict[str, list[Lane]]:
        """Each pool's members now (their lanes), in the pool's order."""
        return {name: [m.lane for m in pool.members if not m.removed] for name, pool in self.elastic.pools.items()}

    def steps_done(self) -> int:
        return self.scheduler.stats.completed

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> RunResult:
        """The run's result, when it ends (its error, raised here, if it failed)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the run has not ended within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result
