"""Row-seeded shot sampling (``backends/sampling.py``): the draws, the 5 sigma calibration of every local
backend, packing independence and determinism of ``reference`` and ``compiled``, and golden values of the
batch-seeded path (no row seeds), which must not change."""
import dataclasses

import numpy as np
import pytest
from scipy import stats

from hqflow.backends import CircuitBatch, get_backend
from hqflow.backends.base import row_seeds
from hqflow.backends.compiled import CompiledBackend
from hqflow.backends.compiled.backend import _by_shared_weights
from hqflow.backends.reference import ReferenceBackend
from hqflow.backends.sampling import binomial, multinomial_rows, uniforms
from hqflow.ir import Circuit

OBSERVABLES = ["Z0 Z1", [(0.5, "X0"), (1.0, "Y1"), (-0.3, "")]]


def template(observables=OBSERVABLES):
    c = Circuit(2, name="sampled")
    x, w = c.inputs("x", 2), c.weights("w", 2)
    c.ry(x[0], 0).ry(x[1], 1).cx(0, 1).rx(w[0], 0).ry(w[1], 1)
    return c.build(observables=list(observables))


def shared_weight_rows(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Inputs, and per-row weights with 3 distinct rows (so ``compiled`` groups them, as in parameter shift)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.4, 2.7, (rows, 2))
    w = rng.uniform(-0.6, 0.6, (3, 2))[rng.integers(0, 3, rows)]
    return x, w


# --- the draws ------------------------------------------------------------------------------------------


def test_uniforms_are_open_unit_interval_and_per_row():
    seeds = row_seeds(5, 1000)
    u = uniforms(seeds, 4)
    assert u.shape == (1000, 4) and u.dtype == np.float64
    assert 0 < u.min() and u.max() < 1
    np.testing.assert_array_equal(uniforms(seeds[7:9], 4), u[7:9])  # a row's draws depend on its seed only
    np.testing.assert_array_equal(uniforms(seeds, 2), u[:, :2])  # and on its column, not the column count
    flat = uniforms(row_seeds(6, 100_000), 1)[:, 0]
    assert stats.kstest(flat, "uniform").pvalue > 1e-4
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.15


@pytest.mark.parametrize("n", [1, 2, 17, 400, 1000, 100_000])
def test_binomial_is_the_exact_inverse_cdf(n):
    rng = np.random.default_rng(n)
    p = rng.uniform(0, 1, 20_000)
    p[:50], p[50:100], p[100:150], p[150:200] = 0.0, 1.0, 1e-12, 1 - 1e-12
    u = uniforms(row_seeds(n, p.size), 1)[:, 0]
    np.testing.assert_array_equal(binomial(n, p, u), stats.binom.ppf(u, n, p).astype(np.int64))


def test_binomial_clips_p_and_broadcasts():
    u = np.full((2, 3), 0.5)
    assert binomial(10, np.array([-0.2, 0.5, 1.3]), u).tolist() == [[0, 5, 10]] * 2
    with pytest.raises(ValueError, match="n must be an integer"):
        binomial(0, 0.5, 0.5)


def test_binomial_distribution_matches_numpy_moments():
    p = np.full(200_000, 0.3)
    k = binomial(400, p, uniforms(row_seeds(9, p.size), 1)[:, 0])
    assert abs(k.mean() - 120) < 5 * np.sqrt(400 * 0.3 * 0.7 / p.size)
    assert abs(k.var() / (400 * 0.3 * 0.7) - 1) < 0.02


def test_multinomial_rows_per_row_seed():
    probs = np.array([[0.5, 0.0, 0.0, 0.5], [0.1, 0.2, 0.3, 0.4], [1.0, 0.0, 0.0, 0.0]])
    seeds = row_seeds(3, 3)
    counts = multinomial_rows(seeds, probs, 100)
    assert [sum(c.values()) for c in counts] == [100] * 3
    assert set(counts[0]) <= {"00", "11"} and counts[2] == {"00": 100}
    assert multinomial_rows(seeds[1:2], probs[1:2], 100) == counts[1:2]


