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
   gather into phase stages of any width. ``k`` comes from a small cost model
   (``_choose_width``) or ``fusion=``; for small ``n`` it is the full width, so a
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
from dataclasses import dataclass, field

import numpy as np
import torch

from hqflow.ir.circuit import Angle, CircuitTemplate, Op
from hqflow.ir.gates import GATES, gate_matrix

from .base import BackendError, BatchResult, Capabilities, CircuitBatch, LocalBackend

__all__ = ["CompiledBackend", "CompiledProgram", "compile_template", "clear_cache"]

_DTYPES = {"complex64": torch.complex64, "complex128": torch.complex128}
_GRADIENTS = ("fused", "adjoint", "autograd")
MAX_QUBITS = 26  # hard limit of compile_template (CompiledBackend defaults to 16 on CPU)
_KEEP_BYTES = 512 * 2**20  # "fused" keeps forward states up to this size, else un-computes them
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


def _fuse(prims: list[_Prim], k: int, n: int) -> list[_Block]:
    """Greedy in-order fusion into blocks of at most ``k`` wires (``k >= n``: one block).

    A primitive may join block ``j`` when every later block commutes with it on its
    wires: ``j`` at or after the last block touching them, or, for a diagonal
    primitive, the last block holding a non-diagonal primitive on them (diagonal
    primitives commute). It joins the block it widens least (the latest on ties).
    A diagonal primitive that fits in no block joins the latest all-diagonal block
    it may join, whatever its width (it runs as one phase multiply), or starts one.
    """
    if k >= n:
        return [_Block(set(range(n)), list(prims))] if prims else []
    blocks: list[_Block] = []
    last_any: dict[int, int] = {}
    last_nd: dict[int, int] = {}
    for p in prims:
        wires = set(p.wires)
        first = max(((last_nd if p.diagonal else last_any).get(w, -1) for w in wires), default=-1)
        first = max(first, 0)
        best, grow = None, None
        for j in range(first, len(blocks)):
            union = len(blocks[j].wires | wires)
            if union <= k and (grow is None or union - len(blocks[j].wires) <= grow):
                best, grow = j, union - len(blocks[j].wires)
        if best is None and p.diagonal:
            best = next((j for j in range(len(blocks) - 1, first - 1, -1) if blocks[j].diagonal), None)
        if best is None:
            blocks.append(_Block(set(), []))
            best = len(blocks) - 1
        blocks[best].wires |= wires
        blocks[best].prims.append(p)
        for w in wires:
            last_any[w] = max(last_any.get(w, -1), best)
            if not p.diagonal:
                last_nd[w] = best
    return blocks


# --------------------------------------------------------------------------------------
# affine phase maps and block structures (numpy, compile time)


def _bits(m: int) -> np.ndarray:
    """``[2**m, m]`` 0/1 table; column a is axis a (axis 0 most significant)."""
    idx = np.arange(2**m)
    return ((idx[:, None] >> (m - 1 - np.arange(m))[None, :]) & 1).astype(np.int64)


def _local_index(bits: np.ndarray, axes: list[int]) -> np.ndarray:
    out = np.zeros(bits.shape[0], dtype=np.int64)
    for a in axes:
        out = (out << 1) | bits[:, a]
    return out


@dataclass
class _Affine:
    """``angle[i] = sym @ A_sample[:, i] + w @ A_weight[:, i] + c[i]`` over ``2**m`` indices."""

    sample: np.ndarray  # [n_sample, D]
    weight: np.ndarray  # [n_weights, D] (shared weights only)
    const: np.ndarray  # [D]

    def key(self) -> bytes:
        return self.sample.tobytes() + b"|" + self.weight.tobytes() + b"|" + self.const.tobytes()


def _affine(prims, axis_of: dict, m: int, n_in: int, n_w: int, per_row: bool) -> _Affine:
    bits = _bits(m)
    n_s = n_in + (n_w if per_row else 0)
    out = _Affine(np.zeros((n_s, 2**m)), np.zeros((n_w, 2**m)), np.zeros(2**m))
    for p in prims:
        spectrum, a = p.angle_terms()
        vec = spectrum[_local_index(bits, [axis_of[w] for w in p.wires])]
        out.const += a.offset * vec
        if a.kind == "input":
            out.sample[a.index] += a.scale * vec
        elif a.kind == "weight" and per_row:
            out.sample[n_in + a.index] += a.scale * vec
        elif a.kind == "weight":
            out.weight[a.index] += a.scale * vec
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
        if not aff.weight.any() and not aff.sample.any():
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
    width: int = 0  # dense: acts on the trailing `width` axes
    unitary: tuple = (-1, -1)  # dense: (stack, member) in the program's unitary stacks
    cols: tuple = (0, 0)  # phase: column range of its phases
    per_sample: bool = False  # phase: from theta_sample [B, T] (else from the shared phases [T])
    wires: tuple = ()  # logical wires (for describe)
    note: str = ""


