"""The ``compiled`` backend: a template compiled into a batched torch program.

Differential tests against the numpy ``reference`` (and aer / pennylane on a few),
gradients against parameter shift and finite differences, the three gradient
modes against each other, shot mode, the compile cache and error messages.
"""
import numpy as np
import pytest
import torch

from hqflow.backends import BackendError, CircuitBatch, backend_names, get_backend
from hqflow.backends.compiled import CompiledBackend, CompiledProgram, compile_template
from hqflow.gradients import param_shift
from hqflow.ir import Circuit
from hqflow.ir.gates import GATES
from hqflow.ir.random import random_template


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny batches: one intra-op thread is faster and steadier on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def reference():
    return get_backend("reference")


def policy_circuit(n_qubits: int = 4, n_layers: int = 5):
    """The RL policy circuit: RY encodings, RZ·RY weights, a CZ ring per layer, <Z...Z>."""
    c = Circuit(n_qubits, name=f"policy{n_qubits}x{n_layers}")
    x = c.inputs("x", n_qubits)
    w = c.weights("w", 2 * n_qubits * n_layers)
    k = 0
    for _ in range(n_layers):
        for q in range(n_qubits):
            c.ry(x[q], q)
        for q in range(n_qubits):
            c.rz(w[k], q).ry(w[k + 1], q)
            k += 2
        for q in range(n_qubits):
            c.cz(q, (q + 1) % n_qubits)
    return c.build(observables=[" ".join(f"Z{q}" for q in range(n_qubits))])


def _cases(n: int, seed: int, max_qubits: int = 10, rows: int = 3):
    """Random templates over the whole gate table; odd cases get per-row weights."""
    rng = np.random.default_rng(seed)
    for k in range(n):
        t = random_template(rng, int(rng.integers(1, max_qubits + 1)))
        x = rng.uniform(-np.pi, np.pi, (rows, t.n_inputs))
        w = rng.uniform(-np.pi, np.pi, (rows, t.n_weights) if k % 2 else (t.n_weights,))
        yield k, t, x, w


def _exact(backend, t, x, w):
    return backend.run_checked(CircuitBatch.make(t, x, w))


# --- values and probabilities vs the reference -------------------------------------


def test_values_and_probs_match_reference_on_60_random_templates(reference):
    gates_seen, per_row = set(), 0
    for k, t, x, w in _cases(60, seed=7):
        gates_seen |= {op.name for op in t.ops}
        per_row += w.ndim == 2
        ref = _exact(reference, t, x, w).values
        ref_p = _exact(reference, t.with_observables([]), x, w).probs
        fusion = (None, 2, 3)[k % 3]  # the cost model's width, and narrow blocks (permutations)
        for dtype, tol in (("complex64", 1e-5), ("complex128", 1e-10)):
            prog = compile_template(t, dtype, fusion=fusion)
            np.testing.assert_allclose(prog(x, w).double().numpy(), ref, atol=tol, err_msg=f"case {k}: {t}")
            np.testing.assert_allclose(prog.probs(x, w).double().numpy(), ref_p, atol=tol, err_msg=f"case {k}")
    assert gates_seen == set(GATES)  # the whole gate table was exercised
    assert per_row == 30


def test_backend_run_matches_reference_including_probs_and_chunks(reference):
    backend = CompiledBackend(dtype="complex128", max_amplitudes=64)  # forces several chunks per job
    for k, t, x, w in _cases(8, seed=11, max_qubits=6, rows=5):
        res = backend.submit(CircuitBatch.make(t, x, w)).result(timeout=60)
        np.testing.assert_allclose(res.values, _exact(reference, t, x, w).values, atol=1e-10)
        assert res.metadata["backend"] == "compiled"
        tp = t.with_observables([])
        probs = backend.submit(CircuitBatch.make(tp, x, w)).result(timeout=60).probs
        np.testing.assert_allclose(probs, _exact(reference, tp, x, w).probs, atol=1e-10)


