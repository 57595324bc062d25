"""Predict a run's makespan, each resource's utilization and its spend, from profiles.

``predict(graph, steps, profile, config)`` replays the scheduler's rules (``hqflow.scheduler``)
as a discrete-event simulation over the profiled times (``hqflow.profile``), without running
anything:

* steps are admitted up to the window (one at a time, and one thing at a time, under ``sync``);
* an instance is ready when its step's inputs are done and its loop-carried inputs are at most
  ``max_staleness`` versions old; quantum work is dispatched first, then the lowest steps;
* a classical fragment holds one of its resource's slots (a replicated ``learn`` holds ``learners``
  of them) for its profiled mean;
* an ``execute`` fragment's step is cut into jobs of at most ``rows_per_job`` rows; each goes to the
  pool member that would finish it first, among those with fewer than ``devices + prefetch`` jobs
  in flight. It waits out the member's queue in
  parallel with other jobs, then holds one of its devices for ``per_job + per_row * rows +
  per_shot * rows * shots``. Where a member fails jobs, the replay is run ``REPLAYS`` times with
  seeded draws of the failures (a failed job runs again, on another member where there is one, as
  the job service retries it) and averaged: a step cut into jobs waits for its slowest.

The prediction also carries the overlap bound of a two-stage loop, ``N * max(C, D) + min(C, Q)``:
C a step's classical seconds, D its device seconds spread over the pool's devices, Q a job's
seconds with its queue (with one device and no queue, ``overlap.py``'s ``N * max(C, Q) + min(C, Q)``).
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from hqflow.ir.graph import CircuitCall, Graph

from .profile import BackendProfile, Profile
from .scheduler import SchedulerConfig


REPLAYS = 8
"""replays averaged where a member fails jobs: each draws its failures (a step waits for its slowest job)"""


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


class _Member:
    def __init__(self, profile: BackendProfile, prefetch: int):
        self.p = profile
        self.devices = [0.0] * max(1, profile.devices)  # when each device is next free
        self.capacity = len(self.devices) + prefetch
        self.in_flight = 0
        self.busy = 0.0

    def finish(self, now: float, rows: int, shots: int | None, overhead: float = 0.0,
               retries: bool = True) -> tuple[float, float, int]:
        """When a job submitted ``now`` would end, the time it holds a device, and which device;
        ``retries``: with the expected retries folded in (else one attempt)."""
        hold = (self.p.per_job + self.p.per_row * rows + self.p.per_shot * rows * (shots or 0)) \
            / (max(1e-9, 1.0 - min(self.p.failure_rate, 0.99)) if retries else 1.0)
        d = min(range(len(self.devices)), key=self.devices.__getitem__)
        # the dispatch takes ``overhead``; a job sent ahead (prefetch) has it behind the running one
        return max(now + overhead + self.p.queue, self.devices[d]) + hold, hold, d


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


def _pools(graph: Graph, profile: Profile, members: Mapping[str, Sequence[str]] | None, prefetch: int,
           nested: dict) -> dict:
    pools = {}
    for name in pool_names(graph, profile):
        given = (members or {}).get(name)
        chosen = ([profile.backend(n) for n in given] if given is not None
                  else [b for b in profile.backends if b.pool == f"qpu:{name}"])
        if not chosen:
            raise ValueError(f"no profile of a backend in pool {name!r}: calibrate with a run that uses it, "
                             f"or name its members")
        pools[name] = [_Member(b, prefetch) for b in chosen]
    return pools


def predict(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig = SchedulerConfig(), *,
            rows: int | Mapping[str, int] = 1, members: Mapping[str, Sequence[str]] | None = None) -> Prediction:
    """The predicted run of ``graph`` over ``steps`` stream items under ``config`` (see the module docstring).

    ``rows``: circuits per step of each ``execute`` fragment (one number for all, or by fragment name);
    ``members``: the pool members to use, by pool name (default: every profiled member of the pool).
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if not any(b.failure_rate > 0 for b in profile.backends):
        return _replay(graph, steps, profile, config, rows, members, None)
    runs = [_replay(graph, steps, profile, config, rows, members, random.Random(k)) for k in range(REPLAYS)]
    return Prediction(sum(r.makespan for r in runs) / REPLAYS,
                      {k: sum(r.utilization.get(k, 0.0) for r in runs) / REPLAYS for k in runs[0].utilization},
                      runs[0].spend, runs[0].bound, runs[0].jobs)


