"""VQE for the H2 molecule (STO-3G, 4 qubits) as an hqflow graph.

The Hamiltonian comes from PennyLane's differentiable Hartree-Fock solver
(``method="dhf"``, no PySCF) and becomes one hqflow ``Observable``. The ansatz is
the Hartree-Fock state |1100> followed by one double excitation
``G(theta) = exp(-i theta/2 (|1100><0011| i - h.c.))``, written in hqflow's gate set
as eight commuting Pauli rotations (``double_excitation`` below). The graph:

    energy (execute, gradient) --values, jacobian--> adam (learn)
    adam.weights  ~>  energy.weights, adam.weights      (loop-carried)
    adam.opt      ~>  adam.opt                          (loop-carried Adam moments)

The gradient is parameter shift (exact) or SPSA (``gradient="spsa"``: an estimate from
``spsa_samples`` random directions), the energy exact or from ``shots`` samples.

Then a second, one-step graph evaluates the energy at the trained angle
(``build_energy_graph``), on the same backends with the same options, so a pool,
``--backend-opt`` and ``--dry-run`` cover it too. Its spans follow the training run's
among the result's ``spans``, as step ``steps``. It measures as the run does: exactly, or with
``shots`` (so a target without exact values evaluates too).

    from hqflow.workloads import vqe
    print(vqe.run(vqe.Config(steps=60)))
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import numpy as np
from hqflow.backends import DEFAULT_BACKEND
from hqflow.gradients import GradientMethod
from hqflow.ir import Circuit, CircuitTemplate, Graph, Observable, PauliTerm
from hqflow.trace import after
from hqflow.workloads import estimator
from hqflow.workloads.optim import adam_init, adam_step

import hqflow as hq

BOHR_PER_ANGSTROM = 1.0 / 0.529177210903


@dataclass(frozen=True)
class Config:
    bond_length: float = 0.735
    """H-H distance in angstrom"""
    steps: int = 60
    """number of optimizer steps (one graph step each)"""
    lr: float = 0.05
    """Adam learning rate"""
    init: float = 0.0
    """initial double-excitation angle (0 is the Hartree-Fock state)"""
    seed: int = 0
    """seed for the executor (only matters with shots)"""
    backend: str = DEFAULT_BACKEND
    """backend that runs the energy circuit"""
    gradient: str = GradientMethod.PARAM_SHIFT
    """the energy's gradient: "param-shift" (exact; 17 circuits a step) or "spsa" (an estimate;
    1 + 2 x spsa_samples circuits a step)"""
    spsa_samples: int = 2
    """spsa: random directions per step (1 to 1000)"""
    spsa_epsilon: float = 0.1
    """spsa: the perturbation's size in radians (0 < epsilon <= 3.2)"""
    shots: int | None = None
    """shots per circuit (None: exact values), the final energy's too"""

    def __post_init__(self) -> None:
        estimator.check(self)  # types and ranges, the field named in the error




# --- the molecule ---------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def hamiltonian(bond_length: float = 0.735) -> tuple[Observable, float, float]:
    """``(H as an Observable, exact ground energy, Hartree-Fock energy)`` in hartree.

    Wire ``i`` is PennyLane's spin orbital ``i``. Cached: the dHF solve takes seconds.
    """
    import pennylane as qml

    z = 0.5 * bond_length * BOHR_PER_ANGSTROM
    mol = qml.qchem.Molecule(["H", "H"], np.array([0.0, 0.0, -z, 0.0, 0.0, z]))  # bohr
    H, n_qubits = qml.qchem.molecular_hamiltonian(mol, method="dhf")
    terms = []
    for word, coeff in H.pauli_rep.items():
        if abs(np.imag(coeff)) > 1e-12:
            raise ValueError(f"complex coefficient {coeff} for {word}")
        terms.append(PauliTerm(float(np.real(coeff)), tuple(sorted((int(w), p) for w, p in word.items()))))
    matrix = qml.matrix(H, wire_order=range(n_qubits))
    e_exact = float(np.linalg.eigvalsh(matrix)[0])
    e_hf = float(np.real(matrix[0b1100, 0b1100]))
    return Observable(tuple(terms)), e_exact, e_hf


# G = sum_k c_k P_k generates PennyLane's DoubleExcitation: U(theta) = exp(-i theta/2 G).
# The eight Pauli words commute, so U(theta) = prod_k exp(-i (c_k theta) P_k / 2) exactly.
DOUBLE_EXCITATION_WORDS = (
    ("XXXY", -1 / 8), ("XXYX", -1 / 8), ("XYXX", 1 / 8), ("XYYY", -1 / 8),
    ("YXXX", 1 / 8), ("YXYY", -1 / 8), ("YYXY", 1 / 8), ("YYYX", 1 / 8),
)


