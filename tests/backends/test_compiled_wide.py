"""Wide circuits on the ``compiled`` backend: diagonal layers as pieces, the readout without index tables.

Past ``config._WIDE`` qubits a diagonal layer is a product of pieces on few axes each (no ``2**n``-sized
table per layer). Here the chunk is patched down to 2 or 3 qubits, so small circuits take every piece path
(several pieces per stage, pieces across runs, pieces on axes that are not adjacent, per-row weights) and are
checked against the numpy reference, parameter shift, and plain autograd.
"""
import numpy as np
import pytest
import torch

from hqflow.backends import BackendError, CircuitBatch, get_backend
from hqflow.backends.compiled import clear_cache, compile_template, config
from hqflow.backends.compiled.affine import _pieces
from hqflow.backends.compiled.readout import _flip_of, _flipped
from hqflow.gradients import param_shift
from hqflow.ir import Circuit
from hqflow.ir.random import random_template


@pytest.fixture
def chunk(monkeypatch):
    """Set the piece width (compiled programs are cached without it: the cache is cleared around)."""
    def set_chunk(k: int):
        clear_cache()
        monkeypatch.setattr(config, "_WIDE", k)

    yield set_chunk
    clear_cache()


@pytest.fixture(scope="module")
def reference():
    return get_backend("reference")


def _cases(n: int, seed: int, qubits: tuple[int, int], rows: int = 3):
    rng = np.random.default_rng(seed)
    for k in range(n):
        t = random_template(rng, int(rng.integers(*qubits)))
        x = rng.uniform(-np.pi, np.pi, (rows, t.n_inputs))
        w = rng.uniform(-np.pi, np.pi, (rows, t.n_weights) if k % 2 else (t.n_weights,))
        yield k, t, x, w


def _crossing_circuit(n: int = 7):
    """Diagonal gates on inputs and weights across runs and on axes far apart, X/Y/Z readout."""
    c = Circuit(n, name=f"crossing{n}")
    x = c.inputs("x", 3)
    w = c.weights("w", 6)
    for q in range(n):
        c.h(q)
    c.rzz(x[0], 0, n - 1).crz(x[1], 1, 4).rz(x[2], 2).rz(x[0], 5)
    c.rzz(w[0], 0, n - 1).cp(w[1], 2, 5).rz(w[2], 3).cz(1, 6)
    for q in range(n):
        c.rx(w[3], q)
    c.rzz(x[2], 3, 6).crz(w[4], 6, 0).rz(w[5], 1)
    every = " ".join(f"Z{q}" for q in range(n))
    return c.build(observables=["Z0 Z6", [(0.5, "X1 Y4"), (-0.7, "Y0 X5 Z6"), (0.25, "")], "X2", every])


def test_pieces_cut_a_wide_layer_into_runs_and_crossings():
    from hqflow.backends.compiled.lower import _lower
    from hqflow.ir.circuit import Angle, Op

    ops = [Op("rz", (q,), (Angle.input(q),)) for q in range(6)] + [Op("rzz", (0, 5), (Angle.input(0),)),
                                                                   Op("crz", (2, 3), (Angle.weight(0),))]
    prims = [p for op in ops for p in _lower(op)]
    axis_of = {w: w for w in range(6)}
    assert [axes for axes, _ in _pieces(prims, axis_of, 6, 6)] == [(0, 1, 2, 3, 4, 5)]
    cut = _pieces(prims, axis_of, 6, 3)
    assert [axes for axes, _ in cut] == [(0, 1, 2), (3, 4, 5), (0, 5), (2, 3)]
    assert [len(group) for _, group in cut] == [3, 3, 1, 1]


def test_flips_are_the_xor_gather():
    rng = np.random.default_rng(5)
    for n in (1, 3, 6):
        psi = torch.tensor(rng.normal(size=(2, 2**n)))
        for mask in rng.integers(0, 2**n, 6):
            want = psi[:, np.arange(2**n) ^ int(mask)]
            assert torch.equal(_flipped(psi, _flip_of(int(mask), n)), want)


