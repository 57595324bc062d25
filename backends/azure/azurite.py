"""Azurite, Azure's blob storage emulator, for the loopback Azure Quantum service: find, install, run.

    exe = ensure_installed(repo_root)        # npm ci from package.json when absent; None without npm
    with Azurite.start(exe) as azurite:      # in memory, on a free port of 127.0.0.1
        azurite.connection_string
"""
from __future__ import annotations

import atexit
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import warnings

# Azurite's well-known development account (public, documented; it only opens the local emulator)
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_BIN = os.path.join("node_modules", ".bin", "azurite-blob")


def find(root: str | None = None) -> str | None:
    """``azurite-blob``: ``$HQFLOW_AZURITE``, else ``node_modules/.bin`` under ``root`` or under the
    current directory or one of its parents, else on PATH; None if nowhere."""
    if os.environ.get("HQFLOW_AZURITE"):
        return os.environ["HQFLOW_AZURITE"]
    folders = [os.path.abspath(root)] if root else []
    here = os.getcwd()
    while True:
        folders.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for folder in folders:
        path = os.path.join(folder, _BIN)
        if os.access(path, os.X_OK):
            return path
    return shutil.which("azurite-blob")


def ensure_installed(root: str) -> str | None:
    """``find(root)``, else ``npm ci`` in ``root`` (its package.json pins Azurite) and find again.

    None when npm or ``root/package.json`` is missing or the install fails (callers skip with a reason).
    Several processes asking at once install once: they wait on a lock file in the temp folder.
    """
    exe = find(root)
    if exe is not None:
        return exe
    if shutil.which("npm") is None or not os.path.exists(os.path.join(root, "package.json")):
        return None
    tag = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:12]
    with open(os.path.join(tempfile.gettempdir(), f"hqflow-npm-{tag}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if find(root) is None:  # another process may have installed it meanwhile
                ci = os.path.exists(os.path.join(root, "package-lock.json"))
                cmd = ["npm", "ci" if ci else "install", "--no-audit", "--no-fund", "--loglevel=error"]
                try:
                    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900)
                    failed = done.returncode != 0 and (done.stderr or done.stdout).strip()[-400:]
                except (OSError, subprocess.TimeoutExpired) as exc:
                    failed = str(exc)
                if failed:
                    warnings.warn(f"`{' '.join(cmd[:2])}` in {root} failed: {failed}", stacklevel=2)
                    return None
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return find(root)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Azurite:
    """A running ``azurite-blob``, in memory; ``stop()`` (or leaving the ``with``) ends it."""

    def __init__(self, proc: subprocess.Popen, port: int):
        self.proc, self.port = proc, port
        self.blob_endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
        self.connection_string = (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
                                  f"BlobEndpoint={self.blob_endpoint};")
        atexit.register(self.stop)

    @staticmethod
    def start(executable: str | None = None, timeout: float = 30.0) -> Azurite:
        """Start Azurite's blob service on a free port and wait until it accepts connections."""
        exe = executable or find()
        if exe is None:
            raise RuntimeError("azurite-blob not found: run `npm ci` in the repository (package.json pins it) "
                               "or set HQFLOW_AZURITE")
        for attempt in range(3):  # a free port can be taken by someone else before Azurite binds it
            port, log = _free_port(), tempfile.TemporaryFile()
            proc = subprocess.Popen([exe, "--inMemoryPersistence", "--blobHost", "127.0.0.1", "--blobPort", str(port),
                                     "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        return Azurite(proc, port)
                except OSError:
                    time.sleep(0.05)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"Azurite did not listen on 127.0.0.1:{port} within {timeout:.0f} s")
            log.seek(0)
            tail = log.read().decode(errors="replace").strip()[-800:]
            if "EADDRINUSE" not in tail or attempt == 2:
                raise RuntimeError(f"Azurite exited at start (exit code {proc.returncode}): {tail}")
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Kill it (again is fine)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> Azurite:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