# --- packing independence and determinism ---------------------------------------------------------------


ROW_SEEDED = [ReferenceBackend, CompiledBackend]


@pytest.mark.parametrize("make", ROW_SEEDED, ids=["reference", "compiled"])
def test_row_seeded_capability(make):
    assert make().capabilities.row_seeded


@pytest.mark.parametrize("make", ROW_SEEDED, ids=["reference", "compiled"])
@pytest.mark.parametrize("observables", [OBSERVABLES, ()], ids=["values", "counts"])
def test_packing_independence(make, observables):
    backend = make()
    x, w = shared_weight_rows(60)
    batch = CircuitBatch.make(template(observables), x, w, shots=300, seed=21, per_row=True)
    assert _by_shared_weights(batch) is not None  # the whole batch takes compiled's grouped path
    whole = backend.run(batch)
    for size in (1, 7):
        parts = [backend.run(part) for part in batch.split(size)]
        if observables:
            np.testing.assert_array_equal(np.concatenate([p.values for p in parts]), whole.values)
            np.testing.assert_array_equal(np.concatenate([p.stderr for p in parts]), whole.stderr)
        else:
            assert [c for p in parts for c in p.counts] == whole.counts


@pytest.mark.parametrize("observables", [OBSERVABLES, ()], ids=["values", "counts"])
def test_reference_and_compiled_draw_alike(observables):
    """The draws are a function of a row's seed and exact values, so the two simulators agree."""
    x, w = shared_weight_rows(40, seed=1)
    batch = CircuitBatch.make(template(observables), x, w, shots=500, seed=4, per_row=True)
    ref, comp = ReferenceBackend().run(batch), CompiledBackend(dtype="complex64").run(batch)
    if observables:
        np.testing.assert_array_equal(ref.values, comp.values)
        np.testing.assert_array_equal(ref.stderr, comp.stderr)
    else:
        assert ref.counts == comp.counts


@pytest.mark.parametrize("make", ROW_SEEDED, ids=["reference", "compiled"])
def test_row_seeded_determinism(make):
    backend = make()
    x, w = shared_weight_rows(30, seed=2)
    batch = CircuitBatch.make(template(), x, w, shots=200, seed=8, per_row=True)
    first, again = backend.run(batch), backend.run(batch)
    np.testing.assert_array_equal(first.values, again.values)
    np.testing.assert_array_equal(first.stderr, again.stderr)
    other = backend.run(dataclasses.replace(batch, row_seeds=row_seeds(9, batch.size)))
    assert np.mean(other.values != first.values) > 0.5
    batch_seeded = backend.run(dataclasses.replace(batch, row_seeds=None))  # the batch-seeded path
    assert np.mean(batch_seeded.values != first.values) > 0.5


def test_emulated_qpu_passes_row_seeds_through():
    """``emulated-qpu`` hands a row-seeded batch to its simulator: its parts give the simulator's whole result."""
    x, w = shared_weight_rows(20, seed=6)
    batch = CircuitBatch.make(template(), x, w, shots=300, seed=2, per_row=True)
    qpu = get_backend("emulated-qpu", wrapped="compiled", max_circuits_per_job=7)
    try:
        parts = [qpu.submit(part).result() for part in batch.split(7)]
    finally:
        qpu.close()
    whole = CompiledBackend().run(batch)
    np.testing.assert_array_equal(np.concatenate([p.values for p in parts]), whole.values)
    np.testing.assert_array_equal(np.concatenate([p.stderr for p in parts]), whole.stderr)


def test_compiled_row_seeded_chunks_alike():
    """``max_amplitudes`` chunking does not change row-seeded results."""
    x, w = shared_weight_rows(50, seed=3)
    batch = CircuitBatch.make(template(), x, w, shots=250, seed=5, per_row=True)
    whole, chunked = CompiledBackend().run(batch), CompiledBackend(max_amplitudes=12).run(batch)
    np.testing.assert_array_equal(whole.values, chunked.values)
    np.testing.assert_array_equal(whole.stderr, chunked.stderr)


