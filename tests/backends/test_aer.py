"""The ``aer`` backend, differentially against the numpy ``reference`` oracle."""
import numpy as np
import pytest
from qiskit_aer import AerSimulator

import hqflow.backends.aer as aer_mod
from hqflow.backends import BackendError, CircuitBatch, get_backend
from hqflow.backends.aer import AerBackend
from hqflow.backends.reference import ReferenceBackend
from hqflow.ir import Circuit
from hqflow.ir.random import random_template

N_RANDOM = 50


@pytest.fixture(scope="module")
def aer():
    return AerBackend()


def random_case(seed: int, rows: int = 3, observables: bool = True):
    """A random template on 1..8 qubits with random inputs; odd seeds get per-row weights."""
    rng = np.random.default_rng(seed)
    t = random_template(rng, 1 + seed % 8, n_observables=2 if observables else 0)
    x = rng.uniform(-np.pi, np.pi, (rows, t.n_inputs))
    w = rng.uniform(-np.pi, np.pi, (rows, t.n_weights) if seed % 2 else t.n_weights)
    return t, x, w


def exact(template, x=None, w=None):
    return ReferenceBackend().run_checked(CircuitBatch.make(template, x, w, shots=None))


def bell(observables=()):
    return Circuit(2, name="bell").h(0).cx(0, 1).build(observables=observables)


# --- exact mode -------------------------------------------------------------------------


def test_exact_values_match_reference(aer):
    for seed in range(N_RANDOM):
        t, x, w = random_case(seed)
        got = aer.run_checked(CircuitBatch.make(t, x, w))
        assert got.values.shape == (3, t.n_observables) and got.stderr is None
        np.testing.assert_allclose(got.values, exact(t, x, w).values, atol=1e-6, err_msg=f"seed {seed}")


def test_exact_probabilities_match_reference(aer):
    for seed in range(N_RANDOM):
        t, x, w = random_case(seed, observables=False)
        got = aer.run_checked(CircuitBatch.make(t, x, w))
        assert got.probs.shape == (3, 2**t.n_qubits)
        np.testing.assert_allclose(got.probs, exact(t, x, w).probs, atol=1e-8, err_msg=f"seed {seed}")


def test_wire_zero_is_the_most_significant_bit(aer):
    t = Circuit(3).x(0).build()
    probs = aer.run_checked(CircuitBatch.make(t)).probs[0]
    assert probs[0b100] == pytest.approx(1.0)
    counts = aer.run_checked(CircuitBatch.make(t, shots=50, seed=1)).counts
    assert counts == [{"100": 50}]


def test_parametrized_controlled_rotations(aer):
    """Aer mis-binds runtime parameters of crx/cry/crz/cp; the backend must not."""
    c = Circuit(3)
    x, w = c.inputs("x", 1), c.weights("w", 4)
    c.h(0).ry(0.4, 1).rx(x[0], 2)
    c.crx(w[0], 0, 1).cry(2 * w[1] + 0.1, 1, 2).crz(w[2], 2, 0).cp(w[3] - 1, 0, 2).h(0)
    t = c.build(observables=["Z0", "X1", "Y2 Z0"])
    xs, ws = np.array([[0.3], [1.1]]), np.array([0.9, -1.2, 2.0, 0.7])
    np.testing.assert_allclose(
        aer.run_checked(CircuitBatch.make(t, xs, ws)).values, exact(t, xs, ws).values, atol=1e-10
    )
    got = aer.run_checked(CircuitBatch.make(t, xs, ws, shots=4000, seed=3))
    assert np.all(np.abs(got.values - exact(t, xs, ws).values) <= 5 * got.stderr)


