"""Predict a run's makespan, each resource's utilization and its spend, from a profile.

``predict(graph, steps, profile, config)`` runs the scheduler itself (its loop, window, dispatch, job
service and pools) on a simulated clock (``hqflow.common.clock.SimClock``), where nothing is computed and
everything takes the time the profile says. A classical call holds its slot for its profiled mean
plus the scheduler's overhead (one that submits jobs itself alternates slices of its own work and
jobs); a quantum job waits out its member's queue, then holds a device for ``per_job + per_row * rows
+ per_shot * rows * shots``; work computed on this machine shares its CPUs. Where a member fails jobs,
``REPLAYS`` runs with seeded failures are averaged. So a rule changed in the scheduler changes the
prediction with it. What the jobs use on their services is counted by the simulated job service from each
job's ``usage``: its rows as circuits, its shots (a fragment's own jobs: the profile's shots per circuit),
and its service jobs as the profile fitted them (else one a job). ``job_timeout`` times jobs out as in a run (one
that runs out of retries raises ``RunFailed``); without it retries never run out. Budgets: ``spend`` is predicted.
"""
from __future__ import annotations

import concurrent.futures as cf
import itertools
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from hqflow.backends import Backend, BatchResult, Capabilities, CircuitBatch, Cost, FutureJob, JobFailed, Usage
from hqflow.ir.circuit import CircuitTemplate
from hqflow.ir.graph import CircuitCall, Graph

from ..common.clock import SimClock
from ..engine.executors import SyncExecutor
from ..engine.result import RunResult
from ..common.lanes import Lane
from ..engine.ports import PortRef
from .profile import BackendProfile, Profile
from ..engine.scheduler import Scheduler, SchedulerConfig


REPLAYS = 8
"""simulated runs averaged where a member fails jobs: each draws its failures (a step waits for its slowest job)"""


@dataclass(frozen=True)
class Prediction:
    makespan: float
    """seconds from the first dispatch to the last completion"""
    utilization: dict = field(default_factory=dict)
    """busy seconds over makespan times slots: ``cpu``, ``gpu`` and each pool member (by its lane's text)"""
    spend: float = 0.0
    """expected spend on priced jobs, retries included"""
    bound: float = 0.0
    """``N * max(C, D) + min(C, Q)``, no schedule of this loop is faster: C a step's classical seconds, D its
    device seconds spread over the pools' devices, Q a job's seconds with its queue"""
    jobs: int = 0
    """quantum jobs, retries not counted"""
    service_jobs: int = 0
    """service jobs the jobs create (``BackendProfile.service_jobs``), retries included"""
    circuits: int = 0
    """circuits the jobs run (their rows), retries included"""
    shots: int = 0
    """shots over those circuits (0: exact values); ``spend`` is their list price where the members are priced"""


class _Host:
    """This machine's CPUs, shared (processor sharing): while ``n`` pieces of work compute here at once, each
    progresses at ``min(1, cores / n)`` of its full speed (``cores`` None: full speed)."""

    def __init__(self, clock: SimClock, cores: float | None):
        self.clock, self.cores = clock, cores
        self.running: dict[int, list] = {}  # token -> [CPU seconds left, what to call when done]
        self.last, self.generation = 0.0, 0
        self.tokens = itertools.count()

    def run(self, work: float, then) -> None:
        """Compute ``work`` CPU seconds, then call ``then()``."""
        if self.cores is None or work <= 0:
            self.clock.at(self.clock.now() + max(0.0, work), then)
            return
        self._advance()
        self.running[next(self.tokens)] = [work, then]
        self._next()

    def _rate(self) -> float:
        return min(1.0, self.cores / max(1, len(self.running)))

    def _advance(self) -> None:
        now = self.clock.now()
        done = (now - self.last) * self._rate()
        for piece in self.running.values():
            piece[0] -= done
        self.last = now

    def _next(self) -> None:
        """Be woken when the piece with the least left ends (a later change of ``n`` makes a new wake-up)."""
        self.generation += 1
        if self.running:
            token = min(self.running, key=lambda t: self.running[t][0])
            generation = self.generation
            self.clock.at(self.clock.now() + max(0.0, self.running[token][0]) / self._rate(),
                          lambda: self._wake(generation, token))

    def _wake(self, generation: int, token: int) -> None:
        if generation != self.generation:
            return
        self._advance()
        # the piece this wake-up was for ends now, whatever rounding left of it (a clock far from 0 cannot
        # step by less than its own precision), and so does any piece within that precision of its end
        tolerance = 1e-9 * max(1.0, self.clock.now())
        ended = [t for t, piece in self.running.items() if t == token or piece[0] <= tolerance]
        calls = [self.running.pop(t)[1] for t in ended]
        self._next()
        for then in calls:
            then()


