"""The overlap scheduler: keep classical and quantum resources busy at once.

The input stream is cut into micro-batches (steps). Fragment instance ``(f, i)``
becomes ready when its inputs for step ``i`` exist; ready instances go to
resource pools: ``cpu``/``gpu`` worker slots through an executor, and quantum
backend pools with a few jobs in flight each. Quantum jobs are submitted
without blocking; a finished job makes its consumers ready at once, so while a
backend runs micro-batch ``i`` the CPU prepares ``i + 1`` and the learner
consumes ``i - 1``.

* **Loop-carried state.** The value a loop edge's source produces at step ``t``
  is version ``t + 1`` (``init`` is version 0). A consumer at step ``i`` with
  ``max_staleness=k`` takes the newest version in ``[i - k, i]``, so
  ``k = 0`` is exactly the semantics of one fragment at a time in graph order
  (bit-identical results for the same seed, whatever the executor) and
  ``k > 0`` lets producers run ahead. Spans
  record the version used.
* **Backpressure.** At most ``window`` steps are admitted and unfinished.
* **Several backends per name**, chosen by measured latency and health
  (``dispatch.Pool``); batches larger than a backend's ``max_circuits_per_job``
  are split and re-joined.
* **One path for every quantum job** (``jobs.JobService``): an ``execute``
  fragment's, and those a classical fragment submits itself through its
  client (``hqflow.get_client()``, for the backends it declares in
  ``job_backends``), get the same pools, retries, timeouts and spans.
* **Failures.** A failed or timed-out job is retried, on another backend where
  one fits, up to ``max_retries`` times; each attempt is a span. A step's
  result is taken once, from the first successful attempt of each part. When
  a fragment fails or a job runs out of retries, the run raises ``RunFailed``,
  whose ``result`` holds every completed step's outputs, the spans and the
  newest loop-carried values.

One loop serves the ``sync``, ``local`` and ``ray`` executors (``executors.py``), and the cost
model's simulated one (``costmodel.py``): it reads time and waits for events only through its clock
(``clock.py``), so the same rules run on the machine's clock and on a simulated one. The events
(a call done, a job done, a wake-up) are small types of their own (``events.py``), dispatched by type.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hqflow.backends import BackendError, backend_names, is_registered, threads
from hqflow.ir.graph import CircuitCall, Fragment, Graph, GraphError

from .checkpoint import CheckpointError, RunDir, item_digest
from .clock import REAL
from .collective import Compression, Replica
from .dispatch import Member, Pool
from .events import CallDone, Event, TaskDone, Wake
from .placement import Placement
from .executors import ExecutorKind, make_executor
from .fragments import (
    FragmentError,
    RunFailed,
    RunResult,
    as_port_value,
    step_seed,
)
from .jobs import JobClient, JobService, Parent
from .lanes import Lane
from .outcome import OK, Outcome
from .ports import PortRef, PortValues, port
from .trace import Span


@dataclass(frozen=True)
class SchedulerConfig:
    """How a graph is run. Changing it never changes the algorithm; with every
    loop edge at ``max_staleness=0`` it never changes the results either."""

    executor: ExecutorKind = ExecutorKind.LOCAL
    """``sync`` (one thing at a time), ``local`` (threads) or ``ray``: an ``ExecutorKind``, or its name"""
    cpu_workers: int = 1
    """classical worker slots for ``cpu`` fragments"""
    gpu_workers: int = 1
    """learner slots for ``gpu`` fragments"""
    max_in_flight: int = 1
    """device slots per backend, unless the backend says otherwise (``max_in_flight`` attribute)"""
    prefetch: int = 1
    """extra jobs submitted to each backend beyond its device slots, so its queue never runs dry
    and submission round-trips hide behind running jobs (0: submit only into free slots)"""
    rows_per_job: int | None = None
    """circuits per quantum job at most: a step's batch is cut into jobs of this many rows, run side by
    side over a pool's members and joined again in row order (None: only a backend's own limit cuts it).
    Exact values never change with the cut; with shots a part's seed is the batch's plus its first row,
    so a different cut draws different (equally distributed) samples"""
    window: int | None = None
    """micro-batches admitted and not yet finished, at most (backpressure); None: twice the jobs
    all backends keep in flight, plus 2, and at least 8"""
    max_retries: int = 3
    """retries of a failed or timed-out quantum job before the run fails"""
    job_timeout: float | None = None
    """seconds before an unfinished quantum job is cancelled and retried (None: wait)"""
    seed: int | None = 0
    """run seed; shot seeds derive from (seed, step, fragment)"""
    ray_num_cpus: int | None = None
    """CPUs for ``ray.init`` when the ray executor starts Ray itself"""
    placement: Placement = Placement()
    """where the ray executor puts its actors on a cluster's nodes (``hqflow.placement``)"""
    learners: int = 1
    """replicas of each ``learn`` fragment instance, each on a learner slot (``gpu_workers`` must be at
    least this many); they reduce with ``hqflow.collective`` and rank 0's outputs are the instance's"""
    compression: Compression = Compression()
    """how the learner replicas compress the gradient shares they reduce (``hqflow.collective.Compression``)"""
    ray_address: str | None = None
    """a running Ray cluster for the ray executor to connect to (``"host:port"``, ``"ray://host:port"``
    or ``"auto"``); None: the Ray this process is connected to, or a local one it starts"""
    budget: float | None = None
    """the most the run may spend on priced quantum jobs, in their backend's currency (``estimate_cost``);
    a job that would go past it is refused and the run stops with ``BudgetExceeded``, results kept"""
    run_id: str | None = None
    """the run's identity, from which cloud backends derive idempotent job ids (give the same one to a
    resumed run so that it finds the jobs that already ran); None: a fresh one, or the checkpoint's"""
    run_dir: str | None = None
    """a folder for the run's checkpoints (``hqflow.checkpoint``): loop-carried values and the
    stream position after each ``checkpoint_every`` finished steps, and every step's outputs"""
    checkpoint_every: int = 1
    """finished steps between checkpoints in ``run_dir``"""
    resume: bool = False
    """continue the run checkpointed in ``run_dir``: its first steps are skipped in the stream, its
    outputs and loop values restored (the same graph, stream and seed; any executor and backends)"""

    def __post_init__(self):
        object.__setattr__(self, "executor", ExecutorKind.of(self.executor))  # a name, from users and JSON
        for name in ("cpu_workers", "gpu_workers", "max_in_flight", "window", "learners", "rows_per_job"):
            if name in ("window", "rows_per_job") and getattr(self, name) is None:
                continue
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if isinstance(self.compression, dict):  # from a run directory's JSON
            object.__setattr__(self, "compression", Compression(**self.compression))
        if not isinstance(self.compression, Compression):
            raise ValueError(f"compression must be a hqflow.collective.Compression, got {self.compression!r}")
        if self.learners > self.gpu_workers:
            raise ValueError(f"learners={self.learners} needs as many learner slots, but gpu_workers={self.gpu_workers}")
        if self.learners > 1 and self.executor.one_at_a_time:
            raise ValueError("learners > 1 runs replicas at once: use the local or ray executor, not sync")
        if not isinstance(self.prefetch, int) or self.prefetch < 0:
            raise ValueError(f"prefetch must be an integer >= 0, got {self.prefetch!r}")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")
        if self.job_timeout is not None and self.job_timeout <= 0:
            raise ValueError(f"job_timeout must be positive or None, got {self.job_timeout!r}")
        if isinstance(self.placement, dict):  # from a run directory's JSON
            object.__setattr__(self, "placement", Placement(**self.placement))
        if not isinstance(self.placement, Placement):
            raise ValueError(f"placement must be a hqflow.placement.Placement, got {self.placement!r}")
        if self.ray_address is not None and (not isinstance(self.ray_address, str) or not self.ray_address):
            raise ValueError(f"ray_address must be a non-empty string or None, got {self.ray_address!r}")
        if self.ray_address is not None and self.ray_num_cpus is not None:
            raise ValueError("ray_num_cpus sizes a Ray that hqflow starts; a cluster at ray_address has its own CPUs")
        if isinstance(self.checkpoint_every, bool) or not isinstance(self.checkpoint_every, int) \
                or self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be an integer >= 1, got {self.checkpoint_every!r}")
        if self.resume and self.run_dir is None:
            raise ValueError("resume=True needs the run_dir of the run to continue")
        if self.budget is not None and (isinstance(self.budget, bool) or not isinstance(self.budget, (int, float))
                                        or self.budget < 0):
            raise ValueError(f"budget must be a number >= 0 or None, got {self.budget!r}")


