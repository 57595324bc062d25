"""Parameter-shift gradients for any backend, with every shifted row in one job.

``param_shift(template, inputs, weights)`` returns ``(batch, postprocess)``: a
single ``CircuitBatch`` that holds the unshifted rows and every shifted row,
and a function that turns its ``BatchResult`` into a ``Gradient`` (values, jacobian, stderr) with
``jacobian[b, o, j] = d values[b, o] / d weights[j]``.

How: every occurrence of a weight in the circuit becomes its own column of
per-row weights (``angle_k = scale_k * w_j + offset_k``). Shifting occurrence
``k`` by ``±s`` is then just another row, and the chain rule sums the
occurrences of ``w_j`` with their ``scale_k``. Shift rules come from the gate
table (two-term for rotations, four-term for controlled rotations).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import numpy as np

from hqflow.backends.base import BatchResult, CircuitBatch
from hqflow.ir.circuit import Angle, CircuitTemplate, Op
from hqflow.ir.gates import GATES, SHIFT_RULES


class Gradient(NamedTuple):
    values: np.ndarray  # [B, n_obs]
    jacobian: np.ndarray  # [B, n_obs, n_weights]
    stderr: np.ndarray | None  # [B, n_obs] standard error of values in shot mode, else None


@dataclasses.dataclass(frozen=True)
class _Occurrence:
    weight: int  # index into the template's weights
    scale: float
    offset: float
    rule: tuple[tuple[float, float], ...]


def _expand(template: CircuitTemplate) -> tuple[CircuitTemplate, list[_Occurrence]]:
    """One weight column per occurrence (cached per template)."""
    key = template.fingerprint()
    if key in _EXPANDED:
        return _EXPANDED[key]
    occ: list[_Occurrence] = []
    ops = []
    for op in template.ops:
        angles = []
        for a in op.angles:
            if a.kind == "weight":
                rule = GATES[op.name].shift_rule
                if rule is None:  # pragma: no cover - every parametrized gate has a rule
                    raise ValueError(f"gate {op.name!r} has no parameter-shift rule")
                occ.append(_Occurrence(a.index, a.scale, a.offset, SHIFT_RULES[rule]))
                angles.append(Angle.weight(len(occ) - 1))
            else:
                angles.append(a)
        ops.append(Op(op.name, op.wires, tuple(angles)))
    expanded = dataclasses.replace(
        template, ops=tuple(ops), weight_names=tuple(f"occ[{k}]" for k in range(len(occ)))
    )
    _EXPANDED[key] = (expanded, occ)
    return expanded, occ


_EXPANDED: dict[str, tuple[CircuitTemplate, list[_Occurrence]]] = {}


def param_shift(
    template: CircuitTemplate,
    inputs=None,
    weights=None,
    *,
    shots: int | None | str = "template",
    seed: int | None = None,
) -> tuple[CircuitBatch, Callable[[BatchResult], Gradient]]:
    """One batch with all shifted rows, and the function that reads the gradient off it."""
    base = CircuitBatch.make(template, inputs, weights, shots=shots, seed=seed)
    if not template.observables:
        raise ValueError(f"circuit {template.name!r} has no observables to differentiate")
    expanded, occ = _expand(template)
    w_rows = base.weights_per_row()  # [B, n_w]
    B = base.size
    # Unshifted occurrence angles, [B, n_occ].
    occ_angles = np.stack([o.scale * w_rows[:, o.weight] + o.offset for o in occ], axis=1) if occ else np.zeros((B, 0))
    shifts: list[tuple[int, float]] = [(k, s) for k, o in enumerate(occ) for _, shift in o.rule for s in (shift, -shift)]
    rows_per_sample = 1 + len(shifts)
    block = np.repeat(occ_angles[:, None, :], rows_per_sample, axis=1)  # [B, R, n_occ]
    for r, (k, s) in enumerate(shifts, start=1):
        block[:, r, k] += s
    batch = CircuitBatch(
        expanded,
        np.repeat(base.inputs, rows_per_sample, axis=0),
        block.reshape(B * rows_per_sample, len(occ)),
        base.shots,
        base.seed,
    )
    n_w = template.n_weights

    def postprocess(result: BatchResult) -> Gradient:
        vals = result.values.reshape(B, rows_per_sample, -1)  # [B, R, n_obs]
        jac = np.zeros((B, vals.shape[2], n_w))
        r = 1
        for o in occ:
            for coeff, _ in o.rule:
                jac[:, :, o.weight] += o.scale * coeff * (vals[:, r] - vals[:, r + 1])
                r += 2
        stderr = None if result.stderr is None else result.stderr.reshape(B, rows_per_sample, -1)[:, 0]
        return Gradient(vals[:, 0], jac, stderr)

    return batch, postprocess


def finite_difference(run: Callable[[np.ndarray], np.ndarray], weights: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of ``run(weights) -> [B, n_obs]``: ``[B, n_obs, n_w]`` (for tests)."""
    weights = np.asarray(weights, dtype=float)
    cols = []
    for j in range(weights.shape[0]):
        e = np.zeros_like(weights)
        e[j] = eps
        cols.append((run(weights + e) - run(weights - e)) / (2 * eps))
    return np.stack(cols, axis=-1)