@dataclass
class _Plan:
    """Everything a call needs, as torch constants on the device.

    Shared angles ``theta_shared = shared_c + shared_w @ w`` (``[T]``): their first
    ``n_phase`` entries are turned into phases (the weight slots of unitaries and
    shared phase stages); ``theta_shared[sample_bias]`` is the bias of the per-sample
    angles ``theta_sample = sym @ sample_a + bias`` (``[B, T_sample]``).
    """

    n: int
    per_row: bool
    width: int  # fusion width used (n = full width)
    stages: list
    layout: list  # final axis -> logical wire
    final_perm: tuple | None  # axes permutation back to logical order (None: identity)
    shared_w: torch.Tensor | None  # [T, n_w]
    shared_c: torch.Tensor  # [T]
    n_phase: int
    sample_a: torch.Tensor | None  # [n_sample, T_sample]
    sample_bias: tuple
    stacks: list  # {"const": [G, K, K]} or {"fixed": [...], "slots": [...], "size": G, "dim": K}
    flops: float = 0.0


# cost model (seconds, forward + backward; rough, measured on a 2-core CPU)
_STAGE_OVERHEAD = 60e-6  # per stage and call, independent of the batch
_PASS = 2.5e-9  # per amplitude, one memory pass
_MAC = 0.25e-9  # per amplitude and complex multiply-add


def _stage_cost(kind: str, width: int, n: int, rows: int) -> float:
    d = rows * 2**n
    if kind == "dense":
        return _STAGE_OVERHEAD + d * (2 * _PASS + _MAC * 2**width)
    return _STAGE_OVERHEAD + d * _PASS


def _move_last(layout: list, wires: set) -> list:
    return [w for w in layout if w not in wires] + [w for w in layout if w in wires]


def _estimate(schedule, n: int, k: int, rows: int = 1000) -> float:
    """Estimated seconds per call of the stages that fusion width ``k`` gives."""
    total, layout = 0.0, list(range(n))
    for kind, prims in schedule:
        if kind == "phase":
            total += _stage_cost("phase", 0, n, rows)
            continue
        for b in _fuse(prims, k, n):
            if b.diagonal:
                total += _stage_cost("phase", 0, n, rows)
                continue
            if k < n and set(layout[n - len(b.wires):]) != b.wires:
                layout = _move_last(layout, b.wires)
                total += _stage_cost("perm", 0, n, rows)
            total += _stage_cost("dense", len(b.wires), n, rows)
    return total


def _choose_width(schedule, n: int, fusion: int | None) -> int:
    if fusion is not None:
        return min(int(fusion), n)
    candidates = sorted({min(n, k) for k in (1, 2, 3, 4, 5, 6)} | ({n} if n <= 8 else set()))
    return min(candidates, key=lambda k: (_estimate(schedule, n, k), -k))


class _Columns:
    """Allocates columns of the shared angle vector (weights' affine maps, concatenated)."""

    def __init__(self, n_w: int):
        self.w: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.size = 0
        self.n_w = n_w

    def take(self, weight: np.ndarray, const: np.ndarray) -> tuple[int, int]:
        self.w.append(weight)
        self.c.append(const)
        first, self.size = self.size, self.size + const.shape[0]
        return first, self.size

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.size:
            return np.zeros((self.n_w, 0)), np.zeros(0)
        return np.concatenate(self.w, axis=1), np.concatenate(self.c)


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
    k = _choose_width(schedule, n, fusion)

    stages: list[_Stage] = []
    layout = list(range(n))
    batched, flops = False, 0.0
    cols = _Columns(n_w)
    sample_layers: dict[bytes, tuple[int, int]] = {}  # identical per-sample layers share columns
    sample_affines: list[_Affine] = []
    structures: list = []  # (block id, _Structure)
    shared_phases: list = []  # (stage, _Affine): columns assigned after the unitaries'

    for kind, group in schedule:
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
        for b in _fuse(group, k, n):
            wires = tuple(sorted(b.wires))
            note = ", ".join(p.label for p in b.prims) if len(b.prims) <= 6 else f"{len(b.prims)} primitives"
            if b.diagonal:
                stage = _Stage("phase", batched, wires=wires, note=note)
                axis_of = {w: i for i, w in enumerate(layout)}
                shared_phases.append((stage, _affine(b.prims, axis_of, n, n_in, n_w, per_row)))
                stages.append(stage)
                flops += 6 * d
                continue
            if k < n and set(layout[n - len(b.wires):]) != b.wires:
                new = _move_last(layout, b.wires)
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
    w_all, c_all = cols.arrays()
    real = _REAL[dtype]
    return _Plan(
        n=n,
        per_row=per_row,
        width=k,
        stages=stages,
        layout=layout,
        final_perm=None if layout == list(range(n)) else tuple(layout.index(w) for w in range(n)),
        shared_w=torch.tensor(w_all.T, dtype=real, device=device).contiguous() if w_all.any() else None,
        shared_c=torch.tensor(c_all, dtype=real, device=device),
        n_phase=n_phase,
        sample_a=(torch.tensor(np.concatenate([a.sample for a in sample_affines], axis=1), dtype=real, device=device)
                  if sample_affines else None),
        sample_bias=bias,
        stacks=stacks,
        flops=flops,
    )


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