@pytest.mark.parametrize("other", ["aer", "pennylane:default.qubit"])
def test_values_match_aer_and_pennylane(other):
    backend, compiled = get_backend(other), get_backend("compiled", dtype="complex128")
    for k, t, x, w in _cases(5, seed=13, max_qubits=6):
        want = backend.submit(CircuitBatch.make(t, x, w)).result(timeout=120).values
        got = compiled.submit(CircuitBatch.make(t, x, w)).result(timeout=60).values
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=f"{other}, case {k}")


def test_policy_circuit_and_wider_layouts(reference):
    rng = np.random.default_rng(3)
    for t in (policy_circuit(4), policy_circuit(8, 2)):
        x = rng.uniform(-np.pi, np.pi, (4, t.n_inputs))
        w = rng.uniform(-np.pi, np.pi, t.n_weights)
        ref = _exact(reference, t, x, w).values
        for fusion in (None, 1, 3, t.n_qubits):
            np.testing.assert_allclose(compile_template(t, fusion=fusion)(x, w).numpy(), ref, atol=1e-5)
    prog = compile_template(policy_circuit(4))
    text = prog.describe()
    assert "fusion width 4 (full width)" in text and "dense" in text and "per-sample" in text
    assert "flops per sample" in text
    # every layer's weight block is one 16x16 unitary, built in one batched stack
    assert text.count("16x16") == 6 and "5 unitaries built from weights per call in 1 batched stack" in text


def test_no_inputs_no_weights_and_identity_terms(reference):
    c = Circuit(2, name="fixed")
    c.h(0).cx(0, 1).rz(0.3, 1)
    t = c.build(observables=["Z0 Z1", [(0.5, ""), (2.0, "X0 X1")], "Y0"])
    prog = compile_template(t, "complex128")
    np.testing.assert_allclose(prog(np.zeros((3, 0))).numpy(), _exact(reference, t, np.zeros((3, 0)), None).values,
                               atol=1e-12)
    assert prog().shape == (1, 3)
    with pytest.raises(BackendError, match="no observables; use probs"):
        compile_template(t.with_observables([]))()


def _prims_unitary(prims, n):
    from hqflow.backends.compiled.affine import _embed

    u = np.eye(2**n, dtype=complex)
    for p in prims:
        if p.matrix is not None:
            m = p.matrix
        else:  # a diagonal rotation, at an arbitrary fixed angle
            m = np.diag(np.exp(1j * 0.37 * (p.angle.offset + 1.3 * p.angle.scale) * p.spectrum))
        u = _embed(m, list(p.wires), n) @ u
    return u


@pytest.mark.parametrize("lazy", [True, False])
def test_fusion_blocks_reproduce_the_circuit(lazy):
    """Blocks (in order, each with its primitives in order) multiply to the circuit's unitary."""
    from hqflow.backends.compiled.fuse import _fuse
    from hqflow.backends.compiled.lower import _lower

    rng = np.random.default_rng(41)
    for _ in range(30):
        n = int(rng.integers(2, 6))
        t = random_template(rng, n, n_ops=8 * n)
        prims = [p for op in t.ops for p in _lower(op)]
        want = _prims_unitary(prims, n)
        for k in range(1, n + 1):
            blocks = _fuse(prims, k, n, lazy)
            assert sorted(map(id, (p for b in blocks for p in b.prims))) == sorted(map(id, prims))
            # at most k wires, unless a gate is wider than k, or the block is a phase stage
            assert all(len(b.wires) <= max(k, *(len(p.wires) for p in b.prims)) or b.diagonal for b in blocks)
            got = _prims_unitary([p for b in blocks for p in b.prims], n)
            np.testing.assert_allclose(got, want, atol=1e-10, err_msg=f"k={k}")


# --- gradients ----------------------------------------------------------------------


def _jacobians(prog, x, w):
    """Autograd jacobians: d values[b, o] / d weights (per row) and / d inputs[b]."""
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    values = prog(xt, wt)
    B, n_obs = values.shape
    jw = np.zeros((B, n_obs, w.shape[-1]))
    jx = np.zeros((B, n_obs, x.shape[1]))
    for o in range(n_obs):
        for b in range(B):
            gx, gw = torch.autograd.grad(values[b, o], (xt, wt), retain_graph=True, allow_unused=True)
            if gw is not None:
                jw[b, o] = (gw[b] if w.ndim == 2 else gw).numpy()
            if gx is not None:
                jx[b, o] = gx[b].numpy()
    return values.detach().numpy(), jw, jx