@pytest.mark.parametrize("k", [2, 3])
def test_pieces_match_the_reference_on_random_templates(reference, chunk, k):
    chunk(k)
    several = middle = 0
    for case, t, x, w in _cases(24, seed=31 + k, qubits=(3, 8)):
        prog = compile_template(t, "complex128", fusion=(None, 2)[case % 2])
        want = reference.run_checked(CircuitBatch.make(t, x, w))
        np.testing.assert_allclose(prog(x, w).numpy(), want.values, atol=1e-10, err_msg=f"case {case}: {t}")
        np.testing.assert_allclose(prog.probs(x, w).numpy(),
                                   reference.run_checked(CircuitBatch.make(t.with_observables([]), x, w)).probs,
                                   atol=1e-10, err_msg=f"probs, case {case}")
        plan = prog._plan(w.ndim == 2) if prog._sub is None else prog._sub._plan(w.ndim == 2)
        several += any(st.kind == "phase" and len(st.pieces) > 1 for st in plan.stages)
        middle += any(st.kind == "dense" and st.at + st.width < plan.n for st in plan.stages)
    assert several >= 12 and middle >= 12  # most cases really ran several pieces per stage, blocks in place


@pytest.mark.parametrize("per_row", [False, True])
def test_piece_gradients_match_parameter_shift_and_the_gradient_modes_agree(reference, chunk, per_row):
    chunk(2)
    t = _crossing_circuit()
    rng = np.random.default_rng(3)
    x = rng.uniform(-np.pi, np.pi, (4, t.n_inputs))
    w = rng.uniform(-np.pi, np.pi, (4, t.n_weights) if per_row else (t.n_weights,))
    prog = compile_template(t, "complex128", lightcone=False)
    stages = prog._plan(per_row).stages
    pieces = [st.pieces for st in stages if st.kind == "phase"]
    assert any(len(p) > 1 for p in pieces) and any(not pc.full and len(pc.dims) > 3 for p in pieces for pc in p)
    grads = {}
    out_w = torch.tensor(rng.normal(size=(4, t.n_observables)))
    for mode in ("autograd", "fused", "adjoint"):
        prog = compile_template(t, "complex128", gradient=mode, lightcone=False)
        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        (prog(xt, wt) * out_w).sum().backward()
        grads[mode] = (xt.grad.numpy(), wt.grad.numpy())
    for mode in ("fused", "adjoint"):
        for got, want in zip(grads[mode], grads["autograd"]):
            np.testing.assert_allclose(got, want, atol=1e-9, err_msg=mode)
    batch, post = param_shift(t, x, w)
    jac = post(reference.run_checked(batch)).jacobian  # [B, n_obs, n_weights]
    want_w = np.einsum("bo,bow->bw" if per_row else "bo,bow->w", out_w.numpy(), jac)
    np.testing.assert_allclose(grads["fused"][1], want_w, atol=1e-9)


def test_a_ring_keeps_its_blocks_in_place_after_a_rotation(reference, chunk):
    """Past the wide limit, a ring's closing block permutes the state to a rotation, not to the trailing axes,
    so the blocks after it stay on adjacent axes: one permutation there and one back per layer at most."""
    chunk(4)
    c = Circuit(8, name="ring8")
    x = c.inputs("x", 8)
    w = c.weights("w", 24)
    for layer in range(3):
        for q in range(8):
            c.ry(x[q], q).rz(w[8 * layer + q], q)
        for q in range(8):
            c.cx(q, (q + 1) % 8)
    t = c.build(observables=["Z0 Z7", "X3"])
    prog = compile_template(t, "complex128", fusion=2, lightcone=False)
    stages = prog._plan(False).stages
    perms = [st for st in stages if st.kind == "perm"]
    assert 1 <= len(perms) <= 2 * 3 + 1
    assert sum(st.kind == "dense" and st.at + st.width < 8 for st in stages) > len(perms)
    rng = np.random.default_rng(2)
    xs, ws = rng.uniform(-np.pi, np.pi, (3, 8)), rng.uniform(-np.pi, np.pi, 24)
    want = reference.run_checked(CircuitBatch.make(t, xs, ws)).values
    np.testing.assert_allclose(prog(xs, ws).numpy(), want, atol=1e-10)


