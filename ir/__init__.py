"""hqflow's dataflow IR: plain data that can be printed, validated, serialized and drawn.

* ``CircuitTemplate`` — the canonical circuit (inputs/weights split, observables, shots);
  ``Circuit`` builds one in Python; ``from_qiskit``/``from_pennylane`` normalize others.
* ``Expr`` — a classical function of a circuit's inputs: a template's derived inputs
  (feature maps such as ``ZZFeatureMap``, ``IQPEmbedding``, ``AmplitudeEmbedding``).
* ``Fragment``, ``Edge``, ``Graph`` — the hybrid pipeline as a graph of five fragment kinds.
  A fragment is one of two types on the ``Fragment`` base: ``Classical`` (a function held by
  reference; kinds preprocess, prepare, postprocess, learn) or ``CircuitCall`` (a circuit on a
  backend; kind execute). See ``hqflow.ir.nodes``.
"""
from .builder import Circuit, Sym
from .circuit import Angle, CircuitError, CircuitTemplate, Observable, Op, PauliTerm
from .expr import Expr, ExprError
from .gates import GATES, SHIFT_RULES, GateSpec, gate_matrix
from .graph import Graph
from .nodes import (
    KINDS,
    RESOURCES,
    CircuitCall,
    Classical,
    Edge,
    Fragment,
    GraphError,
    Port,
    execute_ports,
)


def from_qiskit(*args, **kwargs):
    """Normalize a Qiskit ``QuantumCircuit`` (see ``hqflow.ir.qiskit_io.from_qiskit``)."""
    from .qiskit_io import from_qiskit as f

    return f(*args, **kwargs)


def to_qiskit(*args, **kwargs):
    """A Qiskit ``QuantumCircuit`` for a template (see ``hqflow.ir.qiskit_io.to_qiskit``)."""
    from .qiskit_io import to_qiskit as f

    return f(*args, **kwargs)


def from_pennylane(*args, **kwargs):
    """Normalize a PennyLane quantum function (see ``hqflow.ir.pennylane_io.from_pennylane``)."""
    from .pennylane_io import from_pennylane as f

    return f(*args, **kwargs)


def to_pennylane(*args, **kwargs):
    """A PennyLane quantum function for a template (see ``hqflow.ir.pennylane_io.to_pennylane``)."""
    from .pennylane_io import to_pennylane as f

    return f(*args, **kwargs)


__all__ = [
    "GATES",
    "KINDS",
    "RESOURCES",
    "SHIFT_RULES",
    "Angle",
    "Circuit",
    "CircuitCall",
    "CircuitError",
    "CircuitTemplate",
    "Classical",
    "Edge",
    "Expr",
    "ExprError",
    "Fragment",
    "GateSpec",
    "Graph",
    "GraphError",
    "Observable",
    "Op",
    "PauliTerm",
    "Port",
    "Sym",
    "execute_ports",
    "from_pennylane",
    "from_qiskit",
    "gate_matrix",
    "to_pennylane",
    "to_qiskit",
]
