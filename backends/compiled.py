"""``compiled``: a ``CircuitTemplate`` compiled once into a batched torch program.

    prog = compile_template(template)      # cached by (fingerprint, dtype, device, fusion, gradient)
    values = prog(inputs, weights)         # [B, n_obs], differentiable w.r.t. inputs and weights
    probs = prog.probs(inputs, weights)    # [B, 2**n], wire 0 most significant
    print(prog.describe())                 # stages, fusion width, estimated flops

How a template is compiled (each pass is a small function below):

1. **Lowering** (``_lower``). Every gate becomes *primitives*: fixed matrices and
   diagonal rotations ``diag(exp(i * angle * spectrum))`` whose angle is affine in
   one symbol. Rotations about X or Y become a fixed basis change around a Z
   rotation (``ry(t) = Vy rz(t) Vy^dag``, ``crx = H_t crz H_t``,
   ``rxx = (H H) rzz (H H)``, ``u = rz ry rz`` up to a global phase), so *every*
   angle-dependent piece, per-sample encodings included, is diagonal.
2. **Scheduling** (``_schedule``). Diagonal primitives commute with each other, so
   they are levelled as early as possible. A diagonal level that depends on a
   per-sample symbol (inputs; weights too when they are given per row) is a
   **phase layer**: one ``[B, 2**n]`` phase ``exp(i theta)`` with ``theta`` affine in
   the inputs (one ``addmm`` for all layers; identical layers share columns).
   Everything between two phase layers (fixed gates, weight rotations) is a
   **segment**, the same for every sample.
3. **Fusion** (``_fuse``). A segment is cut greedily, in order, into dense blocks
   of at most ``k`` wires; diagonal primitives may move past diagonal work and
   gather into phase stages of any width. ``k`` (and whether single-qubit gates
   wait for the next multi-qubit gate on their wire) comes from a small cost model
   (``_choose_fusion``) or ``fusion=``; for small ``n`` it is the full width, so a
   segment is one ``2**n`` unitary. A block's unitary ``F_m D_m ... D_1 F_0``
   (constant ``F``, weight phases ``D``) is built in torch from the weights once
   per call and shared by the whole batch; all blocks of one size and slot count
   are built together, one batched product per slot.
4. **Layout**. With ``k < n`` the state's axes are permuted (permutations fixed at
   compile time, on merged axes) so that each block acts on the trailing axes:
   one GEMM per block.
5. **Readout** (``_Readout``). Pauli terms are grouped by their X/Y mask: Z-only
   terms are ``|psi|^2 @ M`` and each other group ``Re((conj(psi) * psi[i ^ mask]) @ M)``.

The state is ``[B, 2**n]`` complex (``complex64`` by default, ``complex128`` on
request), on any torch device. Gradients (``gradient=``): ``"fused"`` (default)
runs the state pipeline and readout as one autograd node with a hand-written
backward that keeps the forward states; ``"adjoint"`` (or ``adjoint=True``) is
the adjoint method, which un-computes the states instead (memory: a few states);
``"autograd"`` records plain torch ops (slower, twice differentiable). The
unitaries and phase angles are built from weights and inputs by ordinary torch
ops in every mode. ``torch.compile`` is not used: Inductor has no complex-number
code generation, and on CPU the compiled program was slower than eager.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np
import torch
from hqflow.ir.circuit import Angle, CircuitTemplate, Op
from hqflow.ir.gates import GATES, gate_matrix
from hqflow.ir.passes import light_cone

from .base import BackendError, BatchResult, Capabilities, CircuitBatch, LocalBackend

__all__ = ["CompiledBackend", "CompiledProgram", "clear_cache", "compile_template"]

_DTYPES = {"complex64": torch.complex64, "complex128": torch.complex128}
_GRADIENTS = ("fused", "adjoint", "autograd")
MAX_QUBITS = 26  # hard limit of compile_template (CompiledBackend defaults to 16 on CPU)
_KEEP_BYTES = 2 * 2**30  # "fused" keeps forward states up to this size, else un-computes them (adjoint method)
_CHUNK_AMPLITUDES = 2**19  # CPU batches run in chunks of about this many amplitudes (rows x 2**n)
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}

# --------------------------------------------------------------------------------------
# 1. lowering: gates -> fixed matrices and diagonal rotations


_H = np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)
_VY = np.array([[1, 1], [1j, -1j]], dtype=complex) / np.sqrt(2)  # Y = VY Z VY^dag
# phase(i) = exp(i * angle * spectrum[i]) in the gate's local basis (first wire most significant)
_SPECTRA = {
    "rz": np.array([-0.5, 0.5]),
    "p": np.array([0.0, 1.0]),
    "crz": np.array([0.0, 0.0, -0.5, 0.5]),
    "cp": np.array([0.0, 0.0, 0.0, 1.0]),
    "rzz": np.array([-0.5, 0.5, 0.5, -0.5]),
}
# rotation -> (diagonal rotation, basis change V, local wires it acts on): gate = V diag V^dag
_BASIS = {
    "rx": ("rz", _H, (0,)),
    "ry": ("rz", _VY, (0,)),
    "crx": ("crz", _H, (1,)),
    "cry": ("crz", _VY, (1,)),
    "rxx": ("rzz", _H, (0, 1)),
    "ryy": ("rzz", _VY, (0, 1)),
}


@dataclass(frozen=True, eq=False)
class _Prim:
    """A fixed gate (``matrix``) or a diagonal rotation ``exp(i * angle * spectrum)``."""

    wires: tuple[int, ...]
    label: str
    matrix: np.ndarray | None = None
    spectrum: np.ndarray | None = None
    angle: Angle | None = None
    diagonal: bool = True

    def angle_terms(self) -> tuple[np.ndarray, Angle]:
        """``(spectrum, angle)``: this primitive's phase (fixed diagonal gates have a constant angle)."""
        if self.spectrum is not None:
            return self.spectrum, self.angle
        return np.angle(np.diag(self.matrix)), Angle.const(1.0)


def _lower(op: Op) -> list[_Prim]:
    """One op as primitives, in time order (exact up to a global phase)."""
    spec = GATES[op.name]
    if all(a.kind == "const" for a in op.angles):
        m = gate_matrix(op.name, np.array([[a.offset for a in op.angles]]))[0]
        return [_Prim(op.wires, op.name, matrix=m, diagonal=spec.diagonal)]
    if op.name == "u":  # u(t, f, l) = e^{i(f+l)/2} rz(f) ry(t) rz(l)
        theta, phi, lam = op.angles
        return [p for name, a in (("rz", lam), ("ry", theta), ("rz", phi)) for p in _lower(Op(name, op.wires, (a,)))]
    (angle,) = op.angles
    if op.name in _SPECTRA:
        return [_Prim(op.wires, op.name, spectrum=_SPECTRA[op.name], angle=angle)]
    base, v, local = _BASIS[op.name]
    on = [op.wires[i] for i in local]
    pre = [_Prim((w,), "basis", matrix=v.conj().T, diagonal=False) for w in on]
    post = [_Prim((w,), "basis", matrix=v, diagonal=False) for w in on]
    return pre + [_Prim(op.wires, op.name, spectrum=_SPECTRA[base], angle=angle)] + post