def test_gradients_match_param_shift_and_finite_differences(reference):
    for k, t, x, w in _cases(24, seed=17, max_qubits=6):
        prog = compile_template(t, "complex128", fusion=(None, 2)[k % 2])
        values, jw, jx = _jacobians(prog, x, w)
        batch, post = param_shift(t, x, w)
        grad = post(reference.run_checked(batch))
        np.testing.assert_allclose(values, grad.values, atol=1e-10)
        np.testing.assert_allclose(jw, grad.jacobian, atol=1e-4, err_msg=f"weights, case {k}: {t}")
        eps = 1e-6
        for i in range(t.n_inputs):
            e = np.zeros_like(x)
            e[:, i] = eps
            fd = (prog(x + e, w) - prog(x - e, w)).numpy() / (2 * eps)
            np.testing.assert_allclose(jx[:, :, i], fd, atol=1e-4, err_msg=f"input {i}, case {k}")


def test_gradient_modes_agree():
    """The fused backward, the adjoint method and plain autograd give the same gradients."""
    rng = np.random.default_rng(19)
    checked = 0
    for k, t, x, w in _cases(16, seed=23, max_qubits=7):
        out_w = torch.tensor(rng.normal(size=(x.shape[0], t.n_observables)))
        out_p = torch.tensor(rng.normal(size=(x.shape[0], 2**t.n_qubits)))
        grads = {}
        for mode in ("autograd", "fused", "adjoint"):
            prog = compile_template(t, "complex128", fusion=(None, 2, 3)[k % 3], gradient=mode)
            xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
            ((prog(xt, wt) * out_w).sum() + (prog.probs(xt, wt) * out_p).sum()).backward()
            grads[mode] = (xt.grad.numpy(), wt.grad.numpy())
        for mode in ("fused", "adjoint"):
            for got, want in zip(grads[mode], grads["autograd"]):
                np.testing.assert_allclose(got, want, atol=1e-9, err_msg=f"{mode}, case {k}")
        checked += 1
    assert checked == 16
    assert compile_template(policy_circuit(), adjoint=True).gradient == "adjoint"


def _plan_tensors(plan):
    """Every tensor a plan holds (its stages' constants, the weight map's tables)."""
    import dataclasses

    found, todo = [], [plan]
    while todo:
        v = todo.pop()
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            todo += [getattr(v, f.name) for f in dataclasses.fields(v)]
        elif isinstance(v, dict):
            todo += list(v.values())
        elif isinstance(v, (list, tuple)):
            todo += list(v)
    return found


@pytest.mark.parametrize("dtype, tol", [("complex64", 1e-6), ("complex128", 1e-12)])
@pytest.mark.parametrize("gradient", ["fused", "autograd"])
def test_large_weight_maps_are_gathers_with_the_dense_maps_values_and_no_sparse_tensor(monkeypatch, dtype, tol, gradient):
    """Issue 22.19: where the weights -> shared angles map is too large for a dense matrix it is a padded gather
    (``_WeightMap``), not a torch sparse tensor (whose kernels warn on CUDA); same values and weight gradients
    as the dense map, and building and running it (forward and backward) warns of nothing."""
    import warnings

    from hqflow.backends.compiled import config
    from hqflow.backends.compiled.plan import _WeightMap

    checked = 0
    for k, t, x, w in list(_cases(8, seed=43, max_qubits=5, rows=2)) + [(8, policy_circuit(), *_policy_rows(2))]:
        if w.ndim == 2:
            continue
        results = []
        for limit in (2**22, 0):
            monkeypatch.setattr(config, "_DENSE_MAP", limit)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                prog = CompiledProgram(t, dtype, gradient=gradient, lightcone=False)  # uncached: built under limit
                plan = prog._plan(False)
                wt = torch.tensor(w, dtype=prog.real_dtype, requires_grad=True)
                values = prog(torch.tensor(x, dtype=prog.real_dtype), wt)
                (values * torch.arange(1.0, 1.0 + values.shape[1], dtype=values.dtype)).sum().backward()
            assert not any(v.is_sparse for v in _plan_tensors(plan))
            if plan.shared_w is not None:
                assert isinstance(plan.shared_w, torch.Tensor if limit else _WeightMap)
                checked += not limit
            results.append((values.detach().double().numpy(), wt.grad.double().numpy()))
        np.testing.assert_allclose(results[1][0], results[0][0], rtol=tol, atol=tol, err_msg=f"values, case {k}")
        np.testing.assert_allclose(results[1][1], results[0][1], rtol=tol, atol=tol, err_msg=f"gradients, case {k}")
    assert checked >= 3


