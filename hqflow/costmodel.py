"""Predict a run's makespan, each resource's utilization and its spend, from profiles.

``predict(graph, steps, profile, config)`` runs the scheduler itself (``hqflow.scheduler``: its loop,
window, dispatch, job service and pools) on a simulated clock (``hqflow.clock.SimClock``), where
nothing is computed and everything takes the time the profile (``hqflow.profile``) says:

* a classical call holds its slot for its fragment's profiled mean plus the scheduler's overhead;
  one that submits jobs itself does so in rounds: a slice of its own work, then a job, and so on;
* a quantum job waits out its member's queue (in parallel with other jobs), then holds one of the
  member's devices for ``per_job + per_row * rows + per_shot * rows * shots``;
* where a member fails jobs, the run is simulated ``REPLAYS`` times with failures drawn from seeded
  generators (a failed job is retried by the job service's own rule) and the figures are averaged;
  with no failures one run is exact.

So a rule changed in the scheduler (window, quantum-first dispatch, slots, the pools' choice of member,
retries, their circuit breaker) changes the prediction with it. Not modelled: ``job_timeout`` (jobs
take their profiled time), budgets (``spend`` is predicted instead) and running out of retries.

The prediction also carries the overlap bound of a two-stage loop, ``N * max(C, D) + min(C, Q)``:
C a step's classical seconds, D its device seconds spread over the pool's devices, Q a job's
seconds with its queue (with one device and no queue, ``overlap.py``'s ``N * max(C, Q) + min(C, Q)``).
"""
from __future__ import annotations

import concurrent.futures as cf
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from hqflow.backends import BatchResult, Capabilities, CircuitBatch, FutureJob, JobFailed
from hqflow.ir.circuit import CircuitTemplate
from hqflow.ir.graph import CircuitCall, Graph

from .clock import SimClock
from .executors import SyncExecutor
from .profile import BackendProfile, Profile
from .scheduler import Scheduler, SchedulerConfig


REPLAYS = 8
"""simulated runs averaged where a member fails jobs: each draws its failures (a step waits for its slowest job)"""


@dataclass(frozen=True)
class Prediction:
    makespan: float
    """seconds from the first dispatch to the last completion"""
    utilization: dict = field(default_factory=dict)
    """busy seconds over makespan times slots: ``cpu``, ``gpu`` and each pool member's devices"""
    spend: float = 0.0
    """expected spend on priced jobs, retries included"""
    bound: float = 0.0
    """``N * max(C, Q) + min(C, Q)``: no schedule of this loop is faster"""
    jobs: int = 0
    """quantum jobs, retries not counted"""


@dataclass(frozen=True)
class _Price:  # what the job service reads of a cost estimate
    amount: float
    currency: str = "profiled"
    jobs: int = 1
    shots: int = 0


class _SimBackend:
    """A pool member as its profile says it behaves, on the simulated clock: ``devices`` jobs at once, each
    waiting out the queue, then holding the device that frees first. ``draw``: None folds a job's expected
    retries into its time (it never fails); a ``random.Random`` fails each attempt with the member's rate."""

    def __init__(self, profile: BackendProfile, clock: SimClock, overhead: float, draw: random.Random | None):
        self.p, self.clock, self.overhead, self.draw = profile, clock, overhead, draw
        self.name = profile.backend.removeprefix("qpu:")
        self.capabilities = Capabilities(self.name, 1 << 20, device="qpu")
        self.max_in_flight = max(1, profile.devices)
        self.devices = [0.0] * self.max_in_flight  # when each device is next free
        self.busy = 0.0
        if profile.price_per_job is not None:
            self.estimate_cost = self._estimate

    def _estimate(self, batch: CircuitBatch) -> _Price:
        """A first attempt's expected spend, its retries included (a retry adds nothing more)."""
        if batch.attempt:
            return _Price(0.0)
        return _Price(self.p.price(batch.size, batch.shots) / max(1e-9, 1.0 - min(self.p.failure_rate, 0.99)))

    def submit(self, batch: CircuitBatch) -> FutureJob:
        p, rows = self.p, batch.size
        hold = p.per_job + p.per_row * rows + p.per_shot * rows * (batch.shots or 0)
        if self.draw is None:
            hold /= max(1e-9, 1.0 - min(p.failure_rate, 0.99))
        d = min(range(len(self.devices)), key=self.devices.__getitem__)
        # the dispatch takes ``overhead``; a job sent ahead (prefetch) has it behind the running one
        end = max(self.clock.now() + self.overhead + p.queue, self.devices[d]) + hold
        self.devices[d] = end
        self.busy += hold
        future: cf.Future = cf.Future()

        def finish():
            if future.cancelled():
                return
            if self.draw is not None and self.draw.random() < p.failure_rate:
                future.set_exception(JobFailed(f"simulated failure on {self.name}"))
            else:
                future.set_result(BatchResult(values=np.zeros((rows, 0))))

        self.clock.at(end, finish)
        return FutureJob(future, self.name)


