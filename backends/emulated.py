"""``emulated-qpu``: a simulator dressed up as a cloud QPU, for tests and benchmarks.

It wraps any simulator backend (``"reference"`` by default) and returns *its*
results, so they are correct, but delivers them with the timing and faults of a
remote machine. Job ``k`` (submissions to one instance, counted from 0) submitted
at time ``t``:

1. waits in the cloud queue until ``t + q``, where ``q`` is ``queue_wait``, or a
   draw with that mean (``queue_distribution`` "exponential" or "uniform" on
   ``[0, 2 * queue_wait]``). Queue waits of different jobs overlap;
2. then takes the first free of ``max_in_flight`` exclusive device slots, in
   the order jobs leave the queue, for ``per_job + per_circuit * B + per_shot *
   shots * B`` seconds (``B`` rows; shots 0 when exact), times ``1 + jitter * z``
   with ``z ~ N(0, 1)``, clipped at 0. (``queue_wait`` and the three device times are at most ``MAX_SECONDS``,
   10**6 s, ``jitter`` at most ``MAX_JITTER``, 10, and ``max_in_flight`` at most ``MAX_SLOTS``, 1,024: larger
   values are refused at construction.) These are the model's times, not the
   threads': a slot starts a job when its queue wait ends or the slot's
   previous job ends, whichever is later, so a thread waking late on a busy
   machine does not lengthen the latency. The wrapped simulator computes the
   result in the slot; the job is delivered at the modelled end, or when the
   computation ends if that is later. Waiting sleeps; it burns no CPU. The result's metadata
   says the modelled ``device_seconds`` and the CPU seconds the computation took on this machine
   (``compute_seconds``, the thread's CPU time): a QPU that this machine stands in for shares its
   CPU with the run's classical work, and the cost model (``hqflow.planning.costmodel``) counts that.

Faults: a failing job (``k in fail_jobs`` or with probability ``failure_rate``)
takes its full latency, then raises ``JobFailed``. A hanging job (``k in
hang_jobs`` or with probability ``timeout_rate``) stays queued until cancelled;
hanging wins over failing; a hanging job counts as started (``started()``) once
its queue wait is over, as a job stuck on the device would, though it holds no
device slot. ``cancel()`` stops a job that is queued or hanging; one on the device runs to its end. The queue draw, jitter and fault decisions of job
``k`` come from ``np.random.default_rng([seed, k])`` only, so they reproduce
whatever the thread timing. A batch larger than ``max_circuits_per_job`` is
rejected, as a cloud service would; split it with ``CircuitBatch.split``. So is a batch with more
shots than ``max_shots`` (None: no cap), to emulate a capped target.

Each submit is one service job (``capabilities.service_job_rows`` None). The emulated QPU is free unless
``price_as`` names an Azure target (``ionq.qpu.aria-1``, say): then it is ``priced``, and
``estimate_cost(batch)`` is that target's list price for the batch, with the target's own packing
(``hqflow.backends.azure.cost.list_price``), at the batch's shots or, for an exact batch,
``price_shots``; ``usage(batch)`` carries that cost. ``debias=False`` prices an IonQ QPU target with IonQ's error
mitigation off (its lower minimum per job; the emulated results do not change). Its capabilities say ``row_seeded`` when the
wrapped simulator's do.

``share=K`` (or ``"auto"``; default 1, off) lets up to K rows of a batch share one circuit on disjoint registers,
as many as fit the device's qubits (``hqflow.backends.share``): the ``max_qubits`` option, else the ``price_as``
target's (25 on Aria), which ``capabilities.max_qubits`` then says. Its usage, price and modelled device time count
the shared circuits, ⌈B / k⌉ (each priced as one circuit of k × the gates). Its values are still computed row by
row on the wrapped simulator, never as a wide circuit: a register's marginal is distributionally the row alone, so
the values are those a real shared circuit estimates, and a row-seeded batch gives results bit-identical to
``share=1``. ``max_circuits_per_job`` still counts rows, as the runtime cuts batches by it.

``noise=TARGET`` (an Azure target of ``backends/noise_targets.json``, say ``ionq.qpu.aria-1``) runs the jobs
under that target's noise model (``backends/noise.py``): the wrapped simulator becomes ``density`` with that
noise (``wrapped`` may be left at its default or name ``compiled`` or ``density``; ``wrapped_options`` go to
``density``), so results stay exact or row-seeded as before, now noisy.

Threads: one for the queue (a timer heap) and one per device slot, all daemon
threads, started by a submit and ended when no job is left; ``close()`` also cancels
every unfinished job. The interpreter's exit closes the backend and joins them
(``hqflow.backends.threads``). Jobs also have ``status()``, timestamps and done callbacks.
"""
from __future__ import annotations

