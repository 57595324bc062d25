"""Pass 4: the plan, a template's stages (permutations, dense blocks, phases) and their constants.

``_build_plan`` lowers, schedules and fuses a template (cost model: ``cost``),
lays out the state's axes so that each block acts on the trailing ones, and
collects the angle maps and unitary stacks as torch constants on the device.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from hqflow.ir.circuit import CircuitTemplate

from . import config
from .affine import _Affine, _affine, _pieces, _structure
from .config import _REAL
from .cost import _choose_fusion, _place, _segments
from .lower import _lower, _schedule


@dataclass
class _Stage:
    kind: str  # "perm" | "dense" | "phase"
    batched: bool  # is the state entering this stage [B, d] (True) or the same for every row ([1, d])?
    perm: tuple = ()  # perm: new axis i is old axis perm[i]
    width: int = 0  # dense: acts on the `width` axes from `at` (one GEMM; trailing axes when at + width == n)
    at: int = 0
    unitary: tuple = (-1, -1)  # dense: (stack, member) in the program's unitary stacks
    pieces: tuple = ()  # phase: its factors (``_Piece``); the stage multiplies the state by each one's phases
    per_sample: bool = False  # phase: per-sample pieces (columns of the per-sample angles) or shared (of p_shared)
    wires: tuple = ()  # logical wires (for describe)
    note: str = ""


@dataclass(eq=False)
class _Piece:
    """One factor of a phase stage: ``2**k`` phases on the state axes ``axes`` (ascending), broadcast over
    the rest. The state ``[..., 2**n]`` is viewed as ``dims`` (runs of those axes and the gaps between them)
    and the phases ``[..., 2**k]`` as ``shape`` (a run's size, 1 on a gap); ``dims == (2**n,)`` is a full
    table. ``cols``: its columns, in the per-sample angles or in ``p_shared``."""

    axes: tuple
    dims: tuple
    shape: tuple
    cols: tuple = (0, 0)

    @staticmethod
    def on(axes: tuple, n: int, cols: tuple = (0, 0)) -> _Piece:
        dims, shape, at = [], [], 0
        for a in axes:
            if dims and a == at and shape[-1] != 1:  # extends the current run
                dims[-1] *= 2
                shape[-1] *= 2
            else:
                if a > at:
                    dims.append(2 ** (a - at))
                    shape.append(1)
                dims.append(2)
                shape.append(2)
            at = a + 1
        if at < n:
            dims.append(2 ** (n - at))
            shape.append(1)
        return _Piece(tuple(axes), tuple(dims), tuple(shape), cols)

    @property
    def full(self) -> bool:
        return len(self.dims) == 1


@dataclass
class _Plan:
    """Everything a call needs, as torch constants on the device.

    Shared angles ``theta_shared = shared_c + shared_w @ w`` (``[T]``, ``_shared_angles``): their first
    ``n_phase`` entries are turned into phases (the weight slots of unitaries and
    shared phase pieces); ``theta_shared[sample_bias]`` is the bias of the per-sample
    angles: the piece with columns ``cols`` has ``sym @ sample_a[cols] + bias[cols]``
    (``[B, 2**k]``), computed only when a stage needs it.
    """

    n: int
    per_row: bool
    width: int  # fusion width used (n = full width)
    lazy: bool  # single-qubit primitives fused lazily (see _fuse)
    stages: list
    layout: list  # final axis -> logical wire
    final_perm: tuple | None  # axes permutation back to logical order (None: identity)
    shared_w: torch.Tensor | _WeightMap | None  # [T, n_w]: dense, or gathered (None: no shared angle uses a weight)
    shared_c: torch.Tensor  # [T]
    n_phase: int
    sample_a: dict  # per distinct per-sample piece, by its columns: [n_sample, 2**k]
    sample_bias: tuple
    sample_uses: dict  # columns of a per-sample piece -> (first, last) index of the stages using it
    stacks: list  # {"const": [G, K, K]} or {"fixed": [...], "slots": [...], "size": G, "dim": K}
    flops: float = 0.0


@dataclass
class _WeightMap:
    """The weights -> shared angles map ``M`` ``[T, n_w]`` where a dense matrix would be too large, as gathers:
    no sparse tensor (torch's sparse kernels warn on CUDA and their backward adds with atomics).

    ``rows`` ``[R]`` are the rows of ``M`` that use a weight; row ``rows[r]`` is its (weight, coefficient)
    pairs ``(index[r], coef[r])``, padded with (0, 0.0) to the longest row's count ``k``, so
    ``(M @ w)[rows] = (coef * w[index]).sum(1)``. The transpose is kept the same way for the backward:
    column ``j`` of ``M`` as (position in ``rows``, coefficient) pairs ``(index_t[j], coef_t[j])``, padded to
    ``k_t``. Both directions are gathers and sums, so values and gradients are the same on every run and
    device; memory ``R * k + n_w * k_t`` pairs.
    """

    size: int  # T
    rows: torch.Tensor  # [R] long, ascending
    index: torch.Tensor  # [R, k] long
    coef: torch.Tensor  # [R, k]
    index_t: torch.Tensor  # [n_w, k_t] long, into rows
    coef_t: torch.Tensor  # [n_w, k_t]

    @staticmethod
    def build(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, size: int, n_w: int, dtype, device) -> _WeightMap:
        """From the nonzero entries ``M[rows, cols] = vals`` (each (row, col) once)."""
        used, row_of = np.unique(rows, return_inverse=True)
        index, coef = _padded(row_of, cols, vals, used.size)
        index_t, coef_t = _padded(cols, row_of, vals, n_w)

        def tensor(a, dt):
            return torch.tensor(a, dtype=dt, device=device)

        return _WeightMap(size, tensor(used, torch.long), tensor(index, torch.long), tensor(coef, dtype),
                          tensor(index_t, torch.long), tensor(coef_t, dtype))


def _padded(group: np.ndarray, other: np.ndarray, vals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Entries ``(group, other, vals)`` as ``[n, k]`` tables: for each group its ``other`` and ``vals`` in
    ascending ``other``, padded with (0, 0.0) to the largest group's count ``k``."""
    order = np.lexsort((other, group))
    group, other, vals = group[order], other[order], vals[order]
    counts = np.bincount(group, minlength=n)
    k = int(counts.max()) if counts.size else 0
    slot = np.arange(group.size) - np.repeat(np.cumsum(counts) - counts, counts)
    index, coef = np.zeros((n, k), dtype=np.int64), np.zeros((n, k))
    index[group, slot], coef[group, slot] = other, vals
    return index, coef


class _MapTimesWeights(torch.autograd.Function):
    """``(M @ w)[rows]`` for a ``_WeightMap``; the backward gathers through the transpose (no scatter-add)."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, m: _WeightMap) -> torch.Tensor:
        ctx.m = m
        return (m.coef * w[m.index]).sum(1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        m = ctx.m
        return (m.coef_t * grad[m.index_t]).sum(1), None


def _shared_angles(plan: _Plan, w: torch.Tensor) -> torch.Tensor:
    """``theta_shared = shared_c + shared_w @ w`` ``[T]`` for shared weights ``w`` ``[n_w]`` (differentiable)."""
    m, c = plan.shared_w, plan.shared_c
    if m is None:
        return c
    if isinstance(m, torch.Tensor):
        return torch.addmv(c, m, w)
    return c.index_put((m.rows,), c[m.rows] + _MapTimesWeights.apply(w, m))  # rows are distinct: no accumulation


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

    def tensors(self, dtype, device) -> tuple[torch.Tensor | _WeightMap | None, torch.Tensor]:
        """``(M, c)``: ``M`` ``[T, n_w]`` (a dense matrix up to ``config._DENSE_MAP`` entries, else a
        ``_WeightMap``; None when no angle uses a weight)."""
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
        rows, cols, vals = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
        if self.size * self.n_w > config._DENSE_MAP:
            return _WeightMap.build(rows, cols, vals, self.size, self.n_w, dtype, device), c
        m = torch.zeros((self.size, self.n_w), dtype=dtype, device=device)
        m[torch.tensor(rows, device=device), torch.tensor(cols, device=device)] = torch.tensor(vals, dtype=dtype,
                                                                                                device=device)
        return m, c


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
    sample = _SampleColumns()
    structures: list = []  # (block id, _Structure)
    shared_phases: list = []  # (piece, _Affine): columns assigned after the unitaries'

    for kind, group in _segments(schedule, k, n, lazy):
        if kind == "phase":
            pieces = [sample.piece(axes, aff, n) for axes, aff in _piece_affines(group, layout, n, n_in, n_w, per_row)]
            stages.append(_Stage("phase", batched, pieces=tuple(pieces), per_sample=True,
                                 wires=tuple(sorted({w for p in group for w in p.wires})),
                                 note=", ".join(p.label for p in group)))
            batched = True
            flops += 6 * d * len(pieces)
            continue
        for b in group:
            wires = tuple(sorted(b.wires))
            note = ", ".join(p.label for p in b.prims) if len(b.prims) <= 6 else f"{len(b.prims)} primitives"
            if b.diagonal:
                parts = [(_Piece.on(axes, n), aff) for axes, aff in _piece_affines(b.prims, layout, n, n_in, n_w, per_row)]
                shared_phases.extend(parts)
                stages.append(_Stage("phase", batched, pieces=tuple(pc for pc, _ in parts), wires=wires, note=note))
                flops += 6 * d * len(parts)
                continue
            new, at = _place(layout, b.wires, n, k)
            if new is not None:
                stages.append(_Stage("perm", batched, perm=tuple(layout.index(w) for w in new)))
                layout = new
            local = layout[at: at + len(b.wires)] if k < n else list(layout)
            st = _structure(b.prims, local, n_in, n_w, per_row)
            structures.append((len(stages), st))
            stages.append(_Stage("dense", batched, width=len(local), at=at, wires=wires,
                                 note=f"{note}; {len(st.slots)} weight slot(s)"))
            flops += 8 * d * 2 ** len(local)

    stacks, where = _stack_unitaries(structures, cols, dtype, device)
    for i, stage in enumerate(stages):
        if stage.kind == "dense":
            stage.unitary = where[i]
    for piece, aff in shared_phases:
        piece.cols = cols.take(aff.weight, aff.const)
    n_phase = cols.size
    bias = (cols.size, cols.size)
    if sample.affines:
        first = cols.size
        for aff in sample.affines:
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
        sample_a={c: torch.tensor(a.sample, dtype=real, device=device) for c, a in zip(sample.columns, sample.affines)},
        sample_bias=bias,
        sample_uses=_uses(stages),
        stacks=stacks,
        flops=flops,
    )


def _piece_affines(prims, layout: list, n: int, n_in: int, n_w: int, per_row: bool) -> list:
    """A diagonal layer (in the state's ``layout``) as ``[(axes, _Affine over those axes)]`` (``_pieces``)."""
    axis_of = {w: i for i, w in enumerate(layout)}
    out = []
    for axes, group in _pieces(prims, axis_of, n, config._WIDE):
        local = {w: axes.index(axis_of[w]) for p in group for w in p.wires}
        out.append((axes, _affine(group, local, len(axes), n_in, n_w, per_row)))
    return out


class _SampleColumns:
    """Columns of the per-sample angles: identical pieces (same axes, same map) share theirs."""

    def __init__(self):
        self.by_key: dict = {}
        self.affines: list[_Affine] = []
        self.columns: list[tuple] = []
        self.size = 0

    def piece(self, axes: tuple, aff: _Affine, n: int) -> _Piece:
        key = (axes, aff.key())
        if key not in self.by_key:
            self.by_key[key] = (self.size, self.size + aff.const.shape[0])
            self.size += aff.const.shape[0]
            self.affines.append(aff)
            self.columns.append(self.by_key[key])
        return _Piece.on(axes, n, self.by_key[key])


def _uses(stages: list) -> dict:
    uses: dict = {}
    for i, st in enumerate(stages):
        if st.kind == "phase" and st.per_sample:
            for pc in st.pieces:
                first, _ = uses.get(pc.cols, (i, i))
                uses[pc.cols] = (first, i)
    return uses
