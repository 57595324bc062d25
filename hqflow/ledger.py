"""A run's spend and budget: one ledger per run, charged before every priced job is submitted.

Under the ``ray`` executor, fragments inside Ray workers submit jobs too, so the run's ledger lives in a Ray
actor that every job service, the driver's and the workers', charges through ``RemoteLedger``.
"""
from __future__ import annotations

import threading

from hqflow.backends import BackendError


class BudgetExceeded(BackendError):
    """A job would have taken the run's spend past its budget; it was not submitted."""


class Ledger:
    """Spend in one currency, held to an optional budget. Thread-safe."""

    blocking = False  # its calls never block (``RemoteLedger``'s do)

    def __init__(self, budget: float | None = None):
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget < 0):
            raise ValueError(f"budget must be a number >= 0 or None, got {budget!r}")
        self.budget = budget
        self.spend, self.currency, self.refused = 0.0, None, 0
        self._lock = threading.Lock()

    def charge(self, amount: float, currency: str, what: str) -> str | None:
        """Count ``amount`` as spent; or, past the budget, count a refusal and say why (None: charged)."""
        with self._lock:
            if self.currency is None:
                self.currency = currency
            elif currency != self.currency:
                self.refused += 1
                return f"jobs priced in {currency} and {self.currency} cannot share one budget"
            if self.budget is not None and self.spend + amount > self.budget + 1e-9:
                self.refused += 1
                return (f"budget reached: spent {self.spend:.4f} {self.currency} of {self.budget:.4f}; "
                        f"the next job {what} would cost {amount:.4f}")
            self.spend += amount
            return None

    def adjust(self, delta: float) -> None:
        """A job reported its own cost: replace its estimate (``delta`` = actual - estimate)."""
        with self._lock:
            self.spend += delta

    def figures(self) -> dict:
        with self._lock:
            return {"spend": self.spend, "currency": self.currency, "budget": self.budget,
                    "refused_jobs": self.refused}


class RemoteLedger:
    """The same calls on a ``Ledger`` inside a Ray actor (picklable: it travels to the workers). Its calls
    block on Ray (``blocking``), so the job service handles completions off Ray's callback thread."""

    blocking = True

    def __init__(self, actor, budget: float | None):
        self.actor, self.budget = actor, budget
        self._final: dict | None = None  # the figures when the run's ledger was stopped

    @classmethod
    def start(cls, budget: float | None) -> RemoteLedger:
        import ray

        Ledger(budget)  # a bad budget fails here, in the caller
        return cls(ray.remote(num_cpus=0)(Ledger).remote(budget), budget)

    def _call(self, method: str, *args):
        import ray

        return ray.get(getattr(self.actor, method).remote(*args))

    def charge(self, amount: float, currency: str, what: str) -> str | None:
        return self._call("charge", amount, currency, what)

    def adjust(self, delta: float) -> None:
        self._call("adjust", delta)  # done before the job's result is handed on

    def figures(self) -> dict:
        return dict(self._final) if self._final is not None else self._call("figures")

    def stop(self) -> None:
        """Keep the final figures and end the actor (at the end of the run)."""
        import ray

        if self._final is None:
            self._final = self.figures()
            ray.kill(self.actor)
