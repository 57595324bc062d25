"""``density``: exact, differentiable density-matrix simulation in torch, under a target's noise model.

    backend = get_backend("density", noise="ionq.qpu.aria-1")   # or noise=None: noiseless
    prog = backend.program(template)                           # (inputs [B, n_in], weights) -> values [B, n_obs]
    values = prog(x, w); values.sum().backward()               # autograd through the noisy circuit

The state is the density matrix in the **Pauli basis** (its Pauli transfer representation): ``rho = 2**-n
sum_P r_P P`` with the real vector ``r_P = Tr(P rho)`` of ``4**n`` entries per row (``[B, 4, ..., 4]``, wire 0
first, digits I, X, Y, Z). In that basis everything here is a real linear map on a few wires:

* every gate is lowered by the compiled package (``lower._lower``) into fixed matrices and diagonal rotations
  affine in one symbol; a fixed one becomes its transfer matrix ``R_PQ = Tr(P U Q U^dag) / 2**k``, a rotation
  ``sum_j cos(w_j t) A_j + sin(w_j t) B_j`` over the differences ``w`` of its spectrum;
* the depolarizing channel after each gate (``backends/noise.py``) is diagonal: ``1 - p`` on every Pauli that
  is not the identity on the gate's wires;
* a Pauli term's value is one entry of ``r``; with readout error, a term on wires ``S`` reads
  ``sum_{T in S} a**|S - T| c**|T| r_{P_T}`` (``a = P(0|1) - P(1|0)``, ``c = 1 - P(0|1) - P(1|0)``, ``P_T`` the
  term's letters on ``T``): rotating to the Z basis, confusing each measured bit and taking the parity, exactly;
* probabilities come from the Z entries, each wire mapped (I, Z) -> (bit 0, bit 1) by ``[[1 + a, c], [1 - a, -c]] / 2``
  (the confused distribution).

Compile time: consecutive maps merge where at most one has an angle and they fit on two wires (or on the
larger's), so a gate, its basis changes and its channel are one map (``_merge``); each map then joins the last
stage of its kind, per-row (an input's angle, or a weight's when weights come per row) or shared, that nothing
after it on its wires blocks (``_stages``): a re-uploading layer's encodings are one per-row stage. Call time:
with ``4**n`` at most the rows (and ``FUSE``, 1,024), a shared stage is one ``4**n`` square matrix built from the
weights (one GEMM for the batch; built once when it has no angle); so is it, whatever the rows, when the weights
are shared and need no gradient (acting: many calls at the same weights), its matrices kept for the last weights
seen; otherwise each map acts on the state (one ``einsum`` on a few wires). Expectation values simulate only the
observables' light cone (``hqflow.ir.passes.light_cone``; the channels are unital, so what lies outside cannot
reach them). Everything is plain torch, so autograd differentiates it (twice, too).

Shots sample honestly from the exact noisy values (``reference``'s estimator): per Pauli term, the number of +1
parities in ``shots`` is binomial; counts are multinomial in the confused distribution; a batch with ``row_seeds``
draws row i from ``row_seeds[i]`` alone (``backends/sampling.py``).
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

import numpy as np
import torch
from hqflow.ir.circuit import Angle, CircuitTemplate
from hqflow.ir.gates import PAULIS
from hqflow.ir.passes import light_cone
from hqflow.ir.text import shown

from ..base import BackendError, BatchResult, Capabilities, CircuitBatch, LocalBackend
from ..noise import NoiseModel, resolve
from ..sampling import multinomial_rows, sample_terms
from .backend import _by_shared_weights, _sample_terms, _scatter
from .config import _REAL
from .lower import _lower
from .program import CompiledProgram, EncodedProgram, Readouts, _resolve_device, _resolve_dtype

MAX_QUBITS = 14  # 4**14 entries per row: 2 GiB in float64
FUSE = 1024  # segments are fused into one matrix up to this size (4**n), when the batch has at least as many rows
_BASIS = [PAULIS[p] for p in "IXYZ"]


def _paulis(k: int) -> np.ndarray:
    """``[4**k, 2**k, 2**k]``: the Pauli strings on ``k`` wires (first wire most significant)."""
    out = np.ones((1, 1, 1), dtype=complex)
    for _ in range(k):
        out = np.einsum("aij,bkl->abikjl", out, np.array(_BASIS)).reshape(out.shape[0] * 4, out.shape[1] * 2, -1)
    return out


def _transfer(u: np.ndarray) -> np.ndarray:
    """The Pauli transfer matrix ``Tr(P U Q U^dag) / 2**k`` of a unitary."""
    d = u.shape[0]
    p = _paulis(int(np.log2(d)))
    moved = u @ p @ u.conj().T  # U Q U^dag, every Q
    return (p.conj().reshape(len(p), -1) @ moved.reshape(len(p), -1).T).real / d  # Tr(P M) = sum conj(P) M


def _rotation(spectrum: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``diag(exp(i t spectrum))`` as ``sum_j f_j(t) mats[j]``: ``(freqs [m], mats [m, 4**k, 4**k])``, with
    ``f_j = cos(freqs_j t)`` where ``freqs_j >= 0`` and ``sin(|freqs_j| t)`` where it is negative."""
    d = spectrum.shape[0]
    p = _paulis(int(np.log2(d)))
    diff = np.round(spectrum[:, None] - spectrum[None, :], 12)
    freqs, mats = [], []

    def part(mask):  # sum over the entries (a, b) of mask of conj(P_ab) Q_ab / d
        return (p.conj().reshape(len(p), -1) * mask.reshape(-1)) @ p.reshape(len(p), -1).T / d

    for w in np.unique(np.abs(diff)):
        c = part((diff == w) | (diff == -w))
        s = part((diff == w).astype(float) - (diff == -w))
        freqs.append(w)
        mats.append(c.real)
        if w:  # Re(C e^{iwt}) over +-w: cos(wt) Re(C+ + C-) - sin(wt) Im(C+ - C-)
            freqs.append(-w)
            mats.append(-s.imag)
    return np.array(freqs), np.array(mats)


