"""What the job service keeps of the work it was asked for: who asked (``Parent``), each request in parts
(``Request``), and each try of a part on a pool's member (``Attempt``), which its span describes."""
from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass
from typing import Any

from hqflow.backends import CircuitBatch, Usage

from ..common.lanes import Lane
from ..common.outcome import Outcome
from ..trace import Span
from . import accounting
from .dispatch import Pool


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