import heapq
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hqflow.ir.circuit import MAX_SHOTS
from hqflow.ir.text import number, shown

from . import make_backend, threads
from . import share as shared
from .base import (
    Backend,
    BackendError,
    BatchResult,
    Capabilities,
    CircuitBatch,
    Cost,
    Job,
    JobCancelled,
    JobFailed,
    RequestRefused,
    Usage,
)

_log = logging.getLogger(__name__)
QUEUE_DISTRIBUTIONS = ("fixed", "exponential", "uniform")
MAX_SECONDS = 10**6  # a latency's cap (11.6 days): past any cloud queue, within what a thread can wait
MAX_JITTER = 10.0  # the relative spread's cap: a job's time is (1 + jitter * z) times its mean, clipped at 0
MAX_SLOTS = 1024  # device slots: a thread each
_WAIT = 3600.0  # a device slot's longest single wait (per_shot x shots x rows may pass what a thread can wait)


def _check_range(name: str, value: float, hi: float, unit: str = "") -> None:
    if not isinstance(value, (int, float)) or not 0 <= value <= hi:  # NaN fails; a huge int compares exactly
        raise BackendError(f"emulated-qpu: {name} must be a number in [0, {hi:g}]{unit}, got {number(value)}")


@dataclass(frozen=True)
class LatencyModel:
    """Seconds a job spends in the cloud queue and on the device (see the module docstring)."""

    queue_wait: float = 0.0
    per_job: float = 0.0
    per_circuit: float = 0.0
    per_shot: float = 0.0
    jitter: float = 0.0
    queue_distribution: str = "fixed"

    def __post_init__(self):
        for name in ("queue_wait", "per_job", "per_circuit", "per_shot"):
            _check_range(name, getattr(self, name), MAX_SECONDS, " seconds")
        _check_range("jitter", self.jitter, MAX_JITTER)
        if self.queue_distribution not in QUEUE_DISTRIBUTIONS:
            raise BackendError(f"emulated-qpu: queue_distribution must be one of {QUEUE_DISTRIBUTIONS}, "
                               f"got {shown(self.queue_distribution)}")


@dataclass(frozen=True)
class FaultModel:
    """Which jobs fail or hang: per-job probabilities plus explicit job indices."""

    failure_rate: float = 0.0
    timeout_rate: float = 0.0
    fail_jobs: tuple[int, ...] = ()
    hang_jobs: tuple[int, ...] = ()

    def __post_init__(self):
        for name in ("failure_rate", "timeout_rate"):
            _check_range(name, getattr(self, name), 1.0)
        for name in ("fail_jobs", "hang_jobs"):
            given = getattr(self, name)
            jobs = tuple(given) if np.iterable(given) and not isinstance(given, str) else None
            if jobs is None or not all(isinstance(k, (int, np.integer)) and k >= 0 for k in jobs):
                raise BackendError(f"emulated-qpu: {name} must be a sequence of job indices >= 0, got {shown(given)}")
            object.__setattr__(self, name, jobs)


