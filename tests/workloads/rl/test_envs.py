"""Environment specs: encodings, seeding and the synchronous vector wrapper."""
import numpy as np
import pytest
from hqflow.workloads.rl.envs import SPECS, SyncEnvs, get_spec, make_env


def test_cartpole_encoding():
    spec = get_spec("cartpole")
    x = spec.encode(np.array([[2.4, -2.5, 0.21, 5.0], [0.0, 1.25, -0.105, 0.0]]))
    assert x.dtype == np.float32 and x.shape == (2, 4)
    np.testing.assert_allclose(x, [[1, -1, 1, 2], [0, 0.5, -0.5, 0]], rtol=1e-6)
    assert (spec.gym_id, spec.n_qubits, spec.n_actions, spec.solved) == ("CartPole-v1", 4, 2, 500.0)


def test_acrobot_encoding():
    spec = get_spec("acrobot")
    x = spec.encode(np.array([1.0, 0.0, -1.0, 0.0, 4 * np.pi, -9 * np.pi]))
    np.testing.assert_allclose(x, [[1, 0, -1, 0, 1, -1]], rtol=1e-6)
    assert (spec.n_features, spec.n_qubits, spec.n_actions) == (6, 6, 3)


def test_frozenlake_binary_encoding():
    spec = get_spec("frozenlake")
    x = spec.encode(np.array([0, 5, 15]))
    np.testing.assert_allclose(x, np.pi * np.array([[0, 0, 0, 0], [0, 1, 0, 1], [1, 1, 1, 1]]), rtol=1e-6)
    assert dict(spec.kwargs) == {"map_name": "4x4", "is_slippery": False}
    env = make_env("frozenlake", seed=0)
    assert env.unwrapped.spec.kwargs["is_slippery"] is False and env.action_space.n == 4


def test_every_spec_matches_its_env():
    for name, spec in SPECS.items():
        env = make_env(name, seed=1)
        obs, _ = env.reset(seed=1)
        assert spec.encode(obs).shape == (1, spec.n_features) and env.action_space.n == spec.n_actions
        env.close()


def test_unknown_env():
    with pytest.raises(ValueError, match=r"not a short name \(acrobot, cartpole, frozenlake\)"):
        get_spec("pong")
    with pytest.raises(ValueError, match="unknown environment"):
        make_env("pong", 0)


def test_sync_envs_are_seeded_and_step_only_the_given_envs():
    envs = SyncEnvs("cartpole", 3)
    a = envs.reset([1, 2, 3])
    assert a.shape == (3, 4) and np.array_equal(a, SyncEnvs("cartpole", 3).reset([1, 2, 3]))
    obs, rew, done = envs.step(np.array([0, 2]), np.array([1, 0]))
    assert obs.shape == (2, 4) and rew.tolist() == [1.0, 1.0] and not done.any()
    single = make_env("cartpole", seed=3)
    single.reset(seed=3)
    assert np.array_equal(single.step(0)[0], obs[1])
    with pytest.raises(ValueError):
        envs.reset([1, 2, 3, 4])
