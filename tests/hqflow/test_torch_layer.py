"""QuantumLayer: a circuit as an nn.Module. Gradients against central finite differences on every
kind of backend; composition with nn.Sequential, torch.optim and torch.compile; clear errors."""
import numpy as np
import pytest
import torch

from hqflow.backends import CircuitBatch, get_backend
from hqflow.ir import Circuit
from hqflow.torch import QuantumLayer


def _template():
    c = Circuit(3, name="layer")
    x, w = c.inputs("x", 2), c.weights("w", 5)
    c.ry(x[0], 0).rx(x[1] * 0.5 + 0.2, 1).cx(0, 1).rz(w[0], 1).ry(w[1], 2).crx(w[2], 1, 2)
    c.rx(x[0], 2).ry(w[3], 0).cz(0, 2).rx(w[4] * 2.0, 1)
    return c.build(observables=["Z0", "X1 Z2", "Y2"])


BACKENDS = ["compiled", "reference", "aer", "pennylane:default.qubit"]


def _loss(layer, x):
    out = layer(x)
    return (out * torch.tensor([[0.7, -1.3, 0.4]], dtype=out.dtype)).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_match_finite_differences(backend):
    t = _template()
    layer = QuantumLayer(t, backend, seed=3, dtype=torch.float64)
    x = torch.tensor(np.random.default_rng(0).uniform(-np.pi, np.pi, (4, 2)), requires_grad=True)
    loss = _loss(layer, x)
    loss.backward()
    exact = get_backend("reference").run_checked(
        CircuitBatch.make(t, x.detach().numpy(), layer.weights.detach().numpy())).values
    np.testing.assert_allclose(layer(x).detach().numpy(), exact, atol=1e-6)

    def f(xv, wv):
        with torch.no_grad():
            layer.weights.copy_(torch.as_tensor(wv))
            return float(_loss(layer, torch.as_tensor(xv)))

    w0, x0, eps = layer.weights.detach().clone().numpy(), x.detach().numpy(), 1e-5
    fd_w = [(f(x0, w0 + eps * e) - f(x0, w0 - eps * e)) / (2 * eps) for e in np.eye(len(w0))]
    fd_x = np.zeros_like(x0)
    for i in np.ndindex(*x0.shape):
        d = np.zeros_like(x0)
        d[i] = eps
        fd_x[i] = (f(x0 + d, w0) - f(x0 - d, w0)) / (2 * eps)
    np.testing.assert_allclose(layer.weights.grad.numpy(), fd_w, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), fd_x, atol=1e-5)


def test_it_composes_with_sequential_and_an_optimizer():
    torch.manual_seed(0)
    t = _template()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), QuantumLayer(t, "reference", seed=1), torch.nn.Linear(3, 1))
    assert any(p is model[1].weights for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    x = torch.randn(16, 2)
    y = torch.sin(x[:, :1])
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_torch_compile_gives_the_same_values_and_gradients(backend):
    t = _template()
    layer = QuantumLayer(t, backend, seed=2, dtype=torch.float64)
    x = torch.tensor(np.random.default_rng(1).uniform(-1, 1, (3, 2)), requires_grad=True)
    eager = _loss(layer, x)
    gx, gw = torch.autograd.grad(eager, [x, layer.weights])
    compiled = torch.compile(lambda v: _loss(layer, v), backend="eager")
    again = compiled(x)
    cx, cw = torch.autograd.grad(again, [x, layer.weights])
    assert float(again.detach()) == pytest.approx(float(eager.detach()), abs=1e-9)
    np.testing.assert_allclose(cx.numpy(), gx.numpy(), atol=1e-9)
    np.testing.assert_allclose(cw.numpy(), gw.numpy(), atol=1e-9)


def test_torch_compile_runs_a_layer_with_derived_inputs_and_zero_features():  # issue 22.1, 22.2
    import pennylane as qml

    from hqflow.backends import BackendError
    from hqflow.ir import from_pennylane

    def embed(inputs, weights):
        qml.AmplitudeEmbedding(inputs, wires=range(2), normalize=True)
        qml.RY(weights[0], wires=0)
        return qml.expval(qml.Z(0)), qml.expval(qml.X(1))

    layer = QuantumLayer(from_pennylane(embed, 2, n_inputs=4, n_weights=1), "compiled", seed=2, dtype=torch.float64)
    x = torch.tensor([[1.7, -0.85, 0.0, 0.0], [0.0, 0.0, 0.6, -0.2], [0.3, 0.1, -0.2, 0.4]], requires_grad=True)
    eager = layer(x).sum()
    gx, gw = torch.autograd.grad(eager, [x, layer.weights])
    compiled = torch.compile(lambda v: layer(v).sum(), backend="eager")
    again = compiled(x)
    cx, cw = torch.autograd.grad(again, [x, layer.weights])
    assert float(again.detach()) == pytest.approx(float(eager.detach()), abs=1e-12)
    assert np.isfinite(gx.numpy()).all()
    np.testing.assert_allclose(cx.numpy(), gx.numpy(), atol=1e-12)
    np.testing.assert_allclose(cw.numpy(), gw.numpy(), atol=1e-12)
    with pytest.raises(BackendError, match=r"is nan for row 1 .*undefined where"):
        compiled(torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float64))


