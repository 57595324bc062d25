"""Parameter-shift gradients for any backend, with every shifted row in one job.

``param_shift(template, inputs, weights)`` returns ``(batch, postprocess)``: one ``CircuitBatch`` with
the unshifted and every shifted row, and a function that turns its ``BatchResult`` into a ``Gradient``
with ``jacobian[b, o, j] = d values[b, o] / d weights[j]`` (and, with ``wrt="inputs"``/``"both"``,
``input_jacobian[b, o, i] = d values[b, o] / d inputs[b, i]``). ``spsa`` does the same with a few random
simultaneous perturbations. The method is a ``GradientMethod`` (``"param-shift"``, ``"spsa"``, ``"twin"``: a config
or a graph may hold the name), and ``estimate(method, ...)`` is the one dispatch on it.

How: every occurrence of a weight or input becomes its own column (``angle_k = scale_k * symbol +
offset_k``), so shifting occurrence ``k`` by ``±s`` (the gate's two- or four-term rule) is another row, and
the chain rule sums a symbol's occurrences with their ``scale_k``. Derived inputs are shifted as input
columns and the chain rule leads back to the raw inputs; where it breaks down although the values are
smooth (an amplitude encoding's all-zero block), probe rows ``±h`` give the derivative
(``CircuitTemplate.derivative_probes``).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from hqflow.backends.base import BackendError, BatchResult, CircuitBatch, row_seeds
from hqflow.ir.circuit import Angle, CircuitTemplate, DerivedInputError, Op
from hqflow.ir.gates import GATES, SHIFT_RULES
from hqflow.ir.nodes import GradientMethod

METHODS = tuple(GradientMethod)  # every method (``QuantumLayer``'s ``gradient=``)
GRADIENTS = (GradientMethod.PARAM_SHIFT, GradientMethod.SPSA)  # those whose rows a job runs (``estimate``)


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


@functools.cache  # per template (equal templates share)
def _expand(template: CircuitTemplate) -> tuple[CircuitTemplate, list[_Occurrence]]:
    """One per-row weight column per occurrence of a weight or input."""
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
        template, ops=tuple(ops), phase=(), input_names=tuple(f"x_occ[{k}]" for k in range(n_in)),
        weight_names=tuple(f"w_occ[{k}]" for k in range(len(occ) - n_in)))
    return expanded, occ


_WRT = {"weights": ("weight",), "inputs": ("input",), "both": ("weight", "input")}


def param_shift(
    template: CircuitTemplate,
    inputs=None,
    weights=None,
    *,
    wrt: str = "weights",
    shots: int | None | str = "template",
    seed: int | None = None,
    per_row: bool = False,
) -> tuple[CircuitBatch, Callable[[BatchResult], Gradient]]:
    """One batch with all shifted rows, and the function that reads the gradient off it.

    ``wrt`` is ``"weights"`` (the jacobian), ``"inputs"`` (``input_jacobian``, per sample) or ``"both"``.
    ``per_row`` (with a ``seed``): every row of the batch gets its own shot seed (``row_seeds(seed, rows)``),
    so a row-seeded backend's results do not depend on how the runtime cuts the batch into jobs.
    """
    if wrt not in _WRT:
        raise ValueError(f"wrt must be 'weights', 'inputs' or 'both', got {wrt!r}")
    kinds = _WRT[wrt]
    base, probes = _with_probes(template, _base(template, inputs, weights, shots, seed), kinds, seed)
    rows = base.size if probes is None else base.size - len(probes.points)  # the caller's; probe rows follow
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
    batch = CircuitBatch(expanded, block[:, is_input], block[:, ~is_input], base.shots, base.seed,
                         row_seeds=_row_seeds(seed, B * R, per_row))

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
        if "input" in kinds and template.derived:
            jac["input"] = _chain_inputs(template, base.raw_inputs, jac["input"], rows, probes)
        return Gradient(vals[:rows, 0], jac["weight"][:rows] if "weight" in kinds else None, stderr,
                        jac["input"][:rows] if "input" in kinds else None)

    return batch, postprocess


def _base(template: CircuitTemplate, inputs, weights, shots, seed) -> CircuitBatch:
    """The unshifted batch; a template without observables has nothing to differentiate."""
    base = CircuitBatch.make(template, inputs, weights, shots=shots, seed=seed)
    if not template.observables:
        raise ValueError(f"circuit {template.name!r} has no observables to differentiate")
    return base


def _row_seeds(seed: int | None, rows: int, per_row: bool) -> np.ndarray | None:
    """Per-row shot seeds for a built batch of ``rows`` rows (``per_row`` with a seed), else None."""
    return row_seeds(seed, rows) if per_row and seed is not None else None


def _with_probes(template: CircuitTemplate, base: CircuitBatch, kinds, seed):
    """``(base, probes)``: where the inputs are differentiated and the chain rule through a derived input
    breaks down (``CircuitTemplate.derivative_probes``), ``base`` with the probe rows after the caller's."""
    if "input" not in kinds or not template.derived:
        return base, None
    try:
        probes = template.derivative_probes(base.raw_inputs)
    except DerivedInputError as exc:
        raise BackendError(str(exc)) from None
    if probes is None:
        return base, None
    w = base.weights
    w = w if w.ndim == 1 else np.concatenate([w, w[probes.point_rows]])
    return CircuitBatch.make(template, np.concatenate([base.raw_inputs, probes.points]), w, shots=base.shots,
                             seed=seed), probes


