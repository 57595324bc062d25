"""Fixtures shared by the test folders."""
import os
import signal
import subprocess
import threading
import time

import pytest

# Files whose tests take tens of seconds each: collected first, so that the suite's workers (pytest-xdist,
# README's test command) start them early and the short tests fill in around them, rather than one worker
# ending the run alone with a long test.
_SLOW_FIRST = ("tests/test_benchmarks.py", "tests/workloads/rl/test_multi_learner.py", "tests/test_examples.py",
               "tests/workloads/rl/test_own_envs.py", "tests/hqflow/test_ray_cluster.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: k for k, name in enumerate(_SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # (stable: order kept otherwise)


def pytest_configure(config):
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # a suite started in the background (nohup ... &): the
        signal.signal(signal.SIGINT, signal.default_int_handler)  # processes the tests interrupt must take Ctrl-C
    if not hasattr(config, "workerinput"):  # once, in the process that starts the workers
        _ray_token()


def _ray_token() -> None:
    """Ray turns token authentication on for a local cluster and writes ~/.ray/auth_token the first time one
    starts; two test workers starting their first Ray at once would each write one. Write it first."""
    try:
        from ray._private.authentication.authentication_token_setup import (_get_default_token_path,
                                                                             generate_and_save_token)
    except ImportError:  # another Ray: it does without
        return
    try:
        if not _get_default_token_path().exists():
            generate_and_save_token()
    except OSError:
        pass  # a home folder that cannot be written: Ray says so itself when it starts


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
