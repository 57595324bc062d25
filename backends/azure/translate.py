"""Templates into the input formats of Azure Quantum targets: once per template and target.

A template becomes one circuit per **measurement group** (qubit-wise commuting
Pauli terms share a group; a group's basis rotations come before measuring every
qubit). Each circuit is translated by the SDK's own tooling: IonQ's JSON
(``qiskit_circ_to_ionq_circ``), OpenQASM 2 for Quantinuum (``qiskit.qasm2``) or
QIR for the other providers (``qdk``'s Qiskit interop), or Quil for Rigetti's
``rigetti.quil.v1``, which hqflow writes itself (the SDK has no Quil translator). To do that once and
bind only the parameters per row, every parametrized gate angle is a **slot**:
the circuit is translated with distinct sentinel angles, the sentinels are found
in the text and cut out, and a second translation with other sentinels checks
that filling the slots reproduces the SDK's text exactly. Where it does not (a
translator that folds angles together), each row is translated on its own.

Quil is the one format whose service job holds many rows: its slots are memory references
(``theta[k]``, ``DECLARE theta REAL[n]``), and ``Payloads.bindings`` gives one program per group and
the rows' slot values as the job's ``substitutions`` (azure-quantum's ``rigetti.InputParams``).

Bit order: counts keys put wire 0 first, as everywhere in hqflow.

Qiskit is imported with this module, so on the thread that makes the backend (usually the
main thread), not on a run's worker thread: qiskit 2.6's native allocator crashes (SIGSEGV)
a thread that starts using it after the thread that first loaded qiskit has ended.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np
from hqflow.ir.circuit import Angle, CircuitTemplate, Op
from hqflow.ir.text import shown

from ..base import BackendAccessError, BackendError, CircuitBatch

try:  # loaded with this module, on the thread that makes the backend: see the module docstring
    import qiskit  # noqa: F401
except ImportError:  # said when a circuit is translated: the azure extra is missing
    pass


@dataclass(frozen=True)
class Format:
    """What a provider takes and returns."""

    kind: str  # "ionq" | "qasm" | "qir" | "quil"
    input_data_format: str
    output_data_format: str
    content_type: str
    shots_param: str  # the input parameter that carries the shot count


FORMATS = {
    "ionq": Format("ionq", "ionq.circuit.v1", "ionq.quantum-results.v1", "application/json", "shots"),
    "qasm": Format("qasm", "honeywell.openqasm.v1", "honeywell.quantum-results.v1", "application/qasm", "count"),
    "qir": Format("qir", "qir.v1", "microsoft.quantum-results.v2", "qir.v1", "shots"),
    "quil": Format("quil", "rigetti.quil.v1", "rigetti.quil-results.v1", "text/plain", "shots"),
}
QUIL_MEMORY = "theta"  # the Quil memory region that holds the slots: its rows are the job's substitutions
# lowered gates as Quil writes them (Quil 2.0's standard gates; DAGGER for the inverses)
_QUIL = {"rx": "RX", "ry": "RY", "rz": "RZ", "h": "H", "x": "X", "y": "Y", "z": "Z", "s": "S", "t": "T",
         "sdg": "DAGGER S", "tdg": "DAGGER T", "cz": "CZ", "cx": "CNOT", "swap": "SWAP", "ccx": "CCNOT"}


# the input formats each provider's targets take on Azure Quantum (the first: the default); QIR for the rest
TAKES = {"ionq": ("ionq", "qir"), "quantinuum": ("qasm", "qir"), "honeywell": ("qasm", "qir"),
         "rigetti": ("qir", "quil")}


def format_for(target: str, override: str | None = None) -> Format:
    """IonQ's JSON for ``ionq.*``, OpenQASM 2 for ``quantinuum.*``, QIR for the rest (or ``override``: Quil
    for Rigetti is chosen with ``"quil"``); a format the target's provider does not take is refused."""
    provider = target.split(".", 1)[0].lower()
    takes = TAKES.get(provider, ("qir",))
    if override is None:
        return FORMATS[takes[0]]
    if override not in FORMATS:
        raise BackendError(f"unknown input format {shown(override)}; one of {', '.join(FORMATS)}")
    if provider in TAKES and override not in takes:
        raise BackendError(f"input_format {override!r}: {provider} targets take {' or '.join(takes)}, not "
                           f"{override} ({target} would fail every service job)")
    return FORMATS[override]


