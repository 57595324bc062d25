"""Any gymnasium environment: encodings from the observation space, a user's own environment
by MODULE:ID, and one-line errors for what the policies cannot take."""
import json
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


def test_hqflow_train_takes_a_gymnasium_id_and_refuses_continuous_actions(tmp_path, hqflow_cli):
    ok = hqflow_cli("train", "CartPole-v1", "--episodes", "10", "--run-dir", tmp_path / "run", "--json")
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = hqflow_cli("train", "Pendulum-v1", "--algo", "reinforce")
    assert bad.returncode == 2 and "Pendulum-v1" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_continuous_actions_get_a_gaussian_head_in_ppo(tmp_path):
    import torch

    from hqflow.workloads.rl import ppo

    spec = get_spec("Pendulum-v1")
    assert spec.continuous and spec.n_actions == 1 and spec.action_low == (-2.0,) and spec.action_high == (2.0,)
    assert spec.env_action([0.0])[0] == 0.0 and spec.env_action([5.0])[0] == 2.0 and spec.env_action([-0.5])[0] == -1.0
    cfg = ppo.Config(env="Pendulum-v1", n_layers=1, num_envs=2, num_steps=200, max_episodes=4, seed=0)
    policy = ppo.make_policy(cfg)
    assert policy.continuous
    batch = ppo.act(policy, ppo.make_envs(cfg), cfg, 0)[0]
    assert batch.actions.shape == (200, 2, 1) and batch.actions.dtype == np.float32 and len(batch.episode_returns) == 2
    with torch.no_grad():  # the rollout's log-probabilities are the policy's own
        d = policy.actor.dist(torch.from_numpy(batch.states[:5, 0]))
        np.testing.assert_allclose(d.log_prob(torch.from_numpy(batch.actions[:5, 0])).numpy(),
                                   batch.log_probs[:5, 0], rtol=1e-5, atol=1e-5)
    before = policy.actor.log_std.detach().clone()
    ppo.learn(policy, ppo.make_optimizer(policy, cfg), batch, cfg, None, 0)
    assert not torch.equal(before, policy.actor.log_std.detach())  # the standard deviation is learned
    with pytest.raises(ValueError, match="--algo ppo"):
        reinforce.Config(env="Pendulum-v1")


def test_hqflow_train_pendulum_with_ppo_and_evaluate_it(tmp_path, hqflow_cli):
    run = tmp_path / "run"
    proc = hqflow_cli("train", "Pendulum-v1", "--algo", "ppo", "--episodes", "8", "--set", "num_steps=200", "--set",
                      "n_layers=1", "--run-dir", run, "--json", "--checkpoint-every", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"episodes": 8' in proc.stdout
    ev = hqflow_cli("eval", run, "--episodes", "2", "--json")
    assert ev.returncode == 0, ev.stderr
    assert all(-2000 < r < 0 for r in json.loads(ev.stdout)["returns"])


def test_the_encoding_can_be_overridden():
    lake = get_spec("frozenlake", "onehot")
    assert lake.n_features == 16 and lake.solved == 1.0 and dict(lake.kwargs)["is_slippery"] is False
    assert np.flatnonzero(lake.encode([5])[0]).tolist() == [5]
    box = get_spec("cartpole", "box")  # the space's bounds instead of the tutorial's divisors
    assert box.n_features == 4 and box.encode([[4.8, 0.0, 0.0, 0.0]])[0, 0] == pytest.approx(1.0)
    for name, encoding in [("cartpole", "binary"), ("Taxi-v4", "box")]:
        with pytest.raises(ValueError) as err:
            get_spec(name, encoding)
        assert "\n" not in str(err.value) and encoding in str(err.value)
    with pytest.raises(ValueError, match="unknown observation encoding"):
        reinforce.Config(obs_encoding="gray")
    cfg = reinforce.Config(env="frozenlake", obs_encoding="onehot", n_layers=1, batch_episodes=2, max_episodes=2)
    assert len(runner.train("reinforce", cfg, "sync")["returns"]) == 2
