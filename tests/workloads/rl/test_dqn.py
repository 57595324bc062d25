"""DQN: ε schedule, the actor, the replay memory and target network, smoke runs, determinism."""
import json
import math
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hqflow.workloads.rl import dqn as D
from hqflow.workloads.rl import runner
from hqflow.workloads.rl.algorithm import params


def _small(**kw):
    return D.Config(**{"n_layers": 2, **kw})


def _equal_params(a, b):
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def _transitions(n, n_features=4, terminated_at=()):
    """A synthetic batch of n transitions with distinct rewards 1..n."""
    rng = np.random.default_rng(0)
    term = np.zeros(n, bool)
    term[list(terminated_at)] = True
    return D.Batch(rng.random((n, n_features), dtype=np.float32), rng.integers(0, 2, n),
                   np.arange(1, n + 1, dtype=np.float32), rng.random((n, n_features), dtype=np.float32), term,
                   np.array([float(n)]), 0)


def test_defaults_follow_the_paper():
    cp, fl = D.Config(), D.Config(env="frozenlake")
    assert (cp.memory, cp.batch_size, cp.eps_start, cp.eps_min, cp.eps_decay) == (10_000, 16, 1.0, 0.01, 0.99)
    assert (cp.lr_in, cp.lr_var, D.setting(cp, "lr_out"), D.setting(cp, "gamma")) == (0.001, 0.001, 0.1, 0.99)
    assert D.observables(cp) == ("Z0 Z1", "Z2 Z3") and D.setting(cp, "encoding") == "atan"
    assert D.observables(fl) == ("Z0", "Z1", "Z2", "Z3") and D.setting(fl, "encoding") == "plain"
    assert (D.setting(fl, "gamma"), D.setting(fl, "lr_out"), D.setting(fl, "train_every")) == (0.8, 0.0, 1)
    algo = D.ALGORITHM
    assert (algo.solve_window(cp), algo.solved_threshold(cp)) == (10, 500.0)
    assert (algo.solve_window(fl), algo.solved_threshold(fl)) == (100, 1.0)
    assert D.setting(D.Config(env="frozenlake", gamma=0.9, lr_out=0.05), "lr_out") == 0.05
    np.testing.assert_allclose(D.epsilon(cp, [0, 1, 10, 1000]), [1.0, 0.99, 0.99**10, 0.01])


