"""A user's own environment, registered by a package's ``gymnasium.envs`` entry point or by a module
named with ``--env-module``, trains under sync and ray-actors and evaluates.

Nothing is installed: the package and its ``.dist-info`` (with ``entry_points.txt``) live in a
temporary folder that the subprocesses get on their PYTHONPATH (the tests that run ``hqflow`` in this process, where
a fresh one is not what they check, on ``sys.path``).
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

ENV_SOURCE = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np


    class Corridor(gym.Env):
        """5 cells; start in 0, reward 1 on reaching 4 (actions: 0 left, 1 right)."""

        def __init__(self):
            self.observation_space, self.action_space, self.pos = gym.spaces.Discrete(5), gym.spaces.Discrete(2), 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.pos = 0
            return self.pos, {}

        def step(self, action):
            self.pos = int(np.clip(self.pos + (1 if int(action) == 1 else -1), 0, 4))
            return self.pos, float(self.pos == 4), self.pos == 4, False, {}
''')


@pytest.fixture
def site(tmp_path):
    """A folder holding package ``hqplug`` (registered by its entry point) and module ``ownenvs``
    (registers ``OwnCorridor-v0`` on import), and the environment of a subprocess that sees it."""
    root = tmp_path / "site"
    (root / "hqplug").mkdir(parents=True)
    (root / "hqplug" / "__init__.py").write_text("")
    (root / "hqplug" / "envs.py").write_text(ENV_SOURCE + textwrap.dedent('''

        def register_envs():
            gym.register("Corridor-v0", entry_point="hqplug.envs:Corridor", max_episode_steps=20)
    '''))
    info = root / "hqplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hqplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[gymnasium.envs]\nhqplug = hqplug.envs:register_envs\n")
    (root / "ownenvs.py").write_text(ENV_SOURCE + textwrap.dedent('''

        gym.register("OwnCorridor-v0", entry_point=Corridor, max_episode_steps=20)
    '''))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return root, env


def _hqflow(*argv, env, cwd):
    return subprocess.run([sys.executable, "-m", "hqflow.cli", *argv], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd)


SMALL = ["--episodes", "4", "--set", "n_layers=1", "--set", "batch_episodes=2", "--json"]


@pytest.mark.parametrize("distribution", ["sync",  # (in subprocesses: the user's package is on their PYTHONPATH)
                                          pytest.param("ray-actors", marks=[pytest.mark.ray, pytest.mark.own_ray])])
@pytest.mark.parametrize("how", ["entry point", "env module"])
def test_a_users_environment_trains_and_evaluates(site, tmp_path, distribution, how):
    """The package by its entry point, from PYTHONPATH; the module from the working folder, where a user's own
    module most often is (under ray-actors: Ray's workers get the driver's import path, that folder made absolute)."""
    root, env = site
    given = ["hqplug/Corridor-v0"] if how == "entry point" else ["OwnCorridor-v0", "--env-module", "ownenvs"]
    env, cwd = (env, tmp_path) if how == "entry point" else (dict(os.environ), root)
    run = tmp_path / "run"
    proc = _hqflow("train", *given, "--distribution", distribution, "--run-dir", str(run), "--checkpoint-every", "1",
                   *SMALL, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout)
    assert figures["episodes"] == 4 and figures["distribution"] == distribution
    expected = "hqplug/Corridor-v0" if how == "entry point" else "ownenvs:OwnCorridor-v0"
    assert json.loads((run / "config.json").read_text())["config"]["env"] == expected
    ev = _hqflow("eval", str(run), "--episodes", "2", "--json", env=env, cwd=cwd)
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert all(r in (0.0, 1.0) for r in json.loads(ev.stdout)["returns"])


def test_the_default_run_directory_of_a_namespaced_id_is_one_folder(site, hqflow_cli, monkeypatch):
    root, _ = site
    monkeypatch.syspath_prepend(str(root))  # (in this process: sync training needs no fresh one)
    proc = hqflow_cli("train", "hqplug/Corridor-v0", *SMALL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["run_dir"] == os.path.join("runs", "reinforce-hqplug-Corridor-v0-seed0")


@pytest.mark.parametrize("argv, message", [
    (["OwnCorridor-v0", "--env-module", "no_such_module"], "cannot import 'no_such_module'"),
    (["OwnCorridor-v0", "--env-module", "not a module"], "expected a module name"),
    (["ownenvs:OwnCorridor-v0", "--env-module", "ownenvs"], "give the module once"),
    (["cartpole", "--env-module", "ownenvs"], "not the short name 'cartpole'"),
    (["Missing-v0", "--env-module", "ownenvs"], "unknown environment 'ownenvs:Missing-v0'"),
    (["hqplug/Nothing-v0"], "unknown environment 'hqplug/Nothing-v0'"),
])
def test_bad_environments_exit_2_with_one_line(site, argv, message, hqflow_cli, monkeypatch):
    """In this process (refused before anything runs: no fresh interpreter's seconds), the site on its path."""
    root, _ = site
    monkeypatch.syspath_prepend(str(root))
    proc = hqflow_cli("train", *argv, "--episodes", "2")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_broken_entry_point_is_named_and_does_not_hide_the_others(site, tmp_path):
    root, env = site
    info = root / "broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[gymnasium.envs]\nbroken = no_such_plugin:register\n")
    ok = _hqflow("train", "hqplug/Corridor-v0", "--run-dir", str(tmp_path / "run"), *SMALL, env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = _hqflow("train", "broken/Env-v0", env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "no_such_plugin" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
