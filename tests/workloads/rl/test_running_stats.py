"""The running-statistics encoding of unbounded Box coordinates (obs_encoding="running"): gymnasium's
NormalizeObservation arithmetic, actor state carried between updates, checkpointed, identical across
distributions and frozen in the trained policy."""
import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers.utils import RunningMeanStd

from hqflow.engine.distribution import Pipelined
from hqflow.workloads.rl import dqn, evaluate, load_policy, ppo, reinforce, runner
from hqflow.workloads.rl.envs import (RUNNING_CLIP, BoxEncoder, ObsEncoder, ObsStats, RunningBoxEncoder, _encoder,
                                      get_spec, legacy_encoding)

SMALL = reinforce.Config(env="CartPole-v1", obs_encoding="running", n_layers=2, batch_episodes=4, max_episodes=16,
                         seed=5)


def _stats(run_dir) -> ObsStats:
    return runner.load_run(run_dir)[1]["state"]["rollout.carry"]["value"]["obs_stats"]


def _same_stats(a: ObsStats, b: ObsStats) -> bool:
    return a.count == b.count and np.array_equal(a.mean, b.mean) and np.array_equal(a.var, b.var)


def test_the_unbounded_coordinates_are_normalized_as_gymnasium_does():
    spec = get_spec("CartPole-v1", "running")
    assert spec.running and spec.obs_encoding == "running" and spec.n_features == 4
    assert list(spec._encode.unbounded) == [1, 3]  # the velocities; position and angle have bounds
    rng = np.random.default_rng(0)
    enc, rms = ObsEncoder(spec), RunningMeanStd(shape=(2,))
    for _ in range(5):  # each batch updates the statistics, then is normalized by them
        raw = rng.normal(0.5, 2.0, size=(3, 4))
        x = enc(raw)
        rms.update(raw[:, [1, 3]])
        z = (raw[:, [1, 3]] - rms.mean) / np.sqrt(rms.var + 1e-8)
        np.testing.assert_allclose(x[:, [1, 3]], np.clip(z, -RUNNING_CLIP, RUNNING_CLIP) / RUNNING_CLIP, atol=1e-6)
        np.testing.assert_allclose(x[:, [0, 2]], BoxEncoder(spec._encode.low, spec._encode.high)(raw)[:, [0, 2]],
                                   atol=1e-6)
    stats = ObsEncoder.merge(enc.start, [enc])
    np.testing.assert_allclose(stats.mean, rms.mean, rtol=1e-12)
    np.testing.assert_allclose(stats.var, rms.var, rtol=1e-12)
    assert stats.count == pytest.approx(rms.count) and np.all(np.abs(spec.encode(raw * 100, stats)[:, [1, 3]]) == 1)
    frozen = spec.with_stats(stats)  # what a trained policy encodes with: the same stats every call
    assert np.array_equal(frozen.encode(raw), frozen.encode(raw)) and np.array_equal(frozen.encode(raw),
                                                                                     spec.encode(raw, stats))


def test_groups_merge_in_a_fixed_order_and_merging_is_the_whole_update():
    spec = get_spec("CartPole-v1", "running")
    data = np.random.default_rng(1).normal(size=(40, 4))
    a, b = ObsEncoder(spec), ObsEncoder(spec)
    for k in range(0, 40, 4):
        (a if k % 8 == 0 else b)(data[k: k + 4])
    merged = ObsEncoder.merge(spec.new_stats(), [a, b])
    whole = spec.new_stats().merged(ObsStats.of(data[:, [1, 3]]))
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-12)
    np.testing.assert_allclose(merged.var, whole.var, rtol=1e-12)
    assert merged.count == pytest.approx(40 + 1e-4)


def test_which_spaces_have_running_statistics():
    huge = float(np.finfo(np.float32).max)  # what many environments write for "unbounded"
    box = gym.spaces.Box(np.array([-1.0, -huge], np.float32), np.array([1.0, huge], np.float32))
    enc, _ = _encoder("x", box, "running")
    assert isinstance(enc, RunningBoxEncoder) and list(enc.unbounded) == [1]
    np.testing.assert_allclose(_encoder("x", box, "box")[0]([[0.5, 1.0]]), [[0.5, 0.5]])  # 2/π·arctan(1)
    assert not get_spec("Acrobot-v1", "running").running  # every coordinate bounded: nothing to keep
    assert get_spec("acrobot").new_stats() is None and get_spec("cartpole", "running").running
    with pytest.raises(ValueError, match="'running' is for Box"):
        get_spec("Taxi-v4", "running")
    with pytest.raises(ValueError, match="known: auto, box, running, binary, onehot"):
        get_spec("CartPole-v1", "zscore")


def test_the_short_names_keep_their_encodings():
    for name in ("cartpole", "acrobot", "frozenlake"):
        spec = get_spec(name)
        assert spec.obs_encoding == "auto" and not spec.running and spec.new_stats() is None


