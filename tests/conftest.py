"""Fixtures shared by the test folders."""
import os
import signal
import subprocess
import threading
import time

import pytest


def _ray_pids(title: str, driver: int) -> list[int]:
    """Ray worker processes titled ``title...`` (Ray names an actor's process ray::Class.method) under the
    raylet that process ``driver`` started: not another run's. ``-ww``: ps cuts lines to 80 columns here."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    rows = [(int(r[0]), int(r[1]), r[2] if len(r) > 2 else "") for r in (line.split(None, 2) for line in out.splitlines())]
    raylets = {pid for pid, ppid, args in rows if ppid == driver and "raylet" in args.split(" ", 1)[0]}
    return [pid for pid, ppid, args in rows if ppid in raylets and args.startswith(title)]


@pytest.fixture
def kill_ray_process():
    """``kill_ray_process(title, after=0, driver=this process)`` starts a thread that SIGKILLs (as the OOM
    killer does) the first Ray worker titled ``title`` seen ``after`` seconds on; ``thread.killed`` lists it."""
    threads = []

    def start(title: str, after: float = 0.0, driver: int | None = None) -> threading.Thread:
        killed: list[int] = []
        stop = threading.Event()

        def watch():
            if stop.wait(after):
                return
            deadline = time.time() + 120
            while time.time() < deadline and not killed and not stop.is_set():
                for pid in _ray_pids(title, driver or os.getpid()):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
                stop.wait(0.01)

        thread = threading.Thread(target=watch, daemon=True)
        thread.killed, thread.stop = killed, stop
        thread.start()
        threads.append(thread)
        return thread

    yield start
    for thread in threads:
        thread.stop.set()
        thread.join()
