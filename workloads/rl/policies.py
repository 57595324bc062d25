"""Quantum policies for reinforcement learning: torch modules around an hqflow circuit.

``pqc_template`` is the data re-uploading circuit of Jerbi et al. 2021, as in the TensorFlow Quantum tutorial
"Parametrized quantum circuits for reinforcement learning", read out by ``SoftmaxPQC`` (π(a|s), Jerbi et al.),
``QValuePQC`` (Q(s, a), Skolik et al. 2022) or ``GaussianPQC`` (continuous actions). Encodings (``encoding=``)
turn the scaled state λ·s into the angle x: ``"plain"`` x = λ·s (the tutorial's default), ``"tanh"`` x =
tanh(λ·s) (its ``activation="tanh"``), ``"atan"`` x = arctan(λ·s) (Skolik et al.'s continuous encoding, angles
in (-π/2, π/2)). State feature f feeds qubit f; missing features (fewer than qubits) are zeros: angle 0.

Every policy's circuit is a ``hqflow.torch.QuantumLayer`` (its ``weights`` are θ), so backends and gradients are
the layer's (the README's "Policies"); a forward pass off process is one job, parameter-shift rows included
(``gradient_in_forward=True``): a learner step is one job. A twin policy (``circuit={"gradient": "twin", ...}``)
acts on its backend and learns on its local twin (``learning_on_twin``, ``twin_offsets``; the README's "Act on the
QPU, differentiate a twin").
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
from hqflow.backends import CircuitBatch
from hqflow.ir import Circuit, CircuitTemplate
from torch import nn

from hqflow.torch import QuantumLayer

ENCODINGS = ("plain", "tanh", "atan")


def pqc_template(n_qubits: int = 4, n_layers: int = 5, observables=None) -> CircuitTemplate:
    """The re-uploading circuit: ``n_layers`` layers of RX(w)·RY(w)·RZ(w) on every qubit, a CZ ring CZ(q, q+1 mod n)
    (one CZ for n = 2) and RX(x) on every qubit, then one more variational layer. Inputs ``x[l*n + q]`` (layer l,
    qubit q) arrive scaled (λ·s in torch: a circuit angle is affine in one symbol); weights ``w[3*(l*n + q) + k]``."""
    if n_qubits < 1 or n_layers < 1:
        raise ValueError(f"need n_qubits >= 1 and n_layers >= 1, got {n_qubits} and {n_layers}")
    c = Circuit(n_qubits, name=f"reupload{n_qubits}x{n_layers}")
    x = c.inputs("x", n_qubits * n_layers)
    w = c.weights("w", 3 * n_qubits * (n_layers + 1))

    def variational(layer: int) -> None:
        for q in range(n_qubits):
            k = 3 * (layer * n_qubits + q)
            c.rx(w[k], q).ry(w[k + 1], q).rz(w[k + 2], q)

    ring = [(q, (q + 1) % n_qubits) for q in range(n_qubits)] if n_qubits > 2 else [(0, 1)][: n_qubits - 1]
    for layer in range(n_layers):
        variational(layer)
        for a, b in ring:
            c.cz(a, b)
        for q in range(n_qubits):
            c.rx(x[layer * n_qubits + q], q)
    variational(n_layers)
    every_z = [" ".join(f"Z{q}" for q in range(n_qubits))]
    return c.build(observables=every_z if observables is None else list(observables))


class Acting:
    """``act(obs)``: a policy's greedy action for one raw observation, as the environment takes it: encoded with
    ``env_spec`` (running statistics included), the policy's ``greedy`` choice, the env's action (index or point)."""

    env_spec = None  # an ``envs.EnvSpec``; set by ``load_policy``

    def greedy(self, features) -> np.ndarray:
        """The greedy action per row: the index of the largest output (a policy with other outputs overrides it)."""
        return self._outputs(features).argmax(dim=-1).cpu().numpy()

    def act(self, obs):
        """The environment's action for one raw observation ``obs`` (greedy: no exploration)."""
        if self.env_spec is None:
            raise ValueError("act(obs) needs the environment's encoding: use the policy that "
                             "hqflow.workloads.rl.load_policy(run_dir) returns, or set policy.env_spec")
        return self.env_spec.env_action(self.greedy(self.env_spec.encode(obs))[0])

    @torch.no_grad()
    def _outputs(self, features) -> torch.Tensor:
        return self(torch.as_tensor(np.asarray(features), dtype=torch.float32))