def _policy_rows(rows: int):
    rng = np.random.default_rng(3)
    return rng.uniform(-np.pi, np.pi, (rows, 4)), rng.uniform(-np.pi, np.pi, 40)


def test_a_weight_map_gathers_every_entry_once():
    """``_WeightMap`` against the matrix it stands for, rows that use no weight and weights that no row uses
    included; its backward is the transpose's gather."""
    from hqflow.backends.compiled.plan import _MapTimesWeights, _WeightMap

    rng = np.random.default_rng(0)
    dense = rng.normal(size=(9, 5)) * (rng.random((9, 5)) < 0.4)
    dense[3], dense[:, 2] = 0.0, 0.0
    rows, cols = np.nonzero(dense)
    m = _WeightMap.build(rows, cols, dense[rows, cols], 9, 5, torch.float64, "cpu")
    assert m.index.shape[1] == np.count_nonzero(dense, 1).max() and m.index_t.shape[1] == np.count_nonzero(dense, 0).max()
    w = torch.tensor(rng.normal(size=5), requires_grad=True)
    out = torch.zeros(9, dtype=torch.float64).index_put((m.rows,), _MapTimesWeights.apply(w, m))
    np.testing.assert_allclose(out.detach().numpy(), dense @ w.detach().numpy(), rtol=1e-15, atol=1e-15)
    g = rng.normal(size=9)
    out.backward(torch.tensor(g))
    np.testing.assert_allclose(w.grad.numpy(), dense.T @ g, rtol=1e-15, atol=1e-15)


def test_complex64_policy_gradients_close_to_complex128():
    t = policy_circuit()
    rng = np.random.default_rng(5)
    x = rng.uniform(-np.pi, np.pi, (64, 4))
    w = rng.uniform(-np.pi, np.pi, 40)
    grads = []
    for dtype in ("complex64", "complex128"):
        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        values = compile_template(t, dtype)(xt, wt)
        assert values.dtype == (torch.float32 if dtype == "complex64" else torch.float64)
        values.sum().backward()
        grads.append((xt.grad.double().numpy(), wt.grad.double().numpy()))
    np.testing.assert_allclose(grads[0][0], grads[1][0], atol=1e-4)
    np.testing.assert_allclose(grads[0][1], grads[1][1], atol=1e-4)


def test_autograd_mode_is_twice_differentiable():
    c = Circuit(1)
    (w,) = c.weights("w", 1)
    c.ry(w, 0)
    t = c.build(observables=["Z0"])  # <Z> = cos(w), d2/dw2 = -cos(w)
    prog = compile_template(t, "complex128", gradient="autograd")
    wt = torch.tensor([0.7], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(prog(None, wt).sum(), wt, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), wt)
    assert abs(g.item() + np.sin(0.7)) < 1e-12 and abs(h.item() + np.cos(0.7)) < 1e-12


# --- shots ----------------------------------------------------------------------------


