"""A new user's path through ``hqflow train`` and ``hqflow eval``: their own environment in the folder they
work in, resumed as hqflow's own messages say; names that are nearly right; one message for one fault."""
import hashlib
import json
import os
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
    gym.register("Walk2D-v0", entry_point=Walk1D, max_episode_steps=20)
''')
SMALL = ["--set", "n_layers=1", "--set", "batch_episodes=2", "--checkpoint-every", "1"]


class _User:
    """``hqflow`` as a user runs it, in this process: the console script's sys.path, which does not hold the
    current folder, and for each command what a new process would have: no module of the user's imported
    yet, no environment looked up yet (``fresh``)."""

    def __init__(self, monkeypatch, capsys, module: str):
        from hqflow.workloads.rl import envs

        self.monkeypatch, self.capsys, self.module, self.envs = monkeypatch, capsys, module, envs
        self.path = [p for p in sys.path if p not in ("", ".")]

    def fresh(self) -> None:
        import gymnasium as gym

        for env_id in self.envs.registered_by(self.module):
            del gym.registry[env_id]
        sys.modules.pop(self.module, None)
        self.monkeypatch.setattr(sys, "path", list(self.path))  # (what an earlier command added is gone)
        self.envs._from_gym.cache_clear()

    def __call__(self, *argv, cwd) -> tuple[int, str, str]:
        self.monkeypatch.chdir(cwd)
        self.fresh()
        code = main(list(argv))
        out = self.capsys.readouterr()
        return code, out.out, out.err


@pytest.fixture
def walk(tmp_path, request):
    """A folder holding the user's module (registers Walk1D-v0 and Walk2D-v0 on import), named for the test
    so that no other test has looked it up; what it registered is unregistered after the test."""
    import gymnasium as gym

    from hqflow.workloads.rl.envs import registered_by

    name = "walk_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]
    (tmp_path / f"{name}.py").write_text(WALK)
    yield tmp_path, name
    for env_id in registered_by(name):
        del gym.registry[env_id]
    sys.modules.pop(name, None)


@pytest.mark.parametrize("how", ["MODULE:ID", "--env-module"])
def test_resume_finds_the_users_environment_in_the_current_folder(walk, how, monkeypatch, capsys):
    folder, module = walk
    user = _User(monkeypatch, capsys, module)
    given = [f"{module}:Walk1D-v0"] if how == "MODULE:ID" else ["Walk1D-v0", "--env-module", module]
    # the run stops (Ctrl-C, here an episode budget) and hqflow says: hqflow train --resume RUN
    code, _, err = user("train", *given, "--episodes", "2", "--run-dir", "runs/walk", *SMALL, "--json", cwd=folder)
    assert code == 0, err[-2000:]
    config = json.loads((folder / "runs" / "walk" / "config.json").read_text())
    config["config"]["max_episodes"] = 4  # as if the first run had been stopped half way through 4 episodes
    (folder / "runs" / "walk" / "config.json").write_text(json.dumps(config))
    code, out, err = user("train", "--resume", "runs/walk", "--json", cwd=folder)
    assert code == 0, err[-2000:]
    figures = json.loads(out)
    assert figures["env"] == f"{module}:Walk1D-v0" and figures["episodes"] == 4
    code, _, err = user("eval", "runs/walk", "--episodes", "1", "--json", cwd=folder)
    assert code == 0, err[-2000:]


def test_a_run_whose_module_is_elsewhere_is_not_called_damaged(walk, tmp_path, monkeypatch, capsys):
    folder, module = walk
    user = _User(monkeypatch, capsys, module)
    code, _, err = user("train", f"{module}:Walk1D-v0", "--episodes", "2", "--run-dir", "runs/walk", *SMALL,
                        cwd=folder)
    assert code == 0, err[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, _, err = user("train", "--resume", str(folder / "runs" / "walk"), cwd=elsewhere)
    assert code == 2
    err = err.strip()
    assert len(err.splitlines()) == 1 and f"cannot import {module!r}" in err and "damaged" not in err, err
    assert "run hqflow from the folder that holds it" in err


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_module_that_registers_other_ids_says_which(walk, monkeypatch, capsys):
    folder, module = walk
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    assert main(["train", f"{module}:Nope-v0"]) == 2
    err = _one_line(capsys)
    assert f"module {module!r} registered no id 'Nope-v0'; it registered Walk1D-v0, Walk2D-v0" in err, err
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
