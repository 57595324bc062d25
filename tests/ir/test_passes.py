"""The light-cone pass: exact for expectation values, and it really shrinks wide shallow circuits."""
import numpy as np
import pytest
import torch

from hqflow.backends import CircuitBatch, get_backend
from hqflow.backends.compiled import compile_template
from hqflow.ir import Circuit
from hqflow.ir.passes import light_cone
from hqflow.ir.random import random_template


def hea(n=12, layers=3, obs="Z0"):
    c = Circuit(n, name="hea")
    x, w = c.inputs("x", n), c.weights("w", 2 * n * layers)
    for q in range(n):
        c.ry(x[q], q)
    k = 0
    for _ in range(layers):
        for q in range(n):
            c.ry(w[k], q).rz(w[k + 1], q)
            k += 2
        for q in range(n - 1):
            c.cx(q, q + 1)
    return c.build(observables=[obs])


def test_hea_cone_keeps_one_wire_per_layer_plus_the_observable():
    cone = light_cone(hea())
    assert cone.reduces
    assert cone.wires == (0, 1, 2, 3)
    assert cone.inputs == (0, 1, 2, 3)
    assert cone.template.n_qubits == 4 and not cone.template.problems()
    # an observable on the last wire sees the whole chain: nothing to drop
    assert not light_cone(hea(obs="Z11")).reduces
    # no observables (probabilities): every wire counts
    assert not light_cone(hea().with_observables([])).reduces


def test_cone_values_equal_full_values_on_random_templates():
    ref = get_backend("reference")
    rng = np.random.default_rng(7)
    reduced = 0
    for _ in range(40):
        n = int(rng.integers(2, 7))
        t = random_template(rng, n, n_ops=int(rng.integers(2, 3 * n)), n_observables=1)
        cone = light_cone(t)
        x = rng.uniform(-3, 3, (3, t.n_inputs))
        w = rng.uniform(-3, 3, t.n_weights)
        full = ref.run(CircuitBatch.make(t, x, w)).values
        if not cone.reduces:
            continue
        reduced += 1
        assert not cone.template.problems()
        part = ref.run(CircuitBatch.make(cone.template, x[:, list(cone.inputs)], w[list(cone.weights)])).values
        np.testing.assert_allclose(part, full, atol=1e-10)
    assert reduced >= 5  # the test exercised the pass


def test_compiled_uses_the_cone_and_matches_the_full_program():
    t = hea(8, 2)
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.uniform(-3, 3, (5, t.n_inputs)), dtype=torch.float64, requires_grad=True)
    w0 = rng.uniform(-3, 3, t.n_weights)
    grads = []
    for lightcone in (True, False):
        prog = compile_template(t, dtype="complex128", lightcone=lightcone)
        assert ("light cone" in prog.describe()) == lightcone
        w = torch.tensor(w0, requires_grad=True)
        x.grad = None
        v = prog(x, w)
        v.sum().backward()
        grads.append((v.detach(), x.grad.clone(), w.detach().clone(), w.grad.clone()))
    (v1, gx1, _, gw1), (v2, gx2, _, gw2) = grads
    torch.testing.assert_close(v1, v2, atol=1e-10, rtol=0)
    torch.testing.assert_close(gx1, gx2, atol=1e-10, rtol=0)
    torch.testing.assert_close(gw1, gw2, atol=1e-10, rtol=0)
    assert (gx1[:, 3:] == 0).all()  # inputs outside the cone


def test_probabilities_ignore_the_cone():
    t = hea(6, 1)
    prog = compile_template(t, dtype="complex128")
    x, w = np.full((2, 6), 0.3), np.full(t.n_weights, 0.7)
    p = prog.probs(x, w)
    assert p.shape == (2, 64)
    ref = get_backend("reference").run(CircuitBatch.make(t.with_observables([]), x, w)).probs
    np.testing.assert_allclose(p.numpy(), ref, atol=1e-10)


@pytest.mark.parametrize("requires", ["weights", "inputs"])
def test_parameters_all_outside_the_cone_get_zero_gradients(requires):
    c = Circuit(2, name="split")
    x, w = c.inputs("x", 1), c.weights("w", 1)
    c.ry(x[0], 0).ry(w[0], 1)
    t = c.build(observables=["Z0" if requires == "weights" else "Z1"])
    xs = torch.tensor([[0.4]], dtype=torch.float64, requires_grad=True)
    ws = torch.tensor([0.9], dtype=torch.float64, requires_grad=True)
    compile_template(t, dtype="complex128")(xs, ws).sum().backward()
    zero = ws.grad if requires == "weights" else xs.grad
    assert zero is not None and float(zero.abs().sum()) == 0.0