def _chain_inputs(template: CircuitTemplate, raw: np.ndarray, jac: np.ndarray, rows: int, probes) -> np.ndarray:
    """``d/d inputs = d/d columns . d columns/d inputs`` for a template with derived inputs: ``jac``
    ``[N, n_obs, n_columns]`` over the ``raw`` rows ``[N, n_inputs]`` (the caller's ``rows``, then any probe
    rows) becomes ``[N, n_obs, n_inputs]``; where the chain rule breaks down, the probes' mean."""
    columns = template.encode_jacobian(raw)
    if probes is not None:  # derived inputs constant along an input add nothing (not 0/0)
        d = len(template.direct_inputs())
        fixed = ~probes.probed
        columns[probes.rows[fixed], d:, probes.inputs[fixed]] = 0
        given = np.flatnonzero(np.isfinite(probes.slopes).all(axis=1))  # probes with slopes of their own
        columns[rows + given, d:, probes.point_inputs[given]] = probes.slopes[given]
    jac = np.einsum("boc,bci->boi", jac, columns)
    if probes is not None and probes.probed.any():  # where the chain rule breaks down: the probes' mean
        at = jac[rows + np.arange(len(probes.points)), :, probes.point_inputs]  # [2p, n_obs]
        jac[probes.rows[probes.probed], :, probes.inputs[probes.probed]] = probes.combine(at)
    return jac


def _occurrence_angles(batch: CircuitBatch, occ: list[_Occurrence]) -> np.ndarray:
    """The unshifted angle of every occurrence, per row: ``[B, n_occ]``."""
    w, x = batch.weights_per_row(), batch.inputs
    cols = [o.scale * (w if o.kind == "weight" else x)[:, o.index] + o.offset for o in occ]
    return np.stack(cols, axis=1) if cols else np.zeros((batch.size, 0))


