"""``reference``: a small, readable numpy statevector simulator.

It is the oracle every other backend is tested against, so it favours clarity
over speed. The batched state has shape ``[B, 2, 2, ..., 2]``: axis ``1 + w`` is
wire ``w``. A gate on wires ``(w0, ..., wk)`` moves those axes to the front,
multiplies by the (batched) gate matrix, and moves them back.

Shot mode samples honestly from the exact distribution: for each Pauli term
``P`` the ±1 outcome of measuring ``P`` is drawn ``shots`` times with
``p(+1) = (1 + <P>) / 2``, each term with its own shots; counts are drawn from
the computational-basis probabilities. A batch with ``row_seeds`` samples row i
from ``row_seeds[i]`` alone (``backends/sampling.py``), with the same estimator,
so its results do not depend on how the batch was cut; without them, one
generator seeded ``batch.seed`` draws for the whole batch.
"""
from __future__ import annotations

import numpy as np
from hqflow.ir.gates import PAULIS, gate_matrix

from .base import BatchResult, Capabilities, CircuitBatch, LocalBackend, pm1_variance
from .sampling import multinomial_rows, sample_terms


def initial_state(batch: int, n_qubits: int) -> np.ndarray:
    state = np.zeros((batch,) + (2,) * n_qubits, dtype=complex)
    state[(slice(None),) + (0,) * n_qubits] = 1.0
    return state


def apply_matrix(state: np.ndarray, matrix: np.ndarray, wires: tuple[int, ...]) -> np.ndarray:
    """Apply ``matrix`` (``[1 or B, 2**k, 2**k]``) to ``wires`` of a batched state."""
    batch, n, k = state.shape[0], state.ndim - 1, len(wires)
    axes = [1 + w for w in wires]
    front = list(range(1, k + 1))
    moved = np.moveaxis(state, axes, front).reshape(batch, 2**k, -1)
    moved = np.matmul(matrix, moved)
    return np.moveaxis(moved.reshape((batch,) + (2,) * n), front, axes)


def simulate(batch: CircuitBatch) -> np.ndarray:
    """The final statevectors, ``[B, 2, ..., 2]``."""
    t = batch.template
    state = initial_state(batch.size, t.n_qubits)
    for op, angles in zip(t.ops, batch.angles()):
        state = apply_matrix(state, gate_matrix(op.name, angles), op.wires)
    return state


def pauli_expectation(state: np.ndarray, paulis: tuple[tuple[int, str], ...]) -> np.ndarray:
    """``<psi| P |psi>`` for each state in the batch (real, shape ``[B]``)."""
    phi = state
    for wire, p in paulis:
        phi = apply_matrix(phi, PAULIS[p][None], (wire,))
    axes = tuple(range(1, state.ndim))
    return np.real(np.sum(state.conj() * phi, axis=axes))


def probabilities(state: np.ndarray) -> np.ndarray:
    """``[B, 2**n]`` computational-basis probabilities, wire 0 most significant."""
    return np.abs(state.reshape(state.shape[0], -1)) ** 2


class ReferenceBackend(LocalBackend):
    """The numpy oracle. Exact and shot modes; gradients by parameter-shift."""

    name = "reference"

    def __init__(self, max_qubits: int = 20):
        super().__init__()
        self._caps = Capabilities("reference", max_qubits=max_qubits, exact=True, shots=True,
                                  row_seeded=True)

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def run(self, batch: CircuitBatch) -> BatchResult:
        t = batch.template
        state = simulate(batch)
        if batch.shots is not None and batch.row_seeds is not None:
            return _row_seeded(batch, state)
        rng = np.random.default_rng(batch.seed)
        if not t.observables:
            probs = probabilities(state)
            if batch.shots is None:
                return BatchResult(probs=probs)
            counts = []
            for row in probs:
                draws = rng.multinomial(batch.shots, row / row.sum())
                counts.append(
                    {format(i, f"0{t.n_qubits}b"): int(c) for i, c in enumerate(draws) if c}
                )
            return BatchResult(counts=counts)
        values = np.zeros((batch.size, t.n_observables))
        variance = np.zeros_like(values)
        for j, obs in enumerate(t.observables):
            for term in obs.terms:
                exact = pauli_expectation(state, term.paulis) if term.paulis else np.ones(batch.size)
                if batch.shots is None:
                    values[:, j] += term.coeff * exact
                    continue
                p_plus = np.clip((1 + exact) / 2, 0.0, 1.0)
                plus = rng.binomial(batch.shots, p_plus)
                mean = (2 * plus - batch.shots) / batch.shots
                values[:, j] += term.coeff * mean
                variance[:, j] += term.coeff**2 * pm1_variance(mean, batch.shots) / batch.shots
        if batch.shots is None:
            return BatchResult(values=values)
        return BatchResult(values=values, stderr=np.sqrt(variance))


def _row_seeded(batch: CircuitBatch, state: np.ndarray) -> BatchResult:
    """Shots drawn per row from ``batch.row_seeds``: counts, or every Pauli term's exact value sampled."""
    t = batch.template
    if not t.observables:
        return BatchResult(counts=multinomial_rows(batch.row_seeds, probabilities(state), batch.shots))
    terms = [term for obs in t.observables for term in obs.terms]
    exact = np.ones((batch.size, len(terms)))
    for col, term in enumerate(terms):
        if term.paulis:
            exact[:, col] = pauli_expectation(state, term.paulis)
    return sample_terms(t, exact, batch.shots, batch.row_seeds)
