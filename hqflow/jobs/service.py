"""Every quantum job of a run goes through here: pools, retries, timeouts, budget and spans.

``JobService.submit(pool, batch, parent) -> Future[BatchResult]`` is the one path for circuit jobs, an
``execute`` fragment's or one a classical fragment submits through its ``JobClient`` (``get_client()``):

* the batch is split to the pool's smallest per-job limit (and ``rows_per_job``), and re-joined;
* each part goes, in arrival order (a retried part first), to the member ``Pool.choose`` picks, with its
  identity (``CircuitBatch.key``) and attempt, from which a cloud backend derives idempotent job ids;
* a failed part, or one past ``job_timeout`` (cancelled, its late result dropped), is retried on another
  member up to ``max_retries`` times, then fails with :class:`RetriesExhausted`; a ``BackendError`` with
  ``retryable`` False fails it at once;
* ``job_timeout`` counts from when the job leaves its service's queue (``Job.started()``);
* with a budget, a part whose estimated cost would take the spend past it fails with
  :class:`BudgetExceeded`, not retried; an estimate counts as spend until the job reports its actual
  cost (``metadata["cost"]`` of its result, or of its ``JobFailed``);
* with a shot budget (``Ledger.shot_budget``), likewise for shots: a part's predicted shots
  (``Backend.usage(part).shots``) are charged before it is submitted and replaced by the shots it
  reports; a part of no shots (exact values) is never refused;
* every attempt's usage adds up per request and per run. An attempt counts what its job reports
  (``attempt_usage``), else what its backend predicts (``usage(part)``, priced at the attempt's cost
  estimate): one that timed out, was withdrawn from a removed backend or was cancelled when the service
  closed counts its prediction (a cancelled service job may still bill); one that failed or timed out counts
  its service jobs as failed; one its backend refused at submission counts only what it reports. The
  result's ``metadata["usage"]`` is the request's total over all its attempts (retries included); a request
  that fails for good raises an exception whose attribute ``usage`` holds it (a ``Usage``, whatever the
  exception's type); ``usage`` holds the run's total, and ``stats`` its ``service_jobs``, ``circuits``,
  ``shots`` and ``failed_service_jobs``;
* every attempt is a ``Span`` on its device slot's lane;
* closing the service cancels every job in flight and every failed attempt's job (which ends service
  jobs it left running for a retry to reuse).

Thread-safe: fragments submit from worker threads while backends complete jobs on theirs.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import contextvars
import dataclasses
import heapq
import itertools
import math
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from hqflow.backends import (Backend, BackendError, BatchResult, Capabilities, CircuitBatch, FutureJob, JobFailed, Usage,
                             as_job)

from . import usage as meters

from .dispatch import Member, Pool
from ..common.lanes import Lane
from .ledger import BudgetExceeded, Ledger, ShotBudgetExceeded, plus
from ..common.outcome import CANCELLED, OK, TIMEOUT, Outcome
from ..common.threads import DaemonPool
from ..trace import Span


class RetriesExhausted(JobFailed):
    """A job failed on every attempt the run allows (``max_retries + 1``)."""


_COUNTS = ("service_jobs", "circuits", "shots", "failed_service_jobs")  # the run's usage totals in ``stats``


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _amount(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf
    return float(value) if ok else None


def _reports(meta: dict) -> bool:
    """Whether a job's metadata says what it used: a ``Usage`` under ``"usage"``, or one of the older keys."""
    return (isinstance(meta.get("usage"), Usage) or _amount(meta.get("cost")) is not None
            or any(_count(meta.get(k)) is not None for k in ("service_jobs", "failed_jobs", "shots")))


