"""The backend protocol: ``submit(CircuitBatch) -> Job``.

A backend runs one template over a batch of parameter rows. It is asynchronous
from the start, because cloud QPUs answer in seconds to minutes:

    job = backend.submit(batch)      # returns at once
    job.done()                       # poll
    job.started()                    # out of the service's queue (running or finished)?
    result = job.result(timeout=30)  # block; raises TimeoutError / JobFailed
    job.cancel()                     # best effort
    job.add_done_callback(fn)        # fn(job) once it ends

``Backend`` and ``Job`` below are the whole contract: what a backend must write, and the defaults of
everything else the runtime asks (``max_in_flight``, ``estimate_cost``, ``program``, ``close``). Errors are
``BackendError``s. Most are worth another try (the runtime retries a failed job); a
``BackendAccessError`` (refused credentials, an unreachable service) is not: its ``retryable`` is False,
and the runtime ends the run at once.

Most local backends only implement ``run(batch) -> BatchResult`` synchronously
and inherit ``submit`` from ``LocalBackend``, which runs jobs on a small private
thread pool.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hqflow.ir.circuit import MAX_SHOTS, CircuitTemplate, DerivedInputError
from hqflow.ir.text import number, shown


class BackendError(RuntimeError):
    """A backend could not run a batch (bad request or backend failure)."""

    retryable: bool = True
    """whether another try may succeed: the runtime retries a failed job only when this is True"""


class BackendAccessError(BackendError):
    """The backend cannot be used as configured: it refused the credentials (HTTP 401, or 403 from the
    service itself), it cannot be reached (no such host, connection refused), or it is not configured.
    Another try would fail the same way, so it is not retried and the run ends at once."""

    retryable = False


class RequestRefused(BackendError):
    """The backend will never take the request as made (more shots than its service accepts, say): another try
    would ask the same, so it is not retried and the run ends at once."""

    retryable = False


class JobFailed(BackendError):
    """A submitted job ended in failure; ``__cause__`` holds the original error."""

    metadata: dict | None = None
    """what the failed job used, where its backend says (``cost``, ``service_jobs``, as in
    ``BatchResult.metadata``); None where it does not"""


class JobCancelled(BackendError):
    """``result()`` was called on a job that was cancelled."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do. ``None`` for ``max_circuits_per_job`` means unlimited."""

    name: str
    max_qubits: int
    max_circuits_per_job: int | None = None
    exact: bool = True  # can return exact expectation values / probabilities
    shots: bool = True  # can sample
    gradient: str | None = None
    """native gradient: "autograd" (the backend also has ``program(template, dtype=None)``, a torch
    function ``(inputs, weights) -> values`` that autograd differentiates, in process), "adjoint",
    or None (use parameter shift: ``hqflow.gradients``)"""
    device: str = "cpu"  # "cpu", "cuda:0", "qpu", ...
    service_job_rows: int | None = None
    """rows one *service job* holds at most (per measurement group): None, a submitted job is one service job
    (local simulators, emulated-qpu); 1, one service job per row (Azure IonQ, Quantinuum); N, the backend packs
    up to N rows (parameter bindings of one template) into each service job"""
    max_shots: int | None = None
    """shots per circuit the service accepts (None: no documented cap); a batch with more is refused at submit
    (``RequestRefused``: never retried)"""
    row_seeded: bool = False
    """whether a batch with ``row_seeds`` samples each row from its own seed, so that shot results do not
    depend on how the runtime cuts a batch into jobs"""
    share: int = 1
    """rows of a batch that one circuit holds at most, each on its own register of disjoint wires (the ``share``
    option of emulated-qpu and Azure; ``hqflow.backends.share``): 1, a circuit per row. A template ``n`` qubits wide
    shares ``rows_per_circuit(n)`` = min(share, max_qubits // n) rows to a circuit (``share=auto`` declares
    ``max_qubits``: as many as fit). ``Backend.usage`` then counts circuits, not rows (⌈B / k⌉ per measurement
    group), a price is one circuit of k × the gates, and ``service_job_rows`` counts rows (k to a circuit)"""

    def rows_per_circuit(self, width: int) -> int:
        """k: the rows of a template ``width`` qubits wide that one circuit holds (at least 1)."""
        return max(1, min(self.share, self.max_qubits // max(1, width)))

    def service_jobs(self, rows: int, groups: int = 1) -> int:
        """Service jobs a submitted job of ``rows`` rows becomes: 1 where a submit is one service job, else
        ``groups * ceil(rows / service_job_rows)``."""
        if self.service_job_rows is None:
            return 1
        return groups * -(-rows // self.service_job_rows)

    def describe(self) -> str:
        modes = "+".join(m for m, ok in (("exact", self.exact), ("shots", self.shots)) if ok)
        per_job = self.max_circuits_per_job or "unlimited"
        rows = self.service_job_rows
        packing = "" if rows is None else f", {rows} row{'s' if rows > 1 else ''}/service job"
        cap = "" if self.max_shots is None else f", <= {self.max_shots} shots"
        cap += "" if self.share == 1 else f", up to {self.share} rows/circuit"
        return (
            f"{self.max_qubits} qubits, {per_job} circuits/job{packing}, {modes}{cap}, "
            f"gradient={self.gradient or 'none (parameter shift)'}, device={self.device}"
        )


@dataclass(frozen=True, eq=False)
class CircuitBatch:
    """One template bound to ``B`` rows of parameters.

    ``inputs`` has shape ``[B, n_inputs]``; ``weights`` is ``[n_weights]`` (shared
    by all rows) or ``[B, n_weights]`` (one set per row, as parameter-shift
    needs). Build it with ``CircuitBatch.make``, which checks shapes.
    """

    template: CircuitTemplate
    inputs: np.ndarray
    weights: np.ndarray
    shots: int | None = None
    seed: int | None = None
    key: str | None = None
    """the job's identity in its run (run, fragment, step), set by the runtime: a cloud backend derives
    idempotent service job ids from it, so a resubmission finds the job that already ran"""
    attempt: int = 0  # the runtime's retry count for this batch (0: first try)
    raw_inputs: np.ndarray | None = None
    """the rows given to ``make`` when its template had derived inputs (``inputs`` are then the lowered
    template's columns); None otherwise"""
    row_seeds: np.ndarray | None = None
    """``[B]`` uint64 shot seeds, one per row (``make(per_row=True)``): a row-seeded backend samples row i from
    ``row_seeds[i]`` alone, so results do not depend on how the batch is cut; None: ``seed`` seeds the batch"""

    def __post_init__(self):
        if self.template.derived:
            raise BackendError(f"circuit {self.template.name!r} has derived inputs: build its batch with "
                               "CircuitBatch.make, which computes them")

    @property
    def size(self) -> int:
        return self.inputs.shape[0]

    @staticmethod
    def make(
        template: CircuitTemplate,
        inputs: Any = None,
        weights: Any = None,
        *,
        shots: int | None | str = "template",
        seed: int | None = None,
        per_row: bool = False,
    ) -> CircuitBatch:
        """Normalize loose arrays into a checked batch (the one place shapes are checked).

        ``per_row`` (with a ``seed``): every row gets its own shot seed, ``row_seeds(seed, B)``, so a
        row-seeded backend's results do not depend on how the runtime cuts the batch.

        ``inputs`` are the template's raw inputs; a template with derived inputs is lowered here
        (``CircuitTemplate.lowered``), so the batch holds its input columns and backends never
        see an expression."""
        n_in, n_w = template.n_inputs, template.n_weights
        if weights is None and n_w:
            raise BackendError(f"circuit {template.name!r} needs weights of shape [{n_w}] or [B, {n_w}]")
        w = np.zeros((n_w,)) if weights is None else _as_float(weights, "weights")
        if w.ndim not in (1, 2) or w.shape[-1] != n_w:
            raise BackendError(
                f"weights for {template.name!r} must have shape [{n_w}] or [B, {n_w}], got {list(w.shape)}"
            )
        if inputs is None:
            if n_in:
                raise BackendError(f"circuit {template.name!r} needs inputs of shape [B, {n_in}]")
            rows = w.shape[0] if w.ndim == 2 else 1
            x = np.zeros((rows, 0))
        else:
            x = _as_float(inputs, "inputs")
            if x.ndim == 1 and n_in:
                x = x[None, :]
            if x.ndim != 2 or x.shape[1] != n_in:
                raise BackendError(
                    f"inputs for {template.name!r} must have shape [B, {n_in}], got {list(x.shape)}"
                )
        if w.ndim == 2 and w.shape[0] != x.shape[0]:
            if x.shape[1] == 0 and x.shape[0] == 1:
                x = np.zeros((w.shape[0], 0))
            else:
                raise BackendError(
                    f"per-row weights have {w.shape[0]} rows but inputs have {x.shape[0]}"
                )
        if x.shape[0] == 0:
            raise BackendError(f"batch for {template.name!r} has no rows (inputs have shape {list(x.shape)})")
        s = template.shots if shots == "template" else shots
        if s is not None and (not isinstance(s, (int, np.integer)) or isinstance(s, bool) or not 1 <= s <= MAX_SHOTS):
            raise BackendError(f"shots must be a positive integer (at most 2**63 - 1) or None, got {shown(s)}")
        rs = row_seeds(seed, x.shape[0]) if per_row and seed is not None else None
        if template.derived:
            raw, x, template = x, _derived_columns(template, x), template.lowered()
            return CircuitBatch(template, x, w, None if s is None else int(s), seed, raw_inputs=raw, row_seeds=rs)
        return CircuitBatch(template, x, w, None if s is None else int(s), seed, row_seeds=rs)

    def weights_per_row(self) -> np.ndarray:
        """Weights as ``[B, n_weights]``."""
        if self.weights.ndim == 2:
            return self.weights
        return np.broadcast_to(self.weights, (self.size, self.weights.shape[0]))

    def angles(self) -> list[np.ndarray]:
        """The numeric angles of every op, each ``[B, num_params]`` (empty ops give ``[B, 0]``)."""
        x, w = self.inputs, self.weights_per_row()
        out = []
        for op in self.template.ops:
            cols = []
            for a in op.angles:
                if a.kind == "const":
                    cols.append(np.full(self.size, a.offset))
                else:
                    src = x if a.kind == "input" else w
                    cols.append(a.scale * src[:, a.index] + a.offset)
            out.append(np.stack(cols, axis=1) if cols else np.zeros((self.size, 0)))
        return out

    def split(self, max_rows: int) -> list[CircuitBatch]:
        """Cut into batches of at most ``max_rows`` rows (for ``max_circuits_per_job``)."""
        if self.size <= max_rows:
            return [self]
        parts = []
        for lo in range(0, self.size, max_rows):
            w = self.weights[lo : lo + max_rows] if self.weights.ndim == 2 else self.weights
            seed = None if self.seed is None else self.seed + lo
            rs = None if self.row_seeds is None else self.row_seeds[lo : lo + max_rows]
            parts.append(CircuitBatch(self.template, self.inputs[lo : lo + max_rows], w, self.shots, seed,
                                      self.key, self.attempt, row_seeds=rs))
        return parts


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array: consecutive inputs give independent-looking outputs."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def row_seeds(seed: int, rows: int, start: int = 0) -> np.ndarray:
    """``[rows]`` uint64 shot seeds for rows ``start .. start + rows - 1`` of a batch seeded ``seed``: row i's
    seed depends on ``(seed, i)`` alone."""
    base = _mix64(np.array([int(seed) % 2**64], dtype=np.uint64))[0]
    return _mix64(base ^ np.arange(start, start + rows, dtype=np.uint64))


def _derived_columns(template: CircuitTemplate, x: np.ndarray) -> np.ndarray:
    """The template's input columns for raw rows ``x``; a derived input that is not a finite
    number (``log`` of a negative input, say) is an error that names it and the row (the template's
    own check, ``CircuitTemplate.encode``, which every path shares)."""
    try:
        return template.encode(x, np)
    except DerivedInputError as exc:
        raise BackendError(str(exc)) from None


def _as_float(a: Any, what: str) -> np.ndarray:
    if hasattr(a, "detach"):  # torch tensors
        a = a.detach().cpu().numpy()
    try:
        arr = np.asarray(a, dtype=float)
    except (TypeError, ValueError):
        raise BackendError(f"{what} must be numeric arrays, got {type(a).__name__}") from None
    if not np.all(np.isfinite(arr)):
        raise BackendError(f"{what} contain NaN or infinity")
    return arr


@dataclass
class BatchResult:
    """What a job returns. Which fields are set depends on the template:

    * observables, exact: ``values`` ``[B, n_obs]``;
    * observables, shots: ``values`` and ``stderr`` (standard error of the mean, from the
      unbiased sample variance; NaN with ``shots=1``, where one sample gives no estimate);
    * no observables, exact: ``probs`` ``[B, 2**n]`` (wire 0 most significant);
    * no observables, shots: ``counts``, one ``{bitstring: count}`` per row.
    """

    values: np.ndarray | None = None
    stderr: np.ndarray | None = None
    probs: np.ndarray | None = None
    counts: list[dict[str, int]] | None = None
    metadata: dict = field(default_factory=dict)

    @staticmethod
    def concat(parts: list[BatchResult]) -> BatchResult:
        """Re-join the results of a split batch, in order."""

        def cat(name: str):
            vals = [getattr(p, name) for p in parts]
            return None if vals[0] is None else np.concatenate(vals, axis=0)

        counts = None if parts[0].counts is None else [c for p in parts for c in p.counts]
        meta = dict(parts[0].metadata, parts=len(parts))
        return BatchResult(cat("values"), cat("stderr"), cat("probs"), counts, meta)


@dataclass(frozen=True)
class Cost:
    """An estimate: ``amount`` in ``currency`` for ``jobs`` service jobs of ``shots`` shots each."""

    amount: float
    currency: str
    jobs: int = 0
    shots: int = 0
    counts: dict = field(default_factory=dict)  # gates and measurements over all jobs: {"1q", "2q", "measurements"}

    def __str__(self) -> str:
        what = ", ".join(f"{k}={v}" for k, v in self.counts.items())
        return f"{self.amount:.4f} {self.currency} for {self.jobs} jobs x {self.shots} shots ({what})"

    def __add__(self, other: Cost) -> Cost:
        if self.currency != other.currency:
            raise BackendError(f"cannot add costs in {self.currency} and {other.currency}")
        counts = {k: self.counts.get(k, 0) + other.counts.get(k, 0) for k in {**self.counts, **other.counts}}
        return Cost(self.amount + other.amount, self.currency, self.jobs + other.jobs, max(self.shots, other.shots),
                    counts)


@dataclass(frozen=True)
class Usage:
    """What jobs used on their service: the units a cloud bills and a lab budgets."""

    service_jobs: int = 0  # created on the service, retries included
    circuits: int = 0  # rows x measurement groups run
    shots: int = 0  # sum over circuits of their shots (0 for exact values)
    cost: float = 0.0  # list price: the backend's estimate, or its own report; NaN where no price can be known
    currency: str | None = None
    failed_service_jobs: int = 0

    def __add__(self, other: Usage) -> Usage:
        if self.currency and other.currency and self.currency != other.currency:
            raise BackendError(f"cannot add usage in {self.currency} and {other.currency}")
        return Usage(self.service_jobs + other.service_jobs, self.circuits + other.circuits,
                     self.shots + other.shots, self.cost + other.cost, self.currency or other.currency,
                     self.failed_service_jobs + other.failed_service_jobs)

    def __sub__(self, other: Usage) -> Usage:
        return self + Usage(-other.service_jobs, -other.circuits, -other.shots, -other.cost, other.currency,
                            -other.failed_service_jobs)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def of(batch: CircuitBatch, service_jobs: int = 1, groups: int = 1) -> Usage:
        """A job of ``batch`` as ``service_jobs`` service jobs of ``groups`` measurement groups per row."""
        circuits = batch.size * groups
        return Usage(service_jobs, circuits, circuits * (batch.shots or 0))


class Job:
    """A submitted batch. Write ``done()``, ``result(timeout=None) -> BatchResult`` (raises ``TimeoutError``,
    ``JobCancelled``, or a ``BackendError``/``JobFailed``) and ``cancel() -> bool`` (best effort; a cloud job
    also ends what it still has running on its service, even after the job failed: the runtime calls it when
    a run ends). ``FutureJob`` has them for a ``concurrent.futures.Future``. Defaults, to override where the
    job knows better:

    * ``started()``: whether the job has left its service's queue. The runtime's ``job_timeout`` counts from
      then, so a job that waits in a long queue is waited for, not timed out. True here: a job that cannot
      see a queue has started when submitted;
    * ``add_done_callback(fn)``: call ``fn(job)`` once it finishes, fails or is cancelled (at once if it has);
      here a daemon thread waits on ``result()``, one per call: override it where the job has its own hook."""

    def done(self) -> bool:
        raise NotImplementedError

    def result(self, timeout: float | None = None) -> BatchResult:
        raise NotImplementedError

    def cancel(self) -> bool:
        raise NotImplementedError

    def started(self) -> bool:
        return True

    def add_done_callback(self, fn) -> None:
        def wait():
            with contextlib.suppress(Exception):
                self.result()
            fn(self)

        threading.Thread(target=wait, daemon=True, name="hqflow-job-waiter").start()


class Backend:
    """A quantum backend: everything hqflow asks of one. Subclass it and write three things::

        class Mine(Backend):
            name = "mine"
            capabilities = Capabilities("mine", max_qubits=8)  # or a property
            def submit(self, batch: CircuitBatch) -> Job:       # return at once; FutureJob wraps a Future
                return FutureJob(self._pool.submit(self._run, batch), self.name)

    ``submit`` may be called from several threads at once; raise ``BackendError`` at once for a batch it
    cannot run. A job's result is a ``BatchResult``; the runtime reads its metadata ``cost`` (the actual
    spend), ``service_jobs``, ``queue_seconds``, ``device_seconds`` and ``compute_seconds`` where given.
    ``batch.key`` and ``batch.attempt`` identify a job, for idempotent resubmission. Errors: ``BackendError``
    (retried), ``BackendAccessError`` (ends the run), ``JobFailed(metadata=...)``.

    Defaults here, to override where the backend has them:

    * ``max_in_flight``: jobs it runs at once (device slots); None: the run's ``SchedulerConfig.max_in_flight``;
    * ``estimate_cost(batch) -> Cost``: the price of a job before it runs, for ``budget=``. Defining it makes
      the backend ``priced``; raise ``BackendError`` for a batch it cannot price (under a budget that job is
      refused). An unpriced backend is free: no budget refuses it;
    * ``program(template, dtype=None)``: only with ``capabilities.gradient == "autograd"``: a torch function
      ``(inputs, weights) -> values`` that autograd differentiates in process (``QuantumLayer`` and the RL
      policies call it instead of submitting jobs);
    * ``close()``: ends what a run opened (threads, sessions); the backend stays usable.

    By name (``hqflow train --backend mine``, ``--pool``, resources files, Ray):
    ``register_backend("mine", Mine)``; options (``--backend-opt K=V``, ``("mine", {...})``) arrive as
    keywords, and a ``max_in_flight`` option also sizes its Ray actor. An object that does not subclass
    ``Backend`` but has ``name``, ``capabilities`` and ``submit`` works too: hqflow wraps it once
    (``as_backend``) and uses whichever of the members above it has."""

    name: str  # set it: a class attribute, an instance attribute or a property
    capabilities: Capabilities  # likewise
    max_in_flight: int | None = None
    """jobs it runs at once (device slots); None: the run's ``SchedulerConfig.max_in_flight``"""
    priced: bool = False
    """whether ``estimate_cost`` prices its jobs; a subclass that defines ``estimate_cost`` is priced unless
    it sets ``priced`` itself"""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "estimate_cost" in cls.__dict__ and "priced" not in cls.__dict__:
            cls.priced = True

    def submit(self, batch: CircuitBatch) -> Job:
        raise NotImplementedError

    def estimate_cost(self, batch: CircuitBatch) -> Cost:
        raise BackendError(f"backend {self.name!r} does not price its jobs")

    def usage(self, batch: CircuitBatch) -> Usage:
        """What a job of ``batch`` uses on its service, before it runs. Default: one service job per submit
        (``capabilities.service_jobs``), its rows as circuits, rows x shots shots, and no price."""
        return Usage.of(batch, self.capabilities.service_jobs(batch.size))

    def program(self, template: CircuitTemplate, dtype=None):
        raise BackendError(f"backend {self.name!r} has no torch program (capabilities.gradient is "
                           f"{self.capabilities.gradient!r}, not 'autograd')")

    def close(self) -> None:
        """End what the backend opened for a run (threads, sessions). It stays usable afterwards."""


def preflight(backend, batch: CircuitBatch) -> tuple[str | None, str | None]:
    """What a run should hear before its first job like ``batch``: why ``backend`` would refuse it (more shots than
    ``max_shots``: its submit raises ``RequestRefused``), and why it cannot price it (it is ``priced``, and its
    ``estimate_cost`` raises: no price is known). ``(None, None)``: neither."""
    backend = as_backend(backend)
    cap = backend.capabilities.max_shots
    if batch.shots and cap is not None and batch.shots > cap:
        return f"{backend.name} takes at most {cap:,} shots per job; got {number(batch.shots)}", None
    try:
        if backend.priced:
            backend.estimate_cost(batch)
    except BackendError as exc:
        return None, str(exc)
    return None, None


def is_backend(obj) -> bool:
    """Whether ``obj`` is a backend object (as opposed to a spec: a name or ``(name, options)``)."""
    return isinstance(obj, Backend) or hasattr(obj, "submit")


def as_backend(obj) -> Backend:
    """``obj`` itself where it subclasses ``Backend``; otherwise ``obj`` with ``Backend``'s defaults for the
    members it lacks (the one place that asks an object what it has)."""
    return obj if isinstance(obj, Backend) else _Adapted(obj)


def as_job(job) -> Job:
    """``job`` itself where it subclasses ``Job``; otherwise ``job`` with ``Job``'s defaults."""
    return job if isinstance(job, Job) else _AdaptedJob(job)


class _Adapted(Backend):
    """A backend object that does not subclass ``Backend``, with ``Backend``'s defaults for what it lacks."""

    priced = False  # per instance, below

    def __init__(self, inner):
        for need in ("name", "capabilities", "submit"):
            if not hasattr(inner, need):
                raise TypeError(f"{type(inner).__name__} is not a backend: it has no {need!r} "
                                "(see hqflow.backends.Backend)")
        self.inner, self.name = inner, inner.name
        self.max_in_flight = getattr(inner, "max_in_flight", None)
        self.priced = callable(getattr(inner, "estimate_cost", None))
        self._program, self._close = getattr(inner, "program", None), getattr(inner, "close", None)
        self._usage = getattr(inner, "usage", None)

    @property
    def capabilities(self) -> Capabilities:
        caps = self.inner.capabilities
        if caps.gradient == "autograd" and self._program is None:  # claims a program it does not have
            return dataclasses.replace(caps, gradient=None)
        return caps

    def submit(self, batch: CircuitBatch) -> Job:
        return as_job(self.inner.submit(batch))

    def estimate_cost(self, batch: CircuitBatch) -> Cost:
        return self.inner.estimate_cost(batch) if self.priced else super().estimate_cost(batch)

    def usage(self, batch: CircuitBatch) -> Usage:
        return super().usage(batch) if self._usage is None else self._usage(batch)

    def program(self, template: CircuitTemplate, dtype=None):
        if self._program is None:
            return super().program(template, dtype)
        return self._program(template, dtype=dtype)

    def close(self) -> None:
        if self._close is not None:
            self._close()

    def __repr__(self) -> str:
        return f"<{type(self.inner).__name__} {self.name!r}>"


class _AdaptedJob(Job):
    """A job that does not subclass ``Job``, with ``Job``'s defaults for what it lacks."""

    def __init__(self, inner):
        self.inner = inner

    def done(self) -> bool:
        return self.inner.done()

    def result(self, timeout: float | None = None) -> BatchResult:
        return self.inner.result(timeout)

    def cancel(self) -> bool:
        return self.inner.cancel()

    def started(self) -> bool:
        started = getattr(self.inner, "started", None)
        return True if started is None else started()

    def add_done_callback(self, fn) -> None:
        hook = getattr(self.inner, "add_done_callback", None)
        if hook is None:
            super().add_done_callback(fn)
        else:
            hook(lambda _job: fn(self))


class FutureJob(Job):
    """A ``Job`` backed by a ``concurrent.futures.Future``."""

    def __init__(self, future: cf.Future, backend: str):
        self._future = future
        self.backend = backend
        self.submitted_at = time.perf_counter()

    def done(self) -> bool:
        return self._future.done()

    def started(self) -> bool:
        """Whether the job has left its service's queue (it runs, or has finished). This default is for
        a job that cannot see a queue: True from submission, so ``job_timeout`` counts from then. A
        backend whose jobs wait in a queue (a cloud QPU) overrides it."""
        return True

    def status(self) -> str:
        f = self._future
        if f.cancelled():
            return "cancelled"
        if not f.done():
            return "running" if f.running() else "queued"
        return "failed" if f.exception() is not None else "done"

    def cancel(self) -> bool:
        return self._future.cancel()

    def add_done_callback(self, fn) -> None:
        """Call ``fn(job)`` once the job finishes, fails or is cancelled (at once if it has)."""
        self._future.add_done_callback(lambda _future: fn(self))

    def result(self, timeout: float | None = None) -> BatchResult:
        try:
            return self._future.result(timeout)
        except cf.CancelledError:
            raise JobCancelled(f"job on {self.backend} was cancelled") from None
        except cf.TimeoutError:
            raise TimeoutError(f"job on {self.backend} not done after {timeout}s") from None
        except BackendError:
            raise
        except Exception as exc:  # a backend bug or a library error: keep the cause
            raise JobFailed(f"job on {self.backend} failed: {type(exc).__name__}: {exc}") from exc


class LocalBackend(Backend):
    """Base for in-process backends: implement ``capabilities`` and ``run``.

    ``submit`` checks the batch against the capabilities, splits it when it is
    larger than ``max_circuits_per_job``, and runs it on a private thread pool
    of ``max_workers`` threads (1 by default: simulators use their own threads).
    """

    name = "local"

    def __init__(self, max_workers: int = 1):
        self._max_workers = max_workers
        self._pool: cf.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def capabilities(self) -> Capabilities:  # pragma: no cover - abstract
        raise NotImplementedError

    def run(self, batch: CircuitBatch) -> BatchResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def check(self, batch: CircuitBatch) -> None:
        """Raise ``BackendError`` if this backend cannot run ``batch``."""
        caps, t = self.capabilities, batch.template
        if t.n_qubits > caps.max_qubits:
            raise BackendError(
                f"circuit {t.name!r} has {t.n_qubits} qubits but backend {self.name!r} allows at most {caps.max_qubits}"
            )
        if batch.shots is None and not caps.exact:
            raise BackendError(f"backend {self.name!r} cannot compute exact values; set shots")
        if batch.shots is not None and not caps.shots:
            raise BackendError(f"backend {self.name!r} does not sample; use shots=None")
        probs = t.problems()
        if probs:
            raise BackendError("; ".join(probs))

    def run_checked(self, batch: CircuitBatch) -> BatchResult:
        """Check, split by ``max_circuits_per_job``, run and re-join, synchronously."""
        self.check(batch)
        limit = self.capabilities.max_circuits_per_job
        t0 = time.perf_counter()
        parts = [self.run(b) for b in (batch.split(limit) if limit else [batch])]
        res = parts[0] if len(parts) == 1 else BatchResult.concat(parts)
        res.metadata.setdefault("backend", self.name)
        res.metadata["seconds"] = time.perf_counter() - t0
        return res

    def submit(self, batch: CircuitBatch) -> FutureJob:
        self.check(batch)  # fail fast, in the caller's thread
        with self._lock:
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(self._max_workers, thread_name_prefix=f"hqflow-{self.name}")
        return FutureJob(self._pool.submit(self.run_checked, batch), self.name)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def pm1_variance(mean: np.ndarray, shots: int) -> np.ndarray:
    """Unbiased sample variance of ``shots`` ±1 outcomes whose mean is ``mean``; NaN for one
    shot, where a single sample gives no estimate."""
    mean = np.asarray(mean, dtype=float)
    return (1 - mean**2) * shots / (shots - 1) if shots > 1 else np.full(mean.shape, np.nan)


def expectation_from_samples(bits: np.ndarray, template: CircuitTemplate) -> tuple[np.ndarray, np.ndarray]:
    """Estimate each observable from measured bits, with the standard error.

    ``bits`` is ``[B, shots, n_qubits]`` of 0/1 measured **in the computational
    basis**, so it only serves observables made of I/Z. Backends that measure
    X/Y terms rotate the basis first and call this per group.
    """
    signs = 1.0 - 2.0 * bits  # Z eigenvalue per qubit
    vals, errs = [], []
    for obs in template.observables:
        total = np.zeros(bits.shape[:2])
        for term in obs.terms:
            if any(p != "Z" for _, p in term.paulis):
                raise BackendError("expectation_from_samples only handles Z-type terms")
            prod = np.ones(bits.shape[:2])
            for w, _ in term.paulis:
                prod = prod * signs[:, :, w]
            total += term.coeff * prod
        vals.append(total.mean(axis=1))
        if bits.shape[1] > 1:
            std = total.std(axis=1, ddof=1)
            std[std < 1e-12] = 0.0  # constant outcomes: zero, not a rounding residue
            errs.append(std / np.sqrt(bits.shape[1]))
        else:  # one shot: no variance estimate
            errs.append(np.full(bits.shape[0], np.nan))
    return np.stack(vals, axis=1), np.stack(errs, axis=1)
