"""Shot sampling from per-row seeds (``CircuitBatch.row_seeds``), vectorized and deterministic.

Row ``i``'s draws are a function of ``row_seeds[i]`` and its exact values alone, never of the other rows, so a
batch cut into any parts gives the same samples as the whole. Expectation values keep the estimator of the
batch-seeded path: per Pauli term, the number of +1 outcomes in ``shots`` is binomial with
``p(+1) = (1 + <P>) / 2``, drawn here by the exact inverse CDF at a counter-based uniform.
"""
from __future__ import annotations

import numpy as np
from hqflow.ir.circuit import CircuitTemplate
from scipy import special

from .base import BatchResult, _mix64, pm1_variance


def uniforms(row_seeds: np.ndarray, k: int) -> np.ndarray:
    """``[B, k]`` float64 uniforms in the open interval (0, 1): entry ``(i, j)`` is splitmix64 of
    ``(row_seeds[i], j)``, so row i's draws depend on its seed only."""
    seeds = np.asarray(row_seeds, dtype=np.uint64).reshape(-1)
    bits = _mix64(_mix64(seeds)[:, None] ^ np.arange(k, dtype=np.uint64)[None, :])
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def binomial(n: int, p: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Binomial(n, p) draws at uniforms ``u`` by the exact inverse CDF: the smallest ``k`` with
    ``P(K <= k) >= u``, what ``scipy.stats.binom.ppf(u, n, p)`` gives (2-3x faster at hundreds of shots).
    ``p`` is clipped into [0, 1]; int64 counts of the broadcast shape of ``p`` and ``u``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 2**53:
        raise ValueError(f"binomial: n must be an integer between 1 and 2**53, got {n!r}")
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    u = np.asarray(u, dtype=np.float64)
    p, u = np.broadcast_arrays(p, u)
    shape = u.shape
    p, u = p.reshape(-1), u.reshape(-1)
    # a Cornish-Fisher start (within a step or two of the answer), then walk to the exact quantile
    sd = np.sqrt(n * p * (1 - p))
    z = special.ndtri(u)
    guess = n * p + sd * z + (z * z - 1) * (1 - 2 * p) / 6
    k = np.clip(np.floor(guess + 0.5), 0, n).astype(np.int64)
    up = np.flatnonzero(special.bdtr(k, n, p) < u)
    while up.size:  # P(K <= k) < u: the quantile is higher
        k[up] += 1
        up = up[(k[up] < n) & (special.bdtr(k[up], n, p[up]) < u[up])]
    down = np.flatnonzero(k > 0)
    down = down[special.bdtr(k[down] - 1, n, p[down]) >= u[down]]
    while down.size:  # P(K <= k - 1) >= u already: the quantile is lower
        k[down] -= 1
        down = down[k[down] > 0]
        down = down[special.bdtr(k[down] - 1, n, p[down]) >= u[down]]
    return k.reshape(shape)


def sample_terms(template: CircuitTemplate, exact: np.ndarray, shots: int, row_seeds: np.ndarray) -> BatchResult:
    """Shot estimates of the template's observables from the exact ``<P>`` of every Pauli term, in order
    (``exact`` ``[B, n_terms]``; identity columns are ignored): term ``j`` of row ``i`` draws its +1 count at
    ``uniforms(row_seeds, n_terms)[i, j]``. ``values`` and ``stderr`` as the batch-seeded path computes them."""
    rows = exact.shape[0]
    terms = [(j, term) for j, obs in enumerate(template.observables) for term in obs.terms]
    e = np.array(exact, dtype=np.float64)
    for col, (_, term) in enumerate(terms):
        if not term.paulis:
            e[:, col] = 1.0
    plus = binomial(shots, (1 + e) / 2, uniforms(row_seeds, len(terms)))
    mean = (2 * plus - shots) / shots
    var = pm1_variance(mean, shots) / shots
    values = np.zeros((rows, template.n_observables))
    variance = np.zeros_like(values)
    for col, (j, term) in enumerate(terms):
        values[:, j] += term.coeff * mean[:, col]
        variance[:, j] += term.coeff**2 * var[:, col]
    return BatchResult(values=values, stderr=np.sqrt(variance))


def multinomial_rows(row_seeds: np.ndarray, probs: np.ndarray, shots: int) -> list[dict[str, int]]:
    """Counts ``{bitstring: count}`` per row from ``probs`` ``[B, 2**n]`` (wire 0 most significant): row ``i``
    draws ``shots`` outcomes with ``np.random.default_rng(row_seeds[i])``."""
    width = probs.shape[1].bit_length() - 1
    out = []
    for seed, row in zip(np.asarray(row_seeds, dtype=np.uint64).tolist(), np.clip(probs, 0.0, None)):
        draws = np.random.default_rng(seed).multinomial(shots, row / row.sum())
        out.append({format(int(i), f"0{width}b"): int(draws[i]) for i in np.flatnonzero(draws)})
    return out
