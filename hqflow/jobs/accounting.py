"""Usage, counted in one place: what quantum jobs used on their services (a ``Usage``), charged before a job is
submitted, settled when it ends, withdrawn when it never runs. The job service, the ledger, the meter, a
workload's record and the spans read or call what is here; nothing else adds usage up.

* a job's usage: the ``Usage`` its result (or ``JobFailed``) reports under ``metadata["usage"]``, else its
  backend's prediction with each figure the metadata's older keys report in its place (``attempt_usage``);
* totals (``plus``): a report in another currency than the total's adds its counts, not its cost;
* the meter: ``with accounting.meter() as m:`` records the jobs submitted in the block (and its threads that
  inherit the context) as they end; ``m.total`` is a ``Usage``;
* a job service's ``Books``: each attempt charged to the run's ledger (or refused past a budget) and settled at
  what it reports, the usage of each request and of the run, and the run's counts (``stats``).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import threading

import numpy as np

from hqflow.backends import Backend, BackendError, CircuitBatch, Usage

FIGURES = ("service_jobs", "circuits", "shots", "failed_service_jobs")  # a run's usage totals in ``stats``
COUNTS = ("jobs", "retries", "failed_jobs", "timeouts", "max_job_queue")  # the job service's own counts


class BudgetExceeded(BackendError):
    """A job would have taken the run's spend past its budget; it was not submitted."""


class ShotBudgetExceeded(BudgetExceeded):
    """A job would have taken the run's shots past its shot budget; it was not submitted."""


def count(value) -> int | None:
    """A count a job reports (an integer >= 0), or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def amount(value) -> float | None:
    """An amount a job reports (a finite number >= 0: money, seconds), or None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf
    return float(value) if ok else None


def reports(meta: dict) -> bool:
    """Whether a job's metadata says what it used: a ``Usage`` under ``"usage"``, or one of the older keys."""
    return (isinstance(meta.get("usage"), Usage) or amount(meta.get("cost")) is not None
            or any(count(meta.get(k)) is not None for k in ("service_jobs", "failed_jobs", "shots")))


def attempt_usage(meta: dict | None, predicted: Usage, failed: bool = False) -> Usage:
    """What one job used: the ``Usage`` its metadata (a result's, or a ``JobFailed``'s) holds under
    ``"usage"``; else ``predicted`` with each figure the metadata's older keys report in its place
    (``service_jobs``, ``failed_jobs``, ``cost``, ``currency``, and ``shots`` per circuit, as an Azure job
    reports them). A ``failed`` job that does not count its failed service jobs counts all of them as failed."""
    meta = meta if isinstance(meta, dict) else {}
    if isinstance(meta.get("usage"), Usage):
        return meta["usage"]
    jobs, failed_jobs, shots = (count(meta.get(k)) for k in ("service_jobs", "failed_jobs", "shots"))
    cost, currency = amount(meta.get("cost")), meta.get("currency")
    jobs = predicted.service_jobs if jobs is None else jobs
    if failed_jobs is None:
        failed_jobs = jobs if failed else predicted.failed_service_jobs
    return Usage(jobs, predicted.circuits, predicted.shots if shots is None else shots * predicted.circuits,
                 predicted.cost if cost is None else cost,
                 currency if cost is not None and isinstance(currency, str) else predicted.currency, failed_jobs)


def job_usage(backend: Backend, batch: CircuitBatch, meta: dict | None = None, failed: bool = False) -> Usage:
    """What a job of ``batch`` on ``backend`` used (``attempt_usage``), its prediction being the backend's
    ``usage(batch)``, priced at its ``estimate_cost`` where the backend prices its jobs and predicts no cost."""
    if isinstance((meta or {}).get("usage"), Usage):
        return meta["usage"]
    predicted = backend.usage(batch)
    if not predicted.cost and backend.priced:
        with contextlib.suppress(BackendError):
            cost = backend.estimate_cost(batch)
            predicted = dataclasses.replace(predicted, cost=cost.amount, currency=cost.currency)
    return attempt_usage(meta, predicted, failed)


def plus(total: Usage, used: Usage) -> Usage:
    """``total + used``; a report priced in another currency than the total's adds its counts, not its cost."""
    try:
        return total + used
    except BackendError:
        return total + dataclasses.replace(used, cost=0.0, currency=None)


def across(used: Usage, reduce) -> Usage:
    """``used`` summed over processes by ``reduce`` (arrays -> their sums, in a fixed order: a collective's):
    each process's count of the jobs it submitted."""
    counts, cost = reduce([np.array([getattr(used, k) for k in FIGURES]), np.array([used.cost])])
    jobs, circuits, shots, failed = (int(c) for c in counts)
    return Usage(jobs, circuits, shots, float(cost[0]), used.currency, failed)


class Tally:
    """A thread-safe running total of ``Usage`` (``total``): a meter."""

    def __init__(self, total: Usage = Usage()):
        self._lock = threading.Lock()
        self.total = total

    def add(self, used: Usage) -> None:
        with self._lock:
            self.total = plus(self.total, used)


_METER: contextvars.ContextVar[Tally | None] = contextvars.ContextVar("hqflow_usage_meter", default=None)


@contextlib.contextmanager
def meter():
    """Bind a fresh meter (a ``Tally``) for the block (nested meters: the innermost records)."""
    m = Tally()
    token = _METER.set(m)
    try:
        yield m
    finally:
        _METER.reset(token)


def current() -> Tally | None:
    """The meter bound here, if any (capture it at submit: a job ends on another thread)."""
    return _METER.get()