def test_shot_values_within_five_standard_errors(reference):
    backend = get_backend("compiled")
    for k, t, x, w in _cases(10, seed=29, max_qubits=6):
        exact = _exact(reference, t, x, w).values
        res = backend.submit(CircuitBatch.make(t, x, w, shots=4000, seed=k)).result(timeout=60)
        assert res.stderr is not None and res.stderr.shape == exact.shape
        assert np.all(np.abs(res.values - exact) <= 5 * res.stderr + 1e-9), f"case {k}"
        again = backend.run_checked(CircuitBatch.make(t, x, w, shots=4000, seed=k))
        np.testing.assert_array_equal(again.values, res.values)  # seeded


def test_counts_follow_probabilities(reference):
    backend = get_backend("compiled")
    shots = 20000
    for k, t, x, w in _cases(4, seed=31, max_qubits=4):
        t = t.with_observables([])
        probs = _exact(reference, t, x, w).probs
        res = backend.run_checked(CircuitBatch.make(t, x, w, shots=shots, seed=k))
        assert res.counts is not None and len(res.counts) == x.shape[0]
        for row, counts in zip(probs, res.counts):
            assert sum(counts.values()) == shots
            assert all(len(b) == t.n_qubits and set(b) <= {"0", "1"} for b in counts)
            freq = np.array([counts.get(format(i, f"0{t.n_qubits}b"), 0) for i in range(len(row))]) / shots
            assert np.all(np.abs(freq - row) <= 5 * np.sqrt(row * (1 - row) / shots) + 1e-3)


# --- cache, registry, errors ---------------------------------------------------------------


def test_compile_cache_is_keyed_by_fingerprint_dtype_and_options(reference):
    t = policy_circuit(2, 2)
    prog = compile_template(t)
    assert compile_template(t) is prog
    same = policy_circuit(2, 2)  # an equal template built again: same fingerprint
    assert same is not t and compile_template(same) is prog
    assert compile_template(t, "complex128") is not prog
    assert compile_template(t, torch.complex64) is prog
    assert compile_template(t, fusion=1) is not prog
    assert compile_template(t, gradient="autograd") is not prog
    changed = t.with_observables(["Z0"])
    assert changed.fingerprint() != t.fingerprint()
    other = compile_template(changed)
    assert other is not prog and isinstance(other, CompiledProgram)
    x, w = np.full((2, 2), 0.4), np.linspace(-1, 1, t.n_weights)
    np.testing.assert_allclose(other(x, w).numpy(), _exact(reference, changed, x, w).values, atol=1e-5)
    np.testing.assert_allclose(prog(x, w).numpy(), _exact(reference, t, x, w).values, atol=1e-5)


def test_registry_lookup():
    assert "compiled" in backend_names()
    b = get_backend("compiled")
    assert isinstance(b, CompiledBackend) and b.dtype == torch.complex64
    caps = b.capabilities
    assert (caps.exact, caps.shots, caps.gradient, caps.device, caps.max_qubits) == (True, True, "autograd", "cpu", 24)
    b128 = get_backend("compiled", dtype="complex128")
    assert b128.dtype == torch.complex128
    assert b128.program(policy_circuit(2, 1)).dtype == torch.complex128
    assert get_backend("compiled", max_qubits=8).capabilities.max_qubits == 8


def test_errors_are_clear_backend_errors():
    t = policy_circuit(2, 1)
    with pytest.raises(BackendError, match="unknown dtype 'float32'.*complex64"):
        get_backend("compiled", dtype="float32")
    with pytest.raises(BackendError, match="unknown dtype"):
        compile_template(t, dtype=torch.float64)
    if not torch.cuda.is_available():
        with pytest.raises(BackendError, match="CUDA is not available"):
            get_backend("compiled", device="cuda")
        with pytest.raises(BackendError, match="CUDA is not available"):
            compile_template(t, device="cuda:0")
    with pytest.raises(BackendError, match="not supported"):
        CompiledBackend(device="meta")
    with pytest.raises(BackendError, match="fusion must be a positive int"):
        compile_template(t, fusion=0)
    with pytest.raises(BackendError, match="gradient must be one of"):
        compile_template(t, gradient="magic")
    small = CompiledBackend(max_qubits=3)
    big = policy_circuit(4, 1)
    with pytest.raises(BackendError, match="has 4 qubits but backend 'compiled' allows at most 3"):
        small.submit(CircuitBatch.make(big, np.zeros((1, 4)), np.zeros(big.n_weights)))
    with pytest.raises(BackendError, match="simulates at most"):
        compile_template(Circuit(40).h(0).build(observables=["Z0"]))
    prog = compile_template(t)
    with pytest.raises(BackendError, match=r"inputs for .* must have shape \[B, 2\]"):
        prog(np.zeros((3, 5)), np.zeros(t.n_weights))
    with pytest.raises(BackendError, match=r"weights for .* must have shape \[4\]"):
        prog(np.zeros((3, 2)), np.zeros(3))
    with pytest.raises(BackendError, match="per-row weights have 2 rows but inputs have 3"):
        prog(np.zeros((3, 2)), np.zeros((2, 4)))
    with pytest.raises(BackendError, match="needs weights"):
        prog(np.zeros((3, 2)))


