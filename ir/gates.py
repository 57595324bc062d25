"""The canonical gate set: one table that every simulator and converter reads.

Conventions (used everywhere in hqflow):

* An op on wires ``(w0, w1, ...)`` has a matrix in the basis where ``w0`` is the
  most significant bit, so ``cx`` on ``(c, t)`` is ``[[I, 0], [0, X]]``.
* Gate angles follow Qiskit's definitions: ``rx(t) = exp(-i t X / 2)``,
  ``p(t) = diag(1, e^{it})``, ``u(t, f, l)`` as ``qiskit.circuit.library.UGate``,
  ``rzz(t) = exp(-i t Z⊗Z / 2)``, and so on.
* Matrices are built batched: every angle is an array of shape ``[B]`` and the
  result has shape ``[B, 2**k, 2**k]`` (complex128).

Each parametrized gate also names its parameter-shift rule: ``"two-term"``
(generator with eigenvalue gaps of 1: shift by pi/2, coefficient 1/2) or
``"four-term"`` (controlled rotations, gaps 1/2 and 1).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

_I2 = np.eye(2, dtype=complex)
_X = np.array([[0, 1], [1, 0]], dtype=complex)
_Y = np.array([[0, -1j], [1j, 0]], dtype=complex)
_Z = np.array([[1, 0], [0, -1]], dtype=complex)
PAULIS = {"I": _I2, "X": _X, "Y": _Y, "Z": _Z}


@dataclass(frozen=True)
class GateSpec:
    """What hqflow knows about one gate."""

    name: str
    num_wires: int
    num_params: int
    matrix: Callable[..., np.ndarray]  # (*angles[B]) -> [B, d, d]
    shift_rule: str | None = None  # "two-term" | "four-term" | None
    diagonal: bool = False


def _fixed(m: np.ndarray) -> Callable[[], np.ndarray]:
    m = np.asarray(m, dtype=complex)
    return lambda: m[None]


def _rot(pauli: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """exp(-i t P / 2) for a Pauli (or Pauli product) P with P @ P = I."""
    eye = np.eye(pauli.shape[0], dtype=complex)

    def build(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=float)[:, None, None]
        return np.cos(t / 2) * eye - 1j * np.sin(t / 2) * pauli

    return build


def _controlled(build: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def ctrl(t: np.ndarray) -> np.ndarray:
        u = build(t)
        out = np.zeros((u.shape[0], 4, 4), dtype=complex)
        out[:, 0, 0] = out[:, 1, 1] = 1
        out[:, 2:, 2:] = u
        return out

    return ctrl


def _phase(t: np.ndarray) -> np.ndarray:
    t = np.asarray(t, dtype=float)
    out = np.zeros((t.shape[0], 2, 2), dtype=complex)
    out[:, 0, 0] = 1
    out[:, 1, 1] = np.exp(1j * t)
    return out


def _u(theta: np.ndarray, phi: np.ndarray, lam: np.ndarray) -> np.ndarray:
    theta, phi, lam = (np.asarray(a, dtype=float) for a in (theta, phi, lam))
    c, s = np.cos(theta / 2), np.sin(theta / 2)
    out = np.empty((theta.shape[0], 2, 2), dtype=complex)
    out[:, 0, 0] = c
    out[:, 0, 1] = -np.exp(1j * lam) * s
    out[:, 1, 0] = np.exp(1j * phi) * s
    out[:, 1, 1] = np.exp(1j * (phi + lam)) * c
    return out


def _ctrl_fixed(u: np.ndarray) -> np.ndarray:
    out = np.eye(4, dtype=complex)
    out[2:, 2:] = u
    return out


_S = np.diag([1, 1j])
_T = np.diag([1, np.exp(1j * np.pi / 4)])
_SX = 0.5 * np.array([[1 + 1j, 1 - 1j], [1 - 1j, 1 + 1j]])
_SWAP = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]], dtype=complex)
_CCX = np.eye(8, dtype=complex)
_CCX[6:, 6:] = _X
_CSWAP = np.eye(8, dtype=complex)
_CSWAP[4:, 4:] = _SWAP

GATES: dict[str, GateSpec] = {
    g.name: g
    for g in [
        GateSpec("id", 1, 0, _fixed(_I2), diagonal=True),
        GateSpec("h", 1, 0, _fixed(np.array([[1, 1], [1, -1]]) / np.sqrt(2))),
        GateSpec("x", 1, 0, _fixed(_X)),
        GateSpec("y", 1, 0, _fixed(_Y)),
        GateSpec("z", 1, 0, _fixed(_Z), diagonal=True),
        GateSpec("s", 1, 0, _fixed(_S), diagonal=True),
        GateSpec("sdg", 1, 0, _fixed(_S.conj()), diagonal=True),
        GateSpec("t", 1, 0, _fixed(_T), diagonal=True),
        GateSpec("tdg", 1, 0, _fixed(_T.conj()), diagonal=True),
        GateSpec("sx", 1, 0, _fixed(_SX)),
        GateSpec("sxdg", 1, 0, _fixed(_SX.conj().T)),
        GateSpec("rx", 1, 1, _rot(_X), "two-term"),
        GateSpec("ry", 1, 1, _rot(_Y), "two-term"),
        GateSpec("rz", 1, 1, _rot(_Z), "two-term", diagonal=True),
        GateSpec("p", 1, 1, _phase, "two-term", diagonal=True),
        GateSpec("u", 1, 3, _u, "two-term"),
        GateSpec("cx", 2, 0, _fixed(_ctrl_fixed(_X))),
        GateSpec("cy", 2, 0, _fixed(_ctrl_fixed(_Y))),
        GateSpec("cz", 2, 0, _fixed(_ctrl_fixed(_Z)), diagonal=True),
        GateSpec("swap", 2, 0, _fixed(_SWAP)),
        GateSpec("crx", 2, 1, _controlled(_rot(_X)), "four-term"),
        GateSpec("cry", 2, 1, _controlled(_rot(_Y)), "four-term"),
        GateSpec("crz", 2, 1, _controlled(_rot(_Z)), "four-term", diagonal=True),
        GateSpec("cp", 2, 1, _controlled(_phase), "two-term", diagonal=True),
        GateSpec("rxx", 2, 1, _rot(np.kron(_X, _X)), "two-term"),
        GateSpec("ryy", 2, 1, _rot(np.kron(_Y, _Y)), "two-term"),
        GateSpec("rzz", 2, 1, _rot(np.kron(_Z, _Z)), "two-term", diagonal=True),
        GateSpec("ccx", 3, 0, _fixed(_CCX)),
        GateSpec("cswap", 3, 0, _fixed(_CSWAP)),
    ]
}

# Parameter-shift rules: list of (coefficient, shift); d f / d t =
# sum_k c_k * (f(t + s_k) - f(t - s_k)).
SHIFT_RULES: dict[str, tuple[tuple[float, float], ...]] = {
    "two-term": ((0.5, np.pi / 2),),
    "four-term": (
        ((np.sqrt(2) + 1) / (4 * np.sqrt(2)), np.pi / 2),
        (-(np.sqrt(2) - 1) / (4 * np.sqrt(2)), 3 * np.pi / 2),
    ),
}


def gate_matrix(name: str, angles: np.ndarray) -> np.ndarray:
    """Batched matrix of gate ``name``; ``angles`` has shape ``[B, num_params]``.

    Returns ``[B, 2**k, 2**k]``. For a gate without parameters the batch is 1.
    """
    spec = GATES[name]
    if spec.num_params == 0:
        return spec.matrix()
    angles = np.asarray(angles, dtype=float)
    return spec.matrix(*(angles[:, i] for i in range(spec.num_params)))
