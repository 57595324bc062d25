"""Two-moons classifier: the workload beats 90% test accuracy; its pieces are checked on their own."""
import numpy as np
import pytest

from hqflow.backends import CircuitBatch, get_backend
from hqflow.gradients import finite_difference, param_shift
from hqflow.ir import Graph
from hqflow.workloads import classifier, get_workload


def test_two_moons():
    x, y = classifier.two_moons(200, 0.0, np.random.default_rng(0))
    assert x.shape == (200, 2) and sorted(set(y)) == [-1.0, 1.0] and (y == 1).sum() == 100
    top, bottom = x[y == 1], x[y == -1]
    np.testing.assert_allclose(np.hypot(*top.T), 1.0)  # unit half circle around the origin
    np.testing.assert_allclose(np.hypot(bottom[:, 0] - 1.0, bottom[:, 1] - 0.5), 1.0)
    assert (top[:, 1] >= 0).all() and (bottom[:, 1] <= 0.5).all()
    x_tr, y_tr, x_te, y_te = classifier.make_data(classifier.Config(samples=100, test_fraction=0.25))
    assert len(x_tr) == 75 and len(x_te) == 25 and len(y_tr) == 75 and len(y_te) == 25


def test_param_shift_gradient_matches_finite_differences():
    template = classifier.reuploading_circuit(3)
    backend = get_backend("reference")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 2))
    w = rng.uniform(0, 2 * np.pi, template.n_weights)

    def predict(weights):
        return backend.submit(CircuitBatch.make(template, x, weights)).result().values

    batch, post = param_shift(template, x, w)
    values, jac = post(backend.submit(batch).result())[:2]
    np.testing.assert_allclose(values, predict(w), atol=1e-12)
    np.testing.assert_allclose(jac, finite_difference(predict, w), atol=1e-6)


def test_learn_step_lowers_the_loss():
    """The learner's gradient (weights and bias) points downhill: a small step lowers the loss."""
    cfg = classifier.Config(layers=2)
    template = classifier.reuploading_circuit(cfg.layers)
    backend = get_backend("reference")
    x_tr, y_tr, _, _ = classifier.make_data(cfg)
    angles = classifier.encode(x_tr[:16], x_tr.mean(0), x_tr.std(0))
    w = np.random.default_rng(0).uniform(0, 2 * np.pi, template.n_weights)
    batch, post = param_shift(template, angles, w)
    values, jac = post(backend.submit(batch).result())[:2]
    opt = {"t": 0, "m": np.zeros(template.n_weights + 1), "v": np.zeros(template.n_weights + 1)}
    out = classifier.adam(values, jac, y_tr[:16], w, 0.3, opt, lr=0.01)
    new_values = backend.submit(CircuitBatch.make(template, angles, out["weights"])).result().values
    new_loss = np.mean((new_values[:, 0] + out["bias"] - y_tr[:16]) ** 2)
    assert new_loss < out["loss"]


def test_classifier_reaches_test_accuracy():
    cfg = get_workload("classifier").Config()
    result = classifier.run(cfg)
    assert result["test_accuracy"] >= 0.9
    assert result["train_accuracy"] >= 0.9
    assert len(result["history"]) == cfg.steps
    assert np.mean(result["history"][-10:]) < np.mean(result["history"][:10])


def test_graph_json_round_trip():
    qiskit_io = pytest.importorskip("hqflow.ir.qiskit_io", reason="graph JSON needs hqflow.ir.qiskit_io")
    if not hasattr(qiskit_io, "template_to_qpy"):
        pytest.skip("hqflow.ir.qiskit_io has no template_to_qpy")
    cfg = classifier.Config()
    for graph in (classifier.build_graph(cfg), classifier.build_eval_graph(cfg)):
        again = Graph.from_json(graph.to_json()).validate()
        assert again == graph


def test_the_accuracy_is_evaluated_on_the_runs_own_pool():
    """Everything the workload runs goes through the configured pool and its options (issue 22.22's twin):
    a pool name the registry does not know works only if the evaluation uses the run's backends."""
    from hqflow.backends.emulated import EmulatedQPU

    jobs = []

    class Counting(EmulatedQPU):
        def submit(self, batch):
            jobs.append(batch.size)
            return super().submit(batch)

    cfg = classifier.Config(steps=3, samples=40, backend="mine")
    out = classifier.run(cfg, backends={"mine": [Counting(per_job=0.0)]})
    assert 0.0 <= out["test_accuracy"] <= 1.0
    assert len(jobs) == 3 + 2  # the three training steps, then the train and the test accuracy
