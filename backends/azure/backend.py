"""``azure:<target>``: an Azure Quantum target on the backend protocol, over the azure-quantum SDK.

    backend = get_backend("azure:ionq.simulator", subscription_id=..., resource_group=...,
                          name=..., location=..., key=...)       # or credential=, or the SDK's env vars
    job = backend.submit(batch)        # B rows x G measurement groups -> B*G service jobs
    backend.estimate_cost(batch)       # before submitting: Cost(amount, currency, ...)

A batch of ``B`` rows becomes ``B * G`` service jobs (``G`` measurement groups),
created, polled and downloaded concurrently on the backend's threads (at most
``max_concurrency`` at once). Job ids are UUIDs derived from the run's job key
(``CircuitBatch.key``: run, fragment, step), the batch's content, the row, the
group and the attempt, so resubmitting after a crash or a timeout finds the
service job that already ran instead of running it again. Transient failures
(HTTP 429/5xx, dropped connections, an expired SAS) are retried with the same
id; a service job that fails fails the batch, and the runtime's retry
(``CircuitBatch.attempt`` + 1) reuses every row that succeeded.

Options follow the SDK's ``Workspace``: ``subscription_id``, ``resource_group``,
``name``, ``location``, ``resource_id``, ``credential`` (an azure-identity
credential) or ``key`` (an API key), ``connection_string``, and ``endpoint`` (the
job service's URL). Unset ones come from the SDK's environment variables
(``AZURE_QUANTUM_SUBSCRIPTION_ID``, ``AZURE_QUANTUM_WORKSPACE_RG``,
``AZURE_QUANTUM_WORKSPACE_NAME``, ``AZURE_QUANTUM_WORKSPACE_LOCATION``,
``AZURE_QUANTUM_CONNECTION_STRING``) and hqflow's ``AZURE_QUANTUM_API_KEY`` and
``AZURE_QUANTUM_ENDPOINT``.
"""
from __future__ import annotations

import concurrent.futures as cf
import hashlib
import os
import threading
import time
import uuid
from dataclasses import dataclass

import numpy as np

from ..base import BackendError, BatchResult, Capabilities, CircuitBatch, FutureJob, JobFailed
from .cost import PRICES, Cost, gate_counts, job_cost, load_prices
from .results import counts_of, estimate
from .translate import Format, Payloads, format_for

_NAMESPACE = uuid.UUID("6b1f3c2e-8d1a-4c55-9a57-0d6c2f6f1a11")
_TERMINAL = {"Succeeded", "Completed", "Failed", "Cancelled"}
_SECRETS = ("key", "credential", "connection_string")
_TRIES = 6


class AzureUnauthorized(BackendError):
    """The workspace refused the credentials."""


class _Cancelled(Exception):
    pass


@dataclass
class _Prepared:
    """One template on this target: its payloads and what one row costs."""

    payloads: Payloads
    counts: list[tuple[int, int, int]]  # (1q, 2q, measurements) per measurement group
    entry: dict | None  # the target's price-table entry
    target: str

    def job_cost(self, group: int, shots: int) -> float:
        """What one service job of ``group`` at ``shots`` costs; NaN where the price is unknown."""
        if not self.entry or self.entry.get("model") == "unknown":
            return float("nan")
        return job_cost(self.entry, self.target, self.counts[group], shots)


