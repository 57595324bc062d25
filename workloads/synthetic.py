"""A synthetic hybrid loop with tunable classical and quantum cost, for the scheduler.

    execute(inputs from the stream, weights from the learner) -> learn -> weights (loop-carried)

The learner does real torch work, a chain of matrix products sized to take
about ``C`` ms (``calibrate``), then a small deterministic update of the
weights from the circuit's values. The quantum stage is whatever backend the
graph names, typically an ``emulated-qpu`` with about ``Q`` ms per job. With
``max_staleness=1`` the execute of step ``i + 1`` may use weights from step
``i - 1``, so the QPU runs while the learner learns.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from hqflow.ir import Circuit, CircuitTemplate, Graph

import hqflow as hq


@dataclass(frozen=True)
class Config:
    n_qubits: int = 2
    """qubits of the circuit (RY encodings, RY weights, a CZ ring, readout <Z0>)"""
    batch: int = 8
    """rows per micro-batch"""
    matrix: int = 64
    """size of the learner's square matrices"""
    repeats: int = 1
    """matrix products per learner step (sets the classical cost)"""
    staleness: int = 1
    """max_staleness of the weights edge from the learner to the circuit"""
    backend: str = "emulated-qpu"
    """backend name the execute fragment uses"""
    resource: str = "cpu"
    """resource of the learner fragment ("cpu" or "gpu")"""
    lr: float = 0.1
    """step size of the weight update"""


def circuit(n_qubits: int) -> CircuitTemplate:
    c = Circuit(n_qubits, name=f"synthetic{n_qubits}")
    x, w = c.inputs("x", n_qubits), c.weights("w", n_qubits)
    for q in range(n_qubits):
        c.ry(x[q], q)
    for q in range(n_qubits):
        c.ry(w[q], q)
    for q in range(n_qubits if n_qubits > 2 else n_qubits - 1):
        c.cz(q, (q + 1) % n_qubits)
    return c.build(observables=["Z0"])


def matmul_chain(matrix: int, repeats: int) -> float:
    """``repeats`` products by a fixed orthogonal ``matrix x matrix`` float32 matrix; returns a checksum.

    An orthogonal factor keeps the values' scale constant, so no step drifts into
    denormals or overflow and the cost is linear in ``repeats``.
    """
    import torch

    q = _orthogonal(matrix)
    a = torch.eye(matrix, dtype=torch.float32)
    for _ in range(repeats):
        a = a @ q
    return float(a.sum())


_ORTHOGONAL: dict = {}


def _orthogonal(n: int):
    if n not in _ORTHOGONAL:
        import torch

        g = torch.Generator().manual_seed(n)
        _ORTHOGONAL[n] = torch.linalg.qr(torch.randn(n, n, generator=g))[0].contiguous()
    return _ORTHOGONAL[n]


def learn(values, weights, matrix, repeats, lr):
    """Real torch work, then a deterministic update of the weights from the values."""
    checksum = matmul_chain(matrix, repeats)
    mean = float(np.mean(values))
    return {"weights": np.asarray(weights) - lr * mean, "loss": mean, "checksum": checksum}


def build_graph(cfg: Config = Config()) -> Graph:
    pipe = hq.Pipeline("synthetic")
    pipe.input("x", "array")
    pipe.execute("circuit", circuit(cfg.n_qubits), backend=cfg.backend)
    pipe.connect("input.x", "circuit.inputs")
    pipe.learn(learn, outputs=("weights", "loss", "checksum"), resource=cfg.resource,
               params={"matrix": cfg.matrix, "repeats": cfg.repeats, "lr": cfg.lr})
    init = [0.1 * (q + 1) for q in range(cfg.n_qubits)]
    pipe.loop("learn.weights", "circuit.weights", init=init, max_staleness=cfg.staleness)
    pipe.loop("learn.weights", "learn.weights", init=init)
    pipe.output("learn.loss")
    return pipe.build(validate=False)  # the scheduler validates it against the backends it is given


def stream(steps: int, cfg: Config = Config(), seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(-np.pi, np.pi, (cfg.batch, cfg.n_qubits))} for _ in range(steps)]


def calibrate(ms: float, matrix: int = 128, rounds: int = 4) -> int:
    """How many matrix products of size ``matrix`` take about ``ms`` milliseconds here.

    Measures the chain itself at the current guess and corrects, a few times,
    so fixed costs and cache effects are part of the measurement.
    """
    target = ms / 1e3
    matmul_chain(matrix, 4)  # warm up
    repeats = 8
    for _ in range(rounds):
        took = sorted(_timed(matrix, repeats) for _ in range(3))[1]  # the median of three
        repeats = max(1, round(repeats * target / took))
    return repeats


def _timed(matrix: int, repeats: int) -> float:
    t0 = time.perf_counter()
    matmul_chain(matrix, repeats)
    return time.perf_counter() - t0