_MISSING = object()


class Scheduler:
    """Runs a graph over a stream of micro-batches; see the module docstring."""

    def __init__(self, graph: Graph, backends: Mapping[str, Any] | None = None, config: SchedulerConfig = SchedulerConfig(),
                 *, executor=None, clock=REAL):
        """``executor`` and ``clock``: where the work runs and whose time it takes (default: the config's
        executor on the machine's clock; ``hqflow.costmodel`` gives a simulated executor and clock)."""
        self.config, self.clock = config, clock
        self.executor = executor if executor is not None else make_executor(
            config.executor, config.cpu_workers, config.gpu_workers, config.ray_num_cpus, config.ray_address,
            config.placement)
        try:
            self.pools = self._make_pools(graph, dict(backends or {}))
            caps = {name: pool.members[0].handle.capabilities for name, pool in self.pools.items()}
            self.graph = graph.validate(backends=caps)
        except BaseException:
            self.executor.close()
            raise
        self.kept = self._kept_ports() if self.executor.keeps_outputs else {}
        self.order = self.graph.topological_order()
        self.index = {f.name: i for i, f in enumerate(self.order)}
        self.incoming = {e.dst: i for i, e in enumerate(self.graph.edges)}
        # what the loop asks of each fragment at every dispatch, worked out once: its side (circuit calls are
        # dispatched first), its classical resource and replicas, and where each input port's value comes from
        self.sides = {quantum: [(f, "gpu" if f.resource == "gpu" else "cpu", self._replicas(f)) for f in self.order
                                if isinstance(f, CircuitCall) == quantum] for quantum in (True, False)}
        self.wiring = {f.name: [self._wire(f, p.name) for p in f.inputs] for f in self.order}
        self.slots = {"cpu": config.cpu_workers, "gpu": config.gpu_workers}
        self.started = threading.Event()
        self._changing = threading.Lock()  # backends joining from other threads take their index in turn

    def _kept_ports(self) -> dict[str, tuple[str, ...]]:
        """Per classical fragment, the output ports that only other classical fragments read, in the same
        step: they may stay where they were made (Ray's object store), since the driver never reads them."""
        g, kept = self.graph, {}
        for f in g.fragments:
            if isinstance(f, CircuitCall):
                continue
            ports = []
            for p in f.outputs:
                edges = [e for e in g.edges if e.src == (f.name, p.name)]
                if edges and all(not e.loop and e.dst[0] is not None
                                 and not isinstance(g.fragment(e.dst[0]), CircuitCall) for e in edges):
                    ports.append(p.name)
            kept[f.name] = tuple(ports)
        return kept

    def _make_pools(self, graph: Graph, backends: dict) -> dict[str, Pool]:
        """One pool per backend name used: by ``execute`` fragments and in classical fragments' ``job_backends``."""
        names = []
        for f in graph.fragments:
            used = ((f.backend,) if f.backend else ()) if isinstance(f, CircuitCall) else tuple(f.job_backends)
            names += [n for n in used if isinstance(n, str) and n and n not in names]
        pools = {}
        for name in names:
            specs = backends.get(name, name)
            specs = specs if isinstance(specs, list) else [specs]
            if not specs:
                raise GraphError(f"backend pool {name!r} is empty")
            if name not in backends and not is_registered(name):
                raise GraphError(f"backend {name!r} is neither a registered backend ({', '.join(backend_names())}) nor "
                                 f"a pool given to the run: hq.run(..., backends={{{name!r}: [backend, ...]}})")
            handles = [self.executor.backend(s, self.config.max_in_flight) for s in specs]
            many = len(handles) > 1
            members = [Member(h, Lane("qpu", h.name, j if many else None), h.max_in_flight,
                              h.max_in_flight + self.config.prefetch) for j, h in enumerate(handles)]
            pools[name] = Pool(name, members, now=self.clock.now)
        return pools

    # -- the loop -------------------------------------------------------------------
    def run(self, stream: Iterable[Mapping[str, Any]] | int, *, initial_state: Mapping[PortRef | str, Any] | None = None,
            progress=None) -> RunResult:
        if isinstance(stream, int):
            if stream < 0:
                raise ValueError(f"number of steps must be >= 0, got {stream}")
            stream = ({} for _ in range(stream))
        c, items, self.store, self.service = self.config, iter(stream), None, None
        try:
            if c.run_dir is not None:
                self.store = RunDir(c.run_dir, self.graph, c.seed, c.run_id, c.checkpoint_every, c.resume)
            self._reset(initial_state)
            self.started.set()  # a RunHandle may change the pools from here on
            next_step = self._restore(items) if self.store else 0
        except BaseException:
            self._close()
            raise
        exhausted, expected = False, {p.name for p in self.graph.inputs}
        try:
            while True:
                while not exhausted and len(self.admitted) < self.window:
                    item = next(items, None)
                    if item is None:
                        exhausted = True
                        break
                    if set(item) != expected:
                        raise GraphError(f"step {next_step}: stream items must have keys {sorted(expected)}, got {sorted(item)}")
                    self._admit(next_step, item)
                    next_step += 1
                self._dispatch()
                if exhausted and not self.admitted:
                    break
                self._wait_and_handle(progress)
            if self.store:
                self._checkpoint(final=True)
        except (FragmentError, BackendError) as exc:
            failure = exc
        except KeyboardInterrupt:
            threads.hurry()  # the exit does not wait for the fragment still running
            if self.store is None:
                raise
            raise KeyboardInterrupt(f"run interrupted after {self.prefix} steps; continue it with "
                                    f"run_dir={str(self.store.path)!r}, resume=True") from None
        else:
            failure = None
        finally:
            self._close()
        if failure is not None:
            raise RunFailed(str(failure), self._result(next_step)) from failure
        return self._result(next_step)

    def _close(self) -> None:
        if self.service is not None:
            self.service.close()
        try:
            self.moved = self.executor.moved()
        except Exception:  # noqa: BLE001 - a dead rendezvous actor: the figure is lost, not the run
            self.moved = {}
        self.executor.close()
        if self.store is not None:
            self.store.close()

    # -- checkpoints (hqflow.checkpoint) ----------------------------------------------
    def _restore(self, items) -> int:
        """Continue a checkpointed run: its outputs, its loop values, the stream past its steps."""
        saved, steps = self.store.saved, self.store.saved["steps"]
        self.prefix = steps
        if not steps:
            return 0
        for j in range(steps):
            item = next(items, None)
            if item is None:
                raise CheckpointError(f"the stream ended after {j} items; the checkpoint in {self.store.path} is "
                                      f"past {steps} steps: give the run's own stream")
        if saved["item"] is not None and item_digest(item) not in (None, saved["item"]):
            raise CheckpointError(f"the stream differs from the checkpointed run's: item {steps - 1} is not the "
                                  "one it ran; give the run's own stream")
        for i, e in enumerate(self.graph.edges):
            if e.loop:
                dst = self.graph.fragment(e.dst[0]).port(e.dst[1], output=False)
                self.versions[i] = {steps: as_port_value(saved["state"][PortRef(*e.src)], dst.type)}
        self.outputs = dict(enumerate(saved["outputs"]))
        self.stats["completed_steps"] = steps
        return steps

    def _checkpoint(self, final: bool = False) -> None:
        """Record the steps that joined the finished prefix; save the loop values when one is due."""
        while self.prefix in self.outputs:
            self.store.record(self.prefix, self.outputs[self.prefix])
            self.prefix += 1
        if not (final or self.store.due(self.prefix)) or self.prefix == self.store.saved_steps:
            return
        state = {}
        for i, versions in self.versions.items():
            e = self.graph.edges[i]
            if self.prefix not in versions:
                return  # (never, by _forget_old_versions' rule) the next finished step saves
            state[PortRef(*e.src)] = versions[self.prefix]
        self.store.save(self.prefix, state, self.digests.get(self.prefix - 1), self.service.run_id)

    def _result(self, next_step: int) -> RunResult:
        """What completed: every finished step's outputs (in step order), the spans, the newest loop values."""
        steps = sorted(self.outputs)
        state = PortValues({PortRef(*self.graph.edges[i].src): versions[max(versions)]
                            for i, versions in self.versions.items()})
        stats = dict(self.stats, steps=next_step, **{k: v for k, v in self.service.stats.items() if k != "jobs"},
                     quantum_jobs=self.service.stats["jobs"], **self.service.figures(),
                     pools={name: pool.health() for name, pool in self.pools.items()},
                     bytes_moved=getattr(self, "moved", {}))
        spans = sorted(self.spans, key=lambda s: (s.start, str(s.row)))  # ties: by the lanes' text, as ever
        whole = steps == list(range(next_step))
        return RunResult([self.outputs[i] for i in steps], spans, state, self.clock.now() - self.t0, stats,
                         None if whole else steps)

    def _auto_window(self) -> int:
        """Steps admitted at once: the config's, or twice the jobs the pools keep in flight, plus 2 (at least 8)."""
        in_flight = sum(m.capacity for pool in self.pools.values() for m in pool.members if not m.removed)
        return 1 if self.config.executor.one_at_a_time else self.config.window or max(8, 2 * in_flight + 2)

    # -- resources changed mid-run (RunHandle, hqflow.resources); only once ``started`` is set ----------
    def add_backend(self, pool: str, spec) -> int:
        """A backend (an instance, a name, or ``(name, options)``) made by the run's executor joins pool
        ``pool``; returns its index. The window grows with the jobs the pools can keep in flight."""
        self._check_pool(pool)
        with self._changing:
            handle = self.executor.backend(spec, self.config.max_in_flight)
            member = Member(handle, Lane("qpu", handle.name, len(self.pools[pool].members)), handle.max_in_flight,
                            handle.max_in_flight + self.config.prefetch)
            index = self.service.add_backend(pool, member)
            self.window = max(self.window, self._auto_window())
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

    def tune(self, prefetch: int | None = None, rows_per_job: int | None | str = "keep") -> None:
        """Prefetch and rows per job for the jobs dispatched from now on (``"keep"``: as they are)."""
        if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0):
            raise ValueError(f"prefetch must be an integer >= 0, got {prefetch!r}")
        changes = {} if prefetch is None else {"prefetch": prefetch}
        if rows_per_job != "keep":
            changes["rows_per_job"] = rows_per_job
        self.config = dataclasses.replace(self.config, **changes)
        self.service.tune(prefetch, rows_per_job)

    def check_workers(self, resource: str, workers: int) -> None:
        """A ``ValueError`` if ``set_workers(resource, workers)`` cannot be done."""
        if resource not in ("cpu", "gpu"):
            raise ValueError(f"resource must be 'cpu' or 'gpu', got {resource!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        if resource == "gpu" and workers < self.config.learners:
            raise ValueError(f"the run's learn steps need {self.config.learners} learner slots; keep gpu workers >= that")
        if not self.config.executor.resizable:
            raise ValueError(f"worker slots change mid-run under the local executor only, not {str(self.config.executor)!r}")

    def set_workers(self, resource: str, workers: int) -> None:
        """``workers`` classical slots of ``resource`` from now on (local executor; see ``check_workers``)."""
        self.check_workers(resource, workers)
        self.executor.pools[resource].resize(workers)
        self.slots[resource] = workers
        self.config = dataclasses.replace(self.config, **{f"{resource}_workers": workers})
        self.events.put(Wake())  # the dispatch loop may use the new slots at once

    def _check_pool(self, pool: str) -> None:
        if pool not in self.pools:
            raise ValueError(f"no backend pool named {pool!r}; pools: {', '.join(sorted(self.pools))}")

    def _reset(self, initial_state) -> None:
        self.window = self._auto_window()
        self.t0 = self.clock.now()
        self.events: queue.Queue[Event] = queue.Queue()
        self.admitted: dict[int, set[str]] = {}  # step -> fragments not yet done
        self.values: dict[tuple, Any] = {}  # (fragment or None, port, step) -> value
        self.outputs: dict[int, dict] = {}
        self.running: set[tuple[str, int]] = set()
        self.replies: dict[tuple[str, int], dict[int, dict]] = {}  # replicated instance -> rank -> outputs
        self.busy = {"cpu": set(), "gpu": set()}  # taken worker slots
        self.spans: list[Span] = []
        run_id = self.config.run_id or (self.store.saved["run_id"] if self.store else None)
        self.service = JobService(self.pools, max_retries=self.config.max_retries, job_timeout=self.config.job_timeout,
                                  rows_per_job=self.config.rows_per_job, t0=self.t0, record=self.spans.append, run_id=run_id,
                                  ledger=self.executor.ledger(self.config.budget), now=self.clock.now)
        self.digests: dict[int, str | None] = {}  # step -> its stream item's fingerprint (with a run_dir)
        self.prefix = 0  # steps before the first unfinished one
        self.stats = {"max_admitted": 0, "executor": self.config.executor.value, "completed_steps": 0}
        self.versions: dict[int, dict[int, Any]] = {}  # loop edge index -> version -> value
        overrides, named = {}, {}  # by port; each port's key as the caller wrote it
        for key, value in (initial_state or {}).items():
            try:
                overrides[port(key)], named[port(key)] = value, key
            except ValueError:  # not "frag.port": names no loop-carried source
                named[key] = key
        used = set()
        for i, e in enumerate(self.graph.edges):
            if not e.loop:
                continue
            key = PortRef(*e.src)
            value = overrides.get(key, e.init)
            used.add(key)
            if value is None and not (e.start_empty and key not in overrides):
                raise GraphError(f"loop-carried edge {e} has no initial value; give init= or "
                                 f"initial_state={{{str(key)!r}: ...}}")
            dst = self.graph.fragment(e.dst[0]).port(e.dst[1], output=False)
            self.versions[i] = {0: as_port_value(value, dst.type)}
        unknown = sorted(str(named[k]) for k in set(named) - used)
        if unknown:
            raise GraphError(f"initial_state names {unknown}, which are not loop-carried sources")

    def _admit(self, step: int, item: Mapping[str, Any]) -> None:
        if self.store is not None:  # a resumed run checks that its stream is the same
            self.digests[step] = item_digest(item)
        self.admitted[step] = {f.name for f in self.order}
        for k, v in item.items():
            self.values[(None, k, step)] = v
        self.stats["max_admitted"] = max(self.stats["max_admitted"], len(self.admitted))

    def _inputs(self, f: Fragment, step: int) -> tuple[dict, int | None] | None:
        """The arguments of ``(f, step)`` and the oldest parameter version among them, or None if not ready."""
        args, versions = {}, []
        for port, i, loop, staleness, src in self.wiring[f.name]:
            if loop:
                usable = [v for v in self.versions[i] if step - staleness <= v <= step]
                if not usable:
                    return None
                versions.append(max(usable))
                args[port] = self.versions[i][versions[-1]]
            else:
                value = self.values.get((*src, step), _MISSING)
                if value is _MISSING:
                    return None
                args[port] = value
        return args, (min(versions) if versions else None)

    def _idle(self) -> bool:
        return not self.running

    def _dispatch(self) -> None:
        """Quantum work first: its jobs go out before classical tasks compete for this process."""
        self._dispatch_instances(quantum=True)
        self._dispatch_instances(quantum=False)

    def _dispatch_instances(self, quantum: bool) -> None:
        """Start every ready instance of one side that has a free slot (lowest step first; one at a time in sync mode)."""
        one_at_a_time = self.config.executor.one_at_a_time
        side = self.sides[quantum]
        for step in sorted(self.admitted):
            pending = self.admitted[step]
            for f, resource, replicas in side:
                if one_at_a_time and self.running:
                    return
                key = (f.name, step)
                if f.name not in pending or key in self.running:
                    continue
                if not quantum and len(self.busy[resource]) + replicas > self.slots[resource]:
                    continue
                ready = self._inputs(f, step)
                if ready is None:
                    continue
                args, version = ready
                self.running.add(key)
                if quantum:
                    self._start_execute(f, step, args, version)
                else:
                    self._start_task(f, step, args, version, resource)

    def _wire(self, f: Fragment, port: str) -> tuple:
        """``(port, edge index, loop-carried, max staleness, source)`` of an input port."""
        i = self.incoming[(f.name, port)]
        e = self.graph.edges[i]
        return port, i, e.loop, e.max_staleness, e.src

    def _replicas(self, f: Fragment) -> int:
        return self.config.learners if f.kind == "learn" else 1

    def _start_task(self, f: Fragment, step: int, args: dict, version: int | None, resource: str) -> None:
        size = self._replicas(f)
        group = f"{self.service.run_id}/{f.name}/{step}"
        if size > 1:
            self.replies[(f.name, step)] = {}
        for rank in range(size):
            slot = min(set(range(self.slots[resource])) - self.busy[resource])
            self.busy[resource].add(slot)
            lane = Lane(resource, slot=slot)
            client = (JobClient(self.service, f.job_backends,
                                Parent(f.name, step, lane, version, True, f.kind, Lane(resource)))
                      if f.job_backends else None)
            replica = (Replica(rank, size, group, self.executor.rendezvous(), self.config.compression)
                       if size > 1 else None)
            start = self.clock.now()
            fut = self.executor.submit(f, args, resource, client, replica, self.kept.get(f.name, ()))
            fut.add_done_callback(lambda fut, lane=lane, start=start, rank=rank: self.events.put(
                TaskDone(f, step, version, lane, start, self.clock.now(), fut, rank)))

    def _start_execute(self, f: Fragment, step: int, args: dict, version: int | None) -> None:
        pool = self.pools[f.backend]
        if not pool.any_fits(f.circuit.n_qubits):
            raise FragmentError(f"fragment {f.name!r}: no backend in pool {f.backend!r} fits {f.circuit.n_qubits} qubits")
        try:
            batch, post = self.executor.circuit_batch(f, args, step_seed(self.config.seed, step, self.index[f.name]))
        except Exception as exc:
            raise FragmentError(f"fragment {f.name!r} step {step}: {exc}") from exc
        fut = self.service.submit(f.backend, batch, Parent(f.name, step, pool.resource, version))
        fut.add_done_callback(lambda fut: self.events.put(CallDone(f, step, post, fut)))

    def _wait_and_handle(self, progress) -> None:
        if self._idle() and self.events.empty():
            raise RuntimeError(f"scheduler stalled with steps {sorted(self.admitted)} unfinished (a bug: please report)")
        event: Event = self.clock.wait(self.events)
        match event:
            case TaskDone():
                self._task_done(event, progress)
            case CallDone():
                self._execute_done(event, progress)
            case Wake():  # the slots changed (RunHandle.set_workers): dispatch again
                pass

    # -- completions ------------------------------------------------------------------
    def _task_done(self, event: TaskDone, progress) -> None:
        f, step, version, lane, rank = event.fragment, event.step, event.version, event.lane, event.rank
        start, end, fut = event.start, event.end, event.future
        self.busy[lane.kind].discard(lane.slot)
        resource = Lane(lane.kind)
        exc = fut.exception()
        replies = self.replies.get((f.name, step))
        if exc is not None:
            self.spans.append(Span(f.name, f.kind, resource, step, start - self.t0, end - self.t0, Outcome.error(exc), version, lane))
            if replies is not None:  # its peers wait in a reduction that cannot finish
                self.executor.rendezvous().abort(f"{self.service.run_id}/{f.name}/{step}/", f"replica {rank} failed: {exc}")
            if isinstance(exc, FragmentError):
                raise exc  # its cause stays the fragment's own exception ("raise exc from exc" would loop)
            raise FragmentError(f"fragment {f.name!r} step {step}: {exc}") from exc
        out, remote_spans, node = fut.result()
        self.spans.append(Span(f.name, f.kind, resource, step, start - self.t0, end - self.t0, OK, version, lane,
                               node=node))
        shift = start - self.t0  # spans of jobs submitted in another process: times from the call's start
        self.spans += [dataclasses.replace(s, start=s.start + shift, end=s.end + shift) for s in remote_spans]
        if replies is not None:  # a replica: the instance is done when all are, with rank 0's outputs
            replies[rank] = out
            if len(replies) < self.config.learners:
                return
            del self.replies[(f.name, step)]
            self.executor.rendezvous().forget(f"{self.service.run_id}/{f.name}/{step}/")
            out = replies[0]
        self.running.discard((f.name, step))
        self._complete(f, step, out, progress)

    def _execute_done(self, event: CallDone, progress) -> None:
        f, step, post, fut = event.fragment, event.step, event.post, event.future
        self.running.discard((f.name, step))
        exc = fut.exception()
        if exc is not None:
            raise FragmentError(f"fragment {f.name!r} step {step}: {exc}") from exc
        try:
            out = self.executor.circuit_outputs(f, fut.result(), post)
        except Exception as exc:
            raise FragmentError(f"fragment {f.name!r} step {step}: {exc}") from exc
        self._complete(f, step, out, progress)

    def _complete(self, f: Fragment, step: int, out: dict, progress) -> None:
        for name, value in out.items():
            self.values[(f.name, name, step)] = value
        for i, versions in self.versions.items():
            e = self.graph.edges[i]
            if e.src[0] == f.name:
                versions[step + 1] = out[e.src[1]]
        pending = self.admitted[step]
        pending.discard(f.name)
        if pending:
            return
        del self.admitted[step]
        self.outputs[step] = {p.name: self.values[self._source((None, p.name), step)] for p in self.graph.outputs}
        self.values = {k: v for k, v in self.values.items() if k[2] != step}
        if self.store is not None:
            self._checkpoint()
            for k in [k for k in self.digests if k < self.prefix - 1]:
                del self.digests[k]
        self._forget_old_versions()
        self.stats["completed_steps"] += 1
        if progress is not None:
            progress(self.stats["completed_steps"], self.outputs[step])

    def _source(self, dst: tuple, step: int) -> tuple:
        e = self.graph.edges[self.incoming[dst]]
        return (e.src[0], e.src[1], step)

    def _forget_old_versions(self) -> None:
        oldest = min(self.admitted, default=self.stats["completed_steps"])
        for i, versions in self.versions.items():
            keep = oldest - self.graph.edges[i].max_staleness
            newest = max(versions)
            for v in [v for v in versions if v < keep and v != newest]:
                del versions[v]


class RunHandle:
    """A run in a thread of its own whose backend pools change while it runs (``hqflow.start``).

        run = hq.start(graph, stream, backends={"qpu": [qpu_a, qpu_b]})
        run.remove_backend("qpu", 1)                 # its jobs in flight go to the others
        run.add_backend("qpu", ("emulated-qpu", {}))  # waiting jobs may go to it at once
        result = run.result()

    What a run computes depends on its steps, rows and shot seeds only, never on the backend that
    ran a job: with exact backends at staleness 0 it ends with the result of an undisturbed run.
    """

    def __init__(self, scheduler: Scheduler, stream, initial_state=None, progress=None, on_change=None):
        self.scheduler = scheduler
        self._result, self._error, self._done = None, None, threading.Event()
        self._on_change = on_change
        self.plans: list = []
        """the plans in force, the first first (``hqflow.planner.start`` re-plans on every change)"""
        self.initial_members = {name: [m.lane for m in pool.members] for name, pool in scheduler.pools.items()}
        self._thread = threads.start(self._main, "hqflow-run", (stream, initial_state, progress))

    def _main(self, stream, initial_state, progress) -> None:
        try:
            self._result = self.scheduler.run(stream, initial_state=initial_state, progress=progress)
        except BaseException as exc:  # noqa: BLE001 - result() raises it in the caller's thread
            self._error = exc
        finally:
            self.scheduler.started.set()
            self._done.set()

    def _service(self):
        self.scheduler.started.wait()
        if self._done.is_set():
            raise RuntimeError("the run has ended; its pools no longer change")
        return self.scheduler.service

    def add_backend(self, pool: str, spec) -> int:
        """Add a backend (an instance, a name, or ``(name, options)``) to pool ``pool``; returns its index."""
        self._service()
        index = self.scheduler.add_backend(pool, spec)
        self._changed()
        return index

    def remove_backend(self, pool: str, which: int | str) -> int:
        """Take a backend out of pool ``pool``: its index, or its name (the first such still in the pool).
        Its jobs in flight are cancelled and run again elsewhere. Returns how many were taken back."""
        self._service()
        taken = self.scheduler.remove_backend(pool, which)  # the last one may go too: jobs wait for one to be added
        self._changed()
        return taken

    def _changed(self) -> None:
        if self._on_change is not None and not self._done.is_set():
            self._on_change(self)

    def set_workers(self, resource: str, workers: int) -> None:
        """Add or remove classical worker slots of ``resource`` (``"cpu"`` or ``"gpu"``) mid-run, under the
        ``local`` executor: a removed slot's call runs to its end first. Results do not depend on it."""
        self.scheduler.check_workers(resource, workers)
        self._service()
        self.scheduler.set_workers(resource, workers)

    def tune(self, prefetch: int | None = None, rows_per_job: int | None | str = "keep") -> None:
        """Change, mid-run, the jobs each backend keeps ahead (``prefetch``) and the rows per job (None:
        uncut); they hold for jobs dispatched from now on. Neither changes what the run computes."""
        self._service()
        self.scheduler.tune(prefetch, rows_per_job)

    def members(self) -> dict[str, list[Lane]]:
        """Each pool's members now (their lanes), in the pool's order."""
        return {name: [m.lane for m in pool.members if not m.removed] for name, pool in self.scheduler.pools.items()}

    def steps_done(self) -> int:
        return self.scheduler.stats["completed_steps"]

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> RunResult:
        """The run's result, when it ends (its error, raised here, if it failed)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the run has not ended within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result


def start(graph: Graph, stream: Iterable[Mapping[str, Any]] | int, *, backends: Mapping[str, Any] | None = None,
          initial_state: Mapping[PortRef | str, Any] | None = None, progress=None, config: SchedulerConfig | None = None,
          on_change=None, **options) -> RunHandle:
    """``run``, in a thread of its own: returns at once with a :class:`RunHandle`. ``on_change(handle)``
    is called after every ``add_backend`` and ``remove_backend``."""
    return RunHandle(Scheduler(graph, backends, _config(config, options)), stream, initial_state, progress, on_change)


def _config(config: SchedulerConfig | None, options: dict) -> SchedulerConfig:
    cfg = config or SchedulerConfig()
    if options:
        unknown = sorted(set(options) - {f.name for f in dataclasses.fields(SchedulerConfig)})
        if unknown:
            raise TypeError(f"unknown scheduler option(s) {unknown}; see hqflow.SchedulerConfig")
        cfg = dataclasses.replace(cfg, **options)
    return cfg


def run(graph: Graph, stream: Iterable[Mapping[str, Any]] | int, *, backends: Mapping[str, Any] | None = None,
        initial_state: Mapping[PortRef | str, Any] | None = None, progress=None, config: SchedulerConfig | None = None,
        **options) -> RunResult:
    """Run ``graph`` over ``stream`` with the overlap scheduler.

    ``backends`` maps a fragment's backend name to a backend, a registry name,
    ``(name, options)``, or a list of those (a pool). ``initial_state`` gives loop-carried sources
    their first value, by port (``hqflow.ports.PortRef`` or ``"frag.port"``; a run's ``result.state``
    continues it). ``options`` are ``SchedulerConfig`` fields (``executor="ray"``, ``window=4``, ...).
    """
    return Scheduler(graph, backends, _config(config, options)).run(stream, initial_state=initial_state,
                                                                   progress=progress)
