"""Timed spans: what ran where, and when.

Every executor records one ``Span`` per fragment instance (and per quantum job
attempt). ``lane`` names the one worker the span occupied (``"cpu/0"``,
``"qpu:emulated-qpu#1"``...), ``resource`` the pool it belongs to; the Gantt
chart draws one row per lane.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Span:
    fragment: str
    kind: str
    resource: str  # pool: "cpu", "gpu", or "qpu:<backend name>"
    step: int  # index of the micro-batch / iteration
    start: float  # seconds since the run began
    end: float
    outcome: str = "ok"  # "ok", "error: ...", "timeout", "cancelled"
    version: int | None = None  # parameter version used (loop-carried inputs), if any
    lane: str = ""  # the worker within the resource; "" means the resource itself

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def row(self) -> str:
        """The Gantt row: the lane if set, else the resource."""
        return self.lane or self.resource

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "Span":
        return Span(**d)


def busy_seconds(spans: list[Span]) -> dict[str, float]:
    """Total busy time per resource (sum of span lengths)."""
    out: dict[str, float] = {}
    for s in spans:
        out[s.resource] = out.get(s.resource, 0.0) + s.seconds
    return out
