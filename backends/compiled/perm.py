"""Permutations of the state's qubit axes (on merged axes where old axes stay adjacent)."""
from __future__ import annotations

import functools

import torch


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
