"""A run's spend and budgets: one ledger per run, charged before every priced job is submitted (currency)
and every sampling job (shots), then corrected by what the job reports.

With a ``path`` (``RUN_DIR/ledger.jsonl``) the ledger is written ahead: every charge and correction is a line
of that file, flushed before the job is submitted, and a ledger opened on the file starts from its totals. So a
run that goes on from a killed one knows what the killed one paid (its jobs in flight count at their estimates),
and a budget holds across every process of the run. Each line: ``{"spend": delta, "shots": delta, "currency"}``,
and, for a job that ended, ``"used"``: its ``Usage`` (the run's ``paid``: service jobs, circuits, shots, cost); a
line cut short by a kill is dropped (its job was never submitted).

Under the ``ray`` executor, fragments inside Ray workers submit jobs too, so the run's ledger lives in a Ray
actor that every job service, the driver's and the workers', charges through ``RemoteLedger``.
"""
from __future__ import annotations

import contextlib
import json
import threading

from hqflow.backends import Usage

from ..common.remote import Remote, this_node
from .accounting import BudgetExceeded, ShotBudgetExceeded, plus  # noqa: F401 - the budgets' errors, here too


def check_budgets(budget, shot_budget=None) -> None:
    """A budget is a number >= 0, a shot budget an integer >= 0 (0: exact jobs only), either None (no limit);
    else a one-line ``ValueError``."""
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget < 0):
        raise ValueError(f"budget must be a number >= 0 or None, got {budget!r}")
    if shot_budget is not None and (isinstance(shot_budget, bool) or not isinstance(shot_budget, int)
                                    or shot_budget < 0):
        raise ValueError(f"shot_budget must be an integer >= 0 or None, got {shot_budget!r}")


class Ledger:
    """Spend in one currency, held to an optional budget, and shots, held to an optional shot budget.
    Thread-safe."""

    blocking = False  # its calls never block (``RemoteLedger``'s do)

    def __init__(self, budget: float | None = None, shot_budget: int | None = None, path=None):
        check_budgets(budget, shot_budget)
        self.budget, self.shot_budget = budget, shot_budget
        self.spend, self.currency, self.refused = 0.0, None, 0
        self.shots = 0  # the ended jobs' shots, and those charged for jobs in flight (only under a shot budget)
        self.paid = Usage()  # what the jobs that ended used, all of them
        self._lock = threading.Lock()
        self._file = None if path is None else self._open(path)
        self.spend_before = self.spend  # what earlier processes of the run paid

    def _open(self, path):
        """Start from the file's totals (a line cut short by a kill is dropped, and ended); append from here on."""
        data = b""
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
            data = fh.read()
            for line in data.decode("utf-8", "replace").splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    entry = json.loads(line)
                    self.spend, self.shots = self.spend + float(entry["spend"]), self.shots + int(entry["shots"])
                    self.currency = entry.get("currency") or self.currency
                    used = {k: float("nan") if v is None else v for k, v in entry.get("used", {}).items()}
                    self.paid = plus(self.paid, Usage(**used))
        out = open(path, "a")
        out.write("" if data.endswith(b"\n") or not data else "\n")  # what follows a torn line starts a line
        return out

    def _write(self, spend: float = 0.0, shots: int = 0, used: Usage | None = None) -> None:
        """A change of the totals, on file before the caller goes on (the caller holds the lock)."""
        if self._file is not None:
            entry = {"spend": spend, "shots": shots, "currency": self.currency}
            if used is not None:
                entry["used"] = {k: None if v != v else v for k, v in used.as_dict().items() if v}  # null: unknown
            self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
            self._file.flush()

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
                return (f"budget reached: spent {money(self.spend, self.currency)} of "
                        f"{money(self.budget, self.currency)}; the next job {what} would cost "
                        f"{money(amount, self.currency)}")
            self.spend += amount
            self._write(spend=amount)
            return None

    def settle(self, used: Usage, spend: float = 0.0, shots: int = 0) -> None:
        """A job ended, having ``used`` that; its own cost and shots replace what was charged for it (``spend``,
        ``shots``: actual - charged)."""
        with self._lock:
            self.spend, self.shots, self.paid = self.spend + spend, self.shots + shots, plus(self.paid, used)
            self._write(spend, shots, used)

    def charge_shots(self, shots: int, what: str) -> str | None:
        """Count ``shots`` as spent; or, past the shot budget, count a refusal and say why (None: charged).
        A job of no shots (exact values) is never refused."""
        with self._lock:
            if shots <= 0:
                return None
            if self.shot_budget is not None and self.shots + shots > self.shot_budget:
                self.refused += 1
                return (f"shot budget reached: {self.shots:,} of {self.shot_budget:,} shots spent; "
                        f"the next job {what} would take {shots:,}")
            self.shots += shots
            self._write(shots=shots)
            return None

    def figures(self) -> dict:
        with self._lock:
            return {"spend": self.spend, "currency": self.currency, "budget": self.budget,
                    "refused_jobs": self.refused, "shot_spend": self.shots, "shot_budget": self.shot_budget,
                    "spend_before": self.spend_before, "paid": self.paid.as_dict()}

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def money(amount: float, currency: str | None) -> str:
    """An amount of money as people write it: two decimals, thousands separated, its currency after it
    ("unknown" for None or NaN: a price that cannot be known)."""
    if amount is None or amount != amount:
        return "unknown"
    return f"{amount:,.2f}" + (f" {currency}" if currency else "")


class RemoteLedger(Remote, calls=("charge", "charge_shots")):
    """The same calls on a ``Ledger`` inside a Ray actor on this node (its file is this process's run
    directory's), picklable: it travels to the workers. Its charges block on Ray (``blocking``), so the job
    service handles completions off Ray's callback thread."""

    blocking, _sent = True, False

    def __init__(self, budget: float | None, shot_budget: int | None = None, path=None):
        check_budgets(budget, shot_budget)  # a bad budget fails here, in the caller
        super().__init__(Ledger, budget, shot_budget, path, node=this_node())
        self.budget, self.shot_budget, self._final = budget, shot_budget, None  # _final: the figures once stopped

    def figures(self) -> dict:
        return dict(self._final) if self._final is not None else self.call("figures")

    def settle(self, used: Usage, spend: float = 0.0, shots: int = 0) -> None:
        """``Ledger.settle``, not waited for: a job's end waits for no round trip (the run's first, for the actor's
        process to start). Ray runs one process's calls to the actor in order, so its later calls see it."""
        self.send("settle", used, spend, shots)
        self._sent = True

    def close(self) -> None:
        """Wait until this process's settles are in: one call after them (the executor stops the actor)."""
        if self._sent:
            self.call("figures")

    def stop(self) -> None:
        """Keep the final figures and end the actor (at the end of the run)."""
        if self._final is None:
            self._final = self.figures()
            self.call("close")
            super().stop()
