"""Parameter-shift jacobians against finite differences and against shot noise."""
import numpy as np
import pytest

from hqflow.backends import CircuitBatch
from hqflow.backends.reference import ReferenceBackend
from hqflow.gradients import finite_difference, param_shift
from hqflow.ir import GATES, Angle, Circuit, CircuitTemplate, Observable, Op
from hqflow.ir.random import random_template

BACKEND = ReferenceBackend()


def exact_values(t, x, w):
    return BACKEND.run_checked(CircuitBatch.make(t, x, w, shots=None)).values


def ps_jacobian(t, x, w, **kw):
    batch, post = param_shift(t, x, w, **kw)
    return post(BACKEND.run_checked(batch))[:2]


def fd_jacobian(t, x, w):
    return finite_difference(lambda ww: exact_values(t, x, ww), w, eps=1e-6)


def _weight_use(t):
    """(gates that carry a weight, number of weight occurrences, max uses of one weight)."""
    gates, uses = set(), {}
    for op in t.ops:
        for a in op.angles:
            if a.kind == "weight":
                gates.add(op.name)
                uses[a.index] = uses.get(a.index, 0) + 1
    return gates, sum(uses.values()), max(uses.values(), default=0)


def test_param_shift_matches_finite_differences_on_random_templates():
    rng = np.random.default_rng(2024)
    seen_gates, multi_use = set(), 0
    n_templates = 0
    for k in range(24):
        n = 1 + k % 4
        t = random_template(rng, n)
        B = 3
        x = rng.uniform(-np.pi, np.pi, size=(B, t.n_inputs))
        w = rng.uniform(-np.pi, np.pi, size=t.n_weights)
        values, jac = ps_jacobian(t, x, w)
        assert values.shape == (B, t.n_observables)
        assert jac.shape == (B, t.n_observables, t.n_weights)
        np.testing.assert_allclose(values, exact_values(t, x, w), atol=1e-12)
        np.testing.assert_allclose(jac, fd_jacobian(t, x, w), atol=2e-6, err_msg=f"template {k}")
        gates, _, most = _weight_use(t)
        seen_gates |= gates
        multi_use += most > 1
        n_templates += 1
    assert n_templates >= 20
    # the sample really exercised four-term rules, multi-parameter gates and reused weights
    assert seen_gates & {"crx", "cry", "crz"}
    assert "u" in seen_gates
    assert multi_use >= 5


@pytest.mark.parametrize("gates", [("crx", "cry", "crz"), ("u", "cp", "p"), ("rxx", "ryy", "rzz", "rx")])
def test_param_shift_per_gate_family(gates):
    rng = np.random.default_rng(len(gates[0]))
    for _ in range(3):
        t = random_template(rng, 3, gates=gates + ("h", "cx"))
        x = rng.uniform(-2, 2, size=(2, t.n_inputs))
        w = rng.uniform(-2, 2, size=t.n_weights)
        _, jac = ps_jacobian(t, x, w)
        np.testing.assert_allclose(jac, fd_jacobian(t, x, w), atol=2e-6)


def test_weight_used_several_times_with_scales_and_offsets():
    c = Circuit(2, name="reuse")
    x = c.inputs("x", 1)
    w = c.weights("w", 2)
    c.ry(x[0], 0).crx(2.5 * w[0] + 0.3, 0, 1).u(w[1], -0.7 * w[0], 0.2, 1).rzz(-w[0], 0, 1).ry(w[1] * 3, 0)
    t = c.build(observables=["Z0 Z1", [(0.5, "X1"), (2.0, "Y0")]])
    xs = np.array([[0.4], [-1.3]])
    ws = np.array([0.9, -0.4])
    _, jac = ps_jacobian(t, xs, ws)
    np.testing.assert_allclose(jac, fd_jacobian(t, xs, ws), atol=2e-6)
    assert np.abs(jac).max() > 0.05


def test_closed_form_single_rotation():
    c = Circuit(1, name="ry")
    w = c.weights("w", 1)
    c.ry(2 * w[0] + 0.5, 0)
    t = c.build(observables=["Z0", "X0"])
    w0 = 0.3
    values, jac = ps_jacobian(t, None, [w0])
    a = 2 * w0 + 0.5
    np.testing.assert_allclose(values, [[np.cos(a), np.sin(a)]], atol=1e-12)
    np.testing.assert_allclose(jac, [[[-2 * np.sin(a)], [2 * np.cos(a)]]], atol=1e-12)


