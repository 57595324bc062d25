"""The loopback service's quantum part: read a job's input in a provider's format, run it on
hqflow's reference simulator, and write the provider's output format.

* ``ionq.circuit.v1`` (IonQ's JSON, ``qis`` gateset) -> ``ionq.quantum-results.v1``:
  ``{"histogram": {"<int>": p}}``, bit ``i`` of the integer (least significant first) is
  qubit ``i``; exact probabilities on ``ionq.simulator`` (IonQ's ideal simulator "doesn't sample the
  probability distribution", Azure's IonQ page), frequencies of ``shots`` samples on ``ionq.qpu.*`` and on the
  simulator under a noise model (``inputParams.noise``: ``{"model": "aria-1", "seed": s}``, the seed drawing the
  shots where given). The input parameters IonQ takes are checked: ``noise`` (a model of the target table's
  ``noise_models``, a seed in 1..2**31) and ``error-mitigation`` (``{"debias": true|false}``).
* ``honeywell.openqasm.v1`` (OpenQASM 2) -> ``honeywell.quantum-results.v1``:
  ``{register: ["0110", ...]}``, one string per shot, classical bit 0 rightmost; all
  zeros on the syntax checker (``*sc``).
* ``qir.v1`` (QIR text or bitcode, base profile) -> ``microsoft.quantum-results.v2``: each
  shot the recorded output (all zeros on the syntax checker) (a result is 0 or 1, an array a list, a tuple
  ``{"Item1": ..}``), and a histogram whose ``Display`` is the Python literal
  (``"[1, 0]"``, ``"([1], [0, 1])"``). A job takes one item (``inputParams.items``), as
  azure-quantum sends it for every QPU target.
* ``rigetti.quil.v1`` (the Quil hqflow writes: ``DECLARE``, standard gates, ``DAGGER``,
  ``MEASURE q ro[i]``) -> ``rigetti.quil-results.v1``: ``{"ro": [[bit per ro index] per shot]}``;
  with ``inputParams.substitutions`` the program runs once per parameter set, ``shots`` each,
  set after set (azure-quantum's ``rigetti.InputParams``).

Gates run through ``hqflow.backends.reference`` with wire 0 the most significant bit.
Measurements must come last on each qubit (no mid-circuit measurement or reset).

Noise: a job under a noise model (IonQ's simulator with ``noise``) samples the exact noisy distribution that
hqflow's ``density`` backend gives for that target's local noise model (``get_backend("density",
noise="ionq.qpu.aria-1")``); where that backend is not installed, or has no model for the target, such a job fails,
saying so. QPU targets (``*.qpu.*``) emulate their device: they sample under the target's own local noise model
where the ``density`` backend has one, and the ideal distribution otherwise.
"""
from __future__ import annotations

import json
import math
import re
import struct
import threading

import numpy as np

from hqflow.backends.reference import apply_matrix, initial_state, probabilities
from hqflow.ir.circuit import Angle, CircuitTemplate, Op
from hqflow.ir.gates import GATES, PAULIS, gate_matrix

MAX_QUBITS = 20
MAX_SHOTS = 1_000_000


class BadInput(ValueError):
    """The job's input cannot be run (the job fails with this message)."""


