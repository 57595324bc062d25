"""A loopback Azure Quantum job service on 127.0.0.1, for tests and benchmarks.

It speaks the REST calls the azure-quantum SDK makes (jobs, sessions, storage SAS URIs,
provider status, quotas; state in ``loopback_state``), keeps its blobs in Azurite, runs
circuits on hqflow's reference simulator (``loopback_run``) and injects faults: failed, slow (queued
longer) and hung (running until cancelled) jobs, HTTP 429 and 503 answers, expired SAS URIs and dropped
connections. It runs in its own process, so it never
shares the client's interpreter lock:

    with Azurite.start() as azurite, LoopbackService.start(storage=azurite.connection_string,
                                                           key="secret") as svc:
        ws = Workspace(**..., credential=AzureKeyCredential(key), _quantum_endpoint=svc.endpoint)
        svc.configure(latency=0.2, job_failure=0.2)   # queue wait, faults, any time
        svc.stats()                                   # jobs, cancelled, left running, runs per job id, ...

    python -m hqflow.backends.azure.loopback --storage CONNSTR --key KEY   # prints its endpoint

A PUT of an existing job id returns that job and never runs it again, as the service
does (with ``rerun_puts=1``, it runs it again: a stand-in for a service that does, against which a client's
blind repeat of a PUT shows); ``stats()["duplicated"]`` counts job ids that ran more than once and
``stats()["repeated_puts"]`` the PUTs of an id that existed. ``lost_put`` drops the answer to a job's PUT
after the job was created. Requests are never
logged, so the API key never reaches the output.
"""
from __future__ import annotations

import argparse
import atexit
import collections
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from .loopback_state import FAULTS, TARGETS, Service, error as _error

__all__ = ["FAULTS", "TARGETS", "LoopbackService", "Service", "main", "serve"]

