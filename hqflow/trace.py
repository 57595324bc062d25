"""Timed spans: what ran where, and when.

Every executor records one ``Span`` per fragment instance. The overlap
scheduler (next) adds utilization, idle time and Perfetto export on top.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Span:
    fragment: str
    kind: str
    resource: str  # "cpu", "gpu", or "qpu:<backend>"
    step: int  # index of the micro-batch / iteration
    start: float  # seconds since the run began
    end: float
    outcome: str = "ok"  # "ok" or "error: ..."

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict:
        return asdict(self)


def busy_seconds(spans: list[Span]) -> dict[str, float]:
    """Total busy time per resource."""
    out: dict[str, float] = {}
    for s in spans:
        out[s.resource] = out.get(s.resource, 0.0) + s.seconds
    return out
