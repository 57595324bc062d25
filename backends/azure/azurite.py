"""Azurite, Azure's blob storage emulator, for the loopback Azure Quantum service: find, install, run.

    exe = ensure_installed(repo_root)        # npm ci from package.json when absent; None without npm
    with Azurite.start(exe) as azurite:      # in memory, on a free port of 127.0.0.1
        azurite.connection_string
"""
from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import socket
import subprocess
import time

# Azurite's well-known development account (public, documented; it only opens the local emulator)
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_BIN = os.path.join("node_modules", ".bin", "azurite-blob")


def find(root: str | None = None) -> str | None:
    """``azurite-blob``: ``$HQFLOW_AZURITE``, ``node_modules/.bin`` under ``root`` or the current
    directory and its parents, or on PATH."""
    if os.environ.get("HQFLOW_AZURITE"):
        return os.environ["HQFLOW_AZURITE"]
    starts = [root] if root else []
    here = os.getcwd()
    while True:
        starts.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for folder in starts:
        path = os.path.join(folder, _BIN)
        if os.access(path, os.X_OK):
            return path
    return shutil.which("azurite-blob")


def ensure_installed(root: str) -> str | None:
    """``find(root)``, else ``npm ci`` in ``root`` (its package.json pins Azurite); None without npm."""
    exe = find(root)
    if exe is not None:
        return exe
    if shutil.which("npm") is None or not os.path.exists(os.path.join(root, "package.json")):
        return None
    with open(os.path.join(root, ".npm-install.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install when several processes ask at once
        try:
            if find(root) is None:
                cmd = ["npm", "ci" if os.path.exists(os.path.join(root, "package-lock.json")) else "install",
                       "--no-audit", "--no-fund", "--loglevel=error"]
                proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
                if proc.returncode != 0:
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
        exe = executable or find()
        if exe is None:
            raise RuntimeError("azurite-blob not found: run npm ci in the repository (package.json pins it)")
        port = _free_port()
        proc = subprocess.Popen([exe, "--inMemoryPersistence", "--blobHost", "127.0.0.1", "--blobPort", str(port),
                                 "--skipApiVersionCheck", "--loose", "--silent"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"Azurite exited at start ({proc.returncode}): {proc.stderr.read()[-500:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return Azurite(proc, port)
            except OSError:
                time.sleep(0.05)
        proc.kill()
        raise RuntimeError(f"Azurite did not listen on 127.0.0.1:{port} within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __enter__(self) -> Azurite:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
