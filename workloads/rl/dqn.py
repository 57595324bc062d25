"""Deep Q-learning with a quantum Q-function (Skolik et al. 2022), readable top to bottom.

"Quantum agents in the Gym: a variational quantum algorithm for deep Q-learning" (Skolik, Jerbi, Dunjko, Quantum
6, 720, 2022), as the TensorFlow Quantum tutorial "Parametrized quantum circuits for reinforcement learning" does:

* Q-function: ``QValuePQC``, the re-uploading circuit with trainable input scalings λ and Q(s, a) = w_a · (1 +
  <O_a>) / 2 with output weights w (start at 1). CartPole: 4 qubits, 5 layers, O = (Z0Z1, Z2Z3), angles arctan(λ·s)
  (Skolik's continuous encoding; s is the env's bounded state, see ``envs``). FrozenLake (4x4, not slippery): the
  state index in binary on 4 qubits (RX(λ·π·b)), O_a = Z_a.
* Skolik et al.'s values: replay memory of 10 000 transitions, minibatches of 16 drawn uniformly with replacement,
  γ = 0.99, ε-greedy with ε = max(0.01, 0.99^episode) (decayed once per episode), Adam with learning rates 0.001
  (λ), 0.001 (θ), 0.1 (w) (AMSGrad, as in the tutorial).
* The TFQ tutorial's values: a gradient step every ``train_every`` = 10 env steps, the target network copied every
  ``target_every`` = 30 env steps, Huber loss (δ = 1). (Skolik et al.'s own code trains and copies the target every
  step, with the mean squared error: ``train_every=1, target_every=1, loss="mse"``; ten times the learner's work.)
* FrozenLake (Skolik et al.'s setting): γ = 0.8, w fixed at 1 (``lr_out=0``), a gradient step every env step.
* Targets r + γ · max_a' Q_target(s', a') bootstrap except on terminal states; a time-limit truncation (CartPole's
  500 steps, FrozenLake's 100) still bootstraps. Returns (and ``solve_window``) are the ε-greedy training episodes'.

The actor (``act``) runs ``episodes_per_update`` episodes side by side, ε-greedy (ε from the episode index), seeded
from ``(seed, step)``, with the parameters it was handed (older under a pipelined distribution: fine off-policy).
The learner (``learn``) replays them into the memory in order, with the gradient steps and target copies due.

Train it with ``hqflow train frozenlake --algo dqn`` or ``runner.train("dqn", dqn.Config(env="frozenlake"))``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from hqflow.gradients import GradientMethod
from hqflow.workloads.rl import algorithm
from hqflow.workloads.rl.algorithm import Algorithm, params, setting
from hqflow.workloads.rl.envs import EnvSpec, FreshEnvs, ObsEncoder
from hqflow.workloads.rl.policies import QValuePQC

LOSSES = ("huber", "mse")
_CARTPOLE = {"encoding": "atan", "gamma": 0.99, "train_every": 10, "lr_out": 0.1, "solve_window": 10}


@dataclass(frozen=True)
class Config(algorithm.Config):
    encoding: str | None = None
    """as ``algorithm.Config``'s; None: "atan" (Skolik's continuous encoding) for CartPole and Acrobot,
    "plain" for FrozenLake's binary encoding"""
    max_episodes: int = 2000
    gamma: float | None = None
    """discount factor; None: 0.99 (CartPole, Acrobot), 0.8 (FrozenLake)"""
    lr_in: float = 0.001
    lr_var: float = 0.001
    lr_out: float | None = None
    """Adam learning rate of the output weights w; None: 0.1, but 0 (w fixed at 1) for FrozenLake,
    whose Q-values already lie in [0, 1] like (1 + <Z>) / 2, as in Skolik et al.; a trainable w
    there shrinks towards 0 before the first goal is reached and the agent never learns"""
    solve_window: int | None = None
    """as ``algorithm.Config``'s; None: 10 (CartPole: mean 500), 100 (FrozenLake: 100 successes out of 100)"""
    observables: tuple[str, ...] | None = None
    """one observable per action; None: the qubits split into as many groups as actions, O_a the
    product of Z over group a (CartPole: Z0Z1, Z2Z3; FrozenLake: Z0, Z1, Z2, Z3)"""
    memory: int = 10_000
    """replay memory capacity (transitions; the oldest is overwritten first)"""
    batch_size: int = 16
    """transitions per gradient step, drawn uniformly with replacement from the memory"""
    train_every: int | None = None
    """env steps between gradient steps (the first once the memory holds ``batch_size``); None: 10 (CartPole,
    Acrobot: the TFQ tutorial's), 1 (FrozenLake: as Skolik et al.'s code; short episodes, one rare reward)"""
    target_every: int = 30
    """env steps between copies of the parameters into the target network"""
    loss: str = "huber"
    """TD loss: "huber" (δ = 1, the TFQ tutorial's) or "mse" (Skolik et al.'s code)"""
    eps_start: float = 1.0
    """ε of the first episode"""
    eps_min: float = 0.01
    """ε never decays below this"""
    eps_decay: float = 0.99
    """ε of episode e is max(eps_min, eps_start · eps_decay^e)"""
    amsgrad: bool = True
    """use the AMSGrad variant of Adam (as the TFQ tutorial does)"""
    episodes_per_update: int = 1
    """episodes per actor call (run side by side on as many envs); the learner then takes
    the gradient steps those episodes' env steps are due"""

    ENV_DEFAULTS: ClassVar[dict] = {"*": _CARTPOLE, "cartpole": _CARTPOLE, "acrobot": _CARTPOLE,
                                    "frozenlake": {"encoding": "plain", "gamma": 0.8, "train_every": 1,
                                                   "lr_out": 0.0, "solve_window": 100}}

    def check(self, spec: EnvSpec) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.eps_min > self.eps_start:
            raise ValueError(f"need 0 <= eps_min <= eps_start <= 1 and 0 < eps_decay <= 1, got eps_min="
                             f"{self.eps_min}, eps_start={self.eps_start}, eps_decay={self.eps_decay}")
        if self.memory < self.batch_size:
            raise ValueError(f"memory ({self.memory}) must hold at least one batch ({self.batch_size})")
        n_obs = len(observables(self))
        if n_obs != spec.n_actions:
            raise ValueError(f"{self.env} has {spec.n_actions} actions: need as many observables, got {n_obs}")


