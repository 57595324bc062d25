"""``azure:<target>``: an Azure Quantum target on the backend protocol, over the azure-quantum SDK.

    backend = get_backend("azure:ionq.simulator", subscription_id=..., resource_group=...,
                          name=..., location=...)     # the key: AZURE_QUANTUM_API_KEY, or az login
    job = backend.submit(batch)        # B rows x G measurement groups -> B*G service jobs (packed: fewer)
    backend.estimate_cost(batch)       # before submitting: Cost(amount, currency, ...)
    backend.usage(batch)               # before submitting: service jobs, circuits, shots, cost

A batch of ``B`` rows becomes ``B * G`` service jobs (``G`` measurement groups),
created, polled and downloaded concurrently on the backend's threads (at most
``max_concurrency`` at once). Where the target's input format packs (Rigetti's Quil,
``input_format="quil"``: one program, a parameter set per row), each group's rows go
``max_bindings`` (default 512) to a service job instead (``packing.py``); the target
table (``prices.json``) says which formats pack, and each target's shot cap, which
``submit`` enforces. Job ids are UUIDs derived from the run's job key
(``CircuitBatch.key``: run, fragment, step), the batch's content, the row (or the
packed rows), the group, the attempt and the try, so resubmitting after a crash or a
timeout finds the service job that already ran instead of running it again.

What fails, and what happens then:

* a transient HTTP failure (429, 5xx, a dropped connection, an expired SAS) is
  retried with the same id; a job's PUT that failed so (its answer may be lost after the service
  created the job) is followed by a GET of the id, and PUT again only if no such job exists;
* a service job that ends ``Failed`` (or is cancelled by someone else) is retried
  alone, with the next try's id, up to ``job_tries`` service jobs for that row (or
  packed rows) and group; its sibling jobs run on untouched. Only a row that fails ``job_tries``
  times fails the batch: the rows still running then stay on the service, and the
  runtime's retry (``CircuitBatch.attempt`` + 1) finds them, and every row that
  succeeded, by their ids;
* refused credentials (401, or 403 from the workspace) and an endpoint that cannot
  be reached (no such host, connection refused) raise ``BackendAccessError`` at
  once: another try would fail the same way, so the runtime ends the run;
* ``AzureJob.cancel()`` cancels the batch's service jobs not known to have ended
  (also after the batch failed), and ``close()`` cancels every service job this
  backend started that has not ended: the end of a run leaves nothing running.

``AzureJob.started()`` is True once every one of the batch's service jobs has left the
service's queue (``Waiting``): the runtime's ``job_timeout`` counts running time from
then, so a batch in a long queue is waited for.

Results carry ``metadata["usage"]`` (a ``Usage``: the service jobs this batch created, retries
included, their circuits and shots, and their list price) beside ``service_jobs``, ``cost`` and the
other figures. A simulator target's returned probabilities are sampled here: from each row's own seed
where the batch has ``row_seeds`` (``capabilities.row_seeded``), else from the batch's seed as before.

With ``share=K`` (or ``"auto"``; default 1, off) up to K rows of a batch run as one circuit on disjoint registers,
as many as fit the target's qubits (``hqflow.backends.share``): the wide circuits are built, translated and sent
like any other (their service jobs have their own ids), each row is read from its register's marginal of the
returned counts, and usage and price count ⌈B / k⌉ circuits per group, each of k × the gates. A simulator's
returned probabilities are then sampled per wide circuit, from its first row's seed (``row_seeded`` is False).
Packing (Quil's bindings) packs the wide rows.

Options beside the workspace's: ``shots`` (at most the target's cap), ``max_concurrency``, ``job_tries``,
``session`` (one session per run, under the ``Continue`` failure policy: ``Abort`` would leave a failed row no
retry, and is refused), ``input_format`` (one the target's provider takes), ``max_bindings`` (only where the
format packs bindings: Quil), the polling intervals and ``prices`` (the target table). IonQ's pass-through
options, as Azure's IonQ provider page documents them (learn.microsoft.com/azure/quantum/provider-ionq):

* ``debias`` (IonQ's QPUs): IonQ's error mitigation on (True, the service's default) or off (False), sent as the
  input parameter ``"error-mitigation": {"debias": false}`` and priced with the table's minimum for it
  (``minimum_no_debias``);
* ``noise`` (``ionq.simulator``): IonQ's noise model, one of the table's ``noise_models`` (``aria-1``, ...; a target
  name ``ionq.qpu.aria-1`` will do; ``ideal`` is no noise), sent as ``"noise": {"model": "aria-1", "seed": s}``.
  The noisy simulator samples the shots itself, so its histogram is taken as it is; each service job's seed ``s``
  (in 1..2**31 - 1) comes from its row's seed and group and ``noise_seed`` (default 0), so a run's noisy samples are
  a function of its seeds. The simulator stays free.

The workspace's options follow the SDK's ``Workspace``: ``subscription_id``, ``resource_group``,
``name``, ``location``, ``resource_id``, ``credential`` (an azure-identity
credential) or ``key`` (an API key), ``connection_string``, and ``endpoint`` (the
job service's URL). Unset ones come from the SDK's environment variables
(``AZURE_QUANTUM_SUBSCRIPTION_ID``, ``AZURE_QUANTUM_WORKSPACE_RG``,
``AZURE_QUANTUM_WORKSPACE_NAME``, ``AZURE_QUANTUM_WORKSPACE_LOCATION``,
``AZURE_QUANTUM_CONNECTION_STRING``) and hqflow's ``AZURE_QUANTUM_API_KEY`` and
``AZURE_QUANTUM_ENDPOINT``; without a key, azure-identity's ``DefaultAzureCredential`` (``az login``), never an
interactive browser. Settings left unset are refused in one line that names them (the workspace is not looked
up by name).
Keep the key in the environment: an option on a command line shows in ``ps``.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import importlib.util
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from urllib.parse import urlparse

import numpy as np
from hqflow.ir.text import number, shown

from .. import SECRETS
from .. import share as shared
from ..base import Backend, BackendAccessError, BackendError, BatchResult, Capabilities, CircuitBatch, FutureJob, \
    JobCancelled, JobFailed, RequestRefused, Usage
from . import packing
from .cost import MAX_BINDINGS, PRICES, Cost, batch_cost, job_cost, limits, load_prices, template_counts, with_debias
from .packing import Chunk
from .results import estimate
from .translate import Format, Payloads, format_for

_NAMESPACE = packing.NAMESPACE
_TERMINAL = {"Succeeded", "Completed", "Failed", "Cancelled"}
_QUEUED = {"Queued", "Waiting"}
_TRIES = 6  # tries of one HTTP call that fails transiently
_TRANSIENT = (408, 409, 429, 500, 502, 503, 504)
_CANCEL_TRANSIENT = (408, 429, 500, 502, 503, 504)  # a 409 to a cancel: the job has ended
# what a refused connection or an unknown host says (not "temporary failure in name resolution": that passes)
_UNREACHABLE = ("connection refused", "name or service not known", "nodename nor servname", "getaddrinfo failed",
                "no address associated")


class AzureUnauthorized(BackendAccessError):
    """The workspace refused the credentials."""


class _Stopped(Exception):
    """A row's work ended early: its batch was cancelled or failed, or the backend closed."""


