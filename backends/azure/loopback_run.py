"""The loopback service's quantum part: read a job's input in a provider's format, run it on the
reference simulator, and write the provider's output format.

* ``ionq.circuit.v1`` (IonQ's JSON, ``qis`` gateset) -> ``ionq.quantum-results.v1``: a histogram of
  exact probabilities on simulators, of ``shots`` sampled frequencies on QPUs; the integer's
  bit ``i`` (least significant first) is qubit ``i``.
* ``honeywell.openqasm.v1`` (OpenQASM 2) -> ``honeywell.quantum-results.v1``: per classical
  register, one string per shot, classical bit 0 rightmost.
* ``qir.v1`` (QIR text, base profile) -> ``microsoft.quantum-results.v2``: each shot the recorded
  results in recording order.
"""
from __future__ import annotations

import json
import re

import numpy as np

from hqflow.backends.base import CircuitBatch
from hqflow.backends.reference import probabilities, simulate
from hqflow.ir.circuit import Angle, CircuitTemplate, Op


class BadInput(ValueError):
    """The job's input cannot be run (the job fails with this message)."""


def _probs(n: int, ops: list[Op]) -> np.ndarray:
    """Exact probabilities, wire 0 most significant."""
    t = CircuitTemplate(n, tuple(ops), name="job")
    problems = t.problems()
    if problems:
        raise BadInput("; ".join(problems))
    return probabilities(simulate(CircuitBatch.make(t, None, None)))[0]


def _sample_bits(probs: np.ndarray, n: int, shots: int, rng: np.random.Generator) -> np.ndarray:
    """``[shots, n]`` measured bits, column ``w`` for wire ``w``."""
    idx = rng.choice(len(probs), size=shots, p=probs / probs.sum())
    return (idx[:, None] >> (n - 1 - np.arange(n))[None, :]) & 1


# --- IonQ -------------------------------------------------------------------------------

_IONQ_FIXED = {"h": "h", "x": "x", "y": "y", "z": "z", "s": "s", "si": "sdg", "t": "t", "ti": "tdg",
               "v": "sx", "vi": "sxdg", "swap": "swap"}
_IONQ_ROT = {"rx": "rx", "ry": "ry", "rz": "rz", "xx": "rxx", "yy": "ryy", "zz": "rzz"}
_CONTROLLED = {("x", 1): "cx", ("y", 1): "cy", ("z", 1): "cz", ("rx", 1): "crx", ("ry", 1): "cry",
               ("rz", 1): "crz", ("swap", 1): "cswap", ("x", 2): "ccx", ("cnot", 0): "cx"}


def run_ionq(data: bytes, target: str, shots: int, rng: np.random.Generator) -> dict:
    try:
        doc = json.loads(data)
        n, gates = int(doc["qubits"]), doc["circuit"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"not an ionq.circuit.v1 document: {exc}") from None
    if doc.get("gateset", "qis") != "qis":
        raise BadInput(f"gateset {doc.get('gateset')!r} is not supported here; use 'qis'")
    ops = []
    for k, g in enumerate(gates):
        name = g.get("gate")
        targets = g.get("targets", [g["target"]] if "target" in g else [])
        controls = g.get("controls", [g["control"]] if "control" in g else [])
        base = _IONQ_FIXED.get(name) or _IONQ_ROT.get(name) or ("x" if name == "cnot" else None)
        if base is None:
            raise BadInput(f"gate {k}: {name!r} is not an IonQ qis gate")
        angles = (Angle.const(float(g["rotation"])),) if name in _IONQ_ROT else ()
        if controls:
            key = ("swap" if base == "swap" else name if name in _IONQ_ROT else base, len(controls))
            if key not in _CONTROLLED:
                raise BadInput(f"gate {k}: {name!r} with {len(controls)} controls is not supported")
            ops.append(Op(_CONTROLLED[key], tuple(controls) + tuple(targets), angles))
        else:
            ops.append(Op(base if name not in _IONQ_ROT else _IONQ_ROT[name], tuple(targets), angles))
    probs = _probs(n, ops)
    weights = 1 << (n - 1 - np.arange(n))  # our index -> bits; IonQ's integer has qubit i at bit i
    ionq_index = [int(sum(((i & int(weights[w])) > 0) << w for w in range(n))) for i in range(len(probs))]
    if target.startswith("ionq.simulator"):
        hist = {str(ionq_index[i]): float(p) for i, p in enumerate(probs) if p > 1e-12}
    else:
        drawn = rng.multinomial(shots, probs / probs.sum())
        hist = {str(ionq_index[i]): c / shots for i, c in enumerate(drawn) if c}
    return {"histogram": hist}


# --- OpenQASM 2 ---------------------------------------------------------------------------