class _SimExecutor(SyncExecutor):
    """Fragment calls that compute nothing and take their profiled time on the simulated clock."""

    def __init__(self, profile: Profile, clock: SimClock, rows: dict, nested: dict):
        super().__init__()
        self.profile, self.clock, self.rows, self.nested = profile, clock, rows, nested

    def submit(self, fragment, args, resource, client=None, replica=None, kept=()) -> cf.Future:
        future: cf.Future = cf.Future()
        outputs = ({p.name: None for p in fragment.outputs}, [], None)
        now, overhead = self.clock.now(), self.profile.overhead
        if fragment.name not in self.nested or client is None:
            self.clock.at(now + self.profile.fragment(fragment.name).seconds + overhead,
                          lambda: future.set_result(outputs))
            return future
        pool, rounds, size, piece = self.nested[fragment.name]
        batch = CircuitBatch(CircuitTemplate(1, ()), np.zeros((size, 0)), np.zeros(0))

        def round_(left: int) -> None:  # a slice of the call's own work is done: its job goes out
            job = client.submit(pool, batch)
            job.add_done_callback(lambda job: future.set_exception(job.exception()) if job.exception() else
                                  self.clock.at(self.clock.now() + piece, lambda: round_(left - 1)) if left > 1 else
                                  future.set_result(outputs))

        self.clock.at(now + piece + overhead, lambda: round_(rounds))
        return future

    def circuit_batch(self, fragment, args, seed):
        c = fragment.circuit
        stand_in = CircuitTemplate(c.n_qubits, (), shots=c.shots, name=c.name)
        return CircuitBatch(stand_in, np.zeros((self.rows[fragment.name], 0)), np.zeros(0), c.shots, seed), None

    def circuit_outputs(self, fragment, result, post) -> dict:
        return {p.name: None for p in fragment.outputs}


def _nested(graph: Graph, profile: Profile) -> dict:
    """Classical fragments that submit jobs themselves: name -> (pool, rounds, rows per job, seconds per round)."""
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
            out[f.name] = (f.job_backends[0], rounds, max(1, round(p.rows)), p.classical / rounds)
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
                  else [b for b in profile.backends if b.pool == f"qpu:{name}"])
        if not chosen:
            raise ValueError(f"no profile of a backend in pool {name!r}: calibrate with a run that uses it, "
                             f"or name its members")
        pools[name] = chosen
    return pools


def predict(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig = SchedulerConfig(), *,
            rows: int | Mapping[str, int] = 1, members: Mapping[str, Sequence[str]] | None = None) -> Prediction:
    """The predicted run of ``graph`` over ``steps`` stream items under ``config`` (see the module docstring).

    ``rows``: circuits per step of each ``execute`` fragment (one number for all, or by fragment name);
    ``members``: the pool members to use, by pool name (default: every profiled member of the pool).
    """
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
    runs = [_simulate(graph, steps, profile, config, chosen, nested, n_rows, draw) for draw in draws]
    makespan = sum(r[0] for r in runs) / len(runs)
    utilization = {k: sum(r[1].get(k, 0.0) for r in runs) / len(runs) for k in runs[0][1]}
    seconds = {f.name: profile.fragment(f.name).seconds + profile.overhead
               for f in graph.fragments if not isinstance(f, CircuitCall)}
    cut = {name: min(n, config.rows_per_job or n) for name, n in n_rows.items()}
    cut.update({name: min(n[2], config.rows_per_job or n[2]) for name, n in nested.items()})
    bound = _bound(graph.topological_order(), steps, seconds, n_rows, cut, chosen, nested,
                   {"cpu": config.cpu_workers, "gpu": config.gpu_workers})
    return Prediction(makespan, utilization, runs[0][2], bound, runs[0][3])


