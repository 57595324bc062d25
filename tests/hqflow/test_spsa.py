"""SPSA (issue 25): the estimator's pure parts on a known quadratic, the estimate against parameter shift on
circuits, its batches' rows, the torch layer's ``gradient="spsa"`` and ``seeded``, and ``hq.run``."""
import itertools
import threading

import numpy as np
import pytest
import torch

import hqflow as hq
from hqflow.jobs import accounting as usage
from hqflow.backends import BackendError, CircuitBatch, get_backend
from hqflow.backends.base import row_seeds
from hqflow.backends.reference import ReferenceBackend
from hqflow.gradients import Spsa, param_shift, spsa, spsa_combine, spsa_directions
from hqflow.ir import Circuit, Graph, GraphError, from_qiskit
from hqflow.torch import QuantumLayer, seeded

BACKEND = ReferenceBackend()


def small_template(shots=None):
    """2 qubits, 3 inputs, 4 weights, 2 observables."""
    c = Circuit(2, name="small")
    x = c.inputs("x", 3)
    w = c.weights("w", 4)
    c.ry(x[0], 0).rx(x[1], 1).cz(0, 1).ry(w[0], 0).rz(x[2], 1).ry(w[1], 1).cx(0, 1).rx(w[2], 0).ry(w[3], 1)
    return c.build(observables=["Z0", "X0 Z1"], shots=shots)


def run(batch):
    return BACKEND.run_checked(batch)


def point(seed=1, rows=2):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (rows, 3)), rng.uniform(-1, 1, 4)


def exact_both(t, x, w):
    batch, post = param_shift(t, x, w, wrt="both")
    g = post(run(batch))
    return g.values, g.input_jacobian, g.jacobian


# --- the pure parts, on a known quadratic ------------------------------------------------------------------


def quadratic(n=6, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, n))
    A, b, theta = a + a.T, rng.normal(size=n), rng.normal(size=n)
    return (lambda p: 0.5 * p @ A @ p + b @ p), A @ theta + b, theta


def test_spsa_directions_are_todays_draw_of_signs():
    d = spsa_directions(7, 5, 9)
    np.testing.assert_array_equal(d, np.random.default_rng(7).choice([-1, 1], (5, 9)))
    assert d.shape == (5, 9) and set(np.unique(d)) == {-1.0, 1.0}
    assert not np.array_equal(spsa_directions(None, 5, 9), spsa_directions(None, 5, 9))  # fresh entropy


def test_every_sign_vector_gives_the_exact_gradient_of_a_quadratic():
    f, grad, theta = quadratic()
    eps = 0.3
    d = np.array(list(itertools.product([-1.0, 1.0], repeat=6)))  # all 2**6: mean of d d^T is I
    plus = np.array([f(theta + eps * v) for v in d])[None, :, None]  # [B=1, k, O=1]
    minus = np.array([f(theta - eps * v) for v in d])[None, :, None]
    est = spsa_combine(plus, minus, d, eps)
    assert est.shape == (1, 1, 6)
    np.testing.assert_allclose(est[0, 0], grad, rtol=0, atol=1e-12)


def test_random_directions_are_unbiased_on_a_quadratic():
    f, grad, theta = quadratic(seed=1)
    eps, n = 0.2, 20_000
    est = np.empty((n, 6))
    for s in range(n):
        d = spsa_directions(s, 1, 6)
        est[s] = spsa_combine(np.array([[[f(theta + eps * d[0])]]]), np.array([[[f(theta - eps * d[0])]]]),
                              d, eps)[0, 0]
    sigma = est.std(axis=0, ddof=1) / np.sqrt(n)
    assert np.all(np.abs(est.mean(axis=0) - grad) <= 5 * sigma), (est.mean(axis=0) - grad) / sigma
    assert np.all(sigma > 0)  # a real spread: the test could fail


def test_spsa_combine_sums_over_observables_and_rows_separately():
    d = np.array([[1.0, -1.0], [1.0, 1.0]])
    plus = np.array([[[1.0, 0.0], [3.0, 2.0]]])  # [1, 2, 2]
    minus = np.zeros_like(plus)
    est = spsa_combine(plus, minus, d, 0.5)  # (plus - minus) / 1: mean_j diff[j, o] * d[j]
    np.testing.assert_allclose(est[0], [[(1 + 3) / 2, (-1 + 3) / 2], [(0 + 2) / 2, (0 + 2) / 2]])