class AzureBackend:
    """One Azure Quantum target; see the module docstring."""

    def __init__(self, target: str | None = None, *, subscription_id: str | None = None,
                 resource_group: str | None = None, name: str | None = None, location: str | None = None,
                 resource_id: str | None = None, endpoint: str | None = None, key: str | None = None,
                 credential=None, connection_string: str | None = None, shots: int = 500,
                 max_concurrency: int = 64, session: bool = False, job_failure_policy: str = "Abort",
                 input_format: str | None = None, poll_interval: float = 0.05, max_poll_interval: float = 5.0,
                 prices: str = PRICES, workspace=None):
        if not target:
            raise BackendError("name an Azure Quantum target: azure:<target>, e.g. azure:ionq.simulator")
        if not isinstance(shots, (int, np.integer)) or shots < 1:
            raise BackendError(f"shots must be a positive integer, got {shots!r}")
        if not isinstance(max_concurrency, (int, np.integer)) or max_concurrency < 1:
            raise BackendError(f"max_concurrency must be a positive integer, got {max_concurrency!r}")
        if job_failure_policy not in ("Abort", "Continue"):
            raise BackendError(f"job_failure_policy must be 'Abort' or 'Continue', got {job_failure_policy!r}")
        self.target, self.name = target, f"azure:{target}"
        self.format: Format = format_for(target, input_format)
        self.shots, self.session = int(shots), bool(session)
        self.job_failure_policy = job_failure_policy
        self.poll_interval, self.max_poll_interval = float(poll_interval), float(max_poll_interval)
        self.prices = prices
        self._entry = load_prices(prices)["targets"].get(target)
        self._connect = dict(subscription_id=subscription_id, resource_group=resource_group, name=name,
                             location=location, resource_id=resource_id, endpoint=endpoint, key=key,
                             credential=credential, connection_string=connection_string)
        self._workspace = workspace
        self._session_id: str | None = None
        self._typical: float | None = None  # seconds from creation to a finished job, lately
        self._lock = threading.Lock()
        self._session_lock = threading.Lock()  # held while the session is opened
        self.max_concurrency = int(max_concurrency)
        self._pool: cf.ThreadPoolExecutor | None = None  # started at the first submit, stopped by close()
        self._closing = threading.Event()  # set by close() for the threads still running
        self._prepared: dict[str, _Prepared] = {}

    # -- the protocol --------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        qubits = (self._entry or {}).get("qubits", 20)
        return Capabilities(self.name, qubits, None, exact=False, shots=True, gradient=None, device="qpu")

    def submit(self, batch: CircuitBatch) -> AzureJob:
        self._check(batch)
        prep = self._prepare(batch.template)
        shots = batch.shots or self.shots
        bodies = prep.payloads.rows(batch)
        digest = _digest(batch, shots)
        key = batch.key or uuid.uuid4().hex
        job = AzureJob(self, batch, prep, shots)
        with self._lock:
            if self._pool is None:
                self._closing = threading.Event()
                self._pool = cf.ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=f"hqflow-{self.name}")
            pool, closing = self._pool, self._closing
        for r, row in enumerate(bodies):
            for g, body in enumerate(row):
                ids = [str(uuid.uuid5(_NAMESPACE, f"{key}|{digest}|{r}|{g}|{a}")) for a in range(batch.attempt + 1)]
                job.add(pool.submit(self._run_one, job, ids, body, r, g, closing))
        return job

    def estimate_cost(self, batch: CircuitBatch) -> Cost:
        """The batch's cost before it runs: every row's jobs, from the price table."""
        self._check(batch)
        prep = self._prepare(batch.template)
        shots = batch.shots or self.shots
        if self._entry is None:
            raise BackendError(f"target {self.target!r} is not in the price table ({self.prices})")
        per_row = [job_cost(self._entry, self.target, c, shots) for c in prep.counts]
        n1, n2, nm = (sum(c[i] for c in prep.counts) * batch.size for i in range(3))
        jobs = batch.size * len(per_row)
        return Cost(sum(per_row) * batch.size, self._entry.get("currency", "USD"), jobs, shots,
                    {"1q": n1, "2q": n2, "measurements": nm})

    def targets(self) -> list[tuple[str, str, str]]:
        """``(provider, target, availability)`` for every target the workspace offers."""
        ws = self.workspace()
        try:
            return [(t.provider_id, t.name, str(t._current_availability)) for t in ws.get_targets()]
        except Exception as exc:
            raise self._error(exc, "list targets") from None

    def close(self) -> None:
        """Close the run's session, if one was opened, and stop the threads."""
        with self._lock:
            sid, self._session_id = self._session_id, None
            pool, self._pool = self._pool, None
            self._closing.set()
        if sid is not None:
            try:
                from azure.quantum import Session

                ws = self.workspace()
                ws.close_session(Session(ws, id=sid, target=self.target))
            except Exception:
                pass  # closing is best effort; the service closes idle sessions itself
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)  # a later submit starts a new pool

    def options(self) -> dict:
        """The options to rebuild this backend, without secrets (for run directories)."""
        return {k: v for k, v in self._connect.items() if v is not None and k not in _SECRETS}

    def __repr__(self) -> str:  # never the key
        return f"<AzureBackend {self.name!r}>"

    # -- pieces --------------------------------------------------------------------------
    def _check(self, batch: CircuitBatch) -> None:
        t = batch.template
        if t.n_qubits > self.capabilities.max_qubits:
            raise BackendError(f"circuit {t.name!r} has {t.n_qubits} qubits but {self.name} has "
                               f"{self.capabilities.max_qubits}")
        problems = t.problems()
        if problems:
            raise BackendError("; ".join(problems))

    def _prepare(self, template) -> _Prepared:
        fp = template.fingerprint()
        with self._lock:
            prep = self._prepared.get(fp)
        if prep is None:
            payloads = Payloads(template, self.format)
            model = (self._entry or {}).get("model", "free")
            zeros = np.full(len(payloads.slot_angles), 0.5)
            counts = [gate_counts(payloads._qiskit(g, zeros), model) for g in payloads.groups]
            prep = _Prepared(payloads, counts, self._entry, self.target)
            with self._lock:
                self._prepared[fp] = prep
        return prep

    def workspace(self):
        """The SDK's ``Workspace``, made on first use."""
        with self._lock:
            if self._workspace is None:
                self._workspace = connect(**self._connect)
            return self._workspace

    def _session(self) -> str | None:
        """The run's session on this target, opened by the first job that needs it (one at a time)."""
        if not self.session:
            return None
        with self._session_lock:
            if self._session_id is None:
                from azure.quantum import Session

                ws = self.workspace()
                s = Session(ws, id=str(uuid.uuid4()), name=f"hqflow {self.target}", target=self.target,
                            job_failure_policy=self.job_failure_policy)
                self._retry(lambda: ws.open_session(s), "open a session")
                self._session_id = s.id
            return self._session_id

    def _run_one(self, job: AzureJob, ids: list[str], body: bytes, row: int, group: int,
                 closing: threading.Event) -> tuple:
        """One row's job for one group: reuse an earlier attempt that ran, else create it; poll; download."""
        from azure.core.exceptions import ResourceNotFoundError

        ws, last = self.workspace(), "never ran"
        for a, jid in enumerate(ids):
            if job.cancelled:
                raise _Cancelled()
            created = False
            if a < len(ids) - 1:  # an earlier attempt: use it if it ran or is running
                try:
                    sj = self._retry(lambda: ws.get_job(jid), "look up a job")
                except ResourceNotFoundError:
                    continue
            else:
                if closing.is_set():
                    raise _Cancelled()  # the run ended: create nothing more
                sj = self._retry(lambda: self._create(ws, jid, body, job), "submit a job")
                created = sj.details.status not in _TERMINAL
            job.track(sj, created, group)
            if job.cancelled:  # cancelled while this job was being created: cancel it too
                job.cancel_service_job(sj)
                raise _Cancelled()
            self._wait(sj, job)
            if sj.details.status in ("Succeeded", "Completed"):
                uri = sj.details.output_data_uri or _output_blob(sj.details.container_uri)
                raw = self._retry(lambda: sj.download_data(uri), "download a result")
                seed = job.batch.seed
                rng = np.random.default_rng([seed, row, group] if seed is not None else uuid.UUID(jid).int % 2**63)
                sample = "simulator" in self.target or ".sim." in self.target
                return row, group, counts_of(self.format, raw, job.batch.template.n_qubits, job.shots, rng, sample)
            err = sj.details.error_data
            last = f"{sj.details.status}: {getattr(err, 'message', None) or err or 'no reason given'}"
        raise JobFailed(f"Azure job for row {row} on {self.target} {last}")

    def _create(self, ws, jid: str, body: bytes, job: AzureJob):
        """Upload the input (kept if an earlier try uploaded it) and create the job (PUT: idempotent)."""
        from azure.core.exceptions import ResourceExistsError
        from azure.quantum import Job
        from azure.quantum.storage import remove_sas_token

        fmt = self.format
        params = {fmt.shots_param: job.shots}
        if fmt.kind == "qir":
            params.update(count=job.shots, items=[{"entryPoint": "ENTRYPOINT__main", "arguments": []}])
        container = ws.get_container_uri(job_id=jid)
        try:
            input_uri = Job.upload_input_data(container, body, content_type=fmt.content_type, blob_name="inputData")
        except ResourceExistsError:  # a try before this one got that far
            base, _, _ = remove_sas_token(container).partition("?")
            input_uri = base.rstrip("/") + "/inputData"
        return Job.from_storage_uri(ws, name=f"hqflow-{job.batch.template.name}", target=self.target,
                                    input_data_uri=input_uri, provider_id=self.target.split(".", 1)[0],
                                    input_data_format=fmt.input_data_format,
                                    output_data_format=fmt.output_data_format, container_uri=container,
                                    job_id=jid, input_params=params, session_id=self._session())

    def _wait(self, sj, job: AzureJob) -> None:
        """Poll until the job ends: first when jobs have been taking to finish, then backing off."""
        start = time.perf_counter()
        with self._lock:
            typical = self._typical
        first = min(max(self.poll_interval, 0.9 * typical), self.max_poll_interval) if typical else None
        delay = self.poll_interval
        while sj.details.status not in _TERMINAL:
            if job.cancelled:
                raise _Cancelled()
            if first is not None:
                time.sleep(first)
                first = None
            else:
                time.sleep(delay)
                delay = min(delay * 1.5, self.max_poll_interval)
            self._retry(sj.refresh, "poll a job")
        took = time.perf_counter() - start
        with self._lock:  # a moving average of how long jobs take to finish, for the first poll
            self._typical = took if self._typical is None else 0.8 * self._typical + 0.2 * took

    def _retry(self, fn, what: str):
        """``fn()``, again on transient failures (throttling, 5xx, dropped connections, expired SAS)."""
        from azure.core.exceptions import (ClientAuthenticationError, HttpResponseError, ResourceNotFoundError,
                                           ServiceRequestError, ServiceResponseError)

        for attempt in range(_TRIES):
            try:
                return fn()
            except ResourceNotFoundError:
                raise
            except ClientAuthenticationError as exc:
                if exc.status_code == 401:
                    raise self._error(exc, what) from None
                err = exc  # 403 from storage: an expired SAS; a new one is asked for on retry
            except HttpResponseError as exc:
                if exc.status_code not in (408, 409, 429, 500, 502, 503, 504):
                    raise self._error(exc, what) from None
                err = exc
            except (ServiceRequestError, ServiceResponseError, ConnectionError) as exc:
                err = exc
            time.sleep(min(0.05 * 2**attempt, 1.0))
        raise self._error(err, what) from None

    def _error(self, exc: Exception, what: str) -> BackendError:
        status = getattr(exc, "status_code", None)
        ws = self._connect.get("name") or "(from the environment)"
        if status == 401:
            return AzureUnauthorized(f"Azure Quantum workspace {ws!r} refused the credentials (401 Unauthorized) "
                                     f"while trying to {what}; check the key or credential")
        reason = getattr(exc, "reason", None) or type(exc).__name__
        msg = str(getattr(exc, "message", exc)).splitlines()[0][:200]
        return BackendError(f"Azure Quantum workspace {ws!r}: could not {what} on {self.target}: "
                            f"{status or ''} {reason}: {msg}".replace("  ", " "))