def test_one_batch_holds_every_shifted_row():
    c = Circuit(2, name="rows")
    x = c.inputs("x", 1)
    w = c.weights("w", 2)
    c.ry(x[0], 0).ry(w[0], 0).crx(w[1], 0, 1).rx(w[0], 1)
    t = c.build(observables=["Z1"])
    batch, _ = param_shift(t, np.zeros((3, 1)), [0.1, 0.2])
    # occurrences: ry (2 rows), crx (4 rows), rx (2 rows) + the unshifted row = 9 per sample
    assert batch.size == 3 * 9
    # one column per occurrence: the input's among the inputs, the weights' among per-row weights
    assert batch.inputs.shape == (27, 1) and batch.weights.shape == (27, 3)
    assert len(np.unique(batch.weights, axis=0)) == 9  # the unshifted row and the 8 shifted ones, shared by samples


def test_per_row_weights():
    rng = np.random.default_rng(8)
    t = random_template(rng, 3, n_weights=4)
    B = 4
    x = rng.uniform(-2, 2, size=(B, t.n_inputs))
    W = rng.uniform(-2, 2, size=(B, t.n_weights))
    values, jac = ps_jacobian(t, x, W)
    assert jac.shape == (B, t.n_observables, 4)
    for b in range(B):
        vb, jb = ps_jacobian(t, x[b : b + 1], W[b])
        np.testing.assert_allclose(values[b], vb[0], atol=1e-12)
        np.testing.assert_allclose(jac[b], jb[0], atol=1e-12)
        np.testing.assert_allclose(jac[b], fd_jacobian(t, x[b : b + 1], W[b])[0], atol=2e-6)
    # the rows differ, so a shared-weights jacobian would not match
    _, shared = ps_jacobian(t, x, W[0])
    assert not np.allclose(shared[1:], jac[1:])


def test_template_without_weights_gives_empty_jacobian():
    c = Circuit(1)
    x = c.inputs("x", 1)
    c.rx(x[0], 0)
    t = c.build(observables=["Z0"])
    values, jac = ps_jacobian(t, [[0.4], [0.5]], None)
    assert jac.shape == (2, 1, 0)
    np.testing.assert_allclose(values[:, 0], np.cos([0.4, 0.5]))


def test_no_observables_is_an_error():
    c = Circuit(1, name="sampler")
    w = c.weights("w", 1)
    c.rx(w[0], 0)
    with pytest.raises(ValueError, match="circuit 'sampler' has no observables to differentiate"):
        param_shift(c.build(), None, [0.1])


def test_bad_shapes_are_reported_by_make():
    from hqflow.backends import BackendError

    c = Circuit(1, name="s")
    w = c.weights("w", 2)
    c.rx(w[0], 0).ry(w[1], 0)
    with pytest.raises(BackendError, match=r"weights for 's' must have shape \[2\]"):
        param_shift(c.build(observables=["Z0"]), None, [0.1])


def _shot_template():
    c = Circuit(2, name="shots")
    x = c.inputs("x", 1)
    w = c.weights("w", 3)
    c.ry(x[0], 0).ry(w[0], 0).cry(w[1], 0, 1).rx(2 * w[2] - 0.2, 1).cz(0, 1).rx(w[0], 1)
    return c.build(observables=["Z0 Z1", [(1.0, "Z1"), (0.5, "X0")]])


def test_shot_mode_jacobian_within_five_sigma_of_exact():
    t = _shot_template()
    x = np.array([[0.3], [1.1]])
    w = np.array([0.7, 1.3, -0.4])
    _, exact = ps_jacobian(t, x, w)
    np.testing.assert_allclose(exact, fd_jacobian(t, x, w), atol=2e-6)
    shots, reps = 1000, 30
    jacs = np.stack([ps_jacobian(t, x, w, shots=shots, seed=s)[1] for s in range(reps)])
    sigma = jacs.std(axis=0, ddof=1)  # empirical spread of one estimate
    assert np.all(sigma > 0)
    # each estimate is within 5 sigma of the truth, and the mean within 5 sigma / sqrt(reps)
    assert np.all(np.abs(jacs - exact) < 5 * sigma + 1e-12)
    assert np.all(np.abs(jacs.mean(axis=0) - exact) < 5 * sigma / np.sqrt(reps))
    # the spread is shot noise: order 1/sqrt(shots), not something larger
    assert sigma.max() < 5 / np.sqrt(shots)