# --- the estimate against parameter shift -----------------------------------------------------------------


def _directions_of(batch, x, w, B, R, c, eps):
    """The ±1 directions a batch was built with, read off its rows (inputs first, then weights)."""
    xs, ws = batch.inputs.reshape(B, R, -1)[0], batch.weights.reshape(B, R, -1)[0]
    return np.sign(np.concatenate([xs[c::2] - x[0], ws[c::2] - w], axis=1) / eps)


@pytest.mark.parametrize("center", [True, False])
def test_many_directions_agree_with_parameter_shift_within_five_sigma(center):
    t, (x, w) = small_template(), point()
    values, xjac, wjac = exact_both(t, x, w)
    k, eps, B = 4000, 1e-3, x.shape[0]
    batch, post = spsa(t, x, w, wrt="both", samples=k, epsilon=eps, center=center, seed=3)
    result = run(batch)
    g = post(result)
    R, c = 2 * k + center, int(center)
    d = _directions_of(batch, x, w, B, R, c, eps)
    vals = result.values.reshape(B, R, -1)
    per = (vals[:, c::2] - vals[:, c + 1::2])[..., None] / (2 * eps) * d[None, :, None, :]  # [B, k, O, n]
    sigma = per.std(axis=1, ddof=1) / np.sqrt(k)
    np.testing.assert_allclose(per.mean(axis=1), np.concatenate([g.input_jacobian, g.jacobian], axis=2), atol=1e-12)
    assert np.all(np.abs(g.input_jacobian - xjac) <= 5 * sigma[..., :3] + 1e-5)
    assert np.all(np.abs(g.jacobian - wjac) <= 5 * sigma[..., 3:] + 1e-5)
    np.testing.assert_allclose(g.values, values, atol=0 if center else 1e-5)  # the pairs' mean: O(eps**2)


def test_the_mean_of_independent_small_estimates_is_parameter_shifts():
    t, (x, w) = small_template(), point(rows=1)
    _, xjac, wjac = exact_both(t, x, w)
    est = np.stack([np.concatenate(post(run(b)), axis=2) for b, post in
                    (_both(t, x, w, s) for s in range(400))])  # [400, 1, O, 7]
    sigma = est.std(axis=0, ddof=1) / np.sqrt(len(est))
    exact = np.concatenate([xjac, wjac], axis=2)
    assert np.all(np.abs(est.mean(axis=0) - exact) <= 5 * sigma + 1e-3)  # eps = 0.1: an O(eps**2) bias


def _both(t, x, w, seed):
    batch, post = spsa(t, x, w, wrt="both", samples=2, center=False, seed=seed)
    return batch, lambda r: (lambda g: (g.input_jacobian, g.jacobian))(post(r))


def test_the_first_form_is_unchanged():
    """``wrt="weights"`` with the centre: today's rows and directions, bit for bit."""
    t, (x, w) = small_template(), point()
    batch, post = spsa(t, x, w, samples=3, epsilon=0.2, seed=9)
    d = np.random.default_rng(9).choice([-1.0, 1.0], size=(3, 4))
    rows = np.repeat(np.repeat(w[None], 7, axis=0)[None], 2, axis=0)
    rows[:, 1::2] += 0.2 * d
    rows[:, 2::2] -= 0.2 * d
    np.testing.assert_array_equal(batch.weights, rows.reshape(14, 4))
    np.testing.assert_array_equal(batch.inputs, np.repeat(x, 7, axis=0))
    assert batch.seed == 9 and batch.row_seeds is None
    vals = run(batch).values.reshape(2, 7, -1)
    g = post(run(batch))
    np.testing.assert_array_equal(g.jacobian, np.einsum("bso,sw->bow", (vals[:, 1::2] - vals[:, 2::2]) / 0.4, d) / 3)
    assert g.input_jacobian is None


# --- rows and shapes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("wrt, center", [("weights", True), ("weights", False), ("inputs", False),
                                         ("inputs", True), ("both", False), ("both", True)])
