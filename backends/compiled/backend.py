"""``CompiledBackend``: exact and shot-mode jobs on compiled programs."""
from __future__ import annotations

import numpy as np
import torch
from hqflow.ir.circuit import CircuitTemplate

from ..base import BackendError, BatchResult, Capabilities, CircuitBatch, LocalBackend, pm1_variance
from ..sampling import multinomial_rows, sample_terms
from . import config
from .program import (
    CompiledProgram,
    EncodedProgram,
    _check_fusion,
    _resolve_device,
    _resolve_dtype,
    compile_template,
)


class CompiledBackend(LocalBackend):
    """Exact and shot modes on compiled torch programs (``compile_template``, cached).

    Jobs run without autograd; for gradients call ``backend.program(template)``
    (a ``CompiledProgram``) on tensors and use torch autograd. Shot mode samples
    honestly from the exact distribution, as ``reference`` does: counts from the
    probabilities, and each Pauli term's ±1 outcome ``shots`` times. Batches are
    run in chunks of at most ``max_amplitudes`` amplitudes (rows x 2**n).

    A shot batch with ``row_seeds`` samples row i from ``row_seeds[i]`` alone (``backends/sampling.py``),
    so its results do not depend on how the batch was cut. Its exact values are computed in complex128
    whatever ``dtype`` (single precision changes a row's values in the 7th digit with the batch's size,
    which would move a draw now and then), grouped by shared weight rows as exact batches are.
    """

    name = "compiled"

    def __init__(self, dtype="complex64", device="cpu", max_qubits: int | None = None,
                 fusion: int | None = None, max_amplitudes: int = 2**24):
        super().__init__()
        self.dtype = _resolve_dtype(dtype)
        self.device = _resolve_device(device)
        _check_fusion(fusion)
        self.fusion = fusion
        if max_qubits is None:
            max_qubits = 24 if self.device.type == "cpu" else config.MAX_QUBITS
        if not isinstance(max_qubits, int) or not 1 <= max_qubits <= config.MAX_QUBITS:
            raise BackendError(f"max_qubits must be an int between 1 and {config.MAX_QUBITS}, got {max_qubits!r}")
        self.max_amplitudes = int(max_amplitudes)
        self._caps = Capabilities("compiled", max_qubits=int(max_qubits), exact=True, shots=True,
                                  gradient="autograd", device=str(self.device), row_seeded=True)

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def program(self, template: CircuitTemplate, dtype=None) -> CompiledProgram | EncodedProgram:
        """The torch program of ``template`` (``gradient="autograd"``): ``(inputs, weights) -> values``,
        differentiable; ``dtype`` (a complex torch dtype) overrides the backend's precision. A template
        with derived inputs takes its raw inputs (``EncodedProgram``)."""
        return compile_template(template, self.dtype if dtype is None else _resolve_dtype(dtype), self.device,
                                self.fusion)

    def run(self, batch: CircuitBatch) -> BatchResult:
        t = batch.template
        if batch.shots is not None and batch.row_seeds is not None:
            return self._run_row_seeded(batch)
        prog = self.program(t)
        if batch.shots is None and batch.weights.ndim == 2:
            grouped = _by_shared_weights(batch)
            if grouped is not None:  # few distinct weight rows (parameter shift): fused programs per group
                return _scatter(batch, [(rows, self.run(part)) for rows, part in grouped])
        chunk = max(1, self.max_amplitudes // 2**t.n_qubits)
        rng = np.random.default_rng(batch.seed)
        parts = [self._run_rows(prog, b, rng) for b in batch.split(chunk)]
        res = parts[0] if len(parts) == 1 else BatchResult.concat(parts)
        res.metadata.update(backend=self.name, dtype=str(self.dtype).replace("torch.", ""), device=str(self.device))
        return res

    def _run_rows(self, prog: CompiledProgram, batch: CircuitBatch, rng: np.random.Generator) -> BatchResult:
        t = batch.template
        with torch.no_grad():
            if not t.observables:
                probs = prog.probs(batch.inputs, batch.weights).double().cpu().numpy()
                if batch.shots is None:
                    return BatchResult(probs=probs)
                probs = np.clip(probs, 0.0, None)
                counts = []
                for row in probs:
                    draws = rng.multinomial(batch.shots, row / row.sum())
                    counts.append({format(int(i), f"0{t.n_qubits}b"): int(draws[i]) for i in np.flatnonzero(draws)})
                return BatchResult(counts=counts)
            if batch.shots is None:
                return BatchResult(values=prog(batch.inputs, batch.weights).double().cpu().numpy())
            exact = prog.term_values(batch.inputs, batch.weights).double().cpu().numpy()  # [B, n_terms]
        return _sample_terms(t, exact, batch.shots, rng)

    def _run_row_seeded(self, batch: CircuitBatch) -> BatchResult:
        """Exact values in complex128 (grouped by shared weights where rows share few), then each row's
        shots drawn from its own seed."""
        t = batch.template
        exact = self._exact(batch, "term_values" if t.observables else "probs", torch.complex128)
        if t.observables:
            res = sample_terms(t, exact, batch.shots, batch.row_seeds)
        else:
            res = BatchResult(counts=multinomial_rows(batch.row_seeds, exact, batch.shots))
        res.metadata.update(backend=self.name, dtype="complex128", device=str(self.device))
        return res

    def _exact(self, batch: CircuitBatch, method: str, dtype: torch.dtype) -> np.ndarray:
        """``prog.<method>`` (``term_values`` or ``probs``) of every row as float64 ``[B, k]``: per group of
        rows that share a weight row where ``_by_shared_weights`` finds few, each in chunks of at most
        ``max_amplitudes`` amplitudes."""
        prog = self.program(batch.template, dtype)
        grouped = _by_shared_weights(batch) if batch.weights.ndim == 2 else None
        chunk = max(1, self.max_amplitudes // 2**batch.template.n_qubits)
        out = None
        for rows, part in grouped or [(slice(None), batch)]:
            with torch.no_grad():
                vals = [getattr(prog, method)(b.inputs, b.weights).double().cpu().numpy() for b in part.split(chunk)]
            vals = vals[0] if len(vals) == 1 else np.concatenate(vals)
            if out is None:
                out = np.empty((batch.size, vals.shape[1]))
            out[rows] = vals
        return out


def _by_shared_weights(batch: CircuitBatch):
    """Rows grouped by their weight row, each group a batch with shared weights; None when the
    weight rows are mostly distinct (then per-row programs are the faster way)."""
    w = batch.weights
    keys = w @ np.random.default_rng(0).standard_normal(w.shape[1])  # a row's fingerprint (checked below)
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if len(unique) * 8 > batch.size or not np.array_equal(w, w[first][inverse]):
        return None
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(unique) + 1))
    return [(rows, CircuitBatch(batch.template, batch.inputs[rows], w[first[g]], None, batch.seed))
            for g in range(len(unique)) for rows in [order[bounds[g]:bounds[g + 1]]]]