@dataclasses.dataclass(frozen=True)
class Spsa:
    """SPSA's settings for a ``QuantumLayer`` (``gradient="spsa"``): ``samples`` directions per job, each
    two rows per input row (``center=True`` adds the unperturbed row, whose values are then exact rather
    than the pairs' mean), perturbations of size ``epsilon``."""

    samples: int = 2
    """random ±1 directions per job (1 to 1000), shared by every row of the job"""
    epsilon: float = 0.1
    """the perturbation's size, in radians of every angle a parameter drives (0 < epsilon <= 3.2)"""
    center: bool = False
    """also run the unperturbed row: exact values, one more row per input row"""

    def __post_init__(self) -> None:
        k, eps = self.samples, self.epsilon
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= 1000:
            raise ValueError(f"Spsa: samples must be an integer from 1 to 1000, got {k!r}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float, np.number)) or not 0 < eps <= 3.2:
            raise ValueError(f"Spsa: epsilon must be a finite number in (0, 3.2], got {eps!r}")
        if not isinstance(self.center, bool):
            raise ValueError(f"Spsa: center must be True or False, got {self.center!r}")
        object.__setattr__(self, "samples", int(k))
        object.__setattr__(self, "epsilon", float(eps))


def spsa_directions(seed: int | None, samples: int, n: int) -> np.ndarray:
    """``[samples, n]`` random ±1 (Rademacher) directions from ``np.random.default_rng(seed)`` (a fresh,
    unseeded generator for ``seed=None``)."""
    return np.random.default_rng(seed).choice([-1.0, 1.0], size=(samples, n))


def spsa_combine(plus: np.ndarray, minus: np.ndarray, directions: np.ndarray, epsilon: float) -> np.ndarray:
    """The SPSA jacobian ``[B, n_obs, n]`` from the values at ``+epsilon`` and ``-epsilon`` along each of the
    ``directions`` ``[k, n]`` (``plus``, ``minus``: ``[B, k, n_obs]``):
    ``J[b, o] = mean_j (plus[b, j, o] - minus[b, j, o]) / (2 epsilon) * directions[j]``."""
    diff = (plus - minus) / (2 * epsilon)  # [B, k, n_obs]
    return np.einsum("bso,sw->bow", diff, directions) / directions.shape[0]


def spsa(
    template: CircuitTemplate,
    inputs=None,
    weights=None,
    *,
    wrt: str = "weights",
    samples: int = 4,
    epsilon: float = 0.1,
    center: bool = True,
    shots: int | None | str = "template",
    seed: int | None = None,
    per_row: bool = False,
) -> tuple[CircuitBatch, Callable[[BatchResult], Gradient]]:
    """Simultaneous-perturbation estimate of the jacobian, in one job.

    ``samples`` random ±1 directions ``d`` (``spsa_directions(seed, ...)``: one set for **every row** of the
    batch) give ``2 * samples`` rows per input row (``+ 1`` with ``center``, the unperturbed row), whatever
    the number of parameters: ``J ~ mean_d (f(p + eps d) - f(p - eps d)) / (2 eps) * d``. It is unbiased up
    to ``O(eps**2)`` and noisy (variance ~ ``1 / samples``); use it where parameter shift's rows are too many.

    ``wrt`` as ``param_shift``'s: a direction has an entry per weight (``"weights"``), per input column
    (``"inputs"``), or both (``"both"``: the inputs' entries first); derived inputs are perturbed as columns
    and the chain rule (with its probe rows where it breaks down) leads back to the raw inputs.
    Without ``center`` the values are the mean over the pairs of ``(f(p + eps d) + f(p - eps d)) / 2``,
    which is biased by ``O(eps**2)`` (the curvature along ``d``); their ``stderr`` is that mean's.
    ``per_row`` as ``param_shift``'s.

    The batch's shot seed is ``seed``. The directions are ``spsa_directions(seed)`` for ``wrt="weights"`` with
    ``center`` (this function's first form, unchanged), else ``spsa_directions`` of a seed derived from
    ``seed``. A backend that samples a batch's shots from ``default_rng(seed)`` (no ``per_row``) draws from the
    directions' own stream in the first form, which correlates shot noise and directions and can bias the
    estimate; the other forms avoid it.
    """
    _check_spsa(wrt, samples, epsilon)
    kinds = _WRT[wrt]
    base, probes = _with_probes(template, _base(template, inputs, weights, shots, seed), kinds, seed)
    rows = base.size if probes is None else base.size - len(probes.points)
    n_x = base.template.n_inputs if "input" in kinds else 0
    n_w = template.n_weights if "weight" in kinds else 0
    legacy = center and wrt == "weights"  # the first mode: its directions come from default_rng(seed), as ever
    directions = spsa_directions(seed if legacy else _directions_seed(seed), samples, n_x + n_w)
    directions[:, [n_x * (k == "weight") + i for k in kinds for i in base.template.gate_free(k)]] = 0  # phase only
    c, B, R = int(center), base.size, 2 * samples + int(center)  # rows c + 2j: +eps d_j; c + 2j + 1: -eps d_j
    x, w = _perturbed(base, directions, epsilon, n_x, n_w, c)
    batch = CircuitBatch(base.template, x, w, base.shots, base.seed, row_seeds=_row_seeds(seed, B * R, per_row))

    def postprocess(result: BatchResult) -> Gradient:
        vals = result.values.reshape(B, R, -1)
        jac = spsa_combine(vals[:, c::2], vals[:, c + 1::2], directions, epsilon)  # [B, n_obs, n_x + n_w]
        values, stderr = _spsa_values(result, B, R, center)
        x_jac = None
        if "input" in kinds:
            x_jac = jac[:, :, :n_x]
            if template.derived:
                x_jac = _chain_inputs(template, base.raw_inputs, x_jac, rows, probes)
            x_jac = x_jac[:rows]
        w_jac = jac[:rows, :, n_x:] if "weight" in kinds else None
        return Gradient(values[:rows], w_jac, None if stderr is None else stderr[:rows], x_jac)

    return batch, postprocess


def estimate(method: GradientMethod | str, template: CircuitTemplate, inputs=None, weights=None, *,
             settings: Spsa | None = None, **options) -> tuple[CircuitBatch, Callable[[BatchResult], Gradient]]:
    """The batch and postprocessing of ``method``'s estimate: ``param_shift``, or ``spsa`` with ``settings``'
    samples, epsilon and centre (None: ``spsa``'s defaults); ``options``: their shared keywords (``wrt``,
    ``shots``, ``seed``, ``per_row``). The one dispatch on a gradient method."""
    method = gradient_method(method, GRADIENTS)
    if method is GradientMethod.PARAM_SHIFT:
        return param_shift(template, inputs, weights, **options)
    return spsa(template, inputs, weights, **({} if settings is None else dataclasses.asdict(settings)), **options)


def gradient_method(name, known=METHODS) -> GradientMethod:
    """``name`` (a method, or its name as configs and the command line write it) as one of the ``known`` methods;
    anything else a one-line ``ValueError`` naming them."""
    if name not in known:
        raise ValueError(f"unknown gradient {name!r}; known: {', '.join(known)}")
    return GradientMethod(name)


def _check_spsa(wrt, samples, epsilon) -> None:
    if wrt not in _WRT:
        raise ValueError(f"wrt must be 'weights', 'inputs' or 'both', got {wrt!r}")
    if (isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1
            or isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.number))
            or not 0 < epsilon < np.inf):
        raise ValueError(f"spsa needs samples >= 1 and epsilon > 0, got {samples!r} and {epsilon!r}")


