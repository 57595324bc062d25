"""``dry-run:<backend>``: price every job a run would send to ``<backend>``, and send none.

    tally = Tally()
    backend = DryRunBackend("azure:ionq.qpu.aria-1", tally)   # no workspace needed
    ... run a workload on it ...
    print(tally.table())

Each batch is priced by the real backend (``estimate_cost``, where it has one)
and answered by a local simulator, so the workload runs its usual course of
jobs: with shots where the real backend samples (its ``shots`` default for a
batch that sets none), exactly otherwise.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

from .base import Backend, BackendError, Capabilities, CircuitBatch, RequestRefused, Usage


@dataclass
class Line:
    """What one circuit's jobs add up to."""

    batches: int = 0
    rows: int = 0
    jobs: int = 0  # service jobs (rows x measurement groups, where the backend says)
    shots: int = 0  # per job, the largest seen
    cost: float = 0.0


@dataclass
class Tally:
    """The dry run's record: one line per (backend, circuit)."""

    lines: dict = field(default_factory=dict)
    currency: str | None = None
    unpriced: set = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, backend: str, batch: CircuitBatch, cost, shots: int | None) -> None:
        with self._lock:
            line = self.lines.setdefault((backend, batch.template.name), Line())
            line.batches += 1
            line.rows += batch.size
            if cost is None:
                self.unpriced.add(backend)
                line.jobs += batch.size
                line.shots = max(line.shots, shots or 0)
                return
            self.currency = self.currency or cost.currency
            line.jobs += cost.jobs
            line.shots = max(line.shots, cost.shots)
            line.cost += cost.amount

    @property
    def total(self) -> float:
        return sum(line.cost for line in self.lines.values())

    def figures(self) -> dict:
        return {"jobs": sum(x.jobs for x in self.lines.values()), "rows": sum(x.rows for x in self.lines.values()),
                "estimated_cost": self.total, "currency": self.currency, "unpriced": sorted(self.unpriced)}

    def table(self) -> str:
        head = f"{'backend':<26} {'circuit':<16} {'batches':>8} {'jobs':>8} {'shots/job':>10} {'est. cost':>12}"
        rows = [head]
        for (backend, circuit), x in sorted(self.lines.items()):
            rows.append(f"{backend:<26} {circuit:<16} {x.batches:>8} {x.jobs:>8} {x.shots or '-':>10} "
                        f"{x.cost:>12.4f}")
        unit = self.currency or "(no prices)"
        rows.append(f"total: {sum(x.jobs for x in self.lines.values())} jobs, estimated {self.total:.4f} {unit}; "
                    "nothing was submitted")
        if self.unpriced:
            rows.append(f"no prices for {', '.join(sorted(self.unpriced))}: counted as free")
        return "\n".join(rows)


class DryRunBackend(Backend):
    """Prices each batch on ``target`` (made with ``options``), runs it on ``simulator``; submits nothing."""

    def __init__(self, target: str | None = None, tally: Tally | None = None, simulator: str = "compiled",
                 **options):
        from . import make_backend

        if not target:
            raise BackendError("dry-run needs a backend: dry-run:<backend>, e.g. dry-run:azure:ionq.simulator")
        self.inner = make_backend((target, options))
        self.tally = tally if tally is not None else Tally()
        self.name = f"dry-run:{self.inner.name}"
        self._sim = make_backend(simulator)
        self._shots = getattr(self.inner, "shots", None)  # the real backend's shots for a batch without any

    @property
    def capabilities(self) -> Capabilities:
        """The real backend's qubits and the limits of its service (``service_job_rows``, ``max_shots``,
        ``row_seeded``, ``share``); the simulator answers exactly or with shots."""
        caps = self.inner.capabilities
        return Capabilities(self.name, caps.max_qubits, None, exact=True, shots=True, gradient=None, device="cpu",
                            service_job_rows=caps.service_job_rows, max_shots=caps.max_shots,
                            row_seeded=caps.row_seeded, share=caps.share)

    def usage(self, batch: CircuitBatch) -> Usage:
        """What the real backend says a job of ``batch`` would use, with the shots the dry run samples."""
        return self.inner.usage(self._sampled(batch))

    def _sampled(self, batch: CircuitBatch) -> CircuitBatch:
        """``batch`` with the real backend's shots where it sets none and the real backend only samples."""
        if batch.shots is None and not self.inner.capabilities.exact and self._shots:
            return dataclasses.replace(batch, shots=self._shots)
        return batch

    def submit(self, batch: CircuitBatch):
        """Price ``batch`` as the real backend would be asked it, and answer it here. What the real backend
        would refuse (more shots than its cap), or cannot price, is refused: never retried."""
        sampled = self._sampled(batch)
        cap = self.inner.capabilities.max_shots
        if cap is not None and (sampled.shots or 0) > cap:
            raise RequestRefused(f"{self.inner.name} takes at most {cap:,} shots per job; got {sampled.shots}, "
                                 "which a real submit would refuse")
        try:
            cost = self.inner.estimate_cost(batch) if self.inner.priced else None
        except BackendError as exc:
            raise RequestRefused(f"a dry run cannot price {self.inner.name}: {exc}") from None
        self.tally.add(self.inner.name, batch, cost, batch.shots or self._shots)
        return self._sim.submit(sampled)

    def close(self) -> None:
        for b in (self.inner, self._sim):
            b.close()
