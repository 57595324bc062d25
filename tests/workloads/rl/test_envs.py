"""Environment specs: encodings, seeding, and the environments on gymnasium's vector API."""
import numpy as np
import pytest
import gymnasium as gym
from hqflow.workloads.rl.envs import SHORT_NAMES, FreshEnvs, get_spec, make_env, reset_finished, vector_env


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
    for name in SHORT_NAMES:
        spec, env = get_spec(name), make_env(name, seed=1)
        obs, _ = env.reset(seed=1)
        assert spec.encode(obs).shape == (1, spec.n_features) and env.action_space.n == spec.n_actions
        env.close()


def test_unknown_env():
    with pytest.raises(ValueError, match=r"not a short name \(acrobot, cartpole, frozenlake\)"):
        get_spec("pong")
    with pytest.raises(ValueError, match="unknown environment"):
        make_env("pong", 0)


def test_fresh_envs_are_seeded_and_step_only_the_given_envs():
    envs = FreshEnvs("cartpole", 3)
    assert isinstance(envs.vector, gym.vector.SyncVectorEnv)
    a = envs.reset([1, 2, 3])
    assert a.shape == (3, 4) and np.array_equal(a, FreshEnvs("cartpole", 3).reset([1, 2, 3]))
    obs, rew, terminated, truncated = envs.step(np.array([0, 2]), np.array([1, 0]))
    assert obs.shape == (2, 4) and rew.tolist() == [1.0, 1.0] and not (terminated | truncated).any()
    single = make_env("cartpole", seed=3)
    single.reset(seed=3)
    assert np.array_equal(single.step(0)[0], obs[1])
    assert np.array_equal(envs.reset([1, 2]), a[:2])  # the first two only (the vector API's reset_mask)
    with pytest.raises(ValueError):
        envs.reset([1, 2, 3, 4])


def test_finished_envs_restart_with_seeds_from_the_generator():
    envs = vector_env("cartpole", 3)
    assert envs.autoreset_mode == gym.vector.AutoresetMode.DISABLED
    first = envs.reset(seed=[1, 2, 3])[0]
    obs = reset_finished(envs, np.array([False, True, False]), np.random.default_rng(0))
    seed = int(np.random.default_rng(0).integers(0, 2**31 - 1))
    assert np.array_equal(obs[[0, 2]], first[[0, 2]])
    assert np.array_equal(obs[1], make_env("cartpole").reset(seed=seed)[0])


def test_short_names_are_fixed_and_own_environments_go_through_gymnasium():
    from hqflow.workloads.rl import envs

    assert SHORT_NAMES == ("acrobot", "cartpole", "frozenlake") and "SPECS" not in envs.__all__
    assert not hasattr(envs, "SPECS")  # no half-working registry: what a driver added, Ray's workers never saw
    with pytest.raises(TypeError):
        envs._SHORT["mine"] = envs._SHORT["cartpole"]