def test_act_is_deterministic_and_epsilon_greedy():
    cfg = _small(episodes_per_update=3)
    policy, envs = D.make_policy(cfg), D.make_envs(cfg)
    before = params(policy)
    a, b = D.act(policy, envs, cfg, 4)[0], D.act(policy, envs, cfg, 4)[0]
    for f in ("states", "actions", "rewards", "next_states", "terminated", "episode_returns"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert _equal_params(before, params(policy))
    assert len(a.episode_returns) == 3 and a.n_steps == a.episode_returns.sum()  # CartPole pays 1 per step
    assert a.terminated.sum() == 3  # every episode ended by falling (none lasted 500 steps)
    assert 0 < a.circuit_evals < a.n_steps  # ε = 0.99^12..14: mostly random, a few greedy steps
    assert not np.array_equal(D.act(policy, envs, cfg, 5)[0].actions, a.actions)
    # ε = 1: never evaluates the circuit; ε = 0: every step is greedy
    assert D.act(policy, envs, _small(eps_min=1.0), 0)[0].circuit_evals == 0
    greedy, _ = D.act(policy, envs, _small(eps_start=0.0, eps_min=0.0), 0)
    assert greedy.circuit_evals == greedy.n_steps
    # the next state of a transition is the state of the next one, within an episode
    np.testing.assert_array_equal(greedy.next_states[:-1], greedy.states[1:])


def test_act_frozenlake_and_the_last_partial_update():
    cfg = _small(env="frozenlake", episodes_per_update=4, max_episodes=10)
    policy, envs = D.make_policy(cfg), D.make_envs(cfg)
    batch, _ = D.act(policy, envs, cfg, 2)  # episodes 8 and 9 only
    assert len(batch.episode_returns) == 2 and set(batch.episode_returns) <= {0.0, 1.0}
    assert batch.states.shape[1] == 4 and set(np.unique(batch.states)) <= {0.0, np.float32(np.pi)}
    assert D.ALGORITHM.episodes_per_update(cfg) == 4 and len(envs) == 4


def test_learn_fills_a_ring_memory_and_copies_the_target_every_n_steps():
    cfg = _small(train_every=1, target_every=3, batch_size=2, memory=5)
    policy = D.make_policy(cfg)
    opt = D.make_optimizer(policy, cfg)
    extra = D.init_extra(cfg, policy)
    assert extra is not None and pickle.loads(pickle.dumps(extra))["size"] == 0
    assert _equal_params(extra["target"], params(policy))
    saved = pickle.dumps(extra)
    metrics, new = D.learn(policy, opt, _transitions(1), cfg, extra, 0)
    assert math.isnan(metrics["loss"]) and new["updates"] == 0  # memory smaller than a batch: no step
    assert pickle.dumps(extra) == saved  # the input state is left alone
    extra, targets = new, [new["target"]]
    for step in range(1, 9):  # one transition per call: env steps 2..9
        metrics, extra = D.learn(policy, opt, _transitions(1), cfg, extra, step)
        assert set(metrics) == {"loss", "losses", "circuit_evals"} and np.isfinite(metrics["loss"])
        assert metrics["losses"]["td_loss"] == metrics["loss"] and np.isfinite(metrics["losses"]["q_values"])
        assert metrics["circuit_evals"] % (2 * cfg.batch_size) == 0
        assert extra["updates"] == step and extra["env_steps"] == step + 1
        changed = not _equal_params(extra["target"], targets[-1])
        assert changed == (extra["env_steps"] % 3 == 0)  # copied at env steps 3, 6 and 9 only
        if changed:
            assert _equal_params(extra["target"], params(policy))
        targets.append(extra["target"])
    assert (extra["size"], extra["pos"]) == (5, 9 % 5)  # 9 transitions in a memory of 5: wrapped
    # a batch of 7 transitions: the 5 newest stay, in ring order, with their rewards 3..7
    _, extra = D.learn(policy, opt, _transitions(7), cfg, D.init_extra(cfg, policy), 0)
    assert sorted(extra["rewards"]) == [3, 4, 5, 6, 7] and extra["pos"] == 2 and extra["updates"] == 6


def test_td_update_targets_the_target_network_and_stops_at_terminal_states():
    cfg = _small(batch_size=8, memory=8, lr_in=0.0, lr_var=0.0, lr_out=0.0, gamma=0.5, loss="mse")
    policy = D.make_policy(cfg)
    opt = D.make_optimizer(policy, cfg)
    batch = _transitions(8, terminated_at=(1, 4))
    _, mem = D.learn(policy, opt, batch, cfg, D.init_extra(cfg, policy), 0)
    with torch.no_grad():
        mem["target"] = {k: v + 0.3 for k, v in mem["target"].items()}  # a target network unlike the policy
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    loss, q_mean = D.td_update(policy, opt, mem, rng_a, cfg)
    i = rng_b.integers(0, 8, 8)
    with torch.no_grad():
        q_next = torch.func.functional_call(policy, mem["target"], (torch.from_numpy(mem["next_states"][i]),))
        y = torch.from_numpy(mem["rewards"][i]) + 0.5 * torch.from_numpy(~mem["terminated"][i]) * q_next.max(1).values
        q = policy(torch.from_numpy(mem["states"][i])).gather(1, torch.from_numpy(mem["actions"][i])[:, None])[:, 0]
    assert loss == pytest.approx(float(F.mse_loss(q, y)), rel=1e-6)
    assert q_mean == pytest.approx(float(q.mean()), rel=1e-6)


@pytest.mark.parametrize("env, episodes", [("cartpole", 20), ("frozenlake", 40)])
def test_smoke(env, episodes, tmp_path):
    cfg = _small(env=env, max_episodes=episodes)
    seen = []
    out = runner.train("dqn", cfg, "sync", run_dir=tmp_path, tensorboard=False,
                       progress=lambda n, m: seen.append((n, m)))
    assert [n for n, _ in seen] == list(range(1, episodes + 1)) and len(out["returns"]) == episodes
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    gradient_steps = [r["losses"] for r in rows if r["loss"] is not None]
    assert out["env_steps"] >= 100 and gradient_steps and out["episodes_to_solve"] is None
    assert set(gradient_steps[-1]) == {"td_loss", "q_values"}
    assert out["circuit_evals"] > 2 * cfg.batch_size * len(gradient_steps) and out["seconds"] > 0


def test_same_seed_same_run():
    def train(cfg):
        return runner.train("dqn", cfg, "sync", tensorboard=False)

    cfg = _small(max_episodes=12, seed=3)
    a, b = train(cfg), train(cfg)
    assert a["returns"] == b["returns"] and _equal_params(a["params"], b["params"])
    c = train(_small(max_episodes=12, seed=4))
    assert c["returns"] != a["returns"]


def test_bad_config():
    with pytest.raises(ValueError, match=r"not a short name \(acrobot, cartpole, frozenlake\)"):
        D.Config(env="pong")
    with pytest.raises(ValueError, match="loss"):
        D.Config(loss="l1")
    with pytest.raises(ValueError, match="encoding"):
        D.Config(encoding="relu")
    with pytest.raises(ValueError, match="memory"):
        D.Config(memory=8, batch_size=16)
    with pytest.raises(ValueError, match="eps_min"):
        D.Config(eps_min=0.5, eps_start=0.1)
    with pytest.raises(ValueError, match="train_every must be an integer >= 1"):
        D.Config(train_every=0)
    with pytest.raises(ValueError, match="gamma"):
        D.Config(gamma=0.0)
    with pytest.raises(ValueError, match="4 actions"):
        D.Config(env="frozenlake", observables=("Z0", "Z1"))
    with pytest.raises(ValueError, match="lr_var must be a number >= 0"):
        D.Config(lr_var=-0.1)
