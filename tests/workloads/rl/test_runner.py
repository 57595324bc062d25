"""The RL runner: the algorithm as fragments under distribution policies, run directories, kill and resume."""
import json
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from hqflow.engine.distribution import Pipelined, Sync, get_distribution
from hqflow.workloads.rl import reinforce, runner

SMALL = reinforce.Config(n_layers=2, batch_episodes=4, max_episodes=24, seed=3)


def _same_params(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_sync_and_pipelined_staleness_0_are_identical():
    sync = runner.train("reinforce", SMALL, "sync")
    piped = runner.train("reinforce", SMALL, Pipelined(staleness=0))
    assert sync["returns"] == piped["returns"]
    assert len(sync["returns"]) == 24
    assert _same_params(sync["params"], piped["params"])


def test_pipelined_with_staleness_runs_actors_ahead():
    out = runner.train("reinforce", SMALL, Pipelined(staleness=2))
    assert len(out["returns"]) == 24
    rollouts = [s for s in out["spans"] if s.fragment == "rollout"]
    learns = [s for s in out["spans"] if s.fragment == "learn"]
    # some rollout ran on parameters older than the newest possible (version < step)
    assert any(s.version < s.step for s in rollouts)
    assert len(learns) == 6


def test_distribution_policies_are_validated():
    assert get_distribution("sync") == Sync()
    assert get_distribution("pipelined", staleness=3).staleness == 3
    with pytest.raises(ValueError, match="unknown distribution policy 'bogus'"):
        get_distribution("bogus")
    with pytest.raises(ValueError, match="staleness must be an integer >= 0"):
        get_distribution("pipelined", staleness=-1)
    with pytest.raises(ValueError, match="takes"):
        get_distribution("sync", staleness=1)


def test_run_directory_contents(tmp_path):
    out = runner.train("reinforce", SMALL, "sync", run_dir=tmp_path / "run", checkpoint_every=2)
    run = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "checkpoint.pt", "learning_curve.png", "spans.json", "trace.json"):
        assert (run / name).is_file(), name
    meta = json.loads((run / "config.json").read_text())
    assert meta["algo"] == "reinforce" and meta["config"]["seed"] == 3
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == list(range(6))
    assert sum(len(r["returns"]) for r in rows) == len(out["returns"])
    assert json.loads((run / "trace.json").read_text())["traceEvents"]
    ckpt = runner.load_run(run)[1]
    assert ckpt["update"] == 5 and _same_params(ckpt["state"]["learn.params"], out["params"])


def _cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "hqflow.cli", "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_killed_run_resumes_to_the_same_result(tmp_path):
    """SIGKILL a training run after a few checkpoints, resume it: same parameters and metrics as a clean run."""
    common = ["cartpole", "--episodes", "150", "--set", "n_layers=2", "--set", "stop_when_solved=false",
              "--checkpoint-every", "1", "--seed", "1"]
    clean = _cli(*common, "--run-dir", str(tmp_path / "clean"))
    assert clean.wait(timeout=300) == 0, clean.stderr.read()

    victim = _cli(*common, "--run-dir", str(tmp_path / "killed"))
    ckpt = tmp_path / "killed" / "checkpoint.pt"
    deadline = time.time() + 120
    while time.time() < deadline:
        if ckpt.exists() and runner.load_run(ckpt.parent)[1]["update"] >= 3:
            break
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL  # killed mid-run, not finished
    at_kill = runner.load_run(ckpt.parent)[1]["update"]
    assert at_kill < 14  # 15 updates in all

    resumed = _cli("--resume", str(tmp_path / "killed"))
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()

    a, b = runner.load_run(tmp_path / "clean")[1], runner.load_run(ckpt.parent)[1]
    assert a["update"] == b["update"] == 14
    assert a["returns"] == b["returns"] and len(a["returns"]) == 150
    assert _same_params(a["state"]["learn.params"], b["state"]["learn.params"])

    def rows(name):
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in lines]

    assert rows("clean") == rows("killed")