class _PQC(Acting, QuantumLayer):
    """The shared body: scaled, encoded states -> expectation values [B, n_obs]; the circuit layer itself."""

    def __init__(self, n_qubits, n_layers, observables, encoding, backend, seed, dtype, output: list[float],
                 circuit: dict | None = None):
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}; known: {', '.join(ENCODINGS)}")
        template = pqc_template(n_qubits, n_layers, observables)
        gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        weights = torch.rand(template.n_weights, generator=gen, dtype=dtype) * math.pi
        QuantumLayer.__init__(self, template, backend, weights=weights, dtype=dtype, gradient_in_forward=True,
                              **(circuit or {}))  # shots and gradient estimator (QuantumLayer's keywords)
        self.n_qubits, self.n_layers, self.encoding = n_qubits, n_layers, encoding
        self.input_scaling = nn.Parameter(torch.ones(n_layers, n_qubits, dtype=dtype))
        self.n_actions, self.output = len(output), nn.Parameter(torch.tensor(output, dtype=dtype))  # readout w
        self.shard: tuple[int, int] | None = None  # (rank, size): see shard_rows
        self.on_twin = False  # the learner of a twin policy: values from the twin (see learning_on_twin)

    def angles(self, states: torch.Tensor) -> torch.Tensor:
        """Circuit inputs [B, n_layers*n_qubits]: the encoded λ·s, layer-major."""
        s = torch.as_tensor(states, dtype=self.input_scaling.dtype)
        if s.ndim != 2 or s.shape[1] > self.n_qubits:
            raise ValueError(f"states must have shape [B, n_features] with n_features <= n_qubits "
                             f"({self.n_qubits}), got {list(s.shape)}")
        if s.shape[1] < self.n_qubits:
            s = torch.nn.functional.pad(s, (0, self.n_qubits - s.shape[1]))
        x = self.input_scaling[None] * s[:, None, :]  # [B, L, n]
        if self.encoding != "plain":
            x = torch.tanh(x) if self.encoding == "tanh" else torch.atan(x)
        return x.reshape(s.shape[0], -1)

    def expectations(self, states: torch.Tensor, offset=None) -> torch.Tensor:
        """<O_k> for every observable: [B, n_obs]. On the twin (``learning_on_twin``): the twin's, plus ``offset``
        [B, n_obs] where given (``twin_offsets`` of the rows as they were acted)."""
        if self.on_twin:
            out = self.twin_values(self.angles(states))
            return out if offset is None else out + torch.as_tensor(offset, dtype=out.dtype, device=out.device)
        if self.shard is not None and torch.is_grad_enabled():
            return self._sharded(states, *self.shard)
        return QuantumLayer.forward(self, self.angles(states))

    def _sharded(self, states, rank: int, size: int) -> torch.Tensor:
        """Rows ``[B·rank/size, B·(rank+1)/size)`` with gradients; the others' values only (no gradient jobs)."""
        n = len(states)
        a, b = n * rank // size, n * (rank + 1) // size
        self.shard = None
        try:
            parts = [self.expectations(states[a:b])] if b > a else []
            with torch.no_grad():
                if a > 0:
                    parts.insert(0, self.expectations(states[:a]))
                if n > b:
                    parts.append(self.expectations(states[b:]))
        finally:
            self.shard = (rank, size)
        return torch.cat(parts)

    def param_groups(self, lr_in: float = 0.1, lr_var: float = 0.01, lr_out: float = 0.1) -> list[dict]:
        """Optimizer groups: λ (``input_scaling``), θ (``weights``), w (``output``)."""
        return [{"params": [self.input_scaling], "lr": lr_in, "name": "input_scaling"},
                {"params": [self.weights], "lr": lr_var, "name": "weights"},
                {"params": [self.output], "lr": lr_out, "name": "output"}]


class SoftmaxPQC(_PQC):
    """π(a|s) = softmax_a(β · w_a · <O>) (Jerbi et al.; the TFQ tutorial's ``Alternating``: w starts at (-1)^a)."""

    def __init__(self, n_qubits: int = 4, n_layers: int = 5, n_actions: int = 2, encoding: str = "plain",
                 beta: float = 1.0, observable: str | None = None, backend="compiled",
                 seed: int | None = None, dtype: torch.dtype = torch.float32, circuit: dict | None = None):
        super().__init__(n_qubits, n_layers, None if observable is None else [observable], encoding, backend,
                         seed, dtype, [(-1.0) ** a for a in range(n_actions)], circuit)
        self.beta = float(beta)

    def readout(self, values: torch.Tensor) -> torch.Tensor:
        """The logits β · w_a · <O> of the circuit's values [B, n_obs]."""
        return self.beta * values[:, :1] * self.output[None]

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """Action probabilities [B, n_actions]."""
        return torch.softmax(self.readout(self.expectations(states)), dim=-1)

    def log_probs(self, states: torch.Tensor, offset=None) -> torch.Tensor:
        """log π(a|s) for every action: [B, n_actions] (``offset``: ``expectations``')."""
        return torch.log_softmax(self.readout(self.expectations(states, offset)), dim=-1)


class QValuePQC(_PQC):
    """Q(s, a) = w_a · (1 + <O_a>) / 2 (Skolik et al.; the TFQ tutorial's ``Rescaling`` layer: w starts at ones)."""

    def __init__(self, n_qubits: int = 4, n_layers: int = 5, n_actions: int = 2, encoding: str = "plain",
                 observables=("Z0 Z1", "Z2 Z3"), backend="compiled", seed: int | None = None,
                 dtype: torch.dtype = torch.float32, circuit: dict | None = None):
        if len(observables) != n_actions:
            raise ValueError(f"QValuePQC needs one observable per action: {n_actions} actions, "
                             f"{len(observables)} observables")
        super().__init__(n_qubits, n_layers, list(observables), encoding, backend, seed, dtype, [1.0] * n_actions,
                         circuit)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """Q-values [B, n_actions]."""
        return self.output[None] * (1.0 + self.expectations(states)) / 2.0