def attempt_usage(meta: dict | None, predicted: Usage, failed: bool = False) -> Usage:
    """What one job used: the ``Usage`` its metadata (a result's, or a ``JobFailed``'s) holds under
    ``"usage"``; else ``predicted`` with each figure the metadata's older keys report in its place
    (``service_jobs``, ``failed_jobs``, ``cost``, ``currency``, and ``shots`` per circuit, as an Azure job
    reports them). A ``failed`` job that does not count its failed service jobs counts all of them as failed."""
    meta = meta if isinstance(meta, dict) else {}
    if isinstance(meta.get("usage"), Usage):
        return meta["usage"]
    jobs, failed_jobs, shots = (_count(meta.get(k)) for k in ("service_jobs", "failed_jobs", "shots"))
    cost, currency = _amount(meta.get("cost")), meta.get("currency")
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
class _Request:
    """A batch asked for, in parts; per part: its result, its attempts, the members that failed it, and
    the attempts withdrawn (taken back from a removed backend: not failures)."""

    pool: Pool
    parts: list[CircuitBatch]
    parent: Parent

    def __post_init__(self):
        n = self.left = len(self.parts)
        self.results, self.attempts, self.withdrawn = [None] * n, [0] * n, [0] * n
        self.avoid: list[set[int]] = [set() for _ in range(n)]
        self.usage = Usage()  # what its attempts used, all of them
        self.future = cf.Future()
        self.future.set_running_or_notify_cancel()


@dataclass
class _Attempt:
    request: _Request
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