def test_rows_and_shapes(wrt, center):
    t, (x, w) = small_template(shots=100), point(rows=3)
    batch, post = spsa(t, x, w, wrt=wrt, samples=5, center=center, seed=2)
    assert batch.size == 3 * (2 * 5 + center)
    assert batch.shots == 100 and batch.seed == 2
    assert batch.weights.ndim == (1 if wrt == "inputs" else 2)  # unperturbed weights stay shared
    g = post(run(batch))
    assert g.values.shape == (3, 2) and g.stderr.shape == (3, 2)
    assert (g.jacobian is None) == (wrt == "inputs")
    assert (g.input_jacobian is None) == (wrt == "weights")
    if g.jacobian is not None:
        assert g.jacobian.shape == (3, 2, 4)
    if g.input_jacobian is not None:
        assert g.input_jacobian.shape == (3, 2, 3)


def test_without_the_centre_stderr_is_the_mean_of_the_pairs():
    t, (x, w) = small_template(shots=50), point(rows=1)
    batch, post = spsa(t, x, w, samples=3, center=False, seed=4)
    r = run(batch)
    g = post(r)
    np.testing.assert_allclose(g.values[0], r.values.mean(axis=0), atol=1e-15)
    np.testing.assert_allclose(g.stderr[0], np.sqrt((r.stderr**2).sum(axis=0)) / 6, atol=1e-15)


def test_all_rows_of_a_batch_share_the_directions():
    t, (x, w) = small_template(), point(rows=3)
    batch, _ = spsa(t, x, w, wrt="both", samples=4, center=False, epsilon=0.5, seed=5)
    xs, ws = batch.inputs.reshape(3, 8, 3), batch.weights.reshape(3, 8, 4)
    for b in range(3):
        np.testing.assert_allclose(xs[b] - x[b], xs[0] - x[0], atol=1e-12)
        np.testing.assert_allclose(ws[b], ws[0], atol=0)


def test_bad_settings_are_one_line_errors():
    t, (x, w) = small_template(), point()
    for samples, epsilon in [(0, 0.1), (2, 0.0), (2, float("nan")), (2, float("inf")), (1.5, 0.1), (True, 0.1)]:
        with pytest.raises(ValueError, match=r"^spsa needs samples >= 1 and epsilon > 0, got"):
            spsa(t, x, w, samples=samples, epsilon=epsilon)
    with pytest.raises(ValueError, match="wrt must be 'weights', 'inputs' or 'both', got 'all'"):
        spsa(t, x, w, wrt="all")


@pytest.mark.parametrize("fields, message", [
    ({"samples": 0}, "samples must be an integer from 1 to 1000, got 0"),
    ({"samples": 1001}, "samples must be an integer from 1 to 1000, got 1001"),
    ({"samples": 2.0}, "samples must be an integer"),
    ({"samples": True}, "samples must be an integer"),
    ({"epsilon": 0}, r"epsilon must be a finite number in \(0, 3.2\], got 0"),
    ({"epsilon": 3.3}, "epsilon must be a finite number"),
    ({"epsilon": float("nan")}, "epsilon must be a finite number"),
    ({"epsilon": "0.1"}, "epsilon must be a finite number"),
    ({"center": 1}, "center must be True or False"),
])
def test_spsa_settings_are_checked(fields, message):
    with pytest.raises(ValueError, match=message):
        Spsa(**fields)


def test_spsa_settings_defaults_and_types():
    assert Spsa() == Spsa(2, 0.1, False)
    s = Spsa(np.int64(3), 1)
    assert type(s.samples) is int and type(s.epsilon) is float and s == Spsa(3, 1.0)


# --- derived inputs: the chain rule, with and without probe rows -------------------------------------------


def _derived(expression):
    from qiskit import QuantumCircuit
    from qiskit.circuit import ParameterVector

    x, w = ParameterVector("x", 2), ParameterVector("w", 1)
    qc = QuantumCircuit(2)
    qc.ry(x[0], 0)
    qc.rx(expression(x), 1)
    qc.cx(1, 0)
    qc.ry(w[0], 1)
    return from_qiskit(qc, inputs=x, weights=w, observables=["Z0", "Y1", "X0 Z1"])


