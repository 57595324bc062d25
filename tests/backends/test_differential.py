"""reference, aer (exact) and pennylane:default.qubit agree, three ways, on random circuits."""
import numpy as np
import pytest

from hqflow.backends import CircuitBatch, get_backend
from hqflow.ir.random import random_template

BACKENDS = ["reference", "aer", "pennylane:default.qubit"]


@pytest.fixture(scope="module")
def backends():
    return {name: get_backend(name) for name in BACKENDS}


def _cases(n: int):
    rng = np.random.default_rng(20261122)
    for k in range(n):
        t = random_template(rng, int(rng.integers(1, 9)))
        x = rng.uniform(-np.pi, np.pi, (3, t.n_inputs))
        w = rng.uniform(-np.pi, np.pi, (3, t.n_weights) if k % 2 else (t.n_weights,))
        yield k, t, x, w


def test_exact_values_agree_on_50_random_circuits(backends):
    gates_seen = set()
    for k, t, x, w in _cases(50):
        gates_seen |= {op.name for op in t.ops}
        results = {n: b.submit(CircuitBatch.make(t, x, w)).result(timeout=60).values for n, b in backends.items()}
        for name in BACKENDS[1:]:
            np.testing.assert_allclose(results[name], results["reference"], atol=1e-6, err_msg=f"{name}, case {k}: {t}")
    assert {"crx", "rzz", "u", "ccx", "cswap"} <= gates_seen  # encodings, weights and entanglers all mixed


def test_shot_values_agree_within_five_standard_errors(backends):
    for k, t, x, w in _cases(12):
        exact = backends["reference"].run_checked(CircuitBatch.make(t, x, w)).values
        for name, b in backends.items():
            res = b.submit(CircuitBatch.make(t, x, w, shots=4000, seed=k)).result(timeout=60)
            assert res.stderr is not None and res.stderr.shape == exact.shape
            assert np.all(np.abs(res.values - exact) <= 5 * res.stderr + 1e-9), f"{name}, case {k}"


@pytest.mark.parametrize("name", BACKENDS + ["compiled"])
def test_one_shot_gives_outcomes_and_no_standard_error(name):
    """One shot: each term's estimate is a ±1 outcome, and the standard error is undefined (NaN), not 0."""
    from hqflow.ir import Circuit

    c = Circuit(2)
    x = c.inputs("x", 1)
    c.ry(x[0], 0).cx(0, 1)
    t = c.build(observables=["Z0", [(0.5, "Z0 Z1")]])
    res = get_backend(name).submit(CircuitBatch.make(t, np.full((20, 1), 1.1), [], shots=1, seed=3)).result(timeout=60)
    assert np.all(np.isin(res.values[:, 0], [-1.0, 1.0])) and np.all(np.isin(res.values[:, 1], [-0.5, 0.5]))
    assert res.stderr.shape == (20, 2) and np.all(np.isnan(res.stderr))