def run_qasm(data: bytes, target: str, shots: int, rng: np.random.Generator) -> dict:
    from qiskit import qasm2

    from hqflow.ir.qiskit_io import from_qiskit

    try:
        qc = qasm2.loads(data.decode(), custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    except Exception as exc:
        raise BadInput(f"not OpenQASM 2: {str(exc).splitlines()[0]}") from None
    measures = [(qc.find_bit(i.qubits[0]).index, i.clbits[0]) for i in qc.data if i.operation.name == "measure"]
    body = qc.remove_final_measurements(inplace=False)
    try:
        t = from_qiskit(body)
    except Exception as exc:
        raise BadInput(f"cannot run this circuit: {str(exc).splitlines()[0]}") from None
    n = qc.num_qubits
    if target.endswith("sc"):  # a syntax checker: all zeros
        bits = np.zeros((shots, n), dtype=int)
    else:
        bits = _sample_bits(_probs(t.n_qubits, list(t.ops)), t.n_qubits, shots, rng)
    out = {}
    for creg in qc.cregs:
        cols = [[0] * shots for _ in range(creg.size)]
        for q, clbit in measures:
            reg_bit = qc.find_bit(clbit)
            for reg, j in reg_bit.registers:
                if reg == creg:
                    cols[j] = bits[:, q].tolist()
        out[creg.name] = ["".join(str(cols[j][s]) for j in reversed(range(creg.size))) for s in range(shots)]
    return out


# --- QIR --------------------------------------------------------------------------------

_QIR_GATES = {"h": "h", "x": "x", "y": "y", "z": "z", "s": "s", "t": "t", "rx": "rx", "ry": "ry", "rz": "rz",
              "cnot": "cx", "cx": "cx", "cy": "cy", "cz": "cz", "swap": "swap", "rxx": "rxx", "ryy": "ryy",
              "rzz": "rzz", "ccx": "ccx", "sx": "sx"}
_ADJ = {"s": "sdg", "t": "tdg", "sx": "sxdg"}


def _ids(args: str, kind: str) -> list[int]:
    found = []
    for m in re.finditer(rf"%{kind}\* (null|inttoptr \(i64 (\d+) to %{kind}\*\))", args):
        found.append(0 if m.group(1) == "null" else int(m.group(2)))
    return found


def run_qir(data: bytes, target: str, shots: int, rng: np.random.Generator) -> dict:
    text = data.decode(errors="replace")
    if "__quantum__" not in text:
        raise BadInput("not QIR text (bitcode is not read here)")
    ops, measured, recorded, n = [], {}, [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(("call", "%")) or "@__quantum__" not in line:
            continue
        m = re.search(r"@__quantum__(qis|rt)__(\w+)\((.*)\)", line)
        if m is None:
            continue
        space, fn, args = m.groups()
        if space == "rt":
            if fn == "result_record_output":
                recorded.append(_ids(args, "Result")[0])
            continue
        name, _, variant = fn.rpartition("__")
        qubits = _ids(args, "Qubit")
        n = max([n, *(q + 1 for q in qubits)])
        if name in ("m", "mz", "mresetz"):
            measured[_ids(args, "Result")[0]] = qubits[0]
            continue
        if name == "reset":
            raise BadInput("reset is not supported here")
        gate = _ADJ.get(name, name) if variant == "adj" else _QIR_GATES.get(name)
        if gate is None or gate not in _QIR_GATES.values() and gate not in _ADJ.values():
            raise BadInput(f"QIR gate __quantum__qis__{fn} is not supported here")
        angles = tuple(Angle.const(float(v)) for v in re.findall(r"double ([-+0-9.eE]+|0x[0-9A-Fa-f]+)", args)
                       if not v.startswith("0x"))
        ops.append(Op(gate, tuple(qubits), angles))
    if not n:
        raise BadInput("the QIR program uses no qubits")
    bits = _sample_bits(_probs(n, ops), n, shots, rng)
    order = recorded or sorted(measured)
    shots_out = [[int(bits[s, measured[r]]) if r in measured else 0 for r in order] for s in range(shots)]
    hist: dict = {}
    for s in shots_out:
        hist[tuple(s)] = hist.get(tuple(s), 0) + 1
    return {"DataFormat": "microsoft.quantum-results.v2",
            "Results": [{"Histogram": [{"Outcome": list(k), "Display": str(list(k)), "Count": c}
                                       for k, c in hist.items()], "Shots": shots_out}]}


RUNNERS = {"ionq.circuit.v1": run_ionq, "honeywell.openqasm.v1": run_qasm, "qir.v1": run_qir}


def run(input_format: str, data: bytes, target: str, shots: int, rng: np.random.Generator) -> dict:
    if input_format not in RUNNERS:
        raise BadInput(f"input format {input_format!r} is not supported; one of {', '.join(RUNNERS)}")
    if not isinstance(shots, int) or shots < 1:
        raise BadInput(f"shots must be a positive integer, got {shots!r}")
    return RUNNERS[input_format](data, target, shots, rng)
