"""The numpy reference simulator, CircuitBatch.make, the job API and the registry."""
import threading

import numpy as np
import pytest

import hqflow.backends as backends_mod
from hqflow.backends import (
    Backend,
    BackendError,
    BatchResult,
    Capabilities,
    CircuitBatch,
    FutureJob,
    Job,
    JobCancelled,
    JobFailed,
    backend_names,
    get_backend,
    register_backend,
)
from hqflow.backends.reference import ReferenceBackend
from hqflow.ir import Circuit
from hqflow.ir.random import random_template


def run(template, inputs=None, weights=None, **kw) -> BatchResult:
    return ReferenceBackend().run_checked(CircuitBatch.make(template, inputs, weights, **kw))


def rot_template(gate="ry", observables=("Z0",), shots=None):
    c = Circuit(1, name=f"{gate}-t")
    x = c.inputs("x", 1)
    c.gate(gate, [0], x[0])
    return c.build(observables=list(observables), shots=shots)


# --- exact results vs hand derivations -------------------------------------------


def test_bell_state_probabilities():
    c = Circuit(2, name="bell")
    c.h(0).cx(0, 1)
    res = run(c.build())
    assert res.values is None and res.counts is None
    np.testing.assert_allclose(res.probs, [[0.5, 0, 0, 0.5]], atol=1e-12)


def test_ghz_probabilities_and_parity():
    c = Circuit(3, name="ghz")
    c.h(0).cx(0, 1).cx(1, 2)
    np.testing.assert_allclose(run(c.build()).probs, [[0.5, 0, 0, 0, 0, 0, 0, 0.5]], atol=1e-12)
    # <Z0 Z1> = <Z1 Z2> = 1, <Z0> = 0, <X0 X1 X2> = 1
    vals = run(c.build(observables=["Z0 Z1", "Z1 Z2", "Z0", "X0 X1 X2", "Y0 Y1 X2"])).values
    np.testing.assert_allclose(vals, [[1, 1, 0, 1, -1]], atol=1e-12)


@pytest.mark.parametrize(
    "prep, index",
    [((("x", 0),), 0b10), ((("x", 1),), 0b01), ((("x", 0), ("x", 1)), 0b11)],
)
def test_wire_zero_is_most_significant(prep, index):
    c = Circuit(2)
    for g, w in prep:
        c.gate(g, [w])
    probs = run(c.build()).probs[0]
    assert probs[index] == pytest.approx(1.0)


def test_cx_control_is_first_wire():
    c = Circuit(2)
    c.x(1).cx(1, 0)  # control 1 set -> flips wire 0: |11>
    assert run(c.build()).probs[0][0b11] == pytest.approx(1)
    c = Circuit(2)
    c.x(0).cx(1, 0)  # control 1 clear: stays |10>
    assert run(c.build()).probs[0][0b10] == pytest.approx(1)


@pytest.mark.parametrize("t", [0.0, 0.4, 1.3, -2.2, np.pi])
def test_single_qubit_rotation_closed_forms(t):
    # ry(t)|0>: <Z> = cos t, <X> = sin t, <Y> = 0
    v = run(rot_template("ry", ["Z0", "X0", "Y0"]), [[t]]).values[0]
    np.testing.assert_allclose(v, [np.cos(t), np.sin(t), 0.0], atol=1e-12)
    # rx(t)|0>: <Z> = cos t, <Y> = -sin t, <X> = 0
    v = run(rot_template("rx", ["Z0", "X0", "Y0"]), [[t]]).values[0]
    np.testing.assert_allclose(v, [np.cos(t), 0.0, -np.sin(t)], atol=1e-12)
    # rz only adds a phase to |0>
    v = run(rot_template("rz", ["Z0", "X0"]), [[t]]).values[0]
    np.testing.assert_allclose(v, [1.0, 0.0], atol=1e-12)