@pytest.mark.parametrize("expression, row", [
    (lambda x: x[0] * x[1] + 0.5 * x[1] ** 2, [0.4, -0.7]),  # the chain rule holds: no probe rows
    (lambda x: (x[0] ** 2 + x[1] ** 2) ** 0.5, [0.0, 0.0]),  # a cone at 0: the probes' mean
])
def test_derived_inputs_follow_parameter_shifts_chain_rule(expression, row):
    t = _derived(expression)
    x, w = np.array([row, [0.3, 0.2]]), np.array([0.6])
    batch, post = param_shift(t, x, w, wrt="both")
    exact = post(run(batch))
    est = []
    for s in range(300):
        batch, post = spsa(t, x, w, wrt="both", samples=4, epsilon=1e-3, center=False, seed=s)
        g = post(run(batch))
        est.append(np.concatenate([g.input_jacobian, g.jacobian], axis=2))
    est = np.array(est)
    assert est.shape[1:] == (2, 3, 3)
    sigma = est.std(axis=0, ddof=1) / np.sqrt(len(est))
    want = np.concatenate([exact.input_jacobian, exact.jacobian], axis=2)
    assert np.all(np.abs(est.mean(axis=0) - want) <= 5 * sigma + 1e-5), (est.mean(axis=0) - want)


def test_a_derived_input_undefined_near_the_row_is_the_same_error_as_parameter_shifts():
    t = _derived(lambda x: x[0] ** 0.5 + x[1])
    x, w = np.array([[0.0, 1.0]]), np.array([0.1])
    with pytest.raises(BackendError) as ps:
        param_shift(t, x, w, wrt="inputs")
    with pytest.raises(BackendError) as sp:
        spsa(t, x, w, wrt="inputs")
    assert str(ps.value) == str(sp.value) and "\n" not in str(sp.value)


# --- row seeds -------------------------------------------------------------------------------------------


def test_per_row_batches_carry_row_seeds_and_the_default_does_not():
    t, (x, w) = small_template(shots=100), point()
    for build in (param_shift, spsa):
        batch, _ = build(t, x, w, wrt="both", seed=11)
        assert batch.row_seeds is None and batch.seed == 11
        batch, _ = build(t, x, w, wrt="both", seed=11, per_row=True)
        np.testing.assert_array_equal(batch.row_seeds, row_seeds(11, batch.size))
        assert batch.seed == 11
        batch, _ = build(t, x, w, wrt="both", per_row=True)  # no seed: nothing to derive row seeds from
        assert batch.row_seeds is None
    whole, _ = param_shift(t, x, w, seed=11, per_row=True)
    parts = whole.split(5)
    np.testing.assert_array_equal(np.concatenate([p.row_seeds for p in parts]), whole.row_seeds)


# --- the torch layer ---------------------------------------------------------------------------------------


class Recording(ReferenceBackend):
    """The reference backend, keeping every batch it runs."""

    def __init__(self):
        super().__init__()
        self.batches = []

    def run(self, batch):
        self.batches.append(batch)
        return super().run(batch)


def _layer_grads(layer, x, v):
    """Values and the gradients of sum(v * layer(x)); torch.autograd.grad, not backward: threads that share the
    layer must not accumulate into (and reset) one ``weights.grad``."""
    xt = torch.tensor(x, requires_grad=True)
    out = layer(xt)
    gx, gw = torch.autograd.grad((out * torch.as_tensor(v)).sum(), (xt, layer.weights))
    return out.detach(), gx, gw


@pytest.mark.parametrize("in_forward", [False, True])
def test_layer_gradients_agree_with_autograd_within_five_sigma(in_forward):
    t, (x, w) = small_template(), point(rows=1)
    v = np.array([[0.7, -1.3]])
    exact = QuantumLayer(t, "compiled", weights=w, dtype=torch.float64)
    assert exact._program(exact.job_backend()) is not None  # the reference: autograd
    _, gx, gw = _layer_grads(exact, x, v)
    k = 1000  # Spsa's largest
    layer = QuantumLayer(t, "compiled", weights=w, dtype=torch.float64, gradient="spsa", seed=0,
                         spsa=Spsa(k, 1e-3), gradient_in_forward=in_forward)
    assert layer._program(layer.job_backend()) is None
    _, ex, ew = _layer_grads(layer, x, v)
    G = torch.cat([gx[0], gw]).numpy()  # the loss's gradient: each estimate's spread is the rest of its norm
    sigma = np.sqrt((G**2).sum() - G**2) / np.sqrt(k)
    est = torch.cat([ex[0], ew]).numpy()
    assert np.all(np.abs(est - G) <= 5 * sigma + 1e-5), (est - G) / sigma


