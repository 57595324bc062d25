"""The fusion cost model: which block width (and lazy or eager single-qubit fusion) to use.

Its two tunables, ``_STAGE_OVERHEAD`` and ``_ROWS``, live in ``config``.
"""
from __future__ import annotations

from . import config
from .fuse import _fuse
from .perm import _grouped

# Cost model: seconds per call, forward + backward, calibrated on one CPU core (complex64):
# a complex multiply-add ~0.13 ns per amplitude, an elementwise pass ~0.4 ns, a permuted copy
# 0.4 ns plus ~0.55 ns per extra group of axes that moves; backward ~2x forward. Per stage and
# call it adds config._STAGE_OVERHEAD, and it assumes batches of config._ROWS rows.


def _stage_cost(kind: str, n: int, width: int = 0, groups: int = 2) -> float:
    amps = config._ROWS * 2**n * 1e-9
    if n > config._WIDE:  # the state is far larger than the caches: every pass costs a trip to memory (~4 ns
        # per amplitude on one core, measured at 22 qubits), a dense block 0.12 ns per multiply-add on top
        per_pass = {"dense": 3 * (4.0 + 0.12 * 2**width), "perm": 2 * 5.0}.get(kind, 4 * 4.0)
        return amps * per_pass
    if kind == "dense":
        return config._STAGE_OVERHEAD + amps * 3 * (0.13 * 2**width + 0.4)
    if kind == "perm":
        return config._STAGE_OVERHEAD + amps * 2 * (0.4 + 0.55 * max(groups - 2, 0))
    return config._STAGE_OVERHEAD + amps * 4 * 0.4  # phase


def _place(layout: list, wires: set, n: int, k: int) -> tuple[list | None, int]:
    """Where a dense block of width ``k`` runs: ``(new layout or None, first axis)``.

    Full width: the whole state. Past ``config._WIDE`` qubits a block whose wires are adjacent axes (in any
    order: the block's matrix follows the layout) runs in place there; one whose wires are adjacent in the
    wires' own order, or cyclically so (a ring's closing gate), runs after a permutation to that order, or to
    its rotation that starts at the block, so that the blocks after it stay adjacent too. Otherwise on the
    trailing axes: None when its wires are already there, else the layout with them moved last (a
    permutation stage)."""
    if k >= n:
        return None, 0
    m = len(wires)
    if n > config._WIDE:
        axes = sorted(layout.index(w) for w in wires)
        if axes[-1] - axes[0] == m - 1:
            return None, axes[0]
        ordered = sorted(wires)
        if ordered[-1] - ordered[0] == m - 1:
            return list(range(n)), ordered[0]
        starts = [w for w in ordered if (w - 1) % n not in wires]
        if len(starts) == 1:
            return [(starts[0] + i) % n for i in range(n)], 0
    if set(layout[n - m:]) == wires:
        return None, n - m
    return [w for w in layout if w not in wires] + [w for w in layout if w in wires], n - m


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
            new, _ = _place(layout, b.wires, n, k)
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