class _SimBackend(Backend):
    """A pool member as its profile says, on the simulated clock: ``devices`` jobs at once, each after the queue,
    ending when both its device time and its computation here (``_Host``) are done. ``draw``: None folds a
    job's expected retries into its time; a ``random.Random`` fails attempts."""

    def __init__(self, profile: BackendProfile, clock: SimClock, host: _Host, overhead: float,
                 draw: random.Random | None):
        self.p, self.clock, self.host, self.overhead, self.draw = profile, clock, host, overhead, draw
        self.name, self.fails = profile.backend.name, min(profile.failure_rate, 0.99)  # a job ends some day
        self.capabilities = Capabilities(self.name, 1 << 20, device="qpu")
        self.max_in_flight = max(1, profile.devices)
        self.free = self.max_in_flight
        self.ready: list = []  # jobs out of the queue, waiting for a device, in order
        self.busy = 0.0
        self.priced = profile.price_per_job is not None

    def estimate_cost(self, batch: CircuitBatch) -> Cost:
        """A first attempt's expected spend, its retries included (a retry adds nothing more), in the profile's
        currency ("profiled")."""
        amount = 0.0 if batch.attempt else self.p.price(batch.size, batch.shots) / max(1e-9, 1.0 - self.fails)
        return Cost(amount, "profiled", 1)

    def usage(self, batch: CircuitBatch) -> Usage:
        """Its rows as circuits, and the service jobs the profile fitted for that many rows."""
        return Usage.of(batch, self.p.service_jobs(batch.size))

    def submit(self, batch: CircuitBatch) -> FutureJob:
        future: cf.Future = cf.Future()
        # the dispatch takes ``overhead``; a job sent ahead (prefetch) has it behind the running one
        self.clock.at(self.clock.now() + self.overhead + self.p.queue, lambda: self._queued(batch, future))
        return FutureJob(future, self.name)

    def _queued(self, batch: CircuitBatch, future: cf.Future) -> None:
        self.ready.append((batch, future))
        self._start()

    def _start(self) -> None:
        while self.free and self.ready:
            batch, future = self.ready.pop(0)
            self.free -= 1
            p, rows = self.p, batch.size
            retries = 1.0 if self.draw is not None else 1.0 / max(1e-9, 1.0 - self.fails)
            hold = (p.per_job + p.per_row * rows + p.per_shot * rows * (batch.shots or 0)) * retries
            start, parts = self.clock.now(), [2]

            def part_done(batch=batch, future=future, start=start, parts=parts):
                parts[0] -= 1
                if not parts[0]:
                    self._finish(batch, future, start)

            self.clock.at(start + hold, part_done)
            self.host.run(p.compute(rows, batch.shots) * retries, part_done)

    def _finish(self, batch: CircuitBatch, future: cf.Future, start: float) -> None:
        self.busy += self.clock.now() - start
        self.free += 1
        if not future.cancelled():
            if self.draw is not None and self.draw.random() < self.fails:
                future.set_exception(JobFailed(f"simulated failure on {self.name}"))
            else:
                future.set_result(BatchResult(values=np.zeros((batch.size, 0))))
        self._start()


