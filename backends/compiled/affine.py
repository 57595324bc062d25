"""Affine phase maps, their pieces, and block structures (numpy, compile time).

An ``_Affine`` gives a diagonal layer's angles as an affine function of the
symbols; ``_pieces`` cuts a wide layer into factors on few axes each (so no table
has ``2**n`` entries past ``config._WIDE`` qubits); a ``_Structure`` is a
block's unitary as constant matrices between weight-dependent phase slots.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .lower import _levels


@functools.lru_cache(maxsize=32)
def _bits(m: int) -> np.ndarray:
    """``[2**m, m]`` 0/1 table; column a is axis a (axis 0 most significant). Shared: do not modify."""
    idx = np.arange(2**m)
    return ((idx[:, None] >> (m - 1 - np.arange(m))[None, :]) & 1).astype(np.int64)


def _local_index(bits: np.ndarray, axes: list[int]) -> np.ndarray:
    out = np.zeros(bits.shape[0], dtype=np.int64)
    for a in axes:
        out = (out << 1) | bits[:, a]
    return out


@dataclass
class _Affine:
    """``angle[i] = sym @ sample[:, i] + sum_j w[j] * weight[j][i] + const[i]`` over ``2**m`` indices."""

    sample: np.ndarray  # [n_sample, D]
    weight: dict  # shared weight index -> [D] coefficients (only the weights it uses)
    const: np.ndarray  # [D]

    def key(self) -> bytes:
        weights = b"".join(b"%d:" % j + v.tobytes() for j, v in sorted(self.weight.items()))
        return self.sample.tobytes() + b"|" + weights + b"|" + self.const.tobytes()


def _affine(prims, axis_of: dict, m: int, n_in: int, n_w: int, per_row: bool) -> _Affine:
    bits = _bits(m)
    n_s = n_in + (n_w if per_row else 0)
    out = _Affine(np.zeros((n_s, 2**m)), {}, np.zeros(2**m))
    for p in prims:
        spectrum, a = p.angle_terms()
        vec = spectrum[_local_index(bits, [axis_of[w] for w in p.wires])]
        out.const += a.offset * vec
        if a.kind == "input":
            out.sample[a.index] += a.scale * vec
        elif a.kind == "weight" and per_row:
            out.sample[n_in + a.index] += a.scale * vec
        elif a.kind == "weight":
            out.weight[a.index] = out.weight.get(a.index, 0.0) + a.scale * vec
    return out


def _pieces(prims, axis_of: dict, n: int, chunk: int) -> list[tuple[tuple[int, ...], list]]:
    """A diagonal layer's primitives as pieces ``(axes, prims)``: its phase is the product of the pieces'.

    Up to ``chunk`` qubits the layer is one piece on every axis (one table of ``2**n`` phases). Wider, the
    axes are cut into ``ceil(n / chunk)`` runs of near-equal length: a primitive whose axes lie in one run
    joins that run's piece; one across runs makes a piece on its own axes (shared by the primitives on the
    same axes). Pieces keep the order of their first primitive; ``axes`` ascend."""
    if n <= chunk:
        return [(tuple(range(n)), list(prims))]
    parts = -(-n // chunk)
    bounds = [i * n // parts for i in range(parts + 1)]
    run_of = {a: j for j in range(parts) for a in range(bounds[j], bounds[j + 1])}
    out: dict[tuple[int, ...], list] = {}
    for p in prims:
        axes = tuple(sorted(axis_of[w] for w in p.wires))
        runs = {run_of[a] for a in axes}
        if len(runs) == 1:
            (j,) = runs
            axes = tuple(range(bounds[j], bounds[j + 1]))
        out.setdefault(axes, []).append(p)
    return list(out.items())


def _embed(matrix: np.ndarray, axes: list[int], m: int) -> np.ndarray:
    """``matrix`` acting on ``axes`` of an ``m``-wire register, as a ``2**m`` square matrix."""
    dim, j = 2**m, len(axes)
    t = np.eye(dim, dtype=complex).reshape((2,) * m + (dim,))
    t = np.moveaxis(t, axes, list(range(j)))
    t = (matrix @ t.reshape(2**j, -1)).reshape(t.shape)
    return np.moveaxis(t, list(range(j)), axes).reshape(dim, dim)


@dataclass
class _Structure:
    """A block's unitary ``F[m] diag(e^{i D[m]}) ... diag(e^{i D[1]}) F[0]``; ``D`` affine in weights."""

    fixed: list  # m + 1 constant matrices
    slots: list  # m _Affine maps (weight-dependent)

    def key(self) -> bytes:
        return b"".join(np.ascontiguousarray(f).tobytes() for f in self.fixed) + bytes([len(self.slots)])


def _structure(prims, local: list[int], n_in: int, n_w: int, per_row: bool) -> _Structure:
    m = len(local)
    axis_of = {w: i for i, w in enumerate(local)}
    fixed, slots, current = [], [], np.eye(2**m, dtype=complex)
    for lv, group in _levels(prims, max(local) + 1).items():
        if lv % 2 == 0:
            for p in group:
                current = _embed(p.matrix, [axis_of[w] for w in p.wires], m) @ current
            continue
        aff = _affine(group, axis_of, m, n_in, n_w, per_row)
        if not aff.weight and not aff.sample.any():
            current = np.exp(1j * aff.const)[:, None] * current
            continue
        fixed.append(current)
        slots.append(aff)
        current = np.eye(2**m, dtype=complex)
    fixed.append(current)
    return _Structure(fixed, slots)
