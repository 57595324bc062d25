"""pennylane:<device> against the numpy reference: exact values, probabilities, shots, counts."""
import numpy as np
import pytest

from hqflow.backends import BackendError, CircuitBatch, get_backend
from hqflow.backends.pennylane_device import PennyLaneBackend
from hqflow.backends.reference import ReferenceBackend
from hqflow.ir import Circuit
from hqflow.ir.random import random_template

REF = ReferenceBackend()
DQ = PennyLaneBackend("default.qubit")
LQ = PennyLaneBackend("lightning.qubit")


def random_batch(seed, rows=3, shots=None, observables=True):
    """A random template on 1..8 qubits; odd seeds get per-row weights."""
    rng = np.random.default_rng(seed)
    t = random_template(rng, 1 + seed % 8)
    if not observables:
        t = t.with_observables([])
    x = rng.uniform(-np.pi, np.pi, size=(rows, t.n_inputs))
    w = rng.uniform(-np.pi, np.pi, size=(rows, t.n_weights) if seed % 2 else t.n_weights)
    return CircuitBatch.make(t, x, w, shots=shots, seed=seed)


@pytest.mark.parametrize("seed", range(50))
def test_default_qubit_values_match_reference(seed):
    batch = random_batch(seed)
    np.testing.assert_allclose(DQ.run_checked(batch).values, REF.run_checked(batch).values, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 3, 6, 13])
def test_lightning_values_match_reference(seed):
    batch = random_batch(seed)
    np.testing.assert_allclose(LQ.run_checked(batch).values, REF.run_checked(batch).values, atol=1e-6)


@pytest.mark.parametrize("seed", range(100, 112))
def test_probabilities_match_reference(seed):
    batch = random_batch(seed, observables=False)
    expected = REF.run_checked(batch).probs
    assert expected.shape == (3, 2**batch.template.n_qubits)
    np.testing.assert_allclose(DQ.run_checked(batch).probs, expected, atol=1e-8)
    if seed % 4 == 0:
        np.testing.assert_allclose(LQ.run_checked(batch).probs, expected, atol=1e-8)


def test_single_row_and_single_observable_shapes():
    batch = random_batch(7, rows=1)
    t = batch.template.with_observables(batch.template.observables[:1])
    one = CircuitBatch.make(t, batch.inputs, batch.weights)
    for backend in (DQ, LQ):
        got = backend.run_checked(one).values
        assert got.shape == (1, 1)
        np.testing.assert_allclose(got, REF.run_checked(one).values, atol=1e-8)


def test_template_without_angles_is_repeated_per_row():
    c = Circuit(2)
    c.h(0).cx(0, 1).s(1)
    t = c.build(observables=["X0 X1", [(0.5, "Z0 Z1"), (0.25, "")]])
    batch = CircuitBatch.make(t, np.zeros((4, 0)), None)
    np.testing.assert_allclose(DQ.run_checked(batch).values, [[0.0, 0.75]] * 4, atol=1e-12)
    sampled = CircuitBatch.make(t.with_observables([]), np.zeros((4, 0)), None, shots=500, seed=1)
    counts = DQ.run_checked(sampled).counts
    assert len(counts) == 4 and all(set(c) <= {"00", "11"} and sum(c.values()) == 500 for c in counts)
    assert len({tuple(sorted(c.items())) for c in counts}) > 1  # independent draws per row


# ---------------------------------------------------------------------- shot mode


@pytest.mark.parametrize("seed", range(200, 210))
def test_shot_values_within_five_standard_errors(seed):
    batch = random_batch(seed, rows=4, shots=2000)
    exact = REF.run_checked(CircuitBatch.make(batch.template, batch.inputs, batch.weights)).values
    res = (LQ if seed % 5 == 0 else DQ).run_checked(batch)
    assert res.values.shape == res.stderr.shape == exact.shape
    assert np.all(np.abs(res.values - exact) <= 5 * res.stderr + 1e-12)