def _spsa_values(result: BatchResult, B: int, R: int, center: bool):
    """``(values, stderr)`` per row of an SPSA batch: the centre row's, else the mean over all ``R`` rows
    (the pairs' ``(f+ + f-) / 2``) and its standard error."""
    vals = result.values.reshape(B, R, -1)
    values = vals[:, 0] if center else ((vals[:, 0::2] + vals[:, 1::2]) / 2).mean(axis=1)
    if result.stderr is None:
        return values, None
    se = result.stderr.reshape(B, R, -1)
    return values, se[:, 0] if center else np.sqrt((se**2).sum(axis=1)) / R


def _directions_seed(seed: int | None) -> int | None:
    """A seed for the directions that is independent of ``seed``'s own stream (the batch's shot seed): a
    backend that samples from ``default_rng(seed)`` would otherwise correlate its shot noise with the
    directions, which biases the estimate."""
    return None if seed is None else int(np.random.SeedSequence([int(seed), 0x53505341]).generate_state(1)[0])


def _perturbed(base: CircuitBatch, directions, epsilon, n_x, n_w, c):
    """The rows of an SPSA batch, ``R = c + 2k`` per row of ``base``: its inputs ``[B*R, n_inputs]`` and
    weights (shared ``[n_weights]`` when they are not perturbed and were shared, else ``[B*R, n_weights]``)."""
    B, R = base.size, c + 2 * directions.shape[0]
    x = np.repeat(base.inputs, R, axis=0)
    if n_x:
        x = x.reshape(B, R, -1)
        x[:, c::2] += epsilon * directions[:, :n_x]
        x[:, c + 1::2] -= epsilon * directions[:, :n_x]
        x = x.reshape(B * R, -1)
    if not n_w:
        w = base.weights
        return x, w if w.ndim == 1 else np.repeat(w, R, axis=0)
    w = np.repeat(base.weights_per_row()[:, None, :], R, axis=1)  # [B, R, n_w]
    w[:, c::2] += epsilon * directions[:, n_x:]
    w[:, c + 1::2] -= epsilon * directions[:, n_x:]
    return x, w.reshape(B * R, -1)


def finite_difference(run: Callable[[np.ndarray], np.ndarray], weights: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of ``run(weights) -> [B, n_obs]``: ``[B, n_obs, n_w]`` (for tests)."""
    weights = np.asarray(weights, dtype=float)
    return np.stack([(run(weights + e) - run(weights - e)) / (2 * eps) for e in np.eye(len(weights)) * eps], axis=-1)