class JobService:
    """Runs circuit jobs over named pools; see the module docstring."""

    def __init__(self, pools: dict[str, Pool], *, max_retries: int = 3, job_timeout: float | None = None,
                 rows_per_job: int | None = None, t0: float | None = None, record=None, run_id: str | None = None,
                 budget: float | None = None, shot_budget: int | None = None, ledger=None, now=time.perf_counter):
        """``ledger``: the run's (shared with its Ray workers); without one, a ``Ledger(budget, shot_budget)``."""
        self.pools, self.max_retries = pools, max_retries
        self.job_timeout, self.rows_per_job = job_timeout, rows_per_job
        self.now = now  # the run's clock (``hqflow.common.clock``): spans are timed by it
        self.t0 = now() if t0 is None else t0
        self.run_id = run_id or uuid.uuid4().hex
        self.ledger = ledger if ledger is not None else Ledger(budget, shot_budget)
        self.record = record if record is not None else (lambda span: None)
        self.stats = {"jobs": 0, "retries": 0, "failed_jobs": 0, "timeouts": 0, "max_job_queue": 0,
                      **dict.fromkeys(_COUNTS, 0)}
        self.usage = Usage()  # the run's, all requests and attempts
        self._lock = threading.RLock()
        self._waiting: deque[tuple[_Request, int]] = deque()
        self._live: dict[int, _Attempt] = {}
        self._tokens = itertools.count()
        self._deadlines: list[tuple[float, int]] = []  # (when to look at the attempt again, its token)
        self._spent: list = []  # jobs of failed attempts: cancelled at close, for what they left running
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._watchdog: threading.Thread | None = None

    # -- asking -----------------------------------------------------------------------
    def _pool(self, name: str) -> Pool:
        if name not in self.pools:
            raise BackendError(f"no backend pool named {name!r}; pools: {', '.join(sorted(self.pools)) or 'none'}")
        return self.pools[name]

    def submit(self, pool: str, batch: CircuitBatch, parent: Parent) -> cf.Future:
        """Run ``batch`` on pool ``pool``; the future holds its ``BatchResult`` (parts re-joined)."""
        p = self._pool(pool)
        if not p.any_fits(batch.template.n_qubits):
            raise BackendError(f"no backend in pool {pool!r} fits circuit {batch.template.name!r} "
                               f"({batch.template.n_qubits} qubits)")
        limit = min((x for x in (p.max_rows(), self.rows_per_job) if x), default=None)
        req = _Request(p, batch.split(limit) if limit else [batch], parent)
        with self._lock:
            if self._closed:
                raise BackendError("the run has ended; no more jobs are taken")
            self._waiting.extend((req, j) for j in range(req.left))
            self.stats["max_job_queue"] = max(self.stats["max_job_queue"], len(self._waiting))
        self._pump()
        return req.future

    # -- dispatch ----------------------------------------------------------------------
    def _pump(self) -> None:
        """Start every waiting part that has a free slot; submissions happen outside the lock."""
        starts = []
        with self._lock:
            waiting = deque()
            while self._waiting:
                req, j = self._waiting.popleft()
                if req.future.done():  # failed meanwhile (another part ran out of retries)
                    continue
                part = req.parts[j]
                choice = req.pool.choose(part.template.n_qubits, req.avoid[j], part.size)
                if choice is None:
                    waiting.append((req, j))
                    continue
                member, slot = choice
                token = next(self._tokens)
                att = _Attempt(req, j, member, slot, req.pool.start(member, slot, part.size))
                self._live[token] = att
                starts.append((token, att))
            self._waiting = waiting
        for token, att in starts:
            req = att.request
            with self._lock:
                if token not in self._live:  # the service closed meanwhile: nothing is charged or submitted
                    continue
            part = req.parts[att.part]
            part = dataclasses.replace(part, key=part.key or f"{self.run_id}/{req.parent.fragment}/{req.parent.step}",
                                       attempt=req.attempts[att.part])
            handle = req.pool.members[att.member].handle
            try:
                self._charge(att, handle, part)
            except BudgetExceeded as exc:
                self._refuse(token, exc)
                continue
            self.stats["jobs"] += 1
            try:
                job = as_job(handle.submit(part))
            except Exception as exc:  # refused at submission: counts as a failed attempt
                self._failed(token, Outcome.error(exc), exc)
                continue
            with self._lock:
                att.job, gone = job, token not in self._live
                if not gone and self.job_timeout:  # the watchdog asks at once whether it has started
                    heapq.heappush(self._deadlines, (att.start, token))
                    if self._watchdog is None:
                        self._watchdog = threading.Thread(target=self._watch, name="hqflow-job-timeouts", daemon=True)
                        self._watchdog.start()
                    self._wake.notify()
            if gone:  # closed or withdrawn while it was submitted: it reached the backend, so cancel and count it
                self._cancelled([att])
                continue
            blocking = self.ledger.blocking  # Ray: never block Ray's callback thread
            job.add_done_callback(lambda _, token=token: (_deferred().submit(self._done, token) if blocking
                                                          else self._done(token)))

    def _charge(self, att: _Attempt, handle, part: CircuitBatch) -> None:
        """Count the attempt's predicted shots (under a shot budget; none for exact values) and estimated cost
        as spent, or refuse it past a budget."""
        shots = 0 if self.ledger.shot_budget is None else self._predicted(att).shots
        if shots:
            refusal = self.ledger.charge_shots(shots, f"on {handle.name}")
            if refusal:
                raise ShotBudgetExceeded(refusal)
            att.shots = shots
        try:
            self._charge_cost(att, handle, part)
        except BudgetExceeded:
            if shots:  # not submitted after all
                self.ledger.settle(Usage(), 0.0, -shots)
                att.shots = None
            raise

    def _charge_cost(self, att: _Attempt, handle, part: CircuitBatch) -> None:
        if not handle.priced:
            return
        try:
            cost = handle.estimate_cost(part)
        except BackendError as exc:
            if self.ledger.budget is not None:  # an unpriced job cannot be held to a budget
                raise BudgetExceeded(f"cannot hold a job to the budget: {exc}") from None
            return
        what = f"on {handle.name} ({cost.jobs} jobs x {cost.shots} shots)"
        refusal = self.ledger.charge(cost.amount, cost.currency, what)
        if refusal:
            raise BudgetExceeded(refusal)
        att.estimate, att.currency = cost.amount, cost.currency

    def _predicted(self, att: _Attempt) -> Usage:
        """The attempt's usage as its backend predicts it (``usage(part)``, asked once), priced at the attempt's
        cost estimate where the prediction has no price; a backend that cannot say: its rows and shots."""
        if att.predicted is None:
            part = att.request.parts[att.part]
            try:
                att.predicted = att.request.pool.members[att.member].handle.usage(part)
            except Exception:  # noqa: BLE001 - e.g. a Ray backend actor lost with its job
                att.predicted = Usage.of(part)
        used = att.predicted
        if att.estimate is not None and not used.cost:
            used = dataclasses.replace(used, cost=att.estimate, currency=used.currency or att.currency)
        return used

    def _used(self, att: _Attempt, meta: dict | None, failed: bool = False) -> Usage:
        """What the attempt used (``attempt_usage``): what its job reports, else its prediction; an attempt
        its backend refused at submission used only what it reports (no job reached the service)."""
        meta = meta if isinstance(meta, dict) else {}
        if isinstance(meta.get("usage"), Usage):
            return meta["usage"]
        if att.job is None and not _reports(meta):
            return Usage()
        return attempt_usage(meta, self._predicted(att), failed)

    def _spend(self, req: _Request, used: Usage) -> None:
        """Add an ended attempt's usage to its request's and the run's (the caller holds the lock)."""
        req.usage, self.usage = plus(req.usage, used), plus(self.usage, used)
        for name in _COUNTS:
            self.stats[name] += getattr(used, name)

    def _settle(self, req: _Request, result: BatchResult | None = None, error: BaseException | None = None) -> None:
        """Hand the request's result or error on, with its usage (``metadata["usage"]``, ``error.usage``)."""
        if req.future.done():
            return
        with contextlib.suppress(cf.InvalidStateError):  # settled meanwhile by another thread
            if error is not None:
                error.usage = req.usage
                req.future.set_exception(error)
            else:
                result.metadata = dict(result.metadata, usage=req.usage)  # concat copied part 0's: replaced
                req.future.set_result(result)

    def figures(self) -> dict:
        return self.ledger.figures()

    def _refuse(self, token: int, exc: BudgetExceeded) -> None:
        with self._lock:
            att = self._live.pop(token, None)
            if att is None:
                return
            req = att.request
            req.pool.release(att.member, att.slot)
        self._settle(req, error=exc)
        self._pump()

    def _done(self, token: int) -> None:
        with self._lock:
            att = self._live.get(token)
            if att is None or att.job is None:  # given up on (timed out): its late result is dropped
                return
        try:
            result: BatchResult = att.job.result(timeout=0)
        except Exception as exc:
            self._failed(token, Outcome.error(exc), exc)
            return
        used = self._used(att, result.metadata)
        finish = None
        with self._lock:
            if self._live.pop(token, None) is None:
                return
            req = att.request
            self._spend(req, used)
            self._span(att, OK, result.metadata)
            req.pool.finish(att.member, att.slot, True, req.parts[att.part].size)
            req.results[att.part] = result
            req.left -= 1
            if req.left == 0:
                finish = req.results[0] if len(req.results) == 1 else BatchResult.concat(req.results)
        self._account(att, result.metadata.get("cost"), used, result.metadata)  # the attempt is this thread's now
        if finish is not None:
            self._settle(req, finish)
        self._pump()

    def _failed(self, token: int, outcome: Outcome, error: BaseException | None = None) -> None:
        """An attempt failed (``error``, or timed out): retry it, or fail its request when it ran out of
        retries or its error is not worth another try (``BackendError.retryable``)."""
        meta = error.metadata if isinstance(error, JobFailed) else None
        meta = meta if isinstance(meta, dict) else {}
        with self._lock:
            att = self._live.get(token)
        if att is None:
            return
        used = self._used(att, meta, failed=True)  # outside the lock: a Ray backend is asked remotely
        give_up = None
        with self._lock:
            if self._live.pop(token, None) is None:
                return
            req, j = att.request, att.part
            self._spend(req, used)
            self._span(att, outcome, {"service_jobs": meta.get("service_jobs")})
            req.pool.finish(att.member, att.slot, False, req.parts[att.part].size)
            self.stats["failed_jobs"] += 1
            if att.job is not None and error is not None:  # (a timed-out one is cancelled by the watchdog)
                self._spent.append(att.job)
            req.attempts[j] += 1
            req.avoid[j].add(att.member)
            if isinstance(error, BackendError) and not error.retryable:
                give_up = error
            elif req.attempts[j] - req.withdrawn[j] > self.max_retries:
                give_up = RetriesExhausted(f"quantum job failed {req.attempts[j]} times on pool {req.pool.name!r}; "
                                           f"last: {outcome}")
            else:
                self.stats["retries"] += 1
                self._waiting.appendleft((req, j))
        # its cost as the job reports it; one that never reached the service (refused at submission) cost nothing
        self._account(att, meta.get("cost") if att.job is not None or _reports(meta) else 0.0, used, meta)
        if give_up is not None:
            self._settle(req, error=give_up)
        self._pump()

    def _account(self, att: _Attempt, actual, used: Usage, meta: dict | None = None) -> None:
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

    def _span(self, att: _Attempt, outcome: Outcome, meta: dict | None = None) -> None:
        """Record the attempt's span, with the figures its job reported in ``meta`` that make sense."""
        p, req, meta = att.request.parent, att.request, meta or {}
        part = req.parts[att.part]
        queued, device, compute = (_amount(meta.get(k)) for k in ("queue_seconds", "device_seconds", "compute_seconds"))
        self.record(Span(p.fragment, "execute", req.pool.resource, p.step, att.start - self.t0,
                         self.now() - self.t0, outcome, p.version, req.pool.lane(att.member, att.slot),
                         p.lane if p.submitted else None, att.estimate, req.pool.members[att.member].node,
                         part.size, part.shots, queued, device, _count(meta.get("service_jobs")), compute))

    # -- timeouts ----------------------------------------------------------------------
    def _watch(self) -> None:
        """An attempt still in its service's queue is asked again a tick later (``job_timeout / 20``, within
        0.05 s and 1 s); one out of it is cancelled and retried ``job_timeout`` after it was first seen out."""
        tick = min(max(self.job_timeout / 20, 0.05), 1.0)
        while True:
            due = []
            with self._lock:
                if self._closed:
                    return
                now = time.perf_counter()
                while self._deadlines and self._deadlines[0][0] <= now:
                    _, token = heapq.heappop(self._deadlines)
                    att = self._live.get(token)
                    if att is not None and att.job is not None:
                        due.append((token, att))
                if not due:
                    self._wake.wait(self._deadlines[0][0] - now if self._deadlines else None)
                    continue
            overdue = []
            for token, att in due:
                if att.running is not None:
                    overdue.append((token, att))
                    continue
                try:
                    started = bool(att.job.started())
                except Exception:  # noqa: BLE001 - a job that cannot say is timed from now
                    started = True
                with self._lock:
                    if token not in self._live:
                        continue
                    if started:  # first seen out of the queue: from submission when that is at once
                        att.running = att.start if now - att.start < tick else now
                        heapq.heappush(self._deadlines, (att.running + self.job_timeout, token))
                    else:
                        heapq.heappush(self._deadlines, (now + tick, token))
            for token, att in overdue:
                with self._lock:
                    if token not in self._live:
                        continue
                    self.stats["timeouts"] += 1
                self._failed(token, TIMEOUT)  # first: its cancellation's callback then finds nothing
                att.job.cancel()  # and ends what it has on its service

    # -- elastic pools ------------------------------------------------------------------
    def add_backend(self, pool: str, member: Member) -> int:
        """``member`` joins pool ``pool`` now; waiting jobs may go to it at once. Returns its index."""
        with self._lock:
            index = self._pool(pool).add(member)
        self._pump()
        return index

    def tune(self, prefetch: int | None = None, rows_per_job: int | None | str = "keep") -> None:
        """From now on: each member keeps ``prefetch`` jobs beyond its devices, and a batch is cut into
        jobs of at most ``rows_per_job`` rows (None: uncut; ``"keep"``: as it is)."""
        with self._lock:
            if prefetch is not None:
                for p in self.pools.values():
                    for m in p.members:
                        m.capacity = m.devices + prefetch
            if rows_per_job != "keep":
                self.rows_per_job = rows_per_job
        self._pump()

    def remove_backend(self, pool: str, index: int) -> int:
        """Take member ``index`` out of pool ``pool``: it gets no more jobs, and its jobs in flight are
        cancelled and queued again, first in line, for the other members (not counted as failures; a
        late result of a cancelled job is dropped). Returns how many jobs were taken back."""
        with self._lock:
            members = self._pool(pool).members
            if not 0 <= index < len(members) or members[index].removed:
                raise BackendError(f"pool {pool!r} has no member {index} in it")
            members[index].removed = True
            taken = [(token, att) for token, att in self._live.items()
                     if att.request.pool is self.pools[pool] and att.member == index]
            for token, att in taken:
                del self._live[token]
                req, j = att.request, att.part
                req.pool.release(att.member, att.slot)
                req.attempts[j] += 1  # a fresh attempt (and job id) on the member it goes to
                req.withdrawn[j] += 1
                self._waiting.appendleft((req, j))
            submitted = [att for _, att in taken if att.job is not None]  # (one being submitted: _pump's)
        self._cancelled(submitted)
        self._pump()
        return len(taken)

    def _cancelled(self, attempts: list[_Attempt]) -> None:
        """Jobs the run gives up on (withdrawn, or cancelled as it ends): cancelled, counted at their predicted
        usage (a cancelled service job may still bill), each a span."""
        for att in attempts:
            with contextlib.suppress(Exception):  # best effort: the run is over either way
                att.job.cancel()
        used = [(att, self._predicted(att)) for att in attempts]  # outside the lock: maybe remote
        with self._lock:
            for att, u in used:
                self._spend(att.request, u)
                self._span(att, CANCELLED)
        for att, u in used:
            self._account(att, None, u)

    # -- the end -----------------------------------------------------------------------
    def close(self) -> None:
        """Cancel every unfinished and every failed attempt's job; pending futures fail."""
        with self._lock:
            self._closed = True
            live, self._live = list(self._live.values()), {}
            waiting, self._waiting = list(self._waiting), deque()
            spent, self._spent = self._spent, []
            self._wake.notify_all()
        for job in spent:
            with contextlib.suppress(Exception):  # best effort: the run is over either way
                job.cancel()
        self._cancelled([att for att in live if att.job is not None])  # those still being submitted: by _pump
        for req in [a.request for a in live] + [r for r, _ in waiting]:
            self._settle(req, error=BackendError("the run ended before this job finished"))