def _depolarizing(k: int, p: float) -> np.ndarray:
    m = np.full(4**k, 1.0 - p)
    m[0] = 1.0
    return np.diag(m)


@dataclass(frozen=True, eq=False)
class _Item:
    """One linear map on ``wires``: fixed (``mats[0]``) or ``sum_j f_j(angle) mats[j]`` (see ``_rotation``)."""

    wires: tuple[int, ...]
    mats: np.ndarray
    freqs: np.ndarray | None = None
    angle: Angle | None = None


def _items(template: CircuitTemplate, noise: NoiseModel | None) -> list[_Item]:
    """The template's maps in time order, each gate's noise after it; then merged (``_merge``)."""
    out: list[_Item] = []
    for op in template.ops:
        maps = [_Item(p.wires, *_rotation(p.spectrum)[::-1], p.angle) if p.spectrum is not None
                else _Item(p.wires, _transfer(p.matrix)[None]) for p in _lower(op)]
        strength = noise.gate(len(op.wires)) if noise is not None else 0.0
        for item in maps + ([_Item(op.wires, _depolarizing(len(op.wires), strength)[None])] if strength else []):
            last = next((j for j in range(len(out) - 1, -1, -1) if set(out[j].wires) & set(item.wires)), None)
            merged = None if last is None else _merge(out[last], item)
            if merged is None:
                out.append(item)
            else:  # ``item`` commutes with everything after ``out[last]`` (no shared wire), so it moves back
                out[last] = merged
    return [_Item(tuple(sorted(i.wires)), np.array([_embed(m, i.wires, tuple(sorted(i.wires))) for m in i.mats]),
                  i.freqs, i.angle) for i in out]


def _merge(a: _Item, b: _Item) -> _Item | None:
    """``b`` after ``a`` as one map, where at most one has an angle and their wires fit in the larger's or in
    two; None where they do not."""
    wires = a.wires + tuple(w for w in b.wires if w not in a.wires)
    if len(wires) > max(2, len(a.wires), len(b.wires)) or (a.angle is not None and b.angle is not None):
        return None
    ma, mb = (np.array([_embed(m, i.wires, wires) for m in i.mats]) for i in (a, b))
    if a.angle is None:
        return _Item(wires, mb @ ma[0], b.freqs, b.angle)
    return _Item(wires, mb[0] @ ma, a.freqs, a.angle)


def _embed(mat: np.ndarray, wires: tuple, into: tuple) -> np.ndarray:
    """``mat`` on ``wires`` as a map on ``into`` (which holds them)."""
    eye = torch.eye(4 ** len(into), dtype=torch.float64)
    return _apply(eye, torch.from_numpy(mat), tuple(into.index(w) for w in wires), len(into)).T.numpy()