def _simulate(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig, chosen: dict, nested: dict,
              n_rows: dict, draw: random.Random | None) -> tuple[float, dict, float, int]:
    """One simulated run: (makespan, utilization, spend, first attempts)."""
    clock = SimClock()
    members = {name: [_SimBackend(b, clock, profile.overhead, draw) for b in bs] for name, bs in chosen.items()}
    idle = BackendProfile("qpu:unused", "qpu:unused", 0.0, 0.0, 0.0, 0.0, 0.0)
    pools = {name: members.get(name) or [_SimBackend(idle, clock, 0.0, None)]  # pools the profile saw no job of
             for f in graph.fragments for name in ((f.backend,) if isinstance(f, CircuitCall) else f.job_backends)}
    cfg = replace(config, job_timeout=None, max_retries=1 << 30, budget=None, run_dir=None, resume=False)
    executor = _SimExecutor(profile, clock, n_rows, nested)
    stream = ({p.name: None for p in graph.inputs} for _ in range(steps))  # the values matter to no one
    unset = {f"{e.src[0]}.{e.src[1]}": 0.0 for e in graph.edges if e.loop and e.init is None}  # given at run time
    result = Scheduler(graph, pools, cfg, executor=executor, clock=clock).run(stream, initial_state=unset)
    makespan = result.seconds
    slots = {"cpu": config.cpu_workers, "gpu": config.gpu_workers}
    used = {"cpu": 0.0, "gpu": 0.0}
    for s in result.spans:
        if s.resource in used and s.parent_lane is None:
            used[s.resource] += s.end - s.start
    utilization = {r: used[r] / (makespan * slots[r]) if makespan else 0.0 for r in used if used[r]}
    for name, backends in members.items():
        for b in backends:
            utilization[b.p.backend] = b.busy / (makespan * len(b.devices)) if makespan else 0.0
    stats = result.extra
    return makespan, utilization, stats.get("spend") or 0.0, stats["quantum_jobs"] - stats["retries"]


def calibrate(graph: Graph, spans: list, profile: Profile, config: SchedulerConfig = SchedulerConfig(), *,
              rows: int | Mapping[str, int] = 1, members: Mapping[str, Sequence[str]] | None = None) -> Profile:
    """``profile`` with the scheduler's own overhead per dispatched job or call: the figure at which
    :func:`predict` gives the makespan that ``spans`` (a run of ``graph`` under ``config``) measured.
    The first quarter of the steps (at least step 0) is left out on both sides: it warms caches,
    compiles programs and starts threads."""
    total = max((s.step for s in spans), default=-1) + 1
    warm = max(1, total // 4)
    later = [s for s in spans if s.step >= warm]
    steps = total - warm
    if steps < 1 or not later:
        return profile
    measured = max(s.end for s in later) - min(s.start for s in later)
    low, high = 0.0, 0.05
    for _ in range(30):  # bisection: the makespan grows with the overhead
        mid = (low + high) / 2
        guess = predict(graph, steps, replace(profile, overhead=mid), config, rows=rows, members=members).makespan
        low, high = (mid, high) if guess < measured else (low, mid)
    return replace(profile, overhead=low)


def _bound(order, steps: int, seconds: dict, n_rows: dict, cut: dict, pools: dict, nested: dict,
           slots: dict) -> float:
    """``N * max(C, D) + min(C, Q)``: C a step's classical seconds on its busiest resource (per worker
    slot), D its device seconds spread over the pools' devices (the QPUs' throughput), Q one job's
    seconds (``cut`` rows), queue included (the loop's fill). A fragment's own jobs count in D and Q,
    its seconds outside them in C."""
    c, d, q = 0.0, 0.0, 0.0
    per = {"cpu": 0.0, "gpu": 0.0}

    def job(pool, n, k):
        jobs = -(-n // k) if k else 1
        best = min(pool, key=lambda m: m.per_job * jobs + m.per_row * n)
        return ((best.per_job * jobs + best.per_row * n) / sum(max(1, m.devices) for m in pool),
                min(m.queue + m.per_job + m.per_row * k for m in pool))

    for f in order:
        if isinstance(f, CircuitCall):
            dd, qq = job(pools[f.backend], n_rows[f.name], cut[f.name])
            d, q = d + dd, q + qq
        elif f.name in nested:
            pool_name, rounds, size, piece = nested[f.name]
            dd, qq = job(pools[pool_name], size, cut[f.name])
            c, d, q = c + piece * rounds, d + dd * rounds, q + qq
            per["gpu" if f.resource == "gpu" else "cpu"] += piece * rounds
        else:
            c += seconds[f.name]
            per["gpu" if f.resource == "gpu" else "cpu"] += seconds[f.name]
    busiest = max(per[r] / slots[r] for r in per)
    return steps * max(busiest, d) + min(c, q) if steps else 0.0


__all__ = ["Prediction", "calibrate", "pool_names", "predict"]
