"""A data re-uploading variational classifier on two moons, as an hqflow graph.

Each stream item is a mini-batch ``{"x": [B, 2], "y": [B]}`` (labels ±1). The
``encode`` fragment standardizes the points into angles; the circuit uploads
them again before every layer of trainable rotations, so two qubits can draw a
curved decision boundary. The prediction is ``<Z0> + bias``, trained on the
square loss with Adam; the bias lives in the learner's loop-carried state:

    input.x -> encode (prepare) -> circuit (execute, gradient) -> adam (learn) <- input.y
    adam.weights ~> circuit.weights, adam.weights;  adam.bias ~> adam.bias;  adam.opt ~> adam.opt

The circuit's gradient is parameter shift (exact) or SPSA (``gradient="spsa"``: an estimate from
``spsa_samples`` random directions shared by the mini-batch's rows), its values exact or from ``shots``
samples; the train and test accuracies are evaluated as the run measures: exactly, or with ``shots``
(then on ``seed``), so a target without exact values evaluates too.

    from hqflow.workloads import classifier
    print(classifier.run(classifier.Config(steps=150)))
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from hqflow.backends import DEFAULT_BACKEND
from hqflow.gradients import GradientMethod
from hqflow.ir import Circuit, CircuitTemplate, Graph
from hqflow.workloads import estimator
from hqflow.workloads.optim import adam_init, adam_step

import hqflow as hq


@dataclass(frozen=True)
class Config:
    samples: int = 300
    """number of generated points (half per moon)"""
    noise: float = 0.1
    """standard deviation of the Gaussian noise added to the moons"""
    test_fraction: float = 0.3
    """fraction of the points held out for the test accuracy"""
    layers: int = 4
    """re-uploading layers (encode, rotate, entangle)"""
    steps: int = 150
    """number of Adam steps (one mini-batch each)"""
    batch_size: int = 24
    """points per mini-batch"""
    lr: float = 0.05
    """Adam learning rate"""
    seed: int = 0
    """seed for the data, the initial weights and the mini-batches"""
    backend: str = DEFAULT_BACKEND
    """backend that runs the classifier circuit"""
    gradient: str = GradientMethod.PARAM_SHIFT
    """the circuit's gradient: "param-shift" (exact; 1 + 2 x angles circuits per point) or "spsa" (an
    estimate; 1 + 2 x spsa_samples circuits per point, whatever the number of weights)"""
    spsa_samples: int = 2
    """spsa: random directions per step, shared by the mini-batch's points (1 to 1000)"""
    spsa_epsilon: float = 0.1
    """spsa: the perturbation's size in radians (0 < epsilon <= 3.2)"""
    shots: int | None = None
    """shots per circuit (None: exact values), the accuracies' evaluation too"""

    def __post_init__(self) -> None:
        estimator.check(self)  # types and ranges, the field named in the error




# --- data ----------------------------------------------------------------------------------

