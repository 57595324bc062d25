"""REINFORCE: returns, the actor and learner fragments, a smoke run and determinism."""
import numpy as np
import pytest
import torch
from hqflow.workloads.rl import runner
from hqflow.workloads.rl import reinforce as R
from hqflow.workloads.rl.algorithm import params
from hqflow.workloads.rl.envs import FreshEnvs


@torch.no_grad()
def _collect(policy, envs, n, seed):
    return R.as_batch(*R.fresh_episodes(R.sampler(policy), envs, n, seed))


def _batch(rewards_per_episode):
    r = np.concatenate([np.asarray(e, dtype=float) for e in rewards_per_episode])
    n = len(r)
    return R.Batch(np.zeros((n, 4), np.float32), np.zeros(n, np.int64), r,
                   np.array([len(e) for e in rewards_per_episode]), 0)


def test_returns_to_go():
    b = _batch([[1, 1, 1], [1, 1]])
    np.testing.assert_allclose(R.returns_to_go(b, R.Config(normalize="none")), [3, 2, 1, 2, 1])
    np.testing.assert_allclose(R.returns_to_go(b, R.Config(normalize="none", gamma=0.5)), [1.75, 1.5, 1, 1.5, 1])
    g = R.returns_to_go(b, R.Config())
    assert abs(g.mean()) < 1e-12 and abs(g.std() - 1) < 1e-6
    ep = R.returns_to_go(b, R.Config(normalize="episode"))
    np.testing.assert_allclose(ep[3:], [1, -1], atol=1e-6)
    base = R.returns_to_go(b, R.Config(normalize="none", baseline=True))
    np.testing.assert_allclose(base, [0.5, 0.5, 0, -0.5, -0.5])  # minus the per-step means 2.5, 1.5, 1
    np.testing.assert_allclose(b.episode_returns, [3, 2])


def test_collect_is_deterministic_and_episode_major():
    cfg = R.Config(n_layers=2)
    policy, envs = R.make_policy(cfg), FreshEnvs("cartpole", 4)
    a = _collect(policy, envs, 6, seed=7)  # two waves: 4 + 2 episodes
    b = _collect(policy, envs, 6, seed=7)
    assert len(a.lengths) == 6 and a.lengths.sum() == len(a.actions) == len(a.states) == len(a.rewards)
    for f in ("states", "actions", "rewards", "lengths"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert a.circuit_evals == a.lengths.sum()
    np.testing.assert_allclose(a.episode_returns, a.lengths)  # CartPole pays 1 per step
    # episode 0's first state is its seeded reset, encoded
    first = envs.spec.encode(envs.reset([np.random.default_rng(7).integers(0, 2**31 - 1, 6)[0]]))
    np.testing.assert_array_equal(a.states[0], first[0])
    assert not np.array_equal(_collect(policy, envs, 6, seed=8).actions, a.actions)


def test_update_steps_every_parameter_group():
    cfg = R.Config(n_layers=2)
    policy, envs = R.make_policy(cfg), FreshEnvs("cartpole", 3)
    opt = torch.optim.Adam(policy.param_groups(cfg.lr_in, cfg.lr_var, cfg.lr_out))
    before = params(policy)
    m, extra = R.learn(policy, opt, _collect(policy, envs, 3, seed=0), cfg, None, 0)
    assert set(m) == {"loss", "losses", "circuit_evals"} and m["losses"] == {"policy_loss": m["loss"]}
    assert extra is None
    assert all(not torch.equal(p, before[k]) for k, p in policy.named_parameters())


def test_smoke_and_determinism():
    cfg = R.Config(n_layers=2, batch_episodes=5, max_episodes=15, seed=3)
    seen = []
    a = runner.train("reinforce", cfg, "sync", tensorboard=False, progress=lambda n, m: seen.append(n))
    assert seen == [5, 10, 15] and len(a["returns"]) == 15 and a["episodes_to_solve"] is None
    assert a["env_steps"] == sum(a["returns"]) and a["circuit_evals"] == 2 * a["env_steps"]
    b = runner.train("reinforce", cfg, "sync", tensorboard=False)
    assert a["returns"] == b["returns"]
    assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])
    c = runner.train("reinforce", R.Config(n_layers=2, batch_episodes=5, max_episodes=5, seed=4), "sync",
                     tensorboard=False)
    assert c["returns"] != a["returns"][:5]


def test_other_envs_run():
    for env in ("frozenlake", "acrobot"):
        out = runner.train("reinforce", R.Config(env=env, n_layers=1, batch_episodes=2, max_episodes=2), "sync",
                           tensorboard=False)
        assert len(out["returns"]) == 2


def test_bad_config():
    with pytest.raises(ValueError, match=r"not a short name \(acrobot, cartpole, frozenlake\)"):
        R.Config(env="pong")
    with pytest.raises(ValueError, match="normalize"):
        R.Config(normalize="max")
    with pytest.raises(ValueError):
        R.Config(gamma=0.0)
    with pytest.raises(ValueError, match="n_features <= n_qubits"):
        R.make_policy(R.Config(env="acrobot", n_qubits=4))(torch.zeros(1, 6))
