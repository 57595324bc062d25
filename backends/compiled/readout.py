"""Pass 5: readout, Pauli terms grouped by X/Y mask, or probabilities."""
from __future__ import annotations

import numpy as np
import torch

from . import config
from .config import _REAL
from .perm import _inverse, _permute
from .plan import _Plan


class _Readout:
    """Maps the final state (in the plan's layout) to the output, and back for gradients.

    Z-only terms are ``|psi|^2 @ z``; the terms of one X/Y mask are ``Re((conj(psi) * psi[i ^ mask]) @ m)``,
    where ``psi[i ^ mask]`` flips the masked axes (no index table). The ``[2**n, columns]`` tables are built
    as products of one factor per axis (exact: the factors are ±1 and ±i), so none of ``2**n x n``. Past
    ``config._WIDE`` qubits there are no ``2**n`` tables at all: each term contracts ``|psi|^2`` (or its
    mask's product) a run of at most ``_WIDE`` axes at a time with its factors there (``_Contractions``).
    """

    def __init__(self, plan: _Plan, terms_per_col: list[list] | None, dtype, device):
        self.n, self.probs = plan.n, terms_per_col is None
        self.final_perm = plan.final_perm
        self.z = self.z2t = None
        self.x: list = []
        if self.probs:
            return
        n, d = plan.n, 2**plan.n
        axis_of = {w: i for i, w in enumerate(plan.layout)}
        self.wide = _Contractions(terms_per_col, axis_of, n, dtype, device) if n > config._WIDE else None
        if self.wide is not None:
            return
        z = np.zeros((d, len(terms_per_col)))
        xs: dict[int, np.ndarray] = {}
        for r, terms in enumerate(terms_per_col):
            for coeff, paulis in terms:
                mask, factors = _term(paulis, axis_of, n)
                real = mask == 0 and all(p == "Z" for _, p in paulis)
                val = _product(factors, n, float(coeff) if real else complex(coeff))
                if mask == 0:
                    z[:, r] += val.real
                else:
                    xs.setdefault(mask, np.zeros((d, len(terms_per_col)), dtype=complex))[:, r] += val
        real = _REAL[dtype]
        if z.any() or not xs:
            self.z = torch.tensor(z, dtype=real, device=device)
            self.z2t = torch.tensor(2 * z.T, dtype=real, device=device).contiguous()
        for m, mat in sorted(xs.items()):
            self.x.append((_flip_of(m, n),
                           torch.tensor(mat, dtype=dtype, device=device),
                           torch.tensor(2 * mat.T, dtype=dtype, device=device).contiguous()))

    def __call__(self, psi: torch.Tensor) -> torch.Tensor:
        if self.probs:
            p = torch.view_as_real(psi).square().sum(-1)
            return p if self.final_perm is None else _permute(p, self.final_perm, self.n)
        if self.wide is not None:
            return self.wide(psi)
        out = None
        if self.z is not None:
            out = torch.view_as_real(psi).square().sum(-1) @ self.z
        for flip, m, _ in self.x:
            v = ((psi.conj() * _flipped(psi, flip)) @ m).real
            out = v if out is None else out + v
        return out

    def grad(self, psi: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Torch's gradient with respect to ``psi`` given the output's gradient ``g``."""
        if self.probs:
            if self.final_perm is not None:
                g = _permute(g, _inverse(self.final_perm), self.n)
            return psi * (2 * g)
        if self.wide is not None:
            return self.wide.grad(psi, g)
        lam = None
        if self.z is not None:
            lam = psi * (g @ self.z2t)
        for flip, _, m2t in self.x:
            term = _flipped(psi, flip) * (g.to(m2t.dtype) @ m2t)
            lam = term if lam is None else lam + term
        return lam


_FACTORS = {"Z": np.array([1.0, -1.0]), "Y": np.array([-1j, 1j])}  # a Pauli's diagonal factor on its axis
# (X's is [1, 1]; Y = -i on |0>, +i on |1> after the flip, as <psi| Y |psi> reads it)


def _term(paulis, axis_of: dict, n: int) -> tuple[int, dict]:
    """A Pauli product's X/Y mask (axis 0 the most significant bit) and its diagonal factors by axis."""
    mask, factors = 0, {}
    for w, p in paulis:
        a = axis_of[w]
        if p in "XY":
            mask |= 1 << (n - 1 - a)
        if p in "YZ":
            factors[a] = _FACTORS[p]
    return mask, factors


def _product(factors: dict, n: int, coeff: complex) -> np.ndarray:
    """``coeff`` times the product over axes of ``factors[a]`` (``[1, 1]`` elsewhere), ``[2**n]``, axis 0 most
    significant: a sign (or ±i) per basis state, broadcast a factor at a time."""
    val = np.full(1, coeff)
    for a in range(n):
        f = factors.get(a)
        val = np.repeat(val, 2) if f is None else (val[:, None] * f[None, :]).reshape(-1)
    return val


def _flip_of(mask: int, n: int) -> tuple[tuple, list]:
    """``(dims, flipped dims)``: ``psi[:, i ^ mask]`` as ``psi`` viewed in runs of flipped and kept axes, the
    flipped runs reversed (reversing a run of ``r`` axes is ``XOR (2**r - 1)`` on its index)."""
    dims, flip, prev = [], [], None
    for a in range(n):
        bit = bool(mask >> (n - 1 - a) & 1)
        if bit == prev:
            dims[-1] *= 2
        else:
            dims.append(2)
            if bit:
                flip.append(len(dims))  # dim 0 is the rows
        prev = bit
    return tuple(dims), flip


def _flipped(psi: torch.Tensor, flip: tuple) -> torch.Tensor:
    dims, axes = flip
    return psi.reshape(psi.shape[:1] + dims).flip(axes).reshape(psi.shape)


class _Contractions:
    """The readout of a wide circuit without ``2**n`` tables: a term's value is ``|psi|^2`` (Z-only terms) or
    ``conj(psi) * psi[i ^ mask]`` (its X/Y mask's) contracted with one small table per run of at most
    ``config._WIDE`` axes, the trailing run first: the product of the term's factors on those axes (ones on
    the axes it leaves alone; its coefficient in the first run's). The gradient builds each term's
    ``2**n`` factor from the same tables, one term at a time."""

    def __init__(self, terms_per_col: list[list], axis_of: dict, n: int, dtype, device):
        c = config._WIDE
        self.n, self.cols = n, len(terms_per_col)
        self.runs = [(max(0, hi - c), hi) for hi in range(n, 0, -c)]  # trailing first
        self.groups: dict[int, list] = {}  # mask -> [(column, [table per run])]
        for r, terms in enumerate(terms_per_col):
            for coeff, paulis in terms:
                mask, factors = _term(paulis, axis_of, n)
                kind = dtype if mask else _REAL[dtype]
                tables = []
                for lo, hi in self.runs:
                    local = {a - lo: f for a, f in factors.items() if lo <= a < hi}
                    scale = (coeff if lo == 0 else 1.0) * (1 + 0j if mask else 1.0)  # the coefficient: leading run
                    t = _product(local, hi - lo, scale)
                    tables.append(torch.tensor(t, dtype=kind, device=device))
                self.groups.setdefault(mask, []).append((r, tables))
        self.flips = {m: _flip_of(m, n) for m in self.groups if m}

    def _product(self, psi: torch.Tensor, mask: int) -> torch.Tensor:
        if mask == 0:
            return torch.view_as_real(psi).square().sum(-1)
        return psi.conj() * _flipped(psi, self.flips[mask])

    def __call__(self, psi: torch.Tensor) -> torch.Tensor:
        rows = psi.shape[0]
        cols: list = [None] * self.cols
        for mask, terms in self.groups.items():
            p = self._product(psi, mask)
            for r, tables in terms:
                v = p
                for (lo, hi), t in zip(self.runs, tables):
                    v = v.reshape(rows, -1, 2 ** (hi - lo)) @ t
                v = v.reshape(rows).real if v.is_complex() else v.reshape(rows)
                cols[r] = v if cols[r] is None else cols[r] + v
        zero = psi.real.new_zeros(rows)
        return torch.stack([zero if v is None else v for v in cols], 1)

    def grad(self, psi: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        rows, lam = psi.shape[0], None
        for mask, terms in self.groups.items():
            factor = None
            for r, tables in terms:
                f = 2 * g[:, r: r + 1].to(tables[0].dtype)
                for t in reversed(tables):  # the leading run first: f grows to [rows, 2**n]
                    f = (f[:, :, None] * t).reshape(rows, -1)
                factor = f if factor is None else factor + f
            term = (psi if mask == 0 else _flipped(psi, self.flips[mask])) * factor
            lam = term if lam is None else lam + term
        return lam