def _scatter(batch: CircuitBatch, parts) -> BatchResult:
    """The groups' results put back in the batch's row order."""
    first = parts[0][1]
    out = {}
    for name in ("values", "probs"):
        if getattr(first, name) is not None:
            arr = np.empty((batch.size, getattr(first, name).shape[1]))
            for rows, res in parts:
                arr[rows] = getattr(res, name)
            out[name] = arr
    return BatchResult(**out, metadata=dict(first.metadata, groups=len(parts)))


def _sample_terms(t: CircuitTemplate, exact: np.ndarray, shots: int, rng: np.random.Generator) -> BatchResult:
    """Honest shot estimates: each Pauli term's ±1 outcome drawn ``shots`` times (as ``reference``)."""
    rows = exact.shape[0]
    values = np.zeros((rows, t.n_observables))
    variance = np.zeros_like(values)
    col = 0
    for j, obs in enumerate(t.observables):
        for term in obs.terms:
            e = np.ones(rows) if not term.paulis else exact[:, col]
            col += 1
            p_plus = np.clip((1 + e) / 2, 0.0, 1.0)
            plus = rng.binomial(shots, p_plus)
            mean = (2 * plus - shots) / shots
            values[:, j] += term.coeff * mean
            variance[:, j] += term.coeff**2 * pm1_variance(mean, shots) / shots
    return BatchResult(values=values, stderr=np.sqrt(variance))