# every Azure route sits under a workspace: any subscription, group and name will do
_WS = re.compile(r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Quantum/workspaces/[^/]+/(.*)$",
                 re.I)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    service: Service = None  # set on a subclass by serve()

    def log_message(self, *args) -> None:  # no access log: requests (and their key) are never printed
        pass

    def _send(self, status: int, body=None, headers=None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if body is not None:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(2)
        except OSError:
            pass

    def _handle(self, method: str) -> None:
        try:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            url = urlparse(self.path)
            if url.path.startswith("/_loopback/"):
                return self._admin(method, url.path, raw)
            self._azure(method, url, raw)
        except OSError:
            self.close_connection = True  # the client went away
        except Exception as exc:  # noqa: BLE001 (an answer, never a traceback)
            print(f"loopback: {method} {urlparse(self.path).path}: {type(exc).__name__}: {exc}", file=sys.stderr)
            try:
                self._send(500, _error("InternalError", f"{type(exc).__name__}: {exc}"))
            except OSError:
                self.close_connection = True

    def _azure(self, method: str, url, raw: bytes) -> None:
        svc, m = self.service, _WS.match(url.path)
        if m is None:
            return self._send(404, _error("NotFound", f"no route {url.path}"))
        if self.headers.get("x-ms-quantum-api-key") != svc.key:
            return self._send(401, _error("Unauthorized", "the x-ms-quantum-api-key header is missing or wrong"))
        with svc.lock:
            svc.requests += 1
        if svc.fault("http_503"):
            return self._send(503, _error("ServiceUnavailable", "injected fault: try again"))
        if svc.fault("http_429"):
            return self._send(429, _error("TooManyRequests", "injected fault: slow down"), {"Retry-After": "0"})
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return self._send(400, _error("InvalidRequestContent", "the body is not JSON"))
        rest = m.group(1)
        creates = method == "PUT" and re.fullmatch(r"jobs/[^/:]+", rest)
        dropping = svc.fault("drop_connection") or bool(creates and svc.fault("lost_put"))
        if dropping and not creates:
            return self._drop()  # before acting
        status, out = self._route(method, rest, body, parse_qs(url.query), url.path)
        if dropping:
            return self._drop()  # the job exists now, but its answer is lost
        self._send(status, out)

    def _route(self, method: str, rest: str, body: dict, query: dict, path: str) -> tuple[int, dict | None]:
        svc = self.service
        if rest == "storage/sasUri" and method == "POST":
            try:
                return 200, {"sasUri": svc.sas_uri(body.get("containerName"), body.get("blobName"))}
            except ValueError as exc:
                return 400, _error("InvalidContainerName", str(exc))
        if rest == "providerStatus" and method == "GET":
            return 200, {"value": [{"id": p, "currentAvailability": "Available", "targets": [
                {"id": t, "currentAvailability": "Available", "averageQueueTime": 0, "numQubits": n,
                 "statusPage": "http://127.0.0.1/status"} for t, n in ts.items()]} for p, ts in TARGETS.items()],
                "nextLink": None}
        if rest in ("quotas", "quotaUsages") and method == "GET":
            return 200, {"value": [], "nextLink": None}
        if rest in ("jobs", "sessions", "topLevelItems") and method == "GET":
            return svc.listing(rest, query, path)
        if m := re.fullmatch(r"jobs/([^/:]+)(:cancel)?", rest):
            job_id, cancel = m.groups()
            if method == "PUT" and not cancel:
                return svc.create_job(job_id, body)
            if method == "GET" and not cancel:
                return svc.get_job(job_id)
            if method == "PATCH" and not cancel:
                return svc.update_job(job_id, body)
            if (method == "POST" and cancel) or (method == "DELETE" and not cancel):
                return svc.cancel_job(job_id)
        if m := re.fullmatch(r"sessions/([^/:]+)(:close|/jobs)?", rest):
            sid, tail = m.groups()
            if method == "PUT" and not tail:
                return svc.open_session(sid, body)
            if method == "GET" and tail == "/jobs":
                return svc.session(sid) if sid not in svc.sessions else svc.listing("jobs", query, path, sid)
            if (method == "POST" and tail == ":close") or (method == "GET" and not tail):
                return svc.session(sid, close=bool(tail))
        return 404, _error("NotFound", f"no route {method} {rest}")

    def _admin(self, method: str, path: str, raw: bytes) -> None:
        svc = self.service
        if path == "/_loopback/stats" and method == "GET":
            return self._send(200, svc.stats())
        if path == "/_loopback/config" and method == "POST":
            try:
                svc.configure(**json.loads(raw or b"{}"))
            except (TypeError, ValueError) as exc:
                return self._send(400, _error("BadConfig", str(exc)))
            return self._send(200, svc.stats())
        self._send(404, _error("NotFound", f"no admin route {method} {path}"))

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


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # a burst of connections from many client threads
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """One line, not a traceback; a client that hung up is not worth one."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            print(f"loopback: {type(exc).__name__}: {exc}", file=sys.stderr)


def serve(storage: str, key: str, port: int = 0, seed: int = 0) -> ThreadingHTTPServer:
    """The HTTP server (not yet serving) on 127.0.0.1:``port`` (0: a free one)."""
    handler = type("Handler", (_Handler,), {"service": Service(storage, key, seed)})
    return _Server(("127.0.0.1", port), handler)


class LoopbackService:
    """A handle on the service running in its own process."""

    WORKSPACE = {"subscription_id": "00000000-0000-0000-0000-000000000001", "resource_group": "loopback-rg",
                 "name": "loopback-ws", "location": "westus"}

    def __init__(self, proc: subprocess.Popen, endpoint: str, key: str, output: collections.deque):
        self.proc, self.endpoint, self._key, self._output = proc, endpoint, key, output

    @staticmethod
    def start(storage: str, key: str, latency: float = 0.0, seed: int = 0, timeout: float = 60.0) -> LoopbackService:
        """Start ``python -m hqflow.backends.azure.loopback`` and wait for its endpoint."""
        env = dict(os.environ, HQFLOW_LOOPBACK_KEY=key)  # not on the command line, where ps shows it
        proc = subprocess.Popen([sys.executable, "-m", "hqflow.backends.azure.loopback", "--storage", storage,
                                 "--seed", str(seed), "--latency", str(latency), "--parent-pid", str(os.getpid())],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        output: collections.deque = collections.deque(maxlen=2000)
        ready = threading.Event()

        def drain():  # keeps the pipe from filling; the first http:// line is the endpoint
            for line in proc.stdout:
                output.append(line)
                if line.startswith("http://"):
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True, name="loopback-output").start()
        ready.wait(timeout)
        endpoint = next((line.strip() for line in output if line.startswith("http://")), None)
        if endpoint is None:
            proc.kill()
            raise RuntimeError("the loopback service did not start: " + "".join(output)[-1500:])
        svc = LoopbackService(proc, endpoint, key, output)
        atexit.register(svc.stop)
        return svc

    def workspace_options(self) -> dict:
        """Keyword arguments for a workspace on this service (``key`` is the API key)."""
        return dict(self.WORKSPACE, endpoint=self.endpoint, key=self._key)

    def _admin(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.endpoint.rstrip("/") + path, data=data, method="POST" if data else "GET",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise ValueError(json.loads(exc.read()).get("error", {}).get("message", str(exc))) from None

    def configure(self, **settings) -> dict:
        """Change ``latency`` (seconds a job waits in the queue), ``run_seconds`` (seconds it then runs),
        ``slow_seconds`` (a slow job's extra wait), ``seed`` and fault probabilities (others keep their
        values); ``reset=True`` first zeroes them all and clears jobs, sessions and counters."""
        return self._admin("/_loopback/config", settings)

    def stats(self) -> dict:
        """jobs (created), executions, duplicated (ids run twice), reruns (inputs that succeeded twice),
        by_status, left (still Waiting or Executing), cancelled_waiting, cancelled_executing, faults,
        requests, runs (per job id), sessions, settings."""
        return self._admin("/_loopback/stats")

    def output(self) -> str:
        """What the service printed (stdout and stderr, the last 2000 lines)."""
        return "".join(self._output)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> LoopbackService:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _exit_with(parent: int) -> None:
    """End this process when ``parent`` is gone (a killed test run leaves no service behind)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="A loopback Azure Quantum job service (prints its endpoint).")
    ap.add_argument("--storage", required=True, help="the blob storage connection string (Azurite's)")
    ap.add_argument("--key", help="the API key clients must send (default: $HQFLOW_LOOPBACK_KEY)")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds each job takes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    key = args.key or os.environ.get("HQFLOW_LOOPBACK_KEY")
    if not key:
        ap.error("give --key or set HQFLOW_LOOPBACK_KEY")
    try:
        server = serve(args.storage, key, args.port, args.seed)
    except ValueError as exc:
        ap.error(str(exc))
    server.RequestHandlerClass.service.configure(latency=args.latency)
    if args.parent_pid:
        threading.Thread(target=_exit_with, args=(args.parent_pid,), daemon=True).start()
    print(f"http://127.0.0.1:{server.server_address[1]}/", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
