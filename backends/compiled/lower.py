"""Passes 1 and 2: lowering gates to primitives, and scheduling them.

Lowering: every gate becomes fixed matrices and diagonal rotations whose angle is
affine in one symbol. Scheduling: diagonal primitives are levelled as early as
possible; a diagonal level that depends on a per-sample symbol is a phase layer,
everything between two phase layers a segment shared by the batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hqflow.ir.circuit import Angle, Op
from hqflow.ir.gates import GATES, gate_matrix

# --------------------------------------------------------------------------------------
# 1. lowering: gates -> fixed matrices and diagonal rotations


_H = np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)
_VY = np.array([[1, 1], [1j, -1j]], dtype=complex) / np.sqrt(2)  # Y = VY Z VY^dag
# phase(i) = exp(i * angle * spectrum[i]) in the gate's local basis (first wire most significant)
_SPECTRA = {
    "rz": np.array([-0.5, 0.5]),
    "p": np.array([0.0, 1.0]),
    "crz": np.array([0.0, 0.0, -0.5, 0.5]),
    "cp": np.array([0.0, 0.0, 0.0, 1.0]),
    "rzz": np.array([-0.5, 0.5, 0.5, -0.5]),
}
# rotation -> (diagonal rotation, basis change V, local wires it acts on): gate = V diag V^dag
_BASIS = {
    "rx": ("rz", _H, (0,)),
    "ry": ("rz", _VY, (0,)),
    "crx": ("crz", _H, (1,)),
    "cry": ("crz", _VY, (1,)),
    "rxx": ("rzz", _H, (0, 1)),
    "ryy": ("rzz", _VY, (0, 1)),
}


@dataclass(frozen=True, eq=False)
class _Prim:
    """A fixed gate (``matrix``) or a diagonal rotation ``exp(i * angle * spectrum)``."""

    wires: tuple[int, ...]
    label: str
    matrix: np.ndarray | None = None
    spectrum: np.ndarray | None = None
    angle: Angle | None = None
    diagonal: bool = True

    def angle_terms(self) -> tuple[np.ndarray, Angle]:
        """``(spectrum, angle)``: this primitive's phase (fixed diagonal gates have a constant angle)."""
        if self.spectrum is not None:
            return self.spectrum, self.angle
        return np.angle(np.diag(self.matrix)), Angle.const(1.0)


def _lower(op: Op) -> list[_Prim]:
    """One op as primitives, in time order (exact up to a global phase)."""
    spec = GATES[op.name]
    if all(a.kind == "const" for a in op.angles):
        m = gate_matrix(op.name, np.array([[a.offset for a in op.angles]]))[0]
        return [_Prim(op.wires, op.name, matrix=m, diagonal=spec.diagonal)]
    if op.name == "u":  # u(t, f, l) = e^{i(f+l)/2} rz(f) ry(t) rz(l)
        theta, phi, lam = op.angles
        return [p for name, a in (("rz", lam), ("ry", theta), ("rz", phi)) for p in _lower(Op(name, op.wires, (a,)))]
    (angle,) = op.angles
    if op.name in _SPECTRA:
        return [_Prim(op.wires, op.name, spectrum=_SPECTRA[op.name], angle=angle)]
    base, v, local = _BASIS[op.name]
    on = [op.wires[i] for i in local]
    pre = [_Prim((w,), "basis", matrix=v.conj().T, diagonal=False) for w in on]
    post = [_Prim((w,), "basis", matrix=v, diagonal=False) for w in on]
    return pre + [_Prim(op.wires, op.name, spectrum=_SPECTRA[base], angle=angle)] + post


# --------------------------------------------------------------------------------------
# 2. scheduling: phase layers (per-sample) and segments (shared by the batch)


def _levels(prims: list[_Prim], n_wires: int) -> dict[int, list[_Prim]]:
    """ASAP levels: non-diagonal primitives on even levels, diagonal ones on odd levels.

    A primitive only waits for earlier primitives on a shared wire that it does not
    commute with (two diagonal primitives always commute). Within a level the
    original order is kept.
    """
    last_any = [0] * n_wires  # highest level used on the wire
    last_nd = [0] * n_wires  # highest level of a non-diagonal primitive on the wire
    levels: dict[int, list[_Prim]] = {}
    for p in prims:
        if p.diagonal:
            lv = max(last_nd[w] for w in p.wires) + 1
        else:
            lv = max(last_any[w] for w in p.wires)
            lv += lv % 2
        levels.setdefault(lv, []).append(p)
        for w in p.wires:
            last_any[w] = max(last_any[w], lv)
            if not p.diagonal:
                last_nd[w] = lv
    return dict(sorted(levels.items()))


def _schedule(prims: list[_Prim], n: int, sample_kinds: frozenset) -> list[tuple[str, list[_Prim]]]:
    """``[("segment", prims) | ("phase", prims), ...]`` in execution order."""
    out: list[tuple[str, list[_Prim]]] = []
    for lv, group in _levels(prims, n).items():
        per_sample = lv % 2 == 1 and any(p.angle is not None and p.angle.kind in sample_kinds for p in group)
        if per_sample:
            out.append(("phase", group))
        elif out and out[-1][0] == "segment":
            out[-1][1].extend(group)
        else:
            out.append(("segment", list(group)))
    return out