def observables(cfg: Config) -> tuple[str, ...]:
    """The observable of each action: ``cfg.observables`` or Z-products over equal groups of qubits."""
    if cfg.observables is not None:
        return tuple(cfg.observables)
    n_qubits, n_actions = cfg.n_qubits or cfg.spec.n_qubits, cfg.spec.n_actions
    size = n_qubits // n_actions
    if size < 1:
        raise ValueError(f"{n_qubits} qubits cannot give {n_actions} actions one qubit each; pass observables")
    return tuple(" ".join(f"Z{q}" for q in range(a * size, (a + 1) * size)) for a in range(n_actions))


def epsilon(cfg: Config, episode) -> np.ndarray:
    """ε of episode ``episode`` (0-based; an int or an array): max(eps_min, eps_start · eps_decay^episode)."""
    return np.maximum(cfg.eps_min, cfg.eps_start * cfg.eps_decay ** np.asarray(episode, dtype=np.float64))


@dataclass
class Batch:
    """What the actor hands the learner: transitions in the order they happened."""

    states: np.ndarray  # [T, n_features] float32, encoded s_t
    actions: np.ndarray  # [T] int64
    rewards: np.ndarray  # [T] float32
    next_states: np.ndarray  # [T, n_features] float32, encoded s_{t+1}
    terminated: np.ndarray  # [T] bool: s_{t+1} is terminal (no bootstrap); a time-limit truncation is not
    episode_returns: np.ndarray  # [n_episodes] float64, in episode order
    circuit_evals: int  # Q-function rows evaluated while acting (greedy steps only)
    episode_lengths: np.ndarray | None = None  # [n_episodes] steps of each episode
    steps_taken: int = -1  # env steps the actor ran (-1: n_steps; always, since episodes end within an update)

    @property
    def n_steps(self) -> int:
        return len(self.actions)


# --- the policy ------------------------------------------------------------------------------

def make_policy(cfg: Config, backend=None) -> QValuePQC:
    return QValuePQC(encoding=setting(cfg, "encoding"), observables=observables(cfg),
                     **algorithm.policy_options(cfg, backend))


def make_optimizer(policy, cfg: Config) -> torch.optim.Optimizer:
    return torch.optim.Adam(policy.param_groups(cfg.lr_in, cfg.lr_var, setting(cfg, "lr_out")), amsgrad=cfg.amsgrad)


# --- the actor -------------------------------------------------------------------------------

def make_envs(cfg: Config) -> FreshEnvs:
    return FreshEnvs(cfg.spec, cfg.episodes_per_update)