def test_shot_mode_from_template_shots_and_seed_determinism():
    t = _shot_template().with_shots(500)
    x, w = np.array([[0.3]]), np.array([0.7, 1.3, -0.4])
    v1, j1 = ps_jacobian(t, x, w, seed=4)
    v2, j2 = ps_jacobian(t, x, w, seed=4)
    v3, j3 = ps_jacobian(t, x, w, seed=5)
    np.testing.assert_array_equal(j1, j2)
    np.testing.assert_array_equal(v1, v2)
    assert not np.array_equal(j1, j3)
    _, exact = ps_jacobian(t, x, w, shots=None)
    assert not np.array_equal(j1, exact)
    assert np.abs(j1 - exact).max() < 0.5


def test_finite_difference_helper_shape():
    t = _shot_template()
    fd = fd_jacobian(t, np.zeros((2, 1)), np.array([0.1, 0.2, 0.3]))
    assert fd.shape == (2, 2, 3)


def test_expansion_cache_distinguishes_templates():
    """Two templates that differ only in a weight scale must not share an expansion."""
    ops = lambda s: (Op("ry", (0,), (Angle.weight(0, s, 0.0),)),)  # noqa: E731
    t1 = CircuitTemplate(1, ops(1.0), (), ("w",), (Observable.coerce("Z0"),), None, "same")
    t2 = CircuitTemplate(1, ops(3.0), (), ("w",), (Observable.coerce("Z0"),), None, "same")
    _, j1 = ps_jacobian(t1, None, [0.2])
    _, j2 = ps_jacobian(t2, None, [0.2])
    np.testing.assert_allclose(j1[0, 0, 0], -np.sin(0.2), atol=1e-12)
    np.testing.assert_allclose(j2[0, 0, 0], -3 * np.sin(0.6), atol=1e-12)


def test_every_parametrized_gate_differentiates():
    rng = np.random.default_rng(0)
    for name, spec in GATES.items():
        if not spec.num_params:
            continue
        n = max(spec.num_wires, 2)
        wires = tuple(range(spec.num_wires))
        angles = tuple(Angle.weight(k, 1.0 + 0.5 * k, 0.1 * k) for k in range(spec.num_params))
        ops = tuple(Op("h", (q,)) for q in range(n)) + (Op("ry", (0,), (Angle.const(0.4),)), Op(name, wires, angles))
        t = CircuitTemplate(
            n, ops, (), tuple(f"w{k}" for k in range(spec.num_params)),
            (Observable.coerce([(1.0, "X0"), (0.7, "Y1"), (0.3, "Z0 X1")]),), None, name,
        ).check()
        w = rng.uniform(-2, 2, size=spec.num_params)
        _, jac = ps_jacobian(t, None, w)
        np.testing.assert_allclose(jac, fd_jacobian(t, None, w), atol=2e-6, err_msg=name)


def test_input_jacobian_matches_finite_differences():
    rng = np.random.default_rng(41)
    for _ in range(10):
        t = random_template(rng, int(rng.integers(1, 5)))
        x = rng.uniform(-2, 2, size=(3, t.n_inputs))
        w = rng.uniform(-2, 2, size=t.n_weights)
        batch, post = param_shift(t, x, w, wrt="both")
        g = post(BACKEND.run_checked(batch))
        for b in range(3):
            fd = finite_difference(lambda xx: exact_values(t, xx[None, :], w), x[b], eps=1e-6)[0]
            np.testing.assert_allclose(g.input_jacobian[b], fd, atol=2e-6)
        np.testing.assert_allclose(g.jacobian, fd_jacobian(t, x, w), atol=2e-6)
        batch_in, post_in = param_shift(t, x, w, wrt="inputs")
        g_in = post_in(BACKEND.run_checked(batch_in))
        assert g_in.jacobian is None and batch_in.size < batch.size
        np.testing.assert_allclose(g_in.input_jacobian, g.input_jacobian, atol=1e-12)


def test_param_shift_rejects_unknown_wrt():
    t = random_template(np.random.default_rng(0), 2)
    with pytest.raises(ValueError, match="wrt must be 'weights', 'inputs' or 'both'"):
        param_shift(t, np.zeros((1, t.n_inputs)), np.zeros(t.n_weights), wrt="everything")


def test_spsa_is_one_job_and_converges_to_the_gradient():
    from hqflow.gradients import spsa

    rng = np.random.default_rng(5)
    t = random_template(rng, 3, n_weights=6)
    x, w = rng.uniform(-1, 1, size=(2, t.n_inputs)), rng.uniform(-1, 1, size=6)
    batch, post = spsa(t, x, w, samples=3, seed=1)
    assert batch.size == 2 * 7  # 1 + 2 * samples rows per input row, whatever n_weights
    exact = fd_jacobian(t, x, w)
    batch, post = spsa(t, x, w, samples=4000, epsilon=1e-3, seed=2)
    g = post(BACKEND.run_checked(batch))
    np.testing.assert_allclose(g.values, exact_values(t, x, w), atol=1e-12)
    # the estimator's spread per entry is about |grad| * sqrt(n_w / samples); allow 5 of those
    tol = 5 * np.linalg.norm(exact, axis=-1, keepdims=True) * np.sqrt(6 / 4000)
    assert np.all(np.abs(g.jacobian - exact) <= tol + 1e-6)
    with pytest.raises(ValueError, match="samples >= 1 and epsilon > 0"):
        spsa(t, x, w, samples=0)


