"""Backend pools: several backends behind one name, chosen by measured latency and health; and what the job
service dispatches to them: who asked (``Parent``), each request in parts (``Request``), and each try of a part
on a member (``Attempt``), which its span describes.

Each member keeps ``capacity`` jobs in flight: its device slots plus a few prefetched jobs waiting in its own
queue, so it never idles between jobs. ``Pool.choose`` gives a job to the fitting member expected to deliver
a *good* result first (``Member.expected_finish``), so a slow QPU takes work only when that beats waiting
for a fast simulator.

* **Exploration.** A member that has never run a job gets the next one it can take; one not tried for
  ``stale_after`` jobs of the pool gets one trial job, so a backend that got faster (or came back) is noticed.
* **Circuit breaker.** ``breaker`` failures in a row make a member rest ``rest`` seconds (doubling on each
  failed trial, up to ``max_rest``), then get one trial job; a success ends it. A resting member is used
  only when no other member fits.
"""
from __future__ import annotations

import concurrent.futures as cf
import time
from dataclasses import dataclass, field
from typing import Any

from hqflow.backends import Capabilities, CircuitBatch, Usage

from ..common.lanes import Lane
from ..common.outcome import Outcome
from ..trace import Span
from . import accounting


@dataclass
class Member:
    """One backend of a pool, with its slots, its latency estimate and its health."""

    handle: Any  # a Backend (the executor's handle): submit(batch) -> Job, capabilities, priced, estimate_cost
    lane: Lane  # the member's lane, e.g. qpu:emulated-qpu#1; its device slots' lanes are the Gantt rows
    devices: int  # jobs the backend runs at once (its device slots)
    capacity: int  # jobs kept in flight: devices plus prefetched ones waiting in its queue
    ewma: float | None = None  # seconds per successful job, any size (exponential moving average)
    by_size: dict[int, float] = field(default_factory=dict)  # the same per size class (rows' bit length)
    success: float = 1.0  # moving average of job outcomes (1 ok, 0 failed)
    busy: dict[int, float] = field(default_factory=dict)  # slot -> start time
    device: dict[int, int] = field(default_factory=dict)  # slot -> the device slot its job is drawn on
    expect: dict[int, float] = field(default_factory=dict)  # slot -> the expected seconds of its job
    tried_at: int | None = None  # the pool's job count when this member last got a job
    streak: int = 0  # failures in a row
    rest_until: float = 0.0  # circuit open until this time
    rest: float = 0.0  # length of the current (or last) rest
    jobs: int = 0  # jobs given to this member
    failures: int = 0  # of them failed
    removed: bool = False  # taken out of the pool mid-run (``JobService.remove_backend``): given no more jobs
    node: str | None = None  # the Ray node its backend runs on (None: this process), for its jobs' spans

    def free_slot(self) -> int | None:
        return next((s for s in range(self.capacity) if s not in self.busy), None)

    def job_time(self, rows: int, guess: float) -> float:
        """Seconds a job of ``rows`` circuits is expected to take here: the moving average of jobs of its
        size class (rows within a factor of two: a big gradient job does not make small jobs look slow),
        else of all jobs, else ``guess``."""
        known = self.by_size.get(_size_class(rows), self.ewma)
        return guess if known is None else known

    def expected_finish(self, now: float, guess: float, rows: int = 1) -> float:
        """When a good result of a job of ``rows`` given now would arrive (``guess``: the job time of an
        unmeasured backend). With a device idle it starts now; otherwise it waits for the soonest running
        job to end, then one job time per job queued. Divided by the recent success rate: a job that
        fails half the time takes twice as long to succeed, on average."""
        job = self.job_time(rows, guess)
        ahead = len(self.busy) - self.devices + 1
        if ahead <= 0:
            finish = job
        else:
            soonest = min(start + self.expect.get(slot, job) for slot, start in self.busy.items())
            finish = max(0.0, soonest - now) + job * ahead
        return now + finish / max(self.success, 0.05)

    def fits(self, n_qubits: int) -> bool:
        return not self.removed and n_qubits <= self.handle.capabilities.max_qubits

    def resting(self, now: float) -> bool:
        return now < self.rest_until


def _smallest(limits) -> int | None:
    """The smallest of ``limits`` that are set (None: none is)."""
    return min((x for x in limits if x is not None), default=None)


def _size_class(rows: int) -> int:
    return max(int(rows), 1).bit_length()