def test_affine_angles_and_observable_coefficients():
    c = Circuit(2, name="aff")
    x = c.inputs("x", 1)
    w = c.weights("w", 1)
    c.ry(2 * x[0] + 0.3, 0).rx(-w[0] + 1, 1)
    t = c.build(observables=[[(0.5, "Z0"), (-2.0, "Z1"), (3.0, "")], "Z0 Z1"])
    xs = np.array([[0.1], [0.7], [-1.0]])
    res = run(t, xs, [0.4])
    a = 2 * xs[:, 0] + 0.3
    b = -0.4 + 1
    np.testing.assert_allclose(res.values[:, 0], 0.5 * np.cos(a) - 2.0 * np.cos(b) + 3.0, atol=1e-12)
    np.testing.assert_allclose(res.values[:, 1], np.cos(a) * np.cos(b), atol=1e-12)


def test_probabilities_sum_to_one_on_random_circuits():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4):
        t = random_template(rng, n).with_observables([])
        x = rng.uniform(-2, 2, size=(3, t.n_inputs))
        w = rng.uniform(-2, 2, size=t.n_weights)
        probs = run(t, x, w).probs
        assert probs.shape == (3, 2**n)
        assert np.all(probs >= 0)
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)


def test_per_row_weights_match_shared_weights_row_by_row():
    rng = np.random.default_rng(3)  # a seed whose observables are not identically 0
    t = random_template(rng, 3)
    B = 4
    x = rng.uniform(-2, 2, size=(B, t.n_inputs))
    W = rng.uniform(-2, 2, size=(B, t.n_weights))
    per_row = run(t, x, W).values
    assert per_row.shape == (B, t.n_observables)
    for b in range(B):
        np.testing.assert_allclose(per_row[b], run(t, x[b : b + 1], W[b]).values[0], atol=1e-12)
    shared = run(t, x, W[0]).values
    np.testing.assert_allclose(shared, run(t, x, np.repeat(W[:1], B, axis=0)).values, atol=1e-12)
    assert not np.allclose(per_row[1:], shared[1:])  # the rows really used different weights


def test_per_row_weights_without_inputs():
    c = Circuit(1, name="w-only")
    w = c.weights("w", 1)
    c.ry(w[0], 0)
    t = c.build(observables=["Z0"])
    ws = np.array([[0.0], [np.pi / 2], [np.pi]])
    batch = CircuitBatch.make(t, None, ws)
    assert batch.size == 3
    np.testing.assert_allclose(run(t, None, ws).values[:, 0], [1, 0, -1], atol=1e-12)
    assert CircuitBatch.make(t, None, [0.1]).size == 1


# --- CircuitBatch.make checks ----------------------------------------------------


@pytest.fixture
def t22():
    c = Circuit(2, name="t22")
    x = c.inputs("x", 2)
    w = c.weights("w", 2)
    c.ry(x[0], 0).ry(x[1], 1).cz(0, 1).rx(w[0], 0).rx(w[1], 1)
    return c.build(observables=["Z0"])


def test_make_normalizes_shapes(t22):
    b = CircuitBatch.make(t22, [0.1, 0.2], [0.3, 0.4])  # a single 1-D input row
    assert b.inputs.shape == (1, 2) and b.weights.shape == (2,)
    assert b.weights_per_row().shape == (1, 2)
    b = CircuitBatch.make(t22, np.zeros((5, 2)), np.zeros((5, 2)))
    assert b.size == 5 and b.shots is None
    assert CircuitBatch.make(t22, np.zeros((1, 2)), [0, 0], shots=10).shots == 10
    assert CircuitBatch.make(t22.with_shots(7), np.zeros((1, 2)), [0, 0]).shots == 7
    assert CircuitBatch.make(t22.with_shots(7), np.zeros((1, 2)), [0, 0], shots=None).shots is None


