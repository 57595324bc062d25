"""QAOA for MaxCut on a small random graph, as two hqflow graphs.

The cost is ``C = sum_{(i,j) in E} (1 - Z_i Z_j) / 2`` (the cut size); we maximize
``<C>`` by minimizing ``-<C>``. Each of the ``p`` layers is ``exp(-i gamma_k C)``
(``rzz(-gamma_k)`` on every edge, up to a global phase) and ``exp(-i beta_k sum X)``
(``rx(2 beta_k)`` on every wire), so one weight drives many gates and the
parameter-shift transform sums their shifts. Training starts from a linear ramp
(a discretized anneal) and runs Adam:

    cost (execute, gradient) --values, jacobian--> adam (learn)
    adam.weights ~> cost.weights, adam.weights;  adam.opt ~> adam.opt   (loop-carried)

The gradient is parameter shift (exact) or SPSA (``gradient="spsa"``: an estimate from
``spsa_samples`` random directions), ``<C>`` exact or from ``cost_shots`` samples.

Afterwards a second graph evaluates ``<C>`` at the trained weights and samples the
trained circuit (``shots`` counts), and a postprocess fragment picks the best sampled
cut; it runs on the same backends with the same options, so a pool, ``--backend-opt``
and ``--dry-run`` cover it too. Its spans follow the training run's among the
result's ``spans``, as step ``steps``. Its ``<C>`` is measured as the run's is: exactly, or with
``cost_shots`` (so a target without exact values evaluates too).

    from hqflow.workloads import qaoa
    print(qaoa.run(qaoa.Config(nodes=8, layers=4)))
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import networkx as nx
import numpy as np
from hqflow.backends import DEFAULT_BACKEND
from hqflow.gradients import GradientMethod
from hqflow.ir import Circuit, CircuitTemplate, Graph
from hqflow.trace import after
from hqflow.workloads import estimator
from hqflow.workloads.optim import adam_init, adam_step

import hqflow as hq


@dataclass(frozen=True)
class Config:
    nodes: int = 8
    """number of graph nodes (qubits)"""
    graph: str = "regular"
    """random graph family: "regular" (3-regular) or "erdos_renyi" (edge probability 0.5)"""
    layers: int = 4
    """QAOA depth p (one gamma and one beta per layer)"""
    steps: int = 60
    """number of Adam steps (one graph step each)"""
    lr: float = 0.05
    """Adam learning rate"""
    ramp: float = 0.75
    """linear-ramp initialization: gamma_k = 2 ramp (k + 1/2) / p, beta_k = ramp (1 - (k + 1/2) / p)"""
    shots: int = 1000
    """shots when sampling the trained circuit"""
    seed: int = 0
    """seed for the random graph and for sampling"""
    backend: str = DEFAULT_BACKEND
    """backend that runs the circuits"""
    gradient: str = GradientMethod.PARAM_SHIFT
    """the cost's gradient: "param-shift" (exact; 1 + 2 x angles circuits a step) or "spsa" (an estimate;
    1 + 2 x spsa_samples circuits a step, whatever the depth)"""
    spsa_samples: int = 2
    """spsa: random directions per step (1 to 1000)"""
    spsa_epsilon: float = 0.1
    """spsa: the perturbation's size in radians (0 < epsilon <= 3.2)"""
    cost_shots: int | None = None
    """shots per cost circuit (None: exact values), the final <C>'s too"""

    def __post_init__(self) -> None:
        estimator.check(self, {"cost_shots": (1, 10**7)})  # types and ranges, the field named in the error




# --- the problem ----------------------------------------------------------------------------

def make_graph(cfg: Config) -> nx.Graph:
    if cfg.graph == "regular":
        g = nx.random_regular_graph(3, cfg.nodes, seed=cfg.seed)
    elif cfg.graph == "erdos_renyi":
        g = nx.erdos_renyi_graph(cfg.nodes, 0.5, seed=cfg.seed)
    else:
        raise ValueError(f"unknown graph family {cfg.graph!r}; use 'regular' or 'erdos_renyi'")
    return nx.convert_node_labels_to_integers(g)


def cut_size(bits: str, edges) -> int:
    """Edges cut by the partition ``bits`` (character ``i`` is node ``i``, as in counts)."""
    return sum(bits[i] != bits[j] for i, j in edges)


def brute_force_max_cut(n: int, edges) -> int:
    return max(cut_size(format(b, f"0{n}b"), edges) for b in range(2 ** (n - 1)))  # node 0 fixed to 0


