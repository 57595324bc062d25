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
  per_shot * rows * shots``, repeated ``1 / (1 - failure_rate)`` times on average (retries).

The prediction also carries the overlap bound of a two-stage loop, ``N * max(C, D) + min(C, Q)``:
C a step's classical seconds, D its device seconds spread over the pool's devices, Q a job's
seconds with its queue (with one device and no queue, ``overlap.py``'s ``N * max(C, Q) + min(C, Q)``).
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from hqflow.ir.graph import Graph

from .profile import BackendProfile, Profile
from .scheduler import SchedulerConfig


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

    def finish(self, now: float, rows: int, shots: int | None, overhead: float = 0.0) -> tuple[float, float, int]:
        """When a job submitted ``now`` would end, the time it holds a device, and which device."""
        hold = (self.p.per_job + self.p.per_row * rows + self.p.per_shot * rows * (shots or 0)) \
            / max(1e-9, 1.0 - min(self.p.failure_rate, 0.99)) + overhead
        d = min(range(len(self.devices)), key=self.devices.__getitem__)
        return max(now + self.p.queue, self.devices[d]) + hold, hold, d


def _pools(graph: Graph, profile: Profile, members: Mapping[str, Sequence[str]] | None, prefetch: int) -> dict:
    pools = {}
    for f in graph.fragments:
        if f.kind != "execute" or f.backend in pools:
            continue
        names = (members or {}).get(f.backend)
        chosen = ([profile.backend(n) for n in names] if names is not None
                  else [b for b in profile.backends if b.pool == f"qpu:{f.backend}"])
        if not chosen:
            raise ValueError(f"no profile of a backend in pool {f.backend!r}: calibrate with a run that uses it, "
                             f"or name its members")
        pools[f.backend] = [_Member(b, prefetch) for b in chosen]
    return pools


def predict(graph: Graph, steps: int, profile: Profile, config: SchedulerConfig = SchedulerConfig(), *,
            rows: int | Mapping[str, int] = 1, members: Mapping[str, Sequence[str]] | None = None) -> Prediction:
    """The predicted run of ``graph`` over ``steps`` stream items under ``config`` (see the module docstring).

    ``rows``: circuits per step of each ``execute`` fragment (one number for all, or by fragment name);
    ``members``: the pool members to use, by pool name (default: every profiled member of the pool).
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    order = graph.topological_order()
    pools = _pools(graph, profile, members, config.prefetch)
    sync = config.executor == "sync"
    in_flight = sum(m.capacity for pool in pools.values() for m in pool)
    window = 1 if sync else config.window or max(8, 2 * in_flight + 2)
    slots = {"cpu": config.cpu_workers, "gpu": config.gpu_workers}
    seconds = {f.name: profile.fragment(f.name).seconds + profile.overhead for f in order if f.kind != "execute"}
    n_rows = {f.name: rows if isinstance(rows, int) else rows[f.name] for f in order if f.kind == "execute"}
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
    remaining: dict[tuple[str, int], int] = {}  # an execute instance's jobs not yet done

    def ready(f, step) -> bool:
        for e in inputs[f.name]:
            if e.loop:
                if done[e.src[0]] < step - e.max_staleness:
                    return False
            elif (e.src[0], step) not in finished:
                return False
        return True

    def parts(f) -> list[int]:
        """The rows of each job a step of ``f`` is cut into (``rows_per_job``)."""
        n, cut = n_rows[f.name], config.rows_per_job or n_rows[f.name]
        return [min(cut, n - lo) for lo in range(0, n, max(1, cut))] or [0]

    def submit(f, step, size) -> None:
        nonlocal spend, jobs
        pool = pools[f.backend]
        open_ = [m for m in pool if m.in_flight < m.capacity]
        if not open_:
            waiting[f.backend].append((f, step, size))
            return
        shots = f.circuit.shots if f.circuit is not None else None
        (end, hold, d), member = min(((m.finish(now, size, shots, profile.overhead), m) for m in open_),
                                     key=lambda pair: pair[0][0])
        member.devices[d], member.in_flight = end, member.in_flight + 1
        member.busy += hold
        spend += member.p.price(size, shots) / max(1e-9, 1.0 - min(member.p.failure_rate, 0.99))
        jobs += 1
        heapq.heappush(events, (end, next(tick), "job", f, step, member))

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
                    if (f.kind == "execute") != quantum or f.name not in admitted[step] or key in running \
                            or not ready(f, step):
                        continue
                    if quantum:
                        running.add(key)
                        cut = parts(f)
                        remaining[key] = len(cut)
                        for size in cut:
                            submit(f, step, size)
                        continue
                    resource = "gpu" if f.resource == "gpu" else "cpu"
                    need = config.learners if f.kind == "learn" else 1
                    if busy[resource] + need > slots[resource]:
                        continue
                    busy[resource] += need
                    used[resource] += need * seconds[f.name]
                    running.add(key)
                    heapq.heappush(events, (now + seconds[f.name], next(tick), "task", f, step, resource))
        if not events:
            break
        now, _, kind, f, step, extra = heapq.heappop(events)
        if kind == "task":
            busy[extra] -= config.learners if f.kind == "learn" else 1
        else:
            extra.in_flight -= 1
            if waiting[f.backend]:
                submit(*waiting[f.backend].pop(0))
            remaining[(f.name, step)] -= 1
            if remaining[(f.name, step)]:
                continue  # the step's other parts are still running
            del remaining[(f.name, step)]
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
    return Prediction(now, utilization, spend, _bound(order, steps, seconds, n_rows, cut, pools), jobs)


def calibrate(graph: Graph, spans: list, profile: Profile, config: SchedulerConfig = SchedulerConfig(), *,
              rows: int | Mapping[str, int] = 1, members: Mapping[str, Sequence[str]] | None = None) -> Profile:
    """``profile`` with the scheduler's own overhead per dispatched job or call: the figure at which
    :func:`predict` gives the makespan that ``spans`` (a run of ``graph`` under ``config``) measured.
    Step 0 is left out on both sides: it warms caches and compiles programs."""
    later = [s for s in spans if s.step >= 1]
    steps = max((s.step for s in later), default=0)
    if steps < 1:
        return profile
    measured = max(s.end for s in later) - min(s.start for s in later)
    low, high = 0.0, 0.05
    for _ in range(30):  # bisection: the makespan grows with the overhead
        mid = (low + high) / 2
        guess = predict(graph, steps, replace(profile, overhead=mid), config, rows=rows, members=members).makespan
        low, high = (mid, high) if guess < measured else (low, mid)
    return replace(profile, overhead=low)


def _bound(order, steps: int, seconds: dict, n_rows: dict, cut: dict, pools: dict) -> float:
    """``N * max(C, D) + min(C, Q)``: C a step's classical seconds, D its device seconds spread over the
    pools' devices (the QPUs' throughput), Q one job's seconds (``cut`` rows), queue included (the loop's fill)."""
    c, d, q = sum(seconds.values()), 0.0, 0.0
    for f in order:
        if f.kind == "execute":
            pool = pools[f.backend]
            n, k = n_rows[f.name], cut[f.name]
            jobs = -(-n // k) if k else 1
            best = min(pool, key=lambda m: m.p.per_job * jobs + m.p.per_row * n)
            d += (best.p.per_job * jobs + best.p.per_row * n) / sum(len(m.devices) for m in pool)
            q += min(m.p.queue + m.p.per_job + m.p.per_row * k for m in pool)
    return steps * max(c, d) + min(c, q) if steps else 0.0


__all__ = ["Prediction", "calibrate", "predict"]
