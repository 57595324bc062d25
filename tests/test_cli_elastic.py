"""``hqflow train --resume RUN`` under another pool or distribution continues to the result of an undisturbed
run (Tenplex-style), and ``hqflow train --resources FILE`` follows a pool file mid-run (and SIGHUP)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from hqflow.cli import main
from hqflow.engine.distribution import MultiLearner
from hqflow.workloads.rl import reinforce, runner

ALGO = ["--set", "n_layers=1", "--set", "batch_episodes=4", "--set", "stop_when_solved=false", "--episodes", "24",
        "--seed", "2"]
QPU = ["--backend", "emulated-qpu", "--distribution", "sync", "--checkpoint-every", "1", "--no-tensorboard"]
FAILING = ["--backend-opt", "fail_jobs=" + json.dumps(list(range(60, 3000)))]  # every job from the 61st on fails


def _ckpt(run):
    return runner.load_run(run)[1]


def _same_run(a, b):
    x, y = _ckpt(a), _ckpt(b)
    assert x["update"] == y["update"] == 5 and x["returns"] == y["returns"]
    params = x["state"]["learn.params"]
    assert all(torch.equal(params[k], y["state"]["learn.params"][k]) for k in params)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An undisturbed run to the end, and a run whose QPU fails from its 61st job on (stopped mid-run)."""
    root = tmp_path_factory.mktemp("runs")
    assert main(["train", "cartpole", *ALGO, *QPU, "--run-dir", str(root / "whole")]) == 0
    assert main(["train", "cartpole", *ALGO, *QPU, *FAILING, "--run-dir", str(root / "stopped")]) == 1
    assert 0 <= _ckpt(root / "stopped")["update"] < 4
    return root


def _copy(runs, tmp_path):
    import shutil

    shutil.copytree(runs / "stopped", tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize("change", [
    ["--backend", "emulated-qpu", "--pool", "2"],
    ["--pool", "3", "--backend-opt", "per_job=0.001", "--backend-opt", "2:max_in_flight=2"],
    ["--backend", "emulated-qpu", "--distribution", "pipelined", "--staleness", "0"],
])
def test_resume_under_another_pool_or_distribution_ends_bit_identical(runs, tmp_path, capsys, change):
    run = _copy(runs, tmp_path)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), *change]) == 0
    assert "differ" not in capsys.readouterr().err
    _same_run(runs / "whole", run)
    meta = json.loads((run / "config.json").read_text())  # what a later --resume runs with
    log = [json.loads(line) for line in (run / "resources.jsonl").read_text().splitlines()]
    assert [e["event"] for e in log] == ["start", "resume"] and log[1]["update"] == _ckpt(runs / "stopped")["update"] + 1
    for key in ("distribution", "distribution_options", "backends"):
        assert meta[key] == log[1][key]
    if "--pool" in change:
        assert len(meta["backends"]["emulated-qpu"]) == int(change[change.index("--pool") + 1])
    if "--distribution" in change:
        assert meta["distribution"] == "pipelined" and meta["distribution_options"]["staleness"] == 0


def test_a_later_resume_takes_the_latest_settings(runs, tmp_path):
    """Resumed on a pool of two that fails too, the run stops again; a plain --resume runs on that pool (and
    stops), and one more on a healthy pool ends where the undisturbed run did."""
    run = _copy(runs, tmp_path)
    later = ["--backend-opt", "fail_jobs=" + json.dumps(list(range(5, 3000)))]
    assert main(["train", "--resume", str(run), "--pool", "2", "--backend-opt", "1:max_in_flight=2", *later]) == 1
    meta = json.loads((run / "config.json").read_text())
    assert [m[1].get("max_in_flight") for m in meta["backends"]["emulated-qpu"]] == [None, 2]
    assert main(["train", "--resume", str(run)]) == 1
    log = [json.loads(line) for line in (run / "resources.jsonl").read_text().splitlines()]
    assert [e["event"] for e in log] == ["start", "resume", "resume"] and log[2]["backends"] == meta["backends"]
    assert main(["train", "--resume", str(run), "--pool", "2"]) == 0
    _same_run(runs / "whole", run)


def test_a_change_that_cannot_keep_the_result_says_so_in_one_line(runs, tmp_path, capsys):
    run = _copy(runs, tmp_path)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--backend", "emulated-qpu", "--distribution", "pipelined",
                 "--staleness", "2", "--backend-opt", "wrapped=compiled"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hqflow:")]
    assert len(err) == 1 and "results will differ from an undisturbed run from here on" in err[0], err
    assert "staleness 2" in err[0] and "not the run's kind" in err[0]
    assert _ckpt(run)["update"] == 5


