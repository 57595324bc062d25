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

``evaluate`` steps its episodes side by side: each time step is one forward pass, one job of a row per episode
still running, wherever the circuit runs; ``price_evaluation`` says what that costs at most on a priced backend.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
from hqflow.backends import as_backend
from hqflow.jobs import accounting
from torch import nn

from hqflow.workloads.rl.envs import get_spec, legacy_encoding
from hqflow.workloads.rl.policies import circuits, policy_rows
from hqflow.workloads.rl.runner import algorithm, load_run


def load_policy(run_dir, backend=None, shots: int | None = None) -> nn.Module:
    """The policy of a run directory at its last checkpoint, in eval mode (``backend``: run its circuit elsewhere
    than the run did, e.g. ``"compiled"`` for a run trained on a QPU, a name or ``(name, options)``; ``shots``: per
    circuit there, None: the run's). ``policy.env_spec`` encodes observations (a
    ``running`` encoding by the checkpoint's statistics, frozen: ``policy.obs_stats``); ``policy.config`` is the
    run's algorithm config."""
    meta, ckpt = load_run(run_dir)
    if ckpt is None:
        raise ValueError(f"{run_dir} has no checkpoint.pt: train longer, or with --checkpoint-every 1")
    mod = algorithm(meta["algo"])
    cfg = mod.Config(**meta["config"])
    cfg = dataclasses.replace(cfg, obs_encoding=legacy_encoding(cfg.env, cfg.obs_encoding),
                              shots=cfg.shots if shots is None else shots)
    policy = mod.make_policy(cfg, None if backend is None else backend)
    policy.load_state_dict(ckpt["state"]["learn.params"])
    policy.eval()
    carry = ckpt["state"].get("rollout.carry", {}).get("value")
    policy.obs_stats = carry.get("obs_stats") if isinstance(carry, dict) else None
    spec = get_spec(cfg.env, cfg.obs_encoding)
    if spec.running and policy.obs_stats is None:
        raise ValueError(f"{run_dir}: its {spec.name} encoding keeps running statistics, but the checkpoint has none")
    policy.env_spec, policy.config = spec.with_stats(policy.obs_stats), cfg
    return policy


def evaluate(run_dir, episodes: int = 10, seed: int = 10_000, backend=None, max_steps: int | None = None,
             record: str | None = None, shots: int | None = None, budget: float | None = None,
             keep: bool = False) -> dict:
    """Greedy episodes of the run's policy side by side, environment seeds ``seed``, ``seed + 1``, ...: returns and
    their mean and standard deviation, and ``usage`` (the jobs' service jobs, circuits, shots and list price).
    ``backend``, ``shots``: ``load_policy``'s. ``budget``: stop before a step whose list price would pass it (then
    ``stopped`` is ``"budget"`` and the figures are the episodes completed). ``record``: a folder for one video per
    episode (gymnasium's ``RecordVideo``, which needs its ``other`` extra: ``pip install "gymnasium[other]"``).
    ``keep``: append the figures to the run directory's ``evaluations.jsonl``."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive integer, got {episodes!r}")
    policy = load_policy(run_dir, backend, shots)
    spec, backend_ = policy.env_spec, as_backend(circuits(policy)[0].job_backend())
    priced = (lambda rows: backend_.estimate_cost(policy_rows(policy, rows)).amount) if backend_.priced else (
        lambda rows: 0.0)  # a step of that many rows at list price (0 where unpriced)
    envs = [_recording(spec, record, k) if record else spec.make() for k in range(episodes)]
    obs = [env.reset(seed=int(seed) + k)[0] for k, env in enumerate(envs)]
    totals, steps, alive, stopped = np.zeros(episodes), 0, list(range(episodes)), None
    try:
        with accounting.meter() as used:
            while alive and (max_steps is None or steps < max_steps):
                if budget is not None and used.total.cost + priced(len(alive)) > budget:
                    stopped = "budget"
                    break
                actions = policy.greedy(spec.encode(np.stack([obs[k] for k in alive])))  # one job
                for k, action in zip(list(alive), actions):
                    obs[k], reward, terminated, truncated, _ = envs[k].step(spec.env_action(action))
                    totals[k] += float(reward)
                    if terminated or truncated:
                        alive.remove(k)
                steps += 1
    finally:
        for env in envs:
            env.close()
    done = [k for k in range(episodes) if k not in alive or stopped is None]
    returns = [float(totals[k]) for k in done]
    out = {"run_dir": str(Path(run_dir)), "env": spec.name, "episodes": len(done), "seed": int(seed),
           "mean_return": float(np.mean(returns)) if returns else None,
           "std_return": float(np.std(returns)) if returns else None, "returns": returns,
           "usage": used.total.as_dict(), **({"stopped": stopped} if stopped else {})}
    if record:
        out["videos"] = sorted(str(p) for p in Path(record).glob("*.mp4"))
    if keep:
        with open(Path(run_dir) / "evaluations.jsonl", "a") as f:
            f.write(json.dumps({**out, "backend": _shown(backend), "shots": shots, "budget": budget}) + "\n")
    return out


def price_evaluation(run_dir, episodes: int = 10, backend=None, shots: int | None = None,
                     max_steps: int | None = None) -> dict:
    """What ``evaluate`` costs at most on a priced backend, before it runs: every episode running to the time
    limit (or ``max_steps``), one job of ``episodes`` rows per step. ``{"max_steps", "usd_per_step" (the list price
    of one step with every episode running), "at_most", "currency"}``; a backend without prices: a ValueError."""
    policy = load_policy(run_dir, backend, shots)
    limit = max_steps or policy.env_spec.max_episode_steps()
    if limit is None:
        raise ValueError(f"{policy.env_spec.name} has no time limit: give --max-steps to bound the evaluation's price")
    backend_ = as_backend(circuits(policy)[0].job_backend())
    if not backend_.priced:
        raise ValueError(f"{backend_.name} does not price its jobs: its evaluation costs nothing to price")
    cost = backend_.estimate_cost(policy_rows(policy, episodes))
    return {"episodes": episodes, "max_steps": int(limit), "per_step": cost.amount, "at_most": cost.amount * limit,
            "currency": cost.currency, "circuits_per_step": backend_.usage(policy_rows(policy, episodes)).circuits}


def _shown(backend):
    return backend if backend is None or isinstance(backend, str) else [backend[0], dict(backend[1])]


def _recording(spec, folder: str, episode: int = 0):
    """The environment in gymnasium's ``RecordVideo`` (every episode), or a ValueError saying what is missing."""
    try:
        import moviepy  # noqa: F401  (RecordVideo writes through it)
    except ImportError:
        raise ValueError('--record needs gymnasium\'s video extra: pip install "gymnasium[other]"') from None
    try:
        env = gym.make(spec.gym_id, render_mode="rgb_array", **dict(spec.kwargs))
        env.reset(seed=0)
        env.render()  # a renderer's own extra (pygame for classic control) fails here, not mid-episode
    except Exception as exc:
        raise ValueError(f"{spec.name} cannot render frames for a video: {str(exc).splitlines()[0]}") from None
    return gym.wrappers.RecordVideo(env, str(folder), episode_trigger=lambda _: True, disable_logger=True,
                                    name_prefix=f"episode-{episode}")