def _replay(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig, rows, members, draw) -> Prediction:
    """One replay; ``draw``: None folds each job's expected retries into its time, a ``random.Random``
    draws its failures (a failed job runs again, on another member where there is one)."""
    order = graph.topological_order()
    nested = _nested(graph, profile)
    pools = _pools(graph, profile, members, config.prefetch, nested)
    sync = config.executor == "sync"
    in_flight = sum(m.capacity for pool in pools.values() for m in pool)
    window = 1 if sync else config.window or max(8, 2 * in_flight + 2)
    slots = {"cpu": config.cpu_workers, "gpu": config.gpu_workers}
    seconds = {f.name: profile.fragment(f.name).seconds + profile.overhead for f in order
               if not isinstance(f, CircuitCall)}
    n_rows = {f.name: rows if isinstance(rows, int) else rows[f.name] for f in order
              if isinstance(f, CircuitCall)}
    inputs = {f.name: [e for e in graph.edges if e.dst[0] == f.name and e.src[0] is not None] for f in order}

    done: dict[str, int] = {f.name: 0 for f in order}  # steps done in order (loop sources run in order)
    finished: set[tuple[str, int]] = set()
    running: set[tuple[str, int]] = set()
    busy = {"cpu": 0, "gpu": 0}
    used = {"cpu": 0.0, "gpu": 0.0}
    events: list = []
    tick = itertools.count()
    now, admitted, next_step, spend, jobs = 0.0, {}, 0, 0.0, 0
    waiting: dict[str, list] = {name: [] for name in pools}  # jobs past every member's capacity
    remaining: dict[tuple[str, int], int] = {}  # an instance's jobs (of its step, or of its round) not yet done
    rounds: dict[tuple[str, int], int] = {}  # a nested call's rounds not yet done
    began: dict[tuple[str, int], float] = {}  # when a classical call took its slot

    def ready(f, step) -> bool:
        for e in inputs[f.name]:
            if e.loop:
                if done[e.src[0]] < step - e.max_staleness:
                    return False
            elif (e.src[0], step) not in finished:
                return False
        return True

    def parts(n: int) -> list[int]:
        """The rows of each job ``n`` circuits are cut into (``rows_per_job``)."""
        cut = config.rows_per_job or n
        return [min(cut, n - lo) for lo in range(0, n, max(1, cut))] or [0]

    def submit(f, step, pool_name: str, size: int, avoid=None) -> None:
        nonlocal spend, jobs
        pool = pools[pool_name]
        open_ = [m for m in pool if m.in_flight < m.capacity]
        if not open_:
            waiting[pool_name].append((f, step, pool_name, size, avoid))
            return
        open_ = [m for m in open_ if m is not avoid] or open_  # a retry goes elsewhere where it can
        shots = f.circuit.shots if isinstance(f, CircuitCall) and f.circuit is not None else None
        (end, hold, d), member = min(((m.finish(now, size, shots, profile.overhead, draw is None), m) for m in open_),
                                     key=lambda pair: pair[0][0])
        member.devices[d], member.in_flight = end, member.in_flight + 1
        member.busy += hold
        if avoid is None:  # a first attempt: its expected spend, retries included
            spend += member.p.price(size, shots) / max(1e-9, 1.0 - min(member.p.failure_rate, 0.99))
            jobs += 1
        heapq.heappush(events, (end, next(tick), "job", f, step, (member, pool_name, size)))

    def jobs_of(f, step, pool_name: str, n: int) -> None:
        cut = parts(n)
        remaining[(f.name, step)] = len(cut)
        for size in cut:
            submit(f, step, pool_name, size)

    while True:
        while next_step < steps and len(admitted) < window:
            admitted[next_step] = {f.name for f in order}
            next_step += 1
        for quantum in (True, False):
            for step in sorted(admitted):
                for f in order:
                    if sync and running:
                        break
                    key = (f.name, step)
                    if isinstance(f, CircuitCall) != quantum or f.name not in admitted[step] or key in running \
                            or not ready(f, step):
                        continue
                    if quantum:
                        running.add(key)
                        jobs_of(f, step, f.backend, n_rows[f.name])
                        continue
                    resource = "gpu" if f.resource == "gpu" else "cpu"
                    need = config.learners if f.kind == "learn" else 1
                    if busy[resource] + need > slots[resource]:
                        continue
                    busy[resource] += need
                    began[key] = now
                    running.add(key)
                    if f.name in nested:  # its own jobs, in rounds: a slice of classical work, then a job
                        _, count, _, piece = nested[f.name]
                        rounds[key] = count
                        heapq.heappush(events, (now + piece + profile.overhead, next(tick), "round", f, step, resource))
                    else:
                        heapq.heappush(events, (now + seconds[f.name], next(tick), "task", f, step, resource))
        if not events:
            break
        now, _, kind, f, step, extra = heapq.heappop(events)
        key = (f.name, step)
        if kind == "round":  # a nested call's slice of classical work is done: its job goes out
            pool_name, _, size, _ = nested[f.name]
            jobs_of(f, step, pool_name, size)
            continue
        if kind == "job":
            member, pool_name, size = extra
            member.in_flight -= 1
            if waiting[pool_name]:
                submit(*waiting[pool_name].pop(0))
            if draw is not None and draw.random() < member.p.failure_rate:
                submit(f, step, pool_name, size, member)  # failed: once more, elsewhere where it can
                continue
            remaining[key] -= 1
            if remaining[key]:
                continue  # the step's other parts are still running
            del remaining[key]
            if f.name in nested:
                rounds[key] -= 1
                if rounds[key]:
                    heapq.heappush(events, (now + nested[f.name][3], next(tick), "round", f, step,
                                            "gpu" if f.resource == "gpu" else "cpu"))
                    continue
                kind, extra = "task", "gpu" if f.resource == "gpu" else "cpu"
        if kind == "task":
            need = config.learners if f.kind == "learn" else 1
            busy[extra] -= need
            used[extra] += need * (now - began.pop(key))
        running.discard((f.name, step))
        finished.add((f.name, step))
        while (f.name, done[f.name]) in finished:
            done[f.name] += 1
        admitted[step].discard(f.name)
        if not admitted[step]:
            del admitted[step]
    utilization = {r: used[r] / (now * slots[r]) if now else 0.0 for r in ("cpu", "gpu") if used[r]}
    for pool in pools.values():
        for m in pool:
            utilization[m.p.backend] = m.busy / (now * len(m.devices)) if now else 0.0
    cut = {name: min(n, config.rows_per_job or n) for name, n in n_rows.items()}
    cut.update({name: min(n[2], config.rows_per_job or n[2]) for name, n in nested.items()})
    return Prediction(now, utilization, spend, _bound(order, steps, seconds, n_rows, cut, pools, nested, slots), jobs)


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
        best = min(pool, key=lambda m: m.p.per_job * jobs + m.p.per_row * n)
        return ((best.p.per_job * jobs + best.p.per_row * n) / sum(len(m.devices) for m in pool),
                min(m.p.queue + m.p.per_job + m.p.per_row * k for m in pool))

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