class EmulatedJob(Job):
    """One job: the ``Job`` protocol plus ``status()``, timestamps and done callbacks.

    ``submitted_at``, ``started_at`` (device slot taken) and ``finished_at`` are
    ``time.perf_counter()`` values, ``None`` until known.
    """

    def __init__(self, backend: str, index: int, batch: CircuitBatch, queue_seconds: float,
                 device_seconds: float, fails: bool, hangs: bool):
        self.backend, self.index, self.batch = backend, index, batch
        self.queue_seconds, self.device_seconds, self.fails, self.hangs = queue_seconds, device_seconds, fails, hangs
        self.submitted_at: float = time.perf_counter()
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self._state = "queued"
        self._result: BatchResult | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._callbacks: list[Callable[[EmulatedJob], Any]] = []

    def status(self) -> str:
        return self._state

    def started(self) -> bool:
        """Out of the cloud queue: on a device, finished, or hanging past its queue wait."""
        if self._state != "queued":
            return True
        return self.hangs and time.perf_counter() >= self.submitted_at + self.queue_seconds

    def done(self) -> bool:
        return self._finished.is_set()

    def result(self, timeout: float | None = None) -> BatchResult:
        if not self._finished.wait(timeout):
            raise TimeoutError(f"job {self.index} on {self.backend} not done after {timeout}s")
        if self._error is not None:
            raise self._error
        return self._result

    def cancel(self) -> bool:
        """Cancel a job still queued (or hanging); ``False`` once it runs or has finished."""
        if self._state == "cancelled":
            return True
        return self._settle("cancelled", only_from="queued")

    def add_done_callback(self, fn: Callable[[EmulatedJob], Any]) -> None:
        """Call ``fn(job)`` once the job finishes, fails or is cancelled (now if it has)."""
        with self._lock:
            if not self._finished.is_set():
                self._callbacks.append(fn)
                return
        self._call(fn)

    def _start(self, at: float) -> bool:
        """Take a device slot from modelled time ``at``; ``False`` if the job was cancelled meanwhile."""
        with self._lock:
            if self._state != "queued":
                return False
            self._state, self.started_at = "running", at
            return True

    def _settle(self, state: str, result: BatchResult | None = None, error: BaseException | None = None,
                only_from: str | None = None) -> bool:
        """Finish the job once (later calls are ignored) and run the callbacks."""
        with self._lock:
            if self._finished.is_set() or (only_from and self._state != only_from):
                return False
            if state == "cancelled":
                error = JobCancelled(f"job {self.index} on {self.backend} was cancelled")
            self._state, self._result, self._error = state, result, error
            self.finished_at = time.perf_counter()
            self._finished.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._call(fn)
        return True

    def _call(self, fn: Callable[[EmulatedJob], Any]) -> None:
        try:
            fn(self)
        except Exception:  # a callback's bug must not break the backend
            _log.exception("done callback of job %d on %s raised", self.index, self.backend)

    def __repr__(self) -> str:
        return f"<EmulatedJob {self.index} on {self.backend!r}: {self._state}>"


