"""Fixtures shared by the test folders."""
import importlib.util
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Files whose tests take tens of seconds each: collected first, so that the suite's workers (pytest-xdist,
# README's test command) start them early and the short tests fill in around them, rather than one worker
# ending the run alone with a long test (the other steals the short ones queued behind it: --dist worksteal).
_SLOW_FIRST = ("tests/test_benchmarks.py", "tests/workloads/rl/test_multi_learner.py", "tests/test_examples.py",
               "tests/backends/azure/test_translate.py", "tests/workloads/rl/test_own_envs.py",
               "tests/hqflow/test_ray_cluster.py", "tests/workloads/rl/test_runner.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: k for k, name in enumerate(_SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # (stable: order kept otherwise)


def pytest_configure(config):
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # a suite started in the background (nohup ... &): the
        signal.signal(signal.SIGINT, signal.default_int_handler)  # processes the tests interrupt must take Ctrl-C
    if not hasattr(config, "workerinput"):  # once, in the process that starts the workers
        _ray_token()
        _azurite_installing()


_INSTALLING: list[threading.Thread] = []


def _azurite_installing() -> None:
    """On a fresh clone Azurite is not installed yet: ``npm ci`` (tens of seconds) starts now, beside collection
    and the first tests, instead of holding up the worker whose first Azure test needs it. It holds the install's
    lock file, so a worker that asks meanwhile (``ensure_installed``) waits for it and finds it installed."""
    try:
        from hqflow.backends.azure.azurite import ensure_installed, find
    except ImportError:
        return
    if find(str(ROOT)) is None:
        thread = threading.Thread(target=ensure_installed, args=(str(ROOT),), name="hqflow-npm-ci", daemon=True)
        thread.start()
        _INSTALLING.append(thread)


def pytest_unconfigure(config):
    for thread in _INSTALLING:  # not left half-installed
        thread.join(timeout=900)


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


@pytest.fixture(scope="session", autouse=True)
def _ray_stopped_at_the_end():
    """This worker's Ray, whoever started it (shared_ray, or an hqflow run), stopped when its tests end, not left
    to the exit."""
    yield
    if "ray" in sys.modules:
        sys.modules["ray"].shutdown()


@pytest.fixture
def shared_ray(_ray_stopped_at_the_end):
    """This worker's one local Ray, shared by its tests that run Ray in this process: started on 127.0.0.1 the
    way hqflow starts one of its own (2 CPUs, no dashboard, workers at this process's priority and with its import
    path), at the first such test, and again after a test that stopped it (test_ray_cluster.py connects to a
    cluster instead). hqflow's runs find it running and use it."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        paths = [os.path.abspath(p or os.curdir) for p in sys.path]  # this process's, as hqflow gives its workers
        extra = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
        python_path = os.pathsep.join(dict.fromkeys([p for p in paths if os.path.isdir(p)] + extra))
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 _node_ip_address="127.0.0.1", _system_config={"worker_niceness": 0},
                 runtime_env={"env_vars": {"PYTHONPATH": python_path}})
    return ray


@pytest.fixture(autouse=True)
def _shared_ray_for_ray_tests(request):
    """A test marked ``ray`` gets ``shared_ray``, unless it is also marked ``own_ray`` (it starts a Ray of its own,
    a cluster or in a subprocess, and needs none here)."""
    if request.node.get_closest_marker("ray") is not None and request.node.get_closest_marker("own_ray") is None:
        request.getfixturevalue("shared_ray")


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


# Azure Quantum over real HTTP, on 127.0.0.1: one Azurite (blob storage) and one loopback job service on it per
# test worker, for the Azure tests (tests/backends/azure) and the azure_loopback benchmark's run alike.
@pytest.fixture(scope="session")
def azurite():
    pytest.importorskip("azure.storage.blob", reason="needs the azure extra: pip install 'hqflow[azure]'")
    from hqflow.backends.azure.azurite import Azurite, ensure_installed

    exe = ensure_installed(str(ROOT))
    if exe is None:
        pytest.skip("Azurite is not installed and could not be: needs node and npm (then `npm ci` in the "
                    "repository), or HQFLOW_AZURITE pointing at azurite-blob")
    server = Azurite.start(exe)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azure_service(azurite):
    pytest.importorskip("azure.quantum", reason="needs the azure extra: pip install 'hqflow[azure]'")
    from hqflow.backends.azure.loopback import LoopbackService

    svc = LoopbackService.start(storage=azurite.connection_string, key="loopback-test-key-" + secrets.token_hex(8))
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture
def hqflow_cli(capsys, monkeypatch, tmp_path):
    """``hqflow_cli(*argv) -> CompletedProcess``: ``hqflow ARGV`` through ``hqflow.cli.main`` in this process, in
    ``tmp_path``: its return value the exit status (``python -m hqflow.cli`` exits with it; argparse's own exit is
    caught), stdout and stderr as the process would print them (Python's warnings too). No fresh interpreter
    (seconds of imports each): a test of a signal, a kill or of what a fresh process sees (a Ray it starts, a
    package on its PYTHONPATH) keeps its subprocess."""
    from hqflow.cli import main

    monkeypatch.setattr(sys, "path", list(sys.path))  # `train` puts the working folder on it, as `python -m` would
    monkeypatch.chdir(tmp_path)  # what a run writes by default (runs/...) goes there

    def run(*argv) -> subprocess.CompletedProcess:
        argv = [str(a) for a in argv]
        capsys.readouterr()
        with warnings.catch_warnings(record=True) as caught:  # on stderr, as a fresh interpreter shows them
            warnings.resetwarnings()
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)  # Python's default filters (no code runs as __main__)
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse: --help (0) and its own usage errors (2)
                code = exc.code
        out, err = capsys.readouterr()
        err += "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught)
        return subprocess.CompletedProcess(["hqflow", *argv], code, out, err)

    return run


_BENCHMARKS: dict = {}


@pytest.fixture
def benchmark(capsys, monkeypatch, tmp_path):
    """``benchmark(script, *argv, **kwargs) -> figures``: ``benchmarks/SCRIPT``'s ``main(argv, **kwargs)`` in this
    process, in ``tmp_path``; it must return 0 (or None) and print one JSON object last, which is returned. Torch's
    thread count and the signal handlers are as they were after it (the benchmarks set one thread; simulators.py
    takes SIGTERM). A script that stubs hqflow's functions, starts a Ray cluster of its own or caps its process's
    memory runs in a subprocess instead."""
    import torch

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # the scripts import their neighbours (_circuits, ...)
    monkeypatch.chdir(tmp_path)

    def run(script: str, *argv, **kwargs) -> dict:
        if script not in _BENCHMARKS:  # once per process, under a name of its own (not __main__)
            spec = importlib.util.spec_from_file_location(f"bench_{script[:-3]}", ROOT / "benchmarks" / script)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # fragments name their functions by module
            spec.loader.exec_module(module)
            _BENCHMARKS[script] = module
        threads, term = torch.get_num_threads(), signal.getsignal(signal.SIGTERM)
        capsys.readouterr()
        try:
            code = _BENCHMARKS[script].main([str(a) for a in argv], **kwargs)
        finally:
            torch.set_num_threads(threads)
            signal.signal(signal.SIGTERM, term)
        out, err = capsys.readouterr()
        assert code in (0, None), err[-2000:]
        return json.loads(out.strip().splitlines()[-1])

    return run