class Program:
    """Gates as ``(matrix, wires)`` steps, then measurements; checks wires as it goes."""

    def __init__(self, n_qubits: int):
        if not isinstance(n_qubits, int) or not 1 <= n_qubits <= MAX_QUBITS:
            raise BadInput(f"the circuit must use 1 to {MAX_QUBITS} qubits, got {n_qubits!r}")
        self.n, self.steps, self.measured = n_qubits, [], {}  # measured: qubit -> its result id or clbit
        self.ops: list[Op] | None = []  # the steps as hqflow gates (for a noise model); None once one is not

    def _wires(self, wires, what: str) -> tuple[int, ...]:
        if not all(isinstance(w, int) and not isinstance(w, bool) and 0 <= w < self.n for w in wires):
            raise BadInput(f"{what}: qubits {list(wires)} are not all in 0..{self.n - 1}")
        if len(set(wires)) != len(wires):
            raise BadInput(f"{what}: a qubit appears twice in {list(wires)}")
        late = [w for w in wires if w in self.measured]
        if late:
            raise BadInput(f"{what}: acts on qubit {late[0]} after it was measured (mid-circuit "
                           "measurement is not supported)")
        return tuple(wires)

    def gate(self, name: str, wires, angles=(), controls=(), what: str = "") -> None:
        """hqflow gate ``name`` on ``wires``, controlled by ``controls`` when given."""
        spec = GATES[name]
        if len(angles) != spec.num_params:
            raise BadInput(f"{what or name}: takes {spec.num_params} angle(s), got {len(angles)}")
        m = gate_matrix(name, np.array([angles], dtype=float))
        base = name if not controls else _CONTROLLED.get((name, len(controls)))
        op = base and Op(base, tuple(controls) + tuple(wires), tuple(Angle.const(float(a)) for a in angles))
        self.matrix(m, tuple(controls) + tuple(wires), len(controls), what or name, op)

    def matrix(self, m: np.ndarray, wires, n_controls: int = 0, what: str = "gate", op: Op | None = None) -> None:
        wires = self._wires(tuple(wires), what)
        if op is None or self.ops is None:
            self.ops = None
        else:
            self.ops.append(op)
        if n_controls:  # |1..1><1..1| (x) U + the rest identity
            d, u = 2 ** len(wires), m.reshape(m.shape[-2:])
            m = np.eye(d, dtype=complex)
            m[d - u.shape[0]:, d - u.shape[0]:] = u
        self.steps.append((m.reshape((1,) + m.shape[-2:]), wires))

    def measure(self, qubit: int, slot, what: str = "measure") -> None:
        self._wires((qubit,), what)
        self.measured[qubit] = slot

    def probabilities(self, noise: str | None = None) -> np.ndarray:
        """The exact distribution (wire 0 most significant), under ``noise`` (a target's local noise model) if
        given: ``BadInput`` where no such model is at hand."""
        if noise is not None:
            return _noisy(self, noise)
        state = initial_state(1, self.n)
        for m, wires in self.steps:
            state = apply_matrix(state, m, wires)
        return probabilities(state)[0]


# a controlled gate as hqflow names it: (gate, number of controls) -> the gate with its controls first
_CONTROLLED = {("x", 1): "cx", ("y", 1): "cy", ("z", 1): "cz", ("rx", 1): "crx", ("ry", 1): "cry", ("rz", 1): "crz",
               ("p", 1): "cp", ("swap", 1): "cswap", ("x", 2): "ccx"}
_DENSITY: dict = {}  # noise model -> hqflow's density backend under it, or the BadInput saying why there is none
_DENSITY_LOCK = threading.Lock()


def density(noise: str):
    """hqflow's ``density`` backend under the local noise model of target ``noise`` (made once); ``BadInput`` where
    that backend is not installed or has no model for the target."""
    from hqflow.backends import BackendError, is_registered, make_backend

    with _DENSITY_LOCK:
        if noise not in _DENSITY:
            if not is_registered("density"):
                _DENSITY[noise] = BadInput(f"this service has no noise model for {noise}: hqflow's density backend "
                                           "is not installed")
            else:
                try:
                    _DENSITY[noise] = make_backend(("density", {"noise": noise}))
                except (BackendError, TypeError, ValueError) as exc:
                    _DENSITY[noise] = BadInput(f"this service has no noise model for {noise}: {exc}")
        got = _DENSITY[noise]
    if isinstance(got, BadInput):
        raise got
    return got


def _noisy(prog: Program, noise: str) -> np.ndarray:
    """The program's exact distribution under target ``noise``'s local noise model (hqflow's ``density`` backend)."""
    from hqflow.backends import CircuitBatch

    backend = density(noise)
    if prog.ops is None:
        raise BadInput(f"a gate of this circuit has no hqflow equivalent, so the noise model of {noise} cannot run it")
    batch = CircuitBatch.make(CircuitTemplate(prog.n, tuple(prog.ops), name="loopback"), np.zeros((1, 0)))
    return np.asarray(backend.submit(batch).result().probs[0], dtype=float)


def device_noise(target: str, prog: Program) -> str | None:
    """The noise model a QPU target's job runs under here: its own, where hqflow's density backend has one and the
    program is made of hqflow's gates (else the ideal distribution, as before the noise models)."""
    if ".qpu." not in target or prog.ops is None:
        return None
    try:
        density(target)
    except BadInput:
        return None
    return target