def _status(sj) -> str:
    """A service job's status as the service spells it (the SDK gives an enum or a string)."""
    status = sj.details.status
    return str(getattr(status, "value", status))


@dataclass
class _Prepared:
    """One template on this target: its payloads and what one row costs."""

    payloads: Payloads
    counts: list[tuple[int, int, int]]  # (1q, 2q, measurements) per measurement group
    entry: dict | None  # the target's price-table entry
    target: str

    def job_cost(self, group: int, shots: int, rows: int = 1) -> float:
        """What one service job of ``group`` at ``shots`` (``rows`` bindings) costs; NaN where the price is unknown."""
        if not self.entry:
            return float("nan")
        try:
            return job_cost(self.entry, self.target, self.counts[group], shots, rows)
        except BackendError:
            return float("nan")


class AzureBackend(Backend):
    """One Azure Quantum target; see the module docstring."""

    def __init__(self, target: str | None = None, *, subscription_id: str | None = None,
                 resource_group: str | None = None, name: str | None = None, location: str | None = None,
                 resource_id: str | None = None, endpoint: str | None = None, key: str | None = None,
                 credential=None, connection_string: str | None = None, shots: int = 500,
                 max_concurrency: int = 64, job_tries: int = 4, session: bool = False,
                 job_failure_policy: str | None = None, input_format: str | None = None,
                 poll_interval: float = 0.05, max_poll_interval: float = 5.0, prices: str = PRICES, workspace=None,
                 max_bindings: int | None = None, debias: bool | None = None, noise: str | None = None,
                 noise_seed: int | None = None, share: int | str = 1):
        if not target:
            raise BackendError("name an Azure Quantum target: azure:<target>, e.g. azure:ionq.simulator")
        _need_sdk()
        for option, value in (("shots", shots), ("max_concurrency", max_concurrency), ("job_tries", job_tries),
                              ("max_bindings", MAX_BINDINGS if max_bindings is None else max_bindings)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise BackendError(f"{option} must be a positive integer, got {shown(value)}")
        if job_failure_policy not in (None, "Abort", "Continue"):
            raise BackendError(f"job_failure_policy must be 'Abort' or 'Continue', got {shown(job_failure_policy)}")
        if job_failure_policy is not None and not session:
            raise BackendError(f"job_failure_policy={job_failure_policy!r} applies to a session: it goes with "
                               "session=True")
        if session and job_failure_policy == "Abort":  # the session would refuse a failed row's next try
            raise BackendError("session=True with job_failure_policy='Abort' would end the session at the first "
                               "failed service job, so no row could be retried (job_tries): use 'Continue' (the "
                               "default with a session)")
        self.target, self.name, self.share = target, f"azure:{target}", shared.option(share)
        self.format: Format = format_for(target, input_format)
        self.shots, self.session, self.job_tries = int(shots), bool(session), int(job_tries)
        self.job_failure_policy = "Continue"
        self.poll_interval, self.max_poll_interval = float(poll_interval), float(max_poll_interval)
        self.prices = prices
        self._entry = with_debias(load_prices(prices)["targets"].get(target), target, debias, prices)
        self.noise, self.noise_seed = _noise(self._entry, target, noise, noise_seed)
        self._params = {} if debias is None else {"error-mitigation": {"debias": bool(debias)}}  # every job's
        # what the options change in a job beside its circuit: in its id, so that no run finds another's jobs
        self._options = "" if debias is None and noise is None else f"|{debias}|{self.noise}|{self.noise_seed}"
        per_job, self.max_shots = limits(target, self.format.kind, prices)
        if self.max_shots is not None and self.shots > self.max_shots:
            raise BackendError(f"shots={self.shots}: {target} takes at most {self.max_shots:,} shots per job")
        if per_job != 1 and self.format.kind not in packing.PACKS:
            raise BackendError(f"the price table says {target} takes {per_job} rows per {self.format.kind} job, "
                               f"but hqflow packs only parameter bindings ({', '.join(packing.PACKS)})")
        if max_bindings is not None and per_job is not None:
            raise BackendError(f"max_bindings sets how many parameter bindings one service job holds where the input "
                               f"format packs them (input_format='quil' on rigetti targets); {target} in "
                               f"{self.format.kind} takes {per_job} per job, so it would do nothing")
        self.max_bindings = MAX_BINDINGS if max_bindings is None else int(max_bindings)
        self.rows_per_job = per_job or self.max_bindings  # rows of one group in one service job
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
        self._open: dict[str, object] = {}  # id -> SDK job: service jobs started here, not seen to end
        self._jobs: weakref.WeakSet = weakref.WeakSet()  # batches in flight (close() wakes their threads)
        self._row_locks = [threading.Lock() for _ in range(512)]  # by row (hashed): creating vs. looking up
        self._made: set[str] = set()  # ids of the service jobs this process created (others: a run before it)
        self._failures: set[str] = set()  # ids of the failed service jobs this process counted
        self._prepared: dict[str, _Prepared] = {}

    # -- the protocol --------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        qubits = (self._entry or {}).get("qubits", 20)
        if self.noise:  # "the hardware specific noise models are limited to the actual qubit capacity"
            qubits = min(qubits, (load_prices(self.prices)["targets"].get(f"ionq.qpu.{self.noise}") or {}).get(
                "qubits", qubits))
        k = shared.most(self.share, qubits)
        return Capabilities(self.name, qubits, None, exact=False, shots=True, gradient=None, device="qpu",
                            service_job_rows=self.rows_per_job * k, max_shots=self.max_shots,
                            row_seeded=self.share == 1, share=k)

    def submit(self, batch: CircuitBatch) -> AzureJob | shared.SharedJob:
        """The batch's service jobs; with ``share``, those of its wide batches (``shared.widen``), every one
        translated before any is sent, whose results are read back into the batch's rows."""
        self._check(batch)
        k = self._k(batch)
        if k == 1:
            return self._submit(batch)
        parts = shared.widen(batch, k)
        for part in parts:
            self._check(part)
            self._prepare(part.template)
        jobs = []
        try:
            for part in parts:
                jobs.append(self._submit(part))
        except BaseException:
            for job in jobs:
                job.cancel()
            raise
        return shared.SharedJob(batch, k, jobs)

    def _submit(self, batch: CircuitBatch) -> AzureJob:
        prep = self._prepare(batch.template)
        shots = batch.shots or self.shots
        if self.max_shots is not None and shots > self.max_shots:
            raise RequestRefused(f"{self.target} takes at most {self.max_shots:,} shots per job (azure-quantum's "
                                 f"target configuration); got {number(shots)}")
        key = batch.key or uuid.uuid4().hex
        chunks = packing.plan(prep.payloads, batch, key, _digest(batch, shots, self._options),
                              self.rows_per_job)
        job = AzureJob(self, batch, prep, shots, len(chunks))
        with self._lock:
            if self._pool is None:
                self._closing = threading.Event()
                self._pool = cf.ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=f"hqflow-{self.name}")
            pool, closing = self._pool, self._closing
            self._jobs.add(job)
        for chunk in chunks:
            job.add(pool.submit(self._run_one, job, chunk, closing))
        return job

    def estimate_cost(self, batch: CircuitBatch) -> Cost:
        """The batch's cost before it runs: every service job's, from the price table (``cost.batch_cost``,
        which ``cost.list_price`` prices with too)."""
        self._check(batch)
        parts = shared.widen(batch, self._k(batch))
        preps = [self._prepare(part.template) for part in parts]
        if self._entry is None:
            raise BackendError(f"target {self.target!r} is not in the price table ({self.prices})")
        costs = [batch_cost(self._entry, self.target, prep.counts, part.size, batch.shots or self.shots,
                            self.rows_per_job) for part, prep in zip(parts, preps)]
        return sum(costs[1:], costs[0])

    def usage(self, batch: CircuitBatch) -> Usage:
        """What the batch will use: ``groups * ceil(rows / rows_per_job)`` service jobs, ``rows * groups``
        circuits of the batch's shots (or the ``shots`` option), and the estimate (NaN where no price is known);
        with ``share``, of its wide batches' rows, ⌈B / k⌉ circuits per group."""
        parts, shots = shared.widen(batch, self._k(batch)), batch.shots or self.shots
        groups = [len(self._prepare(part.template).payloads.groups) for part in parts]
        try:
            cost = self.estimate_cost(batch)
            amount, currency = cost.amount, cost.currency
        except BackendError:
            amount, currency = float("nan"), (self._entry or {}).get("currency")
        circuits = sum(g * part.size for g, part in zip(groups, parts))
        jobs = sum(g * -(-part.size // self.rows_per_job) for g, part in zip(groups, parts))
        return Usage(jobs, circuits, circuits * shots, amount, currency)

    def _k(self, batch: CircuitBatch) -> int:
        """Rows of ``batch`` that share a circuit (1 without ``share``)."""
        if self.share == 1:
            return 1
        return shared.rows_per_circuit(self.share, batch.template.n_qubits, self.capabilities.max_qubits, self.name)

    def targets(self) -> list[tuple[str, str, str]]:
        """``(provider, target, availability)`` for every target the workspace offers."""
        ws = self.workspace()
        try:
            return [(t.provider_id, t.name, str(t._current_availability)) for t in ws.get_targets()]
        except Exception as exc:
            raise self._error(exc, "list targets") from None

    def close(self) -> None:
        """Cancel every service job started here that has not ended, close the run's session, if one
        was opened, and stop the threads. The backend stays usable: a later submit starts afresh."""
        with self._lock:
            sid, self._session_id = self._session_id, None
            pool, self._pool = self._pool, None
            self._closing.set()  # threads create nothing more, and cancel what they were creating
            left, self._open = list(self._open.values()), {}
            jobs = list(self._jobs)
        for job in jobs:
            job.wake()
        if left:
            with cf.ThreadPoolExecutor(min(len(left), self.max_concurrency, 16)) as cancels:
                cf.wait([cancels.submit(self._cancel, sj) for sj in left], timeout=120)
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
        return {k: v for k, v in self._connect.items() if v is not None and k not in SECRETS}

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
            counts = template_counts(template, (self._entry or {}).get("model", "free"))
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

    def _run_one(self, job: AzureJob, chunk: Chunk, closing: threading.Event) -> tuple:
        """One chunk's service job (a row, or packed rows, of one group): reuse one of an earlier attempt
        that ran or runs, else create this attempt's; a failed one is followed by the next try, up to
        ``job_tries``."""
        from azure.core.exceptions import ResourceNotFoundError

        ws, failures = self.workspace(), []
        attempt = job.batch.attempt

        def jid(a: int, t: int) -> str:
            return packing.job_id(chunk.base, a, t)

        # The chunk's lock: an earlier attempt's thread still creating this chunk's job (it checked before its
        # batch failed) finishes before this one looks for it, so no row runs twice
        lock = self._row_locks[hash(chunk.base) % len(self._row_locks)]
        for a in range(attempt):  # an earlier attempt's tries, in order, until one was never made
            for t in range(self.job_tries):
                self._stop_check(job, closing)
                try:
                    with lock:
                        sj = self._retry(lambda: ws.get_job(jid(a, t)), "look up a job")
                except ResourceNotFoundError:
                    break
                done = self._follow(sj, False, job, chunk, closing, failures)
                if done is not None:
                    return done
        for t in range(self.job_tries):
            with lock:
                self._stop_check(job, closing)
                sj, created = self._retry(lambda: self._create(ws, jid(attempt, t), chunk, job), "submit a job")
            done = self._follow(sj, created, job, chunk, closing, failures)
            if done is not None:
                return done
        raise JobFailed(f"Azure job for {chunk.label()} on {self.target} failed {len(failures)} times "
                        f"(job_tries={self.job_tries}); last: {failures[-1]}")

    @staticmethod
    def _stop_check(job: AzureJob, closing: threading.Event) -> None:
        if job.stopped or closing.is_set():
            raise _Stopped("the batch was cancelled or failed, or the backend closed")

    def _follow(self, sj, created: bool, job: AzureJob, chunk: Chunk, closing: threading.Event,
                failures: list) -> tuple | None:
        """Track ``sj``, wait for it to end and download its result: ``(lo, group, [counts per row])``, or
        None (the reason added to ``failures``) when it failed. Raises ``_Stopped`` when the batch stops."""
        job.track(sj, created, chunk)
        live = _status(sj) not in _TERMINAL
        with self._lock:  # registered before the checks below: close() and cancel() see it, or it sees them
            if live:
                self._open[sj.id] = sj
            ended = closing.is_set() or job.cancelled
        if ended:  # the run ended, or the batch was cancelled, while this job was being created
            if live:
                self._cancel(sj)
            raise _Stopped("cancelled")
        self._wait(sj, job, (chunk.lo, chunk.group), closing)
        status = _status(sj)
        if status in ("Succeeded", "Completed"):
            uri = sj.details.output_data_uri or _output_blob(sj.details.container_uri)
            raw = self._retry(lambda: sj.download_data(uri), "download a result")
            sample = ("simulator" in self.target or ".sim." in self.target) and not self.noise  # noisy: shots
            if not created:
                job.count("reused")
            return chunk.lo, chunk.group, packing.unpack(self.format, raw, chunk, job.batch, job.shots, sj.id, sample)
        if status == "Cancelled" and (job.cancelled or closing.is_set()):
            raise _Stopped("cancelled")
        err = sj.details.error_data
        failures.append(f"{status}: {getattr(err, 'message', None) or err or 'no reason given'}")
        with self._lock:  # once per service job: an attempt that finds an earlier one's failed job counted it
            counted = sj.id in self._failures
            self._failures.add(sj.id)
        if not counted:
            job.count("failed")
        return None

    def _create(self, ws, jid: str, chunk: Chunk, job: AzureJob) -> tuple:
        """``(job, created)``: upload the input and create the job (PUT with our id), never PUTting an id that
        may exist: an input already there means a try before this one (a crash, a lost answer) got that far,
        and a PUT that failed may have created the job before its answer was lost, so the job is then looked
        up (GET) first, and PUT again only if it does not exist (the SDK's own blind repeats of the PUT are
        off). A job found is the job as it is, created here only if this try uploaded its input or it has
        not ended."""
        from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
        from azure.quantum import Job
        from azure.quantum.storage import remove_sas_token

        fmt = self.format
        params = {fmt.shots_param: job.shots}
        if fmt.kind == "qir":
            params.update(count=job.shots, items=[{"entryPoint": "ENTRYPOINT__main", "arguments": []}])
        params.update(chunk.params)  # Quil's substitutions: the chunk's rows
        params.update(self._params)
        if self.noise:
            params["noise"] = {"model": self.noise, "seed": packing.service_seed(job.batch, chunk.lo, chunk.group, jid,
                                                                                 self.noise_seed)}
        container = ws.get_container_uri(job_id=jid)
        fresh = True
        try:
            input_uri = Job.upload_input_data(container, chunk.body, content_type=fmt.content_type,
                                              blob_name="inputData")
        except ResourceExistsError:  # a try before this one got that far
            base, _, _ = remove_sas_token(container).partition("?")
            input_uri = base.rstrip("/") + "/inputData"
            fresh = False
        sj = Job.from_storage_uri(ws, name=f"hqflow-{job.batch.template.name}", target=self.target,
                                  input_data_uri=input_uri, provider_id=self.target.split(".", 1)[0],
                                  input_data_format=fmt.input_data_format, output_data_format=fmt.output_data_format,
                                  container_uri=container, job_id=jid, input_params=params,
                                  session_id=self._session(), submit_job=False)
        doubt = [not fresh]  # the job may exist: look it up before any PUT

        def put() -> tuple:
            if doubt[0]:
                try:
                    found = ws.get_job(jid)
                    return found, fresh or _status(found) not in _TERMINAL
                except ResourceNotFoundError:
                    pass
            doubt[0] = True  # from here, a failure may come after the service created it
            try:  # the SDK's Job.submit, with its pipeline's retries (blind repeats of the PUT) off
                sj.details = ws._get_jobs_client().create(ws.subscription_id, ws.resource_group, ws.name, jid,
                                                          sj.details, retry_total=0)
            except ResourceExistsError:
                return ws.get_job(jid), False
            return sj, fresh or _status(sj) not in _TERMINAL

        return self._retry(put, "submit a job")

    def _wait(self, sj, job: AzureJob, part: tuple[int, int], closing: threading.Event) -> None:
        """Poll until the job ends: first when jobs have been taking to finish, then backing off (afresh once it
        leaves the queue). Raises ``_Stopped`` when the batch stops or the backend closes (the service job runs on)."""
        start, waited = time.perf_counter(), _status(sj) not in _TERMINAL
        with self._lock:
            typical = self._typical
        first = min(max(self.poll_interval, 0.9 * typical), self.max_poll_interval) if typical else None
        delay, running = self.poll_interval, False
        while _status(sj) not in _TERMINAL:
            if _status(sj) not in _QUEUED:
                job.mark_started(part)
                if not running:  # out of the queue: polled often again, so that its end is seen soon
                    running, delay = True, self.poll_interval
            if job.stopped or closing.is_set():
                raise _Stopped("stopped")
            if first is not None:
                job.sleep(first)
                first = None
            else:
                job.sleep(delay)
                delay = min(delay * 1.5, self.max_poll_interval)
            if job.stopped or closing.is_set():
                raise _Stopped("stopped")
            self._retry(sj.refresh, "poll a job")
        job.mark_started(part)
        took = time.perf_counter() - start
        with self._lock:
            self._open.pop(sj.id, None)
            if waited:  # (not one found ended) a moving average of how long jobs take to finish, for the first poll
                self._typical = took if self._typical is None else 0.8 * self._typical + 0.2 * took

    def _cancel(self, sj) -> None:
        """Cancel a service job (best effort: it may have ended meanwhile); it is no longer ours to end."""
        try:
            self._retry(lambda: self.workspace().cancel_job(sj), "cancel a job", transient=_CANCEL_TRANSIENT)
        except Exception:  # noqa: BLE001 - ended already (409), or the service is gone: nothing left to do
            pass
        with self._lock:
            self._open.pop(sj.id, None)

    def _retry(self, fn, what: str, transient: tuple[int, ...] = _TRANSIENT):
        """``fn()``, again on transient failures (throttling, 5xx, dropped connections, an expired SAS);
        refused credentials and an unreachable endpoint raise ``BackendAccessError`` at once."""
        from azure.core.exceptions import (ClientAuthenticationError, HttpResponseError, ResourceNotFoundError,
                                           ServiceRequestError, ServiceResponseError)

        for attempt in range(_TRIES):
            try:
                return fn()
            except ResourceNotFoundError:
                raise
            except HttpResponseError as exc:
                refused = isinstance(exc, ClientAuthenticationError) or exc.status_code in (401, 403)
                if refused and not _sas_refused(exc):
                    raise self._error(exc, what) from None
                if not refused and exc.status_code not in transient:
                    raise self._error(exc, what) from None
                err = exc  # an expired SAS is asked for again; throttling and 5xx pass
            except ServiceRequestError as exc:
                if _unreachable(exc):
                    raise self._error(exc, what) from None
                err = exc
            except (ServiceResponseError, ConnectionError) as exc:
                err = exc
            time.sleep(min(0.05 * 2**attempt, 1.0))
        raise self._error(err, what) from None

    def _error(self, exc: Exception, what: str) -> BackendError:
        """One line that names the workspace, what was being done and why it failed."""
        from azure.core.exceptions import ClientAuthenticationError, ServiceRequestError

        status = getattr(exc, "status_code", None)
        ws = self._connect.get("name") or "(from the environment)"
        first = str(getattr(exc, "message", exc)).strip().splitlines()
        msg = first[0][:200] if first else type(exc).__name__
        if status in (401, 403) and not _sas_refused(exc):
            word = "Unauthorized" if status == 401 else "Forbidden"
            return AzureUnauthorized(f"Azure Quantum workspace {ws!r} refused the credentials ({status} {word}) "
                                     f"while trying to {what}; check the key (AZURE_QUANTUM_API_KEY) or credential "
                                     "(az login) and the workspace's access")
        if isinstance(exc, ClientAuthenticationError) and status is None:
            return AzureUnauthorized(f"Azure Quantum workspace {ws!r}: no credential to {what} with ({msg}); set "
                                     "AZURE_QUANTUM_API_KEY or sign in with az login")
        if isinstance(exc, ServiceRequestError) and _unreachable(exc):
            why = "no such host" if "resol" in str(exc).lower() or "name" in str(exc).lower() else \
                "connection refused"
            return BackendAccessError(f"Azure Quantum workspace {ws!r}: cannot reach {self._endpoint()} ({why}) "
                                      f"while trying to {what}; check the endpoint and location")
        reason = getattr(exc, "reason", None) or type(exc).__name__
        return BackendError(f"Azure Quantum workspace {ws!r}: could not {what} on {self.target}: "
                            f"{status or ''} {reason}: {msg}".replace("  ", " "))

    def _endpoint(self) -> str:
        """The job service's host, as configured (for messages)."""
        endpoint = self._connect.get("endpoint") or os.environ.get("AZURE_QUANTUM_ENDPOINT")
        if endpoint:
            return urlparse(endpoint).netloc or endpoint
        location = self._connect.get("location") or os.environ.get("AZURE_QUANTUM_WORKSPACE_LOCATION") or "?"
        return f"{location}.quantum.azure.com"


class AzureJob(FutureJob):
    """The service jobs of one batch; ``result()`` re-joins them into one ``BatchResult``."""

    def __init__(self, backend: AzureBackend, batch: CircuitBatch, prep: _Prepared, shots: int, parts: int):
        super().__init__(cf.Future(), backend.name)
        self._future.set_running_or_notify_cancel()
        self.backend_obj, self.batch, self.prep, self.shots = backend, batch, prep, shots
        self.rows, self.groups = batch.size, len(prep.payloads.groups)
        self.service_parts = parts  # chunks x groups: one service job each (and its tries)
        self.cancelled = False  # cancel() was called: what is created from now on is cancelled at once
        self.stopped = False  # the batch ended early (cancelled, or failed): its threads stop
        self._wake = threading.Event()  # set when stopped: sleeping threads wake
        self._parts: list[cf.Future] = []
        self._service_jobs: list = []
        self._cost = 0.0
        self._created = self._reused = self._failed = self._circuits = 0
        self._found = Usage()  # service jobs an earlier process of the run created for this batch (it paid them)
        self._error: BaseException | None = None  # the first part's failure, said once every part has ended
        self._out: set[tuple[int, int]] = set()  # (first row, group) whose service job has left the queue
        self._lock = threading.Lock()
        self._left = 0

    def add(self, fut: cf.Future) -> None:
        with self._lock:
            self._parts.append(fut)
            self._left += 1
        fut.add_done_callback(self._part_done)

    def track(self, service_job, created: bool, chunk: Chunk) -> None:
        """A service job of this batch: ``created`` by it (and charged), or found from an earlier try (of this
        process, which counted it, or of a run before it: the batch's work all the same, though not paid here)."""
        made, cost = self.backend_obj._made, self.prep.job_cost(chunk.group, self.shots, chunk.rows)
        with self._lock:
            self._service_jobs.append(service_job)
            if created:
                made.add(service_job.id)
                self._created += 1
                self._circuits += chunk.rows
                self._cost += cost
            elif service_job.id not in made:
                made.add(service_job.id)
                self._found += Usage(1, chunk.rows, chunk.rows * self.shots, cost, self._found.currency)
            if _status(service_job) not in _QUEUED:
                self._out.add((chunk.lo, chunk.group))

    def count(self, outcome: str) -> None:
        """One more service job that ``"failed"``, or that an earlier try ran and this batch ``"reused"``."""
        with self._lock:
            if outcome == "failed":
                self._failed += 1
            else:
                self._reused += 1

    def mark_started(self, part: tuple[int, int]) -> None:
        """Service job ``part`` = ``(first row, group)`` has left the service's queue (or ended)."""
        with self._lock:
            self._out.add(part)

    def started(self) -> bool:
        """Whether every one of the batch's service jobs has left the service's queue (or the batch has ended):
        the batch runs, and ``job_timeout`` may count, only when no row waits in the queue any more."""
        with self._lock:
            return self._future.done() or (self.service_parts > 0 and len(self._out) >= self.service_parts)

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or until the batch stops or its backend closes."""
        self._wake.wait(seconds)

    def wake(self) -> None:
        self._wake.set()

    def _halt(self) -> None:
        self.stopped = True
        self._wake.set()

    @property
    def job_ids(self) -> list[str]:
        with self._lock:
            return [sj.id for sj in self._service_jobs]

    def _used(self) -> dict:
        """What the batch has used so far: ``BatchResult.metadata``'s figures; ``usage``, a ``Usage`` of the
        service jobs that did its work (retries included; cost NaN where no price is known), and ``found``, those
        of them a run before this process created and paid (a resumed run's batch finds them by their ids): its
        own cost (``cost``) leaves them out."""
        with self._lock:
            currency = (self.backend_obj._entry or {}).get("currency", "USD")
            found = dataclasses.replace(self._found, currency=currency)
            usage = found + Usage(self._created, self._circuits, self._circuits * self.shots, self._cost, currency,
                                  self._failed)
            return {"backend": self.backend, "cost": self._cost, "service_jobs": self._created,
                    "reused_jobs": self._reused, "failed_jobs": self._failed, "currency": currency,
                    "shots": self.shots, "usage": usage, "found": found}

    def _part_done(self, fut: cf.Future) -> None:
        if self._future.done():
            return
        exc = None if fut.cancelled() else fut.exception()
        if (fut.cancelled() or isinstance(exc, _Stopped)) and not self.stopped:  # the backend closed under it
            exc = JobCancelled(f"{self.backend} was closed before this job finished")
        if exc is not None and not isinstance(exc, _Stopped):
            self._halt()  # the other rows stop; their service jobs run on, for the retry to find
            self._error = self._error or exc
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last and self._error is not None:  # said once every part has ended: its usage counts each service job
            self._fail(self._error)
        elif last and not self.stopped:
            try:
                self._future.set_result(self._assemble())
            except Exception as e:  # a malformed output
                self._fail(e)

    def _fail(self, exc: BaseException) -> None:
        if not self._future.done():
            err = exc if isinstance(exc, BackendError) else JobFailed(f"{self.backend}: {type(exc).__name__}: {exc}")
            if isinstance(err, JobFailed):
                err.metadata = self._used()
            try:
                self._future.set_exception(err)
            except cf.InvalidStateError:
                pass

    def _assemble(self) -> BatchResult:
        t, groups = self.batch.template, self.prep.payloads.groups
        counts = [[None] * len(groups) for _ in range(self.batch.size)]
        for f in self._parts:
            lo, g, rows = f.result()
            for j, c in enumerate(rows):
                counts[lo + j][g] = c
        meta = self._used()
        if not t.observables:
            return BatchResult(counts=[row[0] for row in counts], metadata=meta)
        est = [estimate(t, groups, row) for row in counts]
        return BatchResult(values=np.stack([v for v, _ in est]), stderr=np.stack([e for _, e in est]), metadata=meta)

    def cancel(self) -> bool:
        """Stop, and cancel every service job of the batch not known to have ended: also after the batch
        failed, for the rows it left running for a retry. True if the batch had not finished."""
        unfinished = not self._future.done()
        self.cancelled = True
        self._halt()
        for f in self._parts:
            f.cancel()
        backend = self.backend_obj
        with self._lock:
            mine = list(self._service_jobs)
        with backend._lock:
            left = [sj for sj in mine if sj.id in backend._open]
        for sj in left:
            backend._cancel(sj)
        if unfinished:
            self._fail(JobCancelled(f"job on {self.backend} was cancelled"))
        return unfinished

    def status(self) -> str:
        return "cancelled" if self.cancelled else super().status()


def _sas_refused(exc) -> bool:
    """A 403 from blob storage for a SAS-signed request (an expired SAS: a new one is asked for)."""
    if getattr(exc, "status_code", None) != 403:
        return False
    try:
        url = str(exc.response.request.url)
    except AttributeError:
        return False
    return "sig=" in urlparse(url).query


def _unreachable(exc: BaseException) -> bool:
    """A request that could not reach the endpoint at all: no such host, or the connection refused."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError) or (isinstance(e, socket.gaierror) and e.errno == socket.EAI_NONAME):
            return True
        if any(word in str(e).lower() for word in _UNREACHABLE):
            return True
        todo += [getattr(e, "inner_exception", None), getattr(e, "reason", None), e.__cause__, e.__context__]
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
    return False


def _output_blob(container_uri: str | None) -> str:
    """Where the service puts a job's output when it does not say: ``rawOutputData`` in the job's container."""
    if not container_uri:
        raise JobFailed("the service reported a finished job with neither an output URI nor a container")
    base, _, sas = container_uri.partition("?")
    return f"{base.rstrip('/')}/rawOutputData" + (f"?{sas}" if sas else "")


def _digest(batch: CircuitBatch, shots: int, options: str = "") -> str:
    h = hashlib.sha256(batch.template.fingerprint().encode())
    h.update(np.ascontiguousarray(batch.inputs, dtype=float).tobytes())
    h.update(np.ascontiguousarray(batch.weights, dtype=float).tobytes())
    h.update(f"{shots}|{batch.seed}{options}".encode())
    return h.hexdigest()[:32]


def _noise(entry: dict | None, target: str, noise, seed) -> tuple[str | None, int]:
    """IonQ's simulator's noise model (None: ideal) and the base of its jobs' seeds, checked against the table's
    ``noise_models``."""
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0):
        raise BackendError(f"noise_seed must be an integer >= 0, got {shown(seed)}")
    if noise is None:
        if seed is not None:
            raise BackendError(f"noise_seed={number(seed)} seeds IonQ's noise model: it goes with noise= (e.g. "
                               "noise=aria-1 on azure:ionq.simulator)")
        return None, 0
    models = (entry or {}).get("noise_models")
    if not models:
        raise BackendError(f"noise={shown(noise)}: IonQ's noise models are an option of its simulator "
                           f"(azure:ionq.simulator), not of {shown(target)}")
    model = noise.removeprefix("azure:").removeprefix("ionq.qpu.") if isinstance(noise, str) else None
    if model not in models:
        raise BackendError(f"noise={shown(noise)} is not one of IonQ's noise models: {', '.join(models)} (or "
                           "ionq.qpu.<model>)")
    if model == "ideal" and seed is not None:  # no noise and no sampling: a seed would do nothing
        raise BackendError(f"noise_seed={number(seed)} with noise=ideal would do nothing: the ideal simulator "
                           "returns exact probabilities")
    return (None, 0) if model == "ideal" else (model, int(seed or 0))


_EXTRA = 'Azure Quantum needs the azure extra: pip install "hqflow[azure]"'
_SDK = ("azure.quantum", "azure.storage.blob", "azure.identity")  # what the extra installs and every job needs


def _need_sdk() -> None:
    """``BackendAccessError`` (never retried) naming the extra when the SDK cannot be imported: a base install."""
    for module in _SDK:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or blocked
            found = False
        if not found:
            raise BackendAccessError(f"{_EXTRA} ({module} is not installed)")


# each workspace setting: its option, and the environment variables the SDK reads it from
_WHERE = (("subscription_id", ("AZURE_QUANTUM_SUBSCRIPTION_ID", "AZURE_SUBSCRIPTION_ID")),
          ("resource_group", ("AZURE_QUANTUM_WORKSPACE_RG", "AZURE_RESOURCE_GROUP")),
          ("name", ("AZURE_QUANTUM_WORKSPACE_NAME",)), ("location", ("AZURE_QUANTUM_WORKSPACE_LOCATION",)))


def connect(*, subscription_id=None, resource_group=None, name=None, location=None, resource_id=None,
            endpoint=None, key=None, credential=None, connection_string=None):
    """The SDK's ``Workspace`` from hqflow's options, the SDK's environment variables, or a connection string."""
    try:
        from azure.core.credentials import AzureKeyCredential
        from azure.core.exceptions import ClientAuthenticationError
        from azure.quantum import Workspace
    except ImportError:
        raise BackendAccessError(_EXTRA) from None
    key = key or os.environ.get("AZURE_QUANTUM_API_KEY")
    endpoint = endpoint or os.environ.get("AZURE_QUANTUM_ENDPOINT")
    kw = {k: v for k, v in dict(subscription_id=subscription_id, resource_group=resource_group, name=name,
                                location=location, resource_id=resource_id).items() if v is not None}
    by_string = connection_string or os.environ.get("AZURE_QUANTUM_CONNECTION_STRING")
    missing = [] if by_string else [envs[0] for k, envs in _WHERE if not kw.get(k) and not any(map(os.environ.get, envs))
                                    and not (resource_id and k != "location")]
    if missing:  # the SDK would look the rest up in Azure Resource Graph, signing in however it can
        options = ", ".join(k for k, envs in _WHERE if envs[0] in missing)
        raise BackendAccessError(f"Azure Quantum workspace not configured: set {', '.join(missing)} (or the options "
                                 f"{options}; and AZURE_QUANTUM_API_KEY, or sign in with az login), or "
                                 "AZURE_QUANTUM_CONNECTION_STRING; see README 'Run on Azure Quantum'")
    if credential is None and key:
        credential = AzureKeyCredential(key)
    elif credential is None and not by_string:  # the SDK's default would open a browser: never from hqflow
        from azure.identity import DefaultAzureCredential

        quiet = logging.getLogger("azure.identity")  # its failed sign-ins are raised, in one line: no 20-line log
        if not quiet.handlers:  # where the application logs nothing (Python's last resort would print them)
            quiet.addHandler(logging.NullHandler())

        credential = DefaultAzureCredential(exclude_interactive_browser_credential=True)
    if endpoint:
        kw["_quantum_endpoint"] = endpoint
    try:
        if connection_string and not kw:
            return Workspace.from_connection_string(connection_string)
        return Workspace(credential=credential, user_agent="hqflow", **kw)
    except ClientAuthenticationError as exc:  # looking the workspace's endpoint up in Azure needs a sign-in
        first = (str(exc).strip().splitlines() or ["no credential"])[0][:200]
        raise AzureUnauthorized(f"Azure Quantum workspace {kw.get('name') or '(from the environment)'!r}: no "
                                f"credential to load it with ({first}); set AZURE_QUANTUM_API_KEY or sign in with "
                                "az login") from None
    except (ValueError, RuntimeError) as exc:  # RuntimeError: the SDK's lookup of the workspace failed
        raise BackendAccessError(
            "Azure Quantum workspace not configured: pass subscription_id, resource_group, name and location "
            "with key or credential (or set AZURE_QUANTUM_CONNECTION_STRING, or the AZURE_QUANTUM_* variables); "
            f"see README 'Run on Azure Quantum' ({str(exc).split(chr(10))[0].strip() or 'incomplete'})") from None