@pytest.mark.parametrize(
    "inputs, weights, shots, message",
    [
        (np.zeros((3, 2)), [0.1, 0.2, 0.3], "template", r"weights for 't22' must have shape \[2\] or \[B, 2\], got \[3\]"),
        (np.zeros((3, 2)), np.zeros((3, 2, 1)), "template", r"weights for 't22' must have shape \[2\] or \[B, 2\], got \[3, 2, 1\]"),
        (np.zeros((3, 3)), [0.1, 0.2], "template", r"inputs for 't22' must have shape \[B, 2\], got \[3, 3\]"),
        (np.zeros((3, 2, 1)), [0.1, 0.2], "template", r"inputs for 't22' must have shape \[B, 2\], got \[3, 2, 1\]"),
        (None, [0.1, 0.2], "template", r"circuit 't22' needs inputs of shape \[B, 2\]"),
        ([[0.1, np.nan]], [0.1, 0.2], "template", "inputs contain NaN or infinity"),
        ([[0.1, 0.2]], [np.inf, 0.2], "template", "weights contain NaN or infinity"),
        ([["a", "b"]], [0.1, 0.2], "template", "inputs must be numeric arrays, got list"),
        (np.zeros((3, 2)), np.zeros((2, 2)), "template", "per-row weights have 2 rows but inputs have 3"),
        (np.zeros((3, 2)), [0.1, 0.2], 0, r"shots must be a positive integer \(at most 2\*\*63 - 1\) or None, got 0"),
        (np.zeros((3, 2)), [0.1, 0.2], -5, r"shots must be a positive integer \(at most 2\*\*63 - 1\) or None, got -5"),
        (np.zeros((3, 2)), [0.1, 0.2], 2.5, r"shots must be a positive integer \(at most 2\*\*63 - 1\) or None, got 2.5"),
    ],
)
def test_make_rejects_bad_batches(t22, inputs, weights, shots, message):
    with pytest.raises(BackendError, match=message):
        CircuitBatch.make(t22, inputs, weights, shots=shots)


def test_make_missing_weights_message(t22):
    with pytest.raises(BackendError, match=r"weights.*\[2\]") as info:
        CircuitBatch.make(t22, np.zeros((1, 2)), None)
    assert "NaN" not in str(info.value)


def test_make_accepts_torch_tensors(t22):
    torch = pytest.importorskip("torch")
    b = CircuitBatch.make(t22, torch.zeros(2, 2, requires_grad=True), torch.tensor([0.1, 0.2]))
    assert isinstance(b.inputs, np.ndarray) and b.size == 2


def test_split_keeps_rows_and_seeds(t22):
    b = CircuitBatch.make(t22, np.arange(10.0).reshape(5, 2), np.arange(10.0).reshape(5, 2), shots=10, seed=100)
    parts = b.split(2)
    assert [p.size for p in parts] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([p.inputs for p in parts]), b.inputs)
    np.testing.assert_array_equal(np.concatenate([p.weights for p in parts]), b.weights)
    assert [p.seed for p in parts] == [100, 102, 104]
    assert b.split(5) == [b]


# --- shot mode --------------------------------------------------------------------


def test_shot_mode_expectation_and_stderr():
    shots = 20000
    ts = np.array([[0.3], [1.0], [1.9], [2.6]])
    res = run(rot_template("ry", ["Z0", "X0"], shots=shots), ts, seed=123)
    exact = np.stack([np.cos(ts[:, 0]), np.sin(ts[:, 0])], axis=1)
    analytic_stderr = np.sqrt((1 - exact**2) / shots)
    assert res.values.shape == res.stderr.shape == (4, 2)
    assert np.all(np.abs(res.values - exact) < 5 * analytic_stderr)
    np.testing.assert_allclose(res.stderr, analytic_stderr, rtol=0.05)
    assert not np.array_equal(res.values, exact)  # it really sampled