class _SimExecutor(SyncExecutor):
    """Fragment calls that compute nothing: after the scheduler's overhead, each takes its profiled seconds,
    on this machine's shared CPUs (``_Host``) for a ``cpu`` call."""

    def __init__(self, profile: Profile, clock: SimClock, host: _Host, rows: dict, nested: dict):
        super().__init__()
        self.profile, self.clock, self.host, self.rows, self.nested = profile, clock, host, rows, nested
        self.elsewhere = _Host(clock, None)

    def submit(self, fragment, args, resource, client=None, replica=None, kept=()) -> cf.Future:
        future: cf.Future = cf.Future()
        outputs = ({p.name: None for p in fragment.outputs}, [], None)
        now, overhead = self.clock.now(), self.profile.overhead
        host = self.host if resource == "cpu" else self.elsewhere
        if fragment.name not in self.nested or client is None:
            seconds = self.profile.fragment(fragment.name).seconds
            self.clock.at(now + overhead, lambda: host.run(seconds, lambda: future.set_result(outputs)))
            return future
        pool, rounds, size, piece, shots = self.nested[fragment.name]
        batch = CircuitBatch(CircuitTemplate(1, ()), np.zeros((size, 0)), np.zeros(0), shots or None)

        def round_(left: int) -> None:  # a slice of the call's own work is done: its job goes out
            job = client.submit(pool, batch)
            job.add_done_callback(lambda job: future.set_exception(job.exception()) if job.exception() else
                                  host.run(piece, lambda: round_(left - 1)) if left > 1 else
                                  future.set_result(outputs))

        self.clock.at(now + overhead, lambda: host.run(piece, lambda: round_(rounds)))
        return future

    def circuit_batch(self, fragment, args, seed):
        c = fragment.circuit
        stand_in = CircuitTemplate(c.n_qubits, (), shots=c.shots, name=c.name)
        return CircuitBatch(stand_in, np.zeros((self.rows[fragment.name], 0)), np.zeros(0), c.shots, seed), None

    def circuit_outputs(self, fragment, result, post) -> dict:
        return {p.name: None for p in fragment.outputs}


def _nested(graph: Graph, profile: Profile) -> dict:
    """Classical fragments that submit jobs themselves: name -> (pool, rounds, rows per job, seconds per round,
    shots per circuit)."""
    out = {}
    for f in graph.fragments:
        if isinstance(f, CircuitCall) or not f.job_backends:
            continue
        try:
            p = profile.fragment(f.name)
        except KeyError:
            continue
        if p.jobs > 0 and p.classical is not None:
            rounds = max(1, round(p.jobs))
            out[f.name] = (f.job_backends[0], rounds, max(1, round(p.rows)), p.classical / rounds, round(p.shots))
    return out


def pool_names(graph: Graph, profile: Profile) -> list[str]:
    """The pools a run of ``graph`` sends jobs to: its ``execute`` fragments', and those of the classical
    fragments that ``profile`` measured submitting jobs themselves."""
    names = [f.backend for f in graph.fragments if isinstance(f, CircuitCall)]
    return list(dict.fromkeys(names + [n[0] for n in _nested(graph, profile).values()]))


def _members(graph: Graph, profile: Profile, members: Mapping[str, Sequence[str]] | None) -> dict:
    """pool name -> the profiles of its members in the run."""
    pools = {}
    for name in pool_names(graph, profile):
        given = (members or {}).get(name)
        chosen = ([profile.backend(n) for n in given] if given is not None
                  else [b for b in profile.backends if b.pool.name == name])
        if not chosen:
            raise ValueError(f"no profile of a backend in pool {name!r}: calibrate with a run that uses it, "
                             f"or name its members")
        pools[name] = chosen
    return pools


def predict(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig = SchedulerConfig(), *,
            rows: int | Mapping[str, int] = 1, members: Mapping[str, Sequence[str]] | None = None) -> Prediction:
    """The predicted run of ``graph`` over ``steps`` stream items under ``config`` (see the module docstring).

    ``rows``: circuits per step of each ``execute`` fragment (one number for all, or by fragment name);
    ``members``: the pool members to use, by pool name: their lanes in the profile, or their names
    (``hqflow.common.lanes.member``; default: every profiled member of the pool).
    """
    runs, chosen, nested, n_rows = _runs(graph, steps, profile, config, rows, members)
    makespan = sum(r[1] for r in runs) / len(runs)
    utilization = {k: sum(r[2].get(k, 0.0) for r in runs) / len(runs) for k in runs[0][2]}
    bound = _bound(graph, steps, profile, config, chosen, nested, n_rows)
    used = {k: round(sum(r[0].extra.get(k, 0) for r in runs) / len(runs)) for k in ("service_jobs", "circuits", "shots")}
    return Prediction(makespan, utilization, runs[0][3], bound, runs[0][4], **used)


