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

import itertools
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace


from hqflow.ir.graph import CircuitCall, Graph

from ..common.clock import SimClock
from ..engine.result import RunResult
from ..common.lanes import Lane
from ..engine.ports import PortRef
from .profile import BackendProfile, Profile
from .simulated import Host, SimBackend, SimExecutor, nested_calls
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


def pool_names(graph: Graph, profile: Profile) -> list[str]:
    """The pools a run of ``graph`` sends jobs to: its ``execute`` fragments', and those of the classical
    fragments that ``profile`` measured submitting jobs themselves."""
    names = [f.backend for f in graph.fragments if isinstance(f, CircuitCall)]
    return list(dict.fromkeys(names + [n[0] for n in nested_calls(graph, profile).values()]))


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
    nested = nested_calls(graph, profile)
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
    host = Host(clock, profile.cores)
    members = {name: [SimBackend(b, clock, host, profile.overhead, draw) for b in bs] for name, bs in chosen.items()}
    idle = BackendProfile(Lane("qpu", "unused"), Lane("qpu", "unused"), 0.0, 0.0, 0.0, 0.0, 0.0)
    pools = {name: members.get(name) or [SimBackend(idle, clock, host, 0.0, None)]  # pools the profile saw no job of
             for f in graph.fragments for name in ((f.backend,) if isinstance(f, CircuitCall) else f.job_backends)}
    retries = config.max_retries if config.job_timeout else 1 << 30
    cfg = replace(config, max_retries=retries, budget=None, shot_budget=None, ledger=None, run_dir=None, resume=False)
    executor = SimExecutor(profile, clock, host, n_rows, nested)
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