# --------------------------------------------------------------------------------------
# 2. scheduling: phase layers (per-sample) and segments (shared by the batch)


def _levels(prims: list[_Prim], n_wires: int) -> dict[int, list[_Prim]]:
    """ASAP levels: non-diagonal primitives on even levels, diagonal ones on odd levels.

    A primitive only waits for earlier primitives on a shared wire that it does not
    commute with (two diagonal primitives always commute). Within a level the
    original order is kept.
    """
    last_any = [0] * n_wires  # highest level used on the wire
    last_nd = [0] * n_wires  # highest level of a non-diagonal primitive on the wire
    levels: dict[int, list[_Prim]] = {}
    for p in prims:
        if p.diagonal:
            lv = max(last_nd[w] for w in p.wires) + 1
        else:
            lv = max(last_any[w] for w in p.wires)
            lv += lv % 2
        levels.setdefault(lv, []).append(p)
        for w in p.wires:
            last_any[w] = max(last_any[w], lv)
            if not p.diagonal:
                last_nd[w] = lv
    return dict(sorted(levels.items()))


def _schedule(prims: list[_Prim], n: int, sample_kinds: frozenset) -> list[tuple[str, list[_Prim]]]:
    """``[("segment", prims) | ("phase", prims), ...]`` in execution order."""
    out: list[tuple[str, list[_Prim]]] = []
    for lv, group in _levels(prims, n).items():
        per_sample = lv % 2 == 1 and any(p.angle is not None and p.angle.kind in sample_kinds for p in group)
        if per_sample:
            out.append(("phase", group))
        elif out and out[-1][0] == "segment":
            out[-1][1].extend(group)
        else:
            out.append(("segment", list(group)))
    return out


# --------------------------------------------------------------------------------------
# 3. fusion: segments -> blocks of at most k wires


@dataclass(eq=False)
class _Block:
    wires: set
    prims: list

    @property
    def diagonal(self) -> bool:
        return all(p.diagonal for p in self.prims)


def _fuse(prims: list[_Prim], k: int, n: int, lazy: bool = True) -> list[_Block]:
    """Greedy in-order fusion into blocks of at most ``k`` wires (``k >= n``: one block).

    With ``lazy``, single-qubit primitives wait on their wire and join the block of
    the next multi-qubit primitive there (or, at the end, any block they may join),
    so multi-qubit gates decide the block shapes: a CNOT ladder gives blocks of
    consecutive wires. Without, every primitive is placed as it comes. A unit (a
    primitive with the waiting ones of its wires) may join block ``j`` when every
    later block commutes with it on its wires: ``j`` at or after the last block
    touching them, or, for an all-diagonal unit, the last block holding a
    non-diagonal primitive on them. It joins the block it widens
    least (the latest on ties); a diagonal unit that fits nowhere joins the latest
    all-diagonal block it may join, whatever its width (a phase stage), or starts one.
    """
    if k >= n:
        return [_Block(set(range(n)), list(prims))] if prims else []
    blocks: list[_Block] = []
    last_any: dict[int, int] = {}
    last_nd: dict[int, int] = {}
    waiting: dict[int, list[_Prim]] = {}

    def place(unit: list[_Prim], wires: set) -> None:
        diagonal = all(p.diagonal for p in unit)
        first = max(max(((last_nd if diagonal else last_any).get(w, -1) for w in wires), default=-1), 0)
        best, grow = None, None
        for j in range(first, len(blocks)):
            union = len(blocks[j].wires | wires)
            if union <= k and (grow is None or union - len(blocks[j].wires) <= grow):
                best, grow = j, union - len(blocks[j].wires)
        if best is None and diagonal:
            best = next((j for j in range(len(blocks) - 1, first - 1, -1) if blocks[j].diagonal), None)
        if best is None:
            blocks.append(_Block(set(), []))
            best = len(blocks) - 1
        blocks[best].wires |= wires
        blocks[best].prims.extend(unit)
        for w in wires:
            last_any[w] = max(last_any.get(w, -1), best)
            if not diagonal:
                last_nd[w] = best

    for p in prims:
        if lazy and len(p.wires) == 1:
            waiting.setdefault(p.wires[0], []).append(p)
            continue
        unit = [q for w in p.wires for q in waiting.pop(w, [])] + [p]
        place(unit, set(p.wires))
    for w, unit in waiting.items():
        place(unit, {w})
    return blocks


# --------------------------------------------------------------------------------------
# affine phase maps and block structures (numpy, compile time)


@functools.lru_cache(maxsize=32)
def _bits(m: int) -> np.ndarray:
    """``[2**m, m]`` 0/1 table; column a is axis a (axis 0 most significant). Shared: do not modify."""
    idx = np.arange(2**m)
    return ((idx[:, None] >> (m - 1 - np.arange(m))[None, :]) & 1).astype(np.int64)


def _local_index(bits: np.ndarray, axes: list[int]) -> np.ndarray:
    out = np.zeros(bits.shape[0], dtype=np.int64)
    for a in axes:
        out = (out << 1) | bits[:, a]
    return out


@dataclass
class _Affine:
    """``angle[i] = sym @ sample[:, i] + sum_j w[j] * weight[j][i] + const[i]`` over ``2**m`` indices."""

    sample: np.ndarray  # [n_sample, D]
    weight: dict  # shared weight index -> [D] coefficients (only the weights it uses)
    const: np.ndarray  # [D]

    def key(self) -> bytes:
        weights = b"".join(b"%d:" % j + v.tobytes() for j, v in sorted(self.weight.items()))
        return self.sample.tobytes() + b"|" + weights + b"|" + self.const.tobytes()


def _affine(prims, axis_of: dict, m: int, n_in: int, n_w: int, per_row: bool) -> _Affine:
    bits = _bits(m)
    n_s = n_in + (n_w if per_row else 0)
    out = _Affine(np.zeros((n_s, 2**m)), {}, np.zeros(2**m))
    for p in prims:
        spectrum, a = p.angle_terms()
        vec = spectrum[_local_index(bits, [axis_of[w] for w in p.wires])]
        out.const += a.offset * vec
        if a.kind == "input":
            out.sample[a.index] += a.scale * vec
        elif a.kind == "weight" and per_row:
            out.sample[n_in + a.index] += a.scale * vec
        elif a.kind == "weight":
            out.weight[a.index] = out.weight.get(a.index, 0.0) + a.scale * vec
    return out


def _embed(matrix: np.ndarray, axes: list[int], m: int) -> np.ndarray:
    """``matrix`` acting on ``axes`` of an ``m``-wire register, as a ``2**m`` square matrix."""
    dim, j = 2**m, len(axes)
    t = np.eye(dim, dtype=complex).reshape((2,) * m + (dim,))
    t = np.moveaxis(t, axes, list(range(j)))
    t = (matrix @ t.reshape(2**j, -1)).reshape(t.shape)
    return np.moveaxis(t, list(range(j)), axes).reshape(dim, dim)


@dataclass
class _Structure:
    """A block's unitary ``F[m] diag(e^{i D[m]}) ... diag(e^{i D[1]}) F[0]``; ``D`` affine in weights."""

    fixed: list  # m + 1 constant matrices
    slots: list  # m _Affine maps (weight-dependent)

    def key(self) -> bytes:
        return b"".join(np.ascontiguousarray(f).tobytes() for f in self.fixed) + bytes([len(self.slots)])


