"""Circuit templates shared by the benchmarks (not a benchmark itself: the leading underscore
keeps it out of the benchmark smoke tests).

* ``policy_circuit(n, L)``: the RL policy circuit (DESIGN.md §4). Each of the L layers is an
  RY(x_q) data encoding on every qubit (inputs ``x``, one per qubit, re-uploaded every layer),
  then RZ(w)·RY(w) on every qubit (2·n·L weights), then a CZ ring CZ(q, q+1 mod n).
  Readout <Z0 Z1 ... Z(n-1)>.
* ``hea_circuit(n, L)``: a hardware-efficient ansatz. RY(x_q) on every qubit once (n inputs),
  then L layers of RY(w)·RZ(w) on every qubit followed by a CNOT chain CNOT(q, q+1),
  q = 0..n-2 (2·n·L weights). Readout <Z0>.
"""
from __future__ import annotations

from hqflow.ir import Circuit


def policy_circuit(n_qubits: int = 4, n_layers: int = 5):
    c = Circuit(n_qubits, name=f"policy{n_qubits}x{n_layers}")
    x = c.inputs("x", n_qubits)
    w = c.weights("w", 2 * n_qubits * n_layers)
    k = 0
    for _ in range(n_layers):
        for q in range(n_qubits):
            c.ry(x[q], q)
        for q in range(n_qubits):
            c.rz(w[k], q).ry(w[k + 1], q)
            k += 2
        for q in range(n_qubits):
            c.cz(q, (q + 1) % n_qubits)
    return c.build(observables=[" ".join(f"Z{q}" for q in range(n_qubits))])


def hea_circuit(n_qubits: int = 12, n_layers: int = 3):
    c = Circuit(n_qubits, name=f"hea{n_qubits}x{n_layers}")
    x = c.inputs("x", n_qubits)
    w = c.weights("w", 2 * n_qubits * n_layers)
    for q in range(n_qubits):
        c.ry(x[q], q)
    k = 0
    for _ in range(n_layers):
        for q in range(n_qubits):
            c.ry(w[k], q).rz(w[k + 1], q)
            k += 2
        for q in range(n_qubits - 1):
            c.cx(q, q + 1)
    return c.build(observables=["Z0"])