@pytest.mark.parametrize("argv, message", [
    (["--seed", "3"], "--resume continues the run's own algorithm"),
    (["--set", "n_layers=2"], "--resume continues the run's own algorithm"),
    (["--episodes", "40"], "--resume continues the run's own algorithm"),
    (["--algo", "ppo"], "--resume continues the run's own algorithm"),
    (["--learners", "2"], "--learners needs --distribution multi-learner (the run's is sync)"),
    (["--staleness", "1"], "--staleness needs --distribution pipelined"),
    (["--distribution", "magic"], "unknown distribution policy 'magic'"),
    (["--backend", "nosuch"], "nosuch"),
    (["--backend-opt", "bogus=1"], "bogus"),
    (["--backend", "compiled"], "'compiled' alone runs in process"),
    (["--resources", "/nonexistent/pool.json"], "cannot read /nonexistent/pool.json"),
])
def test_resume_usage_errors_exit_2_with_one_line(runs, capsys, argv, message):
    before = (runs / "stopped" / "config.json").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(runs / "stopped"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert (runs / "stopped" / "config.json").read_text() == before


def test_resume_from_sync_under_multi_learner_ends_equal_up_to_float64_roundoff(tmp_path):
    cfg = reinforce.Config(seed=3, max_episodes=40, batch_episodes=5, n_layers=2, stop_when_solved=False,
                           dtype="float64")
    whole = runner.train("reinforce", cfg, "sync", tensorboard=False)

    def stop(episodes, _):
        if episodes == 15:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.train("reinforce", cfg, "sync", run_dir=tmp_path / "run", progress=stop, tensorboard=False)
    assert _ckpt(tmp_path / "run")["update"] == 2
    out = runner.train(run_dir=tmp_path / "run", resume=True, tensorboard=False,
                       distribution=MultiLearner(learners=2, staleness=0, executor="local"))
    assert out["returns"] == whole["returns"] and out["distribution"] == "multi-learner"
    assert max(float((out["params"][k] - whole["params"][k]).abs().max()) for k in whole["params"]) <= 1e-8


# --- --resources ------------------------------------------------------------------------------------------

def _pool(path, *names):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump({"pools": {"qpu": [["emulated-qpu", {"per_job": 0.01, "name": n}] for n in names]}}, fh)
    os.replace(tmp, path)


def _wait(what, timeout=60):
    deadline = time.time() + timeout
    while not what():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def _lines(path):
    return path.read_text().splitlines() if path.exists() else []


def test_cli_pool_follows_the_file_and_sighup_to_an_undisturbed_result(tmp_path):
    argv = ["--set", "n_layers=1", "--set", "batch_episodes=4", "--set", "stop_when_solved=false",
            "--episodes", "48", "--seed", "1", "--distribution", "sync", "--no-tensorboard"]
    path, run = tmp_path / "pool.json", tmp_path / "run"
    _pool(path, "a", "b")
    proc = subprocess.Popen([sys.executable, "-m", "hqflow.cli", "train", "cartpole", "--resources", str(path),
                             *argv, "--run-dir", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)  # its lines as they come
    reader.start()
    try:
        _wait(lambda: len(_lines(run / "metrics.jsonl")) >= 2 or proc.poll() is not None)
        proc.send_signal(signal.SIGHUP)  # read it now: no change
        _wait(lambda: any("no change" in line for line in err) or proc.poll() is not None)
        _pool(path, "a", "b", "c")
        proc.send_signal(signal.SIGHUP)  # read it now (or the poll does)
        _wait(lambda: len(_lines(run / "resources.jsonl")) >= 2 or proc.poll() is not None)
        _pool(path, "c")  # found by polling
        proc.wait(timeout=60)
        reader.join(10)
    finally:
        proc.kill()
    err = "".join(err)
    log = [json.loads(line) for line in _lines(run / "resources.jsonl")]
    assert [(e["event"], e.get("added"), e.get("removed")) for e in log] == \
        [("start", None, None), ("change", 1, 0), ("change", 0, 2)], (log, err)
    assert log[-1]["update"] < 12  # mid-run
    said = [line for line in err.splitlines() if line.startswith("hqflow: resources:")]
    assert said[0] == f"hqflow: resources: {path} read again: no change", said  # the first SIGHUP
    changes = [line for line in said if " now " in line]
    assert changes[0] == "hqflow: resources: pool 'qpu' now 3 backends (+1, -0)", said
    assert changes[1].startswith("hqflow: resources: pool 'qpu' now 1 backend (+0, -2)") and len(changes) == 2
    cfg = reinforce.Config(seed=1, backend="qpu", max_episodes=48, batch_episodes=4, n_layers=1,
                           stop_when_solved=False)
    whole = runner.train("reinforce", cfg, "sync", tensorboard=False,
                         backends={"qpu": [("emulated-qpu", {"per_job": 0.01, "name": n}) for n in "ab"]})
    ckpt = _ckpt(run)
    assert ckpt["returns"] == whole["returns"]
    assert all(torch.equal(ckpt["state"]["learn.params"][k], whole["params"][k]) for k in whole["params"])


@pytest.mark.parametrize("pools, extra, message", [
    ({"compiled": ["compiled"]}, [], "'compiled' alone runs in process"),
    ({"a": ["emulated-qpu"], "b": ["emulated-qpu"]}, [], "names 2 pools ('a', 'b'): give --backend NAME"),
    ({"a": ["emulated-qpu"]}, ["--backend", "b"], "must name this run's one backend pool 'b'"),
    ({"a": ["emulated-qpu"]}, ["--pool", "2"], "--resources names the pool's members"),
    ({"a": ["nosuch"]}, [], "member 0 (nosuch): unknown backend"),
    ({"a": ["emulated-qpu"]}, ["--distribution", "ray-actors"], "--resources needs a distribution that runs in this"),
])
def test_resources_usage_errors_exit_2_with_one_line(tmp_path, capsys, pools, extra, message):
    path = tmp_path / "pool.json"
    path.write_text(json.dumps({"pools": pools}))
    assert main(["train", "cartpole", "--resources", str(path), *extra, "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