class Pool:
    """The backends behind one backend name, with latency- and failure-aware choice."""

    def __init__(self, name: str, members: list[Member], alpha: float = 0.3, stale_after: int = 20,
                 breaker: int = 3, rest: float = 1.0, max_rest: float = 30.0, now=time.perf_counter):
        """``now``: the clock the pool times jobs and rests by (the run's: ``hqflow.common.clock``)."""
        if not members:
            raise ValueError(f"backend pool {name!r} is empty")
        self.name, self.members, self.alpha = name, members, alpha
        self.stale_after, self.breaker, self.base_rest, self.max_rest = stale_after, breaker, rest, max_rest
        self.jobs = 0  # jobs given out, all members
        self.now = now

    @property
    def resource(self) -> Lane:
        """The pool's lane, the resource of its jobs' spans (``qpu:<pool name>``)."""
        return Lane("qpu", self.name)

    @property
    def devices(self) -> int:
        """Device slots of all members together: jobs the pool runs at once."""
        return sum(m.devices for m in self.members if not m.removed)

    def add(self, member: Member) -> int:
        """A member joins the pool mid-run (elastic resources); returns its index."""
        self.members.append(member)
        return len(self.members) - 1

    @property
    def capabilities(self) -> Capabilities:
        """What a job sent to the pool can count on: the widest member's qubits (a job goes to one
        that fits), exact/shots only if every member has them, a native gradient only if all share it.
        Batches are split to the smallest per-job limit, so the pool itself has none. Of the limits a
        member's service sets, the smallest (``service_job_rows``, ``max_shots``; None: no limit), and
        ``row_seeded`` only if every member is."""
        caps = [m.handle.capabilities for m in self.members if not m.removed] or [m.handle.capabilities
                                                                                  for m in self.members]
        gradients = {c.gradient for c in caps}
        devices = {c.device for c in caps}
        return Capabilities(self.name, max(c.max_qubits for c in caps), None, all(c.exact for c in caps),
                            all(c.shots for c in caps), gradients.pop() if len(gradients) == 1 else None,
                            devices.pop() if len(devices) == 1 else "mixed",
                            service_job_rows=_smallest(c.service_job_rows for c in caps),
                            max_shots=_smallest(c.max_shots for c in caps), row_seeded=all(c.row_seeded for c in caps))

    def max_rows(self) -> int | None:
        """The largest job every member accepts (``None``: unlimited)."""
        return _smallest(m.handle.capabilities.max_circuits_per_job or None for m in self.members if not m.removed)

    def choose(self, n_qubits: int, avoid: set[int], rows: int = 1) -> tuple[int, int] | None:
        """``(member index, slot)`` to run a job of ``rows`` circuits on now, or ``None`` to wait. Members
        in ``avoid`` (they failed this job already) and resting ones are used only when no other fits."""
        now = self.now()
        fitting = [i for i, m in enumerate(self.members) if m.fits(n_qubits)]
        healthy = [i for i in fitting if not self.members[i].resting(now)]
        preferred = ([i for i in healthy if i not in avoid] or healthy
                     or [i for i in fitting if i not in avoid] or fitting)
        if not preferred:
            return None
        explore = [i for i in preferred if self._needs_trial(self.members[i])]
        if explore:
            i = min(explore, key=lambda i: (self.members[i].tried_at is not None, self.members[i].tried_at or 0, i))
            slot = self.members[i].free_slot()
            if slot is not None:
                return i, slot
        guess = self._guess()
        best = min(preferred, key=lambda i: (self.members[i].expected_finish(now, guess, rows),
                                              len(self.members[i].busy), i))
        slot = self.members[best].free_slot()
        return None if slot is None else (best, slot)

    def _guess(self) -> float:
        """A job time for a member not yet measured: the mean of the measured members' (0 for none)."""
        known = [m.ewma for m in self.members if m.ewma is not None]
        return sum(known) / len(known) if known else 0.0

    def _average(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.alpha) * old + self.alpha * new

    def _needs_trial(self, m: Member) -> bool:
        """Never tried, or not tried for ``stale_after`` pool jobs, and nothing of it in flight."""
        if m.busy:
            return False
        return m.tried_at is None or self.jobs - m.tried_at >= self.stale_after

    def any_fits(self, n_qubits: int) -> bool:
        """A member could run it; with every member removed, jobs wait for one to be added."""
        return any(m.fits(n_qubits) for m in self.members) or all(m.removed for m in self.members)

    def start(self, member: int, slot: int, rows: int = 1) -> float:
        t = self.now()
        m = self.members[member]
        m.expect[slot] = m.job_time(rows, self._guess())
        # the device this job will run on, as far as the pool can tell: the one with the fewest
        # jobs, then the one whose job started first (it frees first); queued jobs wait behind it
        load = {d: [m.busy[s] for s, dd in m.device.items() if dd == d] for d in range(m.devices)}
        m.device[slot] = min(load, key=lambda d: (len(load[d]), min(load[d], default=0.0), d))
        m.busy[slot] = t
        m.tried_at, m.jobs = self.jobs, m.jobs + 1
        self.jobs += 1
        return t

    def finish(self, member: int, slot: int, ok: bool, rows: int = 1) -> None:
        m = self.members[member]
        started = m.busy[slot]
        self.release(member, slot)
        m.success = self._average(m.success, 1.0 if ok else 0.0)
        if ok:
            took, size = self.now() - started, _size_class(rows)
            m.ewma, m.by_size[size] = self._average(m.ewma, took), self._average(m.by_size.get(size), took)
            m.streak, m.rest = 0, 0.0
            return
        m.failures += 1
        m.streak += 1
        if m.streak >= self.breaker:  # open the circuit (again, for longer, after a failed trial)
            m.rest = min(self.max_rest, 2 * m.rest if m.rest else self.base_rest)
            m.rest_until = self.now() + m.rest

    def release(self, member: int, slot: int) -> None:
        """Free a slot whose job never ran (refused before submission): no timing, no failure."""
        m = self.members[member]
        for d in (m.busy, m.device, m.expect):
            d.pop(slot, None)

    def lane(self, member: int, slot: int) -> Lane:
        """One Gantt row per device slot: a job's row is the device it was drawn on at its start
        (a prefetched job shares the row of the device it waits for). Call before ``finish``."""
        m = self.members[member]
        return m.lane if m.devices == 1 else m.lane.at(m.device.get(slot, slot % m.devices))

    def health(self) -> list[dict]:
        """Per member: its lane, jobs, failures, latency estimate, success rate, and whether it rests now."""
        now = self.now()
        return [{"lane": str(m.lane), "jobs": m.jobs, "failures": m.failures, "ewma": m.ewma,
                 "success": round(m.success, 3), "resting": m.resting(now), "removed": m.removed}
                for m in self.members]