class EmulatedQPU(Backend):
    """A simulator behind cloud-QPU latency and faults; see the module docstring.

    ``latency=LatencyModel(...)`` / ``faults=FaultModel(...)`` may replace the
    individual latency / fault arguments (not both at once).
    """

    priced = False  # per instance: True with ``price_as`` (an emulated QPU without it is free)

    def __init__(self, wrapped: str | Backend = "reference", *, queue_wait: float = 0.0, per_job: float = 0.0,
                 per_circuit: float = 0.0, per_shot: float = 0.0, jitter: float = 0.0,
                 queue_distribution: str = "fixed", max_in_flight: int = 1, failure_rate: float = 0.0,
                 timeout_rate: float = 0.0, fail_jobs=(), hang_jobs=(), seed: int = 0,
                 name: str = "emulated-qpu", max_qubits: int | None = None,
                 max_circuits_per_job: int | None = None, wrapped_options: dict | None = None,
                 latency: LatencyModel | None = None, faults: FaultModel | None = None,
                 max_shots: int | None = None, price_as: str | None = None, price_shots: int = 1000,
                 debias: bool | None = None, share: int | str = 1, noise: str | None = None):
        given = LatencyModel(queue_wait, per_job, per_circuit, per_shot, jitter, queue_distribution)
        self.latency = _either("latency", latency, given, LatencyModel)
        self.faults = _either("faults", faults, FaultModel(failure_rate, timeout_rate, fail_jobs, hang_jobs),
                              FaultModel)
        for arg, value, low, high in (("max_in_flight", max_in_flight, 1, MAX_SLOTS), ("seed", seed, 0, None),
                                      ("max_qubits", max_qubits, 1, None),
                                      ("max_circuits_per_job", max_circuits_per_job, 1, None),
                                      ("max_shots", max_shots, 1, None), ("price_shots", price_shots, 1, MAX_SHOTS)):
            if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool)
                                      or value < low or value > (high or value)):
                raise BackendError(f"emulated-qpu: {arg} must be {'a positive integer' if low else 'an integer >= 0'}"
                                   f"{f' up to {high:,}' if high else ''}, got {number(value)}")
        if not isinstance(name, str) or not name:
            raise BackendError(f"emulated-qpu: name must be a non-empty string, got {shown(name)}")
        if noise is not None:
            if not isinstance(wrapped, str) or wrapped not in ("reference", "compiled", "density"):
                raise BackendError(f"emulated-qpu: noise runs on the 'density' simulator, so wrapped must be left "
                                   f"at its default or be 'compiled' or 'density', got {shown(getattr(wrapped, 'name', wrapped))}")
            wrapped, wrapped_options = "density", {**(wrapped_options or {}), "noise": noise}
        if isinstance(wrapped, str):
            wrapped = make_backend((wrapped, wrapped_options or {}))
        elif not hasattr(wrapped, "capabilities"):  # a backend, or a simulator with run_checked
            raise BackendError(f"emulated-qpu: wrapped must be a backend's name or a backend, got {shown(wrapped)}")
        elif wrapped_options:
            raise BackendError("emulated-qpu: wrapped_options only apply when wrapped is a backend name")
        self.name, self.seed, self.max_in_flight = name, seed, int(max_in_flight)
        self.wrapped = wrapped
        self.price_as, self.price_shots, self.debias = _price_target(price_as, debias), int(price_shots), debias
        self.priced, self.share = self.price_as is not None, shared.option(share)
        inner = wrapped.capabilities
        qubits = min(inner.max_qubits, max_qubits or inner.max_qubits)
        device = [q for q in (max_qubits, _price_qubits(self.price_as)) if q]
        if self.share != 1 and device:  # the device's qubits, which registers fill (rows run on the simulator)
            qubits = min(device)
        self._caps = Capabilities(
            name, max_qubits=qubits,
            max_circuits_per_job=max_circuits_per_job or inner.max_circuits_per_job,
            exact=inner.exact, shots=inner.shots, gradient=None, device="qpu",
            max_shots=_price_cap(self.price_as) if max_shots is None else int(max_shots), row_seeded=inner.row_seeded,
            share=shared.most(self.share, qubits))
        self._run = getattr(wrapped, "run_checked", None) or (lambda batch: wrapped.submit(batch).result())
        self._cond = threading.Condition()
        self._waiting: list[tuple[float, int, EmulatedJob]] = []  # heap of (ready time, index, job)
        self._live: set[EmulatedJob] = set()
        self._submitted = 0
        self._closed = threading.Event()  # this generation's stop signal; close() starts a new one
        self._ready: queue.SimpleQueue | None = None  # jobs out of the queue, for the device slots
        threads.on_exit(self.close)  # the interpreter's exit ends the threads and joins them

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def submit(self, batch: CircuitBatch) -> EmulatedJob:
        caps = self._caps
        if batch.template.n_qubits > caps.max_qubits:
            raise BackendError(f"circuit {batch.template.name!r} has {batch.template.n_qubits} qubits but "
                               f"backend {self.name!r} allows at most {caps.max_qubits}")
        if caps.max_circuits_per_job and batch.size > caps.max_circuits_per_job:
            raise BackendError(f"batch of {batch.size} circuits exceeds {self.name!r}'s limit of "
                               f"{caps.max_circuits_per_job} per job; split it with batch.split()")
        if caps.max_shots is not None and (batch.shots or 0) > caps.max_shots:
            raise RequestRefused(f"{self.name} takes at most {caps.max_shots:,} shots per job (its max_shots "
                                 f"option{', or its price_as target' if self.price_as else ''}); got {batch.shots}")
        self._k(batch)  # an explicit share that no two rows fit is refused
        getattr(self.wrapped, "check", lambda b: None)(batch)  # fail fast, in the caller's thread
        with self._cond:
            job = self._new_job(self._submitted, batch)
            self._submitted += 1
            self._live.add(job)
            if self._ready is None:
                self._start_threads()
            if not job.hangs:
                heapq.heappush(self._waiting, (job.submitted_at + job.queue_seconds, job.index, job))
                self._cond.notify()
        job.add_done_callback(self._forget)
        return job

    def estimate_cost(self, batch: CircuitBatch) -> Cost:
        """With ``price_as``: the target's list price for ``batch`` at its shots (``price_shots`` if exact)."""
        if not self.priced:
            return super().estimate_cost(batch)
        from .azure.cost import list_price

        return list_price(self.price_as, batch, shots=batch.shots or self.price_shots, debias=self.debias,
                          share=self._k(batch))

    def usage(self, batch: CircuitBatch) -> Usage:
        """One service job per submit, its circuits (the rows, or ⌈rows / k⌉ with ``share``) and their shots; with
        ``price_as``, its list price."""
        circuits = shared.circuits(batch.size, self._k(batch))
        cost = self.estimate_cost(batch) if self.priced else None
        return Usage(1, circuits, circuits * (batch.shots or 0), cost.amount if cost else 0.0,
                     cost.currency if cost else None)

    def _k(self, batch: CircuitBatch) -> int:
        """Rows of ``batch`` that share a circuit (1 without ``share``)."""
        if self.share == 1:
            return 1
        return shared.rows_per_circuit(self.share, batch.template.n_qubits, self._caps.max_qubits, self.name)

    def _new_job(self, k: int, batch: CircuitBatch) -> EmulatedJob:
        """Job ``k`` with its seeded draws (always the same four, whatever the settings)."""
        lat, faults = self.latency, self.faults
        rng = np.random.default_rng([self.seed, k])
        u_fail, u_hang, u_queue = rng.random(3)
        z = rng.standard_normal()
        wait = {"fixed": lat.queue_wait, "exponential": -lat.queue_wait * math.log1p(-u_queue),
                "uniform": 2 * lat.queue_wait * u_queue}[lat.queue_distribution]
        device = lat.per_job + shared.circuits(batch.size, self._k(batch)) * (lat.per_circuit +
                                                                               lat.per_shot * (batch.shots or 0))
        device *= max(0.0, 1.0 + lat.jitter * z)
        hangs = k in faults.hang_jobs or u_hang < faults.timeout_rate
        fails = k in faults.fail_jobs or u_fail < faults.failure_rate
        return EmulatedJob(self.name, k, batch, wait, device, fails, hangs)

    def _start_threads(self) -> None:
        """One daemon thread for the cloud queue and one per device slot (at the first submit
        after construction or after ``close()``); each generation has its own stop signal."""
        self._closed, self._ready = threading.Event(), queue.SimpleQueue()
        closed, ready = self._closed, self._ready
        threads.start(self._dispatch, f"hqflow-{self.name}-queue", (closed, ready))
        for slot in range(self.max_in_flight):
            threads.start(self._device_slot, f"hqflow-{self.name}-slot{slot}", (closed, ready))

    def _dispatch(self, closed: threading.Event, ready: queue.SimpleQueue) -> None:
        """The queue thread: pass each job on to the device slots when its queue wait ends."""
        with self._cond:
            while not closed.is_set():
                now = time.perf_counter()
                while self._waiting and self._waiting[0][0] <= now:
                    ready.put(heapq.heappop(self._waiting)[2])
                self._cond.wait(self._waiting[0][0] - now if self._waiting else None)

    def _device_slot(self, closed: threading.Event, ready: queue.SimpleQueue) -> None:
        """A device slot thread: run ready jobs one at a time, in the order they left the queue.

        Times are the model's, not this thread's: a job starts when its queue
        wait ends or when the slot's previous job ends, whichever is later, so a
        late wake-up on a busy machine does not lengthen the modelled latency.
        """
        free_at = 0.0
        while (job := ready.get()) is not None:
            start = min(max(job.submitted_at + job.queue_seconds, free_at), time.perf_counter())
            if job._start(start):  # False if it was cancelled meanwhile
                self._execute(job, closed)
                free_at = start + job.device_seconds

    def _execute(self, job: EmulatedJob, closed: threading.Event) -> None:
        """Compute the result, then sleep out the rest of the job's modelled device time."""
        result = error = None
        if job.fails:
            error = JobFailed(f"injected failure: job {job.index} on {self.name} failed")
        else:
            try:
                cpu = time.thread_time()
                result = self._run(job.batch)
                result.metadata.update(backend=self.name, simulator=self.wrapped.name, job=job.index,
                                       queue_seconds=job.queue_seconds, device_seconds=job.device_seconds,
                                       compute_seconds=time.thread_time() - cpu)
            except Exception as exc:  # the simulator's own error: keep it as the cause
                error = JobFailed(f"job {job.index} on {self.name} failed in simulator "
                                  f"{self.wrapped.name!r}: {type(exc).__name__}: {exc}")
                error.__cause__ = exc
        end = job.started_at + job.device_seconds
        while (left := end - time.perf_counter()) > 0 and not closed.wait(min(left, _WAIT)):
            pass  # Event.wait may wake a hair early; never deliver before the modelled end
        job._settle("failed" if error else "done", result, error)  # a no-op if close() cancelled it

    def _forget(self, job: EmulatedJob) -> None:
        with self._cond:
            self._live.discard(job)
            if not self._live:  # idle: the threads end, and the next submit starts new ones
                self._stop_threads()

    def _stop_threads(self) -> None:
        """End this generation's threads (called with ``_cond`` held)."""
        self._closed.set()
        self._cond.notify_all()
        for _ in range(self.max_in_flight if self._ready else 0):
            self._ready.put(None)  # stops a device slot thread
        self._ready = None

    def close(self) -> None:
        """Stop the threads and cancel every unfinished job, running ones included.

        The backend stays usable: a later ``submit`` starts fresh threads, so a
        shared instance (one a registered factory hands to several runs) survives
        the end of each run. An idle backend holds no threads, so a run that
        does not close a backend it was given leaves none behind either.
        """
        with self._cond:
            live, self._live, self._waiting = list(self._live), set(), []
            self._stop_threads()
        for job in live:
            job._settle("cancelled")

    def __enter__(self) -> EmulatedQPU:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<EmulatedQPU {self.name!r} wrapping {self.wrapped.name!r}>"


