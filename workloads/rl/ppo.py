"""PPO (clipped objective, GAE) with a softmax quantum actor and a classical critic, readable top to bottom.

CleanRL's ``ppo.py`` (Huang et al. 2022, "The 37 implementation details of PPO"), with two changes. The actor is the
``SoftmaxPQC`` of Jerbi et al. 2021, the critic a small classical MLP on the same encoded state (``ActorCritic``).
And every rollout starts fresh episodes, where CleanRL carries its envs over: a rollout is a pure function of
``(parameters, cfg.seed, update index)``, so a dataflow runtime can run rollouts anywhere, concurrently, and replay
them (only the statistics of ``obs_encoding="running"`` go from one rollout to the next, on the actor's carry, which
orders them). Each env runs ``num_steps`` steps, reset with a seed from the rollout's generator when an episode
ends; the episode still running at the end is cut there, bootstrapped by GAE with the critic's value, and not
counted (``episode_returns`` holds completed ones). So ``num_steps`` is 512, above CartPole's and Acrobot's 500-step
time limit (with CleanRL's 128 a balancing agent never completes an episode, so CartPole never counts as solved).

Hyperparameters are CleanRL's CartPole defaults (4 envs, γ 0.99, λ 0.95, clip 0.2, 4 epochs of 4 minibatches,
entropy 0.01, value 0.5, gradient norm 0.5, normalized advantages, Adam eps 1e-5) but for ``num_steps`` and the
learning rates: the actor's three groups are REINFORCE's (λ 0.1, θ 0.01, w 0.1), the critic's 3e-3 (Acrobot:
``ENV_DEFAULTS``). Left out: learning-rate annealing and the clipped value loss (plain 0.5 · MSE). As in CleanRL, an
episode that hits its time limit counts as terminated (``dones`` = terminated or truncated), so GAE does not
bootstrap past it.

The actor (``act``): one no-grad forward of actor and critic per time step for all envs, actions sampled with a
``Generator`` seeded from ``(cfg.seed, step)``. The learner (``learn``): GAE, then ``update_epochs`` passes of
``num_minibatches`` shuffled minibatches, one Adam step each on the clipped surrogate + value loss - entropy.

Train it with ``hqflow train cartpole --algo ppo`` or ``runner.train("ppo", ppo.Config(seed=0))``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from hqflow.workloads.rl import algorithm
from hqflow.workloads.rl.algorithm import Algorithm, setting
from hqflow.workloads.rl.envs import EnvSpec, ObsEncoder, reset_finished, vector_env
from hqflow.workloads.rl.policies import Acting, GaussianPQC, SoftmaxPQC, twin_offsets
from torch import nn


@dataclass(frozen=True)
class Config(algorithm.Config):
    gamma: float = 0.99
    """discount factor"""
    max_episodes: int = 1000
    """episode budget: the last rollout is cut on the step that ended the last episode (``within_budget``)"""
    beta: float = 1.0
    """inverse temperature of the softmax policy"""
    critic_hidden: int = 64
    """width of the critic's two hidden tanh layers (CleanRL's 64)"""
    num_envs: int = 4
    """environments stepped side by side in a rollout (CleanRL's 4)"""
    num_steps: int = 512
    """steps per env per rollout; keep it above the env's time limit (500 for CartPole and
    Acrobot) or no episode of a good agent completes within a rollout"""
    gae_lambda: float = 0.95
    """λ of generalized advantage estimation"""
    update_epochs: int | None = None
    """passes over each rollout; None: the environment's (``ENV_DEFAULTS``: 8 for Acrobot, else CleanRL's 4)"""
    num_minibatches: int = 4
    """minibatches per pass (num_envs · num_steps / num_minibatches rows each)"""
    clip_coef: float = 0.2
    """ε of the clipped surrogate: the ratio π/π_old is clipped to [1-ε, 1+ε]"""
    norm_adv: bool = True
    """normalize the advantages within each minibatch (mean 0, std 1)"""
    ent_coef: float = 0.01
    """weight of the entropy bonus"""
    vf_coef: float = 0.5
    """weight of the value loss 0.5 · (V(s) - R)²"""
    max_grad_norm: float = 0.5
    """clip the gradient norm over all parameters (actor and critic together) to this"""
    lr_critic: float | None = None
    """Adam learning rate of the critic; None: the environment's (``ENV_DEFAULTS``): 3e-3, above CleanRL's
    2.5e-4 (its runs make ~1000 updates, ours ~50; on CartPole seed 0, 2.5e-4 solved after 2523 episodes,
    1e-3 after 753, 3e-3 after 536), and 1e-2 for Acrobot"""

    CONTINUOUS: ClassVar[bool] = True
    # Acrobot-v1: 8 epochs and a critic learning rate of 1e-2 solved 4 of 5 seeds within 1000 episodes (648, 578,
    # 710, 1198, 360), where CleanRL's 4 and 3e-3 solved 3 (seeds 2 and 4 at 1157 and 1040); issue 13's stop note
    ENV_DEFAULTS: ClassVar[dict] = {"*": {"update_epochs": 4, "lr_critic": 3e-3},
                                    "acrobot": {"update_epochs": 8, "lr_critic": 1e-2},
                                    "Acrobot-v1": {"update_epochs": 8, "lr_critic": 1e-2}}

    def check(self, spec: EnvSpec) -> None:
        if self.num_minibatches > self.num_envs * self.num_steps:
            raise ValueError(f"num_minibatches ({self.num_minibatches}) exceeds the rollout's "
                             f"num_envs * num_steps = {self.num_envs * self.num_steps} rows")


@dataclass
class Batch:
    """What the actor hands the learner: ``num_steps`` steps of ``num_envs`` envs, time-major."""

    states: np.ndarray  # [T, N, F] float32, encoded: the state each action was taken in
    actions: np.ndarray  # [T, N] int64 (continuous: [T, N, d] float32 in the policy's [-1, 1]^d, unclipped)
    log_probs: np.ndarray  # [T, N] float32: log π_old(a|s) of the parameters that acted
    rewards: np.ndarray  # [T, N] float64
    dones: np.ndarray  # [T, N] bool: the episode ended with this step (terminated or hit its time limit)
    values: np.ndarray  # [T, N] float32: V_old(s)
    last_values: np.ndarray  # [N] float32: V_old of each env's state after the last step
    episode_returns: np.ndarray  # returns of the episodes completed in the rollout, in the order they ended
    circuit_evals: int  # actor rows evaluated while acting + the rows the learner evaluates on this batch
    kept: np.ndarray | None = None  # [N] int: the steps of each env the learner takes (None: all T; within_budget)
    steps_taken: int = -1  # env steps the actor took (-1: n_steps; more in a rollout cut at the budget)
    episode_lengths: np.ndarray | None = None  # steps of the completed episodes, in the order they ended
    offsets: np.ndarray | None = None  # [T, N, n_obs] a twin actor's (``policies.twin_offsets``), else None

    @property
    def n_steps(self) -> int:
        return self.rewards.size if self.kept is None else int(self.kept.sum())

    def mask(self) -> np.ndarray:
        """``[T, N]`` bool: the steps the learner takes."""
        kept = np.full(self.rewards.shape[1], len(self.rewards)) if self.kept is None else self.kept
        return np.arange(len(self.rewards))[:, None] < kept[None]


# --- the policy ------------------------------------------------------------------------------

class ActorCritic(Acting, nn.Module):
    """The quantum actor π(a|s) (``SoftmaxPQC``; ``GaussianPQC`` for continuous actions) and CleanRL's critic V(s),
    Linear(F, h) - tanh - Linear(h, h) - tanh - Linear(h, 1) on the encoded state (h = ``hidden``, orthogonal weights
    with gain √2, last layer 1, zero biases), as one module: parameters ``actor.*`` (λ, θ, w) and ``critic.*``."""

    def __init__(self, actor: SoftmaxPQC | GaussianPQC, n_features: int, hidden: int = 64, seed: int | None = None):
        super().__init__()
        self.actor = actor
        self.continuous = isinstance(actor, GaussianPQC)  # a Gaussian head: actions in [-1, 1]^d
        self.critic = nn.Sequential(nn.Linear(n_features, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                    nn.Linear(hidden, 1))
        gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        for layer, gain in zip(self.critic[::2], (2**0.5, 2**0.5, 1.0)):
            nn.init.orthogonal_(layer.weight, gain, generator=gen)
            nn.init.zeros_(layer.bias)

    def value(self, states: torch.Tensor) -> torch.Tensor:
        """V(s): [B]."""
        return self.critic(torch.as_tensor(states, dtype=self.critic[0].weight.dtype))[:, 0]

    def forward(self, states: torch.Tensor, offset=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(log π(a|s) for every action [B, n_actions] (continuous: the mean action), V(s) [B]); ``offset``: a twin
        learner's (``SoftmaxPQC.expectations``)."""
        actor = self.actor(states, offset) if self.continuous else self.actor.log_probs(states, offset)
        return actor, self.value(states)

    def greedy(self, features) -> np.ndarray:
        """The actor's greedy actions (``SoftmaxPQC.greedy``, ``GaussianPQC.greedy``); the critic is not asked."""
        return self.actor.greedy(features)

    def param_groups(self, lr_in: float, lr_var: float, lr_out: float, lr_critic: float) -> list[dict]:
        """Optimizer groups: the actor's λ, θ, w (``SoftmaxPQC.param_groups``), then the critic."""
        return self.actor.param_groups(lr_in, lr_var, lr_out) + [
            {"params": list(self.critic.parameters()), "lr": lr_critic, "name": "critic"}]


def make_policy(cfg: Config, backend=None) -> ActorCritic:
    spec, common = cfg.spec, algorithm.policy_options(cfg, backend) | {"encoding": cfg.encoding}
    actor = GaussianPQC(**common) if spec.continuous else SoftmaxPQC(beta=cfg.beta, **common)  # Gaussian: [-1, 1]^d
    return ActorCritic(actor, spec.n_features, cfg.critic_hidden, seed=cfg.seed)


def make_optimizer(policy: ActorCritic, cfg: Config) -> torch.optim.Optimizer:
    return torch.optim.Adam(policy.param_groups(cfg.lr_in, cfg.lr_var, cfg.lr_out, setting(cfg, "lr_critic")), eps=1e-5)


# --- the actor -------------------------------------------------------------------------------

def make_envs(cfg: Config) -> gym.vector.SyncVectorEnv:
    return vector_env(cfg.spec, cfg.num_envs)


def episodes_per_update(cfg: Config) -> int:
    """The fewest episodes a rollout completes when ``num_steps`` >= the env's time limit; a rough count otherwise."""
    return cfg.num_envs * max(1, cfg.num_steps // cfg.spec.max_episode_steps())


def act(policy: ActorCritic, envs: gym.vector.SyncVectorEnv, cfg: Config, step: int,
        carry: dict | None = None) -> tuple[Batch, dict | None]:
    """Update ``step``'s rollout: ``(batch, carry)``; running observation statistics go on from the carry's."""
    encode = ObsEncoder(cfg.spec, (carry or {}).get("obs_stats"))
    batch = rollout(policy, envs, cfg.spec, cfg.num_steps, seed=[cfg.seed, step],
                    learner_rows=setting(cfg, "update_epochs") * cfg.num_envs * cfg.num_steps, encode=encode)
    stats = ObsEncoder.merge(encode.start, [encode])
    return batch, None if stats is None else {"obs_stats": stats}


@torch.no_grad()
def rollout(policy: ActorCritic, envs: gym.vector.SyncVectorEnv, spec: EnvSpec, num_steps: int, seed,
            learner_rows: int = 0, encode: Callable | None = None) -> Batch:
    """``num_steps`` steps of every env from fresh, seeded episodes; ``encode``: None is ``spec.encode``."""
    rng = np.random.default_rng(seed)
    n, encode = envs.num_envs, encode or spec.encode
    obs = encode(envs.reset(seed=[int(s) for s in rng.integers(0, 2**31 - 1, n)])[0])
    states = np.empty((num_steps, *obs.shape), np.float32)
    actions = (np.empty((num_steps, n, policy.actor.n_actions), np.float32) if policy.continuous
               else np.empty((num_steps, n), np.int64))
    log_probs, values = np.empty((num_steps, n), np.float32), np.empty((num_steps, n), np.float32)
    rewards, dones = np.empty((num_steps, n)), np.empty((num_steps, n), bool)
    running, steps, finished, lengths = np.zeros(n), np.zeros(n, np.int64), [], []  # running episodes; completed
    twin, offsets = policy.actor.twin is not None, []
    for t in range(num_steps):
        s = torch.from_numpy(obs)
        q = policy.actor.expectations(s)  # the circuit's values: one job
        if twin:
            offsets.append(twin_offsets(policy, s, q))
        if policy.continuous:  # a ~ N(mean, std), drawn from the rollout's generator
            d, v = policy.actor.dist_of(q), policy.value(s)
            mean, std = d.base_dist.loc.double().numpy(), d.base_dist.scale.double().numpy()
            a = (mean + std * rng.standard_normal(mean.shape)).astype(np.float32)
            log_probs[t] = d.log_prob(torch.from_numpy(a).to(d.base_dist.loc.dtype)).numpy()
        else:  # inverse-CDF sampling: the first action whose cumulative probability exceeds u
            logp, v = torch.log_softmax(policy.actor.readout(q), dim=-1), policy.value(s)
            logp = logp.double().numpy()
            a = np.minimum((rng.random(n)[:, None] > np.cumsum(np.exp(logp), axis=1)).sum(axis=1), logp.shape[1] - 1)
            log_probs[t] = logp[np.arange(n), a]
        states[t], actions[t], values[t] = obs, a, v.numpy()
        raw, rewards[t], terminated, truncated, _ = envs.step(spec.env_actions(a))
        dones[t] = terminated | truncated
        running, steps = running + rewards[t], steps + 1
        finished.extend(running[dones[t]])
        lengths.extend(steps[dones[t]])
        running[dones[t]], steps[dones[t]] = 0.0, 0
        if dones[t].any():  # new seeded episodes in the envs that finished
            raw = reset_finished(envs, dones[t], rng)
        obs = encode(raw)
    last_values = policy.value(torch.from_numpy(obs)).numpy()
    return Batch(states, actions, log_probs, rewards, dones, values, last_values, np.array(finished),
                 num_steps * n + learner_rows, episode_lengths=np.array(lengths, np.int64),
                 offsets=np.stack(offsets) if twin else None)


def within_budget(batch: Batch, cfg: Config, episodes: int) -> Batch:
    """The batch as if the rollout had stopped on the step that ended its ``episodes``-th episode (``episodes``
    >= 1), so that a run completes exactly its episode budget: every env's steps up to that one, the
    unfinished episodes cut there (bootstrapped from V, as a rollout's end cuts them). An episode of
    another env that ended on that same step beyond the budget loses the step (cut just before it)."""
    if len(batch.episode_returns) <= episodes:
        return batch
    ends = np.argwhere(batch.dones)  # (step, env), in the order the rollout recorded the episodes' ends
    t = int(ends[episodes - 1][0])
    kept = np.full(batch.dones.shape[1], t + 1)
    late = ends[episodes:]
    kept[late[late[:, 0] == t, 1]] = t
    after = batch.values[t + 1] if t + 1 < len(batch.values) else batch.last_values
    bootstrap = np.where(kept == t + 1, after, batch.values[t]).astype(batch.last_values.dtype)
    dropped = batch.rewards.size - int(kept.sum())
    cut = [a[:t + 1] for a in (batch.states, batch.actions, batch.log_probs, batch.rewards, batch.dones, batch.values)]
    return Batch(*cut, bootstrap, batch.episode_returns[:episodes],
                 batch.circuit_evals - setting(cfg, "update_epochs") * dropped,  # rows the learner no longer runs
                 None if (kept == t + 1).all() else kept,
                 batch.steps_taken if batch.steps_taken >= 0 else batch.rewards.size,
                 None if batch.episode_lengths is None else batch.episode_lengths[:episodes],
                 None if batch.offsets is None else batch.offsets[:t + 1])


# --- the learner -----------------------------------------------------------------------------

def gae(rewards, values, dones, last_values, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation over time-major ``[T, N]`` arrays: (advantages, returns = A + V), with
    δ_t = r_t + γ (1 - done_t) V_{t+1} - V_t, V_T = ``last_values`` (the bootstrap of the episodes the rollout
    cut), and A_t = δ_t + γ λ (1 - done_t) A_{t+1}."""
    rewards, values = np.asarray(rewards, np.float64), np.asarray(values, np.float64)
    alive = 1.0 - np.asarray(dones, np.float64)
    next_values = np.concatenate([values[1:], np.asarray(last_values, np.float64)[None]])
    advantages = np.empty_like(rewards)
    acc = np.zeros(rewards.shape[1:])
    for t in range(len(rewards) - 1, -1, -1):
        delta = rewards[t] + gamma * alive[t] * next_values[t] - values[t]
        acc = delta + gamma * lam * alive[t] * acc
        advantages[t] = acc
    return advantages, advantages + values


def _advantages(batch: Batch, cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """``gae`` of the batch; where its envs keep different numbers of steps (``kept``), env by env (the rest 0)."""
    if batch.kept is None:
        return gae(batch.rewards, batch.values, batch.dones, batch.last_values, cfg.gamma, cfg.gae_lambda)
    advantages, returns = np.zeros(batch.rewards.shape), np.zeros(batch.rewards.shape)
    for i, k in enumerate(batch.kept):
        env = (a[:k, i:i + 1] for a in (batch.rewards, batch.values, batch.dones))
        advantages[:k, i:i + 1], returns[:k, i:i + 1] = gae(*env, batch.last_values[i:i + 1], cfg.gamma, cfg.gae_lambda)
    return advantages, returns


def clipped_objective(new_log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                      clip_coef: float) -> torch.Tensor:
    """PPO's policy loss: mean of max(-A · ρ, -A · clip(ρ, 1-ε, 1+ε)), ρ = π/π_old (minimized)."""
    ratio = torch.exp(new_log_probs - old_log_probs)
    return torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()


def learn(policy: ActorCritic, optimizer, batch: Batch, cfg: Config, extra, step: int) -> tuple[dict, None]:
    """GAE, then the minibatch steps (drawn from ``(cfg.seed, step, 1)``); the metrics are the means over the steps."""
    advantages, returns = _advantages(batch, cfg)
    mask, dtype = batch.mask(), policy.actor.output.dtype  # a[mask]: time-major rows [T * N, ...] the learner takes
    states, actions = torch.from_numpy(batch.states[mask]), torch.from_numpy(batch.actions[mask])
    old_log_probs = torch.from_numpy(batch.log_probs[mask]).to(dtype)
    offsets = None if batch.offsets is None else torch.from_numpy(batch.offsets[mask])  # a twin's, as acted
    advantages, returns = (torch.as_tensor(a[mask], dtype=dtype) for a in (advantages, returns))
    rng = np.random.default_rng([cfg.seed, step, 1])
    clipped = [p for group in optimizer.param_groups for p in group["params"]]  # λ, θ, w, the critic
    rows = []
    for _ in range(setting(cfg, "update_epochs")):
        for mb in np.array_split(rng.permutation(len(actions)), cfg.num_minibatches):
            mb = torch.from_numpy(mb)
            offset = None if offsets is None else offsets[mb]
            if policy.continuous:
                d, values = policy.actor.dist(states[mb], offset), policy.value(states[mb])
                new_log_probs, entropy = d.log_prob(actions[mb].to(dtype)), d.entropy().mean()
            else:
                log_probs, values = policy(states[mb], offset)
                new_log_probs = log_probs.gather(1, actions[mb, None])[:, 0]
                entropy = -(log_probs.exp() * log_probs).sum(dim=1).mean()
            adv = advantages[mb]
            if cfg.norm_adv and len(mb) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = clipped_objective(new_log_probs, old_log_probs[mb], adv, cfg.clip_coef)
            v_loss = 0.5 * ((values - returns[mb]) ** 2).mean()
            loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(clipped, cfg.max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                log_ratio = new_log_probs - old_log_probs[mb]
                row = {"loss": loss, "policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy,
                       "approx_kl": ((log_ratio.exp() - 1) - log_ratio).mean(),  # Schulman's k3 estimator
                       "clipfrac": ((log_ratio.exp() - 1).abs() > cfg.clip_coef).float().mean()}
            rows.append({k: float(v.detach()) for k, v in row.items()})
    losses = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    return {"loss": losses.pop("loss"), "losses": losses}, extra


ALGORITHM = Algorithm("ppo", Config, make_policy, make_optimizer, make_envs, act, learn, episodes_per_update,
                      lambda cfg, rows: 1 + setting(cfg, "update_epochs") * rows,  # to act; the gradient every pass
                      # (a twin: 0 rows)
                      within_budget=within_budget)
