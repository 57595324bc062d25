"""Using a trained policy: load_policy, evaluate and hqflow eval."""
import json

import numpy as np
import pytest
import torch

from hqflow.workloads.rl import dqn, load_policy, evaluate, ppo, reinforce, runner


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("eval") / "run"
    cfg = reinforce.Config(n_layers=2, batch_episodes=5, max_episodes=20, seed=1)
    out = runner.train("reinforce", cfg, "sync", run_dir=run, checkpoint_every=1)
    return run, out


def test_load_policy_gives_the_trained_module(trained):
    run, out = trained
    policy = load_policy(run)
    assert isinstance(policy, torch.nn.Module) and not policy.training
    for name, p in policy.named_parameters():
        assert torch.equal(p.detach(), out["params"][name])
    x = policy.env_spec.encode(np.zeros((3, 4)))
    probs = policy(torch.as_tensor(x))
    assert probs.shape == (3, 2) and torch.allclose(probs.sum(-1), torch.ones(3, dtype=probs.dtype))


def test_evaluate_is_greedy_and_repeatable(trained):
    run, _ = trained
    a = evaluate(run, episodes=4, seed=7)
    b = evaluate(run, episodes=4, seed=7)
    assert a["returns"] == b["returns"] and len(a["returns"]) == 4
    assert a["mean_return"] == pytest.approx(np.mean(a["returns"])) and a["std_return"] >= 0
    policy = load_policy(run)  # one episode by hand, the same greedy choices
    env = policy.env_spec.make()
    obs, _ = env.reset(seed=7)
    total, done = 0.0, False
    while not done:
        with torch.no_grad():
            action = int(policy(torch.as_tensor(policy.env_spec.encode(obs))).argmax())
        obs, r, term, trunc, _ = env.step(action)
        total, done = total + r, term or trunc
    assert total == a["returns"][0]
    with pytest.raises(ValueError, match="episodes"):
        evaluate(run, episodes=0)


def test_a_q_value_policy_evaluates_too(tmp_path):
    cfg = dqn.Config(env="frozenlake", n_layers=1, max_episodes=4, seed=0)
    runner.train("dqn", cfg, "sync", run_dir=tmp_path / "dqn", checkpoint_every=1)
    figures = evaluate(tmp_path / "dqn", episodes=2, max_steps=50)
    assert figures["env"] == "frozenlake" and all(r in (0.0, 1.0) for r in figures["returns"])


def test_hqflow_eval(trained, tmp_path, hqflow_cli):
    run, _ = trained
    proc = hqflow_cli("eval", run, "--episodes", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout)
    assert figures["episodes"] == 3 and figures["returns"] == evaluate(run, episodes=3)["returns"]
    text = hqflow_cli("eval", run, "--episodes", "2")
    assert text.returncode == 0 and "mean return" in text.stdout and "±" in text.stdout
    (tmp_path / "config.json").write_text(json.dumps({"algo": "reinforce", "config": {}}))
    empty = hqflow_cli("eval", tmp_path)
    assert empty.returncode == 2 and "no checkpoint" in empty.stderr and len(empty.stderr.splitlines()) == 1


def test_tensorboard_event_files_are_readable_by_tensorboard(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, out = trained
    board = EventAccumulator(str(run / "tensorboard"))
    board.Reload()
    tags = set(board.Tags()["scalars"])
    assert tags == {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/mean_return_10",
                    "losses/policy_loss"}  # CleanRL's tags (and the solve criterion)
    returns = [e.value for e in board.Scalars("charts/episodic_return")]
    assert returns == pytest.approx(out["returns"])  # every episode, in order
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e.value for e in board.Scalars("charts/episodic_length")] == [n for r in rows for n in r["lengths"]]
    assert [e.step for e in board.Scalars("charts/mean_return_10")] == [r["env_steps"] for r in rows]
    assert [e.value for e in board.Scalars("losses/policy_loss")] == pytest.approx([r["loss"] for r in rows])
    assert "hyperparameters/text_summary" in board.Tags()["tensors"]


@pytest.mark.parametrize("algo, cfg, losses", [
    ("ppo", {"num_envs": 2, "num_steps": 64, "max_episodes": 4, "n_layers": 1},
     {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"}),
    ("dqn", {"max_episodes": 6, "n_layers": 1, "train_every": 2}, {"td_loss", "q_values"})])
def test_tensorboard_has_each_algorithms_losses(tmp_path, algo, cfg, losses):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from hqflow.workloads.rl import runner

    runner.train(algo, runner.algorithm(algo).Config(**cfg), "sync", run_dir=tmp_path)
    board = EventAccumulator(str(tmp_path / "tensorboard"))
    board.Reload()
    tags = set(board.Tags()["scalars"])
    assert {f"losses/{name}" for name in losses} <= tags and "charts/episodic_length" in tags, tags


def test_no_tensorboard_writes_none(tmp_path, hqflow_cli):
    proc = hqflow_cli("train", "cartpole", "--episodes", "10", "--run-dir", tmp_path / "run", "--no-tensorboard")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "run" / "tensorboard").exists() and (tmp_path / "run" / "metrics.jsonl").exists()


def test_record_saves_videos_or_says_what_is_missing(trained, tmp_path, hqflow_cli):
    run, _ = trained
    try:
        import moviepy  # noqa: F401
    except ImportError:
        proc = hqflow_cli("eval", run, "--episodes", "1", "--record", tmp_path / "videos")
        assert proc.returncode == 2 and "gymnasium[other]" in proc.stderr and len(proc.stderr.splitlines()) == 1
        pytest.skip("videos need gymnasium's other extra (moviepy); the error without it is checked")
    figures = evaluate(run, episodes=2, record=str(tmp_path / "videos"))
    assert len(figures["videos"]) == 2


@pytest.mark.parametrize("algo, cfg", [
    ("reinforce", reinforce.Config(n_layers=1, batch_episodes=2, max_episodes=2, seed=0)),
    ("dqn", dqn.Config(env="frozenlake", n_layers=1, max_episodes=2, seed=0)),
    ("ppo", ppo.Config(env="cartpole", n_layers=1, num_envs=1, num_steps=32, max_episodes=1, seed=0)),
    ("ppo", ppo.Config(env="Pendulum-v1", n_layers=1, num_envs=1, num_steps=200, max_episodes=1, seed=0)),
], ids=["reinforce", "dqn", "ppo", "ppo-continuous"])
def test_one_act_for_every_algorithms_policy(algo, cfg, tmp_path):
    runner.train(algo, cfg, "sync", run_dir=tmp_path / "run", checkpoint_every=1, tensorboard=False)
    policy = load_policy(tmp_path / "run")
    env = policy.env_spec.make()
    obs, _ = env.reset(seed=3)
    action = policy.act(obs)  # a raw observation in, what env.step takes out
    assert env.action_space.contains(action)
    env.step(action)
    features = policy.env_spec.encode(obs)
    if algo == "ppo" and policy.continuous:
        mean, value = policy(torch.as_tensor(features))
        np.testing.assert_allclose(policy.greedy(features)[0], mean[0].detach().numpy())
    else:
        out = policy(torch.as_tensor(features))
        out = out[0] if isinstance(out, tuple) else out  # ppo: (log-probabilities, V)
        assert action == int(out.argmax())
    with pytest.raises(ValueError, match="load_policy"):
        type(policy).act(type(policy).__new__(type(policy)), obs)  # a bare module knows no encoding