_DEFERRED: list[DaemonPool] = []
_DEFERRED_LOCK = threading.Lock()


def _deferred() -> DaemonPool:
    """One thread per process for job completions whose handling makes blocking Ray calls: a Ray future's
    callback runs on the thread that delivers Ray's replies, and a ``ray.get`` there would wait on itself."""
    with _DEFERRED_LOCK:
        if not _DEFERRED:
            _DEFERRED.append(DaemonPool(1, "hqflow-job-done"))
        return _DEFERRED[0]


# --- the client a fragment gets ----------------------------------------------------------

class JobClient:
    """What a running classical fragment submits circuit jobs through: ``submit(name, batch)`` gives a
    ``Future`` of the ``BatchResult``, ``backend(name)`` the pool as a backend for code that takes one.
    Only the backend names the fragment declared (``Fragment.job_backends``) are open to it."""

    def __init__(self, service: JobService, names: tuple[str, ...], parent: Parent):
        self._service, self.names, self.parent = service, tuple(names), parent

    def _pool(self, name: str) -> Pool:
        if name not in self.names:
            raise BackendError(f"fragment {self.parent.fragment!r} did not declare backend {name!r} "
                               f"(job_backends={list(self.names)}); declare every backend it submits to")
        return self._service.pools[name]

    def submit(self, name: str, batch: CircuitBatch) -> cf.Future:
        """Run ``batch`` on pool ``name``; a ``Future`` of its ``BatchResult``. Under a usage meter
        (``hqflow.jobs.usage.meter()``, bound where this is called) the job's usage, all its attempts, is recorded
        into that meter before the future is done: the result's ``metadata["usage"]``, or a failed job's
        ``exception.usage``."""
        self._pool(name)
        future = self._service.submit(name, batch, self.parent)
        into = meters.current()
        if into is None:
            return future
        metered = cf.Future()
        metered.set_running_or_notify_cancel()  # as the service's: not cancellable

        def hand_on(done: cf.Future) -> None:
            error = done.exception()
            try:
                meters.record(getattr(error, "usage", None) if error is not None
                              else done.result().metadata.get("usage"), into)
            finally:  # the caller never waits forever, whatever the meter did
                if error is not None:
                    metered.set_exception(error)
                else:
                    metered.set_result(done.result())

        future.add_done_callback(hand_on)
        return metered

    def capabilities(self, name: str) -> Capabilities:
        return self._pool(name).capabilities

    def devices(self, name: str) -> int:
        """How many jobs pool ``name`` runs at once."""
        return self._pool(name).devices

    def backend(self, name: str) -> PoolBackend:
        self._pool(name)
        return PoolBackend(self, name)

    @contextlib.contextmanager
    def work(self, label: str):
        """Time a stretch of the fragment's own work done while its jobs are in flight (an actor group
        stepping its environments) as a span in lane ``LANE/label``, so the trace shows the overlap."""
        now = self._service.now
        start = now()
        outcome = OK
        try:
            yield
        except BaseException as exc:
            outcome = Outcome.error(exc)
            raise
        finally:
            p, t0 = self.parent, self._service.t0
            self._service.record(Span(p.fragment, p.kind, p.resource, p.step, start - t0, now() - t0,
                                      outcome, p.version, p.lane.within(label), p.lane))