def _price_cap(target: str | None) -> int | None:
    """The shot cap of the ``price_as`` target, from the price table (None: none)."""
    from .azure.cost import limits

    return None if target is None else limits(target, "qir")[1]


def _price_qubits(target: str | None) -> int | None:
    """The qubits of the ``price_as`` target, from the price table (None: no target)."""
    from .azure.cost import price_entry

    return None if target is None else price_entry(target).get("qubits", 20)


def _price_target(price_as: str | None, debias: bool | None = None) -> str | None:
    """An Azure target of the price table (``azure:`` may lead), checked once with ``debias``; None stays None. The
    pricing modules load here, on the thread that makes the backend (qiskit's, in particular: see
    ``hqflow.backends.azure.translate``)."""
    if price_as is None:
        if debias is not None:
            raise BackendError("emulated-qpu: debias prices the price_as target with IonQ's error mitigation on or "
                               "off; give price_as too (e.g. price_as=ionq.qpu.aria-1)")
        return None
    from .azure import translate  # noqa: F401  (qiskit, loaded on this thread)
    from .azure.cost import load_prices, with_debias

    target = str(price_as).removeprefix("azure:")
    targets = load_prices()["targets"]
    if target not in targets or targets[target].get("model") not in ("ionq", "hqc", "free"):
        known = ", ".join(t for t, e in targets.items() if e.get("model") in ("ionq", "hqc", "free"))
        raise BackendError(f"emulated-qpu: price_as {price_as!r} is not a priced target of the Azure price table; "
                           f"known: {known}")
    try:
        with_debias(targets[target], target, debias)
    except BackendError as exc:
        raise BackendError(f"emulated-qpu: {exc}") from None
    return target


def _either(what: str, model, from_args, cls):
    """``model`` if given (then the individual arguments must be left at their defaults)."""
    if model is None:
        return from_args
    if from_args != cls():
        raise BackendError(f"emulated-qpu: pass either {what}= or the individual {what} arguments, not both")
    if not isinstance(model, cls):
        raise BackendError(f"emulated-qpu: {what} must be a {cls.__name__}, got {type(model).__name__}")
    return model