def test_shot_mode_multi_term_stderr_adds_variances():
    shots = 50000
    c = Circuit(2, name="mt")
    x = c.inputs("x", 2)
    c.ry(x[0], 0).ry(x[1], 1)
    t = c.build(observables=[[(2.0, "Z0"), (-1.0, "X1")]], shots=shots)
    a, b = 0.8, 1.1
    res = run(t, [[a, b]], seed=7)
    exact = 2 * np.cos(a) - np.sin(b)
    sigma = np.sqrt((4 * (1 - np.cos(a) ** 2) + (1 - np.sin(b) ** 2)) / shots)
    assert abs(res.values[0, 0] - exact) < 5 * sigma
    assert res.stderr[0, 0] == pytest.approx(sigma, rel=0.05)


def test_shot_mode_empirical_spread_matches_reported_stderr():
    shots, reps = 400, 200
    t = rot_template("ry", ["Z0"], shots=shots)
    x = np.full((reps, 1), 1.2)  # one row per repetition, all sampled independently
    res = run(t, x, seed=99)
    vals = res.values[:, 0]
    assert np.std(vals, ddof=1) == pytest.approx(np.sin(1.2) / np.sqrt(shots), rel=0.2)
    assert abs(vals.mean() - np.cos(1.2)) < 5 * np.sin(1.2) / np.sqrt(shots * reps)


def test_counts_sum_to_shots_and_agree_with_probs():
    shots = 4000
    c = Circuit(3, name="ghz")
    x = c.inputs("x", 1)
    c.ry(x[0], 0).cx(0, 1).cx(1, 2).x(2)
    t = c.build()
    xs = np.array([[np.pi / 2], [1.0]])
    probs = run(t, xs).probs
    res = run(t.with_shots(shots), xs, seed=5)
    assert res.probs is None and res.values is None
    assert len(res.counts) == 2
    for row, counts in enumerate(res.counts):
        assert sum(counts.values()) == shots
        assert all(len(k) == 3 and set(k) <= {"0", "1"} for k in counts)
        assert set(counts) <= {"001", "110"}  # only outcomes with nonzero probability
        for key, n in counts.items():
            p = probs[row, int(key, 2)]
            assert abs(n - shots * p) < 5 * np.sqrt(shots * p * (1 - p)) + 1
    # row 0 is balanced, row 1 favours 001 (cos^2(0.5) = 0.77)
    assert res.counts[1]["001"] > res.counts[1]["110"]


def test_seed_reproducibility():
    t = rot_template("ry", ["Z0", "X0"], shots=100)
    x = np.linspace(0, 3, 6)[:, None]
    a = run(t, x, seed=1)
    b = run(t, x, seed=1)
    c = run(t, x, seed=2)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.stderr, b.stderr)
    assert not np.array_equal(a.values, c.values)
    tc = t.with_observables([])
    assert run(tc, x, seed=3).counts == run(tc, x, seed=3).counts
    assert run(tc, x, seed=3).counts != run(tc, x, seed=4).counts


# --- job API ----------------------------------------------------------------------


