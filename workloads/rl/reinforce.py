"""REINFORCE with a softmax quantum policy (Jerbi et al. 2021), readable top to bottom.

The defaults reproduce the TensorFlow Quantum tutorial "Parametrized quantum circuits for
reinforcement learning": CartPole-v1, 4 qubits, 5 layers, 10 episodes per update, γ = 1,
Adam with learning rates 0.1 (λ), 0.01 (θ), 0.1 (w).

The loop is two fragments that a dataflow runtime can call on their own:

* ``collect(policy, params, envs, n_episodes, seed) -> Batch`` (the actor): runs the
  episodes side by side, one batched no-grad policy forward per time step, actions
  sampled with a numpy ``Generator`` seeded from ``seed`` (env resets too): deterministic.
* ``update(policy, optimizer, batch, cfg) -> dict`` (the learner): returns-to-go,
  normalized, and one Adam step on all of the batch's states in one forward+backward.

``train(cfg)`` alternates them until the agent is solved or ``max_episodes`` ran out.

    from hqflow.workloads.rl import reinforce
    out = reinforce.train(reinforce.Config(seed=1))
    print(out["episodes_to_solve"], out["seconds"])
"""
from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from hqflow.workloads.rl.envs import SyncEnvs, get_spec
from hqflow.workloads.rl.policies import ENCODINGS, SoftmaxPQC

NORMALIZE = ("batch", "episode", "none")


@dataclass(frozen=True)
class Config:
    env: str = "cartpole"
    """environment short name (``hqflow.workloads.rl.envs.SPECS``)"""
    n_qubits: int | None = None
    """circuit width; None takes the environment's (4 for CartPole)"""
    n_layers: int = 5
    """re-uploading layers of the policy circuit"""
    encoding: str = "plain"
    """state encoding: "plain" (λ·s), "tanh" (tanh(λ·s)) or "atan" (arctan(λ·s))"""
    beta: float = 1.0
    """inverse temperature of the softmax policy"""
    batch_episodes: int = 10
    """episodes collected per update (run side by side on as many envs)"""
    max_episodes: int = 1000
    """stop after this many episodes if not solved"""
    gamma: float = 1.0
    """discount factor of the returns-to-go"""
    lr_in: float = 0.1
    """Adam learning rate of the input scalings λ"""
    lr_var: float = 0.01
    """Adam learning rate of the circuit weights θ"""
    lr_out: float = 0.1
    """Adam learning rate of the readout weights w"""
    normalize: str = "batch"
    """returns normalization: "batch" ((G - mean) / (std + 1e-8) over all the batch's steps),
    "episode" (the same within each episode, as the TFQ tutorial's code does) or "none\""""
    baseline: bool = False
    """subtract a per-timestep baseline after normalizing: the mean normalized return at step t
    over the batch's episodes that lasted past t"""
    backend: str = "compiled"
    """backend of the policy circuit (compiled: autograd; others: parameter shift)"""
    seed: int = 0
    """seed of the initial weights, env resets and action sampling"""
    threads: int = 1
    """torch intra-op threads during training (1 is fastest for these tiny batches)"""
    solve_window: int = 10
    """solved when the mean return of the last ``solve_window`` episodes reaches the env's threshold"""
    stop_when_solved: bool = True
    """stop training at the first update after which the agent counts as solved"""

    def __post_init__(self):
        get_spec(self.env)  # ValueError naming the known environments
        if self.encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}; known: {', '.join(ENCODINGS)}")
        if self.normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {', '.join(NORMALIZE)}, got {self.normalize!r}")
        if self.batch_episodes < 1 or self.max_episodes < 1 or not 0 < self.gamma <= 1 or self.threads < 1:
            raise ValueError("need batch_episodes >= 1, max_episodes >= 1, 0 < gamma <= 1 and threads >= 1")


@dataclass
class Batch:
    """What the actor hands the learner: episodes laid out one after the other."""

    states: np.ndarray  # [T, n_features] float32, encoded
    actions: np.ndarray  # [T] int64
    rewards: np.ndarray  # [T] float64
    lengths: np.ndarray  # [n_episodes] steps of each episode (they sum to T)
    circuit_evals: int  # policy rows evaluated while collecting

    @property
    def n_steps(self) -> int:
        return len(self.actions)

    @property
    def episode_returns(self) -> np.ndarray:
        return np.add.reduceat(self.rewards, np.r_[0, np.cumsum(self.lengths)[:-1]])