def test_one_row_no_inputs_and_shots():
    t = _template()
    layer = QuantumLayer(t, "compiled", seed=0)
    assert layer(torch.zeros(2)).shape == (3,) and layer(torch.zeros(5, 2)).shape == (5, 3)
    assert QuantumLayer(t, "reference")(torch.zeros(0, 2)).shape == (0, 3)  # an empty batch submits nothing
    c = Circuit(1, name="fixed")
    c.ry(c.weights("w", 1)[0], 0)
    plain = QuantumLayer(c.build(observables=["Z0"]), "reference", weights=[0.3])
    assert float(plain()[0, 0].detach()) == pytest.approx(np.cos(0.3))
    sampled = QuantumLayer(c.build(observables=["Z0"]), "reference", weights=[0.3], shots=4000, seed=5)
    value = sampled()
    assert abs(float(value[0, 0].detach()) - np.cos(0.3)) < 5 * np.sqrt((1 - np.cos(0.3) ** 2) / 4000)
    value.sum().backward()  # a parameter-shift job with shots
    assert abs(float(sampled.weights.grad[0]) + np.sin(0.3)) < 0.1
    assert "backend='reference'" in repr(sampled) and "shots=4000" in repr(sampled)


def test_bad_input_is_a_clear_error():
    t = _template()
    with pytest.raises(ValueError, match=r"shape \[B, 2\]"):
        QuantumLayer(t)(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="takes 2 inputs"):
        QuantumLayer(t)()
    with pytest.raises(ValueError, match="no observables"):
        QuantumLayer(Circuit(1, name="none").build())
    with pytest.raises(ValueError, match=r"weights must have shape \[5\]"):
        QuantumLayer(t, weights=[0.0])
    with pytest.raises(ValueError, match="shots"):
        QuantumLayer(t, shots=0)
    with pytest.raises(TypeError, match="CircuitTemplate"):
        QuantumLayer("not a circuit")


def test_the_torch_classifier_example_reaches_90_percent_on_two_moons(monkeypatch, capsys):
    """In this process (tests/test_examples.py runs every example as a user does, in an interpreter of its own)."""
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "torch_classifier.py"
    monkeypatch.setattr("sys.argv", [str(script), "--quick", "--backend", "reference"])
    runpy.run_path(str(script), run_name="torch_classifier_example")
    accuracy = float(capsys.readouterr().out.strip().splitlines()[-1].split()[2])
    assert accuracy >= 0.9


LAYER = None


def torch_step(step):
    """A fragment that evaluates and differentiates a QuantumLayer on its pool "qpu"."""
    global LAYER
    if LAYER is None:
        LAYER = QuantumLayer(_template(), backend="qpu", seed=0, dtype=torch.float64)
    x = torch.full((2, 2), 0.1 * step, dtype=torch.float64)
    loss = LAYER(x).sum()
    loss.backward()
    return {"loss": float(loss.detach()), "grad": LAYER.weights.grad.detach().numpy().copy()}


