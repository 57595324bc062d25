"""A loopback Azure Quantum job service on 127.0.0.1, for tests and benchmarks.

It speaks the REST calls the azure-quantum SDK makes (jobs, sessions, storage SAS
URIs, provider status), keeps its blobs in Azurite, runs circuits on hqflow's
reference simulator (``loopback_run``) and injects faults: failed and slow jobs,
HTTP 429 and 503 answers, expired SAS URIs and dropped connections. It runs in its
own process, so it never shares the client's interpreter lock:

    with Azurite.start() as azurite, LoopbackService.start(storage=azurite.connection_string,
                                                           key="secret") as svc:
        backend = get_backend("azure:ionq.simulator", **svc.workspace_options())
        svc.configure(latency=0.2, job_failure=0.2)      # faults and delays, any time
        svc.stats()                                      # jobs, runs per job id, faults, ...

    python -m hqflow.backends.azure.loopback --storage CONNSTR --key KEY   # prints its endpoint

A PUT of an existing job id returns that job and never runs it again, as the
service does; ``stats()["duplicated"]`` counts job ids that ran more than once.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import numpy as np

TARGETS = {"ionq": ["ionq.simulator", "ionq.qpu.aria-1", "ionq.qpu.forte-1"],
           "quantinuum": ["quantinuum.sim.h2-1sc", "quantinuum.sim.h2-1e", "quantinuum.qpu.h2-1"],
           "rigetti": ["rigetti.sim.qvm", "rigetti.qpu.ankaa-3"]}
FAULTS = ("job_failure", "http_503", "http_429", "slow_job", "expired_sas", "drop_connection")
_WS = re.compile(r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Quantum/workspaces/[^/]+/(.*)$",
                 re.I)
_TERMINAL = ("Succeeded", "Failed", "Cancelled")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")


class Service:
    """The state: jobs, sessions, faults, counters. Thread-safe."""

    def __init__(self, storage: str, key: str, seed: int = 0):
        from azure.storage.blob import BlobServiceClient

        self.blobs = BlobServiceClient.from_connection_string(storage)
        self.account_key = re.search(r"AccountKey=([^;]+)", storage).group(1)
        self.key, self.lock = key, threading.Lock()
        self.pool = cf.ThreadPoolExecutor(128, thread_name_prefix="loopback-job")
        self.configure(reset=True, seed=seed)

    def configure(self, reset: bool = False, **kw) -> None:
        with self.lock:
            if reset:
                self.settings = {"latency": 0.0, "slow_seconds": 2.0, "seed": kw.get("seed", 0),
                                 **{f: 0.0 for f in FAULTS}}
                self.jobs, self.sessions, self.runs = {}, {}, {}
                self.faults = {f: 0 for f in FAULTS}
                self.requests = 0
            unknown = set(kw) - set(self.settings) - {"reset"}
            if unknown:
                raise ValueError(f"unknown setting(s) {sorted(unknown)}")
            self.settings.update(kw)
            self.rng = np.random.default_rng(int(self.settings["seed"]))

    def fault(self, name: str) -> bool:
        with self.lock:
            hit = self.settings[name] > 0 and self.rng.random() < self.settings[name]
            if hit:
                self.faults[name] += 1
            return hit

    def stats(self) -> dict:
        with self.lock:
            by_status: dict = {}
            for j in self.jobs.values():
                by_status[j["status"]] = by_status.get(j["status"], 0) + 1
            return {"jobs": len(self.jobs), "executions": sum(self.runs.values()),
                    "duplicated": sum(1 for c in self.runs.values() if c > 1), "by_status": by_status,
                    "faults": dict(self.faults), "requests": self.requests, "runs": dict(self.runs),
                    "sessions": {k: s["status"] for k, s in self.sessions.items()}}

    # -- storage -----------------------------------------------------------------------
    def sas_uri(self, container: str, blob: str | None) -> str:
        from azure.storage.blob import (BlobSasPermissions, ContainerSasPermissions, generate_blob_sas,
                                        generate_container_sas)

        client = self.blobs.get_container_client(container)
        try:
            client.create_container()
        except Exception:
            pass  # it exists
        expired = self.fault("expired_sas")
        expiry = dt.datetime.now(dt.timezone.utc) + (dt.timedelta(hours=-1) if expired else dt.timedelta(hours=2))
        account = self.blobs.account_name
        if blob:
            sas = generate_blob_sas(account, container, blob, account_key=self.account_key, expiry=expiry,
                                    permission=BlobSasPermissions(read=True, write=True, create=True))
            return f"{client.url}/{blob}?{sas}"
        sas = generate_container_sas(account, container, account_key=self.account_key, expiry=expiry,
                                     permission=ContainerSasPermissions(read=True, write=True, create=True,
                                                                        list=True, add=True))
        return f"{client.url}?{sas}"

    def _blob(self, uri: str):
        path = urlparse(uri).path.split("/")  # /account/container/blob...
        return self.blobs.get_blob_client(path[2], "/".join(path[3:]))

    # -- jobs --------------------------------------------------------------------------
    def create_job(self, job_id: str, body: dict) -> tuple[int, dict]:
        target = body.get("target")
        if not any(target in ts for ts in TARGETS.values()):
            return 400, _error("InvalidJobDefinition", f"target {target!r} is not available in this workspace")
        with self.lock:
            if job_id in self.jobs:
                return 200, dict(self.jobs[job_id])
            sid = body.get("sessionId")
            if sid:
                session = self.sessions.get(sid)
                if session is None:
                    return 400, _error("SessionNotFound", f"session {sid} does not exist")
                if session["status"] in ("Succeeded", "Failed", "Failure(s)", "TimedOut"):
                    return 400, _error("SessionTerminated", f"session {sid} is {session['status']}; "
                                                            "it takes no more jobs")
            job = dict(body, id=job_id, status="Waiting", creationTime=_now(), itemType="Job")
            self.jobs[job_id] = job
        self.pool.submit(self._execute, job_id)
        return 201, dict(job)

    def _execute(self, job_id: str) -> None:
        from . import loopback_run

        with self.lock:
            latency = self.settings["latency"]
        if self.fault("slow_job"):
            latency += self.settings["slow_seconds"]
        time.sleep(latency)
        with self.lock:
            job = self.jobs[job_id]
            if job["status"] != "Waiting":
                return  # cancelled
            job.update(status="Executing", beginExecutionTime=_now())
            self.runs[job_id] = self.runs.get(job_id, 0) + 1
        try:
            if self.fault("job_failure"):
                raise loopback_run.BadInput("injected failure: the device reported an error")
            data = self._blob(job["inputDataUri"]).download_blob().readall()
            params = job.get("inputParams") or {}
            shots = int(params.get("shots", params.get("count", 100)))
            seed = int.from_bytes(hashlib.sha256(f"{self.settings['seed']}|{job_id}".encode()).digest()[:8], "big")
            out = loopback_run.run(job.get("inputDataFormat"), data, job["target"], shots,
                                   np.random.default_rng(seed))
            container = urlparse(job["containerUri"]).path.split("/")[2]
            blob = self.blobs.get_blob_client(container, "rawOutputData")
            blob.upload_blob(json.dumps(out).encode(), overwrite=True)
            update = {"status": "Succeeded", "outputDataUri": blob.url}
        except Exception as exc:
            code = "InvalidInputData" if type(exc).__name__ == "BadInput" else "ExecutionFailed"
            update = {"status": "Failed", "errorData": {"code": code, "message": str(exc)[:300]}}
        with self.lock:
            job.update(update, endExecutionTime=_now())
            sid = job.get("sessionId")
            if update["status"] == "Failed" and sid in self.sessions:
                s = self.sessions[sid]
                s["status"] = "Failed" if s.get("jobFailurePolicy", "Abort") == "Abort" else "Failure(s)"

    def cancel_job(self, job_id: str) -> tuple[int, dict | None]:
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                return 404, _error("JobNotFound", f"job {job_id} does not exist")
            if job["status"] not in _TERMINAL:
                job.update(status="Cancelled", endExecutionTime=_now())
            return 204, None

    def get_job(self, job_id: str) -> tuple[int, dict]:
        with self.lock:
            job = self.jobs.get(job_id)
            return (200, dict(job)) if job else (404, _error("JobNotFound", f"job {job_id} does not exist"))


def _error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    service: Service = None  # set on the class by serve()

    def log_message(self, *args) -> None:  # no access log: it would be noise (and never the key)
        pass

    def _send(self, status: int, body=None, headers=None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(2)
        except OSError:
            pass

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def _handle(self, method: str) -> None:
        svc, url = self.service, urlparse(self.path)
        if url.path.startswith("/_loopback/"):
            return self._admin(method, url.path)
        body = self._body()
        m = _WS.match(url.path)
        if m is None:
            return self._send(404, _error("NotFound", f"no route {url.path}"))
        if self.headers.get("x-ms-quantum-api-key") != svc.key:
            return self._send(401, _error("Unauthorized", "the API key is missing or wrong"))
        with svc.lock:
            svc.requests += 1
        if svc.fault("http_503"):
            return self._send(503, _error("ServiceUnavailable", "injected: try again"), {"Retry-After": "0"})
        if svc.fault("http_429"):
            return self._send(429, _error("TooManyRequests", "injected: slow down"), {"Retry-After": "0"})
        rest = m.group(1)
        dropping = svc.fault("drop_connection")
        if dropping and not (method == "PUT" and rest.startswith("jobs/")):
            return self._drop()  # before acting
        status, out = self._route(method, rest, body)
        if dropping:
            return self._drop()  # acted (a job was created), but the answer is lost
        self._send(status, out)

    def _route(self, method: str, rest: str, body: dict) -> tuple[int, dict | None]:
        svc = self.service
        if rest == "storage/sasUri" and method == "POST":
            return 200, {"sasUri": svc.sas_uri(body.get("containerName"), body.get("blobName"))}
        if rest == "providerStatus" and method == "GET":
            return 200, {"value": [{"id": p, "currentAvailability": "Available",
                                    "targets": [{"id": t, "currentAvailability": "Available", "averageQueueTime": 0,
                                                 "statusPage": "http://127.0.0.1/status"} for t in ts]}
                                   for p, ts in TARGETS.items()], "nextLink": None}
        if rest in ("quotas", "quotaUsages") and method == "GET":
            return 200, {"value": [], "nextLink": None}
        if rest == "jobs" and method == "GET":
            with svc.lock:
                return 200, {"value": [dict(j) for j in svc.jobs.values()], "nextLink": None}
        m = re.match(r"^jobs/([^/:]+)(:cancel)?$", rest)
        if m:
            job_id, cancel = m.groups()
            if method == "PUT" and not cancel:
                return svc.create_job(job_id, body)
            if method == "GET" and not cancel:
                return svc.get_job(job_id)
            if (method == "POST" and cancel) or method == "DELETE":
                return svc.cancel_job(job_id)
        m = re.match(r"^sessions/([^/:]+)(:close|/jobs)?$", rest)
        if m:
            sid, tail = m.groups()
            with svc.lock:
                session = svc.sessions.get(sid)
                if method == "PUT" and not tail:
                    if session is None:
                        session = svc.sessions[sid] = dict(body, id=sid, status="Executing", itemType="Session",
                                                           creationTime=_now())
                    return 200, dict(session)
                if session is None:
                    return 404, _error("SessionNotFound", f"session {sid} does not exist")
                if method == "POST" and tail == ":close":
                    if session["status"] not in ("Failed", "Failure(s)"):
                        session["status"] = "Succeeded"
                    return 200, dict(session)
                if method == "GET" and tail == "/jobs":
                    return 200, {"value": [dict(j) for j in svc.jobs.values() if j.get("sessionId") == sid],
                                 "nextLink": None}
                if method == "GET":
                    return 200, dict(session)
        return 404, _error("NotFound", f"no route {method} {rest}")

    def _admin(self, method: str, path: str) -> None:
        svc = self.service
        if path == "/_loopback/stats" and method == "GET":
            return self._send(200, svc.stats())
        if path == "/_loopback/config" and method == "POST":
            try:
                svc.configure(**self._body())
            except (TypeError, ValueError) as exc:
                return self._send(400, _error("BadConfig", str(exc)))
            return self._send(200, svc.stats())
        self._send(404, _error("NotFound", path))

    def do_GET(self):  # noqa: N802 (http.server's names)
        self._handle("GET")

    def do_PUT(self):  # noqa: N802
        self._handle("PUT")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")

    def do_PATCH(self):  # noqa: N802
        self._handle("PATCH")


def serve(storage: str, key: str, port: int = 0, seed: int = 0) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"service": Service(storage, key, seed)})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server


class LoopbackService:
    """A handle on the service running in a subprocess."""

    WORKSPACE = {"subscription_id": "00000000-0000-0000-0000-000000000001", "resource_group": "loopback-rg",
                 "name": "loopback-ws", "location": "westus"}

    def __init__(self, proc: subprocess.Popen, endpoint: str, key: str):
        self.proc, self.endpoint, self._key = proc, endpoint, key

    @staticmethod
    def start(storage: str, key: str, latency: float = 0.0, seed: int = 0, timeout: float = 60.0) -> LoopbackService:
        env = dict(os.environ, HQFLOW_LOOPBACK_KEY=key)  # not on the command line, where ps shows it
        proc = subprocess.Popen([sys.executable, "-m", "hqflow.backends.azure.loopback", "--storage", storage,
                                 "--seed", str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        line = proc.stdout.readline().strip()
        if not line.startswith("http://"):
            proc.kill()
            raise RuntimeError(f"the loopback service did not start: {line} {proc.stderr.read()[-800:]}")
        svc = LoopbackService(proc, line, key)
        if latency:
            svc.configure(latency=latency)
        return svc

    def workspace_options(self) -> dict:
        return dict(self.WORKSPACE, endpoint=self.endpoint, key=self._key)

    def _admin(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.endpoint.rstrip("/") + path, data=data, method="POST" if data else "GET",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def configure(self, **settings) -> dict:
        return self._admin("/_loopback/config", settings)

    def stats(self) -> dict:
        return self._admin("/_loopback/stats")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> LoopbackService:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="A loopback Azure Quantum job service (prints its endpoint).")
    ap.add_argument("--storage", required=True, help="the blob storage connection string (Azurite's)")
    ap.add_argument("--key", help="the API key clients must send (default: $HQFLOW_LOOPBACK_KEY)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    key = args.key or os.environ.get("HQFLOW_LOOPBACK_KEY")
    if not key:
        ap.error("give --key or set HQFLOW_LOOPBACK_KEY")
    server = serve(args.storage, key, args.port, args.seed)
    print(f"http://127.0.0.1:{server.server_address[1]}/", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
