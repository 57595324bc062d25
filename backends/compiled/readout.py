"""Pass 5: readout, Pauli terms grouped by X/Y mask, or probabilities."""
from __future__ import annotations

import numpy as np
import torch

from .affine import _bits
from .config import _REAL
from .perm import _inverse, _permute
from .plan import _Plan


class _Readout:
    """Maps the final state (in the plan's layout) to the output, and back for gradients."""

    def __init__(self, plan: _Plan, terms_per_col: list[list] | None, dtype, device):
        self.n, self.probs = plan.n, terms_per_col is None
        self.final_perm = plan.final_perm
        self.z = self.z2t = None
        self.x: list = []
        if self.probs:
            return
        d, bits = 2**plan.n, _bits(plan.n)
        axis_of = {w: i for i, w in enumerate(plan.layout)}
        z = np.zeros((d, len(terms_per_col)))
        xs: dict[int, np.ndarray] = {}
        for r, terms in enumerate(terms_per_col):
            for coeff, paulis in terms:
                mask, val = 0, np.full(d, complex(coeff))
                for w, p in paulis:
                    b = bits[:, axis_of[w]]
                    if p in "XY":
                        mask |= 1 << (plan.n - 1 - axis_of[w])
                    if p == "Y":
                        val = val * np.where(b == 0, -1j, 1j)
                    elif p == "Z":
                        val = val * (1 - 2 * b)
                if mask == 0:
                    z[:, r] += val.real
                else:
                    xs.setdefault(mask, np.zeros((d, len(terms_per_col)), dtype=complex))[:, r] += val
        real = _REAL[dtype]
        if z.any() or not xs:
            self.z = torch.tensor(z, dtype=real, device=device)
            self.z2t = torch.tensor(2 * z.T, dtype=real, device=device).contiguous()
        for m, mat in sorted(xs.items()):
            self.x.append((torch.tensor(np.arange(d) ^ m, device=device),
                           torch.tensor(mat, dtype=dtype, device=device),
                           torch.tensor(2 * mat.T, dtype=dtype, device=device).contiguous()))

    def __call__(self, psi: torch.Tensor) -> torch.Tensor:
        if self.probs:
            p = torch.view_as_real(psi).square().sum(-1)
            return p if self.final_perm is None else _permute(p, self.final_perm, self.n)
        out = None
        if self.z is not None:
            out = torch.view_as_real(psi).square().sum(-1) @ self.z
        for idx, m, _ in self.x:
            v = ((psi.conj() * psi[:, idx]) @ m).real
            out = v if out is None else out + v
        return out

    def grad(self, psi: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Torch's gradient with respect to ``psi`` given the output's gradient ``g``."""
        if self.probs:
            if self.final_perm is not None:
                g = _permute(g, _inverse(self.final_perm), self.n)
            return psi * (2 * g)
        lam = None
        if self.z is not None:
            lam = psi * (g @ self.z2t)
        for idx, _, m2t in self.x:
            term = psi[:, idx] * (g.to(m2t.dtype) @ m2t)
            lam = term if lam is None else lam + term
        return lam