def qaoa_circuit(n: int, edges, layers: int, measure_cut: bool = True, shots: int | None = None) -> CircuitTemplate:
    c = Circuit(n, name=f"qaoa_p{layers}")
    gammas, betas = c.weights("gamma", layers), c.weights("beta", layers)
    for w in range(n):
        c.h(w)
    for k in range(layers):
        for i, j in edges:
            c.rzz(-1.0 * gammas[k], i, j)  # exp(-i gamma (1 - Z_i Z_j) / 2) up to a phase
        for w in range(n):
            c.rx(2 * betas[k], w)
    cost = [(0.5 * len(edges), "")] + [(-0.5, f"Z{i} Z{j}") for i, j in edges]
    return c.build(observables=[cost] if measure_cut else [], shots=shots)


def ramp(cfg: Config) -> list[float]:
    f = (np.arange(cfg.layers) + 0.5) / cfg.layers
    return [float(x) for x in np.concatenate([2 * cfg.ramp * f, cfg.ramp * (1 - f)])]


# --- fragments ---------------------------------------------------------------------------------

def adam(values, jacobian, weights, opt, lr):
    """One Adam step that maximizes the expected cut ``values[0, 0]``."""
    weights, opt = adam_step(weights, -np.asarray(jacobian)[0, 0], opt, lr)  # the loss is -<C>
    return {"weights": weights, "opt": opt, "cut": float(values[0, 0])}


def best_sample(counts, edges):
    """The most frequent and the best-cut bitstrings among the samples."""
    counts = counts[0]
    likely = max(counts, key=counts.get)
    best = max(counts, key=lambda b: cut_size(b, edges))
    return {"most_likely": likely, "best_bits": best, "best_cut": cut_size(best, edges)}


def build_graph(cfg: Config) -> Graph:
    edges = [list(e) for e in make_graph(cfg).edges]
    pipe = hq.Pipeline("qaoa_maxcut")
    template = qaoa_circuit(cfg.nodes, edges, cfg.layers, shots=cfg.cost_shots)
    spsa = estimator.spsa_setting(cfg)
    pipe.execute("cost", template, backend=cfg.backend, gradient=cfg.gradient, spsa=spsa)
    pipe.learn(adam, outputs={"weights": "array", "opt": "dict", "cut": "scalar"}, params={"lr": cfg.lr})
    init = ramp(cfg)
    pipe.loop("adam.weights", "cost.weights", init=init)
    pipe.loop("adam.weights", "adam.weights", init=init)
    pipe.loop("adam.opt", "adam.opt", init=adam_init(len(init)))
    pipe.output("adam.cut", "expected_cut")
    return pipe.build()


def build_sample_graph(cfg: Config) -> Graph:
    """Trained weights in (a stream field); the expected cut and the best sampled cut out."""
    edges = [list(e) for e in make_graph(cfg).edges]
    pipe = hq.Pipeline("qaoa_sample")
    pipe.input("weights", "array")
    pipe.execute("final_cost", qaoa_circuit(cfg.nodes, edges, cfg.layers, shots=cfg.cost_shots), backend=cfg.backend)
    pipe.output("final_cost.values", "expected_cut")
    pipe.execute("sample", qaoa_circuit(cfg.nodes, edges, cfg.layers, False, cfg.shots), backend=cfg.backend)
    pipe.postprocess(best_sample, outputs=("most_likely", "best_bits", "best_cut"), params={"edges": edges})
    for port in ("most_likely", "best_bits", "best_cut"):
        pipe.output(f"best_sample.{port}")
    return pipe.build()


def run(cfg: Config = Config(), progress=None, **options) -> dict:
    """The workload's run; ``options`` go to ``hq.run`` (``backends=`` a pool, ``plan=``, scheduler fields),
    the final evaluation's too (all but ``plan``)."""
    edges = list(make_graph(cfg).edges)
    max_cut = brute_force_max_cut(cfg.nodes, edges)
    result = hq.run(build_graph(cfg), cfg.steps, seed=cfg.seed, progress=progress, **options)
    history = [float(c) for c in result.column("expected_cut")]  # <C> before each update
    weights = np.asarray(result.state["adam.weights"], dtype=float)
    final = hq.run(build_sample_graph(cfg), [{"weights": weights}], seed=cfg.seed,
                   **{k: v for k, v in options.items() if k != "plan"})
    sampled = final.outputs[0]
    expected = float(np.asarray(sampled["expected_cut"])[0, 0])
    return {
        "workload": "qaoa", "config": asdict(cfg), "edges": [list(e) for e in edges],
        "expected_cut": expected, "max_cut": max_cut, "approximation_ratio": expected / max_cut,
        "best_cut": int(sampled["best_cut"]), "best_bits": sampled["best_bits"],
        "most_likely": sampled["most_likely"], "sampled_ratio": sampled["best_cut"] / max_cut,
        "gammas": weights[: cfg.layers].tolist(), "betas": weights[cfg.layers:].tolist(),
        "steps": cfg.steps, "seconds": result.seconds, "history": history,
        "spans": [s.to_dict() for s in result.spans + after(final.spans, result.spans, cfg.steps)],
    }