@dataclass(frozen=True)
class Parent:
    """Who asked for a job: the fragment, its step, its lane, and the parameter version it ran with."""

    fragment: str
    step: int
    lane: Lane
    version: int | None = None
    submitted: bool = False  # True: a classical fragment submitted it itself (its client)
    kind: str = "execute"  # the fragment's kind and resource (for the spans of its own work, ``JobClient.work``)
    resource: Lane = Lane("qpu")


@dataclass
class Request:
    """A batch asked for, in parts; per part: its result, its attempts, the members that failed it, and
    the attempts withdrawn (taken back from a removed backend: not failures)."""

    pool: Pool
    parts: list[CircuitBatch]
    parent: Parent
    meter: Any = None  # the usage meter of its client (``accounting.meter``), or None

    def __post_init__(self):
        n = self.left = len(self.parts)
        self.results, self.attempts, self.withdrawn = [None] * n, [0] * n, [0] * n
        self.avoid: list[set[int]] = [set() for _ in range(n)]
        self.usage, self.handed = Usage(), False  # what its attempts used, all of them; whether it was settled
        self.future = cf.Future()
        self.future.set_running_or_notify_cancel()


@dataclass
class Attempt:
    """One try of one part of a request, on a member's device slot (``slot``), from ``start``; what was charged
    for it (``hqflow.jobs.accounting.Books``)."""

    request: Request
    part: int
    member: int
    slot: int
    start: float
    job: Any = None
    running: float | None = None  # when the job was first seen out of its service's queue (job_timeout's start)
    estimate: float | None = None  # the attempt's estimated cost, counted as spend until it reports its own
    currency: str | None = None  # the estimate's
    shots: int | None = None  # the shots charged to the shot budget for it, until it reports its own
    predicted: Usage | None = None  # its backend's ``usage(part)``, once asked

    @property
    def batch(self) -> CircuitBatch:
        return self.request.parts[self.part]

    @property
    def handle(self):
        return self.request.pool.members[self.member].handle

    def span(self, outcome: Outcome, t0: float, end: float, meta: dict | None = None) -> Span:
        """The attempt's span, with the figures its job reported in ``meta`` that make sense."""
        p, pool, meta = self.request.parent, self.request.pool, meta or {}
        queued, device, compute = (accounting.amount(meta.get(k)) for k in ("queue_seconds", "device_seconds",
                                                                            "compute_seconds"))
        return Span(p.fragment, "execute", pool.resource, p.step, self.start - t0, end - t0, outcome, p.version,
                    pool.lane(self.member, self.slot), p.lane if p.submitted else None, self.estimate,
                    pool.members[self.member].node, self.batch.size, self.batch.shots, queued, device,
                    accounting.count(meta.get("service_jobs")), compute)