def test_circuits_without_parameters(aer):
    t = bell(["Z0 Z1", "X0", [(0.5, ""), (2.0, "X0 X1")]])
    np.testing.assert_allclose(aer.run_checked(CircuitBatch.make(t)).values, [[1.0, 0.0, 2.5]], atol=1e-12)
    np.testing.assert_allclose(aer.run_checked(CircuitBatch.make(bell())).probs, [[0.5, 0, 0, 0.5]], atol=1e-12)
    # several rows without parameters: per-row weights of width 0
    rows = aer.run_checked(CircuitBatch.make(bell(), None, np.zeros((4, 0)), shots=200, seed=5)).counts
    assert len(rows) == 4 and all(set(r) <= {"00", "11"} and sum(r.values()) == 200 for r in rows)
    assert len({tuple(sorted(r.items())) for r in rows}) > 1  # independent samples per row
    got = aer.run_checked(CircuitBatch.make(t, None, np.zeros((3, 0)), shots=500, seed=6))
    np.testing.assert_allclose(got.values[:, [0, 2]], [[1.0, 2.5]] * 3)
    np.testing.assert_allclose(got.stderr[:, [0, 2]], 0.0, atol=1e-12)
    assert np.all(np.abs(got.values[:, 1]) <= 5 * got.stderr[:, 1])


@pytest.mark.parametrize("method", ["statevector", "matrix_product_state", "density_matrix"])
def test_methods(method):
    backend = AerBackend(method=method)
    for seed in (3, 4):
        t, x, w = random_case(seed)
        got = backend.run_checked(CircuitBatch.make(t, x, w)).values
        np.testing.assert_allclose(got, exact(t, x, w).values, atol=1e-6)


# --- shot mode --------------------------------------------------------------------------


def test_sampled_values_within_five_standard_errors(aer):
    for seed in range(30):
        t, x, w = random_case(seed)
        got = aer.run_checked(CircuitBatch.make(t, x, w, shots=4000, seed=seed))
        want = exact(t, x, w).values
        assert got.stderr.shape == want.shape and np.all(got.stderr >= 0)
        # a deterministic estimate (e.g. a term the state fixes) has stderr ~ 1e-18
        assert np.all(np.abs(got.values - want) <= 5 * got.stderr + 1e-9), f"seed {seed}"


def test_sampled_stderr_is_calibrated(aer):
    """Across independent runs, the spread of the estimates matches the reported stderr."""
    t, x, w = random_case(5, rows=1)
    runs = [aer.run_checked(CircuitBatch.make(t, x, w, shots=300, seed=s)) for s in range(200)]
    values = np.array([r.values[0] for r in runs])
    stderr = np.array([r.stderr[0] for r in runs])
    ratio = values.std(axis=0, ddof=1) / stderr.mean(axis=0)
    assert np.all((ratio > 0.8) & (ratio < 1.2)), ratio
    assert np.all(np.abs(values.mean(axis=0) - exact(t, x, w).values[0]) < 5 * stderr.mean(axis=0) / np.sqrt(200))


def test_counts_match_probabilities(aer):
    shots = 4000
    for seed in range(20):
        t, x, w = random_case(seed, observables=False)
        counts = aer.run_checked(CircuitBatch.make(t, x, w, shots=shots, seed=seed)).counts
        probs = exact(t, x, w).probs
        assert len(counts) == 3
        for row, p in zip(counts, probs):
            assert sum(row.values()) == shots
            assert all(len(k) == t.n_qubits for k in row)
            seen = np.zeros_like(p)
            for bits, c in row.items():
                seen[int(bits, 2)] = c
            sigma = np.sqrt(shots * p * (1 - p))
            assert np.all(np.abs(seen - shots * p) <= 5 * sigma + 1), f"seed {seed}"


def test_seeds_make_runs_reproducible():
    t, x, w = random_case(2)
    batch = CircuitBatch.make(t, x, w, shots=100, seed=7)
    a, b = AerBackend().run_checked(batch), AerBackend().run_checked(batch)
    np.testing.assert_array_equal(a.values, b.values)
    other = AerBackend().run_checked(CircuitBatch.make(t, x, w, shots=100, seed=8))
    assert not np.array_equal(a.values, other.values)
    # a backend seed makes the sequence of unseeded runs reproducible, each run fresh
    unseeded = CircuitBatch.make(t, x, w, shots=100)
    one, two = AerBackend(seed=1), AerBackend(seed=1)
    first = one.run_checked(unseeded).values
    np.testing.assert_array_equal(first, two.run_checked(unseeded).values)
    assert not np.array_equal(first, one.run_checked(unseeded).values)


# --- batching, caching and options ----------------------------------------------------