@pytest.mark.parametrize("argv, message", [
    (["pong"], "unknown environment 'pong'"),
    (["cartpole", "--episodes", "-3"], "expected a positive integer"),
    (["cartpole", "--algo", "sarsa"], "unknown algorithm 'sarsa'"),
    (["cartpole", "--distribution", "magic"], "unknown distribution policy"),
    (["cartpole", "--learners", "2"], "--learners needs --distribution multi-learner"),
    (["cartpole", "--distribution", "multi-learner", "--learners", "0"], "expected a positive integer"),
    (["cartpole", "--compression", "topk"], "--compression needs --distribution multi-learner"),
    (["cartpole", "--distribution", "multi-learner", "--compression", "topk:2"], "compression ratio must be"),
    (["cartpole", "--set", "nope=1"], "--set 'nope=1'"),
    (["cartpole", "--policy", "qvalue-pqc"], "unrecognized arguments: --policy"),  # each algorithm has one policy
    (["cartpole", "--backend", "nosuch"], "nosuch"),
    (["--resume", "/nonexistent/run"], "/nonexistent/run: no such run directory"),
    ([], "give an environment"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, tmp_path, monkeypatch, capsys):
    from hqflow.cli import main

    monkeypatch.chdir(tmp_path)  # (in this process: the console script's own exit is tested by the Ctrl-C test)
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.ray
def test_ray_actors_staleness_0_equals_sync():
    from hqflow.engine.distribution import RayActors

    sync = runner.train("reinforce", SMALL, "sync")
    ray = runner.train("reinforce", SMALL, RayActors(staleness=0))
    assert ray["returns"] == sync["returns"]
    assert _same_params(ray["params"], sync["params"])


@pytest.mark.ray
@pytest.mark.own_ray
def test_ray_actors_training_survives_a_killed_worker(tmp_path, kill_ray_process):
    """SIGKILL a Ray worker while it runs a rollout or a learner step: Ray restarts it, the call is redone."""
    proc = _cli("cartpole", "--distribution", "ray-actors", "--episodes", "40", "--set", "n_layers=1",
                "--set", "stop_when_solved=false", "--run-dir", str(tmp_path / "run"), "--json", cwd=tmp_path)
    killer = kill_ray_process("ray::_Worker.call", after=1.0, driver=proc.pid)
    out, err = proc.communicate(timeout=300)
    killer.join()
    assert killer.killed, "no worker was running a call to kill"
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out)["episodes"] == 40  # stdout holds the figures alone: Ray's messages went to stderr


def test_ctrl_c_checkpoints_and_says_how_to_continue(tmp_path):
    run = tmp_path / "run"
    proc = _cli("cartpole", "--episodes", "200", "--set", "stop_when_solved=false", "--checkpoint-every", "1",
                "--run-dir", str(run), cwd=tmp_path)
    deadline = time.time() + 120
    while not (run / "checkpoint.pt").exists() and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(rf"hqflow: interrupted; the last completed update \(\d+\) is checkpointed: continue with "
                        rf"hqflow train --resume {re.escape(str(run))}", last), last
    rows = (run / "metrics.jsonl").read_text().splitlines()
    resumed = _cli("--resume", str(run), "--json", cwd=tmp_path)
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-2000:]
    assert json.loads(out)["episodes"] == 200 and len(rows) >= 1


def test_ppo_stops_at_the_update_that_spends_the_episode_budget():
    """PPO's rollouts end mid-episode, so an update completes an unknown number of episodes: the run
    stops at the first update that reaches --episodes (it ran 421 of 300 before)."""
    from hqflow.workloads.rl import ppo

    cfg = ppo.Config(env="cartpole", n_layers=1, num_envs=2, num_steps=128, max_episodes=30, seed=1)
    seen = []
    out = runner.train("ppo", cfg, "sync", progress=lambda n, shown: seen.append((n, shown["seconds"])))
    assert seen[-2][0] < 30 <= seen[-1][0] == len(out["returns"])
    assert [s for _, s in seen] == sorted(s for _, s in seen) and seen[-1][1] <= out["seconds"]


@pytest.mark.parametrize("algo", ["reinforce", "ppo", "dqn"])
def test_every_algorithm_declares_the_runners_interface_and_its_solve_window_counts(algo, tmp_path):
    import dataclasses

    from hqflow.workloads.rl.algorithm import Algorithm

    alg = runner.algorithm(algo)
    assert isinstance(alg, Algorithm) and alg.name == algo
    assert all(callable(getattr(alg, f.name)) for f in dataclasses.fields(Algorithm) if f.name != "name")
    small = {"reinforce": {"batch_episodes": 2}, "ppo": {"num_envs": 2, "num_steps": 64}, "dqn": {}}[algo]
    cfg = alg.Config(n_layers=1, max_episodes=2, solve_window=3, **small)  # REINFORCE and PPO once ignored it
    assert alg.solve_window(cfg) == 3
    runner.train(algo, cfg, "sync", run_dir=tmp_path / "run")
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert "mean_return_3" in row


@pytest.mark.ray
def test_a_killed_ray_worker_changes_nothing_at_staleness_0(kill_ray_process):
    """The learner's or an actor's process is SIGKILLed mid-run: Ray restarts it, the call is redone
    from the same inputs, and the run ends with sync's parameters exactly (no update lost or doubled)."""
    from hqflow.engine.distribution import RayActors

    cfg = reinforce.Config(n_layers=2, batch_episodes=4, max_episodes=200, seed=3)
    sync = runner.train("reinforce", cfg, "sync")
    killer = kill_ray_process("ray::_Worker.call")  # the first call seen: a warm Ray finishes a short run in 2 s
    ray = runner.train("reinforce", cfg, RayActors(staleness=0))
    killer.join()
    assert killer.killed, "no worker was running a call to kill"
    assert ray["returns"] == sync["returns"] and _same_params(ray["params"], sync["params"])
