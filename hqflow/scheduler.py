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
  ``k = 0`` is exactly the reference executor's semantics (bit-identical
  results for the same seed) and ``k > 0`` lets producers run ahead. Spans
  record the version used.
* **Backpressure.** At most ``window`` steps are admitted and unfinished.
* **Several backends per name**, chosen by measured latency (``dispatch.Pool``);
  batches larger than a backend's ``max_circuits_per_job`` are split and re-joined.
* **Failures.** A failed or timed-out job is retried, on another backend where
  one fits, up to ``max_retries`` times; each attempt is a span. A step's
  result is taken once, from the first successful attempt of each part.

One loop serves the ``sync``, ``local`` and ``ray`` executors (``executors.py``).
"""
from __future__ import annotations

import itertools
import queue
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hqflow.backends import BatchResult
from hqflow.ir.graph import Fragment, Graph, GraphError

from .dispatch import Member, Pool
from .executors import make_executor
from .fragments import (
    FragmentError,
    RunResult,
    as_port_value,
    execute_batch,
    execute_outputs,
    job_spans,
    step_seed,
)
from .trace import Span


@dataclass(frozen=True)
class SchedulerConfig:
    """How a graph is run. Changing it never changes the algorithm; with every
    loop edge at ``max_staleness=0`` it never changes the results either."""

    executor: str = "local"
    """``sync`` (one thing at a time), ``local`` (threads) or ``ray``"""
    cpu_workers: int = 1
    """classical worker slots for ``cpu`` fragments"""
    gpu_workers: int = 1
    """learner slots for ``gpu`` fragments"""
    max_in_flight: int = 1
    """device slots per backend, unless the backend says otherwise (``max_in_flight`` attribute)"""
    prefetch: int = 1
    """extra jobs submitted to each backend beyond its device slots, so its queue never runs dry
    and submission round-trips hide behind running jobs (0: submit only into free slots)"""
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

    def __post_init__(self):
        if self.executor not in ("sync", "local", "ray"):
            raise ValueError(f"executor must be 'sync', 'local' or 'ray', got {self.executor!r}")
        for name in ("cpu_workers", "gpu_workers", "max_in_flight", "window"):
            if name == "window" and self.window is None:
                continue
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not isinstance(self.prefetch, int) or self.prefetch < 0:
            raise ValueError(f"prefetch must be an integer >= 0, got {self.prefetch!r}")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")
        if self.job_timeout is not None and self.job_timeout <= 0:
            raise ValueError(f"job_timeout must be positive or None, got {self.job_timeout!r}")


@dataclass
class _Execute:
    """An execute instance in flight: its parts (split batches) and their results."""

    fragment: Fragment
    step: int
    version: int | None
    parts: list
    post: Any
    results: list = field(default_factory=list)
    attempts: list = field(default_factory=list)
    avoid: list = field(default_factory=list)


@dataclass
class _Job:
    inst: _Execute
    part: int
    pool: Pool
    member: int
    slot: int
    job: Any
    start: float
    deadline: float | None


class Scheduler:
    """Runs a graph over a stream of micro-batches; see the module docstring."""

    def __init__(self, graph: Graph, backends: Mapping[str, Any] | None = None, config: SchedulerConfig = SchedulerConfig()):
        self.config = config
        self.executor = make_executor(config.executor, config.cpu_workers, config.gpu_workers, config.ray_num_cpus)
        try:
            self.pools = self._make_pools(graph, dict(backends or {}))
            caps = {name: pool.members[0].handle.capabilities for name, pool in self.pools.items()}
            self.graph = graph.validate(backends=caps)
        except BaseException:
            self.executor.close()
            raise
        self.order = self.graph.topological_order()
        self.index = {f.name: i for i, f in enumerate(self.order)}
        self.incoming = {e.dst: i for i, e in enumerate(self.graph.edges)}
        self.slots = {"cpu": config.cpu_workers, "gpu": config.gpu_workers}

    def _make_pools(self, graph: Graph, backends: dict) -> dict[str, Pool]:
        pools = {}
        for f in graph.fragments:
            if f.kind != "execute" or not f.backend or f.backend in pools:
                continue
            specs = backends.get(f.backend, f.backend)
            specs = specs if isinstance(specs, list) else [specs]
            handles = [self.executor.backend(s, self.config.max_in_flight) for s in specs]
            many = len(handles) > 1
            members = [Member(h, f"qpu:{h.name}#{j}" if many else f"qpu:{h.name}", h.max_in_flight,
                              h.max_in_flight + self.config.prefetch) for j, h in enumerate(handles)]
            pools[f.backend] = Pool(f.backend, members)
        return pools

    # -- the loop -------------------------------------------------------------------
    def run(self, stream: Iterable[Mapping[str, Any]] | int, *, initial_state: Mapping[str, Any] | None = None,
            progress=None) -> RunResult:
        if isinstance(stream, int):
            if stream < 0:
                raise ValueError(f"number of steps must be >= 0, got {stream}")
            stream = ({} for _ in range(stream))
        self._reset(initial_state)
        items, exhausted, next_step = iter(stream), False, 0
        expected = {p.name for p in self.graph.inputs}
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
        finally:
            self._cancel_all()
            self.executor.close()
        outputs = [self.outputs[i] for i in range(next_step)]
        state = {}
        for i, versions in self.versions.items():
            e = self.graph.edges[i]
            state[f"{e.src[0]}.{e.src[1]}"] = versions[max(versions)]
        self.stats["steps"] = next_step
        spans = sorted(self.spans, key=lambda s: (s.start, s.row))
        return RunResult(outputs, spans, state, time.perf_counter() - self.t0, dict(self.stats))

    def _reset(self, initial_state) -> None:
        in_flight = sum(m.capacity for pool in self.pools.values() for m in pool.members)
        self.window = 1 if self.config.executor == "sync" else self.config.window or max(8, 2 * in_flight + 2)
        self.t0 = time.perf_counter()
        self.events: queue.Queue = queue.Queue()
        self.admitted: dict[int, set[str]] = {}  # step -> fragments not yet done
        self.values: dict[tuple, Any] = {}  # (fragment or None, port, step) -> value
        self.outputs: dict[int, dict] = {}
        self.running: set[tuple[str, int]] = set()
        self.busy = {"cpu": set(), "gpu": set()}  # taken worker slots
        self.job_queue: list[tuple[_Execute, int]] = []
        self.jobs: dict[int, _Job] = {}
        self.tokens = itertools.count()
        self.spans: list[Span] = []
        self.stats = {"retries": 0, "failed_jobs": 0, "timeouts": 0, "max_admitted": 0, "max_job_queue": 0,
                      "executor": self.config.executor, "completed_steps": 0}
        self.versions: dict[int, dict[int, Any]] = {}  # loop edge index -> version -> value
        overrides, used = dict(initial_state or {}), set()
        for i, e in enumerate(self.graph.edges):
            if not e.loop:
                continue
            key = f"{e.src[0]}.{e.src[1]}"
            value = overrides.get(key, e.init)
            used.add(key)
            if value is None:
                raise GraphError(f"loop-carried edge {e} has no initial value; give init= or initial_state={{{key!r}: ...}}")
            port = self.graph.fragment(e.dst[0]).port(e.dst[1], output=False)
            self.versions[i] = {0: as_port_value(value, port.type)}
        unknown = sorted(set(overrides) - used)
        if unknown:
            raise GraphError(f"initial_state names {unknown}, which are not loop-carried sources")

    def _admit(self, step: int, item: Mapping[str, Any]) -> None:
        self.admitted[step] = {f.name for f in self.order}
        for k, v in item.items():
            self.values[(None, k, step)] = v
        self.stats["max_admitted"] = max(self.stats["max_admitted"], len(self.admitted))

    def _inputs(self, f: Fragment, step: int) -> tuple[dict, int | None] | None:
        """The arguments of ``(f, step)`` and the oldest parameter version among them, or None if not ready."""
        args, versions = {}, []
        for p in f.inputs:
            i = self.incoming[(f.name, p.name)]
            e = self.graph.edges[i]
            if e.loop:
                usable = [v for v in self.versions[i] if step - e.max_staleness <= v <= step]
                if not usable:
                    return None
                versions.append(max(usable))
                args[p.name] = self.versions[i][versions[-1]]
            else:
                key = (e.src[0], e.src[1], step)
                if key not in self.values:
                    return None
                args[p.name] = self.values[key]
        return args, (min(versions) if versions else None)

    def _idle(self) -> bool:
        return not self.running and not self.jobs

    def _dispatch(self) -> None:
        """Quantum work first: its jobs go out before classical tasks compete for this process."""
        self._dispatch_instances(quantum=True)
        self._dispatch_jobs()
        self._dispatch_instances(quantum=False)

    def _dispatch_instances(self, quantum: bool) -> None:
        """Start every ready instance of one side that has a free slot (lowest step first; one at a time in sync mode)."""
        sync = self.config.executor == "sync"
        for step in sorted(self.admitted):
            for f in self.order:
                if sync and not self._idle():
                    return
                key = (f.name, step)
                if (f.kind == "execute") != quantum or f.name not in self.admitted[step] or key in self.running:
                    continue
                resource = "gpu" if f.resource == "gpu" else "cpu"
                if f.kind != "execute" and len(self.busy[resource]) >= self.slots[resource]:
                    continue
                ready = self._inputs(f, step)
                if ready is None:
                    continue
                args, version = ready
                self.running.add(key)
                if f.kind == "execute":
                    self._start_execute(f, step, args, version)
                else:
                    self._start_task(f, step, args, version, resource)

    def _start_task(self, f: Fragment, step: int, args: dict, version: int | None, resource: str) -> None:
        slot = min(set(range(self.slots[resource])) - self.busy[resource])
        self.busy[resource].add(slot)
        start = time.perf_counter()
        fut = self.executor.submit(f, args, resource)
        fut.add_done_callback(lambda fut: self.events.put(("task", f, step, version, resource, slot, start,
                                                               time.perf_counter(), fut)))

    def _start_execute(self, f: Fragment, step: int, args: dict, version: int | None) -> None:
        pool = self.pools[f.backend]
        if not pool.any_fits(f.circuit.n_qubits):
            raise FragmentError(f"fragment {f.name!r}: no backend in pool {f.backend!r} fits {f.circuit.n_qubits} qubits")
        try:
            batch, post = execute_batch(f, args, step_seed(self.config.seed, step, self.index[f.name]))
        except Exception as exc:
            raise FragmentError(f"fragment {f.name!r} step {step}: {exc}") from exc
        limit = pool.max_rows()
        parts = batch.split(limit) if limit else [batch]
        inst = _Execute(f, step, version, parts, post, [None] * len(parts), [0] * len(parts), [set() for _ in parts])
        self.job_queue += [(inst, j) for j in range(len(parts))]
        self.stats["max_job_queue"] = max(self.stats["max_job_queue"], len(self.job_queue))

    def _dispatch_jobs(self) -> None:
        waiting = []
        for inst, j in self.job_queue:
            if self.config.executor == "sync" and self.jobs:
                waiting.append((inst, j))
                continue
            pool = self.pools[inst.fragment.backend]
            part = inst.parts[j]
            choice = pool.choose(part.template.n_qubits, inst.avoid[j])
            if choice is None:
                waiting.append((inst, j))
                continue
            member, slot = choice
            start = pool.start(member, slot)
            token = next(self.tokens)
            try:
                job = pool.members[member].handle.submit(part)
            except Exception as exc:  # refused at submission: counts as a failed attempt
                self.jobs[token] = _Job(inst, j, pool, member, slot, None, start, None)
                self._job_failed(token, f"error: {exc}")
                continue
            deadline = start + self.config.job_timeout if self.config.job_timeout else None
            self.jobs[token] = _Job(inst, j, pool, member, slot, job, start, deadline)
            _on_done(job, lambda _job, token=token: self.events.put(("job", token, time.perf_counter())))
        self.job_queue = waiting

    def _wait_and_handle(self, progress) -> None:
        deadlines = [r.deadline for r in self.jobs.values() if r.deadline is not None]
        if self._idle() and not self.job_queue and self.events.empty():
            raise RuntimeError(f"scheduler stalled with steps {sorted(self.admitted)} unfinished (a bug: please report)")
        timeout = max(0.0, min(deadlines) - time.perf_counter()) if deadlines else None
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            now = time.perf_counter()
            for token in [t for t, r in self.jobs.items() if r.deadline is not None and r.deadline <= now]:
                self.jobs[token].job.cancel()
                self.stats["timeouts"] += 1
                self._job_failed(token, "timeout")
            return
        if event[0] == "task":
            self._task_done(*event[1:], progress)
        else:
            self._job_done(*event[1:], progress)

    # -- completions ------------------------------------------------------------------
    def _task_done(self, f, step, version, resource, slot, start, end, fut, progress) -> None:
        self.busy[resource].discard(slot)
        self.running.discard((f.name, step))
        lane = f"{resource}/{slot}"
        exc = fut.exception()
        if exc is not None:
            self.spans.append(Span(f.name, f.kind, resource, step, start - self.t0, end - self.t0, f"error: {exc}", version, lane))
            raise exc if isinstance(exc, FragmentError) else FragmentError(f"fragment {f.name!r} step {step}: {exc}") from exc
        self.spans.append(Span(f.name, f.kind, resource, step, start - self.t0, end - self.t0, "ok", version, lane))
        out = fut.result()
        self.spans += job_spans(out, f.name, resource, step, start - self.t0, version, lane)
        self._complete(f, step, out, progress)

    def _job_done(self, token: int, end: float, progress) -> None:
        rec = self.jobs.get(token)
        if rec is None:  # an attempt already given up on (timed out): its late result is dropped
            return
        try:
            result: BatchResult = rec.job.result(timeout=0)
        except Exception as exc:
            self._job_failed(token, f"error: {exc}")
            return
        del self.jobs[token]
        rec.pool.finish(rec.member, rec.slot, ok=True)
        inst = rec.inst
        self._job_span(rec, end, "ok")
        inst.results[rec.part] = result
        if any(r is None for r in inst.results):
            return
        joined = inst.results[0] if len(inst.results) == 1 else BatchResult.concat(inst.results)
        self.running.discard((inst.fragment.name, inst.step))
        try:
            out = execute_outputs(inst.fragment, joined, inst.post)
        except Exception as exc:
            raise FragmentError(f"fragment {inst.fragment.name!r} step {inst.step}: {exc}") from exc
        self._complete(inst.fragment, inst.step, out, progress)

    def _job_failed(self, token: int, outcome: str) -> None:
        rec = self.jobs.pop(token)
        rec.pool.finish(rec.member, rec.slot, ok=False)
        self._job_span(rec, time.perf_counter(), outcome)
        self.stats["failed_jobs"] += 1
        inst, j = rec.inst, rec.part
        inst.attempts[j] += 1
        inst.avoid[j].add(rec.member)
        if inst.attempts[j] > self.config.max_retries:
            raise FragmentError(f"fragment {inst.fragment.name!r} step {inst.step}: quantum job failed "
                                f"{inst.attempts[j]} times; last: {outcome}")
        self.stats["retries"] += 1
        self.job_queue.append((inst, j))

    def _job_span(self, rec: _Job, end: float, outcome: str) -> None:
        f = rec.inst.fragment
        self.spans.append(Span(f.name, f.kind, rec.pool.resource, rec.inst.step, rec.start - self.t0, end - self.t0,
                               outcome, rec.inst.version, rec.pool.lane(rec.member, rec.slot)))

    def _complete(self, f: Fragment, step: int, out: dict, progress) -> None:
        for port, value in out.items():
            self.values[(f.name, port, step)] = value
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

    def _cancel_all(self) -> None:
        for rec in self.jobs.values():
            if rec.job is not None:
                rec.job.cancel()


def _on_done(job, callback) -> None:
    """Call ``callback(job)`` when ``job`` finishes: its own hook, or a waiter thread."""
    if hasattr(job, "add_done_callback"):
        job.add_done_callback(callback)
        return
    import threading

    def wait():
        try:
            job.result()
        except Exception:
            pass
        callback(job)

    threading.Thread(target=wait, daemon=True, name="hqflow-job-waiter").start()


def run(graph: Graph, stream: Iterable[Mapping[str, Any]] | int, *, backends: Mapping[str, Any] | None = None,
        initial_state: Mapping[str, Any] | None = None, progress=None, config: SchedulerConfig | None = None,
        **options) -> RunResult:
    """Run ``graph`` over ``stream`` with the overlap scheduler.

    ``backends`` maps a fragment's backend name to a backend, a registry name,
    ``(name, options)``, or a list of those (a pool). ``options`` are
    ``SchedulerConfig`` fields (``executor="ray"``, ``window=4``, ...).
    """
    cfg = config or SchedulerConfig()
    if options:
        import dataclasses

        unknown = sorted(set(options) - {f.name for f in dataclasses.fields(SchedulerConfig)})
        if unknown:
            raise TypeError(f"unknown scheduler option(s) {unknown}; see hqflow.SchedulerConfig")
        cfg = dataclasses.replace(cfg, **options)
    return Scheduler(graph, backends, cfg).run(stream, initial_state=initial_state, progress=progress)