def _stages(items: list[_Item], per_row: bool) -> list[tuple[bool, list[_Item]]]:
    """``[(per_row, items), ...]``: each item joins the last stage of its kind that no later stage's wires
    block (it commutes with what it passes), so a layer of per-row maps is one stage between shared ones."""
    stages: list[tuple[bool, list, set]] = []
    for item in items:
        a = item.angle
        rows = a is not None and (a.kind == "input" or per_row and a.kind == "weight")
        for kind, members, wires in reversed(stages):
            if kind == rows:
                members.append(item)
                wires.update(item.wires)
                break
            if wires.intersection(item.wires):
                stages.append((rows, [item], set(item.wires)))
                break
        else:
            stages.append((rows, [item], set(item.wires)))
    return [(kind, members) for kind, members, _ in stages]


def _apply(x: torch.Tensor, r: torch.Tensor, wires: tuple, n: int, base: int = 4) -> torch.Tensor:
    """``x`` ``[N, base**n]`` with the map ``r`` (``[K, K]``, or per row ``[N, K, K]``) on ``wires`` (one
    ``einsum``: torch turns it into a batched product)."""
    k, axes = len(wires), _AXES[:n]
    outs = "".join(_OUT[wires.index(i)] if i in wires else a for i, a in enumerate(axes))
    sub = ("z" if r.ndim == 3 else "") + _OUT[:k] + "".join(axes[w] for w in wires)
    t = torch.einsum(f"{sub},z{axes}->z{outs}", r.reshape(r.shape[:-2] + (base,) * (2 * k)),
                     x.reshape((x.shape[0],) + (base,) * n))
    return t.reshape(x.shape[0], -1)


_AXES, _OUT = "abcdefghijklmnop", "ABCDEFGH"