def record(used: Usage | None, into: Tally | None = None) -> None:
    """Add ``used`` to ``into`` (default: the current meter); nothing without one."""
    m = into if into is not None else _METER.get()
    if m is not None and used is not None:
        m.add(used)


def record_job(backend: Backend, batch: CircuitBatch, meta: dict) -> None:
    """Record on the current meter a job that went through no job service: the ``Usage`` its result reports, else
    its backend's ``usage(batch)``."""
    if current() is not None:
        used = meta.get("usage")
        record(used if isinstance(used, Usage) else backend.usage(batch))


class Books:
    """A job service's accounts over its attempts (``hqflow.jobs.dispatch.Attempt``)."""

    def __init__(self, ledger):
        self.ledger = ledger
        self.usage = Usage()  # the run's: every request's, every attempt
        self.counts = dict.fromkeys(COUNTS, 0)
        self.lock = threading.RLock()  # the service's too

    @property
    def stats(self) -> dict:
        """The counts, then the run's usage figures."""
        return dict(self.counts, **{k: getattr(self.usage, k) for k in FIGURES})

    def absorb(self, stats: dict, usage: Usage) -> None:
        """Another service's ``stats`` and ``usage`` (a Ray worker's, for one call) join these."""
        with self.lock:
            for k in COUNTS:
                self.counts[k] = (max if k == "max_job_queue" else sum)((self.counts[k], stats[k]))
            self.usage = plus(self.usage, usage)

    # -- charged before submission ---------------------------------------------------------------------------
    def charge(self, att, part: CircuitBatch) -> None:
        """Count the attempt's predicted shots (under a shot budget; none for exact values) and estimated cost
        as spent, or refuse it past a budget (``BudgetExceeded``)."""
        shots = 0 if self.ledger.shot_budget is None else self.predicted(att).shots
        if shots:
            refusal = self.ledger.charge_shots(shots, f"on {att.handle.name}")
            if refusal:
                raise ShotBudgetExceeded(refusal)
            att.shots = shots
        try:
            self._charge_cost(att, part)
        except BudgetExceeded:
            if shots:  # not submitted after all: withdrawn
                self.ledger.settle(Usage(), 0.0, -shots)
                att.shots = None
            raise

    def _charge_cost(self, att, part: CircuitBatch) -> None:
        handle = att.handle
        if not handle.priced:
            return
        try:
            cost = handle.estimate_cost(part)
        except BackendError as exc:
            if self.ledger.budget is not None:  # an unpriced job cannot be held to a budget
                raise BudgetExceeded(f"cannot hold a job to the budget: {exc}") from None
            return
        refusal = self.ledger.charge(cost.amount, cost.currency, f"on {handle.name} ({cost.jobs} jobs x {cost.shots} shots)")
        if refusal:
            raise BudgetExceeded(refusal)
        att.estimate, att.currency = cost.amount, cost.currency

    # -- what an attempt used --------------------------------------------------------------------------------
    def predicted(self, att) -> Usage:
        """The attempt's usage as its backend predicts it (``usage(part)``, asked once), priced at the attempt's
        cost estimate where the prediction has no price; a backend that cannot say: its rows and shots."""
        if att.predicted is None:
            try:
                att.predicted = att.handle.usage(att.batch)
            except Exception:  # noqa: BLE001 - e.g. a Ray backend actor lost with its job
                att.predicted = Usage.of(att.batch)
        used = att.predicted
        if att.estimate is not None and not used.cost:
            used = dataclasses.replace(used, cost=att.estimate, currency=used.currency or att.currency)
        return used

    def used(self, att, meta: dict | None, failed: bool = False) -> Usage:
        """What the attempt used (``attempt_usage``): what its job reports, else its prediction; an attempt
        its backend refused at submission used only what it reports (no job reached the service)."""
        meta = meta if isinstance(meta, dict) else {}
        if isinstance(meta.get("usage"), Usage):
            return meta["usage"]
        if att.job is None and not reports(meta):
            return Usage()
        return attempt_usage(meta, self.predicted(att), failed)

    # -- settled when it ends --------------------------------------------------------------------------------
    def spend(self, request, used: Usage) -> None:
        """Add an ended attempt's usage to its request's (``request.usage``) and the run's (the caller holds
        ``lock``)."""
        request.usage, self.usage = plus(request.usage, used), plus(self.usage, used)

    def settle(self, att, actual, used: Usage, meta: dict | None = None) -> None:
        """An ended attempt into the ledger: what it used, less what a run before this process paid for it
        (``meta["found"]``: service jobs a resumed run found by their ids), and its job's own cost (``actual``, if
        a number) and shots in place of the estimates charged for it."""
        found = (meta or {}).get("found")
        used = used - found if isinstance(found, Usage) else used
        spend = shots = 0
        if att.estimate is not None and isinstance(actual, (int, float)) and actual == actual:
            spend, att.estimate = float(actual) - att.estimate, float(actual)
        if used.shots != (att.shots or 0):  # (uncharged: no shot budget) the ledger counts every shot all the same
            shots, att.shots = used.shots - (att.shots or 0), used.shots
        self.ledger.settle(used, spend, shots)

    def hand_on(self, request, result=None, error: BaseException | None = None) -> None:
        """Hand the request's result or error on, once, with its usage (``metadata["usage"]``, ``error.usage``),
        recorded first into the meter bound where it was submitted (``request.meter``)."""
        with self.lock:
            if request.handed:
                return
            request.handed = True
        record(request.usage, request.meter)
        if error is not None:
            error.usage = request.usage
            request.future.set_exception(error)
        else:
            result.metadata = dict(result.metadata, usage=request.usage)  # concat copied part 0's: replaced
            request.future.set_result(result)
