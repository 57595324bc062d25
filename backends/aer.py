"""``aer``: Qiskit Aer behind hqflow's backend protocol.

Each template is converted and transpiled once (cached by fingerprint); a batch
of ``B`` rows is then bound in one call with a ``[B, n_params]`` value array:

* observables, exact: ``EstimatorV2`` (precision 0, exact expectation values);
* observables, shots: honest sampling with ``SamplerV2``. The Pauli terms of all
  observables are grouped by measurement basis (qubit-wise commuting), each
  group is measured ``shots`` times after basis rotations (so every term gets
  ``shots`` samples, as in the reference backend), and each observable
  is the sum over groups of the sample mean of its terms' sign products;
  ``stderr`` adds the groups' squared standard errors (groups are independent);
* no observables, exact: ``AerSimulator`` with ``save_probabilities``;
* no observables, shots: ``SamplerV2`` counts.

``noise=TARGET`` (an Azure target of ``backends/noise_targets.json``, or a ``NoiseModel``) simulates the density
matrix under the model of ``backends/noise.py``: after each of the template's gates, Aer's
``depolarizing_error(p, k)`` on its wires (placed where the gate was, a barrier marking it through the
transpiler, so a gate decomposed into several still gets one channel), and a ``ReadoutError`` on every measured
qubit (the Aer ``NoiseModel`` of ``aer_noise_model``). Aer applies readout errors to sampled bits only, so exact
values and probabilities take the same confusion matrices from the exact distributions of the measurement
bases: each term's value is its parity's mean under the confused distribution.

Qiskit puts qubit 0 last in bitstrings and least significant in indices;
results are converted to hqflow's order (wire 0 first / most significant).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from hqflow.ir.circuit import CircuitTemplate, Observable, PauliTerm
from hqflow.ir.gates import GATES
from hqflow.ir.qiskit_io import observable_to_sparse_pauli, to_qiskit
from hqflow.ir.text import shown
from qiskit import QuantumCircuit, transpile
from qiskit.quantum_info import SparsePauliOp
from qiskit_aer import AerSimulator
from qiskit_aer.noise import NoiseModel as AerNoiseModel
from qiskit_aer.noise import ReadoutError, depolarizing_error
from qiskit_aer.primitives import EstimatorV2, SamplerV2

from .base import (
    BackendError,
    BatchResult,
    Capabilities,
    CircuitBatch,
    LocalBackend,
    expectation_from_samples,
)
from .noise import NoiseModel, resolve

# Aer methods that give exact values for hqflow's (pure-state, noiseless) circuits and sample.
METHODS = ("automatic", "statevector", "density_matrix", "matrix_product_state")
# Aer (0.16-0.18 at least) mis-binds runtime parameters of controlled rotations:
# parametrized crx/cry/crz/cp act wrongly under ``parameter_binds`` and PUB values
# (qiskit-aer issues #2323, #2391, #2403). Circuits are decomposed past them.
_MISBOUND = ("crx", "cry", "crz", "cp")
_CACHE_SIZE = 256
# Rows per Aer call. Aer's time and memory per row grow with the rows of one call (the policy circuit:
# 3,600 rows/s and 170 MB at 1k rows, 560 rows/s and 2.3 GB at 32k), so a larger batch runs in chunks:
# time and memory then grow linearly (benchmarks/backends.py, "scaling").
CHUNK_ROWS = 512


@dataclass(frozen=True)
class _Group:
    """One measurement setting: the rotated, measured circuit and, per
    observable, its terms measured by it, rewritten as Z strings."""

    circuit: QuantumCircuit
    z_observables: tuple[Observable, ...]


@dataclass(frozen=True)
class _Compiled:
    """A template ready for Aer, built once per template."""

    circuit: QuantumCircuit  # transpiled, unmeasured
    columns: np.ndarray  # for each circuit parameter, its column in [inputs | weights]
    observables: tuple[SparsePauliOp, ...]
    constants: np.ndarray  # [n_obs] sum of identity-term coefficients
    groups: tuple[_Group, ...]
    measured: QuantumCircuit  # circuit + measure_all (no observables, shots)
    probs_circuit: QuantumCircuit  # circuit + save_probabilities (no observables, exact)

    def values(self, batch: CircuitBatch) -> np.ndarray | None:
        """The ``[B, n_params]`` parameter values in circuit order, or None without parameters."""
        if not self.columns.size:
            return None
        rows = np.concatenate([batch.inputs, batch.weights_per_row()], axis=1)
        return rows[:, self.columns]


class AerBackend(LocalBackend):
    """Qiskit Aer simulator: exact and shot modes, gradients by parameter-shift."""

    name = "aer"

    def __init__(
        self,
        method: str = "automatic",
        max_qubits: int | None = None,
        max_circuits_per_job: int | None = None,
        seed: int | None = None,
        noise=None,
    ):
        super().__init__()
        if method not in METHODS:
            raise BackendError(f"aer method must be one of {', '.join(METHODS)}; got {method!r}")
        self.noise = resolve(noise)
        if self.noise is not None and method not in ("automatic", "density_matrix"):
            raise BackendError(f"aer: noise needs method 'density_matrix' (exact noisy values), got {shown(method)}")
        self.method = "density_matrix" if self.noise is not None else method
        self._sim = AerSimulator(method=self.method, noise_model=aer_noise_model(self.noise))
        # hqflow gates this method runs natively; the others are decomposed.
        supported = set(self._sim.target.operation_names)
        self._basis = [g for g in GATES if g in supported and g not in _MISBOUND]
        limit = self._sim.target.num_qubits
        if max_qubits is not None and not 1 <= max_qubits <= limit:
            raise BackendError(f"aer method {method!r}: max_qubits must be in 1..{limit}, got {max_qubits}")
        if max_circuits_per_job is not None and max_circuits_per_job < 1:
            raise BackendError(f"max_circuits_per_job must be a positive integer, got {max_circuits_per_job}")
        self._caps = Capabilities(
            "aer", max_qubits=max_qubits or limit, max_circuits_per_job=max_circuits_per_job
        )
        self._rng = np.random.default_rng(seed)  # seeds for batches that bring none
        self._cache: OrderedDict[str, _Compiled] = OrderedDict()

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def run(self, batch: CircuitBatch) -> BatchResult:
        parts = batch.split(CHUNK_ROWS)
        if len(parts) > 1:
            return BatchResult.concat([self._run_part(part) for part in parts])
        return self._run_part(batch)

    def _run_part(self, batch: CircuitBatch) -> BatchResult:
        t = batch.template
        compiled = self._compiled(t)
        meta = {"backend": self.name, "method": self.method}
        if self.noise is not None:
            meta["noise"] = self.noise.target
        if t.observables and batch.shots is None and self.noise is not None:
            return BatchResult(values=self._noisy_values(compiled, batch), metadata=meta)
        if t.observables and batch.shots is None:
            return BatchResult(values=self._exact_values(compiled, batch), metadata=meta)
        if t.observables:
            values, stderr = self._sampled_values(compiled, batch)
            return BatchResult(values=values, stderr=stderr, metadata=dict(meta, groups=len(compiled.groups)))
        if batch.shots is None:
            return BatchResult(probs=self._probabilities(compiled, batch), metadata=meta)
        return BatchResult(counts=self._counts(compiled, batch), metadata=meta)

    # --- compilation ---------------------------------------------------------

    def _compiled(self, t: CircuitTemplate) -> _Compiled:
        key = t.fingerprint()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        compiled = self._compile(t)
        with self._lock:
            self._cache[key] = compiled
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return compiled

    def _compile(self, t: CircuitTemplate) -> _Compiled:
        qc = to_qiskit(t)
        if self.noise is not None:  # a barrier after each gate marks where its channel goes
            marked = QuantumCircuit(*qc.qregs, name=qc.name)
            for inst in qc.data:
                marked.append(inst)
                marked.barrier(*inst.qubits)
            qc = marked
        circuit = transpile(qc, basis_gates=self._basis, optimization_level=0)
        if self.noise is not None:
            circuit = _with_channels(circuit, self.noise)
        column = {n: i for i, n in enumerate(t.input_names + t.weight_names)}
        columns = np.array([column[p.name] for p in circuit.parameters], dtype=int)
        measured = circuit.copy()
        measured.measure_all()
        probs_circuit = circuit.copy()
        probs_circuit.save_probabilities(label="probs")
        constants = [sum(term.coeff for term in o.terms if not term.paulis) for o in t.observables]
        return _Compiled(
            circuit,
            columns,
            tuple(observable_to_sparse_pauli(o, t.n_qubits) for o in t.observables),
            np.array(constants, dtype=float),
            tuple(_measurement_groups(circuit, t.observables)),
            measured,
            probs_circuit,
        )

    # --- the four modes ------------------------------------------------------

    def _exact_values(self, c: _Compiled, batch: CircuitBatch) -> np.ndarray:
        estimator = EstimatorV2.from_backend(self._sim)
        values = c.values(batch)
        if values is None:
            evs = estimator.run([(c.circuit, list(c.observables))], precision=0.0).result()[0].data.evs
            return np.tile(evs, (batch.size, 1))
        # parameter rows [B, 1] broadcast against observables [n_obs] -> [B, n_obs]
        pub = (c.circuit, list(c.observables), values[:, None, :])
        return np.asarray(estimator.run([pub], precision=0.0).result()[0].data.evs, dtype=float)

    def _sampled_values(self, c: _Compiled, batch: CircuitBatch) -> tuple[np.ndarray, np.ndarray]:
        values = np.tile(c.constants, (batch.size, 1))
        variance = np.zeros_like(values)
        bits = self._sample(c, [g.circuit for g in c.groups], batch) if c.groups else []
        for group, group_bits in zip(c.groups, bits):
            z_template = batch.template.with_observables(group.z_observables)
            means, errs = expectation_from_samples(group_bits, z_template)
            values += means
            variance += errs**2
        return values, np.sqrt(variance)

    def _probabilities(self, c: _Compiled, batch: CircuitBatch, circuit: QuantumCircuit | None = None) -> np.ndarray:
        """Exact probabilities ``[B, 2**n]`` (wire 0 first) of ``circuit`` (the template's by default), readout
        error included where the backend has noise."""
        circuit = c.probs_circuit if circuit is None else circuit
        values = c.values(batch)
        params = circuit.parameters
        binds = None if values is None else [{p: values[:, k] for k, p in enumerate(params)}]
        result = self._sim.run(circuit, parameter_binds=binds).result()
        probs = np.array([result.data(i)["probs"] for i in range(len(result.results))], dtype=float)
        probs = np.broadcast_to(probs, (batch.size, probs.shape[1]))
        return _confused(_big_endian(probs, batch.template.n_qubits), self.noise)

    def _noisy_values(self, c: _Compiled, batch: CircuitBatch) -> np.ndarray:
        """Exact values under noise: per measurement group, each term's parity mean under the confused exact
        distribution of the group's basis."""
        values = np.tile(c.constants, (batch.size, 1))
        n = batch.template.n_qubits
        bits = (np.arange(2**n)[:, None] >> np.arange(n - 1, -1, -1)[None, :]) & 1  # [2**n, n], wire 0 first
        for group in c.groups:
            circuit = group.circuit.remove_final_measurements(inplace=False)
            circuit.save_probabilities(label="probs")
            probs = self._probabilities(c, batch, circuit)
            for j, obs in enumerate(group.z_observables):
                for term in obs.terms:
                    parity = 1.0 - 2.0 * (bits[:, list(term.wires)].sum(axis=1) % 2)
                    values[:, j] += term.coeff * (probs @ parity)
        return values

    def _counts(self, c: _Compiled, batch: CircuitBatch) -> list[dict[str, int]]:
        (bits,) = self._sample(c, [c.measured], batch)
        n = batch.template.n_qubits
        index = bits.astype(np.int64) @ (1 << np.arange(n - 1, -1, -1, dtype=np.int64))  # wire 0 first
        counts = []
        for row in index:
            keys, freq = np.unique(row, return_counts=True)
            counts.append({format(int(k), f"0{n}b"): int(f) for k, f in zip(keys, freq)})
        return counts

    def _sample(self, c: _Compiled, circuits: list[QuantumCircuit], batch: CircuitBatch) -> list[np.ndarray]:
        """Measure every circuit ``shots`` times per row in one sampler call.

        Returns one bool array ``[B, shots, n_qubits]`` per circuit (column = wire).
        """
        if batch.seed is not None:
            seed = batch.seed
        else:
            with self._lock:
                seed = int(self._rng.integers(2**31))
        sampler = SamplerV2.from_backend(self._sim, seed=seed)
        size, shots, values = batch.size, batch.shots, c.values(batch)
        if values is None:  # nothing to bind: draw B * shots samples and cut them into rows
            pubs = [(circuit, None, size * shots) for circuit in circuits]
        else:
            pubs = [(circuit, values, shots) for circuit in circuits]
        result = sampler.run(pubs).result()
        return [r.data.meas.to_bool_array(order="little").reshape(size, shots, -1) for r in result]


def _measurement_groups(circuit: QuantumCircuit, observables: tuple[Observable, ...]) -> list[_Group]:
    """Qubit-wise commuting groups covering every non-identity term (first fit)."""
    bases: list[dict[int, str]] = []
    home: dict[tuple, int] = {}  # term paulis -> group index
    for obs in observables:
        for term in obs.terms:
            if not term.paulis or term.paulis in home:
                continue
            for k, basis in enumerate(bases):
                if all(basis.get(w, p) == p for w, p in term.paulis):
                    basis.update(term.paulis)
                    home[term.paulis] = k
                    break
            else:
                home[term.paulis] = len(bases)
                bases.append(dict(term.paulis))
    groups = []
    for k, basis in enumerate(bases):
        z_obs = tuple(
            Observable(
                tuple(
                    PauliTerm(term.coeff, tuple((w, "Z") for w, _ in term.paulis))
                    for term in obs.terms
                    if term.paulis and home[term.paulis] == k
                )
            )
            for obs in observables
        )
        groups.append(_Group(_rotated(circuit, basis), z_obs))
    return groups


def _rotated(circuit: QuantumCircuit, basis: dict[int, str]) -> QuantumCircuit:
    """``circuit`` with rotations that map ``basis`` onto Z, then all qubits measured."""
    out = circuit.copy()
    for wire, pauli in sorted(basis.items()):
        if pauli == "Y":
            out.sdg(wire)
        if pauli in "XY":
            out.h(wire)
    out.measure_all()
    return out


def aer_noise_model(model: NoiseModel | None) -> AerNoiseModel | None:
    """The readout errors of ``model`` as an Aer ``NoiseModel`` (the gates' channels are placed in the
    circuit by ``_with_channels``); None without noise."""
    if model is None:
        return None
    aer = AerNoiseModel()
    if model.p1_given_0 or model.p0_given_1:
        e0, e1 = model.p1_given_0, model.p0_given_1
        aer.add_all_qubit_readout_error(ReadoutError([[1 - e0, e0], [e1, 1 - e1]]))
    return aer


def _with_channels(circuit: QuantumCircuit, model: NoiseModel) -> QuantumCircuit:
    """``circuit`` with each barrier (one after each of the template's gates) replaced by the depolarizing
    channel of a gate on its qubits."""
    out = circuit.copy_empty_like()
    for inst in circuit.data:
        if inst.operation.name != "barrier":
            out.append(inst)
        elif model.gate(len(inst.qubits)):
            out.append(depolarizing_error(model.gate(len(inst.qubits)), len(inst.qubits)), inst.qubits)
    return out


def _confused(probs: np.ndarray, model: NoiseModel | None) -> np.ndarray:
    """``[B, 2**n]`` probabilities (wire 0 first) with each bit read through the readout confusion matrix."""
    if model is None or not (model.p1_given_0 or model.p0_given_1):
        return probs
    e0, e1 = model.p1_given_0, model.p0_given_1
    confusion = np.array([[1 - e0, e1], [e0, 1 - e1]])  # [read, true]
    n = probs.shape[1].bit_length() - 1
    p = probs.reshape((probs.shape[0],) + (2,) * n)
    for axis in range(1, n + 1):
        p = np.moveaxis(np.tensordot(confusion, p, axes=([1], [axis])), 0, axis)
    return p.reshape(probs.shape[0], -1)


def _big_endian(probs: np.ndarray, n_qubits: int) -> np.ndarray:
    """Reorder ``[B, 2**n]`` probabilities from Qiskit's index (qubit 0 least
    significant) to hqflow's (wire 0 most significant)."""
    b = probs.shape[0]
    axes = (0,) + tuple(range(n_qubits, 0, -1))
    return probs.reshape((b,) + (2,) * n_qubits).transpose(axes).reshape(b, -1)