class AzureJob(FutureJob):
    """The service jobs of one batch; ``result()`` re-joins them into one ``BatchResult``."""

    def __init__(self, backend: AzureBackend, batch: CircuitBatch, prep: _Prepared, shots: int):
        super().__init__(cf.Future(), backend.name)
        self._future.set_running_or_notify_cancel()
        self.backend_obj, self.batch, self.prep, self.shots = backend, batch, prep, shots
        self.cancelled = False
        self._parts: list[cf.Future] = []
        self._service_jobs: list = []
        self._cost = 0.0
        self._lock = threading.Lock()
        self._left = 0

    def add(self, fut: cf.Future) -> None:
        with self._lock:
            self._parts.append(fut)
            self._left += 1
        fut.add_done_callback(self._part_done)

    def track(self, service_job, created: bool, group: int) -> None:
        with self._lock:
            self._service_jobs.append(service_job)
            if created:
                self._cost += self.prep.job_cost(group, self.shots)

    @property
    def job_ids(self) -> list[str]:
        with self._lock:
            return [sj.id for sj in self._service_jobs]

    def _part_done(self, fut: cf.Future) -> None:
        if self._future.done():
            return
        exc = None if fut.cancelled() else fut.exception()
        if exc is not None and not isinstance(exc, _Cancelled):
            self.cancelled = True  # the other rows stop polling; their service jobs run on, for the retry
            self._fail(exc)
            return
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last and not self.cancelled:
            try:
                self._future.set_result(self._assemble())
            except Exception as e:  # a malformed output
                self._fail(e)

    def _fail(self, exc: BaseException) -> None:
        if not self._future.done():
            err = exc if isinstance(exc, BackendError) else JobFailed(f"{self.backend}: {type(exc).__name__}: {exc}")
            try:
                self._future.set_exception(err)
            except cf.InvalidStateError:
                pass

    def _assemble(self) -> BatchResult:
        t, groups = self.batch.template, self.prep.payloads.groups
        counts = [[None] * len(groups) for _ in range(self.batch.size)]
        for f in self._parts:
            r, g, c = f.result()
            counts[r][g] = c
        meta = {"backend": self.backend, "cost": self._cost, "service_jobs": len(self._parts),
                "currency": (self.backend_obj._entry or {}).get("currency", "USD"), "shots": self.shots}
        if not t.observables:
            return BatchResult(counts=[row[0] for row in counts], metadata=meta)
        est = [estimate(t, groups, row) for row in counts]
        return BatchResult(values=np.stack([v for v, _ in est]), stderr=np.stack([e for _, e in est]), metadata=meta)

    def cancel(self) -> bool:
        """Stop polling and cancel every service job not yet finished."""
        if self._future.done():
            return False
        self.cancelled = True
        for f in self._parts:
            f.cancel()
        with self._lock:
            created = list(self._service_jobs)
        for sj in created:
            self.cancel_service_job(sj)
        try:
            self._future.cancel()
        except cf.InvalidStateError:
            pass
        if not self._future.cancelled():  # a running future cannot be cancelled: fail it as cancelled
            from ..base import JobCancelled

            self._fail(JobCancelled(f"job on {self.backend} was cancelled"))
        return True

    def cancel_service_job(self, sj) -> None:
        if sj.details.status not in _TERMINAL:
            try:
                self.backend_obj.workspace().cancel_job(sj)
            except Exception:
                pass  # best effort: it may have finished meanwhile

    def status(self) -> str:
        return "cancelled" if self.cancelled else super().status()