def pauli_rotation(c: Circuit, word: str, angle, wires) -> Circuit:
    """Append ``exp(-i angle P / 2)`` for the Pauli word ``P`` (letters X/Y/Z) on ``wires``."""
    for p, w in zip(word, wires):  # rotate each factor to Z
        if p == "X":
            c.h(w)
        elif p == "Y":
            c.rx(np.pi / 2, w)
    for a, b in zip(wires, wires[1:]):  # parity onto the last wire
        c.cx(a, b)
    c.rz(angle, wires[-1])
    for a, b in reversed(list(zip(wires, wires[1:]))):
        c.cx(a, b)
    for p, w in zip(word, wires):
        if p == "X":
            c.h(w)
        elif p == "Y":
            c.rx(-np.pi / 2, w)
    return c


def double_excitation(c: Circuit, theta, wires=(0, 1, 2, 3)) -> Circuit:
    """PennyLane's ``DoubleExcitation(theta, wires)`` in hqflow gates (one symbol, 8 uses)."""
    for word, coeff in DOUBLE_EXCITATION_WORDS:
        pauli_rotation(c, word, coeff * theta, list(wires))
    return c


def ansatz(observable: Observable | None = None, shots: int | None = None) -> CircuitTemplate:
    c = Circuit(4, name="h2_uccd")
    (theta,) = c.weights("theta", 1)
    c.x(0).x(1)  # Hartree-Fock |1100>
    double_excitation(c, theta)
    return c.build(observables=[observable] if observable is not None else [], shots=shots)


# --- fragments ----------------------------------------------------------------------------

def adam(values, jacobian, weights, opt, lr):
    """One Adam step on the energy ``values[0, 0]``; returns next weights, moments, energy."""
    weights, opt = adam_step(weights, np.asarray(jacobian)[0, 0], opt, lr)
    return {"weights": weights, "opt": opt, "energy": float(values[0, 0])}


def build_graph(cfg: Config) -> Graph:
    observable, _, _ = hamiltonian(cfg.bond_length)
    pipe = hq.Pipeline("vqe_h2")
    spsa = estimator.spsa_setting(cfg)
    pipe.execute("energy", ansatz(observable, cfg.shots), backend=cfg.backend, gradient=cfg.gradient, spsa=spsa)
    pipe.learn(adam, outputs={"weights": "array", "opt": "dict", "energy": "scalar"}, params={"lr": cfg.lr})
    init = [float(cfg.init)]
    pipe.loop("adam.weights", "energy.weights", init=init)
    pipe.loop("adam.weights", "adam.weights", init=init)
    pipe.loop("adam.opt", "adam.opt", init=adam_init(1))
    pipe.output("adam.energy", "energy")
    return pipe.build()


def build_energy_graph(cfg: Config) -> Graph:
    """The energy at given weights (a stream field): one gradient-free evaluation."""
    observable, _, _ = hamiltonian(cfg.bond_length)
    pipe = hq.Pipeline("vqe_h2_energy")
    pipe.input("weights", "array")
    pipe.execute("final_energy", ansatz(observable, cfg.shots), backend=cfg.backend)
    pipe.output("final_energy.values", "energy")
    return pipe.build()


def run(cfg: Config = Config(), progress=None, **options) -> dict:
    """The workload's run; ``options`` go to ``hq.run`` (``backends=`` a pool, ``plan=``, scheduler fields),
    the final evaluation's too (all but ``plan``)."""
    observable, e_exact, e_hf = hamiltonian(cfg.bond_length)
    result = hq.run(build_graph(cfg), cfg.steps, seed=cfg.seed, progress=progress, **options)
    history = [float(e) for e in result.column("energy")]  # energy before each step's update
    theta = float(np.asarray(result.state["adam.weights"])[0])
    # Energy at the final angle: one more (gradient-free) evaluation, on the run's own backends
    final = hq.run(build_energy_graph(cfg), [{"weights": np.array([theta])}], seed=cfg.seed,
                   **{k: v for k, v in options.items() if k != "plan"})
    energy = float(np.asarray(final.outputs[0]["energy"])[0, 0])
    return {
        "workload": "vqe", "config": asdict(cfg),
        "energy": energy, "exact_energy": e_exact, "hf_energy": e_hf,
        "error_mha": 1000.0 * (energy - e_exact), "theta": theta,
        "steps": cfg.steps, "seconds": result.seconds, "history": history,
        "spans": [s.to_dict() for s in result.spans + after(final.spans, result.spans, cfg.steps)],
    }