def test_inside_a_pipeline_its_jobs_go_to_the_fragments_pool():
    import hqflow as hq

    pipe = hq.Pipeline("torch-in-pipeline")
    pipe.input("step", "scalar")
    pipe.preprocess(torch_step, outputs={"loss": "scalar", "grad": "array"}, job_backends=("qpu",), name="layer")
    pipe.output("layer.loss")
    result = hq.run(pipe.build(), [{"step": i} for i in range(2)], backends={"qpu": ["reference"]}, executor="sync")
    jobs = [s for s in result.spans if s.kind == "execute"]
    assert len(jobs) == 4 and all(s.resource.quantum for s in jobs)  # forward + backward, per step
    exact = get_backend("reference").run_checked(
        CircuitBatch.make(_template(), np.full((2, 2), 0.1), LAYER.weights.detach().numpy())).values.sum()
    assert result.column("loss")[1] == pytest.approx(exact, abs=1e-9)


def _build_learner():
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), QuantumLayer(_template(), "compiled", seed=1),
                                torch.nn.Linear(3, 1))
    return model, torch.optim.Adam(model.parameters(), lr=0.05)


LEARNER = None


def learn_step(step, state):
    """A learn fragment that owns a torch model and its optimizer through a TorchLearner."""
    from hqflow.torch import TorchLearner

    global LEARNER
    if LEARNER is None:
        LEARNER = TorchLearner(_build_learner)
    model, opt = LEARNER.attach(state)
    x = torch.randn(16, 2, generator=torch.Generator().manual_seed(0))  # one fixed batch
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), torch.sin(x[:, :1]))
    loss.backward()
    opt.step()
    return {"state": LEARNER.state(), "loss": loss.item()}


def _learn_graph():
    import hqflow as hq

    pipe = hq.Pipeline("torch-learner")
    pipe.input("step", "scalar")
    pipe.preprocess(learn_step, outputs={"state": "any", "loss": "scalar"}, inputs={"state": "any"}, name="learn")
    pipe.loop("learn.state", "learn.state", init=None)  # the first step builds the model
    pipe.output("learn.loss")
    return pipe.build()


@pytest.mark.parametrize("executor", ["sync", "local", pytest.param("ray", marks=pytest.mark.ray)])
def test_a_learn_fragment_owns_a_torch_model_and_resumes_exactly(executor):
    import hqflow as hq

    global LEARNER
    graph = _learn_graph()
    LEARNER = None
    kw = {"ray_num_cpus": 2} if executor == "ray" else {}
    whole = hq.run(graph, [{"step": i} for i in range(6)], executor=executor, **kw)
    LEARNER = None
    first = hq.run(graph, [{"step": i} for i in range(3)], executor=executor, **kw)
    LEARNER = None  # a new process: the state comes from the checkpoint alone
    rest = hq.run(graph, [{"step": i} for i in range(3, 6)], executor=executor, initial_state=first.state, **kw)
    a, b = whole.state["learn.state"], rest.state["learn.state"]
    assert set(a["model"]) == set(b["model"]) and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert whole.column("loss")[3:] == rest.column("loss")
    assert whole.column("loss")[-1] < whole.column("loss")[0]
    assert a["optimizer"]["state"][0]["step"] == 6  # Adam's state came along


def test_torch_learner_errors_are_clear():
    from hqflow.torch import TorchLearner

    with pytest.raises(TypeError, match="build"):
        TorchLearner(None)
    with pytest.raises(TypeError, match=r"\(model, optimizer\)"):
        TorchLearner(lambda: torch.nn.Linear(1, 1)).attach(None)
    learner = TorchLearner(_build_learner)
    with pytest.raises(ValueError, match="snapshot"):
        learner.attach({"weights": [1.0]})
    with pytest.raises(RuntimeError, match="before attach"):
        TorchLearner(_build_learner).state()


def test_a_loop_that_starts_empty_survives_serialization():
    import hqflow as hq
    from hqflow.ir import Graph
    from hqflow.ir.graph import GraphError

    graph = Graph.from_json(_learn_graph().to_json())
    loops = [e for e in graph.edges if e.loop]
    assert len(loops) == 1 and loops[0].start_empty and loops[0].init is None
    pipe = hq.Pipeline("no-init")
    pipe.input("step", "scalar")
    pipe.preprocess(learn_step, outputs={"state": "any", "loss": "scalar"}, inputs={"state": "any"}, name="learn")
    pipe.loop("learn.state", "learn.state")  # no init: initial_state must give it
    pipe.output("learn.loss")
    with pytest.raises(GraphError, match="no initial value"):
        hq.run(pipe.build(), [{"step": 0}], executor="sync")
