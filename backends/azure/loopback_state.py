"""The loopback service's state: jobs and their runs, sessions, SAS URIs into Azurite, settings,
injected faults and counters. ``loopback`` puts HTTP in front of it; ``loopback_run`` runs the circuits.

Job lifecycle: ``Waiting`` (``latency`` seconds, the queue; more for a slow job) -> ``Executing``
(``run_seconds``; until cancelled for a hung job) -> ``Succeeded`` (``rawOutputData`` uploaded into
the job's container, ``outputDataUri`` set) | ``Failed`` (``errorData``) | ``Cancelled``. Sessions: ``Waiting`` -> ``Executing`` with their first
job; a failed job makes an ``Abort`` session ``Failed`` (closed, its queued jobs fail) and a
``Continue`` one ``Failure(s)``; closing makes it ``Succeeded``, or ``Failed`` after failures.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import datetime as dt
import hashlib
import json
import re
import threading
import time
from urllib.parse import unquote, urlencode, urlparse

import numpy as np

TARGETS = {"ionq": {"ionq.simulator": 29, "ionq.qpu.aria-1": 25, "ionq.qpu.forte-1": 36},
           "quantinuum": {"quantinuum.sim.h2-1sc": 56, "quantinuum.sim.h2-1e": 56, "quantinuum.qpu.h2-1": 56},
           "rigetti": {"rigetti.sim.qvm": 20, "rigetti.qpu.ankaa-3": 84, "rigetti.qpu.cepheus-1-108q": 108}}
FAULTS = ("job_failure", "http_503", "http_429", "slow_job", "hang_job", "expired_sas", "drop_connection", "lost_put")
# rerun_puts: 1 makes this a service that runs a repeated PUT of a job id again (Azure's answers with the job as it
# is), so that a client's blind repeat shows as a job run twice; stats()["repeated_puts"] counts them either way
DEFAULTS = {"latency": 0.0, "slow_seconds": 2.0, "run_seconds": 0.0, "rerun_puts": 0.0, **{f: 0.0 for f in FAULTS}}
_TERMINAL = ("Succeeded", "Failed", "Cancelled")
_FIELDS = {"Name": "name", "ItemType": "itemType", "JobType": "jobType", "ProviderId": "providerId",
           "Target": "target", "State": "status", "CreationTime": "creationTime"}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def _provider_of(target) -> str | None:
    return next((p for p, ts in TARGETS.items() if target in ts), None)


class Service:
    """The state: jobs, sessions, settings, counters. Thread-safe."""

    def __init__(self, storage: str, key: str, seed: int = 0):
        import requests
        from azure.storage.blob import BlobServiceClient

        session = requests.Session()  # enough pooled connections for every job thread
        session.mount("http://", requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=256))
        key_match = re.search(r"AccountKey=([^;]+)", storage)
        if key_match is None:
            raise ValueError("the storage connection string has no AccountKey (Azurite's has one)")
        self.blobs = BlobServiceClient.from_connection_string(storage, session=session)
        self.account_key = key_match.group(1)
        self.key, self.seed, self.lock = key, seed, threading.Lock()
        self.pool = cf.ThreadPoolExecutor(128, thread_name_prefix="loopback-job")
        self.containers: set[str] = set()  # created in Azurite already
        self.configure(reset=True)

    # -- settings and counters ---------------------------------------------------------
    def configure(self, reset: bool = False, **kw) -> None:
        unknown = set(kw) - set(DEFAULTS) - {"seed"}
        if unknown:
            raise ValueError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(DEFAULTS)} and seed")
        for k, v in kw.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or (k in FAULTS and v > 1):
                raise ValueError(f"{k} must be a number" + (" in [0, 1]" if k in FAULTS else " >= 0") + f", got {v!r}")
        with self.lock:
            if reset:
                self.settings, self.jobs, self.sessions = dict(DEFAULTS), {}, {}
                self.runs, self.faults, self.requests = collections.Counter(), dict.fromkeys(FAULTS, 0), 0
                self.cancelled = {"Waiting": 0, "Executing": 0}  # jobs cancelled, by the status they had
                self.inputs = collections.Counter()  # succeeded jobs per input (target, format, params, data)
                self.repeated_puts = 0  # PUTs of a job id that existed
            self.seed = int(kw.pop("seed", self.seed))
            self.settings.update(kw)
            self.rng = np.random.default_rng(self.seed)

    def fault(self, name: str) -> bool:
        with self.lock:
            hit = self.settings[name] > 0 and self.rng.random() < self.settings[name]
            self.faults[name] += hit
            return hit

    def stats(self) -> dict:
        """Counters: ``jobs`` created, ``executions``, ``duplicated`` (job ids run more than once),
        ``reruns`` (succeeded jobs whose input had succeeded before under another id: work paid twice),
        ``by_status``, ``left`` (jobs still Waiting or Executing), ``cancelled_waiting`` and
        ``cancelled_executing`` (jobs cancelled in that status), ``repeated_puts`` (PUTs of a job id that existed),
        faults, requests, runs, sessions, settings."""
        with self.lock:
            by_status = collections.Counter(j["status"] for j in self.jobs.values())
            return {"jobs": len(self.jobs), "executions": sum(self.runs.values()),
                    "duplicated": sum(1 for c in self.runs.values() if c > 1),
                    "reruns": sum(c - 1 for c in self.inputs.values()),
                    "left": by_status["Waiting"] + by_status["Executing"],
                    "cancelled_waiting": self.cancelled["Waiting"], "cancelled_executing": self.cancelled["Executing"],
                    "by_status": dict(by_status), "repeated_puts": self.repeated_puts,
                    "faults": dict(self.faults), "requests": self.requests, "runs": dict(self.runs),
                    "sessions": {k: s["status"] for k, s in self.sessions.items()},
                    "settings": dict(self.settings, seed=self.seed)}

    # -- storage -----------------------------------------------------------------------
    def sas_uri(self, container: str, blob: str | None) -> str:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import (BlobSasPermissions, ContainerSasPermissions, generate_blob_sas,
                                        generate_container_sas)

        if not container or not re.fullmatch(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}", container):
            raise ValueError(f"invalid container name {container!r}")
        client = self.blobs.get_container_client(container)
        if container not in self.containers:
            try:
                client.create_container()
            except ResourceExistsError:
                pass
            self.containers.add(container)
        hours = -1 if self.fault("expired_sas") else 2
        expiry = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=hours)
        account = self.blobs.account_name
        if blob:
            sas = generate_blob_sas(account, container, blob, account_key=self.account_key, expiry=expiry,
                                    permission=BlobSasPermissions(read=True, write=True, create=True))
            return f"{client.get_blob_client(blob).url}?{sas}"
        sas = generate_container_sas(account, container, account_key=self.account_key, expiry=expiry,
                                     permission=ContainerSasPermissions(read=True, write=True, create=True,
                                                                        list=True, add=True))
        return f"{client.url}?{sas}"

    def _blob(self, uri: str):
        parts = urlparse(uri).path.split("/")  # /account/container/blob... (Azurite's path style)
        return self.blobs.get_blob_client(parts[2], "/".join(parts[3:]))

    # -- jobs --------------------------------------------------------------------------
    def create_job(self, job_id: str, body: dict) -> tuple[int, dict]:
        target, provider = body.get("target"), str(body.get("providerId") or "").lower()
        if _provider_of(target) is None:
            return 400, error("InvalidJobDefinition", f"target {target!r} is not available in this workspace")
        if provider and provider != _provider_of(target):
            return 400, error("InvalidJobDefinition", f"target {target!r} is not offered by provider {provider!r}")
        if not body.get("containerUri") or not body.get("inputDataUri"):
            return 400, error("InvalidJobDefinition", "containerUri and inputDataUri are required")
        with self.lock:
            if job_id in self.jobs:
                self.repeated_puts += 1
                if not self.settings["rerun_puts"]:  # idempotent: the job as it is, never run again
                    return 200, self._public(self.jobs[job_id])
            sid = body.get("sessionId")
            if sid:
                session = self.sessions.get(sid)
                if session is None:
                    return 400, error("SessionNotFound", f"session {sid} does not exist")
                if session["_closed"]:
                    return 400, error("SessionClosed" if session["status"] != "Failed" else "SessionFailed",
                                       f"session {sid} is {session['status']} and takes no more jobs")
            now = _now()
            job = dict(body, id=job_id, itemType="Job", jobType=body.get("jobType") or "QuantumComputing",
                       status="Waiting", creationTime=now, lastUpdatedTime=now, outputDataUri=None, errorData=None)
            self.jobs[job_id] = job
        self.pool.submit(self._execute, job_id)
        return 201, self._public(job)

    def _execute(self, job_id: str) -> None:
        """Wait ``latency`` seconds (the queue), then run the job unless it was cancelled meanwhile: for
        ``run_seconds``, or, hung, until it is cancelled."""
        from . import loopback_run

        with self.lock:
            delay = self.settings["latency"]
        if self.fault("slow_job"):
            delay += self.settings["slow_seconds"]
        time.sleep(delay)
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None or job["status"] != "Waiting":
                return  # cancelled, failed with its session, or cleared by a reset: it never runs
            job.update(status="Executing", beginExecutionTime=_now(), lastUpdatedTime=_now())
            self.runs[job_id] += 1
            session = self.sessions.get(job.get("sessionId"))
            if session and session["status"] == "Waiting":
                session["status"] = "Executing"
        hung = self.fault("hang_job")
        with self.lock:
            running = self.settings["run_seconds"]
        end = time.perf_counter() + running
        while hung or time.perf_counter() < end:  # on the device; a cancellation ends it
            time.sleep(min(0.05, max(end - time.perf_counter(), 0.0)) if not hung else 0.05)
            with self.lock:
                if self.jobs.get(job_id) is not job or job["status"] != "Executing":
                    return
        try:
            if self.fault("job_failure"):
                raise RuntimeError("injected fault: the device reported an error")
            params = job.get("inputParams") or {}
            shots = params.get("shots", params.get("count", 100))
            seed = int.from_bytes(hashlib.sha256(f"{self.seed}|{job_id}".encode()).digest()[:8], "big")
            data = self._blob(job["inputDataUri"]).download_blob().readall()
            what = hashlib.sha256(json.dumps([job["target"], job.get("inputDataFormat"), params]).encode() + data)
            out = loopback_run.run(job.get("inputDataFormat"), data, job["target"], shots,
                                   np.random.default_rng(seed), params)
            container = urlparse(job["containerUri"]).path.split("/")[2]
            blob = self.blobs.get_blob_client(container, "rawOutputData")
            blob.upload_blob(json.dumps(out).encode(), overwrite=True)
            update = {"status": "Succeeded", "outputDataUri": blob.url, "_input": what.hexdigest()}
        except loopback_run.BadInput as exc:
            update = {"status": "Failed", "errorData": {"code": "InvalidInputData", "message": str(exc)[:500]}}
        except Exception as exc:  # noqa: BLE001 (an injected fault, or storage trouble)
            update = {"status": "Failed", "errorData": {"code": "ExecutionFailed",
                                                        "message": f"{type(exc).__name__}: {str(exc)[:400]}"}}
        with self.lock:
            if job["status"] != "Executing":
                return  # cancelled while it ran: the result is dropped
            job.update(update, endExecutionTime=_now(), lastUpdatedTime=_now())
            if "_input" in update:
                self.inputs[update["_input"]] += 1
            if update["status"] == "Failed" and job.get("sessionId") in self.sessions:
                self._session_failed(self.sessions[job["sessionId"]], job_id)

    def _session_failed(self, session: dict, job_id: str) -> None:
        if session["jobFailurePolicy"] != "Abort":
            session["status"] = "Failure(s)"
            return
        session.update(status="Failed", _closed=True)
        for other in self.jobs.values():  # the session's queued jobs end with it
            if other.get("sessionId") == session["id"] and other["status"] == "Waiting":
                other.update(status="Failed", endExecutionTime=_now(), errorData={
                    "code": "SessionFailed", "message": f"session {session['id']} failed with job {job_id}"})

    def cancel_job(self, job_id: str) -> tuple[int, dict | None]:
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                return 404, error("JobNotFound", f"job {job_id} does not exist")
            if job["status"] not in _TERMINAL:
                self.cancelled[job["status"]] = self.cancelled.get(job["status"], 0) + 1
                job.update(status="Cancelled", cancellationTime=_now(), endExecutionTime=_now())
            return 204, None  # what the service answers (the SDK takes it)

    def update_job(self, job_id: str, body: dict) -> tuple[int, dict]:
        """PATCH: a new name, priority or tags."""
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                return 404, error("JobNotFound", f"job {job_id} does not exist")
            job.update({k: body[k] for k in ("name", "priority", "tags") if k in body}, lastUpdatedTime=_now())
            return 200, {"name": job.get("name"), "priority": job.get("priority") or "Standard",
                         "tags": job.get("tags") or []}

    def get_job(self, job_id: str) -> tuple[int, dict]:
        with self.lock:
            job = self.jobs.get(job_id)
            return (200, self._public(job)) if job else (404, error("JobNotFound", f"job {job_id} does not exist"))

    # -- sessions ----------------------------------------------------------------------
    def open_session(self, sid: str, body: dict) -> tuple[int, dict]:
        if _provider_of(body.get("target")) is None:
            return 400, error("InvalidSessionDefinition", f"target {body.get('target')!r} is not available")
        policy = body.get("jobFailurePolicy") or "Abort"
        if policy not in ("Abort", "Continue"):
            return 400, error("InvalidSessionDefinition", f"jobFailurePolicy must be Abort or Continue, not {policy!r}")
        with self.lock:
            if sid not in self.sessions:
                self.sessions[sid] = dict(body, id=sid, itemType="Session", status="Waiting", jobFailurePolicy=policy,
                                          creationTime=_now(), _closed=False)
            return 200, self._public(self.sessions[sid])

    def session(self, sid: str, close: bool = False) -> tuple[int, dict]:
        with self.lock:
            s = self.sessions.get(sid)
            if s is None:
                return 404, error("SessionNotFound", f"session {sid} does not exist")
            if close and not s["_closed"]:
                s.update(_closed=True, endExecutionTime=_now(),
                         status="Failed" if s["status"] in ("Failed", "Failure(s)") else "Succeeded")
            return 200, self._public(s)

    # -- lists -------------------------------------------------------------------------
    def listing(self, kind: str, query: dict, path: str, session_id: str | None = None) -> tuple[int, dict]:
        """Jobs, sessions or top-level items, filtered (the SDK's OData subset), ordered, paged."""
        with self.lock:
            if kind == "sessions":
                items = list(self.sessions.values())
            elif kind == "topLevelItems":
                items = [j for j in self.jobs.values() if not j.get("sessionId")] + list(self.sessions.values())
            else:
                items = [j for j in self.jobs.values() if session_id is None or j.get("sessionId") == session_id]
            items = [self._public(i) for i in items]
        q = {k: v[0] for k, v in query.items()}
        items = [i for i in items if _matches(i, q.get("filter") or q.get("$filter"))]
        order = (q.get("orderby") or "").split()
        if order and order[0] in _FIELDS:
            items.sort(key=lambda i: str(i.get(_FIELDS[order[0]]) or ""), reverse=order[-1] == "desc")
        skip, top = int(q.get("skip") or 0), int(q.get("top") or 100)
        link = None
        if skip + top < len(items):
            rest = {k: v for k, v in q.items() if k not in ("skip", "top", "api-version")}
            link = f"{path}?{urlencode(dict(rest, skip=skip + top, top=top))}"
        return 200, {"value": items[skip:skip + top], "nextLink": link}

    @staticmethod
    def _public(item: dict) -> dict:
        return {k: v for k, v in item.items() if not k.startswith("_") and v is not None}


def _matches(item: dict, text: str | None) -> bool:
    """The clauses ``Workspace._create_filter`` writes: startswith, ``eq`` alternatives, dates."""
    if not text:
        return True
    while "%" in text and unquote(text) != text:  # next links may arrive quoted twice
        text = unquote(text)
    for clause in re.split(r"\s+and\s+", text):
        clause = clause.strip()
        if clause.startswith("(") and clause.endswith(")"):
            clause = clause[1:-1]
        if m := re.fullmatch(r"startswith\((\w+),\s*'(.*)'\)", clause):
            ok = str(item.get(_FIELDS.get(m.group(1), m.group(1))) or "").startswith(m.group(2))
        elif m := re.fullmatch(r"CreationTime (ge|le) (\S+)", clause):
            day = str(item.get("creationTime", ""))[:10]
            ok = day >= m.group(2) if m.group(1) == "ge" else day <= m.group(2)
        else:
            alts = re.findall(r"(\w+) eq '([^']*)'", clause)
            ok = not alts or any(str(item.get(_FIELDS.get(f, f))).lower() == v.lower() for f, v in alts)
        if not ok:
            return False
    return True
