"""Rewrites of circuit templates that leave the results unchanged.

``light_cone(t)``: only the gates in the backward light cone of the observables can
change an expectation value. Walking the gates from last to first, a gate on wires
that no observable (and no kept later gate) touches commutes with everything after
it and cancels against its own inverse in ``<psi| U^dag O U |psi>``, so it is
dropped; the wires that end up touched by nothing are dropped too. The result is a
smaller template over the remaining wires (relabelled ``0..m-1`` in their original
order) and over the inputs and weights it still uses, with the index maps back to
the original. A 12-qubit hardware-efficient ansatz with three CNOT-chain layers and
a ``<Z0>`` readout keeps 4 qubits.

Probabilities, counts and samples need every wire, so this applies to expectation
values only.
"""
from __future__ import annotations

from dataclasses import dataclass

from .circuit import Angle, CircuitTemplate, Observable, Op, PauliTerm, _replace

__all__ = ["Cone", "light_cone"]


@dataclass(frozen=True)
class Cone:
    """``template`` is the reduced circuit; the maps give original indices, in order."""

    template: CircuitTemplate
    wires: tuple[int, ...]  # reduced wire i is original wire wires[i]
    inputs: tuple[int, ...]  # reduced input j is original input inputs[j]
    weights: tuple[int, ...]

    @property
    def reduces(self) -> bool:
        return self.template is not None


def light_cone(t: CircuitTemplate) -> Cone:
    """The template restricted to the light cone of its observables (``reduces`` False if nothing goes)."""
    live = {w for o in t.observables for w in o.wires}
    keep = []
    for op in reversed(t.ops):
        if live.intersection(op.wires):
            live.update(op.wires)
            keep.append(op)
    keep.reverse()
    if not t.observables or (len(keep) == len(t.ops) and len(live) == t.n_qubits):
        return Cone(None, tuple(range(t.n_qubits)), tuple(range(t.n_inputs)), tuple(range(t.n_weights)))
    wires = tuple(sorted(live)) or (0,)
    wmap = {w: i for i, w in enumerate(wires)}
    used = {"input": sorted({a.index for op in keep for a in op.angles if a.kind == "input"}),
            "weight": sorted({a.index for op in keep for a in op.angles if a.kind == "weight"})}
    remap = {kind: {old: new for new, old in enumerate(idx)} for kind, idx in used.items()}

    def angle(a: Angle) -> Angle:
        return a if a.kind == "const" else Angle(a.kind, remap[a.kind][a.index], a.scale, a.offset)

    ops = tuple(Op(op.name, tuple(wmap[w] for w in op.wires), tuple(angle(a) for a in op.angles)) for op in keep)
    obs = tuple(Observable(tuple(PauliTerm(term.coeff, tuple((wmap[w], p) for w, p in term.paulis))
                                 for term in o.terms)) for o in t.observables)
    reduced = _replace(t, n_qubits=len(wires), ops=ops, observables=obs, name=f"{t.name}[cone]", phase=(),
                       input_names=tuple(t.input_names[i] for i in used["input"]),
                       weight_names=tuple(t.weight_names[i] for i in used["weight"]))
    return Cone(reduced, wires, tuple(used["input"]), tuple(used["weight"]))
