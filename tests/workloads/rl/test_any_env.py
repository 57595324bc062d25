"""Any gymnasium environment: encodings from the observation space, a user's own environment
by MODULE:ID, and one-line errors for what the policies cannot take."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hqflow.workloads.rl import reinforce, runner
from hqflow.workloads.rl.envs import BinaryEncoder, BoxEncoder, get_spec

HERE = Path(__file__).resolve().parent


def test_box_and_discrete_observations_become_angles():
    cartpole = get_spec("CartPole-v1")
    assert (cartpole.n_features, cartpole.n_actions, cartpole.solved) == (4, 2, 475.0)
    assert isinstance(cartpole._encode, BoxEncoder)
    obs = np.array([[4.8, 1e6, -0.41887903, -1e6], [0.0, 0.0, 0.0, 0.0]])
    x = cartpole.encode(obs)
    assert np.all(np.abs(x) <= 1) and x[0, 0] == pytest.approx(1, abs=1e-6) and x[0, 2] == pytest.approx(-1, abs=1e-3)
    assert x[0, 1] == pytest.approx(1, abs=1e-5) and x[1, 1] == 0  # unbounded: 2/pi arctan
    taxi = get_spec("Taxi-v4")  # Discrete(500): 9 bits
    assert taxi.n_features == 9 and taxi.n_actions == 6
    assert np.array_equal(taxi.encode([5]) / np.pi, [[0, 0, 0, 0, 0, 0, 1, 0, 1]])
    assert BinaryEncoder(2).bits == 1 and get_spec("MountainCar-v0").n_features == 2


@pytest.mark.parametrize("name, message", [
    ("Pendulum-v1", "action space Box"),
    ("Blackjack-v1", "observation space Tuple"),
    ("Taxi-v3", "Taxi-v4"),
    ("NoSuchEnv-v0", "not a short name"),
    ("no_such_module:Env-v0", "cannot import 'no_such_module'"),
])
def test_what_the_policies_cannot_take_is_a_one_line_error(name, message):
    with pytest.raises(ValueError, match=message) as err:
        get_spec(name)
    assert "\n" not in str(err.value)


def test_the_short_names_stay():
    assert get_spec("cartpole").gym_id == "CartPole-v1" and get_spec("frozenlake").n_actions == 4


@pytest.mark.parametrize("distribution", ["sync", "pipelined"])
def test_a_users_own_environment_trains(distribution, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    cfg = reinforce.Config(env="corridor_env:Corridor-v0", n_layers=1, batch_episodes=4, max_episodes=8, seed=0)
    out = runner.train("reinforce", cfg, distribution)
    assert len(out["returns"]) == 8 and all(r in (0.0, 1.0) for r in out["returns"])
    assert get_spec(cfg.env).n_features == 3  # Discrete(5): 3 bits


def test_hqflow_train_takes_a_gymnasium_id_and_refuses_continuous_actions(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "hqflow.cli", "train", "CartPole-v1", "--episodes", "10",
                         "--run-dir", str(tmp_path / "run"), "--json"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-m", "hqflow.cli", "train", "Pendulum-v1", "--algo", "reinforce"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Pendulum-v1" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.ray
def test_a_users_own_environment_under_ray_actors(tmp_path):
    """Ray's workers import the user's module too: hqflow starts Ray with the driver's import path."""
    proc = subprocess.run([sys.executable, "-m", "hqflow.cli", "train", "corridor_env:Corridor-v0", "--distribution",
                           "ray-actors", "--episodes", "4", "--set", "n_layers=1", "--set", "batch_episodes=2",
                           "--run-dir", str(tmp_path / "run"), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"episodes": 4' in proc.stdout and '"distribution": "ray-actors"' in proc.stdout