def _apply(st: _Stage, psi: torch.Tensor, n: int, stacks, p_sample, p_shared) -> torch.Tensor:
    if st.kind == "phase":
        a, b = st.cols
        return psi * (p_sample[:, a:b] if st.per_sample else p_shared[a:b])
    if st.kind == "dense":
        u = stacks[st.unitary[0]][st.unitary[1]]
        if st.width == n:
            return psi @ u.transpose(0, 1)
        return (psi.reshape(-1, u.shape[0]) @ u.transpose(0, 1)).reshape(psi.shape[0], -1)
    return _permute(psi, st.perm, n)


def _im_conj(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``Im(a * conj(b))``."""
    ar, br = torch.view_as_real(a), torch.view_as_real(b)
    return ar[..., 1] * br[..., 0] - ar[..., 0] * br[..., 1]


def _simulate(plan: _Plan, stacks, p_sample, p_shared, dtype, device, keep: list | None = None,
              keep_all: bool = False) -> torch.Tensor:
    """The final state; ``keep`` collects each stage's input (all, or those before the batch appears)."""
    psi = torch.zeros(1, 2**plan.n, dtype=dtype, device=device)
    psi[0, 0] = 1
    for st in plan.stages:
        if keep is not None and (keep_all or not st.batched):
            keep.append(psi)
        psi = _apply(st, psi, plan.n, stacks, p_sample, p_shared)
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
    def forward(ctx, plan, readout, uncompute, theta_sample, p_shared, *stacks):
        p_sample = None if theta_sample is None else _phases(theta_sample)
        kept: list = []
        keep_all = not uncompute and any(ctx.needs_input_grad)
        psi = _simulate(plan, stacks, p_sample, p_shared, p_shared.dtype, p_shared.device,
                        keep=kept, keep_all=keep_all)
        ctx.plan, ctx.readout, ctx.kept, ctx.uncompute, ctx.p_sample = plan, readout, kept, uncompute, p_sample
        ctx.save_for_backward(psi, p_shared, *stacks)
        return readout(psi)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        plan, n, kept, p_sample = ctx.plan, ctx.plan.n, ctx.kept, ctx.p_sample
        psi, p_shared, *stacks = ctx.saved_tensors
        need_s, need_sh, need_m = ctx.needs_input_grad[3], ctx.needs_input_grad[4], ctx.needs_input_grad[5:]
        g_sample: dict = {}
        g_shared = torch.zeros_like(p_shared) if need_sh else None
        g_stacks: list = [None] * len(stacks)
        conj_stacks: dict = {}
        conj_sample = None if p_sample is None else p_sample.conj().resolve_conj()
        conj_shared = p_shared.conj().resolve_conj()

        def back_map(st: _Stage, carry: torch.Tensor) -> torch.Tensor:
            """The adjoint of a stage's linear map, on ``[..., rows, d]``."""
            if st.kind == "perm":
                return _permute(carry, _inverse(st.perm), n)
            if st.kind == "phase":
                a, b = st.cols
                return carry * (conj_sample[:, a:b] if st.per_sample else conj_shared[a:b])
            i, j = st.unitary
            if i not in conj_stacks:
                conj_stacks[i] = stacks[i].conj().resolve_conj()
            k = 2**st.width
            return (carry.reshape(-1, k) @ conj_stacks[i][j]).reshape(carry.shape)

        def param_grads(st: _Stage, lam_out, psi_in, psi_out) -> None:
            if st.kind == "phase" and st.per_sample and need_s:
                a, b = st.cols
                g = _im_conj(lam_out, psi_out)  # d L / d theta
                g_sample[(a, b)] = g if (a, b) not in g_sample else g_sample[(a, b)] + g
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
        stacked = ctx.uncompute and plan.sample_a is not None  # else every stage's input was kept
        carry = torch.stack([lam, psi]) if stacked else lam
        psi_out = psi
        for s in range(len(plan.stages) - 1, -1, -1):
            st = plan.stages[s]
            lam_out = carry[0] if stacked else carry
            new = back_map(st, carry)
            psi_in = new[1] if stacked and st.batched else kept[s]
            param_grads(st, lam_out, psi_in, psi_out)
            carry, psi_out = new, psi_in
            if st.kind == "phase" and st.per_sample and not st.batched:
                # the first per-sample phase: its input was the same for every row
                carry = (carry[0] if stacked else carry).sum(0, keepdim=True)
                stacked = False
        g_s = None
        if need_s and g_sample:
            if len(g_sample) == 1 and next(iter(g_sample)) == (0, p_sample.shape[1]):
                g_s = next(iter(g_sample.values()))
            else:
                g_s = torch.zeros_like(p_sample.real)
                for (a, b), g in g_sample.items():
                    g_s[:, a:b] += g
        return (None, None, None, g_s, g_shared, *g_stacks)


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
                 fusion: int | None = None, gradient: str = "fused"):
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
        per_row = w.ndim == 2
        plan = self._plan(per_row)
        readout = self._readout(plan, what)
        theta = plan.shared_c if plan.shared_w is None else torch.addmv(plan.shared_c, plan.shared_w, w)
        p_shared = _phases(theta[: plan.n_phase])
        theta_sample = None
        if plan.sample_a is not None:
            sym = torch.cat([x, w], 1) if per_row else x
            a, b = plan.sample_bias
            theta_sample = torch.addmm(theta[a:b], sym, plan.sample_a)
        stacks = _build_stacks(plan, p_shared)
        if self.gradient != "autograd":
            uncompute = self.gradient == "adjoint" or (
                torch.is_grad_enabled() and len(plan.stages) * x.shape[0] * 2**plan.n * self._itemsize > _KEEP_BYTES)
            out = _FusedSim.apply(plan, readout, uncompute, theta_sample, p_shared, *stacks)
        else:
            p_sample = None if theta_sample is None else _phases(theta_sample)
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
        """The compiled program (for shared or per-row weights): stages, fusion width, estimated flops."""
        plan = self._plan(per_row)
        t = self.template
        counts: dict = {}
        for st in plan.stages:
            counts[st.kind] = counts.get(st.kind, 0) + 1
        built = [s for s in plan.stacks if "const" not in s]
        n_sample = 0 if plan.sample_a is None else plan.sample_a.shape[1] // 2**plan.n
        lines = [
            f"compiled {t.name!r} [{t.fingerprint()}]: {t.n_qubits} qubits, {len(t.ops)} ops, "
            f"{t.n_inputs} inputs, {t.n_weights} weights ({'per row' if per_row else 'shared'}), "
            f"{str(self.dtype).replace('torch.', '')} on {self.device}, "
            f"gradient={self.gradient}",
            f"  fusion width {plan.width}{' (full width)' if plan.width >= plan.n else ''}"
            f"{' (cost model)' if self.fusion is None else ''}; stages: "
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
                     fusion: int | None = None, adjoint: bool = False, gradient: str | None = None) -> CompiledProgram:
    """The compiled program for ``template``, memoized by (fingerprint, dtype, device, fusion, gradient).

    ``gradient``: ``"fused"`` (default: one autograd node with a hand-written
    backward that keeps the forward states, switching to the adjoint method by
    itself when they would take more than 512 MiB), ``"adjoint"`` (always the adjoint
    method: states are un-computed, memory stays at a few states; ``adjoint=True``
    is a shorthand) or ``"autograd"`` (plain torch ops recorded by autograd:
    slower, but twice differentiable).
    """
    dt, dev = _resolve_dtype(dtype), _resolve_device(device)
    gradient = gradient or ("adjoint" if adjoint else "fused")
    key = (template.fingerprint(), dt, str(dev), fusion, gradient)
    with _CACHE_LOCK:
        prog = _CACHE.get(key)
    if prog is None:
        prog = CompiledProgram(template, dt, dev, fusion, gradient)
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