def two_moons(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points on two interleaved half circles (labels +1 / -1) with Gaussian noise."""
    n_top = n // 2
    t = rng.uniform(0.0, np.pi, n)
    top = np.stack([np.cos(t), np.sin(t)], axis=1)
    bottom = np.stack([1.0 - np.cos(t), 0.5 - np.sin(t)], axis=1)
    is_top = np.arange(n) < n_top
    x = np.where(is_top[:, None], top, bottom) + noise * rng.normal(size=(n, 2))
    y = np.where(is_top, 1.0, -1.0)
    order = rng.permutation(n)
    return x[order], y[order]


def make_data(cfg: Config):
    """``(x_train, y_train, x_test, y_test)``, raw (unstandardized) coordinates."""
    x, y = two_moons(cfg.samples, cfg.noise, np.random.default_rng(cfg.seed))
    n_test = int(round(cfg.test_fraction * cfg.samples))
    return x[n_test:], y[n_test:], x[:n_test], y[:n_test]


# --- the circuit -----------------------------------------------------------------------------

def reuploading_circuit(layers: int, shots: int | None = None) -> CircuitTemplate:
    c = Circuit(2, name=f"reupload_{layers}")
    x = c.inputs("x", 2)
    w = c.weights("w", 4 * layers)
    for k in range(layers):
        a, b, d, e = w[4 * k: 4 * k + 4]
        c.ry(x[0], 0).ry(x[1], 1)  # upload the point again
        c.rz(a, 0).ry(b, 0).rz(d, 1).ry(e, 1)
        c.cz(0, 1)
    return c.build(observables=["Z0"], shots=shots)


# --- fragments -----------------------------------------------------------------------------

def encode(x, mean, std):
    """Standardize with the training set's statistics; one angle per feature."""
    return (np.asarray(x, dtype=float) - np.asarray(mean)) / np.asarray(std)


def adam(values, jacobian, y, weights, bias, opt, lr):
    """Square loss of ``<Z0> + bias`` against labels ±1, one Adam step on (weights, bias)."""
    y = np.asarray(y, dtype=float)
    err = values[:, 0] + bias - y
    grad = np.append((2 * err[:, None] * jacobian[:, 0, :]).mean(0), (2 * err).mean())
    theta, opt = adam_step(np.append(weights, bias), grad, opt, lr)
    accuracy = float(np.mean(np.sign(values[:, 0] + bias) == y))
    return {"weights": theta[:-1], "bias": float(theta[-1]), "opt": opt,
            "loss": float(np.mean(err**2)), "accuracy": accuracy}


def _pipeline(name: str, cfg: Config) -> hq.Pipeline:
    x_train = make_data(cfg)[0]
    pipe = hq.Pipeline(name)
    pipe.input("x", "array")
    pipe.prepare(encode, outputs={"angles": "array"},
                 params={"mean": x_train.mean(0), "std": x_train.std(0)})
    return pipe


def build_graph(cfg: Config) -> Graph:
    pipe = _pipeline("classifier_moons", cfg).input("y", "array")
    template = reuploading_circuit(cfg.layers, cfg.shots)
    spsa = estimator.spsa_setting(cfg)
    pipe.execute("circuit", template, backend=cfg.backend, gradient=cfg.gradient, spsa=spsa)
    pipe.connect("encode.angles", "circuit.inputs")
    pipe.learn(adam, outputs={"weights": "array", "bias": "scalar", "opt": "dict", "loss": "scalar",
                              "accuracy": "scalar"}, params={"lr": cfg.lr})
    init = np.random.default_rng(cfg.seed).uniform(0, 2 * np.pi, template.n_weights)
    pipe.loop("adam.weights", "circuit.weights", init=init)
    pipe.loop("adam.weights", "adam.weights", init=init)
    pipe.loop("adam.bias", "adam.bias", init=0.0)
    pipe.loop("adam.opt", "adam.opt", init=adam_init(template.n_weights + 1))
    pipe.output("adam.loss").output("adam.accuracy", "batch_accuracy")
    return pipe.build()


def build_eval_graph(cfg: Config) -> Graph:
    """Points and weights in (stream fields), ``<Z0>`` out."""
    pipe = _pipeline("classifier_eval", cfg).input("weights", "array")
    pipe.execute("circuit", reuploading_circuit(cfg.layers, cfg.shots), backend=cfg.backend)
    pipe.connect("encode.angles", "circuit.inputs")
    pipe.output("circuit.values")
    return pipe.build()


def minibatches(cfg: Config, x: np.ndarray, y: np.ndarray):
    rng = np.random.default_rng([cfg.seed, 1])
    for _ in range(cfg.steps):
        idx = rng.choice(len(x), size=min(cfg.batch_size, len(x)), replace=False)
        yield {"x": x[idx], "y": y[idx]}


def run(cfg: Config = Config(), progress=None, **options) -> dict:
    """The workload's run; ``options`` go to ``hq.run`` (``backends=`` a pool, ``plan=``, scheduler fields)."""
    x_train, y_train, x_test, y_test = make_data(cfg)
    result = hq.run(build_graph(cfg), minibatches(cfg, x_train, y_train), seed=cfg.seed, progress=progress, **options)
    weights, bias = np.asarray(result.state["adam.weights"]), float(result.state["adam.bias"])
    evaluate = build_eval_graph(cfg)

    backends = {k: v for k, v in options.items() if k == "backends"}  # the run's own pool, with its options

    def accuracy(x, y) -> float:
        values = hq.run(evaluate, [{"x": x, "weights": weights}], seed=cfg.seed, **backends).outputs[0]["values"][:, 0]
        return float(np.mean(np.sign(values + bias) == y))

    return {
        "workload": "classifier", "config": asdict(cfg),
        "train_accuracy": accuracy(x_train, y_train), "test_accuracy": accuracy(x_test, y_test),
        "final_loss": float(result.outputs[-1]["loss"]), "bias": bias,
        "steps": cfg.steps, "seconds": result.seconds,
        "history": [float(v) for v in result.column("loss")],
        "spans": [s.to_dict() for s in result.spans],
    }