class GaussianPQC(_PQC):
    """A Gaussian policy for continuous actions in [-1, 1]^d: mean_i = w_i · <Z_i> over a re-uploading circuit, and a
    state-independent log standard deviation per dimension (CleanRL's continuous PPO head), starting at 0 (std 1)."""

    def __init__(self, n_qubits: int = 3, n_layers: int = 5, n_actions: int = 1, encoding: str = "plain",
                 backend="compiled", seed: int | None = None, dtype: torch.dtype = torch.float32,
                 circuit: dict | None = None):
        if n_actions > n_qubits:
            raise ValueError(f"GaussianPQC reads one qubit per action dimension: {n_actions} > {n_qubits} qubits")
        super().__init__(n_qubits, n_layers, [f"Z{i}" for i in range(n_actions)], encoding, backend, seed, dtype,
                         [1.0] * n_actions, circuit)
        self.log_std = nn.Parameter(torch.zeros(n_actions, dtype=dtype))

    def forward(self, states: torch.Tensor, offset=None) -> torch.Tensor:
        """The mean action [B, n_actions] (what a greedy policy takes); ``offset``: ``expectations``'."""
        return self.output[None] * self.expectations(states, offset)

    def greedy(self, features) -> np.ndarray:
        """The mean action per row: [B, n_actions] in [-1, 1]^d (the environment scales it onto its Box)."""
        return self._outputs(features).cpu().numpy()

    def dist(self, states: torch.Tensor, offset=None) -> torch.distributions.Distribution:
        """π(·|s): independent normals, [B] batch of d-dimensional actions; ``offset``: ``expectations``'."""
        return self.dist_of(self.expectations(states, offset))

    def dist_of(self, values: torch.Tensor) -> torch.distributions.Distribution:
        """π(·|s) from the circuit's values [B, n_obs] at s."""
        mean = self.output[None] * values
        return torch.distributions.Independent(torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean)), 1)

    def param_groups(self, lr_in: float = 0.1, lr_var: float = 0.01, lr_out: float = 0.1) -> list[dict]:
        """λ, θ, then w and the log standard deviation together (``lr_out``)."""
        groups = super().param_groups(lr_in, lr_var, lr_out)
        groups[-1]["params"] = [self.output, self.log_std]
        return groups


def shard_rows(policy: nn.Module, rank: int | None = None, size: int = 1) -> list[nn.Parameter]:
    """Make every circuit in ``policy`` differentiate only its share ``rank`` of ``size`` of each batched call's rows,
    the others' values computed without gradient (``multi-learner``); ``rank=None`` undoes it. Returns the parameters
    feeding the circuits (λ, θ), whose gradients the learners sum; the others (w, a critic) see every row already."""
    for m in circuits(policy):
        m.shard = None if rank is None or size == 1 else (int(rank), int(size))
    return [p for m in circuits(policy) for p in (m.input_scaling, m.weights)]


def circuits(policy: nn.Module) -> list[_PQC]:
    """The policy circuits in ``policy``."""
    return [m for m in policy.modules() if isinstance(m, _PQC)]


@contextlib.contextmanager
def learning_on_twin(policy: nn.Module, on: bool = True):
    """Inside the block, every circuit of ``policy`` that has a twin computes its values on the twin (a twin
    policy's learner: no QPU circuit); ``on=False``: nothing changes."""
    twins = [m for m in circuits(policy) if on and m.twin is not None]
    for m in twins:
        m.on_twin = True
    try:
        yield
    finally:
        for m in twins:
            m.on_twin = False


@torch.no_grad()
def twin_offsets(policy: nn.Module, states, values: torch.Tensor) -> np.ndarray | None:
    """``values`` (the QPU's, as acted, [B, n_obs]) minus the twin's at the same states and parameters: the
    offsets a twin policy's learner adds (``expectations``); None where the policy's circuit has no twin."""
    (m,) = circuits(policy)
    if m.twin is None:
        return None
    return (values - m.twin_values(m.angles(states))).double().cpu().numpy()


def policy_rows(policy: nn.Module, n: int = 1) -> CircuitBatch:
    """``n`` rows (zeros) of ``policy``'s circuit at its shots: what a backend is asked to price or take (a policy
    made without a backend, ``make_policy(cfg)``, makes none)."""
    m = circuits(policy)[0]
    return CircuitBatch.make(m.template, np.zeros((n, m.template.n_inputs)), np.zeros(m.template.n_weights),
                             shots=m.shots)


__all__ = ["ENCODINGS", "GaussianPQC", "QValuePQC", "SoftmaxPQC", "circuits", "learning_on_twin", "pqc_template",
           "policy_rows", "shard_rows", "twin_offsets"]
