"""PPO: GAE and the clipped objective by hand, the actor and learner fragments, a smoke run and determinism."""
import math

import numpy as np
import pytest
import torch
from hqflow.workloads.rl import ppo as P
from hqflow.workloads.rl.algorithm import params

SMALL = {"n_layers": 2, "num_envs": 2, "num_steps": 64}  # 128 env steps per update


def test_gae_by_hand():
    # env 0 ends its episode at step 1 (no bootstrap across it); env 1 runs on and is cut at T = 3
    rewards = np.array([[1, 0], [1, 0], [1, 2]], float)
    values = np.array([[0.5, 1], [1, 1], [2, 1]], float)
    dones = np.array([[False, False], [True, False], [False, False]])
    adv, ret = P.gae(rewards, values, dones, last_values=np.array([4.0, 0.0]), gamma=0.5, lam=0.5)
    # env 0: δ2 = 1 + .5·4 - 2 = 1, A2 = 1; δ1 = 1 - 1 = 0 (done), A1 = 0; δ0 = 1 + .5·1 - .5 = 1, A0 = 1 + .25·0
    # env 1: δ2 = 2 - 1 = 1, A2 = 1; δ1 = .5·1 - 1 = -.5, A1 = -.5 + .25·1; δ0 = -.5, A0 = -.5 + .25·(-.25)
    np.testing.assert_allclose(adv, [[1, -0.5625], [0, -0.25], [1, 1]])
    np.testing.assert_allclose(ret, adv + values)
    # γ = λ = 1: the advantage is the Monte-Carlo return (bootstrapped at the cut) minus the value
    adv, ret = P.gae(rewards, values, dones, np.array([4.0, 0.0]), gamma=1.0, lam=1.0)
    np.testing.assert_allclose(ret, [[2, 2], [1, 2], [5, 2]])


def test_clipped_objective_by_hand():
    old = torch.full((4,), math.log(0.5), dtype=torch.float64)
    ratio = torch.tensor([1.5, 0.9, 0.5, 1.1], dtype=torch.float64)
    new = (old + torch.log(ratio)).requires_grad_()
    adv = torch.tensor([1.0, 1.0, -1.0, -2.0], dtype=torch.float64)
    loss = P.clipped_objective(new, old, adv, clip_coef=0.2)
    # rows: max(-1.5, -1.2) = -1.2 (clipped), max(-.9, -.9), max(.5, .8) = .8 (clipped), max(2.2, 2.2)
    assert loss.item() == pytest.approx((-1.2 - 0.9 + 0.8 + 2.2) / 4)
    loss.backward()
    # clipped rows pass no gradient; the others -A·ρ/4 (dρ/dlogπ = ρ)
    np.testing.assert_allclose(new.grad.numpy(), [0, -0.9 / 4, 0, 2 * 1.1 / 4])


def test_policy_holds_actor_and_critic():
    cfg = P.Config(**SMALL)
    policy = P.make_policy(cfg)
    names = [k for k, _ in policy.named_parameters()]
    assert set(names[:3]) == {"actor.input_scaling", "actor.weights", "actor.output"}
    assert any(k.startswith("critic.") for k in names)
    groups = P.make_optimizer(policy, cfg).param_groups
    assert [g["name"] for g in groups] == ["input_scaling", "weights", "output", "critic"]
    assert sum(len(g["params"]) for g in groups) == len(names)
    log_probs, values = policy(torch.zeros(3, 4))
    assert log_probs.shape == (3, 2) and values.shape == (3,)
    other = P.make_policy(P.Config(**SMALL, seed=1))
    assert not torch.equal(policy.critic[0].weight, other.critic[0].weight)
    algo = P.ALGORITHM
    assert algo.init_extra(cfg, policy) is None
    assert P.episodes_per_update(P.Config()) == 4 and algo.updates(P.Config()) == 250
    assert P.episodes_per_update(P.Config(num_steps=1000, max_episodes=10)) == 8
    assert algo.updates(P.Config(num_steps=1000, max_episodes=10)) == 2
    assert algo.solved_threshold(P.Config(env="acrobot")) == -100.0