def _structure(prims, local: list[int], n_in: int, n_w: int, per_row: bool) -> _Structure:
    m = len(local)
    axis_of = {w: i for i, w in enumerate(local)}
    fixed, slots, current = [], [], np.eye(2**m, dtype=complex)
    for lv, group in _levels(prims, max(local) + 1).items():
        if lv % 2 == 0:
            for p in group:
                current = _embed(p.matrix, [axis_of[w] for w in p.wires], m) @ current
            continue
        aff = _affine(group, axis_of, m, n_in, n_w, per_row)
        if not aff.weight and not aff.sample.any():
            current = np.exp(1j * aff.const)[:, None] * current
            continue
        fixed.append(current)
        slots.append(aff)
        current = np.eye(2**m, dtype=complex)
    fixed.append(current)
    return _Structure(fixed, slots)


# --------------------------------------------------------------------------------------
# 4. layout and stages


@dataclass
class _Stage:
    kind: str  # "perm" | "dense" | "phase"
    batched: bool  # is the state entering this stage [B, d] (True) or the same for every row ([1, d])?
    perm: tuple = ()  # perm: new axis i is old axis perm[i]
    width: int = 0  # dense: acts on the trailing `width` axes (one GEMM)
    unitary: tuple = (-1, -1)  # dense: (stack, member) in the program's unitary stacks
    cols: tuple = (0, 0)  # phase: column range of its phases
    per_sample: bool = False  # phase: a per-sample layer (its columns) or shared phases (columns of p_shared)
    wires: tuple = ()  # logical wires (for describe)
    note: str = ""


@dataclass
class _Plan:
    """Everything a call needs, as torch constants on the device.

    Shared angles ``theta_shared = shared_c + shared_w @ w`` (``[T]``): their first
    ``n_phase`` entries are turned into phases (the weight slots of unitaries and
    shared phase stages); ``theta_shared[sample_bias]`` is the bias of the per-sample
    angles: layer ``l`` (columns ``l*2**n ...``) has ``sym @ sample_a[l] + bias[cols]``
    (``[B, 2**n]``), computed only when a stage needs it.
    """

    n: int
    per_row: bool
    width: int  # fusion width used (n = full width)
    lazy: bool  # single-qubit primitives fused lazily (see _fuse)
    stages: list
    layout: list  # final axis -> logical wire
    final_perm: tuple | None  # axes permutation back to logical order (None: identity)
    shared_w: torch.Tensor | None  # [T, n_w], dense or sparse (None: no shared angle uses a weight)
    shared_c: torch.Tensor  # [T]
    n_phase: int
    sample_a: list  # per distinct per-sample phase layer l: [n_sample, 2**n], its columns l*2**n...
    sample_bias: tuple
    sample_uses: dict  # columns of a per-sample layer -> (first, last) index of the stages using it
    stacks: list  # {"const": [G, K, K]} or {"fixed": [...], "slots": [...], "size": G, "dim": K}
    flops: float = 0.0


# Cost model: seconds per call, forward + backward, calibrated on one CPU core (complex64):
# a complex multiply-add ~0.13 ns per amplitude, an elementwise pass ~0.4 ns, a permuted copy
# 0.4 ns plus ~0.55 ns per extra group of axes that moves; backward ~2x forward.
_STAGE_OVERHEAD = 30e-6  # per stage and call (kernel launches, Python)
_ROWS = 1000  # batch size the model assumes


def _stage_cost(kind: str, n: int, width: int = 0, groups: int = 2) -> float:
    amps = _ROWS * 2**n * 1e-9
    if kind == "dense":
        return _STAGE_OVERHEAD + amps * 3 * (0.13 * 2**width + 0.4)
    if kind == "perm":
        return _STAGE_OVERHEAD + amps * 2 * (0.4 + 0.55 * max(groups - 2, 0))
    return _STAGE_OVERHEAD + amps * 4 * 0.4  # phase


def _place(layout: list, wires: set, n: int) -> list | None:
    """The layout a dense block runs in: None when its wires are already the trailing
    axes (in any order: the block's matrix follows the layout), else them moved last."""
    if set(layout[n - len(wires):]) == wires:
        return None
    return [w for w in layout if w not in wires] + [w for w in layout if w in wires]


def _segments(schedule, k: int, n: int, lazy: bool) -> list:
    """The schedule with segments fused: ``[("phase", prims) | ("blocks", [_Block])]``."""
    return [("phase", group) if kind == "phase" else ("blocks", _fuse(group, k, n, lazy)) for kind, group in schedule]


def _estimate(schedule, n: int, k: int, lazy: bool) -> float:
    """Estimated seconds per call (forward + backward) of the stages a fusion gives."""
    total, layout = 0.0, list(range(n))
    for kind, group in _segments(schedule, k, n, lazy):
        for b in (group if kind == "blocks" else [None]):
            if b is None or b.diagonal:
                total += _stage_cost("phase", n)
                continue
            new = _place(layout, b.wires, n) if k < n else None
            if new is not None:
                perm = tuple(layout.index(w) for w in new)
                total += _stage_cost("perm", n, groups=1 + len(_grouped(perm)[0]))
                layout = new
            total += _stage_cost("dense", n, width=len(b.wires))
    return total


def _choose_fusion(schedule, n: int, fusion: int | None) -> tuple[int, bool]:
    """(block width, lazy single-qubit fusion): the cheapest by the cost model (width ``fusion`` if given)."""
    widths = [min(int(fusion), n)] if fusion is not None else sorted(
        {min(n, k) for k in (1, 2, 3, 4, 5, 6)} | ({n} if n <= 8 else set()))
    options = [(k, lazy) for k in widths for lazy in ((True, False) if k < n else (True,))]
    return min(options, key=lambda o: (_estimate(schedule, n, *o), -o[0], not o[1]))


_DENSE_MAP = 2**22  # the weights -> shared angles map is a dense matrix up to this many entries, else sparse