# --- lowering: every gate into the set all three translators take ------------------------

def _a(angle: Angle, scale: float, offset: float = 0.0) -> Angle:
    """``scale * angle + offset``, still affine in the same symbol."""
    return Angle(angle.kind, angle.index, angle.scale * scale, angle.offset * scale + offset)


def _lower(op: Op) -> list[Op]:
    """Rewrite gates some targets lack into ones all take; equal up to a global phase."""
    n, w, a = op.name, op.wires, op.angles
    if n == "id":
        return []
    if n == "p":
        return [Op("rz", w, a)]
    if n == "u":  # u(t, f, l) = e^{i(f+l)/2} rz(f) ry(t) rz(l)
        return [Op("rz", w, (a[2],)), Op("ry", w, (a[0],)), Op("rz", w, (a[1],))]
    if n == "sx":
        return [Op("rx", w, (Angle.const(math.pi / 2),))]
    if n == "sxdg":
        return [Op("rx", w, (Angle.const(-math.pi / 2),))]
    if n == "cy":
        c, t = w
        return [Op("sdg", (t,)), Op("cx", w), Op("s", (t,))]
    if n in ("crz", "cry", "crx", "cp"):
        c, t = w
        rot = "ry" if n == "cry" else "rz"
        core = [Op(rot, (t,), (_a(a[0], 0.5),)), Op("cx", w), Op(rot, (t,), (_a(a[0], -0.5),)), Op("cx", w)]
        if n == "crx":
            return [Op("h", (t,)), *core, Op("h", (t,))]
        if n == "cp":  # cp(t) = p(t/2) on the control times crz(t)
            return [Op("rz", (c,), (_a(a[0], 0.5),)), *core]
        return core
    if n == "cswap":
        c, x, y = w
        return [Op("cx", (y, x)), Op("ccx", (c, x, y)), Op("cx", (y, x))]
    return [op]


_TO_Z = {"rxx": ("h", 0.0), "ryy": ("rx", math.pi / 2), "rzz": (None, 0.0)}  # U with U P U^dagger = Z, P the Pauli


def _quil_ops(op: Op) -> list[Op]:
    """``op`` in Quil's standard gates: ``rxx``, ``ryy`` and ``rzz``, which it lacks, exactly as
    ``U^dagger (CNOT, RZ(t) on the target, CNOT) U`` per qubit (``U``: H for XX, RX(pi/2) for YY)."""
    if op.name not in _TO_Z:
        return [op]
    gate, angle = _TO_Z[op.name]
    a, b = op.wires
    into = [] if gate is None else [Op(gate, (q,), (Angle.const(angle),) if angle else ()) for q in (a, b)]
    back = [] if gate is None else [Op(gate, (q,), (Angle.const(-angle),) if angle else ()) for q in (a, b)]
    return [*into, Op("cx", (a, b)), Op("rz", (b,), op.angles), Op("cx", (a, b)), *back]


def lowered_ops(template: CircuitTemplate) -> list[Op]:
    """The template's ops in the gate set every format takes (``_lower``)."""
    return [low for op in template.ops for low in _lower(op)]


def measurement_groups(template: CircuitTemplate) -> list[dict[int, str]]:
    """Greedy qubit-wise commuting groups of every observable's terms: each a basis ``{wire: X|Y|Z}``.

    A template with no observables (sampled) or only identity terms has one group, the Z basis.
    """
    groups: list[dict[int, str]] = []
    for obs in template.observables:
        for term in obs.terms:
            for g in groups:
                if all(g.get(w, p) == p for w, p in term.paulis):
                    g.update(term.paulis)
                    break
            else:
                groups.append(dict(term.paulis))
    return groups or [{}]


def group_of(groups: list[dict[int, str]], paulis: tuple[tuple[int, str], ...]) -> int:
    """The first group whose basis measures ``paulis``."""
    for i, g in enumerate(groups):
        if all(g.get(w) == p for w, p in paulis):
            return i
    raise AssertionError("every term has a group")  # measurement_groups put it in one


# --- slotted payloads ---------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _sentinels(n: int, salt: float) -> np.ndarray:
    """``n`` distinct angles in (0.6, 2.0), away from the pi fractions translators print by name."""
    k = np.arange(n)
    return 0.6 + 1.4 * ((k * 0.6180339887498949 + salt) % 1.0) + 1e-7 * (k % 7 + 1) / 7