def test_unknown_gradient_and_bad_settings_are_clear_errors():
    t = small_template()
    with pytest.raises(ValueError, match="gradient must be 'param-shift', 'spsa' or 'twin', got 'adjoint'"):
        QuantumLayer(t, gradient="adjoint")
    with pytest.raises(TypeError, match="spsa must be a hqflow.gradients.Spsa or None, got tuple"):
        QuantumLayer(t, gradient="spsa", spsa=(2, 0.1))
    assert "gradient='spsa'" in repr(QuantumLayer(t, gradient="spsa"))


def test_seeded_jobs_are_row_seeded_and_repeat_exactly():
    t, (x, _) = small_template(), point()
    backend = Recording()
    layer = QuantumLayer(t, backend, seed=None, shots=200, gradient="spsa", dtype=torch.float64)
    v = np.ones((2, 2))

    def once(*key):
        with seeded(*key):
            return _layer_grads(layer, x, v)

    a, b, c = once(1, 2), once(1, 2), once(1, 3)
    for p, q in zip(a, b):
        assert torch.equal(p, q)
    assert not torch.equal(a[2], c[2])
    assert all(batch.row_seeds is not None for batch in backend.batches)
    first, second = backend.batches[:2]  # the values job, then the gradient job
    assert first.seed == np.random.SeedSequence([1, 2, 0]).generate_state(1)[0]
    assert second.seed == np.random.SeedSequence([1, 2, 1]).generate_state(1)[0]
    np.testing.assert_array_equal(second.row_seeds, row_seeds(second.seed, second.size))
    backend.batches.clear()
    _layer_grads(layer, x, v)  # outside: the layer's own (here: no) seed, as before
    assert all(batch.row_seeds is None and batch.seed is None for batch in backend.batches)


def test_a_seeded_key_counts_strings_by_crc32_and_refuses_the_rest():
    import zlib

    backend = Recording()
    layer = QuantumLayer(small_template(), backend, shots=10)
    with seeded("act", 3):
        layer(torch.zeros(1, 3))
    assert backend.batches[0].seed == np.random.SeedSequence([zlib.crc32(b"act"), 3, 0]).generate_state(1)[0]
    for bad in (-1, 1.5, None, True):
        with pytest.raises(ValueError, match="seeded: a key part must be a non-negative integer or a string"):
            with seeded(bad):
                pass


