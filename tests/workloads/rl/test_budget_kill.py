"""A priced run under a budget, SIGKILLed at several moments and resumed each time: across all its processes the
backend is never given more than the budget (issue 34, item 29). The ledger is written before each job is
submitted (``RUN_DIR/ledger.jsonl``), so a resumed run counts what the killed one paid, its jobs in flight too.
Real processes: what a kill leaves is the point."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).with_name("priced_run.py")
ROOT = Path(__file__).resolve().parents[3]


def _start(run, given, budget, *resume):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, str(SCRIPT), str(run), str(given), str(budget), *resume], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _jobs(given: Path) -> list[float]:
    return [float(x) for x in given.read_text().split()] if given.exists() else []


def test_a_budget_holds_across_killed_and_resumed_processes(tmp_path):
    run, given, budget = tmp_path / "run", tmp_path / "given.txt", 250_000.0
    for k, jobs_before_kill in enumerate((12, 30, 55)):  # three kills, each at a later moment
        proc = _start(run, given, budget, *(["resume"] if k else []))
        deadline = time.time() + 180
        while len(_jobs(given)) < jobs_before_kill and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, f"the run ended before its kill: {proc.stderr.read()}"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    final = _start(run, given, budget, "resume")
    assert final.wait(timeout=300) == 3, final.stderr.read()  # it ends at the budget, in one line
    given_in_all = sum(_jobs(given))
    assert given_in_all <= budget + 1e-6, f"the backend was given {given_in_all:,.2f} against {budget:,.2f}"
    assert given_in_all > budget - 30_000  # it did spend up to about the budget: the test measured something