class _Columns:
    """Allocates columns of the shared angle vector ``theta = c + M @ w`` (affine maps, concatenated)."""

    def __init__(self, n_w: int):
        self.entries: list = []  # (first column, {weight: [D] coefficients})
        self.c: list[np.ndarray] = []
        self.size = 0
        self.n_w = n_w

    def take(self, weight: dict, const: np.ndarray) -> tuple[int, int]:
        if weight:
            self.entries.append((self.size, weight))
        self.c.append(const)
        first, self.size = self.size, self.size + const.shape[0]
        return first, self.size

    def tensors(self, dtype, device) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(M, c)``: ``M`` ``[T, n_w]`` (dense or sparse COO; None when no angle uses a weight)."""
        c = torch.tensor(np.concatenate(self.c) if self.c else np.zeros(0), dtype=dtype, device=device)
        if not self.entries:
            return None, c
        rows, cols, vals = [], [], []
        for first, weight in self.entries:
            for j, v in weight.items():
                nz = np.flatnonzero(v)
                rows.append(first + nz)
                cols.append(np.full(nz.shape, j))
                vals.append(v[nz])
        index = torch.tensor(np.stack([np.concatenate(rows), np.concatenate(cols)]), device=device)
        m = torch.sparse_coo_tensor(index, torch.tensor(np.concatenate(vals), dtype=dtype, device=device),
                                    (self.size, self.n_w), check_invariants=True).coalesce()
        return (m.to_dense() if self.size * self.n_w <= _DENSE_MAP else m), c


def _stack_unitaries(blocks: list, cols: _Columns, dtype, device) -> tuple[list, dict]:
    """Stacks of unitaries: constants by size, weight-built ones by (size, slots).

    ``blocks`` is ``[(block id, _Structure)]``; returns the stack specs and
    ``{block id: (stack, member)}``. The weight slots of one stack take contiguous
    columns per slot, so a slot's phases are one ``[G, K]`` view.
    """
    by_key: dict = {}
    for bid, st in blocks:
        key = (st.fixed[0].shape[0], len(st.slots))
        by_key.setdefault(key, []).append((bid, st))
    stacks, where = [], {}
    for (dim, n_slots), members in by_key.items():
        for j, (bid, _) in enumerate(members):
            where[bid] = (len(stacks), j)
        if n_slots == 0:
            const = np.stack([st.fixed[0] for _, st in members])
            stacks.append({"const": torch.tensor(const, dtype=dtype, device=device)})
            continue
        fixed = []
        for i in range(n_slots + 1):
            mats = np.stack([st.fixed[i] for _, st in members])
            same = all(np.array_equal(mats[0], m) for m in mats[1:])
            fixed.append(torch.tensor(mats[0] if same else mats, dtype=dtype, device=device))
        slots = []
        for s in range(n_slots):
            first = cols.size
            for _, st in members:
                cols.take(st.slots[s].weight, st.slots[s].const)
            slots.append(first)
        stacks.append({"fixed": fixed, "slots": slots, "size": len(members), "dim": dim})
    return stacks, where


def _build_plan(t: CircuitTemplate, per_row: bool, fusion: int | None, dtype, device) -> _Plan:
    n, n_in, n_w = t.n_qubits, t.n_inputs, t.n_weights
    d = 2**n
    sample_kinds = frozenset({"input", "weight"} if per_row else {"input"})
    prims = [p for op in t.ops for p in _lower(op)]
    schedule = _schedule(prims, n, sample_kinds)
    k, lazy = _choose_fusion(schedule, n, fusion)

    stages: list[_Stage] = []
    layout = list(range(n))
    batched, flops = False, 0.0
    cols = _Columns(n_w)
    sample_layers: dict[bytes, tuple[int, int]] = {}  # identical per-sample layers share columns
    sample_affines: list[_Affine] = []
    structures: list = []  # (block id, _Structure)
    shared_phases: list = []  # (stage, _Affine): columns assigned after the unitaries'

    for kind, group in _segments(schedule, k, n, lazy):
        if kind == "phase":
            aff = _affine(group, {w: i for i, w in enumerate(layout)}, n, n_in, n_w, per_row)
            if aff.key() not in sample_layers:
                sample_layers[aff.key()] = (len(sample_affines) * d, (len(sample_affines) + 1) * d)
                sample_affines.append(aff)
            stages.append(_Stage("phase", batched, cols=sample_layers[aff.key()], per_sample=True,
                                 wires=tuple(sorted({w for p in group for w in p.wires})),
                                 note=", ".join(p.label for p in group)))
            batched = True
            flops += 6 * d
            continue
        for b in group:
            wires = tuple(sorted(b.wires))
            note = ", ".join(p.label for p in b.prims) if len(b.prims) <= 6 else f"{len(b.prims)} primitives"
            if b.diagonal:
                stage = _Stage("phase", batched, wires=wires, note=note)
                axis_of = {w: i for i, w in enumerate(layout)}
                shared_phases.append((stage, _affine(b.prims, axis_of, n, n_in, n_w, per_row)))
                stages.append(stage)
                flops += 6 * d
                continue
            new = _place(layout, b.wires, n) if k < n else None
            if new is not None:
                stages.append(_Stage("perm", batched, perm=tuple(layout.index(w) for w in new)))
                layout = new
            local = layout[n - len(b.wires):] if k < n else list(layout)
            st = _structure(b.prims, local, n_in, n_w, per_row)
            structures.append((len(stages), st))
            stages.append(_Stage("dense", batched, width=len(local), wires=wires,
                                 note=f"{note}; {len(st.slots)} weight slot(s)"))
            flops += 8 * d * 2 ** len(local)

    stacks, where = _stack_unitaries(structures, cols, dtype, device)
    for i, stage in enumerate(stages):
        if stage.kind == "dense":
            stage.unitary = where[i]
    for stage, aff in shared_phases:
        stage.cols = cols.take(aff.weight, aff.const)
    n_phase = cols.size
    bias = (cols.size, cols.size)
    if sample_affines:
        first = cols.size
        for aff in sample_affines:
            cols.take(aff.weight, aff.const)
        bias = (first, cols.size)
    real = _REAL[dtype]
    shared_w, shared_c = cols.tensors(real, device)
    return _Plan(
        n=n,
        per_row=per_row,
        width=k,
        lazy=lazy,
        stages=stages,
        layout=layout,
        final_perm=None if layout == list(range(n)) else tuple(layout.index(w) for w in range(n)),
        shared_w=shared_w,
        shared_c=shared_c,
        n_phase=n_phase,
        sample_a=[torch.tensor(a.sample, dtype=real, device=device) for a in sample_affines],
        sample_bias=bias,
        sample_uses=_uses(stages),
        stacks=stacks,
        flops=flops,
    )


def _uses(stages: list) -> dict:
    uses: dict = {}
    for i, st in enumerate(stages):
        if st.kind == "phase" and st.per_sample:
            first, _ = uses.get(st.cols, (i, i))
            uses[st.cols] = (first, i)
    return uses


# --------------------------------------------------------------------------------------
# 5. readout: Pauli terms grouped by X/Y mask, or probabilities


class _Readout:
    """Maps the final state (in the plan's layout) to the output, and back for gradients."""

    def __init__(self, plan: _Plan, terms_per_col: list[list] | None, dtype, device):
        self.n, self.probs = plan.n, terms_per_col is None
        self.final_perm = plan.final_perm
        self.z = self.z2t = None
        self.x: list = []
        if self.probs:
            return
        d, bits = 2**plan.n, _bits(plan.n)
        axis_of = {w: i for i, w in enumerate(plan.layout)}
        z = np.zeros((d, len(terms_per_col)))
        xs: dict[int, np.ndarray] = {}
        for r, terms in enumerate(terms_per_col):
            for coeff, paulis in terms:
                mask, val = 0, np.full(d, complex(coeff))
                for w, p in paulis:
                    b = bits[:, axis_of[w]]
                    if p in "XY":
                        mask |= 1 << (plan.n - 1 - axis_of[w])
                    if p == "Y":
                        val = val * np.where(b == 0, -1j, 1j)
                    elif p == "Z":
                        val = val * (1 - 2 * b)
                if mask == 0:
                    z[:, r] += val.real
                else:
                    xs.setdefault(mask, np.zeros((d, len(terms_per_col)), dtype=complex))[:, r] += val
        real = _REAL[dtype]
        if z.any() or not xs:
            self.z = torch.tensor(z, dtype=real, device=device)
            self.z2t = torch.tensor(2 * z.T, dtype=real, device=device).contiguous()
        for m, mat in sorted(xs.items()):
            self.x.append((torch.tensor(np.arange(d) ^ m, device=device),
                           torch.tensor(mat, dtype=dtype, device=device),
                           torch.tensor(2 * mat.T, dtype=dtype, device=device).contiguous()))

    def __call__(self, psi: torch.Tensor) -> torch.Tensor:
        if self.probs:
            p = torch.view_as_real(psi).square().sum(-1)
            return p if self.final_perm is None else _permute(p, self.final_perm, self.n)
        out = None
        if self.z is not None:
            out = torch.view_as_real(psi).square().sum(-1) @ self.z
        for idx, m, _ in self.x:
            v = ((psi.conj() * psi[:, idx]) @ m).real
            out = v if out is None else out + v
        return out

    def grad(self, psi: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Torch's gradient with respect to ``psi`` given the output's gradient ``g``."""
        if self.probs:
            if self.final_perm is not None:
                g = _permute(g, _inverse(self.final_perm), self.n)
            return psi * (2 * g)
        lam = None
        if self.z is not None:
            lam = psi * (g @ self.z2t)
        for idx, _, m2t in self.x:
            term = psi[:, idx] * (g.to(m2t.dtype) @ m2t)
            lam = term if lam is None else lam + term
        return lam


# --------------------------------------------------------------------------------------
# running a plan


def _inverse(perm: tuple) -> tuple:
    inv = [0] * len(perm)
    for new, old in enumerate(perm):
        inv[old] = new
    return tuple(inv)


@functools.lru_cache(maxsize=4096)
def _grouped(perm: tuple) -> tuple[tuple, tuple]:
    """``perm`` on fewer, larger axes: runs of old axes that stay adjacent move as one.

    Returns (sizes of the grouped old axes, permutation of the groups)."""
    runs: list[list[int]] = []
    for a in perm:
        if runs and a == runs[-1][-1] + 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    order = sorted(range(len(runs)), key=lambda r: runs[r][0])  # groups in old order
    sizes = tuple(2 ** len(runs[r]) for r in order)
    position = {r: i for i, r in enumerate(order)}
    return sizes, tuple(position[r] for r in range(len(runs)))


def _permute(x: torch.Tensor, perm: tuple, n: int) -> torch.Tensor:
    """Permute the qubit axes of ``[..., 2**n]``: new axis i is old axis ``perm[i]``."""
    lead = tuple(x.shape[:-1])
    k = len(lead)
    sizes, order = _grouped(tuple(perm))
    return x.reshape(lead + sizes).permute(*range(k), *(k + a for a in order)).reshape(lead + (-1,))


def _phases(theta: torch.Tensor) -> torch.Tensor:
    """``exp(i theta)`` (``torch.polar`` is several times slower on CPU)."""
    return torch.complex(torch.cos(theta), torch.sin(theta))


class _SamplePhases:
    """Per-sample phases ``exp(+-i (sym @ sample_a[l] + bias[cols]))``, one layer at a time.

    A layer is computed when a stage first asks for it and kept, or, with
    ``release``, dropped after the last stage to use it (``order`` -1: stages are
    visited backwards), so at most a layer or two are alive in the adjoint method.
    """

    def __init__(self, plan: _Plan, sym, bias, sign: int = 1, release: bool = False, order: int = 1):
        self.plan, self.sym, self.bias, self.sign = plan, sym, bias, sign
        self.release, self.order = release, order
        self.cache: dict = {}

    def angles(self, cols: tuple) -> torch.Tensor:
        a, b = cols
        return torch.addmm(self.bias[a:b], self.sym, self.plan.sample_a[a // (b - a)])

    def __call__(self, cols: tuple, stage: int) -> torch.Tensor:
        p = self.cache.get(cols)
        if p is None:
            p = self.cache[cols] = _phases(self.sign * self.angles(cols))
        if self.release and stage == self.plan.sample_uses[cols][1 if self.order > 0 else 0]:
            del self.cache[cols]
        return p


def _apply(st: _Stage, i: int, psi: torch.Tensor, n: int, stacks, p_sample, p_shared) -> torch.Tensor:
    if st.kind == "phase":
        a, b = st.cols
        return psi * (p_sample(st.cols, i) if st.per_sample else p_shared[a:b])
    if st.kind == "dense":
        u = stacks[st.unitary[0]][st.unitary[1]]
        if st.width == n:
            return psi @ u.transpose(0, 1)
        return (psi.reshape(-1, u.shape[0]) @ u.transpose(0, 1)).reshape(psi.shape[0], -1)
    return _permute(psi, st.perm, n)


def _simulate(plan: _Plan, stacks, p_sample, p_shared, dtype, device, keep: list | None = None,
              keep_all: bool = False) -> torch.Tensor:
    """The final state; ``keep`` collects each stage's input (all, or those before the batch appears)."""
    psi = torch.zeros(1, 2**plan.n, dtype=dtype, device=device)
    psi[0, 0] = 1
    for i, st in enumerate(plan.stages):
        if keep is not None and (keep_all or not st.batched):
            keep.append(psi)
        psi = _apply(st, i, psi, plan.n, stacks, p_sample, p_shared)
    return psi


def _build_stacks(plan: _Plan, p_shared: torch.Tensor) -> list[torch.Tensor]:
    """All unitaries, ``[G, K, K]`` per stack: ``F[m] diag(P[m]) ... diag(P[1]) F[0]``, batched."""
    out = []
    for spec in plan.stacks:
        if "const" in spec:
            out.append(spec["const"])
            continue
        size, dim, fixed = spec["size"], spec["dim"], spec["fixed"]
        u = fixed[0]
        for s, first in enumerate(spec["slots"]):
            u = p_shared[first: first + size * dim].view(size, dim, 1) * u
            u = torch.matmul(fixed[s + 1], u)
        out.append(u)
    return out


class _FusedSim(torch.autograd.Function):
    """The state pipeline and readout as one autograd node, with a hand-written backward.

    Backward walks the stages in reverse carrying ``lambda`` (torch's gradient with
    respect to the state) through each stage's adjoint map (``conj(P)``,
    ``conj(U)``, the inverse permutation) and reads each parameter's gradient off
    ``lambda`` and the stage's input or output state. Those states are either kept
    from the forward pass (``uncompute=False``: fastest) or, with the **adjoint
    method** (``uncompute=True``), recomputed backwards by the same adjoint maps:
    ``Z = [lambda, psi]`` is carried as one stacked tensor, so memory stays at a few
    states whatever the depth. Stages before the first per-sample phase act on a
    state that is the same for every row (``[1, d]``); their inputs are always kept.
    """

    @staticmethod
    def forward(ctx, plan, readout, uncompute, sym, bias, p_shared, *stacks):
        keep_all = not uncompute and any(ctx.needs_input_grad)  # else no backward needs the phases either
        p_sample = _SamplePhases(plan, sym, bias, release=not keep_all)
        kept: list = []
        psi = _simulate(plan, stacks, p_sample, p_shared, p_shared.dtype, p_shared.device,
                        keep=kept, keep_all=keep_all)
        ctx.plan, ctx.readout, ctx.kept, ctx.uncompute, ctx.p_sample = plan, readout, kept, uncompute, p_sample
        ctx.save_for_backward(psi, sym, bias, p_shared, *stacks)
        return readout(psi)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        plan, n, kept = ctx.plan, ctx.plan.n, ctx.kept
        psi, sym, bias, p_shared, *stacks = ctx.saved_tensors
        need_sym, need_bias = ctx.needs_input_grad[3], ctx.needs_input_grad[4]
        need_s, need_sh, need_m = need_sym or need_bias, ctx.needs_input_grad[5], ctx.needs_input_grad[6:]
        g_sample: dict = {}
        g_shared = torch.zeros_like(p_shared) if need_sh else None
        g_stacks: list = [None] * len(stacks)
        conj_stacks: dict = {}
        if ctx.uncompute:  # recomputed, one layer at a time, as the stages are visited backwards
            conj_sample = _SamplePhases(plan, sym, bias, sign=-1, release=True, order=-1)
        else:
            forward, conj_cache = ctx.p_sample, {}

            def conj_sample(cols, stage):
                if cols not in conj_cache:
                    conj_cache[cols] = forward(cols, stage).conj().resolve_conj()
                return conj_cache[cols]
        conj_shared = p_shared.conj().resolve_conj()

        def back_map(st: _Stage, s: int, carry: torch.Tensor) -> torch.Tensor:
            """The adjoint of a stage's linear map, on ``[..., rows, d]``."""
            if st.kind == "perm":
                return _permute(carry, _inverse(st.perm), n)
            if st.kind == "phase":
                a, b = st.cols
                return carry * (conj_sample(st.cols, s) if st.per_sample else conj_shared[a:b])
            i, j = st.unitary
            if i not in conj_stacks:
                conj_stacks[i] = stacks[i].conj().resolve_conj()
            k = 2**st.width
            return (carry.reshape(-1, k) @ conj_stacks[i][j]).reshape(carry.shape)

        g_sym = torch.zeros_like(sym) if need_sym else None
        g_bias = torch.zeros_like(bias) if need_bias else None

        def param_grads(st: _Stage, s: int, lam_out, psi_in, psi_out) -> None:
            if st.kind == "phase" and st.per_sample and need_s:
                a, b = st.cols
                # d L / d theta = Im(lambda conj(psi)) at the stage's output: summed as complex
                # products over the stages sharing the layer, the imaginary part taken at its first use
                g = lam_out * psi_out.conj()
                if (a, b) in g_sample:
                    g = g + g_sample.pop((a, b))
                if s != plan.sample_uses[(a, b)][0]:
                    g_sample[(a, b)] = g
                    return
                g_theta = g.imag  # [B, 2**n]
                if need_sym:
                    g_sym.add_(g_theta @ plan.sample_a[a // (b - a)].transpose(0, 1))
                if need_bias:
                    g_bias[a:b] += g_theta.sum(0)
            elif st.kind == "phase" and not st.per_sample and need_sh:
                a, b = st.cols
                g_shared[a:b] += (lam_out * psi_in.conj()).sum(0)
            elif st.kind == "dense" and need_m[st.unitary[0]]:
                i, j = st.unitary
                k = 2**st.width
                if g_stacks[i] is None:
                    g_stacks[i] = torch.zeros_like(stacks[i])
                g_stacks[i][j] += (psi_in.reshape(-1, k).mH @ lam_out.reshape(-1, k)).transpose(0, 1)

        lam = ctx.readout.grad(psi, grad_out.to(psi.real.dtype))
        stacked = ctx.uncompute and bool(plan.sample_a)  # else every stage's input was kept
        carry = torch.stack([lam, psi]) if stacked else lam
        psi_out = psi
        for s in range(len(plan.stages) - 1, -1, -1):
            st = plan.stages[s]
            lam_out = carry[0] if stacked else carry
            new = back_map(st, s, carry)
            psi_in = new[1] if stacked and st.batched else kept[s]
            param_grads(st, s, lam_out, psi_in, psi_out)
            carry, psi_out = new, psi_in
            if st.kind == "phase" and st.per_sample and not st.batched:
                # the first per-sample phase: its input was the same for every row
                carry = (carry[0] if stacked else carry).sum(0, keepdim=True)
                stacked = False
        return (None, None, None, g_sym, g_bias, g_shared, *g_stacks)


# --------------------------------------------------------------------------------------
# the compiled program


def _resolve_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in _REAL:
        return dtype
    if isinstance(dtype, str) and dtype.replace("torch.", "") in _DTYPES:
        return _DTYPES[dtype.replace("torch.", "")]
    raise BackendError(f"unknown dtype {dtype!r} for the compiled backend; use 'complex64' or 'complex128'")


def _resolve_device(device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise BackendError(f"unknown device {device!r} for the compiled backend; use 'cpu' or 'cuda[:i]'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BackendError(f"device {device!r} requested but CUDA is not available (torch {torch.__version__})")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise BackendError(f"device {device!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist")
    elif dev.type != "cpu":
        raise BackendError(f"device {device!r} is not supported by the compiled backend; use 'cpu' or 'cuda[:i]'")
    return dev


def _check_fusion(fusion) -> None:
    if fusion is not None and (not isinstance(fusion, int) or isinstance(fusion, bool) or fusion < 1):
        raise BackendError(f"fusion must be a positive int (the widest fused block, in qubits) or None, got {fusion!r}")


class CompiledProgram:
    """A template compiled for one dtype and device; see the module docstring.

    ``prog(inputs, weights)``: ``inputs`` ``[B, n_inputs]``, ``weights`` ``[n_weights]``
    (shared) or ``[B, n_weights]`` (per row); tensors or arrays. Returns real
    ``[B, n_obs]`` expectation values, differentiable with respect to both.
    """

    def __init__(self, template: CircuitTemplate, dtype=torch.complex64, device="cpu",
                 fusion: int | None = None, gradient: str = "fused", lightcone: bool = True):
        problems = template.problems()
        if problems:
            raise BackendError("; ".join(problems))
        if template.n_qubits > MAX_QUBITS:
            raise BackendError(f"circuit {template.name!r} has {template.n_qubits} qubits; the compiled backend "
                               f"simulates at most {MAX_QUBITS}")
        _check_fusion(fusion)
        if gradient not in _GRADIENTS:
            raise BackendError(f"gradient must be one of {', '.join(_GRADIENTS)}, got {gradient!r}")
        self.template = template
        self.dtype = _resolve_dtype(dtype)
        self.real_dtype = _REAL[self.dtype]
        self._itemsize = torch.empty(0, dtype=self.dtype).element_size()
        self.device = _resolve_device(device)
        self.fusion = fusion
        self.gradient = gradient
        self._plans: dict[bool, _Plan] = {}
        self._readouts: dict = {}
        self._lock = threading.Lock()
        # expectation values only need the observables' light cone (hqflow.ir.passes)
        self.cone = light_cone(template) if lightcone else None
        self._sub = None
        if self.cone is not None and self.cone.reduces:
            self._sub = CompiledProgram(self.cone.template, self.dtype, self.device, fusion, gradient, False)
        else:
            self._plan(False)  # compile eagerly: errors surface here

    # -- compilation (per weight mode, lazily) -------------------------------------
    def _plan(self, per_row: bool) -> _Plan:
        plan = self._plans.get(per_row)
        if plan is None:
            with self._lock:
                plan = self._plans.get(per_row)
                if plan is None:
                    plan = _build_plan(self.template, per_row, self.fusion, self.dtype, self.device)
                    self._plans[per_row] = plan
        return plan

    def _readout(self, plan: _Plan, what: str) -> _Readout:
        key = (plan.per_row, what)
        ro = self._readouts.get(key)
        if ro is None:
            obs = self.template.observables
            if what == "values":
                cols = [[(t.coeff, t.paulis) for t in o.terms] for o in obs]
            elif what == "terms":  # one column per Pauli term, unit coefficient
                cols = [[(1.0, t.paulis)] for o in obs for t in o.terms]
            else:
                cols = None
            ro = self._readouts[key] = _Readout(plan, cols, self.dtype, self.device)
        return ro

    # -- inputs ----------------------------------------------------------------------
    def _coerce(self, inputs, weights) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.template

        def as_tensor(a):
            if a is None:
                return None
            if not isinstance(a, torch.Tensor):
                try:
                    a = torch.as_tensor(np.asarray(a, dtype=float))
                except (TypeError, ValueError):
                    raise BackendError(f"inputs and weights must be numeric arrays, got {type(a).__name__}") from None
            return a.to(device=self.device, dtype=self.real_dtype)

        x, w = as_tensor(inputs), as_tensor(weights)
        if w is None:
            if t.n_weights:
                raise BackendError(f"circuit {t.name!r} needs weights of shape [{t.n_weights}] or [B, {t.n_weights}]")
            w = torch.zeros(t.n_weights, dtype=self.real_dtype, device=self.device)
        if w.ndim not in (1, 2) or w.shape[-1] != t.n_weights:
            raise BackendError(f"weights for {t.name!r} must have shape [{t.n_weights}] or [B, {t.n_weights}], "
                               f"got {list(w.shape)}")
        if x is None:
            if t.n_inputs:
                raise BackendError(f"circuit {t.name!r} needs inputs of shape [B, {t.n_inputs}]")
            x = torch.zeros(w.shape[0] if w.ndim == 2 else 1, 0, dtype=self.real_dtype, device=self.device)
        if x.ndim == 1 and t.n_inputs:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != t.n_inputs:
            raise BackendError(f"inputs for {t.name!r} must have shape [B, {t.n_inputs}], got {list(x.shape)}")
        if w.ndim == 2 and w.shape[0] != x.shape[0]:
            if x.shape[1] == 0 and x.shape[0] == 1:
                x = x.new_zeros(w.shape[0], 0)
            else:
                raise BackendError(f"per-row weights have {w.shape[0]} rows but inputs have {x.shape[0]}")
        return x, w

    # -- the pipeline ------------------------------------------------------------------
    def _run(self, inputs, weights, what: str) -> torch.Tensor:
        x, w = self._coerce(inputs, weights)
        if self._sub is not None and what != "probs":
            cone = self.cone
            out = self._sub._run(x[:, list(cone.inputs)], w[..., list(cone.weights)], what)
            if torch.is_grad_enabled() and (not cone.weights and w.requires_grad or not cone.inputs and x.requires_grad):
                out = out + 0 * (w.sum() + x.sum())  # parameters outside the cone get zero gradients, not None
            return out
        rows = max(1, _CHUNK_AMPLITUDES >> self.template.n_qubits)
        if x.shape[0] > 2 * rows and self.device.type == "cpu":
            # large batches run in cache-sized chunks (faster on CPU; the unitaries are rebuilt per chunk)
            return torch.cat([self._run_rows(x[i: i + rows], w[i: i + rows] if w.ndim == 2 else w, what)
                              for i in range(0, x.shape[0], rows)])
        return self._run_rows(x, w, what)

    def _run_rows(self, x: torch.Tensor, w: torch.Tensor, what: str) -> torch.Tensor:
        per_row = w.ndim == 2
        plan = self._plan(per_row)
        readout = self._readout(plan, what)
        if plan.shared_w is None:
            theta = plan.shared_c
        elif plan.shared_w.is_sparse:
            theta = plan.shared_c + torch.sparse.mm(plan.shared_w, w[:, None])[:, 0]
        else:
            theta = torch.addmv(plan.shared_c, plan.shared_w, w)
        p_shared = _phases(theta[: plan.n_phase])
        sym = torch.cat([x, w], 1) if per_row else x  # the per-sample symbols
        bias = theta[plan.sample_bias[0]: plan.sample_bias[1]]
        stacks = _build_stacks(plan, p_shared)
        if self.gradient != "autograd":
            uncompute = self.gradient == "adjoint" or (
                torch.is_grad_enabled() and len(plan.stages) * x.shape[0] * 2**plan.n * self._itemsize > _KEEP_BYTES)
            out = _FusedSim.apply(plan, readout, uncompute, sym, bias, p_shared, *stacks)
        else:
            p_sample = _SamplePhases(plan, sym, bias, release=not torch.is_grad_enabled())
            out = readout(_simulate(plan, stacks, p_sample, p_shared, self.dtype, self.device))
        return out.expand(x.shape[0], -1) if out.shape[0] != x.shape[0] else out

    def __call__(self, inputs=None, weights=None) -> torch.Tensor:
        """Expectation values ``[B, n_obs]`` (real, differentiable)."""
        if not self.template.observables:
            raise BackendError(f"circuit {self.template.name!r} has no observables; use probs()")
        return self._run(inputs, weights, "values")

    def term_values(self, inputs=None, weights=None) -> torch.Tensor:
        """``<P>`` of every Pauli term of every observable, in order, unit coefficients: ``[B, n_terms]``."""
        return self._run(inputs, weights, "terms")

    def probs(self, inputs=None, weights=None) -> torch.Tensor:
        """Computational-basis probabilities ``[B, 2**n]``, wire 0 most significant."""
        return self._run(inputs, weights, "probs")

    # -- introspection -------------------------------------------------------------------
    def describe(self, per_row: bool = False) -> str:
        """The compiled program (for shared or per-row weights): stages, fusion width, estimated flops.

        With a light cone smaller than the circuit, this is the program that computes
        expectation values (probabilities run the whole circuit)."""
        if self._sub is not None:
            t, r = self.template, self.cone.template
            return (f"compiled {t.name!r} [{t.fingerprint()}]: light cone of the observables: "
                    f"{r.n_qubits} of {t.n_qubits} qubits (wires {list(self.cone.wires)}), {len(r.ops)} of "
                    f"{len(t.ops)} ops, {r.n_inputs} of {t.n_inputs} inputs, {r.n_weights} of {t.n_weights} "
                    f"weights; expectation values run:\n" + self._sub.describe(per_row))
        plan = self._plan(per_row)
        t = self.template
        counts: dict = {}
        for st in plan.stages:
            counts[st.kind] = counts.get(st.kind, 0) + 1
        built = [s for s in plan.stacks if "const" not in s]
        n_sample = len(plan.sample_a)
        lines = [
            (f"compiled {t.name!r} [{t.fingerprint()}]: {t.n_qubits} qubits, {len(t.ops)} ops, "
             f"{t.n_inputs} inputs, {t.n_weights} weights ({'per row' if per_row else 'shared'}), "
             f"{str(self.dtype).replace('torch.', '')} on {self.device}, "
             f"gradient={self.gradient}"),
            f"  fusion width {plan.width}{' (full width)' if plan.width >= plan.n else ''}"
            f"{' (cost model)' if self.fusion is None else ''}"
            f"{'' if plan.width >= plan.n else (', lazy' if plan.lazy else ', eager') + ' single-qubit fusion'}"
            "; stages: "
            + ", ".join(f"{v} {k}" for k, v in counts.items())
            + f"; {n_sample} distinct per-sample phase layer(s); "
            f"{sum(s['size'] for s in built)} unitar{'y' if sum(s['size'] for s in built) == 1 else 'ies'} "
            f"built from weights per call in {len(built)} batched stack(s)",
            f"  estimated {plan.flops:,.0f} real flops per sample (forward)",
        ]
        for i, st in enumerate(plan.stages):
            if st.kind == "perm":
                lines.append(f"  {i:3d} perm    axes {list(st.perm)}")
            elif st.kind == "phase":
                src = "per-sample [B, 2^n]" if st.per_sample else "shared [2^n]"
                lines.append(f"  {i:3d} phase   {src} on wires {list(st.wires)}: {st.note}")
            else:
                spec = plan.stacks[st.unitary[0]]
                how = "constant" if "const" in spec else f"from weights (stack {st.unitary[0]})"
                lines.append(f"  {i:3d} dense   {2 ** st.width}x{2 ** st.width} on wires {list(st.wires)}, "
                             f"{how}: {st.note}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.template.name!r} {self.template.n_qubits}q {self.dtype} {self.device}>"


_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 256


def compile_template(template: CircuitTemplate, dtype=torch.complex64, device="cpu",
                     fusion: int | None = None, adjoint: bool = False, gradient: str | None = None,
                     lightcone: bool = True) -> CompiledProgram:
    """The compiled program for ``template``, memoized by (fingerprint, dtype, device, fusion, gradient).

    ``gradient``: ``"fused"`` (default: one autograd node with a hand-written
    backward that keeps the forward states, switching to the adjoint method by
    itself when they would take more than 2 GiB), ``"adjoint"`` (always the adjoint
    method: states are un-computed, memory stays at a few states; ``adjoint=True``
    is a shorthand) or ``"autograd"`` (plain torch ops recorded by autograd:
    slower, but twice differentiable).

    ``lightcone``: expectation values simulate only the gates and wires in the
    observables' light cone (``hqflow.ir.passes.light_cone``); exact, and much
    faster for local observables of wide, shallow circuits.
    """
    dt, dev = _resolve_dtype(dtype), _resolve_device(device)
    gradient = gradient or ("adjoint" if adjoint else "fused")
    key = (template.fingerprint(), dt, str(dev), fusion, gradient, bool(lightcone))
    with _CACHE_LOCK:
        prog = _CACHE.get(key)
    if prog is None:
        prog = CompiledProgram(template, dt, dev, fusion, gradient, bool(lightcone))
        with _CACHE_LOCK:
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            prog = _CACHE.setdefault(key, prog)
    return prog


def clear_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()


# --------------------------------------------------------------------------------------
# the backend


class CompiledBackend(LocalBackend):
    """Exact and shot modes on compiled torch programs (``compile_template``, cached).

    Jobs run without autograd; for gradients call ``backend.program(template)``
    (a ``CompiledProgram``) on tensors and use torch autograd. Shot mode samples
    honestly from the exact distribution, as ``reference`` does: counts from the
    probabilities, and each Pauli term's ±1 outcome ``shots`` times. Batches are
    run in chunks of at most ``max_amplitudes`` amplitudes (rows x 2**n).
    """

    name = "compiled"

    def __init__(self, dtype="complex64", device="cpu", max_qubits: int | None = None,
                 fusion: int | None = None, max_amplitudes: int = 2**24):
        super().__init__()
        self.dtype = _resolve_dtype(dtype)
        self.device = _resolve_device(device)
        _check_fusion(fusion)
        self.fusion = fusion
        if max_qubits is None:
            max_qubits = 16 if self.device.type == "cpu" else 24
        if not isinstance(max_qubits, int) or not 1 <= max_qubits <= MAX_QUBITS:
            raise BackendError(f"max_qubits must be an int between 1 and {MAX_QUBITS}, got {max_qubits!r}")
        self.max_amplitudes = int(max_amplitudes)
        self._caps = Capabilities("compiled", max_qubits=int(max_qubits), exact=True, shots=True,
                                  gradient="autograd", device=str(self.device))

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def program(self, template: CircuitTemplate) -> CompiledProgram:
        return compile_template(template, self.dtype, self.device, self.fusion)

    def run(self, batch: CircuitBatch) -> BatchResult:
        t = batch.template
        prog = self.program(t)
        chunk = max(1, self.max_amplitudes // 2**t.n_qubits)
        rng = np.random.default_rng(batch.seed)
        parts = [self._run_rows(prog, b, rng) for b in batch.split(chunk)]
        res = parts[0] if len(parts) == 1 else BatchResult.concat(parts)
        res.metadata.update(backend=self.name, dtype=str(self.dtype).replace("torch.", ""), device=str(self.device))
        return res

    def _run_rows(self, prog: CompiledProgram, batch: CircuitBatch, rng: np.random.Generator) -> BatchResult:
        t = batch.template
        with torch.no_grad():
            if not t.observables:
                probs = prog.probs(batch.inputs, batch.weights).double().cpu().numpy()
                if batch.shots is None:
                    return BatchResult(probs=probs)
                probs = np.clip(probs, 0.0, None)
                counts = []
                for row in probs:
                    draws = rng.multinomial(batch.shots, row / row.sum())
                    counts.append({format(int(i), f"0{t.n_qubits}b"): int(draws[i]) for i in np.flatnonzero(draws)})
                return BatchResult(counts=counts)
            if batch.shots is None:
                return BatchResult(values=prog(batch.inputs, batch.weights).double().cpu().numpy())
            exact = prog.term_values(batch.inputs, batch.weights).double().cpu().numpy()  # [B, n_terms]
        return _sample_terms(t, exact, batch.shots, rng)


def _sample_terms(t: CircuitTemplate, exact: np.ndarray, shots: int, rng: np.random.Generator) -> BatchResult:
    """Honest shot estimates: each Pauli term's ±1 outcome drawn ``shots`` times (as ``reference``)."""
    rows = exact.shape[0]
    values = np.zeros((rows, t.n_observables))
    variance = np.zeros_like(values)
    col = 0
    for j, obs in enumerate(t.observables):
        for term in obs.terms:
            e = np.ones(rows) if not term.paulis else exact[:, col]
            col += 1
            p_plus = np.clip((1 + e) / 2, 0.0, 1.0)
            plus = rng.binomial(shots, p_plus)
            mean = (2 * plus - shots) / shots
            values[:, j] += term.coeff * mean
            var = (1 - mean**2) * shots / max(shots - 1, 1)
            variance[:, j] += term.coeff**2 * var / shots
    return BatchResult(values=values, stderr=np.sqrt(variance))