def _phased(front: str, listed: bool):
    """One circuit from either front end whose weight 't' (index 1) only sets the global phase; unlisted: without it."""
    if front == "qiskit":
        from qiskit import QuantumCircuit
        from qiskit.circuit import Parameter

        from hqflow.ir import from_qiskit

        x, a, t, b = (Parameter(n) for n in ("x", "a", "t", "b"))
        qc = QuantumCircuit(2)
        qc.ry(x, 0), qc.rx(a, 1), qc.cx(0, 1), qc.rz(b, 0), qc.ry(0.5 * b, 1)
        qc.global_phase = 2 * t + a
        return from_qiskit(qc, inputs=[x], weights=[a, t, b] if listed else [a, b], observables=["Z0 Z1", "X0"])
    import pennylane as qml

    from hqflow.ir import from_pennylane

    def qfunc(inputs, weights):
        qml.RY(inputs[0], wires=0), qml.RX(weights[0], wires=1), qml.CNOT(wires=[0, 1])
        b = weights[-1]
        qml.RZ(b, wires=0), qml.RY(0.5 * b, wires=1)
        if listed:
            qml.GlobalPhase(3 * weights[1])
        return [qml.expval(qml.Z(0) @ qml.Z(1)), qml.expval(qml.X(0))]

    return from_pennylane(qfunc, 2, n_inputs=1, n_weights=3 if listed else 2)


@pytest.mark.parametrize("front", ["qiskit", "pennylane"])
def test_a_weight_only_in_the_global_phase_changes_no_value_and_has_gradient_exactly_zero(front):  # 34.2
    """On every backend and with every gradient method (parameter shift, SPSA, a torch layer's autograd and
    its SPSA), exact or with shots: the phase's weight has a gradient of exactly 0, and the values, the other
    weights' gradients, probabilities and counts are those of the circuit without it."""
    import torch

    from hqflow.backends import get_backend
    from hqflow.gradients import spsa
    from hqflow.torch import QuantumLayer

    t, plain = _phased(front, True), _phased(front, False)
    assert t.n_weights == 3 and t.gate_free("weight") == (1,) and t.phase
    x, w = np.array([[0.3], [1.1]]), np.array([0.4, 0.9, -0.7])
    others = w[[0, 2]]
    for name in ("reference", "compiled", "aer", "pennylane:default.qubit"):
        backend = get_backend(name)
        run = backend.run_checked
        for shots in (None, 4000):
            got = run(CircuitBatch.make(t, x, w, shots=shots, seed=3))
            np.testing.assert_allclose(got.values, run(CircuitBatch.make(plain, x, others, shots=shots, seed=3)).values,
                                       atol=1e-12)
            for grad, kw in ((param_shift, {"seed": 5}), (spsa, {"samples": 3, "seed": 5}), (spsa, {"wrt": "both", "seed": 5})):
                batch, post = grad(t, x, w, shots=shots, **kw)
                g = post(run(batch))
                assert g.jacobian.shape == (2, 2, 3) and np.all(g.jacobian[:, :, 1] == 0), (name, shots, grad, kw)
                if grad is param_shift:
                    batch, post = grad(plain, x, others, shots=shots, **kw)
                    np.testing.assert_allclose(g.jacobian[:, :, [0, 2]], post(run(batch)).jacobian, atol=1e-12)
        probs, counts = ([run(CircuitBatch.make(c.with_observables(()), x, v, shots=shots, seed=3))
                          for c, v in ((t, w), (plain, others))] for shots in (None, 100))
        np.testing.assert_allclose(probs[0].probs, probs[1].probs, atol=1e-12)
        assert counts[0].counts == counts[1].counts
    for gradient in ("param-shift", "spsa"):  # compiled: autograd; spsa: its own rows
        layer = QuantumLayer(t, "compiled", weights=w, gradient=gradient, dtype=torch.float64)
        layer(torch.tensor(x)).sum().backward()
        assert layer.weights.grad[1] == 0 and layer.weights.grad.abs().sum() > 0