@pytest.mark.gpu
def test_runs_on_cuda_and_matches_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: torch.cuda.is_available() is False")
    t = policy_circuit()
    rng = np.random.default_rng(37)
    x = torch.tensor(rng.uniform(-np.pi, np.pi, (256, 4)))
    w = torch.tensor(rng.uniform(-np.pi, np.pi, 40))
    cpu = compile_template(t, "complex128")
    gpu = compile_template(t, "complex128", device="cuda")
    xg, wg = x.cuda().requires_grad_(), w.cuda().requires_grad_()
    values = gpu(xg, wg)
    assert values.device.type == "cuda"
    values.sum().backward()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    cpu(xc, wc).sum().backward()
    np.testing.assert_allclose(values.detach().cpu().numpy(), cpu(x, w).detach().numpy(), atol=1e-10)
    np.testing.assert_allclose(wg.grad.cpu().numpy(), wc.grad.numpy(), atol=1e-9)
    np.testing.assert_allclose(xg.grad.cpu().numpy(), xc.grad.numpy(), atol=1e-9)
    res = get_backend("compiled", device="cuda").run_checked(CircuitBatch.make(t, x.numpy(), w.numpy(), shots=100))
    assert res.values.shape == (256, 1) and res.stderr is not None
    # "cuda" names the current device: the same compiled program as "cuda:i"
    assert gpu is compile_template(t, "complex128", device=f"cuda:{torch.cuda.current_device()}")


# --- batched parameter-shift on the compiled backend against its own autograd ------------


def _autograd_both(t, x, w):
    prog = compile_template(t, "complex128")
    _, jw, jx = _jacobians(prog, x, w)
    return jw, jx


def test_batched_param_shift_equals_autograd_in_exact_mode():
    backend = get_backend("compiled", dtype="complex128")
    for k, t, x, w in _cases(10, seed=31, max_qubits=6):
        jw, jx = _autograd_both(t, x, w)
        batch, post = param_shift(t, x, w, wrt="both")
        grad = post(backend.run_checked(batch))
        np.testing.assert_allclose(grad.jacobian, jw, atol=1e-10, err_msg=f"case {k}")
        np.testing.assert_allclose(grad.input_jacobian, jx, atol=1e-10, err_msg=f"case {k}")


def test_batched_param_shift_agrees_with_autograd_within_shot_noise():
    """Shot mode: over 24 seeded jobs the estimates centre on autograd's exact jacobian.

    Each jacobian entry's mean over the jobs must lie within 5 standard errors of
    the exact value (standard error from the spread across jobs), and the z-scores
    must look like unit noise rather than a bias (their RMS below 1.6)."""
    t = policy_circuit(3, 2)
    rng = np.random.default_rng(5)
    x = rng.uniform(-np.pi, np.pi, (2, t.n_inputs))
    w = rng.uniform(-np.pi, np.pi, t.n_weights)
    jw, jx = _autograd_both(t, x, w)
    backend = get_backend("compiled")
    runs_w, runs_x = [], []
    for seed in range(24):
        batch, post = param_shift(t, x, w, wrt="both", shots=4000, seed=seed)
        grad = post(backend.run_checked(batch))
        assert grad.stderr is not None
        runs_w.append(grad.jacobian)
        runs_x.append(grad.input_jacobian)
    z = []
    for runs, exact in ((np.array(runs_w), jw), (np.array(runs_x), jx)):
        sem = runs.std(0, ddof=1) / np.sqrt(len(runs))
        assert (sem > 0).all()  # they really are noisy estimates
        z.append(((runs.mean(0) - exact) / sem).ravel())
    z = np.concatenate(z)
    assert np.abs(z).max() < 5, np.abs(z).max()
    assert np.sqrt(np.mean(z**2)) < 1.6


