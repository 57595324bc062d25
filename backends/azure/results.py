"""What Azure Quantum targets return, into counts and expectation values.

Every output becomes ``{bitstring: count}`` with wire 0 first (hqflow's order):

* IonQ ``ionq.quantum-results.v1``: ``{"histogram": {"<int>": p}}``, bit ``i`` of the
  integer (least significant first) is qubit ``i``. A simulator returns exact
  probabilities; those are sampled here, from the job's seed, into ``shots`` counts
  (a histogram of counts, summing to the shots, is taken as it is).
* Quantinuum ``honeywell.quantum-results.v1``: ``{"c": ["0110", ...]}``, one string
  per shot, classical bit 0 rightmost (OpenQASM's order).
* QIR ``microsoft.quantum-results.v2``: ``{"Results": [{"Shots": [...]}]}``, each shot
  the recorded results; Qiskit's QIR records bit ``n-1`` first (as the SDK reads
  them). Without ``Shots``, its ``Histogram`` (``Outcome``/``Display`` and ``Count``);
  the older ``microsoft.quantum-results.v1`` histogram (``["[0, 1]", p, ...]``) too.
  Shots with lost-qubit markers (``-``, ``2``) are dropped, as the SDK drops them.
* Rigetti ``rigetti.quil-results.v1``: ``{"ro": [[b0, .., bn-1] per shot]}``, bit ``ro[i]`` is qubit
  ``i``; a job with ``substitutions`` runs ``count`` shots for each parameter set, set after set
  (azure-quantum's ``rigetti.InputParams``), which ``counts_of_bindings`` cuts into one count per row.

Expectation values come from the counts of each measurement group, with the
standard error of the mean from the unbiased sample variance.
"""
from __future__ import annotations

import json

import numpy as np
from hqflow.ir.circuit import CircuitTemplate

from ..base import BackendError
from .translate import Format, group_of


class OutputError(BackendError):
    """A target's output could not be read."""


def counts_of(fmt: Format, raw: bytes | str | dict, n_qubits: int, shots: int,
              rng: np.random.Generator, sample: bool) -> dict[str, int]:
    """Counts (wire 0 first) from one job's output; ``sample``: the target returns probabilities."""
    try:
        data = json.loads(raw) if isinstance(raw, (bytes, str)) else raw
        if fmt.kind == "ionq":
            return _ionq(data["histogram"], n_qubits, shots, rng, sample)
        if fmt.kind == "qasm":
            return _per_shot([s[::-1] for s in data["c"]], n_qubits)
        if fmt.kind == "quil":
            return _quil(data, n_qubits, shots, 1)[0]
        return _qir(data, n_qubits, shots, rng, sample)
    except OutputError:
        raise
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise OutputError(f"cannot read {fmt.output_data_format} output: {type(exc).__name__}: {exc}") from None


def counts_of_bindings(raw: bytes | str | dict, n_qubits: int, shots: int, rows: int) -> list[dict[str, int]]:
    """Counts (wire 0 first) of each of ``rows`` parameter sets from one ``rigetti.quil-results.v1`` output:
    ``rows * shots`` measurement vectors, set-major. A list of another length is an ``OutputError``."""
    try:
        data = json.loads(raw) if isinstance(raw, (bytes, str)) else raw
        return _quil(data, n_qubits, shots, rows)
    except OutputError:
        raise
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise OutputError(f"cannot read rigetti.quil-results.v1 output: {type(exc).__name__}: {exc}") from None


def _quil(data: dict, n: int, shots: int, rows: int) -> list[dict[str, int]]:
    readout = data["ro"]
    if len(readout) != rows * shots:
        raise OutputError(f"the rigetti.quil-results.v1 output has {len(readout)} measurement vectors; expected "
                          f"{rows} parameter sets x {shots} shots = {rows * shots}")
    strings = ["".join(str(int(b)) for b in shot) for shot in readout]
    return [_per_shot(strings[r * shots:(r + 1) * shots], n) for r in range(rows)]


def _qir(data: dict, n: int, shots: int, rng: np.random.Generator, sample: bool) -> dict[str, int]:
    results = data["Results"][0] if "Results" in data else data
    if "Shots" in results:
        return _per_shot([_bits(shot) for shot in results["Shots"]], n)
    hist = results["Histogram"]
    if hist and isinstance(hist[0], dict):  # v2: [{"Outcome": [...], "Display": "[...]", "Count": k}]
        weights = {}
        for entry in hist:
            key = _bits(entry["Outcome"] if "Outcome" in entry else entry["Display"])
            weights[key] = weights.get(key, 0) + float(entry["Count"])
    else:  # v1: ["[0, 1]", p, "[1, 1]", q, ...]
        weights = {}
        for display, p in zip(hist[0::2], hist[1::2]):
            key = _bits(display)
            weights[key] = weights.get(key, 0) + float(p)
    kept = {k: w for k, w in weights.items() if _whole(k, n)}
    if not kept or sum(kept.values()) <= 0:
        raise OutputError("the output has no shots")
    keys, w = list(kept), np.array(list(kept.values()))
    if sample or np.any(np.abs(w - np.round(w)) > 1e-6):  # probabilities: draw the shots that were not lost
        kept_shots = int(round(shots * w.sum() / sum(weights.values())))
        w = rng.multinomial(kept_shots, w / w.sum()) if kept_shots else np.zeros(len(w), int)
    return {k: int(round(c)) for k, c in zip(keys, w) if c}