class DensityProgram(Readouts):  # (its values, terms and probabilities: the measured ones, readout error included)
    """A template's noisy density-matrix program for one dtype and device: ``prog(inputs, weights)`` gives
    ``[B, n_obs]`` values (``term_values``: one column per Pauli term; ``probs``: ``[B, 2**n]``, confused),
    differentiable in both; ``weights`` ``[n_w]`` (shared) or ``[B, n_w]`` (per row)."""

    _coerce = CompiledProgram._coerce  # shapes and types of inputs and weights, checked as compiled checks them

    def __init__(self, template: CircuitTemplate, noise: NoiseModel | None = None, dtype=torch.complex64,
                 device="cpu", lightcone: bool = True):
        problems = template.problems()
        if problems:
            raise BackendError("; ".join(problems))
        if template.n_qubits > MAX_QUBITS:
            raise BackendError(f"circuit {template.name!r} has {template.n_qubits} qubits; the density backend "
                               f"simulates at most {MAX_QUBITS}")
        self.template, self.noise = template, noise
        self.dtype = _resolve_dtype(dtype)
        self.real_dtype, self.device = _REAL[self.dtype], _resolve_device(device)
        self.items = _items(template, noise)
        self._consts: dict = {}
        self._segments: tuple = (None, {})  # (the weights' bytes, {stage: its matrix}): the last weights' segments
        self._lock = threading.RLock()  # a constant's build may take others
        cone = light_cone(template) if lightcone and template.observables else None
        self.cone = cone
        self._sub = DensityProgram(cone.template, noise, self.dtype, self.device, False) if cone and cone.reduces \
            else None

    # -- compile-time pieces, built once per weight mode ------------------------------------------------------
    def _schedule(self, per_row: bool) -> list:
        return self._const(("stages", per_row), lambda: _stages(self.items, per_row))

    def _const(self, key, build):
        with self._lock:
            if key not in self._consts:
                self._consts[key] = build()
            return self._consts[key]

    def _tensor(self, a) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a), dtype=self.real_dtype, device=self.device)

    def _map(self, item: _Item, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """The item's matrix: ``[K, K]``, or ``[N, K, K]`` where its angle is per row."""
        mats = self._const(("mats", id(item)), lambda: self._tensor(item.mats))
        if item.freqs is None:
            return mats[0]
        a = item.angle
        sym = x[:, a.index] if a.kind == "input" else w[..., a.index] if a.kind == "weight" else None
        t = a.offset + (0 if sym is None else a.scale * sym)
        f = self._const(("freqs", id(item)), lambda: self._tensor(item.freqs))
        t = torch.as_tensor(t, dtype=self.real_dtype, device=self.device)[..., None] * f.abs()
        coeff = torch.where(f >= 0, torch.cos(t), torch.sin(t))
        return torch.tensordot(coeff, mats, 1)

    def _initial(self, rows: int) -> torch.Tensor:
        def build():
            r = np.zeros(4**self.template.n_qubits)
            r[[int("".join(z), 4) for z in itertools.product("03", repeat=self.template.n_qubits)]] = 1.0
            return self._tensor(r)
        return self._const("initial", build).expand(rows, -1)

    def _state(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        n, rows = self.template.n_qubits, x.shape[0]
        per_row = w.ndim == 2
        kept = not per_row and 4**n <= FUSE and not (torch.is_grad_enabled() and w.requires_grad)
        fuse = kept or 4**n <= min(rows, FUSE)
        r = self._initial(rows)
        for rows_stage, items in self._schedule(per_row):
            if fuse and not rows_stage:
                build = lambda: self._fused(items, x, w)  # noqa: E731
                fixed = all(i.angle is None for i in items)  # the same every call: built once
                r = r @ (self._const(("segment", id(items)), build) if fixed else self._kept(items, w, build)
                         if kept else build())
                continue
            for item in items:
                r = _apply(r, self._map(item, x, w), item.wires, n)
        return r

    def _kept(self, items, w: torch.Tensor, build) -> torch.Tensor:
        """A shared stage's matrix at weights ``w`` (no gradient), kept while calls come at the same weights."""
        key = w.detach().cpu().numpy().tobytes()
        with self._lock:
            if self._segments[0] != key:
                self._segments = (key, {})
            table = self._segments[1]
            if id(items) not in table:
                table[id(items)] = build()
            return table[id(items)]

    def _fused(self, items, x, w) -> torch.Tensor:
        """The segment's shared items as one ``4**n`` square matrix ``M`` (the state goes to ``r @ M``)."""
        n = self.template.n_qubits
        m = torch.eye(4**n, dtype=self.real_dtype, device=self.device)
        for item in items:
            m = _apply(m, self._map(item, x, w), item.wires, n)
        return m

    # -- readout -------------------------------------------------------------------------------------------------
    def _readout(self, what: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(indices, W)``: values are ``r[:, indices] @ W`` (what: "values" or "terms")."""
        def build():
            t = self.template
            cols = [[(term.coeff, term.paulis) for term in o.terms] for o in t.observables] if what == "values" \
                else [[(1.0, term.paulis)] for o in t.observables for term in o.terms]
            a, c = self._confusion()
            weights: dict[int, np.ndarray] = {}
            for j, col in enumerate(cols):
                for coeff, paulis in col:
                    for keep in itertools.product((False, True), repeat=len(paulis)):
                        kept = [(wire, p) for (wire, p), k in zip(paulis, keep) if k]
                        scale = coeff * a ** (len(paulis) - len(kept)) * c ** len(kept)
                        if scale:
                            idx = sum("IXYZ".index(p) * 4 ** (t.n_qubits - 1 - wire) for wire, p in kept)
                            weights.setdefault(idx, np.zeros(len(cols)))[j] += scale
            idx = sorted(weights)
            return (torch.as_tensor(idx, dtype=torch.long, device=self.device),
                    self._tensor(np.array([weights[i] for i in idx]).reshape(len(idx), len(cols))))
        return self._const(("readout", what), build)

    def _confusion(self) -> tuple[float, float]:
        m = self.noise or NoiseModel()
        return m.p0_given_1 - m.p1_given_0, 1.0 - m.p0_given_1 - m.p1_given_0

    def _probs(self, r: torch.Tensor) -> torch.Tensor:
        n = self.template.n_qubits
        a, c = self._confusion()
        zidx = self._const("zidx", lambda: torch.as_tensor(
            [int("".join(z), 4) for z in itertools.product("03", repeat=n)], device=self.device))
        bits = self._const("bits", lambda: self._tensor([[1 + a, c], [1 - a, -c]]) / 2)
        p = r[:, zidx]
        for wire in range(n):
            p = _apply(p, bits, (wire,), n, base=2)
        return p

    # -- calls --------------------------------------------------------------------------------------------------
    def _run(self, inputs, weights, what: str) -> torch.Tensor:
        x, w = self._coerce(inputs, weights)
        if self._sub is not None and what != "probs":
            cone = self.cone
            out = self._sub._run(x[:, list(cone.inputs)], w[..., list(cone.weights)], what)
            if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
                out = out + 0 * (w.sum() + x.sum())  # parameters outside the cone get zero gradients, not None
            return out
        r = self._state(x, w)
        if what == "probs":
            return self._probs(r)
        idx, m = self._readout(what)
        return r[:, idx] @ m

    def __repr__(self) -> str:
        noise = self.noise.target or "a noise model" if self.noise else "no noise"
        return f"<DensityProgram {self.template.name!r} {self.template.n_qubits}q {self.dtype}, {noise}>"


class DensityBackend(LocalBackend):
    """Exact density-matrix simulation under ``noise`` (an Azure target of ``backends/noise_targets.json``, a
    ``NoiseModel``, or None: noiseless); jobs and ``program(template)`` for autograd. See the module docstring."""

    name = "density"

    def __init__(self, noise=None, dtype="complex64", device="cpu", max_qubits: int = 12):
        super().__init__()
        self.noise = resolve(noise)
        self.dtype, self.device = _resolve_dtype(dtype), _resolve_device(device)
        if isinstance(max_qubits, bool) or not isinstance(max_qubits, int) or not 1 <= max_qubits <= MAX_QUBITS:
            raise BackendError(f"density: max_qubits must be an int between 1 and {MAX_QUBITS}, got {shown(max_qubits)}")
        self._programs: dict = {}
        self._caps = Capabilities("density", max_qubits=max_qubits, exact=True, shots=True, gradient="autograd",
                                  device=str(self.device), row_seeded=True)

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def program(self, template: CircuitTemplate, dtype=None) -> DensityProgram | EncodedProgram:
        """The torch program of ``template`` under this backend's noise: ``(inputs, weights) -> values``,
        differentiable; ``dtype`` (complex64 or complex128: float32 or float64 states) overrides the backend's."""
        if template.n_qubits > self._caps.max_qubits:
            raise BackendError(f"circuit {template.name!r} has {template.n_qubits} qubits but backend 'density' "
                               f"allows at most {self._caps.max_qubits} (its max_qubits option)")
        dt = self.dtype if dtype is None else _resolve_dtype(dtype)
        key = (template.fingerprint(), dt)
        with self._lock:
            prog = self._programs.get(key)
        if prog is None:
            lowered = DensityProgram(template.lowered(), self.noise, dt, self.device)
            prog = EncodedProgram(template, lowered) if template.derived else lowered
            with self._lock:
                if len(self._programs) >= 256:  # the oldest goes (a long-lived service sees many circuits)
                    self._programs.pop(next(iter(self._programs)))
                prog = self._programs.setdefault(key, prog)
        return prog

    def run(self, batch: CircuitBatch) -> BatchResult:
        t = batch.template
        seeded = batch.shots is not None and batch.row_seeds is not None
        method = "term_values" if t.observables and batch.shots is not None else "__call__" if t.observables \
            else "probs"
        grouped = _by_shared_weights(batch) if batch.weights.ndim == 2 else None
        prog = self.program(t, torch.complex128 if seeded else None)
        with torch.no_grad():
            parts = [(rows, getattr(prog, method)(b.inputs, b.weights).double().cpu().numpy())
                     for rows, b in grouped or [(slice(None), batch)]]
        exact = parts[0][1] if grouped is None else _scatter(batch, [
            (rows, BatchResult(values=v)) for rows, v in parts]).values
        meta = {"backend": self.name, "noise": self.noise.target if self.noise else None}
        if batch.shots is None:
            return BatchResult(values=exact, metadata=meta) if t.observables else BatchResult(probs=exact, metadata=meta)
        if seeded:
            res = sample_terms(t, exact, batch.shots, batch.row_seeds) if t.observables else \
                BatchResult(counts=multinomial_rows(batch.row_seeds, exact, batch.shots))
        elif t.observables:
            res = _sample_terms(t, exact, batch.shots, np.random.default_rng(batch.seed))
        else:
            rng = np.random.default_rng(batch.seed)
            probs = np.clip(exact, 0.0, None)
            res = BatchResult(counts=[{format(int(i), f"0{t.n_qubits}b"): int(c) for i, c in enumerate(
                rng.multinomial(batch.shots, row / row.sum())) if c} for row in probs])
        res.metadata.update(meta)
        return res