def test_chunked_batches_switch_to_the_adjoint_method_by_total_size(monkeypatch):
    """CPU chunks all keep their states until backward, so the memory limit counts the whole batch."""
    from hqflow.backends.compiled import config, simulate

    t = policy_circuit(4, 2)
    prog = compile_template(t, "complex128")
    seen = []
    real = simulate._FusedSim.apply

    def spy(plan, readout, uncompute, *rest):
        seen.append(uncompute)
        return real(plan, readout, uncompute, *rest)

    monkeypatch.setattr(simulate._FusedSim, "apply", spy)
    monkeypatch.setattr(config, "_CHUNK_AMPLITUDES", 16 * 4)  # chunks of 4 rows
    one_chunk = len(prog._plan(False).stages) * 4 * 16 * 16  # bytes kept by one chunk
    monkeypatch.setattr(config, "_KEEP_BYTES", 3 * one_chunk)  # above a chunk, below the batch
    x = torch.rand(40, t.n_inputs, dtype=torch.float64)
    w = torch.rand(t.n_weights, dtype=torch.float64, requires_grad=True)
    prog(x, w).sum().backward()
    assert len(seen) == 10 and all(seen)


def test_fusion_must_be_an_int_even_when_cached():
    t = policy_circuit(2, 1)
    compile_template(t, fusion=1)
    with pytest.raises(BackendError, match="fusion"):
        compile_template(t, fusion=True)


def test_per_row_weights_with_few_distinct_rows_run_grouped_and_match_reference():
    rng = np.random.default_rng(1)
    t = random_template(rng, 3, 12, n_inputs=2, n_weights=3)
    rows = rng.uniform(-3, 3, (3, t.n_weights))[rng.integers(0, 3, 48)]  # 48 rows, 3 distinct weight rows
    batch = CircuitBatch.make(t, rng.uniform(-3, 3, (48, t.n_inputs)), rows)
    got = get_backend("compiled", dtype="complex128").submit(batch).result()
    ref = get_backend("reference").submit(batch).result()
    assert got.metadata.get("groups") == 3
    np.testing.assert_allclose(got.values, ref.values, atol=1e-10)


def test_compile_template_takes_a_template_with_derived_inputs(reference):  # 22.5
    from qiskit.circuit.library import zz_feature_map

    from hqflow.ir import from_qiskit

    fmap = zz_feature_map(2)
    t = from_qiskit(fmap, inputs=fmap.parameters, observables=["Z0 Z1", "X0"])
    x = torch.rand(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = _exact(reference, t, x.numpy(), None).values
    assert compile_template(t)(torch.rand(3, 2), torch.zeros(0)).shape == (3, 2)  # the README's call
    prog = compile_template(t, dtype="complex128")
    np.testing.assert_allclose(prog(x, torch.zeros(0)).numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(prog.term_values(x.numpy()).numpy(), expected, atol=1e-12)
    xt = x.clone().requires_grad_()
    prog(xt).sum().backward()  # through the derived inputs to the raw ones
    batch, post = param_shift(t, x.numpy(), None, wrt="inputs")
    np.testing.assert_allclose(xt.grad.numpy(), post(reference.submit(batch).result()).input_jacobian.sum(1), atol=1e-9)
    with pytest.raises(BackendError, match=r"inputs for .* must have shape \[B, 2\], got \[3, 3\]"):
        prog(torch.rand(3, 3))