@torch.no_grad()
def act(policy, envs: FreshEnvs, cfg: Config, step: int, carry: dict | None = None) -> tuple[Batch, dict | None]:
    """Update ``step``'s episodes, ε-greedy: ``(batch, carry)``; the carry holds ``running`` encoding's statistics."""
    first = step * cfg.episodes_per_update
    n = min(cfg.episodes_per_update, cfg.max_episodes - first)
    rng, eps = np.random.default_rng([cfg.seed, step]), epsilon(cfg, first + np.arange(n))
    encode = ObsEncoder(envs.spec, (carry or {}).get("obs_stats"))
    obs = encode(envs.reset(rng.integers(0, 2**31 - 1, n)))
    alive, returns, lengths, rows, evals = np.arange(n), np.zeros(n), np.zeros(n, np.int64), [], 0
    while alive.size:
        greedy = rng.random(alive.size) >= eps[alive]
        actions = rng.integers(0, envs.spec.n_actions, alive.size)
        if greedy.any():
            actions[greedy] = policy(torch.from_numpy(obs[greedy])).argmax(dim=1).numpy()
            evals += int(greedy.sum())
        raw, rewards, terminated, truncated = envs.step(alive, actions)
        next_obs = encode(raw)
        rows.append((obs, actions, rewards, next_obs, terminated))
        returns[alive] += rewards
        lengths[alive] += 1
        done = terminated | truncated
        alive, obs = alive[~done], next_obs[~done]
    s, a, r, s2, term = (np.concatenate(parts) for parts in zip(*rows))
    stats = ObsEncoder.merge(encode.start, [encode])
    return Batch(s, a.astype(np.int64), r.astype(np.float32), s2, term, returns, evals, lengths), \
        None if stats is None else {"obs_stats": stats}


# --- the learner -----------------------------------------------------------------------------

def init_extra(cfg: Config, policy) -> dict:
    """The learner's own state: an empty replay memory, the target network (= the policy) and counters."""
    n = cfg.spec.n_features
    return {"states": np.zeros((cfg.memory, n), np.float32), "actions": np.zeros(cfg.memory, np.int64),
            "rewards": np.zeros(cfg.memory, np.float32), "next_states": np.zeros((cfg.memory, n), np.float32),
            "terminated": np.zeros(cfg.memory, bool), "size": 0, "pos": 0,
            "env_steps": 0, "updates": 0, "target": params(policy)}


def td_update(policy, optimizer, mem: dict, rng: np.random.Generator, cfg: Config) -> tuple[float, float]:
    """A gradient step on a minibatch of ``mem``, loss(Q(s, a), r + γ · max_a' Q_target(s', a')): (loss, mean Q)."""
    i = rng.integers(0, mem["size"], cfg.batch_size)
    s, a, s2 = (torch.from_numpy(mem[k][i]) for k in ("states", "actions", "next_states"))
    with torch.no_grad():
        q_next = torch.func.functional_call(policy, mem["target"], (s2,)).max(dim=1).values  # one batched forward
        alive = torch.from_numpy(~mem["terminated"][i]).to(q_next.dtype)
        target = torch.from_numpy(mem["rewards"][i]).to(q_next.dtype) + setting(cfg, "gamma") * alive * q_next
    q = policy(s).gather(1, a[:, None])[:, 0]  # one batched forward (and backward)
    loss = F.huber_loss(q, target, delta=1.0) if cfg.loss == "huber" else F.mse_loss(q, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.detach()), float(q.detach().mean())


def learn(policy, optimizer, batch: Batch, cfg: Config, extra: dict, step: int) -> tuple[dict, dict]:
    """Replay the batch into the memory, with the gradient steps and target copies its env steps are due:
    ``({"loss": mean loss of its gradient steps, nan if none, ...}, new extra)``; ``extra`` is left as it was."""
    mem = {k: v.copy() if isinstance(v, np.ndarray | dict) else v for k, v in extra.items()}
    rng = np.random.default_rng([cfg.seed, step, 1])
    updates = []  # (loss, mean Q) of each gradient step
    for t in range(batch.n_steps):
        i = mem["pos"]
        mem["states"][i], mem["actions"][i], mem["rewards"][i] = batch.states[t], batch.actions[t], batch.rewards[t]
        mem["next_states"][i], mem["terminated"][i] = batch.next_states[t], batch.terminated[t]
        mem["pos"], mem["size"] = (i + 1) % cfg.memory, min(mem["size"] + 1, cfg.memory)
        mem["env_steps"] += 1
        if mem["env_steps"] % setting(cfg, "train_every") == 0 and mem["size"] >= cfg.batch_size:
            updates.append(td_update(policy, optimizer, mem, rng, cfg))
            mem["updates"] += 1
        if mem["env_steps"] % cfg.target_every == 0:
            mem["target"] = params(policy)
    loss = float(np.mean([u[0] for u in updates])) if updates else float("nan")
    means = {"td_loss": loss, "q_values": float(np.mean([u[1] for u in updates]))} if updates else {}
    return {"loss": loss, "losses": means, "circuit_evals": 2 * cfg.batch_size * len(updates)}, mem  # Q, Q_target


ALGORITHM = Algorithm("dqn", Config, make_policy, make_optimizer, make_envs, act, learn,
                      lambda cfg: cfg.episodes_per_update,
                      # at most one circuit to act (greedy steps), and every train_every steps a gradient step:
                      # Q(s) with its gradient and the target's Q(s') for batch_size transitions
                      lambda cfg, rows: 1 + (cfg.gradient is not GradientMethod.TWIN) * cfg.batch_size * (rows + 1) / setting(
                          cfg, "train_every"),  # (a twin's learner runs no circuit: Q and Q_target on the twin)
                      init_extra=init_extra)