def _bits(shot) -> str:
    """One recorded shot as a bit string, wire 0 first ("-" where a qubit was lost)."""
    return "".join(_flat(shot))[::-1]


def _whole(bits: str, n: int) -> bool:
    """A shot with every qubit present; a shot of the wrong length is an error, not a loss."""
    if len(bits) != n:
        raise OutputError(f"a shot reads {bits[::-1]!r}; expected {n} bits")
    return set(bits) <= {"0", "1"}


def _flat(shot) -> list[str]:
    if isinstance(shot, dict) and "Item1" in shot:  # a tuple of registers, as .NET writes it
        return [b for k in sorted(shot) for b in _flat(shot[k])]
    if isinstance(shot, (list, tuple)):
        return [b for item in shot for b in _flat(item)]
    if isinstance(shot, str):  # "[0, 1]" displays, "01" strings, "-" lost-qubit markers
        return ["0" if c == "0" else "1" if c == "1" else "-" for c in shot if c in "012-"]
    if isinstance(shot, bool) or shot in (0, 1):
        return [str(int(shot))]
    return ["-"]  # a lost qubit (2) or another marker


def _ionq(histogram: dict, n: int, shots: int, rng: np.random.Generator, sample: bool) -> dict[str, int]:
    keys = [int(k) for k in histogram]
    probs = np.array([float(histogram[k]) for k in histogram])
    if np.any(probs < -1e-9) or not np.all(np.isfinite(probs)):
        raise OutputError("IonQ histogram has negative or non-finite entries")
    is_counts = probs.sum() > 1 + 1e-6 and np.all(np.abs(probs - np.round(probs)) < 1e-9)
    if is_counts:  # counts rather than probabilities (summing to the shots)
        drawn = np.round(probs).astype(int)
    elif abs(probs.sum() - 1.0) > 1e-6:
        raise OutputError(f"IonQ histogram does not sum to 1 (sums to {probs.sum():.6g})")
    else:
        probs = np.clip(probs, 0.0, None)
        scaled = probs * shots
        if sample or np.any(np.abs(scaled - np.round(scaled)) > 1e-6):  # probabilities, not frequencies
            drawn = rng.multinomial(shots, probs / probs.sum())
        else:
            drawn = np.round(scaled).astype(int)
    out = {}
    for k, c in zip(keys, drawn):
        if c:
            bits = "".join(str((k >> i) & 1) for i in range(n))
            out[bits] = out.get(bits, 0) + int(c)
    return out


def _per_shot(strings: list[str], n: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in strings:
        if _whole(s, n):
            out[s] = out.get(s, 0) + 1
    if not out:
        raise OutputError("the output has no shots" + (" with every qubit present" if strings else ""))
    return out


def estimate(template: CircuitTemplate, groups: list[dict[int, str]],
             counts: list[dict[str, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Each observable's mean and standard error from the counts of each group (wire 0 first)."""
    tables = []
    for c in counts:
        bits = np.array([[ch == "1" for ch in k] for k in c], dtype=float).reshape(len(c), template.n_qubits)
        tables.append((1.0 - 2.0 * bits, np.array(list(c.values()), dtype=float)))
    vals, errs = [], []
    for obs in template.observables:
        mean, var = 0.0, 0.0
        per_group: dict[int, np.ndarray] = {}
        for term in obs.terms:
            if not term.paulis:
                mean += term.coeff
                continue
            g = group_of(groups, term.paulis)
            signs, _ = tables[g]
            f = np.full(signs.shape[0], term.coeff)
            for w, _ in term.paulis:
                f = f * signs[:, w]
            per_group[g] = per_group.get(g, 0.0) + f
        for g, f in per_group.items():
            _, n = tables[g]
            total = n.sum()
            m = float((f * n).sum() / total)
            mean += m
            if total > 1:
                s2 = float(((f - m) ** 2 * n).sum() / (total - 1))
                var += max(s2, 0.0) / total
            else:
                var = float("nan")
        vals.append(mean)
        errs.append(np.sqrt(var) if var > 1e-24 or np.isnan(var) else 0.0)
    return np.array(vals), np.array(errs)
