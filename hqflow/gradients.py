"""Parameter-shift gradients for any backend, with every shifted row in one job.

``param_shift(template, inputs, weights)`` returns ``(batch, postprocess)``: one ``CircuitBatch`` with
the unshifted and every shifted row, and a function that turns its ``BatchResult`` into a ``Gradient``
with ``jacobian[b, o, j] = d values[b, o] / d weights[j]`` (and, with ``wrt="inputs"``/``"both"``,
``input_jacobian[b, o, i] = d values[b, o] / d inputs[b, i]``). ``spsa`` does the same with a few random
simultaneous perturbations.

How: every occurrence of a weight or input becomes its own column (``angle_k = scale_k * symbol +
offset_k``), so shifting occurrence ``k`` by ``±s`` (the gate's two- or four-term rule) is another row, and
the chain rule sums a symbol's occurrences with their ``scale_k``. Derived inputs are shifted as input
columns and the chain rule leads back to the raw inputs; where it breaks down although the values are
smooth (an amplitude encoding's all-zero block), probe rows ``±h`` give the derivative
(``CircuitTemplate.derivative_probes``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from hqflow.backends.base import BackendError, BatchResult, CircuitBatch
from hqflow.ir.circuit import Angle, CircuitTemplate, DerivedInputError, Op
from hqflow.ir.gates import GATES, SHIFT_RULES


class Gradient(NamedTuple):
    values: np.ndarray  # [B, n_obs]
    jacobian: np.ndarray | None  # [B, n_obs, n_weights] (None when weights were not differentiated)
    stderr: np.ndarray | None  # [B, n_obs] standard error of values in shot mode, else None
    input_jacobian: np.ndarray | None = None  # [B, n_obs, n_inputs] when inputs were differentiated


@dataclasses.dataclass(frozen=True)
class _Occurrence:
    kind: str  # "weight" or "input": what the angle depends on
    index: int  # into the template's weights or inputs
    scale: float
    offset: float
    rule: tuple[tuple[float, float], ...]


def _expand(template: CircuitTemplate) -> tuple[CircuitTemplate, list[_Occurrence]]:
    """One per-row weight column per occurrence of a weight or input (cached per template)."""
    key = template.fingerprint()
    if key in _EXPANDED:
        return _EXPANDED[key]
    occ: list[_Occurrence] = []
    ops = []
    for op in template.ops:
        angles = []
        for a in op.angles:
            if a.kind == "const":
                angles.append(a)
                continue
            rule = SHIFT_RULES[GATES[op.name].shift_rule]  # every parametrized gate has one
            column = sum(o.kind == a.kind for o in occ)  # its column among the inputs or the weights
            occ.append(_Occurrence(a.kind, a.index, a.scale, a.offset, rule))
            angles.append(Angle.input(column) if a.kind == "input" else Angle.weight(column))
        ops.append(Op(op.name, op.wires, tuple(angles)))
    n_in = sum(o.kind == "input" for o in occ)
    expanded = dataclasses.replace(
        template, ops=tuple(ops), input_names=tuple(f"x_occ[{k}]" for k in range(n_in)),
        weight_names=tuple(f"w_occ[{k}]" for k in range(len(occ) - n_in)))
    _EXPANDED[key] = (expanded, occ)
    return expanded, occ


_EXPANDED: dict[str, tuple[CircuitTemplate, list[_Occurrence]]] = {}
_WRT = {"weights": ("weight",), "inputs": ("input",), "both": ("weight", "input")}


def param_shift(
    template: CircuitTemplate,
    inputs=None,
    weights=None,
    *,
    wrt: str = "weights",
    shots: int | None | str = "template",
    seed: int | None = None,
) -> tuple[CircuitBatch, Callable[[BatchResult], Gradient]]:
    """One batch with all shifted rows, and the function that reads the gradient off it.

    ``wrt`` is ``"weights"`` (the jacobian), ``"inputs"`` (``input_jacobian``, per sample) or ``"both"``.
    """
    if wrt not in _WRT:
        raise ValueError(f"wrt must be 'weights', 'inputs' or 'both', got {wrt!r}")
    base = _base(template, inputs, weights, shots, seed)
    kinds = _WRT[wrt]
    rows, probes = base.size, None  # rows: the caller's; probe rows (if any) follow them in the batch
    if "input" in kinds and template.derived:
        try:
            probes = template.derivative_probes(base.raw_inputs)
        except DerivedInputError as exc:
            raise BackendError(str(exc)) from None
        if probes is not None:
            w = base.weights
            w = w if w.ndim == 1 else np.concatenate([w, w[probes.point_rows]])
            base = CircuitBatch.make(template, np.concatenate([base.raw_inputs, probes.points]), w,
                                     shots=base.shots, seed=seed)
    lowered = base.template  # derived inputs are columns here; their chain rule comes last
    expanded, occ = _expand(lowered)
    angles = _occurrence_angles(base, occ)  # [B, n_occ]
    shifts = [(k, s) for k, o in enumerate(occ) if o.kind in kinds for _, shift in o.rule for s in (shift, -shift)]
    B, R = base.size, 1 + len(shifts)
    block = np.repeat(angles[:, None, :], R, axis=1)  # [B, R, n_occ]
    for r, (k, s) in enumerate(shifts, start=1):
        block[:, r, k] += s
    block = block.reshape(B * R, len(occ))
    is_input = np.array([o.kind == "input" for o in occ], dtype=bool)  # occurrences are in column order per kind
    batch = CircuitBatch(expanded, block[:, is_input], block[:, ~is_input], base.shots, base.seed)

    def postprocess(result: BatchResult) -> Gradient:
        vals = result.values.reshape(B, R, -1)  # [B, R, n_obs]
        jac = {"weight": np.zeros((B, vals.shape[2], template.n_weights)),
               "input": np.zeros((B, vals.shape[2], lowered.n_inputs))}
        r = 1
        for o in occ:
            if o.kind not in kinds:
                continue
            for coeff, _ in o.rule:
                jac[o.kind][:, :, o.index] += o.scale * coeff * (vals[:, r] - vals[:, r + 1])
                r += 2
        stderr = None if result.stderr is None else result.stderr.reshape(B, R, -1)[:rows, 0]
        if "input" in kinds and template.derived:  # d/d inputs = d/d columns . d columns/d inputs
            columns = template.encode_jacobian(base.raw_inputs)
            if probes is not None:  # derived inputs constant along an input add nothing (not 0/0)
                d = len(template.direct_inputs())
                fixed = ~probes.probed
                columns[probes.rows[fixed], d:, probes.inputs[fixed]] = 0
                given = np.flatnonzero(np.isfinite(probes.slopes).all(axis=1))  # probes with slopes of their own
                columns[rows + given, d:, probes.point_inputs[given]] = probes.slopes[given]
            jac["input"] = np.einsum("boc,bci->boi", jac["input"], columns)
            if probes is not None and probes.probed.any():  # where the chain rule breaks down: the probes' mean
                at = jac["input"][rows + np.arange(len(probes.points)), :, probes.point_inputs]  # [2p, n_obs]
                jac["input"][probes.rows[probes.probed], :, probes.inputs[probes.probed]] = probes.combine(at)
        return Gradient(vals[:rows, 0], jac["weight"][:rows] if "weight" in kinds else None, stderr,
                        jac["input"][:rows] if "input" in kinds else None)

    return batch, postprocess


def _base(template: CircuitTemplate, inputs, weights, shots, seed) -> CircuitBatch:
    """The unshifted batch; a template without observables has nothing to differentiate."""
    base = CircuitBatch.make(template, inputs, weights, shots=shots, seed=seed)
    if not template.observables:
        raise ValueError(f"circuit {template.name!r} has no observables to differentiate")
    return base


def _occurrence_angles(batch: CircuitBatch, occ: list[_Occurrence]) -> np.ndarray:
    """The unshifted angle of every occurrence, per row: ``[B, n_occ]``."""
    w, x = batch.weights_per_row(), batch.inputs
    cols = [o.scale * (w if o.kind == "weight" else x)[:, o.index] + o.offset for o in occ]
    return np.stack(cols, axis=1) if cols else np.zeros((batch.size, 0))


def spsa(
    template: CircuitTemplate,
    inputs=None,
    weights=None,
    *,
    samples: int = 4,
    epsilon: float = 0.1,
    shots: int | None | str = "template",
    seed: int | None = None,
) -> tuple[CircuitBatch, Callable[[BatchResult], Gradient]]:
    """Simultaneous-perturbation estimate of the weight jacobian, in one job.

    ``samples`` random ±1 directions ``d`` (seeded) give ``2 * samples + 1`` rows per input row, whatever
    the number of weights: ``J ~ mean_d (f(w + eps d) - f(w - eps d)) / (2 eps) * d``. It is unbiased up
    to ``O(eps**2)`` and noisy (variance ~ ``1 / samples``); use it where parameter shift's
    ``2 * n_weights`` rows per input are too many.
    """
    if samples < 1 or epsilon <= 0:
        raise ValueError(f"spsa needs samples >= 1 and epsilon > 0, got {samples} and {epsilon}")
    base = _base(template, inputs, weights, shots, seed)
    B, n_w = base.size, template.n_weights
    directions = np.random.default_rng(seed).choice([-1.0, 1.0], size=(samples, n_w))
    R = 1 + 2 * samples
    w = np.repeat(base.weights_per_row()[:, None, :], R, axis=1)  # [B, R, n_w]
    w[:, 1::2] += epsilon * directions
    w[:, 2::2] -= epsilon * directions
    batch = CircuitBatch(template, np.repeat(base.inputs, R, axis=0), w.reshape(B * R, n_w), base.shots, base.seed)

    def postprocess(result: BatchResult) -> Gradient:
        vals = result.values.reshape(B, R, -1)
        diff = (vals[:, 1::2] - vals[:, 2::2]) / (2 * epsilon)  # [B, samples, n_obs]
        jac = np.einsum("bso,sw->bow", diff, directions) / samples
        stderr = None if result.stderr is None else result.stderr.reshape(B, R, -1)[:, 0]
        return Gradient(vals[:, 0], jac, stderr)

    return batch, postprocess


def finite_difference(run: Callable[[np.ndarray], np.ndarray], weights: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of ``run(weights) -> [B, n_obs]``: ``[B, n_obs, n_w]`` (for tests)."""
    weights = np.asarray(weights, dtype=float)
    return np.stack([(run(weights + e) - run(weights - e)) / (2 * eps) for e in np.eye(len(weights)) * eps], axis=-1)