def test_the_statistics_are_actor_state_and_count_every_observation():
    """Each algorithm carries them from update to update; every observation it encoded is counted once."""
    out = runner.train("reinforce", SMALL, "sync")
    assert len(out["returns"]) == 16
    for algo, cfg, observations in [
        ("reinforce", SMALL, lambda b: b.n_steps),  # the first state and every later one of each episode
        ("reinforce", dataclasses.replace(SMALL, groups=2, num_envs=4, autoreset=True), None),
        ("dqn", dqn.Config(env="CartPole-v1", obs_encoding="running", n_layers=1, max_episodes=2, seed=1),
         lambda b: b.n_steps + len(b.episode_returns)),  # next states, terminal ones too, and the first states
        ("ppo", ppo.Config(env="CartPole-v1", obs_encoding="running", n_layers=1, num_envs=2, num_steps=50,
                           max_episodes=2, seed=1), lambda b: b.n_steps + 2),  # and the state after the last step
    ]:
        mod = runner.algorithm(algo)
        carry = mod.init_carry(cfg)
        assert _same_stats(carry["obs_stats"], ObsStats.start(2))
        policy = mod.make_policy(cfg)
        envs = mod.make_envs(cfg)
        batch, after = mod.act(policy, envs, cfg, 0, carry)
        again, _ = mod.act(policy, envs, cfg, 0, carry)  # the carry given is not changed
        assert _same_stats(after["obs_stats"], mod.act(policy, envs, cfg, 0, carry)[1]["obs_stats"])
        assert np.array_equal(again.actions, batch.actions)
        assert _same_stats(mod.act(policy, envs, cfg, 0)[1]["obs_stats"], after["obs_stats"])  # no carry: fresh ones
        if observations is not None:
            assert after["obs_stats"].count == pytest.approx(1e-4 + observations(batch))
        nxt, _ = mod.act(policy, envs, cfg, 1, after)  # the next update starts from the statistics reached
        assert nxt.n_steps > 0


@pytest.mark.parametrize("distribution", ["pipelined", pytest.param("ray-actors", marks=pytest.mark.ray)])
def test_identical_across_distributions(tmp_path, distribution):
    from hqflow.engine.distribution import RayActors

    sync = runner.train("reinforce", SMALL, "sync", run_dir=tmp_path / "sync")
    other = Pipelined(staleness=0) if distribution == "pipelined" else RayActors(staleness=0)
    out = runner.train("reinforce", SMALL, other, run_dir=tmp_path / "other")
    assert out["returns"] == sync["returns"]
    assert all(torch.equal(out["params"][k], sync["params"][k]) for k in sync["params"])
    assert _same_stats(_stats(tmp_path / "sync"), _stats(tmp_path / "other"))


class _Stop(Exception):
    pass


@pytest.mark.parametrize("algo, cfg", [
    ("reinforce", SMALL),
    ("ppo", ppo.Config(env="CartPole-v1", obs_encoding="running", n_layers=1, num_envs=2, num_steps=60, max_episodes=8,
                       update_epochs=1, seed=2)),
])
def test_resume_continues_bit_exactly(tmp_path, algo, cfg):
    clean = runner.train(algo, cfg, "sync", run_dir=tmp_path / "clean", checkpoint_every=1)

    def stop_after_two(done, metrics):
        if done >= 2 * runner.algorithm(algo).episodes_per_update(cfg):
            raise _Stop

    with pytest.raises(BaseException):
        runner.train(algo, cfg, "sync", run_dir=tmp_path / "cut", checkpoint_every=1, progress=stop_after_two)
    assert runner.load_run(tmp_path / "cut")[1]["update"] < clean["updates"] - 1
    resumed = runner.train(algo, run_dir=tmp_path / "cut", resume=True)
    assert resumed["returns"] == clean["returns"]
    assert all(torch.equal(resumed["params"][k], clean["params"][k]) for k in clean["params"])
    assert _same_stats(_stats(tmp_path / "clean"), _stats(tmp_path / "cut"))


def test_the_trained_policy_keeps_its_statistics_frozen(tmp_path, hqflow_cli):
    run = tmp_path / "run"
    runner.train("reinforce", SMALL, "sync", run_dir=run, checkpoint_every=1)
    assert json.loads((run / "config.json").read_text())["config"]["obs_encoding"] == "running"
    stats = _stats(run)
    assert stats.count > 100
    policy = load_policy(run)
    assert _same_stats(policy.obs_stats, stats)
    obs = np.array([[0.1, 1.5, 0.02, -2.0]])
    np.testing.assert_array_equal(policy.env_spec.encode(obs), get_spec("CartPole-v1", "running").encode(obs, stats))
    a, b = evaluate(run, episodes=3, seed=4), evaluate(run, episodes=3, seed=4)
    assert a["returns"] == b["returns"] and _same_stats(load_policy(run).obs_stats, stats)
    ev = hqflow_cli("eval", run, "--episodes", "3", "--seed", "4", "--json")
    assert ev.returncode == 0, ev.stderr
    assert json.loads(ev.stdout)["returns"] == a["returns"]


def test_hqflow_train_takes_the_encoding(tmp_path, hqflow_cli):
    run = tmp_path / "run"
    ok = hqflow_cli("train", "CartPole-v1", "--algo", "dqn", "--episodes", "2", "--set", "obs_encoding=running",
                    "--set", "n_layers=1", "--run-dir", run, "--json")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert _stats(run).count > 2
    bad = hqflow_cli("train", "frozenlake", "--set", "obs_encoding=running")
    assert bad.returncode == 2 and "'running' is for Box" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_a_run_records_the_encoding_auto_stood_for(tmp_path):
    cfg = reinforce.Config(env="CartPole-v1", n_layers=1, batch_episodes=2, max_episodes=2)
    runner.train("reinforce", cfg, "sync", run_dir=tmp_path / "run")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["obs_encoding"] == "box"
    # a run from before recorded "auto", which then meant box for a Box; the short names keep their own
    assert legacy_encoding("CartPole-v1", "auto") == "box" and legacy_encoding("cartpole", "auto") == "auto"
    assert legacy_encoding("Taxi-v4", "auto") == "auto" and legacy_encoding("CartPole-v1", "running") == "running"
