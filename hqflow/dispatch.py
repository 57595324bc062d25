"""Backend pools: several backends behind one name, chosen by measured latency.

A pool holds the backends an ``execute`` fragment may use. Each backend keeps
``capacity`` jobs in flight: its device slots plus a few prefetched jobs that
wait in its own queue, so it never idles between jobs. ``choose`` picks, among the backends that
fit a job, the one expected to *finish* it first: a free slot now plus its
moving-average job time, or, when all its slots are busy, the time until one
frees plus that job time. So a slow QPU takes work only when that finishes
earlier than waiting for a fast simulator, and never holds it back. Backends
without a measurement yet are assumed as fast as the pool's average, and the
backend with fewer jobs in flight wins a tie.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Member:
    """One backend of a pool, with its slots and its latency estimate."""

    handle: Any  # has .submit(batch) -> Job and .capabilities
    lane: str  # Gantt row prefix, e.g. "qpu:emulated-qpu#1"
    devices: int  # jobs the backend runs at once (its device slots)
    capacity: int  # jobs kept in flight: devices plus prefetched ones waiting in its queue
    ewma: float | None = None  # seconds per job (exponential moving average)
    busy: dict[int, float] = field(default_factory=dict)  # slot -> start time

    def free_slot(self) -> int | None:
        for s in range(self.capacity):
            if s not in self.busy:
                return s
        return None

    def expected_finish(self, now: float, guess: float) -> float:
        """When a job given now would end here; ``guess`` stands in for an unmeasured backend.

        With a device idle it starts now; otherwise it waits behind the jobs
        ahead of it: the soonest device frees, then one job time per job queued.
        """
        job = guess if self.ewma is None else self.ewma
        ahead = len(self.busy) - self.devices + 1
        if ahead <= 0:
            return now + job
        return max(now, min(self.busy.values()) + job) + job * ahead

    def fits(self, n_qubits: int) -> bool:
        return n_qubits <= self.handle.capabilities.max_qubits


class Pool:
    """The backends behind one backend name, with latency-aware choice."""

    def __init__(self, name: str, members: list[Member], alpha: float = 0.3):
        if not members:
            raise ValueError(f"backend pool {name!r} is empty")
        self.name, self.members, self.alpha = name, members, alpha

    @property
    def resource(self) -> str:
        return f"qpu:{self.name}"

    def max_rows(self) -> int | None:
        """The largest job every member accepts (``None``: unlimited)."""
        limits = [m.handle.capabilities.max_circuits_per_job for m in self.members]
        limits = [x for x in limits if x]
        return min(limits) if limits else None

    def choose(self, n_qubits: int, avoid: set[int]) -> tuple[int, int] | None:
        """``(member index, slot)`` to run a job on now, or ``None`` to wait.

        ``avoid`` holds members that already failed this job; they are used only
        when no other member fits.
        """
        fitting = [i for i, m in enumerate(self.members) if m.fits(n_qubits)]
        preferred = [i for i in fitting if i not in avoid] or fitting
        if not preferred:
            return None
        now = time.perf_counter()
        known = [m.ewma for m in self.members if m.ewma is not None]
        guess = sum(known) / len(known) if known else 0.0
        best = min(preferred, key=lambda i: (self.members[i].expected_finish(now, guess),
                                              len(self.members[i].busy), i))
        slot = self.members[best].free_slot()
        return None if slot is None else (best, slot)

    def any_fits(self, n_qubits: int) -> bool:
        return any(m.fits(n_qubits) for m in self.members)

    def start(self, member: int, slot: int) -> float:
        t = time.perf_counter()
        self.members[member].busy[slot] = t
        return t

    def finish(self, member: int, slot: int, ok: bool) -> None:
        m = self.members[member]
        started = m.busy.pop(slot)
        if ok:
            took = time.perf_counter() - started
            m.ewma = took if m.ewma is None else (1 - self.alpha) * m.ewma + self.alpha * took

    def lane(self, member: int, slot: int) -> str:
        """One Gantt row per device slot (prefetched jobs share their device's row)."""
        m = self.members[member]
        return m.lane if m.devices == 1 else f"{m.lane}/{slot % m.devices}"