@pytest.mark.parametrize("inputs", [0, 2])
def test_the_adjoint_method_of_a_wide_circuit_keeps_no_state_and_agrees_with_autograd(chunk, monkeypatch, inputs):
    """Past the wide limit the adjoint method un-computes every stage, those before the rows differ too."""
    from hqflow.backends.compiled import simulate

    chunk(3)
    c = Circuit(6, name=f"vqe6_{inputs}")
    x = c.inputs("x", inputs) if inputs else None
    w = c.weights("w", 18)
    for layer in range(3):
        for q in range(6):
            c.ry(w[6 * layer + q], q)
        if layer == 1 and x is not None:
            c.rz(x[0], 2).rzz(x[1], 0, 5)
        for q in range(5):
            c.cx(q, q + 1)
    t = c.build(observables=["Z0 Z5", [(0.3, "X1 X2"), (0.2, "Y4")]])
    kept = []
    forward = simulate._simulate

    def spy(*args, keep=None, **kwargs):
        kept.append(keep)
        return forward(*args, keep=keep, **kwargs)

    monkeypatch.setattr(simulate, "_simulate", spy)
    rng = np.random.default_rng(8)
    xs, ws = rng.uniform(-np.pi, np.pi, (3, inputs)), rng.uniform(-np.pi, np.pi, 18)
    grads = {}
    for mode in ("autograd", "adjoint"):
        prog = compile_template(t, "complex128", gradient=mode, lightcone=False)
        xt, wt = torch.tensor(xs, requires_grad=True), torch.tensor(ws, requires_grad=True)
        (prog(xt, wt) * torch.tensor([[1.0, -2.0]])).sum().backward()
        grads[mode] = (wt.grad.numpy(), xt.grad.numpy() if inputs else np.zeros(0))
    assert kept[-1] is None  # the adjoint call kept no state
    for got, want in zip(grads["adjoint"], grads["autograd"]):
        np.testing.assert_allclose(got, want, atol=1e-9)


def test_a_wide_circuit_compiles_without_full_width_tables_and_matches_the_reference(reference):
    """18 qubits: every per-sample piece is at most 2**9 wide, and the values agree in complex64 and 128."""
    n = 18
    c = Circuit(n, name="wide18")
    x = c.inputs("x", n)
    w = c.weights("w", 2 * n)
    for layer in range(2):
        for q in range(n):
            c.ry(x[q], q)
        for q in range(n):
            c.rz(w[2 * q + layer % 2], q).rx(w[2 * q + 1 - layer % 2], q)
        for q in range(n):
            c.cz(q, (q + 1) % n)
    c.rzz(x[0], 0, n - 1)
    t = c.build(observables=["Z0 Z17", [(0.5, "X3 Y12")], "Y9"])
    rng = np.random.default_rng(11)
    xs = rng.uniform(-np.pi, np.pi, (2, n))
    ws = rng.uniform(-np.pi, np.pi, 2 * n)
    want = reference.run_checked(CircuitBatch.make(t, xs, ws)).values
    for dtype, tol in (("complex128", 1e-10), ("complex64", 1e-5)):
        prog = compile_template(t, dtype, lightcone=False)
        plan = prog._plan(False)
        assert max(a.shape[1] for a in plan.sample_a.values()) <= 2**9
        assert plan.shared_c.numel() < 2**n
        np.testing.assert_allclose(prog(xs, ws).numpy(), want, atol=tol, err_msg=dtype)
    assert "piece(s) on axes" in prog.describe()


def test_thirty_qubits_at_most():
    c = Circuit(config.MAX_QUBITS + 1)
    c.h(0)
    with pytest.raises(BackendError, match=f"at most {config.MAX_QUBITS}"):
        compile_template(c.build(observables=["Z0"]))
    assert config.MAX_QUBITS == 30
