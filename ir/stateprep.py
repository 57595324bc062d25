"""Real amplitude encoding as gates: a state ``s`` (``2**k`` real numbers) prepared from ``|0...0>``.

A binary tree of ``RY`` rotations (Möttönen et al., 2004, restricted to real
amplitudes): level ``l`` rotates wire ``wires[l]``, controlled by the wires above
it, by ``θ_p = 2 arctan2(|s_{p1}|, |s_{p0}|)`` for every value ``p`` of those
wires, where ``s_{pb}`` is the part of ``s`` whose first ``l + 1`` bits are ``p``
then ``b``. On the last level the signed amplitudes themselves go into
``arctan2``, which puts their signs in place. Each uniformly controlled rotation
becomes ``2**l`` ``RY``s and ``CNOT``s in Gray-code order, with angles
``α = Mᵀ θ / 2**l`` (``M[p, i] = (-1)^popcount(p & gray(i))``).

The gate sequence depends only on ``k``; the angles are computed with whatever
scalars ``s`` holds, so the same code gives numbers or expressions
(``hqflow.ir.expr``). The state need not be normalized: every angle is a ratio.
Wire ``wires[0]`` is the most significant bit of the amplitude index.

A zero vector has no state: ``guard(angle, |s|**2)``, when given, marks the first
angle as undefined where ``|s|**2`` is 0 (``hqflow.ir.expr``'s ``guard``), so that a
zero row is refused rather than prepared as ``|0...0>``. The other angles of a block
whose amplitudes are all zero are 0 (``arctan2(0, 0)``): they rotate nothing.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def amplitude_gates(
    s: Sequence[Any], wires: Sequence[int], sqrt: Callable[[Any], Any], atan2: Callable[[Any, Any], Any],
    guard: Callable[[Any, Any], Any] | None = None,
) -> list[tuple[str, tuple[int, ...], tuple[Any, ...]]]:
    """``(gate, wires, angles)`` triples that map ``|0...0>`` to ``s / |s|`` on ``wires`` (``guard``: see the
    module docstring)."""
    k = len(wires)
    if len(s) != 2**k:
        raise ValueError(f"an amplitude vector for {k} wire(s) has {2**k} entries, got {len(s)}")
    out: list[tuple[str, tuple[int, ...], tuple[Any, ...]]] = []
    for level in range(k):
        width = 2 ** (k - level)  # amplitudes under one prefix p
        thetas = []
        for p in range(2**level):
            block = s[p * width: (p + 1) * width]
            half = width // 2
            if level == k - 1:
                low, high = block[0], block[1]
            else:
                low, high = (sqrt(_sum_squares(block[:half])), sqrt(_sum_squares(block[half:])))
            thetas.append(2 * atan2(high, low))
        target = wires[level]
        if level == 0:
            out.append(("ry", (target,), (thetas[0] if guard is None else guard(thetas[0], _sum_squares(s)),)))
            continue
        n = 2**level
        gray = [i ^ (i >> 1) for i in range(n)]
        for i in range(n):
            alpha = _sum(thetas[p] * (1.0 if bin(p & gray[i]).count("1") % 2 == 0 else -1.0) for p in range(n)) * (1.0 / n)
            out.append(("ry", (target,), (alpha,)))
            changed = (gray[i] ^ gray[(i + 1) % n]).bit_length() - 1  # the bit that flips next
            out.append(("cx", (wires[level - 1 - changed], target), ()))
    return out


def _sum_squares(values: Sequence[Any]) -> Any:
    return _sum(v * v for v in values)


def _sum(values) -> Any:
    it = iter(values)
    total = next(it)
    for v in it:
        total = total + v
    return total