# --- 5 sigma calibration ----------------------------------------------------------------------------------


def _backend(name):
    if name == "aer":
        pytest.importorskip("qiskit_aer", reason="qiskit-aer is not installed")
    if name.startswith("pennylane"):
        pytest.importorskip("pennylane", reason="pennylane is not installed")
    if name == "emulated-qpu":
        return get_backend("emulated-qpu", wrapped="compiled", per_job=0)
    return get_backend(name)


@pytest.mark.parametrize("name", ["reference", "compiled", "aer", "pennylane:default.qubit", "emulated-qpu"])
def test_five_sigma_calibration(name):
    backend = _backend(name)
    try:
        x, w = shared_weight_rows(200, seed=11)
        t = template()
        exact = ReferenceBackend().run(CircuitBatch.make(t, x, w, shots=None)).values
        per_row = backend.capabilities.row_seeded
        res = backend.submit(CircuitBatch.make(t, x, w, shots=400, seed=12, per_row=per_row)).result()
        z = (res.values - exact) / res.stderr
        assert res.values.shape == exact.shape
        assert np.all(np.isfinite(z)), f"{name}: non-finite z-scores"
        assert np.abs(z).max() <= 5, f"{name}: a value {np.abs(z).max():.1f} sigma off"
        assert 0.8 <= z.std() <= 1.25, f"{name}: z-scores' std {z.std():.3f}"
    finally:
        backend.close()


@pytest.mark.parametrize("make", ROW_SEEDED, ids=["reference", "compiled"])
def test_batch_seeded_path_calibrated_too(make):
    x, w = shared_weight_rows(200, seed=13)
    exact = ReferenceBackend().run(CircuitBatch.make(template(), x, w, shots=None)).values
    res = make().run(CircuitBatch.make(template(), x, w, shots=400, seed=14))
    z = (res.values - exact) / res.stderr
    assert np.abs(z).max() <= 5 and 0.8 <= z.std() <= 1.25


# --- golden values of the batch-seeded path (computed at main af9700c, before row seeds) --------------------

GOLDEN_X = np.array([[0.1, 0.7], [1.2, -0.4], [2.5, 0.3]])
GOLDEN_W = np.array([[0.3, -0.2], [0.3, -0.2], [1.0, 0.5]])
GOLDEN_VALUES = [[0.82, -0.21], [0.76, -0.5700000000000001], [0.46, -0.21999999999999997]]
GOLDEN_STDERR = [[0.057524698252932285, 0.11207410968018466], [0.06531972647421809, 0.10988975191416883],
                 [0.08923920866769473, 0.11218671305399132]]
GOLDEN_COUNTS = [{"00": 48, "01": 2}, {"00": 27, "01": 4, "11": 19}, {"00": 3, "01": 11, "11": 36}]


@pytest.mark.parametrize("make", [ReferenceBackend, CompiledBackend], ids=["reference", "compiled"])
def test_golden_batch_seeded_path(make):
    backend = make()
    res = backend.run(CircuitBatch.make(template(), GOLDEN_X, GOLDEN_W, shots=100, seed=7))
    assert res.values.tolist() == GOLDEN_VALUES and res.stderr.tolist() == GOLDEN_STDERR
    counts = backend.run(CircuitBatch.make(template(()), GOLDEN_X, GOLDEN_W, shots=50, seed=3)).counts
    assert counts == GOLDEN_COUNTS


def test_golden_compiled_chunked_batch_seeded_path():
    """One generator runs across ``compiled``'s chunks, as before."""
    res = CompiledBackend(max_amplitudes=8).run(CircuitBatch.make(template(), GOLDEN_X, GOLDEN_W, shots=100, seed=7))
    assert res.values.tolist() == [[0.82, -0.45999999999999996], [0.76, -0.43], [0.52, -0.16999999999999998]]
    assert res.stderr.tolist() == [[0.057524698252932285, 0.11146408580454255],
                                   [0.06531972647421809, 0.11056786389024853],
                                   [0.08584693919818558, 0.11180339887498948]]
