"""Local noise models of the Azure targets, from the providers' published figures (``noise_targets.json``).

    model = noise_model("ionq.qpu.aria-1")     # NoiseModel(p1q=0.001, p2q=0.00533, p1_given_0=0.0039, ...)
    get_backend("density", noise="ionq.qpu.aria-1")        # exact, differentiable, under that noise
    get_backend("emulated-qpu", noise="ionq.qpu.aria-1")   # the emulated QPU's simulator is then "density"
    get_backend("aer", noise="ionq.qpu.aria-1")            # Aer's density matrix under the same model

**The model.** After every gate of a template, on the gate's wires, a depolarizing channel
``rho -> (1 - p) rho + p Tr_W(rho) (x) I/d`` (``d = 2**k`` on ``k`` wires, Aer's ``depolarizing_error(p, k)``);
before readout, each measured bit is flipped with ``P(1|0)`` and ``P(0|1)``. Every gate of the IR counts,
virtual Z rotations included (a device compiles some away): it is a model of the circuit as written, not of the
device's compiled circuit.

**From the figures.** A published gate fidelity is taken as the **average gate fidelity** ``F`` (randomized
benchmarking's, which is what the sources report; "infidelity" or "error" figures are ``1 - F``). The depolarizing
channel with that average fidelity has ``p = (1 - F) * d / (d - 1)``: ``2 (1 - F)`` for one qubit,
``4/3 (1 - F)`` for two. One SPAM figure (IonQ's) is a symmetric readout error ``1 - F_spam``.

**Gates on three or more wires** (``ccx``, ``cswap``). Azure bills a gate on ``N > 2`` qubits as ``6 (N - 2)``
two-qubit gates (``backends/azure/cost.py``); here it gets one ``N``-qubit depolarizing channel whose weight on
the untouched state is that of ``m = 6 (N - 2)`` two-qubit channels in a row: ``1 - p = (1 - p2q)**m``.

Targets (the price table's): a QPU with figures; an emulator that copies a QPU's noise model (``same_as``);
an ideal simulator (a model of zeros); or a target without published figures, which is a one-line
``BackendError`` ("no published noise figures for TARGET: why"), as is a name the table does not have.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache

from hqflow.ir.text import shown

from .base import BackendError

TABLE = os.path.join(os.path.dirname(__file__), "noise_targets.json")


@dataclass(frozen=True)
class NoiseModel:
    """Depolarizing probabilities per gate (``p1q`` one qubit, ``p2q`` two) and readout errors
    ``p1_given_0`` = P(read 1 | 0), ``p0_given_1`` = P(read 0 | 1); ``source`` and ``date`` say where from."""

    p1q: float = 0.0
    p2q: float = 0.0
    p1_given_0: float = 0.0
    p0_given_1: float = 0.0
    source: str = ""
    date: str = ""
    target: str = ""

    def __post_init__(self):
        for name in ("p1q", "p2q", "p1_given_0", "p0_given_1"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise BackendError(f"noise model: {name} must be a probability in [0, 1), got {shown(v)}")

    def gate(self, wires: int) -> float:
        """The depolarizing probability of a gate on ``wires`` wires (see the module docstring past two)."""
        if wires <= 2:
            return self.p1q if wires == 1 else self.p2q
        return 1.0 - (1.0 - self.p2q) ** (6 * (wires - 2))

    @property
    def ideal(self) -> bool:
        return not (self.p1q or self.p2q or self.p1_given_0 or self.p0_given_1)


def depolarizing(fidelity: float, wires: int) -> float:
    """The depolarizing probability of the channel on ``wires`` qubits with average gate fidelity ``fidelity``."""
    d = 2**wires
    return float(f"{(1.0 - fidelity) * d / (d - 1):.12g}")  # 0.001, not 0.0009999999999998899


@lru_cache(maxsize=4)
def load_table(path: str = TABLE) -> dict:
    """The noise table: ``{"version", "about", "targets": {target: entry}}``."""
    try:
        with open(path, encoding="utf-8") as fh:
            table = json.load(fh)
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot read noise table {path}: {exc}") from None
    if not isinstance(table, dict) or not isinstance(table.get("targets"), dict):
        raise BackendError(f"noise table {path} has no 'targets'")
    return table


def noise_model(target: str, path: str = TABLE) -> NoiseModel:
    """The noise model of ``target`` (an Azure target of the table; ``azure:`` may lead)."""
    targets = load_table(path)["targets"]
    name = target.removeprefix("azure:") if isinstance(target, str) else target
    if not isinstance(name, str) or name not in targets:
        raise BackendError(f"unknown noise target {shown(target)}; known: {', '.join(targets)}")
    entry, seen = targets[name], [name]
    while "same_as" in entry:
        seen.append(entry["same_as"])
        if seen[-1] in seen[:-1] or seen[-1] not in targets:
            raise BackendError(f"noise table {path}: {name!r} refers to {seen[-1]!r}, which gives no figures")
        entry = targets[seen[-1]]
    source = "; ".join(dict.fromkeys(e["source"] for e in _sources(targets, seen)))
    if "missing" in entry:
        raise BackendError(f"no published noise figures for {name}: {entry['missing']}")
    if "ideal" in entry:
        return NoiseModel(source=source, date=entry["read"], target=name)
    g1, g2, ro = entry["gate_1q"], entry["gate_2q"], entry["readout"]
    return NoiseModel(depolarizing(_fidelity(g1), 1), depolarizing(_fidelity(g2), 2), ro["p1_given_0"],
                      ro["p0_given_1"], source, max(e["read"] for e in _sources(targets, seen)), name)


def resolve(noise) -> NoiseModel | None:
    """A backend's ``noise`` option: None (noiseless), a ``NoiseModel``, or a target of the table."""
    if noise is None or isinstance(noise, NoiseModel):
        return noise
    if not isinstance(noise, str):
        raise BackendError(f"noise must be an Azure target of the noise table or None, got {shown(noise)}")
    return noise_model(noise)


def _fidelity(figure: dict) -> float:
    return figure["fidelity"] if "fidelity" in figure else 1.0 - figure["error"]


def _sources(targets: dict, names: list[str]) -> list[dict]:
    """The entries and figures behind a chain of ``same_as`` names: each has a source and a date read."""
    out = []
    for n in names:
        e = targets[n]
        out += [e] if "source" in e else []
        out += [e[k] for k in ("gate_1q", "gate_2q", "readout") if k in e]
    return out


def table_problems(path: str = TABLE) -> list[str]:
    """What is wrong with the table (empty: nothing): every entry and figure has a source and a date read,
    every figure is a probability in [0, 1), and each target is exactly one kind."""
    out = []
    targets = load_table(path)["targets"]
    for name, entry in targets.items():
        kinds = [k for k in ("gate_1q", "ideal", "same_as", "missing") if k in entry]
        if len(kinds) != 1:
            out.append(f"{name}: one of gate_1q/ideal/same_as/missing, got {kinds}")
        for e in _sources(targets, [name]):
            if not e.get("source") or not e.get("read"):
                out.append(f"{name}: a figure without a source or a date")
        for key in ("gate_1q", "gate_2q", "readout"):
            for k, v in entry.get(key, {}).items():
                if k in ("fidelity", "error", "p1_given_0", "p0_given_1") and not (
                        isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v < 1):
                    out.append(f"{name}: {key}.{k} = {v!r} is not a probability in [0, 1)")
    return out
