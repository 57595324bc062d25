"""Use a trained policy: load it from its run directory, and run greedy evaluation episodes.

    policy = load_policy("runs/reinforce-cartpole-seed0")   # an nn.Module, parameters of the last checkpoint
    action = policy.act(obs)                                 # one raw observation -> the env's greedy action
    out = policy(features)                                   # features: policy.env_spec.encode(observations)
    evaluate("runs/reinforce-cartpole-seed0", episodes=20)   # {"mean_return": ..., "std_return": ..., "returns": [...]}

``policy(features)`` by algorithm: ``reinforce`` (``SoftmaxPQC``) the action probabilities ``[B, n_actions]``;
``dqn`` (``QValuePQC``) the Q-values ``[B, n_actions]``; ``ppo`` (``ppo.ActorCritic``) ``(log-probabilities
[B, n_actions], V(s) [B])``, or with continuous actions (a ``GaussianPQC`` actor) ``(mean action [B, d] in
[-1, 1]^d, V(s) [B])``. Greedy (``policy.greedy(features)``, ``policy.act(obs)``, ``hqflow eval RUN_DIR``): the
most probable action, the largest Q-value, or the mean action of a Gaussian policy (scaled onto the env's Box).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from torch import nn

from hqflow.workloads.rl.envs import get_spec, legacy_encoding


def load_policy(run_dir, backend: str | None = None) -> nn.Module:
    """The policy of a run directory at its last checkpoint, in eval mode (``backend``: run its circuit elsewhere
    than the run did, e.g. ``"compiled"`` for a run trained on a QPU). ``policy.env_spec`` encodes observations (a
    ``running`` encoding by the checkpoint's statistics, frozen: ``policy.obs_stats``); ``policy.config`` is the
    run's algorithm config."""
    from hqflow.workloads.rl.algorithm import load_params
    from hqflow.workloads.rl.runner import algorithm, load_run

    meta, ckpt = load_run(run_dir)
    if ckpt is None:
        raise ValueError(f"{run_dir} has no checkpoint.pt: train longer, or with --checkpoint-every 1")
    mod = algorithm(meta["algo"])
    cfg = mod.Config(**meta["config"])
    cfg = dataclasses.replace(cfg, obs_encoding=legacy_encoding(cfg.env, cfg.obs_encoding),
                              backend=cfg.backend if backend is None else backend)
    policy = mod.make_policy(cfg)
    load_params(policy, ckpt["state"]["learn.params"])
    policy.eval()
    carry = ckpt["state"].get("rollout.carry", {}).get("value")
    policy.obs_stats = carry.get("obs_stats") if isinstance(carry, dict) else None
    spec = get_spec(cfg.env, cfg.obs_encoding)
    if spec.running and policy.obs_stats is None:
        raise ValueError(f"{run_dir}: its {spec.name} encoding keeps running statistics, but the checkpoint has none")
    policy.env_spec, policy.config = spec.with_stats(policy.obs_stats), cfg
    return policy


def evaluate(run_dir, episodes: int = 10, seed: int = 10_000, backend: str | None = None,
             max_steps: int | None = None, record: str | None = None) -> dict:
    """Greedy episodes of the run's policy, environment seeds ``seed``, ``seed + 1``, ...: returns and their
    mean and standard deviation. ``record``: a folder for one video per episode (gymnasium's
    ``RecordVideo``, which needs its ``other`` extra: ``pip install "gymnasium[other]"``)."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive integer, got {episodes!r}")
    policy = load_policy(run_dir, backend)
    spec = policy.env_spec
    env = _recording(spec, record) if record else spec.make()
    returns = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=int(seed) + k)
            total, steps, done = 0.0, 0, False
            while not done and (max_steps is None or steps < max_steps):
                obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
                total, steps, done = total + float(reward), steps + 1, terminated or truncated
            returns.append(total)
    finally:
        env.close()
    out = {"run_dir": str(Path(run_dir)), "env": spec.name, "episodes": episodes, "seed": int(seed),
           "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)), "returns": returns}
    if record:
        out["videos"] = sorted(str(p) for p in Path(record).glob("*.mp4"))
    return out


def _recording(spec, folder: str):
    """The environment in gymnasium's ``RecordVideo`` (every episode), or a ValueError saying what is missing."""
    try:
        import moviepy  # noqa: F401  (RecordVideo writes through it)
    except ImportError:
        raise ValueError('--record needs gymnasium\'s video extra: pip install "gymnasium[other]"') from None
    import gymnasium as gym

    try:
        env = gym.make(spec.gym_id, render_mode="rgb_array", **dict(spec.kwargs))
        env.reset(seed=0)
        env.render()  # a renderer's own extra (pygame for classic control) fails here, not mid-episode
    except Exception as exc:
        raise ValueError(f"{spec.name} cannot render frames for a video: {str(exc).splitlines()[0]}") from None
    return gym.wrappers.RecordVideo(env, str(folder), episode_trigger=lambda _: True, disable_logger=True)