def _output_blob(container_uri: str | None) -> str:
    """Where the service puts a job's output when it does not say: ``rawOutputData`` in the job's container."""
    if not container_uri:
        raise JobFailed("the service reported a finished job with neither an output URI nor a container")
    base, _, sas = container_uri.partition("?")
    return f"{base.rstrip('/')}/rawOutputData" + (f"?{sas}" if sas else "")


def _digest(batch: CircuitBatch, shots: int) -> str:
    h = hashlib.sha256(batch.template.fingerprint().encode())
    h.update(np.ascontiguousarray(batch.inputs, dtype=float).tobytes())
    h.update(np.ascontiguousarray(batch.weights, dtype=float).tobytes())
    h.update(f"{shots}|{batch.seed}".encode())
    return h.hexdigest()[:32]


def connect(*, subscription_id=None, resource_group=None, name=None, location=None, resource_id=None,
            endpoint=None, key=None, credential=None, connection_string=None):
    """The SDK's ``Workspace`` from hqflow's options, the SDK's environment variables, or a connection string."""
    try:
        from azure.core.credentials import AzureKeyCredential
        from azure.quantum import Workspace
    except ImportError:
        raise BackendError("Azure Quantum needs the azure extra: pip install 'hqflow[azure]'") from None
    key = key or os.environ.get("AZURE_QUANTUM_API_KEY")
    endpoint = endpoint or os.environ.get("AZURE_QUANTUM_ENDPOINT")
    if credential is None and key:
        credential = AzureKeyCredential(key)
    kw = {k: v for k, v in dict(subscription_id=subscription_id, resource_group=resource_group, name=name,
                                location=location, resource_id=resource_id).items() if v is not None}
    if endpoint:
        kw["_quantum_endpoint"] = endpoint
    try:
        if connection_string and not kw:
            return Workspace.from_connection_string(connection_string)
        return Workspace(credential=credential, user_agent="hqflow", **kw)
    except ValueError as exc:
        raise BackendError(
            "Azure Quantum workspace not configured: pass subscription_id, resource_group, name and location "
            "with key or credential (or set AZURE_QUANTUM_CONNECTION_STRING, or the AZURE_QUANTUM_* variables); "
            f"see README 'Run on Azure Quantum' ({str(exc).split(chr(10))[0].strip() or 'incomplete'})") from None

