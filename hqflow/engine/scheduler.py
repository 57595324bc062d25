"""The overlap scheduler's loop: keep classical and quantum resources busy at once.

The stream is cut into steps; instance ``(f, i)`` is ready when its inputs for step ``i`` exist. The loop admits
steps, dispatches ready instances (classical calls to worker slots, circuit calls to the job service's pools) and
takes their completions, so while a backend runs step ``i`` the CPU prepares ``i + 1`` and the learner consumes
``i - 1``. Its components: ``window.py``, ``checkpoint.py``, ``elastic.py`` and ``runstats.py``; time and events
come only through a clock (``clock.py``), so the cost model runs this same loop on a simulated clock.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from hqflow.backends import BackendError, threads
from hqflow.ir.graph import CircuitCall, Fragment, Graph, GraphError

from .checkpoint import Checkpointer
from ..common.clock import REAL
from .collective import Replica
from .elastic import Elastic, RunHandle
from .events import CallDone, Event, TaskDone, Wake
from .executors import LocalExecutor, SyncExecutor
from .fragments import FragmentError, step_seed
from .result import RunFailed, RunResult
from ..jobs.client import JobClient
from ..jobs.service import JobService, Parent
from ..common.lanes import Lane
from ..common.outcome import OK, Outcome
from .ports import PortRef
from .runstats import RunStats
from .scheduler_config import ExecutorKind, SchedulerConfig, configure
from ..trace import Span
from .window import Values, Window


class Scheduler:
    """Runs a graph over a stream of micro-batches; see the module docstring."""

    def __init__(self, graph: Graph, backends: Mapping[str, Any] | None = None, config: SchedulerConfig = SchedulerConfig(),
                 *, executor=None, clock=REAL):
        """``executor`` and ``clock``: where the work runs and whose time it takes (default: the config's
        executor, the machine's clock; ``hqflow.planning.costmodel`` gives simulated ones)."""
        self.config, self.clock = config, clock
        self.executor = executor if executor is not None else make_executor(config)
        try:
            self.elastic = Elastic(graph, dict(backends or {}), self.executor, config, clock.now)
            self.pools, self.slots = self.elastic.pools, self.elastic.slots
            self.graph = graph.validate(backends={name: pool.members[0].handle.capabilities
                                                  for name, pool in self.pools.items()})
        except BaseException:
            self.executor.close()
            raise
        self.kept = self.executor.kept_ports(self.graph)
        self.order = self.graph.topological_order()
        self.index = {f.name: i for i, f in enumerate(self.order)}
        # each fragment's side (circuit calls are dispatched first), classical resource and replicas, worked out once
        self.sides = {quantum: [(f, "gpu" if f.resource == "gpu" else "cpu",
                                 self.config.learners if f.kind == "learn" else 1)
                                for f in self.order if isinstance(f, CircuitCall) == quantum] for quantum in (True, False)}
        self.started = threading.Event()

    # -- the loop -------------------------------------------------------------------
    def run(self, stream: Iterable[Mapping[str, Any]] | int, *, initial_state: Mapping[PortRef | str, Any] | None = None,
            progress=None, record=None) -> RunResult:
        """``record``: the workload's own record, kept in the run's checkpoints (``checkpoint.Record``)."""
        if isinstance(stream, int):
            if stream < 0:
                raise ValueError(f"number of steps must be >= 0, got {stream}")
            stream = ({} for _ in range(stream))
        items, self.checkpoints, self.service = iter(stream), None, None
        try:
            self.checkpoints = Checkpointer(self.config, self.graph, record)
            self._reset(initial_state)
            self.started.set()  # a RunHandle may change the pools from here on
            next_step = self.stats.completed = self.checkpoints.restore(items, self.values, self.outputs)
        except BaseException:
            self._close()
            raise
        exhausted, expected = False, {p.name for p in self.graph.inputs}
        try:
            while True:
                while not exhausted and len(self.admitted) < self.window.size:
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
        except (FragmentError, BackendError) as exc:
            failure = exc
        except KeyboardInterrupt:
            threads.hurry()  # the exit does not wait for the fragment still running
            if self.checkpoints.path is None:
                raise
            raise KeyboardInterrupt(f"run interrupted after {self.checkpoints.prefix} steps; continue it with "
                                    f"run_dir={str(self.checkpoints.path)!r}, resume=True") from None
        else:
            failure = None
        finally:  # a run that ends, fails or is interrupted goes on from its last finished step
            self.checkpoints.stop(self.values, self.service.run_id)
            self._close()
        if failure is not None:
            raise RunFailed(str(failure), self._result(next_step)) from failure
        return self._result(next_step)

    def _reset(self, initial_state) -> None:
        """A fresh run's state; its job service, window and event queue are the elastic changes' from now on."""
        self.t0 = self.clock.now()
        self.events: queue.Queue[Event] = queue.Queue()
        self.admitted: dict[int, set[str]] = {}  # step -> fragments not yet done
        self.outputs: dict[int, dict] = {}
        self.running: set[tuple[str, int]] = set()
        self.replies: dict[tuple[str, int], dict[int, dict]] = {}  # replicated instance -> rank -> outputs
        self.busy = {"cpu": set(), "gpu": set()}  # taken worker slots
        self.spans: list[Span] = []
        c = self.config
        self.service = JobService(self.pools, c.jobs, clock=self.clock, t0=self.t0, record=self.spans.append,
                                  run_id=c.run_id or self.checkpoints.run_id,
                                  ledger=self.executor.ledger(c.budget, c.shot_budget, c.ledger or (
                                      c.run_dir and f"{c.run_dir}/ledger.jsonl")))
        self.stats = RunStats(self.config.executor.value)
        self.values = Values(self.graph, initial_state)
        self.window = Window(self.config, self.pools)
        self.elastic.attach(self.service, self.window, self.events)

    def _close(self) -> None:
        if self.service is not None:
            self.service.close()  # (and its ledger)
        try:
            self.moved = self.executor.moved()
        except Exception:  # noqa: BLE001 - a dead rendezvous actor: the figure is lost, not the run
            self.moved = {}
        self.executor.close()
        if self.checkpoints is not None:
            self.checkpoints.close()

    def _result(self, next_step: int) -> RunResult:
        """What completed: every finished step's outputs (in step order), the spans, the newest loop values."""
        steps, extra = sorted(self.outputs), self.stats.extra(next_step, self.service, self.pools, self.moved)
        spans = sorted(self.spans, key=lambda s: (s.start, str(s.row)))  # ties: by the lanes' text, as ever
        return RunResult([self.outputs[i] for i in steps], spans, self.values.newest(), self.clock.now() - self.t0,
                         extra, None if steps == list(range(next_step)) else steps)

    # -- admit and dispatch -----------------------------------------------------------
    def _admit(self, step: int, item: Mapping[str, Any]) -> None:
        self.checkpoints.admit(step, item)  # a resumed run checks that its stream is the same
        self.admitted[step] = {f.name for f in self.order}
        self.values.admit(step, item)
        self.stats.admitted(len(self.admitted))

    def _dispatch(self) -> None:
        """Start every ready instance that has a free slot: circuit calls first (their jobs go out before classical
        tasks compete for this process), lowest step first; one at a time under the sync executor."""
        one_at_a_time = self.config.executor.one_at_a_time
        for quantum in (True, False):
            for step in sorted(self.admitted):
                pending = self.admitted[step]
                for f, resource, replicas in self.sides[quantum]:
                    if one_at_a_time and self.running:
                        return
                    key = (f.name, step)
                    if f.name not in pending or key in self.running:
                        continue
                    if not quantum and len(self.busy[resource]) + replicas > self.slots[resource]:
                        continue
                    ready = self.values.inputs(f, step)
                    if ready is None:
                        continue
                    args, version = ready
                    self.running.add(key)
                    if quantum:
                        self._start_execute(f, step, args, version)
                    else:
                        self._start_task(f, step, args, version, resource, replicas)

    def _start_task(self, f: Fragment, step: int, args: dict, version: int | None, resource: str, size: int) -> None:
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

    # -- completions ------------------------------------------------------------------
    def _wait_and_handle(self, progress) -> None:
        if not self.running and self.events.empty():
            raise RuntimeError(f"scheduler stalled with steps {sorted(self.admitted)} unfinished (a bug: please report)")
        match self.clock.wait(self.events):
            case TaskDone() as event:
                self._task_done(event, progress)
            case CallDone() as event:
                self._execute_done(event, progress)
            case Wake():  # the slots changed (RunHandle.set_workers): dispatch again
                pass

    def _task_done(self, event: TaskDone, progress) -> None:
        f, step, version, lane, rank, fut = event.fragment, event.step, event.version, event.lane, event.rank, event.future
        self.busy[lane.kind].discard(lane.slot)
        start, end, resource, exc = event.start - self.t0, event.end - self.t0, Lane(lane.kind), fut.exception()
        replies = self.replies.get((f.name, step))
        if exc is not None:
            self.spans.append(Span(f.name, f.kind, resource, step, start, end, Outcome.error(exc), version, lane))
            if replies is not None:  # its peers wait in a reduction that cannot finish
                self.executor.rendezvous().abort(f"{self.service.run_id}/{f.name}/{step}/", f"replica {rank} failed: {exc}")
            if isinstance(exc, FragmentError):
                raise exc  # its cause stays the fragment's own exception ("raise exc from exc" would loop)
            raise FragmentError(f"fragment {f.name!r} step {step}: {exc}") from exc
        out, remote_spans, node = fut.result()
        self.spans.append(Span(f.name, f.kind, resource, step, start, end, OK, version, lane, node=node))
        # spans of jobs submitted in another process: times from the call's start
        self.spans += [dataclasses.replace(s, start=s.start + start, end=s.end + start) for s in remote_spans]
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
        f, step = event.fragment, event.step
        self.running.discard((f.name, step))
        try:  # the job's error (the service's futures hold Exceptions only), or its outputs'
            out = self.executor.circuit_outputs(f, event.future.result(), event.post)
        except Exception as exc:
            raise FragmentError(f"fragment {f.name!r} step {step}: {exc}") from exc
        self._complete(f, step, out, progress)

    def _complete(self, f: Fragment, step: int, out: dict, progress) -> None:
        self.values.produced(f.name, step, out)
        pending = self.admitted[step]
        pending.discard(f.name)
        if pending:
            return
        del self.admitted[step]
        self.outputs[step] = self.values.finish(step)
        self.checkpoints.finished(self.outputs, self.values, self.service.run_id)
        self.values.forget(min(self.admitted, default=self.stats.completed))
        self.stats.completed += 1
        if progress is not None:
            progress(self.stats.completed, self.outputs[step])


def start(graph: Graph, stream: Iterable[Mapping[str, Any]] | int, *, backends: Mapping[str, Any] | None = None,
          initial_state: Mapping[PortRef | str, Any] | None = None, progress=None, config: SchedulerConfig | None = None,
          on_change=None, **options) -> RunHandle:
    """``run`` in a thread of its own: a :class:`RunHandle` at once; ``on_change(handle)`` follows each pool change."""
    return RunHandle(Scheduler(graph, backends, configure(config, options)), stream, initial_state, progress, on_change)


def run(graph: Graph, stream: Iterable[Mapping[str, Any]] | int, *, backends: Mapping[str, Any] | None = None,
        initial_state: Mapping[PortRef | str, Any] | None = None, progress=None, config: SchedulerConfig | None = None,
        record=None, **options) -> RunResult:
    """Run ``graph`` over ``stream`` with the overlap scheduler.

    ``backends`` maps a fragment's backend name to a backend, a registry name,
    ``(name, options)``, or a list of those (a pool). ``initial_state`` gives loop-carried sources
    their first value, by port (``hqflow.engine.ports.PortRef`` or ``"frag.port"``; a run's ``result.state``
    continues it). ``options`` are ``SchedulerConfig`` fields (``executor="ray"``, ``window=4``, ...); ``record``: the
    workload's own record, kept in the checkpoints of a ``run_dir`` (``hqflow.engine.checkpoint.Record``).
    """
    return Scheduler(graph, backends, configure(config, options)).run(stream, initial_state=initial_state,
                                                                      progress=progress, record=record)


__all__ = ["RunHandle", "Scheduler", "SchedulerConfig", "run", "start"]


def make_executor(config: SchedulerConfig):
    """The executor ``config`` names (``executor``), with its worker slots; the Ray one is imported only here."""
    c = config
    if c.executor is ExecutorKind.RAY:
        from .executors.ray import RayExecutor

        return RayExecutor(c.ray_num_cpus, c.cpu_workers, c.gpu_workers, c.ray_address, c.placement)
    return LocalExecutor(c.cpu_workers, c.gpu_workers) if c.executor is ExecutorKind.LOCAL else SyncExecutor()
