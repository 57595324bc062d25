"""Every quantum job of a run goes through here: pools, retries, timeouts, budget and spans.

``JobService.submit(pool, batch, parent) -> Future[BatchResult]`` is the one path for circuit jobs, an
``execute`` fragment's or one a classical fragment submits through its ``JobClient`` (``hqflow.jobs.client``):

* the batch is split to the pool's smallest per-job limit (and ``rows_per_job``), and re-joined;
* each part goes, in arrival order (a retried part first), to the member ``Pool.choose`` picks, with its
  identity (``CircuitBatch.key``) and attempt, from which a cloud backend derives idempotent job ids;
* a failed part, or one past ``job_timeout`` (cancelled, its late result dropped), is retried on another
  member up to ``max_retries`` times, then fails with :class:`RetriesExhausted`; a ``BackendError`` with
  ``retryable`` False fails it at once;
* ``job_timeout`` counts from when the job leaves its service's queue (``Job.started()``), on the run's clock
  (``hqflow.common.clock``: the machine's, or the cost model's simulated one);
* with a budget or a shot budget (the run's ``Ledger``), a part whose estimated cost or predicted shots would
  take the spend past it fails with :class:`BudgetExceeded`, not retried (a part of no shots is never refused);
* what every attempt used adds up per request (the result's ``metadata["usage"]``, or a failed request's
  ``exception.usage``) and per run (``usage``, ``stats``), counted by ``hqflow.jobs.accounting``;
* every attempt is a ``Span`` on its device slot's lane;
* closing the service cancels every job in flight and every failed attempt's job (which ends service
  jobs it left running for a retry to reuse).

Its settings are one frozen ``JobSettings``, built from the run's config; a Ray worker's service gets the
driver's, pickled. Thread-safe: fragments submit from worker threads while backends complete jobs on theirs.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import itertools
import math
import uuid
from collections import deque
from dataclasses import dataclass

from hqflow.backends import BackendError, BatchResult, CircuitBatch, JobFailed, as_job

from ..common.clock import REAL
from ..common.config import check_ints
from ..common.outcome import CANCELLED, OK, TIMEOUT, Outcome
from . import accounting
from .accounting import BudgetExceeded, Books
from .dispatch import Attempt, Member, Parent, Pool, Request
from .ledger import Ledger


class RetriesExhausted(JobFailed):
    """A job failed on every attempt the run allows (``max_retries + 1``)."""


@dataclass(frozen=True)
class JobSettings:
    """How the job service runs jobs: one value, checked here, that reaches every service of a run (a Ray
    worker's too, pickled) as it is."""

    max_retries: int = 3
    """retries of a failed or timed-out quantum job before the run fails"""
    job_timeout: float | None = None
    """seconds, on the run's clock, before an unfinished quantum job is cancelled and retried (None: wait)"""
    rows_per_job: int | None = None
    """circuits per quantum job at most (None: only a backend's own limit cuts a batch)"""

    def __post_init__(self):
        check_ints(self, max_retries=0, **({} if self.rows_per_job is None else {"rows_per_job": 1}))
        if self.job_timeout is not None and self.job_timeout <= 0:
            raise ValueError(f"job_timeout must be positive or None, got {self.job_timeout!r}")

    @classmethod
    def of(cls, config) -> JobSettings:
        """The settings of a config that has them among its fields, by name (``SchedulerConfig``)."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if hasattr(config, f.name)})


class JobService:
    """Runs circuit jobs over named pools; see the module docstring."""

    def __init__(self, pools: dict[str, Pool], settings: JobSettings = JobSettings(), *, clock=REAL,
                 t0: float | None = None, record=None, run_id: str | None = None, ledger=None):
        """``clock``: the run's (``hqflow.common.clock``): spans and timeouts are timed by it; ``ledger``: the
        run's (shared with its Ray workers); without one, a ``Ledger()`` of no budget."""
        self.pools, self.settings, self.clock = pools, settings, clock
        self.t0 = clock.now() if t0 is None else t0
        self.run_id = run_id or uuid.uuid4().hex
        self.books = Books(ledger if ledger is not None else Ledger())
        self.ledger = self.books.ledger
        self.record = record if record is not None else (lambda span: None)
        self._lock = self.books.lock
        self._waiting: deque[tuple[Request, int]] = deque()
        self._live: dict[int, Attempt] = {}
        self._tokens = itertools.count()
        self._spent: list = []  # jobs of failed attempts: cancelled at close, for what they left running
        self._closed = False
        self._alarms = clock.alarms("hqflow-jobs")  # timeouts (``_Watchdog``), Ray's completions (no thread till used)
        self._watchdog = _Watchdog(self)

    usage = property(lambda self: self.books.usage, doc="what the run's jobs used, every attempt")
    stats = property(lambda self: self.books.stats, doc="the run's counts of jobs, retries, failures, timeouts and "
                                                        "its longest queue, then its usage figures")

    def figures(self) -> dict:
        return self.ledger.figures()

    # -- asking -----------------------------------------------------------------------
    def _pool(self, name: str) -> Pool:
        if name not in self.pools:
            raise BackendError(f"no backend pool named {name!r}; pools: {', '.join(sorted(self.pools)) or 'none'}")
        return self.pools[name]

    def submit(self, pool: str, batch: CircuitBatch, parent: Parent, meter=None) -> cf.Future:
        """Run ``batch`` on pool ``pool``; the future holds its ``BatchResult`` (parts re-joined). ``meter``: the
        usage meter (``accounting.meter()``) to record what it used into before the future is done."""
        p = self._pool(pool)
        if not p.any_fits(batch.template.n_qubits):
            raise BackendError(f"no backend in pool {pool!r} fits circuit {batch.template.name!r} "
                               f"({batch.template.n_qubits} qubits)")
        limit = min((x for x in (p.max_rows(), self.settings.rows_per_job) if x), default=None)
        req = Request(p, batch.split(limit) if limit else [batch], parent, meter)
        with self._lock:
            if self._closed:
                raise BackendError("the run has ended; no more jobs are taken")
            self._waiting.extend((req, j) for j in range(req.left))
            self.books.counts["max_job_queue"] = max(self.books.counts["max_job_queue"], len(self._waiting))
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
                att = Attempt(req, j, member, slot, req.pool.start(member, slot, part.size))
                self._live[token] = att
                starts.append((token, att))
            self._waiting = waiting
        for token, att in starts:
            req = att.request
            with self._lock:
                if token not in self._live:  # the service closed meanwhile: nothing is charged or submitted
                    continue
            part = dataclasses.replace(att.batch, key=att.batch.key or f"{self.run_id}/{req.parent.fragment}/"
                                       f"{req.parent.step}", attempt=req.attempts[att.part])
            try:
                self.books.charge(att, part)
            except BudgetExceeded as exc:
                self._refuse(token, exc)
                continue
            self.books.counts["jobs"] += 1
            try:
                job = as_job(att.handle.submit(part))
            except Exception as exc:  # refused at submission: counts as a failed attempt
                self._failed(token, Outcome.error(exc), exc)
                continue
            with self._lock:
                att.job, gone = job, token not in self._live
                if not gone and self.settings.job_timeout:  # asked at once whether it has started
                    self._watchdog.arm(att.start, token)
            if gone:  # closed or withdrawn while it was submitted: it reached the backend, so cancel and count it
                self._cancelled([att])
                continue
            blocking = self.ledger.blocking  # Ray: never block Ray's callback thread; the service's alarms' takes it
            job.add_done_callback(lambda _, token=token: (self._alarms.at(-math.inf, lambda: self._done(token))
                                                          if blocking else self._done(token)))

    def _refuse(self, token: int, exc: BudgetExceeded) -> None:
        with self._lock:
            att = self._live.pop(token, None)
            if att is None:
                return
            att.request.pool.release(att.member, att.slot)
        self.books.hand_on(att.request, error=exc)
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
        self._end(token, att, OK, result.metadata, result)

    def _failed(self, token: int, outcome: Outcome, error: BaseException | None = None) -> None:
        meta = error.metadata if isinstance(error, JobFailed) else None
        with self._lock:
            att = self._live.get(token)
        if att is not None:
            self._end(token, att, outcome, meta if isinstance(meta, dict) else {}, error=error)

    def _end(self, token: int, att: Attempt, outcome: Outcome, meta: dict, result=None, error=None) -> None:
        """An attempt ended with ``result``, or failed (``error``, or timed out): it is retried, or its request
        fails when it ran out of retries or its error is not worth another try (``BackendError.retryable``)."""
        ok = result is not None
        used = self.books.used(att, meta, failed=not ok)  # outside the lock: a Ray backend is asked remotely
        finish = give_up = None
        with self._lock:
            if self._live.pop(token, None) is None:
                return
            req, j = att.request, att.part
            self.books.spend(req, used)
            self.record(att.span(outcome, self.t0, self.clock.now(), meta if ok else {"service_jobs": meta.get("service_jobs")}))
            req.pool.finish(att.member, att.slot, ok, att.batch.size)
            if ok:
                req.results[j], req.left = result, req.left - 1
                if req.left == 0:
                    finish = req.results[0] if len(req.results) == 1 else BatchResult.concat(req.results)
            else:
                self.books.counts["failed_jobs"] += 1
                if att.job is not None and error is not None:  # (a timed-out one is cancelled by the watchdog)
                    self._spent.append(att.job)
                req.attempts[j] += 1
                req.avoid[j].add(att.member)
                if isinstance(error, BackendError) and not error.retryable:
                    give_up = error
                elif req.attempts[j] - req.withdrawn[j] > self.settings.max_retries:
                    give_up = RetriesExhausted(f"quantum job failed {req.attempts[j]} times on pool "
                                               f"{req.pool.name!r}; last: {outcome}")
                else:
                    self.books.counts["retries"] += 1
                    self._waiting.appendleft((req, j))
        # its cost as its job reports it; a failed one that never reached the service (refused at submission): none
        self.books.settle(att, meta.get("cost") if ok or att.job is not None or accounting.reports(meta) else 0.0,
                          used, meta)  # (the attempt is this thread's now)
        if finish is not None or give_up is not None:
            self.books.hand_on(req, finish, give_up)
        self._pump()

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
                self.settings = dataclasses.replace(self.settings, rows_per_job=rows_per_job)
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

    def _cancelled(self, attempts: list[Attempt]) -> None:
        """Jobs the run gives up on (withdrawn, or cancelled as it ends): cancelled, counted at their predicted
        usage (a cancelled service job may still bill), each a span."""
        for att in attempts:
            with contextlib.suppress(Exception):  # best effort: the run is over either way
                att.job.cancel()
        used = [(att, self.books.predicted(att)) for att in attempts]  # outside the lock: maybe remote
        with self._lock:
            for att, u in used:
                self.books.spend(att.request, u)
                self.record(att.span(CANCELLED, self.t0, self.clock.now()))
        for att, u in used:
            self.books.settle(att, None, u)

    # -- the end -----------------------------------------------------------------------
    def close(self) -> None:
        """Cancel every unfinished and every failed attempt's job; pending futures fail; the ledger closes."""
        with self._lock:
            self._closed = True
            live, self._live = list(self._live.values()), {}
            waiting, self._waiting = list(self._waiting), deque()
            spent, self._spent = self._spent, []
            self._alarms.close()
        for job in spent:
            with contextlib.suppress(Exception):  # best effort: the run is over either way
                job.cancel()
        self._cancelled([att for att in live if att.job is not None])  # those still being submitted: by _pump
        for req in [a.request for a in live] + [r for r, _ in waiting]:
            self.books.hand_on(req, error=BackendError("the run ended before this job finished"))
        self.ledger.close()


class _Watchdog:
    """A service's timeouts, on its run's clock (``clock.alarms``): an attempt still in its service's queue is
    asked again a tick later (``job_timeout / 20``, within 0.05 s and 1 s); one out of it is cancelled and retried
    ``job_timeout`` after it was first seen out."""

    def __init__(self, service):
        self.service = service

    def arm(self, when: float, token: int) -> None:
        """Look at the attempt ``token`` again at ``when`` (the caller holds the service's lock)."""
        self.service._alarms.at(when, lambda: self._look(token))

    def _look(self, token: int) -> None:
        s = self.service
        timeout, now = s.settings.job_timeout, s.clock.now()
        with s._lock:
            att = s._live.get(token)
        if att is None or att.job is None:
            return
        if att.running is None:
            try:
                started = bool(att.job.started())
            except Exception:  # noqa: BLE001 - a job that cannot say is timed from now
                started = True
            tick = min(max(timeout / 20, 0.05), 1.0)
            with s._lock:
                if token in s._live and started:  # first seen out of the queue: from submission when at once
                    att.running = att.start if now - att.start < tick else now
                    self.arm(att.running + timeout, token)
                elif token in s._live:
                    self.arm(now + tick, token)
            return
        with s._lock:
            if token not in s._live:
                return
            s.books.counts["timeouts"] += 1
        s._failed(token, TIMEOUT)  # first: its cancellation's callback then finds nothing
        att.job.cancel()  # and ends what it has on its service