def test_standard_error_is_honest_for_grouped_and_correlated_terms():
    # Z0 and Z1 share shots and are strongly correlated on this state (ignoring that
    # would understate the stderr by ~25%); X0 needs its own group.
    c = Circuit(2)
    w = c.weights("w", 2)
    c.ry(w[0], 0).cx(0, 1).ry(w[1], 1)
    t = c.build(observables=[[(1.0, "Z0"), (0.8, "Z1"), (-0.6, "X0"), (0.3, "")], "Y1"])
    rows = 400
    batch = CircuitBatch.make(t, np.zeros((rows, 0)), np.tile([1.1, 0.3], (rows, 1)), shots=200, seed=5)
    res = DQ.run_checked(batch)
    exact = REF.run_checked(CircuitBatch.make(t, None, [1.1, 0.3])).values[0]
    assert np.all(np.abs(res.values.mean(axis=0) - exact) <= 5 * res.stderr.mean(axis=0) / np.sqrt(rows))
    # Each row is an independent estimate: their spread must match the reported stderr.
    ratio = res.values.std(axis=0, ddof=1) / np.sqrt(np.mean(res.stderr**2, axis=0))
    assert np.all((ratio > 0.85) & (ratio < 1.15)), ratio


def test_counts_agree_with_reference_probabilities():
    for seed in (300, 301, 302):
        batch = random_batch(seed, rows=2, shots=4000, observables=False)
        n = batch.template.n_qubits
        probs = REF.run_checked(CircuitBatch.make(batch.template, batch.inputs, batch.weights)).probs
        counts = (LQ if seed == 302 else DQ).run_checked(batch).counts
        for row, p in zip(counts, probs):
            assert sum(row.values()) == 4000 and all(len(k) == n for k in row)
            got = np.array([row.get(format(i, f"0{n}b"), 0) for i in range(2**n)])
            sigma = np.sqrt(4000 * p * (1 - p))
            assert np.all(np.abs(got - 4000 * p) <= 5 * sigma + 1)


def test_seeds_make_shot_runs_reproducible():
    batch = random_batch(210, rows=3, shots=100)
    again = CircuitBatch.make(batch.template, batch.inputs, batch.weights, shots=100, seed=batch.seed)
    other = CircuitBatch.make(batch.template, batch.inputs, batch.weights, shots=100, seed=batch.seed + 1)
    for backend in (DQ, LQ):
        first = backend.run_checked(batch).values
        np.testing.assert_array_equal(first, backend.run_checked(again).values)
        assert not np.array_equal(first, backend.run_checked(other).values)
    unseeded = CircuitBatch.make(batch.template, batch.inputs, batch.weights, shots=100)
    a = PennyLaneBackend(seed=9).run_checked(unseeded).values
    np.testing.assert_array_equal(a, PennyLaneBackend(seed=9).run_checked(unseeded).values)


# --------------------------------------------------------------- backend plumbing


def test_registry_capabilities_and_async_submit():
    backend = get_backend("pennylane:default.qubit", max_circuits_per_job=2)
    assert backend.name == "pennylane:default.qubit"
    assert backend.capabilities.max_circuits_per_job == 2
    batch = random_batch(11, rows=5)
    res = backend.submit(batch).result(timeout=60)
    assert res.metadata["parts"] == 3
    np.testing.assert_allclose(res.values, REF.run_checked(batch).values, atol=1e-8)
    backend.close()


@pytest.mark.parametrize("make", [lambda: get_backend("pennylane:no.such.device"), lambda: PennyLaneBackend("nope")])
def test_unknown_device_is_a_one_line_backend_error(make):
    with pytest.raises(BackendError, match=r"PennyLane device '(no.such.device|nope)' cannot be created") as info:
        make()
    assert "\n" not in str(info.value)


def test_bad_device_option_is_a_backend_error():
    with pytest.raises(BackendError, match="unexpected keyword argument 'colour'"):
        PennyLaneBackend("default.qubit", colour="blue")