def _sample(prog: Program, target: str, shots: int, rng: np.random.Generator) -> np.ndarray:
    """``[shots, n]`` measured bits, column ``w`` for wire ``w``; zeros on a syntax checker (``*sc``)."""
    if target.endswith("sc"):
        return np.zeros((shots, prog.n), dtype=int)
    probs = prog.probabilities(device_noise(target, prog))
    idx = rng.choice(len(probs), size=shots, p=probs / probs.sum())
    return (idx[:, None] >> (prog.n - 1 - np.arange(prog.n))[None, :]) & 1


# --- IonQ ----------------------------------------------------------------------------------

_IONQ_FIXED = {"x": "x", "not": "x", "cnot": "x", "y": "y", "z": "z", "h": "h", "s": "s", "si": "sdg",
               "t": "t", "ti": "tdg", "v": "sx", "vi": "sxdg", "swap": "swap"}
_IONQ_ROT = {"rx": "rx", "ry": "ry", "rz": "rz", "xx": "rxx", "yy": "ryy", "zz": "rzz"}


def _pauliexp(g: dict, n_targets: int, what: str) -> np.ndarray:
    """exp(-i t sum_k c_k P_k); a term's last letter acts on the first target (Qiskit's labels)."""
    try:
        terms, coeffs, t = g["terms"], [float(c) for c in g["coefficients"]], float(g["time"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInput(f"{what}: pauliexp needs terms, coefficients and time ({exc})") from None
    if len(terms) != len(coeffs) or any(len(p) != n_targets or set(p) - set("IXYZ") for p in terms):
        raise BadInput(f"{what}: pauliexp terms {terms} do not match {n_targets} targets and the coefficients")
    h = 0
    for label, c in zip(terms, coeffs):
        term = np.ones((1, 1), dtype=complex)
        for ch in reversed(label):
            term = np.kron(term, PAULIS[ch])
        h = h + c * term
    vals, vecs = np.linalg.eigh(h)
    return (vecs * np.exp(-1j * t * vals)) @ vecs.conj().T


def parse_ionq(data: bytes) -> Program:
    try:
        doc = json.loads(data)
        n, gates = doc["qubits"], doc["circuit"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"not an ionq.circuit.v1 document: {type(exc).__name__}: {exc}") from None
    if doc.get("gateset", "qis") != "qis":
        raise BadInput(f"gateset {doc.get('gateset')!r} is not supported here; use 'qis'")
    prog = Program(n)
    for k, g in enumerate(gates):
        if not isinstance(g, dict):
            raise BadInput(f"gate {k}: not a JSON object: {g!r}")
        name = g.get("gate")
        what = f"gate {k} ({name})"
        targets = g.get("targets", [g["target"]] if "target" in g else [])
        controls = g.get("controls", [g["control"]] if "control" in g else [])
        if name == "pauliexp":
            prog.matrix(_pauliexp(g, len(targets), what), list(controls) + list(targets), len(controls), what)
        elif name in _IONQ_ROT:
            if "rotation" not in g:
                raise BadInput(f"{what}: needs a 'rotation'")
            base = _IONQ_ROT[name]
            per = [targets] if GATES[base].num_wires == 2 else [[t] for t in targets]
            for ts in per:
                prog.gate(base, ts, [float(g["rotation"])], controls, what)
        elif name in _IONQ_FIXED:
            if "rotation" in g:
                raise BadInput(f"{what}: {name!r} takes no rotation (a phase gate is 'rz')")
            base = _IONQ_FIXED[name]
            per = [targets] if base == "swap" else [[t] for t in targets]
            for ts in per:
                prog.gate(base, ts, (), controls, what)
        else:
            raise BadInput(f"{what}: {name!r} is not a gate of IonQ's qis gateset")
    return prog


def ionq_options(target: str, params: dict | None) -> tuple[str | None, int | None]:
    """``(noise model, seed)`` of an IonQ job's input parameters, checked as IonQ's provider page documents them:
    ``noise`` ``{"model": one of the table's noise_models, "seed": 1..2**31}`` (the model as a target name, None for
    ideal; it applies to the simulator only) and ``error-mitigation`` ``{"debias": true|false}``."""
    from .cost import price_entry

    params = params or {}
    mitigation = params.get("error-mitigation")
    if mitigation is not None and (not isinstance(mitigation, dict) or set(mitigation) != {"debias"}
                                   or not isinstance(mitigation["debias"], bool)):
        raise BadInput(f"error-mitigation must be {{\"debias\": true|false}}, got {json.dumps(mitigation)[:80]}")
    noise = params.get("noise")
    if noise is None or not target.startswith("ionq.simulator"):  # "does not apply to qpu.* targets" (IonQ)
        return None, None
    models = (price_entry("ionq.simulator") or {}).get("noise_models", ["ideal"])
    if not isinstance(noise, dict) or set(noise) - {"model", "seed"} or noise.get("model") not in models:
        raise BadInput(f"noise must be {{\"model\": one of {', '.join(models)}, \"seed\": 1..2**31}}, got "
                       f"{json.dumps(noise)[:80]}")
    seed = noise.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 1 <= seed <= 2**31):
        raise BadInput(f"noise.seed must be an integer from 1 to 2**31, got {json.dumps(seed)[:40]}")
    return (None if noise["model"] == "ideal" else f"ionq.qpu.{noise['model']}"), seed


def run_ionq(data: bytes, target: str, shots: int, rng: np.random.Generator, params: dict | None = None) -> dict:
    noise, seed = ionq_options(target, params)
    prog = parse_ionq(data)
    n = prog.n
    if target.startswith("ionq.simulator") and noise is None:  # the ideal simulator: exact, never sampled
        probs = prog.probabilities()
        index = np.flatnonzero(probs > 1e-12)
        values = probs[index] / probs[index].sum()
    else:  # a QPU, or the simulator under a noise model: shots drawn (from the job's seed where it gives one)
        probs = prog.probabilities(noise or device_noise(target, prog))
        if seed is not None:
            rng = np.random.default_rng(seed)
        drawn = rng.multinomial(shots, probs / probs.sum())
        index = np.flatnonzero(drawn)
        values = drawn[index] / shots
    # our index has wire 0 as the most significant bit; IonQ's integer has qubit i at bit i
    bits = (index[:, None] >> (n - 1 - np.arange(n))[None, :]) & 1
    keys = bits @ (1 << np.arange(n))
    return {"histogram": {str(int(k)): float(v) for k, v in zip(keys, values)}}


# --- OpenQASM 2 ----------------------------------------------------------------------------

def parse_qasm(data: bytes):
    """``(program, circuit)``: the Qiskit circuit keeps the classical registers."""
    from qiskit import qasm2
    from qiskit.quantum_info import Operator

    try:
        qc = qasm2.loads(data.decode(), custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    except Exception as exc:
        raise BadInput(f"not OpenQASM 2: {str(exc).strip().splitlines()[0]}") from None
    prog = Program(qc.num_qubits)
    for k, inst in enumerate(qc.data):
        op, what = inst.operation, f"instruction {k} ({inst.operation.name})"
        qubits = [qc.find_bit(q).index for q in inst.qubits]
        if op.name == "barrier":
            continue
        if op.name == "measure":
            prog.measure(qubits[0], qc.find_bit(inst.clbits[0]).index, what)
        elif op.name == "reset" and not any(qubits[0] in w for _, w in prog.steps):
            continue  # a reset of a fresh qubit does nothing
        elif getattr(op, "condition", None) is not None or inst.clbits or op.name == "reset":
            raise BadInput(f"{what}: classical control and mid-circuit resets are not supported")
        elif op.name in GATES and GATES[op.name].num_params == len(op.params):
            prog.gate(op.name, qubits, [float(p) for p in op.params], what=what)
        else:  # any other gate by its matrix; Qiskit's first qubit is the least significant
            try:
                m = Operator(op).data
            except Exception as exc:
                raise BadInput(f"{what}: cannot run it ({exc})") from None
            prog.matrix(m, qubits[::-1], what=what)
    return prog, qc


def run_qasm(data: bytes, target: str, shots: int, rng: np.random.Generator, params: dict | None = None) -> dict:
    prog, qc = parse_qasm(data)
    bits = _sample(prog, target, shots, rng)
    clbits = np.zeros((shots, qc.num_clbits), dtype=int)
    for qubit, clbit in prog.measured.items():
        clbits[:, clbit] = bits[:, qubit]
    out = {}
    for creg in qc.cregs:
        cols = [qc.find_bit(b).index for b in creg][::-1]  # bit 0 rightmost
        out[creg.name] = ["".join(map(str, row)) for row in clbits[:, cols].tolist()]
    return out


# --- QIR -----------------------------------------------------------------------------------

_QIR_GATES = {"h": "h", "x": "x", "y": "y", "z": "z", "s": "s", "t": "t", "sx": "sx", "rx": "rx", "ry": "ry",
              "rz": "rz", "cx": "cx", "cnot": "cx", "cy": "cy", "cz": "cz", "swap": "swap", "ccx": "ccx",
              "rxx": "rxx", "ryy": "ryy", "rzz": "rzz"}
_QIR_ADJ = {"s": "sdg", "t": "tdg", "sx": "sxdg"}
_CALL = re.compile(r"call \w+ @__quantum__(qis|rt)__(\w+)\((.*)\)")


def _args(text: str) -> list:
    """A call's arguments: floats (doubles), ints (pointers as ids, i64), None (labels, other)."""
    out, depth, cur = [], 0, ""
    for ch in text + ",":
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    values = []
    for a in out:
        if a.startswith("double "):
            v = a.split()[1]
            values.append(struct.unpack(">d", bytes.fromhex(v[2:].rjust(16, "0")))[0] if v.lower().startswith("0x")
                          else float(v))
        elif (m := re.search(r"inttoptr \(i64 (\d+) to", a)) or (m := re.fullmatch(r"i64 (-?\d+)", a)):
            values.append(int(m.group(1)))
        elif re.fullmatch(r"(%Qubit\*|%Result\*|ptr) null", a):
            values.append(0)
        else:
            values.append(None)
    return values


def _qir_text(data: bytes) -> str:
    if data[:4] in (b"BC\xc0\xde", b"\xde\xc0\x17\x0b"):
        try:
            import pyqir

            return str(pyqir.Module.from_bitcode(pyqir.Context(), data))
        except Exception as exc:
            raise BadInput(f"cannot read the QIR bitcode: {exc}") from None
    text = data.decode(errors="replace")
    if "__quantum__" not in text:
        raise BadInput("not QIR: no __quantum__ calls")
    return text


def parse_qir(data: bytes) -> tuple[Program, list]:
    """``(program, records)``: records are ``("tuple"|"array", n)`` and ``("result", id)`` in order."""
    text = _qir_text(data)
    if re.search(r"\bbr i1\b|__quantum__qis__read_result|__quantum__rt__(bool|int|double)_record", text):
        raise BadInput("adaptive QIR (branches, classical values) is not supported here; use the base profile")
    ops, records = [], []
    for k, m in enumerate(_CALL.finditer(text)):
        space, fn, args = m.group(1), m.group(2), _args(m.group(3))
        what = f"call {k} (__quantum__{space}__{fn})"
        if space == "rt":
            kind = fn.removesuffix("_record_output")
            if kind in ("tuple", "array", "result"):
                records.append((kind, args[0]))
            continue
        name, _, variant = fn.rpartition("__")
        ints = [a for a in args if isinstance(a, int)]
        if name in ("m", "mz", "mresetz"):
            ops.append(("measure", ints[:1], ints[1:2], what))
        elif name in ("reset", "barrier"):
            ops.append((name, ints, [], what))
        elif variant == "adj" and name in _QIR_ADJ:
            ops.append((_QIR_ADJ[name], ints, [a for a in args if isinstance(a, float)], what))
        elif variant == "body" and name in _QIR_GATES:
            ops.append((_QIR_GATES[name], ints, [a for a in args if isinstance(a, float)], what))
        else:
            raise BadInput(f"{what}: not supported here")
    prog = Program(max([q + 1 for _, qubits, _, _ in ops for q in qubits], default=0))
    for name, qubits, extra, what in ops:
        if name == "measure":
            prog.measure(qubits[0], extra[0], what)
        elif name == "reset" and any(qubits[0] in w for _, w in prog.steps):
            raise BadInput(f"{what}: a reset after gates (mid-circuit) is not supported")
        elif name not in ("reset", "barrier"):
            prog.gate(name, qubits, extra, what=what)
    return prog, records


def _outcome(records: list, measured: dict):
    """Each shot's outcome builder: the record tree as ``(json_fn, display_fn)`` of a bit lookup."""
    results = {r: q for q, r in measured.items()}
    pos = 0

    def take():
        nonlocal pos
        if pos >= len(records):
            raise BadInput("the output records end inside a tuple or array")
        kind, arg = records[pos]
        pos += 1
        if kind == "result":
            if arg not in results:
                raise BadInput(f"result {arg} is recorded but never measured")
            return ("r", results[arg])
        return (kind, [take() for _ in range(arg)])

    items = []
    while pos < len(records):
        items.append(take())
    if not items:  # nothing recorded: every measured result, in result order
        items = [("r", results[r]) for r in sorted(results)]
    return items[0] if len(items) == 1 else ("array", items)


def _shot(tree, bits) -> tuple:
    """``(json value, display)`` of one shot."""
    kind, body = tree
    if kind == "r":
        b = int(bits[body])
        return b, str(b)
    parts = [_shot(t, bits) for t in body]
    if kind == "array":
        return [p[0] for p in parts], "[" + ", ".join(p[1] for p in parts) + "]"
    inner = ", ".join(p[1] for p in parts) + ("," if len(parts) == 1 else "")
    return {f"Item{i + 1}": p[0] for i, p in enumerate(parts)}, f"({inner})"


def run_qir(data: bytes, target: str, shots: int, rng: np.random.Generator, params: dict | None = None) -> dict:
    items = (params or {}).get("items")
    if items is not None and (not isinstance(items, list) or len(items) > 1):
        raise BadInput(f"this target takes one item per job; got {len(items) if isinstance(items, list) else items!r}")
    prog, records = parse_qir(data)
    if not prog.measured:
        raise BadInput("the QIR program measures nothing")
    tree = _outcome(records, prog.measured)
    bits = _sample(prog, target, shots, rng)
    rows, counts = [], {}
    for row in bits:
        value, display = _shot(tree, row)
        rows.append(value)
        entry = counts.setdefault(display, {"Outcome": value, "Display": display, "Count": 0})
        entry["Count"] += 1
    return {"DataFormat": "microsoft.quantum-results.v2",
            "Results": [{"Histogram": list(counts.values()), "Shots": rows}]}


# --- Quil ----------------------------------------------------------------------------------

_QUIL_GATES = {"I": "id", "H": "h", "X": "x", "Y": "y", "Z": "z", "S": "s", "T": "t", "RX": "rx", "RY": "ry",
               "RZ": "rz", "PHASE": "p", "CZ": "cz", "CNOT": "cx", "SWAP": "swap", "CCNOT": "ccx", "CPHASE": "cp",
               "CSWAP": "cswap"}
_QUIL_DAGGER = {"S": ("sdg", 1), "T": ("tdg", 1), "RX": ("rx", -1), "RY": ("ry", -1), "RZ": ("rz", -1),
                "PHASE": ("p", -1)}
_DECLARE = re.compile(r"DECLARE\s+(\w+)\s+(BIT|REAL)(?:\[(\d+)\])?")
_GATE = re.compile(r"(DAGGER\s+)?([A-Z]+)(?:\((.*)\))?((?:\s+\d+)+)")
_MEASURE = re.compile(r"MEASURE\s+(\d+)\s+(\w+)\[(\d+)\]")
_ATOM = re.compile(r"(-)?\s*(pi|[0-9.]+(?:[eE][-+]?\d+)?|\w+\[\d+\])(?:\s*([*/])\s*(pi|[0-9.]+(?:[eE][-+]?\d+)?))?")


def parse_quil(data: bytes) -> tuple[dict, list, list]:
    """``(memory, gates, measures)``: ``{name: (BIT|REAL, size)}``, ``(hqflow gate, wires, [arg text], line)``
    and ``(qubit, ro index)``. What hqflow writes, plus literals and ``pi``; anything else is ``BadInput``."""
    memory, gates, measures = {}, [], []
    for k, line in enumerate(data.decode(errors="replace").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        if m := _DECLARE.fullmatch(text):
            memory[m.group(1)] = (m.group(2), int(m.group(3) or 1))
        elif m := _MEASURE.fullmatch(text):
            if m.group(2) != "ro" or memory.get("ro", ("", 0))[0] != "BIT" or int(m.group(3)) >= memory["ro"][1]:
                raise BadInput(f"line {k} ({text!r}): {m.group(2)}[{m.group(3)}] is not in the declared BIT "
                               "register ro (the one this service returns)")
            measures.append((int(m.group(1)), int(m.group(3))))
        elif (m := _GATE.fullmatch(text)) and (m.group(2) in (_QUIL_DAGGER if m.group(1) else _QUIL_GATES)):
            name, sign = _QUIL_DAGGER[m.group(2)] if m.group(1) else (_QUIL_GATES[m.group(2)], 1)
            args = [a.strip() for a in m.group(3).split(",")] if m.group(3) else []
            if sign < 0:
                args = [f"-({a})" for a in args]
            gates.append((name, [int(q) for q in m.group(4).split()], args, f"line {k} ({text!r})"))
        else:
            raise BadInput(f"line {k} ({text!r}): not Quil that this service runs")
    return memory, gates, measures


def _quil_value(arg: str, sets: dict, what: str) -> float:
    """One gate argument: ``[-]atom[(*|/)number]``, an atom a number, ``pi`` or ``name[i]``; ``-(...)`` negates."""
    sign = 1.0
    while arg.startswith("-(") and arg.endswith(")"):
        sign, arg = -sign, arg[2:-1].strip()
    m = _ATOM.fullmatch(arg)
    if m is None:
        raise BadInput(f"{what}: cannot read the argument {arg!r}")

    def atom(text: str) -> float:
        if text == "pi":
            return float(np.pi)
        if "[" in text:
            name, index = text[:-1].split("[")
            if name not in sets or int(index) >= len(sets[name]):
                raise BadInput(f"{what}: {text} has no value (declare it REAL and give it substitutions)")
            return float(sets[name][int(index)])
        return float(text)

    v = atom(m.group(2))
    if m.group(3):
        v = v * atom(m.group(4)) if m.group(3) == "*" else v / atom(m.group(4))
    return sign * (-v if m.group(1) else v)


def _substitution_sets(memory: dict, params: dict) -> list[dict]:
    """The parameter sets of ``inputParams.substitutions`` (one empty set without them), each checked."""
    subs = params.get("substitutions")
    if not subs:
        return [{}]
    if not isinstance(subs, dict):
        raise BadInput(f"substitutions must map memory names to lists of value lists, got {type(subs).__name__}")
    lengths = {name: len(v) if isinstance(v, list) else -1 for name, v in subs.items()}
    if len(set(lengths.values())) != 1 or -1 in lengths.values() or 0 in lengths.values():
        raise BadInput(f"substitutions must give every region the same number of sets; got {lengths}")
    for name, values in subs.items():
        kind, size = memory.get(name, (None, 0))
        if kind != "REAL":
            raise BadInput(f"substitutions name {name!r}, which the program does not declare REAL")
        for i, row in enumerate(values):
            if not isinstance(row, list) or len(row) != size or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in row):
                raise BadInput(f"substitution set {i} of {name!r} must be {size} finite numbers ({name} is "
                               f"REAL[{size}]); got {str(row)[:80]}")
    return [{name: values[i] for name, values in subs.items()} for i in range(next(iter(lengths.values())))]


def run_quil(data: bytes, target: str, shots: int, rng: np.random.Generator, params: dict | None = None) -> dict:
    memory, gates, measures = parse_quil(data)
    if not measures:
        raise BadInput("the Quil program measures nothing")
    width = memory["ro"][1]
    n = max([q + 1 for _, wires, _, _ in gates for q in wires] + [q + 1 for q, _ in measures])
    readout = []
    for values in _substitution_sets(memory, params or {}):
        prog = Program(n)
        for name, wires, args, what in gates:
            prog.gate(name, wires, [_quil_value(a, values, what) for a in args], what=what)
        for q, i in measures:
            prog.measure(q, i, f"MEASURE {q} ro[{i}]")
        bits = _sample(prog, target, shots, rng)
        ro = np.zeros((shots, width), dtype=int)
        for q, i in measures:
            ro[:, i] = bits[:, q]
        readout += ro.tolist()
    return {"ro": readout}


RUNNERS = {"ionq.circuit.v1": run_ionq, "honeywell.openqasm.v1": run_qasm, "qir.v1": run_qir,
           "rigetti.quil.v1": run_quil}


def run(input_format: str, data: bytes, target: str, shots, rng: np.random.Generator,
        params: dict | None = None) -> dict:
    """The output document of one job (``params``: the job's ``inputParams``); raises ``BadInput`` with a
    readable message."""
    if input_format not in RUNNERS:
        raise BadInput(f"input format {input_format!r} is not supported; one of {', '.join(RUNNERS)}")
    if not isinstance(shots, int) or isinstance(shots, bool) or not 1 <= shots <= MAX_SHOTS:
        raise BadInput(f"shots must be an integer in 1..{MAX_SHOTS}, got {shots!r}")
    try:
        return RUNNERS[input_format](data, target, shots, rng, params)
    except BadInput:
        raise
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise BadInput(f"malformed {input_format} input: {type(exc).__name__}: {exc}") from None
