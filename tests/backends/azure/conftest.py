"""Fixtures for Azure Quantum tests over real HTTP, on the ``azurite`` and ``azure_service`` of
tests/conftest.py (one of each per test worker, shared with the azure_loopback benchmark's run):

* ``azure_workspace``: the service reset (no faults, no latency, no jobs), then its
  ``workspace_options()``: subscription_id, resource_group, name, location, endpoint, key.
"""
import pytest


@pytest.fixture
def azure_workspace(azure_service):
    azure_service.configure(reset=True)
    return azure_service.workspace_options()


class Sampled:
    """Checks of sampled figures against exact ones by the exact binomial tail, not by 5 standard errors: a value
    near +-1 (or a probability near 0 or 1) sits on a skewed distribution, where the normal approximation misfires
    (about 5% of runs at 500 shots; a value of exactly +-1 has a standard error of 0). A figure passes when its
    two-sided tail probability is at least the normal's beyond 5 sigma (issue 34, item 22)."""

    FIVE_SIGMA = 5.733e-7  # 2 * (1 - Phi(5))

    @classmethod
    def tails(cls, k, shots, p):
        """Two-sided tail probabilities of ``k`` successes in ``shots`` draws of probability ``p``."""
        import numpy as np
        from scipy.stats import binom

        k, p = np.rint(np.asarray(k, float)), np.clip(np.asarray(p, float), 0.0, 1.0)
        return np.minimum(1.0, 2 * np.minimum(binom.cdf(k, shots, p), binom.sf(k - 1, shots, p)))

    @classmethod
    def within(cls, values, exact, shots) -> float:
        """The share of ``values`` within 5 sigma of ``exact``, each observable one Pauli product (a value is
        ``1 - 2k / shots`` with ``k ~ Binomial(shots, (1 - exact) / 2)``): split a Pauli sum with ``terms``."""
        import numpy as np

        values, exact = np.asarray(values, float), np.asarray(exact, float)
        return float(np.mean(cls.tails((1 - values) / 2 * shots, shots, (1 - exact) / 2) >= cls.FIVE_SIGMA))

    @classmethod
    def probability(cls, frequency, p, shots) -> bool:
        """Whether a frequency of ``shots`` draws is within 5 sigma of the probability ``p``."""
        return bool(cls.tails(frequency * shots, shots, p) >= cls.FIVE_SIGMA)

    @staticmethod
    def terms(template):
        """``template`` with one observable per Pauli term of its observables, coefficient 1 (what ``within``
        judges), and each original observable's coefficients: ``value = coefficients @ term values``."""
        import dataclasses

        import numpy as np
        from hqflow.ir.circuit import Observable, PauliTerm

        terms = [(k, t) for k, obs in enumerate(template.observables) for t in obs.terms]
        mix = np.zeros((len(template.observables), len(terms)))
        for j, (k, t) in enumerate(terms):
            mix[k, j] = t.coeff
        split = tuple(Observable((PauliTerm(1.0, t.paulis),)) for _, t in terms)
        return dataclasses.replace(template, observables=split), mix


@pytest.fixture
def sampled():
    return Sampled