def test_one_transpile_per_template_and_one_simulator_call_per_batch(monkeypatch):
    backend = AerBackend()
    transpiles, sim_runs = [], []
    real_transpile, real_run = aer_mod.transpile, backend._sim.run
    monkeypatch.setattr(aer_mod, "transpile", lambda *a, **k: transpiles.append(1) or real_transpile(*a, **k))
    monkeypatch.setattr(backend._sim, "run", lambda *a, **k: sim_runs.append(1) or real_run(*a, **k))
    t, x, w = random_case(6, rows=5)  # 7 qubits, several measurement groups
    for shots in (None, 100, None, 300):
        backend.run_checked(CircuitBatch.make(t, x, w, shots=shots, seed=0))
    sampled = t.with_observables([])
    for shots in (None, 100):
        backend.run_checked(CircuitBatch.make(sampled, x, w, shots=shots, seed=0))
    assert len(transpiles) == 2  # one per template
    assert len(sim_runs) == 6  # one per batch


def test_a_large_batch_runs_in_chunks_of_bounded_size(monkeypatch):
    """Aer's time and memory per row grow with the rows of one call (2.3 GB at 32k rows): the backend
    sends at most CHUNK_ROWS rows per call, so both grow linearly (benchmarks/backends.py, scaling)."""
    monkeypatch.setattr(aer_mod, "CHUNK_ROWS", 4)
    backend = AerBackend()
    sizes = []
    real_run = backend._sim.run
    monkeypatch.setattr(backend._sim, "run", lambda c, parameter_binds=None, **k: sizes.append(
        len(next(iter(parameter_binds[0].values())))) or real_run(c, parameter_binds=parameter_binds, **k))
    t, x, w = random_case(4, rows=10)
    got = backend.run_checked(CircuitBatch.make(t, x, w))
    assert got.metadata["parts"] == 3
    np.testing.assert_allclose(got.values, exact(t, x, w).values, atol=1e-6)
    probs = backend.run_checked(CircuitBatch.make(t.with_observables([]), x, w))
    assert sizes == [4, 4, 2] * 2  # values, then probabilities
    np.testing.assert_allclose(probs.probs, exact(t.with_observables([]), x, w).probs, atol=1e-6)
    a = backend.run_checked(CircuitBatch.make(t, x, w, shots=50, seed=7)).values
    b = backend.run_checked(CircuitBatch.make(t, x, w, shots=50, seed=7)).values
    np.testing.assert_array_equal(a, b)  # chunks draw from seeds derived from the batch's


def test_max_circuits_per_job_splits_and_rejoins():
    t, x, w = random_case(9, rows=5)
    backend = AerBackend(max_circuits_per_job=2)
    assert backend.capabilities.max_circuits_per_job == 2
    got = backend.run_checked(CircuitBatch.make(t, x, w))
    assert got.metadata["parts"] == 3
    np.testing.assert_allclose(got.values, exact(t, x, w).values, atol=1e-6)
    counts = backend.run_checked(CircuitBatch.make(t.with_observables([]), x, w, shots=10, seed=1)).counts
    assert len(counts) == 5


def test_capabilities_options_and_registry():
    limit = AerSimulator().target.num_qubits  # Aer's limit (memory dependent)
    caps = AerBackend().capabilities
    assert caps.name == "aer" and caps.max_qubits == limit and caps.exact and caps.shots
    assert AerBackend(max_qubits=2).capabilities.max_qubits == 2
    with pytest.raises(BackendError, match=r"has 3 qubits but backend 'aer' allows at most 2"):
        AerBackend(max_qubits=2).run_checked(CircuitBatch.make(Circuit(3).h(2).build()))
    with pytest.raises(BackendError, match=r"aer method must be one of"):
        AerBackend(method="stabilizer")
    with pytest.raises(BackendError, match=rf"max_qubits must be in 1\.\.{limit}"):
        AerBackend(max_qubits=limit + 1)
    backend = get_backend("aer", seed=3)
    assert isinstance(backend, AerBackend)
    job = backend.submit(CircuitBatch.make(bell(["Z0 Z1"])))
    np.testing.assert_allclose(job.result(timeout=60).values, [[1.0]])
    assert job.result().metadata["backend"] == "aer"
    backend.close()