def test_threads_with_their_own_keys_do_not_depend_on_scheduling():
    t, (x, _) = small_template(), point()
    layer = QuantumLayer(t, "reference", shots=100, gradient="spsa", dtype=torch.float64, seed=5)
    v = np.ones((2, 2))

    def work(key, out):
        with seeded(key):
            out[key] = [torch.cat([g.ravel() for g in _layer_grads(layer, x, v)]) for _ in range(3)]

    alone = {}
    for key in ("b", "a"):  # one after the other, in the other order
        work(key, alone)
    together = {}
    threads = [threading.Thread(target=work, args=(key, together)) for key in ("a", "b")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for key in ("a", "b"):
        for p, q in zip(alone[key], together[key]):
            assert torch.equal(p, q)
    assert not torch.equal(alone["a"][0], alone["b"][0])


def test_layer_jobs_on_a_backend_are_metered_and_the_program_path_is_not():
    t, (x, _) = small_template(), point(rows=3)
    layer = QuantumLayer(t, "reference", dtype=torch.float64)
    with usage.meter() as m:
        _layer_grads(layer, x, np.ones((3, 2)))
    rows = 3 * (1 + 2 * (3 + 4))  # the parameter-shift job: every occurrence shifted twice
    assert (m.total.service_jobs, m.total.circuits, m.total.shots) == (2, 3 + rows, 0)
    layer = QuantumLayer(t, get_backend("reference"), shots=10, gradient="spsa", dtype=torch.float64)
    with usage.meter() as m:
        _layer_grads(layer, x, np.ones((3, 2)))
    assert (m.total.service_jobs, m.total.circuits, m.total.shots) == (2, 3 + 3 * 4, 10 * (3 + 3 * 4))
    with usage.meter() as m:
        _layer_grads(QuantumLayer(t, "compiled", dtype=torch.float64), x, np.ones((3, 2)))
    assert m.total.service_jobs == 0 and m.total.circuits == 0


# --- hq.run -------------------------------------------------------------------------------------------------


def encode(batch):
    return np.pi * np.asarray(batch)


def train_step(values, jacobian, weights, target, lr):
    err = values[:, 0] - np.asarray(target)
    grad = (2 * err[:, None] * jacobian[:, 0, :]).mean(0)
    return {"weights": np.asarray(weights) - lr * grad, "loss": float((err**2).mean())}


def spsa_graph(settings=(4, 0.1)):
    c = Circuit(2, name="tiny")
    x, w = c.inputs("x", 2), c.weights("w", 2)
    c.ry(x[0], 0).ry(x[1], 1).cz(0, 1).ry(w[0], 0).ry(w[1], 1)
    pipe = hq.Pipeline("tiny")
    pipe.input("batch", "array").input("target", "array")
    pipe.prepare(encode, outputs={"angles": "array"})
    pipe.execute("circuit", c.build(observables=["Z0 Z1"]), backend="reference", gradient="spsa", spsa=settings)
    pipe.connect("encode.angles", "circuit.inputs")
    pipe.learn(train_step, outputs={"weights": "array", "loss": "scalar"}, params={"lr": 0.3})
    pipe.loop("train_step.weights", ["circuit.weights", "train_step.weights"], init=[0.1, 0.2])
    pipe.output("train_step.loss")
    pipe.output("circuit.values", "values")
    pipe.output("circuit.jacobian", "jacobian")
    return pipe.build()


def test_hq_run_with_spsa_steps_and_its_ports_keep_their_shapes():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (6, 2))
    stream = [{"batch": X, "target": 0.5 * np.cos(np.pi * X[:, 0])}] * 3
    g = spsa_graph()
    assert g.fragment("circuit").spsa == (4, 0.1)
    res = hq.run(g, stream, executor="sync", seed=3)
    assert len(res.outputs) == 3
    w = np.array([0.1, 0.2])
    for out in res.outputs:
        assert out["jacobian"].shape == (6, 1, 2)
        exact = run(CircuitBatch.make(g.fragment("circuit").circuit, np.pi * X, w)).values
        np.testing.assert_allclose(out["values"], exact, atol=1e-12)  # the centre row: exact values
        w = train_step(out["values"], out["jacobian"], w, stream[0]["target"], 0.3)["weights"]
    np.testing.assert_allclose(res.state["train_step.weights"], w, atol=1e-12)
    again = hq.run(Graph.from_json(g.to_json()), stream, executor="sync", seed=3)
    for a, b in zip(res.outputs, again.outputs):
        np.testing.assert_array_equal(a["jacobian"], b["jacobian"])


def test_an_spsa_fragment_without_settings_uses_the_defaults():
    g = spsa_graph(settings=None)
    assert g.fragment("circuit").spsa is None
    X = np.full((2, 2), 0.3)
    res = hq.run(g, [{"batch": X, "target": np.zeros(2)}], executor="sync", seed=0)
    assert res.outputs[0]["jacobian"].shape == (2, 1, 2)


@pytest.mark.parametrize("settings, message", [
    ((0, 0.1), "spsa samples must be an integer from 1 to 1000, got 0"),
    ((4, 4.0), r"spsa epsilon must be a number in \(0, 3.2\], got 4.0"),
    ((4,), r"spsa must be \(samples, epsilon\), got \(4,\)"),
    ((4, float("nan")), "spsa epsilon must be a number"),
])
def test_spsa_settings_of_a_fragment_are_checked(settings, message):
    with pytest.raises(GraphError, match=message):
        spsa_graph(settings)


def test_spsa_settings_need_the_spsa_gradient():
    c = Circuit(1, name="one")
    c.ry(c.weights("w", 1)[0], 0)
    pipe = hq.Pipeline("p")
    with pytest.raises(GraphError, match="spsa settings .* are for gradient='spsa', not 'param-shift'"):
        pipe.execute("c", c.build(observables=["Z0"]), gradient="param-shift", spsa=(2, 0.1))
