"""Pass 3: fusion of a segment's primitives into blocks of at most ``k`` wires."""
from __future__ import annotations

from dataclasses import dataclass

from .lower import _Prim


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