@dataclass(frozen=True)
class _Slotted:
    parts: tuple[str, ...]  # len(slots) + 1 pieces of text around the slots
    slots: tuple[int, ...]  # which slot fills each gap

    def fill(self, values: np.ndarray) -> str:
        out = [self.parts[0]]
        for s, part in zip(self.slots, self.parts[1:]):
            out.append(repr(float(values[s])))
            out.append(part)
        return "".join(out)

    def refer(self, memory: str) -> str:
        """The text with each slot a reference ``memory[k]`` (Quil's parameters)."""
        out = [self.parts[0]]
        for s, part in zip(self.slots, self.parts[1:]):
            out.append(f"{memory}[{s}]")
            out.append(part)
        return "".join(out)


def _cut(text: str, sentinels: np.ndarray, modulo: bool) -> _Slotted | None:
    """Cut the sentinel numbers out of ``text``; None if one is missing or ambiguous."""
    parts, slots, last, seen = [], [], 0, set()
    for m in _NUMBER.finditer(text):
        v = float(m.group())
        d = np.abs(sentinels - v)
        if modulo:  # a translator that reduces angles mod 2pi
            d = np.minimum(d, np.abs((sentinels - v + math.pi) % (2 * math.pi) - math.pi))
        k = int(np.argmin(d)) if len(sentinels) else -1
        if k < 0 or d[k] > 1e-9:
            continue
        parts.append(text[last:m.start()])
        slots.append(k)
        seen.add(k)
        last = m.end()
    parts.append(text[last:])
    if len(seen) != len(sentinels):
        return None
    return _Slotted(tuple(parts), tuple(slots))


