"""``pennylane:<device>``: run templates on any PennyLane device.

Each batch is one QNode call with broadcast parameters (a ``[B]`` array per
angle); devices without native broadcasting get PennyLane's ``broadcast_expand``.
The QNode is built once per template (cached by fingerprint).

Shot mode measures honestly in the computational basis. The Pauli terms of all
observables are split into qubit-wise commuting groups; each group is one
circuit run with ``shots`` shots after rotating X/Y wires to Z. Per shot, the
terms of an observable that fall in one group are summed, so their correlation
is kept; groups use independent shots, so their variances add:
``stderr**2 = sum_g Var_g / shots`` with the unbiased per-shot variance ``Var_g``.
Counts come from computational-basis samples. ``batch.seed`` (or the
constructor's ``seed``) seeds the device, so shot runs are reproducible.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pennylane as qml
from hqflow.ir.circuit import CircuitTemplate
from hqflow.ir.pennylane_io import (
    PENNYLANE_LOCK,
    apply_template,
    observable_to_pennylane,
)

from .base import BackendError, BatchResult, Capabilities, CircuitBatch, LocalBackend

DEFAULT_MAX_QUBITS = 24  # a 256 MiB statevector per row
_CACHE_SIZE = 64

Basis = tuple[tuple[int, str], ...]  # (wire, "X" | "Y") to rotate before sampling


# Rows per QNode call. A device without native broadcasting gets one tape per row
# (broadcast_expand): lightning.qubit held 820 MB for a 32k-row job of the policy circuit.
# Chunks bound that; default.qubit's rows/s is near its best from about 8k rows.
CHUNK_ROWS = 8192


@dataclass
class _Group:
    """Qubit-wise commuting terms measured together: ``terms`` is (observable, coeff, wires)."""

    basis: dict[int, str]
    terms: list[tuple[int, float, tuple[int, ...]]]


@dataclass
class _Compiled:
    qnode: qml.QNode
    groups: list[_Group]
    identity: np.ndarray  # [n_obs], the sum of identity-term coefficients


class PennyLaneBackend(LocalBackend):
    """A PennyLane device as an hqflow backend (exact and shot modes)."""

    def __init__(
        self,
        device_name: str = "default.qubit",
        max_qubits: int | None = None,
        max_circuits_per_job: int | None = None,
        seed: int | None = None,
        **device_kwargs,
    ):
        super().__init__()
        self.name = f"pennylane:{device_name}"
        self.device_name, self.seed, self.device_kwargs = device_name, seed, device_kwargs
        self._make_device(1, seed)  # fail now on an unknown device or bad options
        self._caps = Capabilities(
            self.name,
            max_qubits=DEFAULT_MAX_QUBITS if max_qubits is None else max_qubits,
            max_circuits_per_job=max_circuits_per_job,
            exact=True,
            shots=True,
            device="cuda:0" if "gpu" in device_name else "cpu",
        )
        self._devices: dict[int, qml.devices.Device] = {}
        self._compiled: OrderedDict[str, _Compiled] = OrderedDict()

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def run(self, batch: CircuitBatch) -> BatchResult:
        parts = batch.split(CHUNK_ROWS)
        if len(parts) > 1:
            return BatchResult.concat([self._run_part(part) for part in parts])
        return self._run_part(batch)

    def _run_part(self, batch: CircuitBatch) -> BatchResult:
        t, rows = batch.template, batch.size
        # angles[k][j] is a [B] array: every parametrized op is broadcast over the rows.
        angles = [a.T for a in batch.angles()]
        with PENNYLANE_LOCK:
            compiled = self._compile(t)
            qnode = compiled.qnode
            if batch.seed is not None and batch.shots is not None:
                qnode = qnode.update(device=self._make_device(t.n_qubits, batch.seed))
            if batch.shots is None:
                return self._exact(qnode, t, angles, rows)
            sample = partial(_samples, qnode, angles, shots=batch.shots, rows=rows, t=t)
            if not t.observables:
                return BatchResult(counts=_counts(sample(())))
            return _estimate(compiled, sample, rows, t.n_observables, batch.shots)

    # -- helpers

    def _make_device(self, n_qubits: int, seed: int | None) -> qml.devices.Device:
        options = dict(self.device_kwargs, **({} if seed is None else {"seed": seed}))
        try:
            return qml.device(self.device_name, wires=n_qubits, **options)
        except Exception as exc:  # DeviceError, TypeError for options, plugin errors
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BackendError(f"PennyLane device {self.device_name!r} cannot be created: {message}") from None

    def _device(self, n_qubits: int) -> qml.devices.Device:
        if n_qubits not in self._devices:
            self._devices[n_qubits] = self._make_device(n_qubits, self.seed)
        return self._devices[n_qubits]

    def _compile(self, t: CircuitTemplate) -> _Compiled:
        key = t.fingerprint()
        if key in self._compiled:
            self._compiled.move_to_end(key)
            return self._compiled[key]

        def circuit(angles, basis: Basis | None = None):
            apply_template(t, angles)
            if basis is not None:
                for wire, pauli in basis:
                    if pauli == "Y":
                        qml.adjoint(qml.S(wire))
                    qml.Hadamard(wire)
                return qml.sample(wires=range(t.n_qubits))
            if not t.observables:
                return qml.probs(wires=range(t.n_qubits))
            return [qml.expval(observable_to_pennylane(o)) for o in t.observables]

        qnode = qml.QNode(circuit, self._device(t.n_qubits), diff_method=None)
        identity = np.array([sum(term.coeff for term in o.terms if not term.paulis) for o in t.observables], float)
        self._compiled[key] = _Compiled(qnode, _group_terms(t), identity)
        if len(self._compiled) > _CACHE_SIZE:
            self._compiled.popitem(last=False)
        return self._compiled[key]

    @staticmethod
    def _exact(qnode: qml.QNode, t: CircuitTemplate, angles: list, rows: int) -> BatchResult:
        out = qnode(angles)
        if not t.observables:
            return BatchResult(probs=_rows(out, rows, 2**t.n_qubits))
        return BatchResult(values=np.concatenate([_rows(v, rows, 1) for v in out], axis=1))


def _rows(out, rows: int, width: int) -> np.ndarray:
    """A QNode output as ``[rows, width]``; an unbroadcast output (no angles) is repeated."""
    a = np.asarray(out, dtype=float).reshape(-1, width)
    return np.array(np.broadcast_to(a, (rows, width)))


def _samples(qnode: qml.QNode, angles: list, basis: Basis, shots: int, rows: int, t: CircuitTemplate) -> np.ndarray:
    """``[rows, shots, n_qubits]`` bits measured after rotating ``basis`` to Z.

    A template without angles is not broadcast, so it is run once with
    ``rows * shots`` shots and the samples are dealt out to the rows.
    """
    broadcast = any(op.angles for op in t.ops)
    out = qml.set_shots(qnode, shots=shots if broadcast else shots * rows)(angles, basis)
    return np.asarray(out, dtype=np.int8).reshape(rows, shots, t.n_qubits)


def _counts(bits: np.ndarray) -> list[dict[str, int]]:
    """One ``{bitstring: count}`` per row, wire 0 leftmost."""
    out = []
    for row in bits:
        strings, counts = np.unique(row, axis=0, return_counts=True)
        out.append({"".join(map(str, s)): int(c) for s, c in zip(strings, counts)})
    return out


def _group_terms(t: CircuitTemplate) -> list[_Group]:
    """Greedy qubit-wise commuting groups of every non-identity term of every observable."""
    groups: list[_Group] = []
    for j, obs in enumerate(t.observables):
        for term in obs.terms:
            if not term.paulis:
                continue
            for g in groups:
                if all(g.basis.get(w, p) == p for w, p in term.paulis):
                    break
            else:
                g = _Group({}, [])
                groups.append(g)
            g.basis.update(term.paulis)
            g.terms.append((j, term.coeff, term.wires))
    return groups


def _estimate(compiled: _Compiled, sample: Callable[[Basis], np.ndarray], rows: int, n_obs: int, shots: int) -> BatchResult:
    """Observable estimates and standard errors from one sampled run per group."""
    values = np.tile(compiled.identity, (rows, 1))
    variance = np.zeros((rows, n_obs))
    for g in compiled.groups:
        basis = tuple(sorted((w, p) for w, p in g.basis.items() if p != "Z"))
        signs = 1.0 - 2.0 * sample(basis)  # [rows, shots, n]: the Z eigenvalue per wire
        per_shot = np.zeros((rows, shots, n_obs))
        for j, coeff, wires in g.terms:
            per_shot[:, :, j] += coeff * np.prod(signs[:, :, list(wires)], axis=2)
        values += per_shot.mean(axis=1)
        # unbiased per-shot variance; undefined (NaN) for one shot
        variance += per_shot.var(axis=1, ddof=1) / shots if shots > 1 else np.nan
    return BatchResult(values=values, stderr=np.sqrt(variance))