def simulate(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig = SchedulerConfig(), *,
             rows: int | Mapping[str, int] = 1, members: Mapping[str, Sequence[str]] | None = None) -> RunResult:
    """The simulated run behind :func:`predict` (the first, where failures are drawn): its spans are the
    predicted trace (``hqflow.trace``: draw it, export it, compare it with a measured one); its outputs
    hold nothing."""
    return _runs(graph, steps, profile, config, rows, members)[0][0][0]


def _runs(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig, rows, members):
    """The simulated runs a prediction averages, the pools' members, ``_nested`` and each circuit call's rows."""
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    for f in graph.fragments:  # a clear error before any run: every classical fragment needs its profile
        if not isinstance(f, CircuitCall):
            profile.fragment(f.name)
    chosen = _members(graph, profile, members)
    nested = _nested(graph, profile)
    n_rows = {f.name: rows if isinstance(rows, int) else rows[f.name] for f in graph.fragments
              if isinstance(f, CircuitCall)}
    draws = [None] if not any(b.failure_rate > 0 for bs in chosen.values() for b in bs) else \
        [random.Random(k) for k in range(REPLAYS)]
    return [_simulate(graph, steps, profile, config, chosen, nested, n_rows, draw) for draw in draws], chosen, \
        nested, n_rows


def _simulate(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig, chosen: dict, nested: dict,
              n_rows: dict, draw: random.Random | None) -> tuple[RunResult, float, dict, float, int]:
    """One simulated run: (its result, makespan, utilization, spend, first attempts)."""
    clock = SimClock()
    host = _Host(clock, profile.cores)
    members = {name: [_SimBackend(b, clock, host, profile.overhead, draw) for b in bs] for name, bs in chosen.items()}
    idle = BackendProfile(Lane("qpu", "unused"), Lane("qpu", "unused"), 0.0, 0.0, 0.0, 0.0, 0.0)
    pools = {name: members.get(name) or [_SimBackend(idle, clock, host, 0.0, None)]  # pools the profile saw no job of
             for f in graph.fragments for name in ((f.backend,) if isinstance(f, CircuitCall) else f.job_backends)}
    retries = config.max_retries if config.job_timeout else 1 << 30
    cfg = replace(config, max_retries=retries, budget=None, shot_budget=None, ledger=None, run_dir=None, resume=False)
    executor = _SimExecutor(profile, clock, host, n_rows, nested)
    stream = ({p.name: None for p in graph.inputs} for _ in range(steps))  # the values matter to no one
    unset = {PortRef(*e.src): 0.0 for e in graph.edges if e.loop and e.init is None}  # given at run time
    result = Scheduler(graph, pools, cfg, executor=executor, clock=clock).run(stream, initial_state=unset)
    makespan = result.seconds
    slots = {"cpu": config.cpu_workers, "gpu": config.gpu_workers}
    used = {"cpu": 0.0, "gpu": 0.0}
    for s in result.spans:
        if s.resource.kind in used and s.parent_lane is None:
            used[s.resource.kind] += s.end - s.start
    utilization = {r: used[r] / (makespan * slots[r]) if makespan else 0.0 for r in used if used[r]}
    for b in itertools.chain.from_iterable(members.values()):
        utilization[str(b.p.backend)] = b.busy / (makespan * b.max_in_flight) if makespan else 0.0
    stats = result.extra
    return result, makespan, utilization, stats.get("spend") or 0.0, stats["quantum_jobs"] - stats["retries"]


def calibrate(graph: Graph, spans: list, profile: Profile, config: SchedulerConfig = SchedulerConfig(), *,
              rows: int | Mapping[str, int] = 1, members: Mapping[str, Sequence[str]] | None = None) -> Profile:
    """``profile`` with the scheduler's own overhead per dispatched job or call: the figure at which the
    simulated run takes as long as ``spans`` (a run of ``graph`` under ``config``) measured, both timed
    after their first quarter of steps (:func:`_after_warm_up`)."""
    return _fit(graph, spans, profile, "overhead", config, rows, members, 0.0, 0.05)