class PoolBackend(Backend):
    """A pool seen through a client, as a backend: ``submit(batch) -> Job``. Its jobs go through the
    scheduler, never in process: its capabilities say no ``program`` (gradient None for an "autograd" pool)."""

    def __init__(self, client: JobClient, name: str):
        self._client, self.name = client, name

    @property
    def capabilities(self) -> Capabilities:
        caps = self._client.capabilities(self.name)
        return dataclasses.replace(caps, gradient=None) if caps.gradient == "autograd" else caps

    def submit(self, batch: CircuitBatch) -> FutureJob:
        return FutureJob(self._client.submit(self.name, batch), self.name)


_CLIENT: contextvars.ContextVar[JobClient | None] = contextvars.ContextVar("hqflow_job_client", default=None)


def get_client() -> JobClient:
    """The job client of the fragment running on this thread (``BackendError`` outside one). Threads a
    fragment starts do not inherit it: hand them the client (or ``client.backend(name)``) explicitly."""
    client = _CLIENT.get()
    if client is None:
        raise BackendError("get_client() is only available inside a running fragment that declares job_backends")
    return client


def current_client() -> JobClient | None:
    """The running fragment's client, or ``None`` outside a fragment (or one that declared no backends)."""
    return _CLIENT.get()


def pool_backend(name):
    """The running fragment's pool ``name`` as a backend (``JobClient.backend``), or None when
    ``name`` is not a string naming one of its pools (or no fragment is running)."""
    client = _CLIENT.get()
    if isinstance(name, str) and client is not None and name in client.names:
        return client.backend(name)
    return None


@contextlib.contextmanager
def bound_client(client: JobClient | None):
    """Run the body with ``client`` as the current one (what ``get_client()`` returns)."""
    token = _CLIENT.set(client)
    try:
        yield
    finally:
        _CLIENT.reset(token)