def test_act_is_deterministic_and_consistent():
    cfg = P.Config(**SMALL)
    policy, envs = P.make_policy(cfg), P.make_envs(cfg)
    a, b = P.act(policy, envs, cfg, 3)[0], P.act(policy, envs, cfg, 3)[0]
    for f in ("states", "actions", "log_probs", "rewards", "dones", "values", "last_values", "episode_returns"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    T, N = cfg.num_steps, cfg.num_envs
    assert a.states.shape == (T, N, 4) and a.actions.shape == a.rewards.shape == a.dones.shape == (T, N)
    assert a.last_values.shape == (N,) and a.n_steps == T * N
    assert a.circuit_evals == T * N * (1 + P.setting(cfg, "update_epochs"))
    # CartPole pays 1 a step: completed returns + the cut episodes' partial returns = T·N
    assert len(a.episode_returns) == a.dones.sum() > 0
    cut = sum(T - 1 - np.flatnonzero(a.dones[:, i]).max(initial=-1) for i in range(N))
    assert a.episode_returns.sum() + cut == T * N
    # the recorded log-probabilities and values are the acting parameters'
    log_probs, values = policy(torch.from_numpy(a.states[5]))
    np.testing.assert_allclose(a.log_probs[5], log_probs.gather(1, torch.from_numpy(a.actions[5])[:, None])[:, 0]
                               .detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(a.values[5], values.detach().numpy(), rtol=1e-5)
    assert not np.array_equal(P.act(policy, envs, cfg, 4)[0].actions, a.actions)


def test_learn_steps_every_parameter():
    cfg = P.Config(**SMALL)
    policy, envs = P.make_policy(cfg), P.make_envs(cfg)
    opt = P.make_optimizer(policy, cfg)
    before = params(policy)
    metrics, extra = P.learn(policy, opt, P.act(policy, envs, cfg, 0)[0], cfg, None, 0)
    assert set(metrics) == {"loss", "losses"} and isinstance(metrics["loss"], float) and extra is None
    assert set(metrics["losses"]) == {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"}
    assert all(not torch.equal(p, before[k]) for k, p in policy.named_parameters())


def test_smoke_and_determinism():
    from hqflow.workloads.rl import runner

    def train(cfg, progress=None):
        return runner.train("ppo", cfg, "sync", tensorboard=False, progress=progress)

    for env in ("cartpole", "acrobot"):
        cfg = P.Config(env=env, **SMALL, max_episodes=4, seed=3)  # at most 2 updates of 128 steps
        seen = []
        a = train(cfg, progress=lambda n, m, seen=seen: seen.append(n))
        n = a["updates"]
        assert n == P.ALGORITHM.updates(cfg) == 2 or (n == 1 and len(a["returns"]) == 4)  # or the budget is spent
        assert len(a["returns"]) <= 4 and a["env_steps"] <= 128 * n and len(seen) == n
        # the actor evaluated every step it took; the learner the steps it kept (fewer when the budget cut them)
        assert a["circuit_evals"] == n * 128 + a["env_steps"] * P.setting(cfg, "update_epochs")
        if env == "cartpole":  # (a random Acrobot episode outlasts a 64-step rollout)
            assert len(a["returns"]) > 0
        b = train(cfg)
        assert a["returns"] == b["returns"]
        assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])
    c = train(P.Config(**SMALL, max_episodes=2, seed=4))
    assert c["returns"] != train(P.Config(**SMALL, max_episodes=2, seed=3))["returns"]


def test_bad_config():
    with pytest.raises(ValueError, match=r"not a short name \(acrobot, cartpole, frozenlake\)"):
        P.Config(env="pong")
    with pytest.raises(ValueError, match="num_steps must be an integer >= 1"):
        P.Config(num_steps=0)
    with pytest.raises(ValueError, match="num_minibatches"):
        P.Config(num_envs=1, num_steps=2, num_minibatches=4)
    with pytest.raises(ValueError, match="gamma"):
        P.Config(gamma=0.0)
    with pytest.raises(ValueError, match="gae_lambda"):
        P.Config(gae_lambda=1.5)
    with pytest.raises(ValueError, match="clip_coef"):
        P.Config(clip_coef=0.0)
    with pytest.raises(ValueError, match="encoding"):
        P.Config(encoding="relu")


def test_acrobot_has_its_own_epochs_and_critic_rate_unless_set():
    assert (P.setting(P.Config(env="acrobot"), "update_epochs"), P.setting(P.Config(env="acrobot"), "lr_critic")) == (8, 1e-2)
    assert (P.setting(P.Config(), "update_epochs"), P.setting(P.Config(), "lr_critic")) == (4, 3e-3)
    assert P.setting(P.Config(env="acrobot", update_epochs=2), "update_epochs") == 2


def _rollout(cfg, steps=None, seed=(3, 0)):
    policy, envs = P.make_policy(cfg), P.make_envs(cfg)
    spec = cfg.spec
    return P.rollout(policy, envs, spec, steps or cfg.num_steps, seed=list(seed)), policy


def test_a_rollout_cut_at_the_budget_is_the_rollout_that_stopped_there():
    cfg = P.Config(env="cartpole", **SMALL)
    full, _ = _rollout(cfg)
    ends = np.argwhere(full.dones)
    assert len(ends) >= 3
    k = next(k for k in range(1, len(ends)) if ends[k][0] != ends[k - 1][0])  # the k-th end is alone on its step
    t = int(ends[k - 1][0])
    cut = P.within_budget(full, cfg, k)
    short, _ = _rollout(cfg, steps=t + 1)  # the same seed: the same first t + 1 steps
    assert cut.kept is None and len(cut.episode_returns) == k
    np.testing.assert_array_equal(cut.episode_returns, short.episode_returns)
    for name in ("states", "actions", "log_probs", "rewards", "dones", "values"):
        np.testing.assert_array_equal(getattr(cut, name), getattr(short, name))
    np.testing.assert_allclose(cut.last_values, short.last_values, rtol=1e-5, atol=1e-6)
    assert cut.n_steps == (t + 1) * cfg.num_envs and cut.steps_taken == full.n_steps
    assert P.within_budget(full, cfg, len(full.episode_returns)) is full  # nothing to cut


def test_an_episode_that_ends_on_the_budgets_step_beyond_it_loses_that_step():
    # two envs end episodes on the same step; the budget leaves room for the first only
    T, N = 4, 2
    dones = np.zeros((T, N), bool)
    dones[1, 0] = dones[2, 0] = dones[2, 1] = True
    values = np.arange(T * N, dtype=np.float32).reshape(T, N)
    batch = P.Batch(np.zeros((T, N, 3), np.float32), np.zeros((T, N), np.int64), np.zeros((T, N), np.float32),
                    np.ones((T, N)), dones, values, np.array([100.0, 200.0], np.float32), np.array([2.0, 3.0, 3.0]),
                    T * N * 5)
    cfg = P.Config(env="cartpole", **SMALL)
    cut = P.within_budget(batch, cfg, 2)  # episodes end at (1, 0), (2, 0), (2, 1): keep the first two
    assert list(cut.kept) == [3, 2] and cut.n_steps == 5 and list(cut.episode_returns) == [2.0, 3.0]
    # env 0 ended its episode on step 2 (no bootstrap needed); env 1 is cut before step 2: V(s_2) bootstraps it
    assert cut.last_values[1] == values[2, 1] and cut.last_values[0] == values[3, 0]
    assert cut.circuit_evals == T * N * 5 - P.setting(cfg, "update_epochs") * (T * N - 5)
    adv, ret = P._advantages(cut, cfg)
    a1, _ = P.gae(batch.rewards[:2, 1:], values[:2, 1:], dones[:2, 1:], values[2, 1:], cfg.gamma, cfg.gae_lambda)
    np.testing.assert_allclose(adv[:2, 1:], a1)
    assert adv[2, 1] == 0 and cut.mask().sum() == 5


@pytest.mark.parametrize("budget", [3, 7])
def test_the_episode_budget_is_a_budget(budget):
    from hqflow.workloads.rl import runner

    cfg = P.Config(env="cartpole", **SMALL, max_episodes=budget, seed=1)
    out = runner.train("ppo", cfg, "sync", tensorboard=False)
    assert len(out["returns"]) == budget  # early CartPole episodes are short: rollouts complete many