def calibrate_cores(graph: Graph, spans: list, profile: Profile, config: SchedulerConfig = SchedulerConfig(), *,
                    rows: int | Mapping[str, int] = 1, members: Mapping[str, Sequence[str]] | None = None) -> Profile:
    """``profile`` with the CPUs the run's own work got at once (``Profile.cores``; with Python's GIL often
    far fewer than the machine has): the figure, from 1 to this machine's count, at which the simulated run
    takes as long as ``spans`` measured, a run that computed side by side. ``profile`` as it is where the
    CPUs hardly matter to that run (its two ends differ by under 2%) or neither end explains its time."""
    most = float(os.cpu_count() or 1)
    return profile if most <= 1.0 else _fit(graph, spans, profile, "cores", config, rows, members, 1.0, most)


def _fit(graph, spans, profile: Profile, name: str, config, rows, members, low: float, high: float) -> Profile:
    """``profile`` with its figure ``name`` bisected in ``[low, high]`` (the time grows with the overhead and
    falls with the cores), for :func:`calibrate` and :func:`calibrate_cores`; as it is for too few steps."""
    total = max((s.step for s in spans), default=-1) + 1
    warm = max(1, total // 4)
    measured = _after_warm_up(spans, warm)
    if measured is None:
        return profile

    def timed(figure: float) -> float:  # the simulated run's seconds after its warm-up, averaged over its runs
        runs = _runs(graph, total, replace(profile, **{name: figure}), config, rows, members)[0]
        return sum(_after_warm_up(r[0].spans, warm) or 0.0 for r in runs) / len(runs)

    grows = name == "overhead"
    if not grows:
        one, every = timed(low), timed(high)
        if one - every < 0.02 * measured or not every <= measured <= one:
            return profile
    for _ in range(30):
        mid = (low + high) / 2
        if (timed(mid) < measured) == grows:
            low = mid
        else:
            high = mid
    return replace(profile, **{name: low if grows else high})


def _after_warm_up(spans, warm: int) -> float | None:
    """Seconds from the end of the last span of the first ``warm`` steps (they warm caches, compile programs
    and start threads) to the end of the run; None where no step follows them."""
    before = [s.end for s in spans if s.step < warm]
    after = [s.end for s in spans if s.step >= warm]
    return max(after) - max(before) if before and after and max(after) > max(before) else None


def _bound(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig, pools: dict, nested: dict,
           n_rows: dict) -> float:
    """``Prediction.bound``: C on the busiest resource per worker slot, Q's rows cut by ``rows_per_job``; a
    fragment's own jobs count in D and Q, its seconds outside them in C."""
    c, d, q = 0.0, 0.0, 0.0
    per = {"cpu": 0.0, "gpu": 0.0}

    def job(pool, n):
        k = min(n, config.rows_per_job or n)
        jobs = -(-n // k) if k else 1
        best = min(pool, key=lambda m: m.per_job * jobs + m.per_row * n)
        return ((best.per_job * jobs + best.per_row * n) / sum(max(1, m.devices) for m in pool),
                min(m.queue + m.per_job + m.per_row * k for m in pool))

    for f in graph.topological_order():
        if isinstance(f, CircuitCall):
            dd, qq = job(pools[f.backend], n_rows[f.name])
            d, q = d + dd, q + qq
            continue
        if f.name in nested:
            pool_name, rounds, size, piece, _ = nested[f.name]
            dd, qq = job(pools[pool_name], size)
            own, d, q = piece * rounds, d + dd * rounds, q + qq
        else:
            own = profile.fragment(f.name).seconds + profile.overhead
        c += own
        per["gpu" if f.resource == "gpu" else "cpu"] += own
    busiest = max(per["cpu"] / config.cpu_workers, per["gpu"] / config.gpu_workers)
    return steps * max(busiest, d) + min(c, q) if steps else 0.0


__all__ = ["Prediction", "calibrate", "calibrate_cores", "pool_names", "predict", "simulate"]
