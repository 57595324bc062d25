"""A new user's path through ``hqflow train`` and ``hqflow eval``: their own environment in the folder they
work in, resumed as hqflow's own messages say; names that are nearly right; one message for one fault."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from hqflow.cli import main

WALK = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np


    class Walk1D(gym.Env):
        """4 cells; start in 0, reward 1 on reaching 3 (actions: 0 left, 1 right)."""

        def __init__(self):
            self.observation_space, self.action_space, self.pos = gym.spaces.Discrete(4), gym.spaces.Discrete(2), 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.pos = 0
            return self.pos, {}

        def step(self, action):
            self.pos = int(np.clip(self.pos + (1 if int(action) == 1 else -1), 0, 3))
            return self.pos, float(self.pos == 3), self.pos == 3, False, {}


    gym.register("Walk1D-v0", entry_point=Walk1D, max_episode_steps=10)
    gym.register("Walk1D-v1", entry_point=Walk1D, max_episode_steps=20)
''')
SMALL = ["--set", "n_layers=1", "--set", "batch_episodes=2", "--checkpoint-every", "1"]


def _hqflow(*argv, cwd):
    """The console script as a user runs it: the current folder is not on its sys.path by itself."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import sys; sys.path.pop(0); from hqflow.cli import main; sys.exit(main())"  # -c put '' (cwd) first
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, env=env,
                          cwd=cwd)


@pytest.fixture
def walk(tmp_path):
    """A folder holding the user's ``walk_env.py`` (registers Walk1D-v0 and -v1 on import)."""
    (tmp_path / "walk_env.py").write_text(WALK)
    return tmp_path


@pytest.mark.parametrize("given", [["walk_env:Walk1D-v0"], ["Walk1D-v0", "--env-module", "walk_env"]])
def test_resume_finds_the_users_environment_in_the_current_folder(walk, given):
    # the run stops (Ctrl-C, here an episode budget) and hqflow says: hqflow train --resume RUN
    first = _hqflow("train", *given, "--episodes", "2", "--run-dir", "runs/walk", *SMALL, "--json", cwd=walk)
    assert first.returncode == 0, first.stderr[-2000:]
    config = json.loads((walk / "runs" / "walk" / "config.json").read_text())
    config["config"]["max_episodes"] = 4  # as if the first run had been stopped half way through 4 episodes
    (walk / "runs" / "walk" / "config.json").write_text(json.dumps(config))
    resumed = _hqflow("train", "--resume", "runs/walk", "--json", cwd=walk)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    figures = json.loads(resumed.stdout)
    assert figures["env"] == "walk_env:Walk1D-v0" and figures["episodes"] == 4
    evaluated = _hqflow("eval", "runs/walk", "--episodes", "1", "--json", cwd=walk)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]


def test_a_run_whose_module_is_elsewhere_is_not_called_damaged(walk, tmp_path):
    first = _hqflow("train", "walk_env:Walk1D-v0", "--episodes", "2", "--run-dir", "runs/walk", *SMALL, cwd=walk)
    assert first.returncode == 0, first.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _hqflow("train", "--resume", str(walk / "runs" / "walk"), cwd=elsewhere)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "cannot import 'walk_env'" in err and "damaged" not in err, err
    assert "run hqflow from the folder that holds it" in err


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_module_that_registers_other_ids_says_which(walk, monkeypatch, capsys):
    monkeypatch.chdir(walk)
    monkeypatch.syspath_prepend(str(walk))
    assert main(["train", "walk_env:Nope-v0"]) == 2
    err = _one_line(capsys)
    assert "module 'walk_env' registered no id 'Nope-v0'; it registered Walk1D-v0, Walk1D-v1" in err, err
    assert "give MODULE:ID" not in err  # the user did


@pytest.mark.parametrize("name, meant", [("mountaincar", "MountainCar-v0"), ("Cartpole", "cartpole"),
                                         ("acrobat", "acrobot"), ("frozen_lake", "frozenlake"),
                                         ("pendulum", "Pendulum-v1")])
def test_a_nearly_right_name_gets_a_did_you_mean(name, meant, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", name]) == 2
    err = _one_line(capsys)
    assert f"unknown environment {name!r} (did you mean {meant}" in err, err


def test_no_suggestion_for_a_name_like_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "zqxv"]) == 2
    assert "did you mean" not in _one_line(capsys)


@pytest.mark.parametrize("argv", [["train", "--resume", "{missing}"], ["eval", "{missing}"]])
def test_a_missing_run_directory_is_one_message_for_resume_and_eval(argv, tmp_path, capsys):
    missing = str(tmp_path / "no-run")
    assert main([a.format(missing=missing) for a in argv]) == 2
    assert _one_line(capsys) == f"hqflow: error: {missing}: no such run directory"


@pytest.mark.parametrize("argv", [["train", "--resume", "{folder}"], ["eval", "{folder}"]])
def test_a_folder_that_is_no_run_is_one_message_for_resume_and_eval(argv, tmp_path, capsys):
    assert main([a.format(folder=tmp_path) for a in argv]) == 2
    assert _one_line(capsys) == f"hqflow: error: {tmp_path} is not a run directory (no config.json)"


@pytest.mark.parametrize("algo, config", [
    ("reinforce", {"n_layers": 1, "batch_episodes": 2, "max_episodes": 2}),
    ("ppo", {"n_layers": 1, "num_envs": 1, "num_steps": 16, "max_episodes": 1, "update_epochs": 2}),
])
def test_the_circuits_an_environment_step_costs_come_from_the_template_and_hold(algo, config):
    from hqflow.workloads.rl import runner

    mod = runner.algorithm(algo)
    cfg = mod.Config(backend="emulated-qpu", seed=0, **config)
    circuits, parameters = runner.circuits_per_env_step(algo, cfg)
    assert parameters == 4 + 24  # 1 layer on 4 qubits: 4 encoding angles, 3 rotations x 4 qubits x 2 layers
    out = runner.train(algo, cfg, "sync", tensorboard=False)
    rows = sum(s.rows or 0 for s in out["spans"] if s.kind == "execute")
    assert rows / out["env_steps"] == pytest.approx(circuits, rel=0.1)  # measured: the jobs the run sent


def test_the_readme_and_hqflow_train_say_what_an_environment_step_costs(tmp_path, monkeypatch, capsys):
    from hqflow.workloads.rl import reinforce, runner

    default = runner.circuits_per_env_step("reinforce", reinforce.Config())
    small = runner.circuits_per_env_step("reinforce", reinforce.Config(n_layers=1))
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    assert f"{default[0]:.0f} for the default CartPole policy" in readme and f"{small[0]:.0f} with" in readme
    monkeypatch.chdir(tmp_path)
    assert main(["train", "cartpole", "--backend", "emulated-qpu", "--set", "n_layers=1", "--set",
                 "batch_episodes=1", "--episodes", "1", "--json"]) == 0
    assert f"an environment step runs about {small[0]:.0f} circuits on emulated-qpu" in capsys.readouterr().err


def test_a_run_that_fails_before_its_first_update_does_not_claim_a_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "cartpole", "--backend", "emulated-qpu", "--backend-opt", "failure_rate=1.0", "--set",
            "n_layers=1", "--set", "batch_episodes=1", "--episodes", "2", "--run-dir", "run"]
    assert main(argv) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "training stopped" in last and "no update had completed, so none is checkpointed" in last, last
    assert "the last completed update" not in last