class Payloads:
    """One template's circuits for one target format: ``rows(batch) -> [B][groups] bytes``."""

    def __init__(self, template: CircuitTemplate, fmt: Format):
        self.template, self.format = template, fmt
        self.groups = measurement_groups(template)
        self.ops = lowered_ops(template)
        self.slot_angles = [a for op in self.ops for a in op.angles if a.kind != "const"]
        self._slotted: list[_Slotted] | None = self._prepare()

    # one circuit, its text -----------------------------------------------------------
    def _qiskit(self, group: dict[int, str], values: np.ndarray):
        return qiskit_circuit(self.template, self.ops, group, values)

    def _quil(self, group: dict[int, str]) -> _Slotted:
        """The group's Quil program with a gap for each slot: ``DECLARE``s, the gates, the group's basis
        rotations, then ``MEASURE q ro[q]`` for every qubit. A gate Quil lacks is a ``BackendError``."""
        n, gaps, slots = self.template.n_qubits, [], []
        text = f"DECLARE ro BIT[{n}]\nDECLARE {QUIL_MEMORY} REAL[{max(len(self.slot_angles), 1)}]\n"
        for op in (q for o in self.ops for q in _quil_ops(o)):
            if op.name not in _QUIL:
                raise BackendError(f"gate {op.name!r} of circuit {self.template.name!r} has no Quil equivalent "
                                   f"({self.format.input_data_format}); use input_format='qir'")
            text += _QUIL[op.name]
            for i, a in enumerate(op.angles):
                text += "(" if i == 0 else ", "
                if a.kind == "const":
                    text += repr(float(a.offset))
                else:
                    gaps.append(text)
                    slots.append(len(slots))
                    text = ""
            text += (")" if op.angles else "") + " " + " ".join(map(str, op.wires)) + "\n"
        for w in sorted(group):
            text += {"X": f"H {w}\n", "Y": f"DAGGER S {w}\nH {w}\n"}.get(group[w], "")
        text += "".join(f"MEASURE {q} ro[{q}]\n" for q in range(n))
        return _Slotted(tuple(gaps) + (text,), tuple(slots))

    def translate(self, group: dict[int, str], values: np.ndarray) -> str:
        """The SDK's translation of the group's circuit with these slot values (hqflow's own for Quil)."""
        kind = self.format.kind
        if kind == "quil":
            return self._quil(group).fill(values)
        qc = self._qiskit(group, values)
        try:
            if kind == "ionq":
                from azure.quantum.qiskit.backends._qiskit_ionq import qiskit_circ_to_ionq_circ

                circ, _, _ = qiskit_circ_to_ionq_circ(qc, gateset="qis")
                return json.dumps({"gateset": "qis", "qubits": qc.num_qubits, "circuit": circ})
            if kind == "qasm":
                from qiskit import qasm2

                return qasm2.dumps(qc)
            from qdk import TargetProfile
            from qdk.qiskit import QSharpBackend

            backend = QSharpBackend(target_profile=TargetProfile.Base, skip_transpilation=True,
                                    qiskit_pass_options={"supports_barrier": False})
            return backend.qir(qc)
        except ImportError as exc:
            raise BackendAccessError(f'Azure Quantum needs the azure extra: pip install "hqflow[azure]" ({exc})') from None
        except Exception as exc:  # a gate the target's translator rejects
            raise BackendError(f"cannot translate circuit {self.template.name!r} to "
                               f"{self.format.input_data_format}: {exc}") from None

    def _prepare(self) -> list[_Slotted] | None:
        if self.format.kind == "quil":  # written here: its slots are known, nothing to verify
            return [self._quil(g) for g in self.groups]
        n = len(self.slot_angles)
        first, second = _sentinels(n, 0.0), _sentinels(n, 0.37)
        modulo = self.format.kind == "qir"
        out = []
        for g in self.groups:
            slotted = _cut(self.translate(g, first), first, modulo)
            if slotted is None or _canon(slotted.fill(second), modulo) != _canon(self.translate(g, second), modulo):
                return None  # the translator does more than print angles: translate per row
            out.append(slotted)
        return out

    # per row ---------------------------------------------------------------------------
    def values(self, batch: CircuitBatch, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Slot values ``[rows, n_slots]`` of rows ``lo:hi``: every parametrized angle of the lowered circuit."""
        x, w = batch.inputs[lo:hi], batch.weights_per_row()[lo:hi]
        cols = [a.scale * (x if a.kind == "input" else w)[:, a.index] + a.offset for a in self.slot_angles]
        return np.stack(cols, axis=1) if cols else np.zeros((x.shape[0], 0))

    def bindings(self, batch: CircuitBatch, lo: int, hi: int) -> tuple[list[bytes], dict]:
        """Quil only: one program per group (the same for every row) and the substitutions of rows ``lo:hi``,
        ``{"theta": [[slot values] per row]}`` (a program without slots declares one, set to 0)."""
        if self.format.kind != "quil":
            raise BackendError(f"{self.format.input_data_format} takes no parameter bindings; only Quil does")
        vals = self.values(batch, lo, hi)
        if vals.shape[1] == 0:
            vals = np.zeros((vals.shape[0], 1))
        texts = [s.refer(QUIL_MEMORY).encode() for s in self._slotted]
        return texts, {QUIL_MEMORY: vals.tolist()}

    def rows(self, batch: CircuitBatch) -> list[list[bytes]]:
        vals = self.values(batch)
        if self._slotted is None:
            return [[self.translate(g, v).encode() for g in self.groups] for v in vals]
        return [[s.fill(v).encode() for s in self._slotted] for v in vals]

    @property
    def per_row(self) -> bool:
        """True when every row is translated on its own (the fast path did not verify)."""
        return self._slotted is None


def qiskit_circuit(template: CircuitTemplate, ops: list[Op], group: dict[int, str], values: np.ndarray):
    """The Qiskit circuit of lowered ``ops`` with slot ``values``, the group's basis rotations, and a
    measurement of every qubit: what the SDK translates, and what prices count."""
    from qiskit import QuantumCircuit

    n = template.n_qubits
    qc = QuantumCircuit(n, n, name=template.name)
    slot = 0
    for op in ops:
        angles = []
        for a in op.angles:
            if a.kind == "const":
                angles.append(a.offset)
            else:
                angles.append(float(values[slot]))
                slot += 1
        getattr(qc, op.name)(*angles, *op.wires)
    for w in sorted(group):
        if group[w] == "X":
            qc.h(w)
        elif group[w] == "Y":
            qc.sdg(w)
            qc.h(w)
    qc.measure(range(n), range(n))
    return qc


def _canon(text: str, modulo: bool = False) -> str:
    """Text with numbers rounded, so a filled slot and the SDK's own print compare equal."""
    def sub(m: re.Match) -> str:
        v = float(m.group())
        if modulo:
            v = (v + math.pi) % (2 * math.pi) - math.pi
        return f"{v:.9f}"

    return _NUMBER.sub(sub, text)
