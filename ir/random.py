"""Random circuit templates, for differential tests and benchmarks.

``random_template(rng, n_qubits)`` mixes per-sample encodings (affine in an
input), trainable rotations (affine in a weight), fixed gates and entanglers
from the whole gate table, plus random Pauli-sum observables.
"""
from __future__ import annotations

import numpy as np

from .circuit import Angle, CircuitTemplate, Observable, Op, PauliTerm
from .gates import GATES


def random_observable(rng: np.random.Generator, n_qubits: int, max_terms: int = 3) -> Observable:
    terms = []
    for _ in range(int(rng.integers(1, max_terms + 1))):
        k = int(rng.integers(1, min(n_qubits, 3) + 1))
        wires = sorted(rng.choice(n_qubits, size=k, replace=False).tolist())
        paulis = tuple((int(w), str(rng.choice(list("XYZ")))) for w in wires)
        terms.append(PauliTerm(float(np.round(rng.normal(), 3)), paulis))
    return Observable(tuple(terms))


def random_template(
    rng: np.random.Generator,
    n_qubits: int,
    n_ops: int | None = None,
    n_inputs: int | None = None,
    n_weights: int | None = None,
    n_observables: int = 2,
    gates: tuple[str, ...] | None = None,
) -> CircuitTemplate:
    """A random, valid template; every declared input and weight is used."""
    names = [g for g in (gates or GATES) if GATES[g].num_wires <= n_qubits]
    n_ops = n_ops if n_ops is not None else int(rng.integers(3 * n_qubits, 6 * n_qubits + 1))
    n_inputs = n_inputs if n_inputs is not None else int(rng.integers(1, n_qubits + 1))
    n_weights = n_weights if n_weights is not None else int(rng.integers(1, 2 * n_qubits + 1))
    ops: list[Op] = []
    # Encodings first (as data re-uploading circuits do), so every input is used.
    for i in range(n_inputs):
        ops.append(Op(str(rng.choice(["rx", "ry", "rz"])), (int(rng.integers(n_qubits)),),
                      (Angle.input(i, float(rng.uniform(0.5, 2.0)), float(rng.uniform(-0.3, 0.3))),)))
    param_gates = [g for g in names if GATES[g].num_params]
    for j in range(n_weights):
        g = str(rng.choice(param_gates))
        spec = GATES[g]
        wires = tuple(int(w) for w in rng.choice(n_qubits, size=spec.num_wires, replace=False))
        angles = [Angle.weight(j)] + [_random_angle(rng, n_inputs, n_weights) for _ in range(spec.num_params - 1)]
        ops.append(Op(g, wires, tuple(angles)))
    for _ in range(max(0, n_ops - len(ops))):
        g = str(rng.choice(names))
        spec = GATES[g]
        wires = tuple(int(w) for w in rng.choice(n_qubits, size=spec.num_wires, replace=False))
        ops.append(Op(g, wires, tuple(_random_angle(rng, n_inputs, n_weights) for _ in range(spec.num_params))))
    # Keep the leading encodings in front; shuffle the rest so gate kinds interleave.
    head, tail = ops[:n_inputs], ops[n_inputs:]
    order = rng.permutation(len(tail))
    ops = head + [tail[i] for i in order]
    return CircuitTemplate(
        n_qubits,
        tuple(ops),
        tuple(f"x[{i}]" for i in range(n_inputs)),
        tuple(f"w[{j}]" for j in range(n_weights)),
        tuple(random_observable(rng, n_qubits) for _ in range(n_observables)),
        None,
        f"random{n_qubits}q",
    ).check()


def _random_angle(rng: np.random.Generator, n_inputs: int, n_weights: int) -> Angle:
    r = rng.random()
    if r < 0.3 and n_inputs:
        return Angle.input(int(rng.integers(n_inputs)), float(rng.uniform(-2, 2)), float(rng.uniform(-1, 1)))
    if r < 0.7 and n_weights:
        return Angle.weight(int(rng.integers(n_weights)), float(rng.uniform(-2, 2)), float(rng.uniform(-1, 1)))
    return Angle.const(float(rng.uniform(-np.pi, np.pi)))