class GatedBackend(ReferenceBackend):
    """A reference backend whose jobs wait until the test opens the gate."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()
        self.started = threading.Event()

    def run(self, batch):
        self.started.set()
        assert self.gate.wait(10), "test never opened the gate"
        return super().run(batch)


def test_submit_returns_a_job_and_result():
    backend = get_backend("reference")
    t = rot_template("ry")
    job = backend.submit(CircuitBatch.make(t, [[0.5]]))
    assert isinstance(job, Job) and isinstance(job, FutureJob)
    res = job.result(timeout=10)
    assert job.done() and job.status() == "done"
    np.testing.assert_allclose(res.values, [[np.cos(0.5)]])
    assert res.metadata["backend"] == "reference"
    assert res.metadata["seconds"] >= 0
    assert isinstance(backend, Backend)
    backend.close()


def test_job_timeout_done_and_cancel_queued():
    backend = GatedBackend()
    t = rot_template("ry")
    jobs = [backend.submit(CircuitBatch.make(t, [[0.1 * k]])) for k in range(4)]
    try:
        assert backend.started.wait(10)
        assert not jobs[0].done()
        assert jobs[0].status() == "running"
        assert jobs[3].status() == "queued"
        with pytest.raises(TimeoutError, match=r"not done after 0.05s"):
            jobs[0].result(timeout=0.05)
        assert jobs[3].cancel() is True
        assert jobs[0].cancel() is False  # already running
        assert jobs[3].done() and jobs[3].status() == "cancelled"
        with pytest.raises(JobCancelled, match="job on reference was cancelled"):
            jobs[3].result()
    finally:
        backend.gate.set()
    for k in range(3):
        np.testing.assert_allclose(jobs[k].result(timeout=10).values, [[np.cos(0.1 * k)]])
    backend.close()


class ExplodingBackend(ReferenceBackend):
    name = "exploding"

    def run(self, batch):
        raise ZeroDivisionError("kaboom")


class RefusingBackend(ReferenceBackend):
    name = "refusing"

    def run(self, batch):
        raise BackendError("device offline")


def test_failure_wrapping():
    t = rot_template("ry")
    job = ExplodingBackend().submit(CircuitBatch.make(t, [[0.5]]))
    with pytest.raises(JobFailed, match="job on exploding failed: ZeroDivisionError: kaboom") as info:
        job.result(timeout=10)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert job.done() and job.status() == "failed"
    # backend errors pass through unwrapped
    with pytest.raises(BackendError, match="device offline") as info:
        RefusingBackend().submit(CircuitBatch.make(t, [[0.5]])).result(timeout=10)
    assert not isinstance(info.value, JobFailed)


class SplittingBackend(ReferenceBackend):
    name = "splitting"

    def __init__(self):
        super().__init__()
        self.sizes = []

    @property
    def capabilities(self):
        return Capabilities("splitting", max_qubits=5, max_circuits_per_job=2)

    def run(self, batch):
        self.sizes.append(batch.size)
        return super().run(batch)


def test_max_circuits_per_job_splits_and_rejoins_in_order():
    rng = np.random.default_rng(2)
    t = random_template(rng, 2)
    x = rng.uniform(-2, 2, size=(5, t.n_inputs))
    W = rng.uniform(-2, 2, size=(5, t.n_weights))
    b = SplittingBackend()
    res = b.submit(CircuitBatch.make(t, x, W)).result(timeout=10)
    assert b.sizes == [2, 2, 1]
    assert res.metadata["parts"] == 3
    np.testing.assert_allclose(res.values, run(t, x, W).values, atol=1e-12)
    # sampled mode re-joins counts in order too
    b.sizes.clear()
    tc = t.with_observables([]).with_shots(50)
    res = b.submit(CircuitBatch.make(tc, x, W, seed=1)).result(timeout=10)
    assert b.sizes == [2, 2, 1] and len(res.counts) == 5
    assert all(sum(c.values()) == 50 for c in res.counts)
    # a batch within the limit is not split
    b.sizes.clear()
    b.submit(CircuitBatch.make(t, x[:2], W[:2])).result(timeout=10)
    assert b.sizes == [2]


def test_max_qubits_check():
    backend = get_backend("reference", max_qubits=2)
    assert backend.capabilities.max_qubits == 2
    c = Circuit(3, name="wide")
    c.h(0).cx(0, 1).cx(1, 2)
    with pytest.raises(BackendError, match="circuit 'wide' has 3 qubits but backend 'reference' allows at most 2"):
        backend.submit(CircuitBatch.make(c.build(), None, None))


def test_submit_refuses_invalid_template():
    from hqflow.ir import CircuitTemplate, Op

    bad = CircuitTemplate(1, (Op("nope", (0,)),), name="bad")
    with pytest.raises(BackendError, match="unknown gate 'nope'"):
        ReferenceBackend().submit(CircuitBatch(bad, np.zeros((1, 0)), np.zeros(0)))


def test_capabilities_describe():
    caps = ReferenceBackend().capabilities
    assert caps.exact and caps.shots and caps.max_qubits == 20
    assert caps.describe() == "20 qubits, unlimited circuits/job, exact+shots, gradient=none (parameter shift), device=cpu"


# --- registry ---------------------------------------------------------------------


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(backends_mod, "_REGISTRY", dict(backends_mod._REGISTRY))
    monkeypatch.setattr(backends_mod, "_LISTED", list(backends_mod._LISTED))


def test_reference_lookup():
    b = get_backend("reference")
    assert isinstance(b, ReferenceBackend) and b.name == "reference"
    assert "reference" in backend_names()


@pytest.mark.parametrize("name", ["nope", "nope:thing"])
def test_unknown_backend_message(name):
    with pytest.raises(BackendError) as info:
        get_backend(name)
    msg = str(info.value)
    prefix = f"unknown backend {name!r}; known: "
    assert msg.startswith(prefix)
    known = msg[len(prefix):].split(", ")
    assert known == sorted(backends_mod._REGISTRY)
    assert {"reference", "aer", "pennylane"} <= set(known)


@pytest.mark.parametrize("name", ["", None, 3])
def test_bad_backend_name(name):
    with pytest.raises(BackendError, match="backend name must be a non-empty string"):
        get_backend(name)


def test_bad_backend_options():
    with pytest.raises(BackendError, match=r"backend 'reference': unknown option 'colour'"):
        get_backend("reference", colour="red")


def test_register_backend_with_custom_factory(clean_registry):
    calls = []

    def factory(suffix=None, **options):
        calls.append((suffix, options))
        return ReferenceBackend(**options)

    register_backend("mine", factory, suffix="suffix")
    assert "mine" in backend_names()
    b = get_backend("mine", max_qubits=3)
    assert isinstance(b, ReferenceBackend) and b.capabilities.max_qubits == 3
    get_backend("mine:special")
    assert calls == [(None, {"max_qubits": 3}), ("special", {})]
    register_backend("hidden", "hqflow.backends.reference:ReferenceBackend", listed=False)
    assert isinstance(get_backend("hidden"), ReferenceBackend)
    assert "hidden" not in backend_names()
    with pytest.raises(ValueError, match="backend names cannot contain ':'"):
        register_backend("a:b", factory)
    assert get_backend("mine").capabilities.max_qubits == 20
    with pytest.raises(BackendError, match="'mine:x': suffix is given twice"):
        get_backend("mine:x", suffix="y")


@pytest.mark.parametrize("name, message", [
    ("reference:x", "backend 'reference' takes no ':' suffix, got 'reference:x'"),  # was passed on as max_qubits
    ("aer:", "give its method after the ':'"),
    ("hidden2:x", "takes no ':' suffix"),
])
def test_a_suffix_goes_only_where_a_backend_takes_one(clean_registry, name, message):
    register_backend("hidden2", "hqflow.backends.reference:ReferenceBackend", listed=False)
    with pytest.raises(BackendError) as info:
        get_backend(name)
    assert message in str(info.value)


def test_suffixes_set_their_keyword():
    assert get_backend("pennylane:default.qubit").capabilities.name.startswith("pennylane")
    assert get_backend("emulated-qpu:compiled", max_qubits=4).capabilities.max_qubits == 4


@pytest.mark.parametrize("shots", [10**400, 2**63, True, 0, -1, 2.5])
def test_shots_no_generator_can_draw_are_one_line_errors(shots):
    from hqflow.torch import QuantumLayer

    c = Circuit(1, name="s")
    w = c.weights("w", 1)
    c.ry(w[0], 0)
    t = c.build(observables=["Z0"])
    with pytest.raises(BackendError, match=r"shots must be a positive integer \(at most 2\*\*63 - 1\)") as err:
        CircuitBatch.make(t, np.zeros((1, 0)), np.zeros(1), shots=shots)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200
    with pytest.raises(ValueError, match="shots must be a positive integer"):
        QuantumLayer(t, backend="reference", shots=shots)