def snapshot(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the policy's parameters (what an actor may run with while the learner moves on)."""
    return {k: v.detach().clone() for k, v in policy.named_parameters()}


# --- the actor -------------------------------------------------------------------------------

@torch.no_grad()
def collect(policy, params, envs: SyncEnvs, n_episodes: int, seed) -> Batch:
    """Run ``n_episodes`` episodes (in waves of ``len(envs)``) with the policy's current
    parameters, or with ``params`` (a ``snapshot``) when given."""
    if params is not None:
        return _with_params(policy, params, collect, policy, None, envs, n_episodes, seed)
    rng = np.random.default_rng(seed)
    reset_seeds = rng.integers(0, 2**31 - 1, n_episodes)
    encode, waves, evals = envs.spec.encode, [], 0
    for start in range(0, n_episodes, len(envs)):
        n = min(len(envs), n_episodes - start)
        obs = encode(envs.reset(reset_seeds[start: start + n]))  # [n, F]
        alive = np.arange(n)
        steps = []  # per time step: (env indices, states, actions, rewards)
        while alive.size:
            probs = policy(torch.from_numpy(obs)).double().numpy()  # [k, A]
            evals += alive.size
            u = rng.random(alive.size)[:, None]
            actions = np.minimum((u > np.cumsum(probs, axis=1)).sum(axis=1), probs.shape[1] - 1)
            raw, rewards, done = envs.step(alive, actions)
            steps.append((alive, obs, actions, rewards))
            alive, obs = alive[~done], encode(raw[~done])
        # episode-major layout: sort every step's rows by (env, time)
        env_ix = np.concatenate([s[0] for s in steps])
        order = np.argsort(env_ix, kind="stable")
        waves.append((np.concatenate([s[1] for s in steps])[order], np.concatenate([s[2] for s in steps])[order],
                      np.concatenate([s[3] for s in steps])[order], np.bincount(env_ix, minlength=n)))
    states, actions, rewards, lengths = (np.concatenate(parts) for parts in zip(*waves))
    return Batch(states, actions.astype(np.int64), rewards.astype(np.float64), lengths, evals)


def _with_params(policy, params, fn, *args):
    saved = snapshot(policy)
    try:
        with torch.no_grad():
            for k, p in policy.named_parameters():
                p.copy_(params[k])
        return fn(*args)
    finally:
        with torch.no_grad():
            for k, p in policy.named_parameters():
                p.copy_(saved[k])


# --- the learner -----------------------------------------------------------------------------

def returns_to_go(batch: Batch, cfg: Config) -> np.ndarray:
    """G_t = Σ_k γ^k r_{t+k} within each episode, normalized (and baselined) as ``cfg`` says: [T]."""
    bounds = np.r_[0, np.cumsum(batch.lengths)]
    G = np.empty_like(batch.rewards)
    for a, b in itertools.pairwise(bounds):
        acc = 0.0
        for t in range(b - 1, a - 1, -1):
            acc = batch.rewards[t] + cfg.gamma * acc
            G[t] = acc
    if cfg.normalize == "batch":
        G = (G - G.mean()) / (G.std() + 1e-8)
    elif cfg.normalize == "episode":
        for a, b in itertools.pairwise(bounds):
            G[a:b] = (G[a:b] - G[a:b].mean()) / (G[a:b].std() + 1e-8)
    if cfg.baseline:
        t = np.concatenate([np.arange(n) for n in batch.lengths])  # time step of every row
        G = G - (np.bincount(t, weights=G) / np.bincount(t))[t]
    return G


def update(policy, optimizer: torch.optim.Optimizer, batch: Batch, cfg: Config) -> dict:
    """One gradient step on loss = -Σ log π(a|s) · G / n_episodes (one batched forward+backward)."""
    G = torch.as_tensor(returns_to_go(batch, cfg), dtype=policy.output.dtype)
    log_probs = policy.log_probs(torch.from_numpy(batch.states))  # [T, A]
    chosen = log_probs.gather(1, torch.from_numpy(batch.actions)[:, None])[:, 0]
    loss = -(chosen * G).sum() / len(batch.lengths)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    returns = batch.episode_returns
    return {"loss": float(loss.detach()), "mean_return": float(returns.mean()), "steps": len(batch.actions)}


# --- the loop --------------------------------------------------------------------------------

def make_policy(cfg: Config) -> SoftmaxPQC:
    spec = get_spec(cfg.env)
    return SoftmaxPQC(n_qubits=cfg.n_qubits or spec.n_qubits, n_layers=cfg.n_layers, n_actions=spec.n_actions,
                      encoding=cfg.encoding, beta=cfg.beta, backend=cfg.backend, seed=cfg.seed)


def train(cfg: Config = Config(), progress=None) -> dict:
    """Alternate ``collect`` and ``update``; ``progress(episodes_done, metrics)`` after each update.

    Returns the config, per-episode ``returns``, ``episodes_to_solve`` (the episode count at
    the first update after which the last ``solve_window`` returns average at least the
    env's threshold; None if never), ``seconds``, ``env_steps``, ``env_steps_per_s``,
    ``circuit_evals`` (actor rows + learner rows), ``circuit_evals_per_s`` and the final
    ``params`` (a ``snapshot``).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        spec = get_spec(cfg.env)
        policy = make_policy(cfg)
        optimizer = torch.optim.Adam(policy.param_groups(cfg.lr_in, cfg.lr_var, cfg.lr_out))
        envs = SyncEnvs(spec, cfg.batch_episodes)
        returns, solved_at, env_steps, evals = [], None, 0, 0
        t0 = time.perf_counter()
        for k in range(-(-cfg.max_episodes // cfg.batch_episodes)):
            n = min(cfg.batch_episodes, cfg.max_episodes - len(returns))
            batch = collect(policy, None, envs, n, seed=[cfg.seed, k])
            metrics = update(policy, optimizer, batch, cfg)
            returns += batch.episode_returns.tolist()
            env_steps += len(batch.actions)
            evals += batch.circuit_evals + len(batch.actions)
            window = returns[-cfg.solve_window:]
            if solved_at is None and len(window) == cfg.solve_window and np.mean(window) >= spec.solved:
                solved_at = len(returns)
            if progress is not None:
                progress(len(returns), metrics)
            if solved_at is not None and cfg.stop_when_solved:
                break
        seconds = time.perf_counter() - t0
        envs.close()
    finally:
        torch.set_num_threads(threads)
    return {"config": asdict(cfg), "returns": returns, "episodes_to_solve": solved_at, "seconds": seconds,
            "env_steps": env_steps, "env_steps_per_s": env_steps / seconds, "circuit_evals": evals,
            "circuit_evals_per_s": evals / seconds, "params": snapshot(policy)}


# --- the fragment protocol of hqflow.workloads.rl.runner (the same loop as a dataflow graph) ---

def make_optimizer(policy, cfg: Config) -> torch.optim.Optimizer:
    return torch.optim.Adam(policy.param_groups(cfg.lr_in, cfg.lr_var, cfg.lr_out))


def make_envs(cfg: Config) -> SyncEnvs:
    return SyncEnvs(get_spec(cfg.env), cfg.batch_episodes)


def init_extra(cfg: Config, policy) -> None:
    return None  # REINFORCE's learner keeps nothing but its parameters and Adam's state


def episodes_per_update(cfg: Config) -> int:
    return cfg.batch_episodes


def solved_threshold(cfg: Config) -> float:
    return get_spec(cfg.env).solved


def act(policy, envs: SyncEnvs, cfg: Config, step: int) -> Batch:
    """Update ``step``'s episodes: the same seeds as ``train`` uses."""
    n = min(cfg.batch_episodes, cfg.max_episodes - step * cfg.batch_episodes)
    return collect(policy, None, envs, n, seed=[cfg.seed, step])


def learn(policy, optimizer, batch: Batch, cfg: Config, extra, step: int) -> tuple[dict, None]:
    metrics = update(policy, optimizer, batch, cfg)
    return {"loss": metrics["loss"], "circuit_evals": batch.n_steps}, None


__all__ = ["Batch", "Config", "act", "collect", "learn", "make_envs", "make_optimizer", "make_policy",
           "returns_to_go", "snapshot", "train", "update"]
