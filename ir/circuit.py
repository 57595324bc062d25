"""The canonical circuit form: ``CircuitTemplate``.

A template is a list of gates on ``n_qubits`` wires whose angles are affine in at
most one symbol each. Symbols are split into per-sample **inputs** (data
encodings: one row per sample in a batch) and shared **weights** (trainable).
Observables are Pauli sums; ``shots=None`` means exact expectation values.

Angles that are other functions of the inputs (``2 (π - x0)(π - x1)`` in a
``ZZFeatureMap``, ``sin(x)``, an amplitude encoding's ``arctan2``) use **derived
inputs**: ``derived[k]`` is an ``Expr`` of the inputs, and an angle refers to it as
input column ``n_inputs + k``. Users always pass the raw inputs ``[B, n_inputs]``;
``encode`` computes the columns and ``lowered()`` is the plain template over them,
which is what backends see (``CircuitBatch.make`` lowers once).

Qiskit circuits and PennyLane quantum functions are normalized into this form
once, at the edge (``hqflow.ir.from_qiskit``, ``hqflow.ir.from_pennylane``).
Everything is a frozen dataclass of tuples, so a template is hashable and its
``fingerprint()`` is stable across processes.
"""
from __future__ import annotations

import collections
import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from . import expr as ex
from .expr import Expr
from .gates import GATES
from .text import lone_surrogate, number, one_line, shown


class CircuitError(ValueError):
    """A circuit template (or its conversion) is malformed. The message is one line (``one_line``)."""

    def __init__(self, message: object = ""):
        super().__init__(one_line(str(message)))


class DerivedInputError(ValueError):
    """Raw input rows at which a derived input is not a finite number (``log`` of 0, an all-zero amplitude
    vector), or at which a derivative with respect to an input does not exist. The message is one line and
    names the row; backends raise it as their ``BackendError`` with the same message."""

    def __init__(self, message: object = ""):
        super().__init__(one_line(str(message)))


@dataclass(frozen=True)
class Angle:
    """A gate angle: ``scale * symbol + offset``, or the constant ``offset``.

    ``kind`` is ``"const"``, ``"input"`` or ``"weight"``; ``index`` points into the
    template's ``input_names`` or ``weight_names``.
    """

    kind: str = "const"
    index: int = -1
    scale: float = 1.0
    offset: float = 0.0

    @staticmethod
    def const(value: float) -> Angle:
        return Angle("const", -1, 0.0, as_float(value, "angle"))

    @staticmethod
    def input(index: int, scale: float = 1.0, offset: float = 0.0) -> Angle:
        return Angle("input", int(index), as_float(scale, "angle scale"), as_float(offset, "angle offset"))

    @staticmethod
    def weight(index: int, scale: float = 1.0, offset: float = 0.0) -> Angle:
        return Angle("weight", int(index), as_float(scale, "angle scale"), as_float(offset, "angle offset"))


def as_float(value: object, what: str) -> float:
    """``value``, a real number, as a float; ``CircuitError`` naming ``what`` for text, a value that is not a
    real number, or an integer past a float's range. Whether it is finite is the caller's check."""
    if isinstance(value, (str, bytes)):
        raise CircuitError(f"{what} {shown(value)} is not a real number")
    try:
        return float(value)
    except OverflowError:
        raise CircuitError(f"{what} {number(value)} is past a float's range") from None
    except (TypeError, ValueError):
        raise CircuitError(f"{what} {shown(value)} is not a real number") from None


@dataclass(frozen=True)
class Op:
    """One gate: a name from ``hqflow.ir.gates.GATES``, its wires and angles."""

    name: str
    wires: tuple[int, ...]
    angles: tuple[Angle, ...] = ()


_TERM = re.compile(r"([IXYZ])(\d+)")


@dataclass(frozen=True)
class PauliTerm:
    """``coeff * P_{w0} P_{w1} ...``; ``paulis`` is sorted by wire, identities dropped."""

    coeff: float
    paulis: tuple[tuple[int, str], ...] = ()

    @staticmethod
    def parse(text: str, coeff: float = 1.0) -> PauliTerm:
        """Parse ``"Z0 Z1"`` (or ``"Z0Z1"``, ``"X2"``, ``""`` for identity)."""
        if not isinstance(text, str):
            raise CircuitError(f"a Pauli term must be a string like 'Z0 Z1', got {shown(text)}")
        compact = text.replace(" ", "").replace("*", "")
        found = _TERM.findall(compact)
        if "".join(p + w for p, w in found) != compact:
            raise CircuitError(
                f"cannot parse Pauli term {_clip(text)}: use letters I/X/Y/Z each followed by a wire, e.g. 'Z0 Z1'"
            )
        if any(len(w) > 9 for _, w in found):
            raise CircuitError(f"Pauli term {_clip(text)}: a wire number has more than 9 digits")
        wires = [int(w) for _, w in found]
        counts = collections.Counter(wires)
        repeated = sorted(w for w, k in counts.items() if k > 1)
        if repeated:
            raise CircuitError(f"Pauli term {_clip(text)} names wire {repeated[0]} twice")
        c = as_float(coeff, f"Pauli term {_clip(text)}: coefficient")
        if not math.isfinite(c):
            raise CircuitError(f"Pauli term {_clip(text)}: coefficient {number(coeff)} is not finite")
        return PauliTerm(c, tuple(sorted((int(w), p) for p, w in found if p != "I")))

    @property
    def wires(self) -> tuple[int, ...]:
        return tuple(w for w, _ in self.paulis)

    def __str__(self) -> str:
        body = " ".join(f"{p}{w}" for w, p in self.paulis) or "I"
        coeff = f"{self.coeff:+g}" if _finite(self.coeff) or isinstance(self.coeff, float) else number(self.coeff)
        return f"{coeff}*{body}"


@dataclass(frozen=True)
class Observable:
    """A Pauli sum: ``sum_k terms[k]``."""

    terms: tuple[PauliTerm, ...]

    @staticmethod
    def coerce(obs: ObservableLike) -> Observable:
        """Accept an ``Observable``, ``"Z0 Z1"``, or ``[(coeff, "Z0 Z1"), ...]``."""
        if isinstance(obs, Observable):
            return obs
        if isinstance(obs, PauliTerm):
            return Observable((obs,))
        if isinstance(obs, str):
            return Observable((PauliTerm.parse(obs),))
        try:
            terms = tuple(PauliTerm.parse(t, c) for c, t in obs)
        except (TypeError, ValueError) as exc:
            why = f"{exc}; " if isinstance(exc, CircuitError) else ""
            raise CircuitError(
                f"cannot read observable {_clip(obs)}: {why}give 'Z0 Z1' or a list of (coeff, 'Z0 Z1') pairs"
            ) from None
        if not terms:
            raise CircuitError("an observable needs at least one term")
        return Observable(terms)

    @property
    def wires(self) -> tuple[int, ...]:
        return tuple(sorted({w for t in self.terms for w in t.wires}))

    def __str__(self) -> str:
        return " ".join(str(t) for t in self.terms)


MAX_SHOTS = 2**63 - 1  # numpy's random generators draw at most this many samples (int64)
MAX_QUBITS = 10_000  # a template's qubits: past any simulator's (30) and any device's (hundreds), far short of
# what its plain data (wire lists, Pauli strings, QPY's header) or a message about it cannot hold

ObservableLike = "Observable | PauliTerm | str | Sequence[tuple[float, str]]"


@dataclass(frozen=True)
class CircuitTemplate:
    """A parametrized circuit with an input/weight split, observables and shots.

    ``observables`` empty means the circuit is sampled: exact runs return
    probabilities, shot runs return counts. Bitstrings and probability indices
    put wire 0 first (most significant), as PennyLane does.
    """

    n_qubits: int
    ops: tuple[Op, ...]
    input_names: tuple[str, ...] = ()
    weight_names: tuple[str, ...] = ()
    observables: tuple[Observable, ...] = ()
    shots: int | None = None
    name: str = "circuit"
    derived: tuple[Expr, ...] = ()
    """classical functions of the inputs, each one more input column (see the module docstring)"""
    phase: tuple[Angle, ...] = ()
    """the global phase, a sum of terms (the state times ``exp(i * phase)``, as Qiskit's ``global_phase``). No value,
    probability or gradient depends on it: it keeps a parameter that appears only there (Qiskit's
    ``qc.global_phase = t``, PennyLane's ``GlobalPhase(t)``) the template's own, with a gradient of exactly 0"""
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def n_inputs(self) -> int:
        return len(self.input_names)

    @property
    def n_weights(self) -> int:
        return len(self.weight_names)

    @property
    def n_observables(self) -> int:
        return len(self.observables)

    @property
    def n_columns(self) -> int:
        """Input columns the gates may read: the inputs, then the derived inputs."""
        return len(self.input_names) + len(self.derived)

    def derived_names(self) -> tuple[str, ...]:
        """A name per derived input: its formula, made unique against every other parameter name."""
        if "derived_names" not in self._memo:
            taken, names = set(self.input_names) | set(self.weight_names), []
            for e in self.derived:
                base = name = e.format(self.input_names)
                k = 1
                while name in taken:
                    k += 1
                    name = f"{base} #{k}"
                taken.add(name)
                names.append(name)
            self._memo["derived_names"] = tuple(names)
        return self._memo["derived_names"]

    def direct_inputs(self) -> tuple[int, ...]:
        """The inputs that gates read themselves, in order: the lowered template's first input columns."""
        return self._direct()

    def _angles(self):
        """Every angle: the gates', then the global phase's terms."""
        return [a for op in self.ops for a in op.angles] + list(self.phase)

    def gate_free(self, kind: str) -> tuple[int, ...]:
        """The weights (``kind="weight"``), or the lowered template's input columns (``"input"``), that no gate
        reads: only the global phase names them, so nothing depends on them and their gradient is 0."""
        t = self.lowered()
        read = {a.index for op in t.ops for a in op.angles if a.kind == kind}
        return tuple(i for i in range(t.n_inputs if kind == "input" else t.n_weights) if i not in read)

    def _direct(self) -> tuple[int, ...]:
        """The inputs that gates read themselves (the others feed derived inputs only)."""
        if "direct" not in self._memo:
            n = self.n_inputs
            self._memo["direct"] = tuple(sorted({a.index for a in self._angles() if a.kind == "input" and a.index < n}))
        return self._memo["direct"]

    def lowered(self) -> CircuitTemplate:
        """The plain template over the input columns ``encode`` gives: the inputs that gates read,
        then the derived inputs (itself when it has none). This is what backends run."""
        if not self.derived:
            return self
        if "lowered" not in self._memo:
            direct, n = self._direct(), self.n_inputs
            column = {i: c for c, i in enumerate(direct)}
            column.update({n + k: len(direct) + k for k in range(len(self.derived))})

            def angle(a: Angle) -> Angle:
                return Angle("input", column[a.index], a.scale, a.offset) if a.kind == "input" else a

            ops = tuple(Op(op.name, op.wires, tuple(angle(a) for a in op.angles)) for op in self.ops)
            names = tuple(self.input_names[i] for i in direct) + self.derived_names()
            self._memo["lowered"] = _replace(self, ops=ops, input_names=names, derived=(),
                                             phase=tuple(angle(a) for a in self.phase))
        return self._memo["lowered"]

    def encode(self, x, xp=None, check: bool = True):
        """Raw input rows ``[..., n_inputs]`` -> the lowered template's input columns (numpy, or
        torch with ``xp=torch``: the autograd graph is kept).

        Every path that runs a template computes its columns here, so every path refuses the same
        rows: with ``check``, a row where a derived input, or any value on the way to it, is not a
        finite number (``log(0)``; ``1 / 0`` inside ``arctan``) raises ``DerivedInputError`` naming the
        derived input, the row and why (``'log of 0'``). Values that cannot be read (inside
        ``jax.jit``) are not checked."""
        if not self.derived:
            return x
        if xp is None:
            import numpy as xp
        import numpy as np

        direct = [x[..., i] for i in self._direct()]
        if check and xp is np:  # numpy: the values and their check in one pass
            derived, bad = zip(*(ex.evaluate_checked(e, x) for e in self.derived))
            cols = np.stack(direct + list(derived), -1)
            self._refuse(x, cols, np.stack(bad, -1))
            return cols
        with np.errstate(all="ignore"):
            cols = xp.stack(direct + [ex.evaluate(e, x, xp) for e in self.derived], -1)
        raw = _concrete(x) if check else None
        if raw is not None:
            self._refuse(x, cols, np.stack([ex.evaluate_checked(e, raw)[1] for e in self.derived], -1))
        return cols

    def _refuse(self, x, cols, bad) -> None:
        """Raise ``DerivedInputError`` for the first row where a raw input, a derived input or a value on the
        way to one (``bad[..., k]`` for derived input ``k``) is not a finite number."""
        import numpy as np

        values = _concrete(cols)
        n_cols = len(self._direct()) + len(self.derived)
        values = values.reshape(-1, n_cols)
        direct = len(self._direct())
        bad = np.concatenate([~np.isfinite(values[:, :direct]), np.reshape(bad, (-1, len(self.derived)))], 1)
        if not bad.any():
            return
        row, col = (int(i[0]) for i in np.nonzero(bad))
        raw = _concrete(x).reshape(-1, self.n_inputs)[row]
        value = values[row, col]
        why = ("the input is not a finite number" if col < direct else
               ex.undefined_reason(self.derived[col - direct], raw, self.input_names))
        raise DerivedInputError(
            f"circuit {_clip(self.name)}: derived input {_clip(self.lowered().input_names[col], 80)} is "
            f"{value if not np.isfinite(value) else 'undefined'} for row {row} "
            f"(inputs {np.array2string(raw, precision=6, threshold=8)}): {why}")

    def encode_jacobian(self, x):
        """``d encode(x) / d x`` per row: ``[B, n_lowered_inputs, n_inputs]`` (numpy). Entries where the chain
        rule breaks down (``singular_inputs``) are not finite numbers."""
        import numpy as np

        x = np.asarray(x, dtype=float)
        direct = self._direct()
        jac = np.zeros((x.shape[0], len(direct) + len(self.derived), x.shape[1]))
        jac[:, np.arange(len(direct)), list(direct)] = 1.0
        if "derivatives" not in self._memo:  # differentiated once per template, evaluated per batch
            self._memo["derivatives"] = [(len(direct) + k, i, ex.derivative(e, kind, i))
                                         for k, e in enumerate(self.derived) for kind, i in sorted(e.symbols())]
        with np.errstate(all="ignore"):
            for row, i, d in self._memo["derivatives"]:
                jac[:, row, i] = d.value if d.is_const else ex.evaluate(d, x, np)
        return jac

    def singular_inputs(self, x):
        """``[B, n_inputs]`` booleans (numpy ``x`` ``[B, n_inputs]``): the rows and inputs at which the chain
        rule through the derived inputs breaks down (``hqflow.ir.expr.singular_inputs``), such as the
        features of an amplitude encoding's all-zero block. Its values are smooth there; see
        ``derivative_probes``."""
        import numpy as np

        out = np.zeros(np.shape(x), dtype=bool)
        for e in self.derived:
            out |= ex.singular_inputs(e, x)
        return out

    def derivative_probes(self, x) -> DerivativeProbes | None:
        """How to differentiate with respect to the inputs where the chain rule breaks down, or None
        where it holds for every row of the numpy ``x`` ``[B, n_inputs]``.

        For each singular row and input (``singular_inputs``) there are two probe rows: the row with that
        input moved by ``±h`` (``h`` is ``2**-20`` times the largest input its derived inputs use, or
        ``2**-20``), at which the chain rule holds. The derivative there is the mean of the derivatives
        at the probes: where the values are differentiable it is their derivative (to ``O(h**2)``),
        and at a kink the mean of the one-sided slopes, as ``abs`` has slope 0 at 0. Where the derived
        inputs do not change at all along that input (``sqrt(x0 * x1)`` at ``x1 = 0``), they add nothing to
        the derivative (no probes); where the chain rule still breaks down at a probe, because a singular
        operation's argument stays put along the input (``x0 + sqrt(x0 * x1)`` at ``x1 = 0``), central
        differences of the derived inputs give their slope there (``DerivativeProbes.slopes``). A derived input that is undefined on one side (``sqrt(x)`` at 0) or has no finite
        derivative near the row raises ``DerivedInputError``: the derivative does not exist there."""
        import numpy as np

        x = np.asarray(x, dtype=float).reshape(-1, self.n_inputs)
        here = self.encode(x, np)  # the rows' own values first: a row where they are undefined is that error
        singular = np.zeros(x.shape, dtype=bool)
        scale = np.zeros(x.shape[0])
        for e in self.derived:
            found = ex.singular_inputs(e, x)
            rows = np.flatnonzero(found.any(axis=1))
            if rows.size:
                singular |= found
                used = sorted(i for _, i in e.symbols())
                scale[rows] = np.maximum(scale[rows], np.abs(x[np.ix_(rows, used)]).max(axis=1))
        if not singular.any():
            return None
        rows, inputs = np.nonzero(singular)
        steps = 2.0**-20 * np.where(scale[rows] > 0, scale[rows], 1.0)
        points = np.repeat(x[rows], 2, axis=0)
        k = np.arange(rows.size)
        points[2 * k, inputs] += steps
        points[2 * k + 1, inputs] -= steps
        cols, bad = zip(*(ex.evaluate_checked(e, points) for e in self.derived))
        cols, bad = np.stack(cols, -1), np.stack(bad, -1)
        undefined = bad.any(axis=1)
        still = self.singular_inputs(points)[np.arange(points.shape[0]), np.repeat(inputs, 2)]
        unmoved = (cols == np.repeat(here[rows, len(self._direct()):], 2, axis=0)).all(axis=1)
        constant = (unmoved[0::2] & unmoved[1::2])  # the derived inputs do not change along the input
        slopes = np.full(cols.shape, np.nan)  # derived inputs' slopes at probes where the chain rule still fails
        rough = np.flatnonzero(still & ~undefined & ~np.repeat(constant, 2))
        if rough.size:  # a singular operation whose argument does not move along the input (sqrt(x0 * x1), x1 = 0)
            near = np.repeat(points[rough], 2, axis=0)
            moved, tiny = np.repeat(inputs[rough // 2], 2), np.repeat(steps[rough // 2] / 64, 2)
            near[np.arange(near.shape[0]), moved] += np.tile([1.0, -1.0], rough.size) * tiny
            ends, ends_bad = zip(*(ex.evaluate_checked(e, near) for e in self.derived))
            ends, ends_bad = np.stack(ends, -1), np.stack(ends_bad, -1).any(axis=1)
            slopes[rough] = (ends[0::2] - ends[1::2]) / (2 * tiny[0::2, None])
            still[rough] = ends_bad[0::2] | ends_bad[1::2] | ~np.isfinite(slopes[rough]).all(axis=1)
        failed = np.flatnonzero((undefined | still) & ~np.repeat(constant, 2))
        if failed.size:
            p = int(failed[0])
            r, i = int(rows[p // 2]), int(inputs[p // 2])
            name = self.input_names[i]
            where = f"{name} = {x[r, i]:.6g}"
            if undefined[p]:
                column = self.derived_names()[int(np.flatnonzero(bad[p])[0])]
                why = f"derived input {_clip(column, 80)} is not defined on both sides of {where}"
            else:
                why = f"the derived inputs have no finite derivative near {where}"
            raise DerivedInputError(f"circuit {_clip(self.name)}: the derivative with respect to input {name!r} does "
                                    f"not exist for row {r}: {why}")
        keep = np.repeat(~constant, 2)
        return DerivativeProbes(rows, inputs, points[keep], ~constant, slopes[keep])

    def with_observables(self, observables: Iterable[ObservableLike]) -> CircuitTemplate:
        obs = tuple(Observable.coerce(o) for o in observables)
        return _replace(self, observables=obs)

    def with_shots(self, shots: int | None) -> CircuitTemplate:
        return _replace(self, shots=shots)

    def problems(self) -> list[str]:
        """Everything wrong with this template, as readable messages (empty if fine).

        Templates are frozen, so the answer is computed once (backends ask on every submit).
        """
        if "problems" not in self._memo:
            self._memo["problems"] = self._find_problems()
        return list(self._memo["problems"])

    def _find_problems(self) -> list[str]:
        if not _integer(self.n_qubits) or self.n_qubits < 1:
            return [f"circuit {_clip(self.name)}: n_qubits must be a positive integer, got {number(self.n_qubits)}"]
        if self.n_qubits > MAX_QUBITS:
            return [f"circuit {_clip(self.name)}: {too_many_qubits(self.n_qubits)}"]
        out = self._name_problems()
        used: dict[str, set] = {"input": set(), "weight": set()}  # the parameters some gate (or derived input) uses
        for k, op in enumerate(self.ops):
            out += self._op_problems(k, op, used)
        out += [p for a in self.phase if (p := self._angle_problem(f"circuit {_clip(self.name)}, global phase", a, used))]
        out += self._derived_problems(used)
        out += self._unused_problems(used)
        out += self._observable_problems()
        out += self._shots_problems()
        return out

    def _name_problems(self) -> list[str]:
        """Names that are not strings or not Unicode text, duplicates, and inputs that are also weights."""
        out: list[str] = []
        for what, names in (("name", (self.name,)), ("input name", self.input_names),
                            ("weight name", self.weight_names)):
            for why, bad in (("is not a string", [n for n in names if not isinstance(n, str)]),
                             ("is not Unicode text (it holds a lone surrogate, which no output can write)",
                              [n for n in names if lone_surrogate(n) is not None])):
                if bad:
                    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
                    out.append(f"circuit {_clip(self.name)}: {what} {_clip(bad[0])}{more} {why}")
        for names, what in ((self.input_names, "input"), (self.weight_names, "weight")):
            if len(set(names)) != len(names):
                out.append(f"circuit {_clip(self.name)}: duplicate {what} names in {list(names)}")
        clash = set(self.input_names) & set(self.weight_names)
        if clash:
            out.append(f"circuit {_clip(self.name)}: parameters {sorted(clash)} are both inputs and weights")
        return out

    def _op_problems(self, k: int, op: Op, used: dict[str, set]) -> list[str]:
        """Op ``k``'s gate, wires and angles; the parameters its angles bind are added to ``used``."""
        out: list[str] = []
        where = f"circuit {_clip(self.name)}, op {k} ({op.name if isinstance(op.name, str) else shown(op.name)})"
        spec = GATES.get(op.name) if isinstance(op.name, str) else None
        if spec is None:
            return [f"{where}: unknown gate {shown(op.name)}; known gates: {', '.join(sorted(GATES))}"]
        if len(op.wires) != spec.num_wires:
            out.append(f"{where}: acts on {spec.num_wires} wire(s), got {_few(list(op.wires))}")
        if not all(_integer(w) for w in op.wires):
            out.append(f"{where}: wires must be integers, got {_few(list(op.wires))}")
            return out
        if len(set(op.wires)) != len(op.wires):
            out.append(f"{where}: repeated wire in {_few(list(op.wires))}")
        bad = [w for w in op.wires if not 0 <= w < self.n_qubits]
        if bad:
            out.append(f"{where}: wire(s) {_few(bad)} outside the circuit's {number(self.n_qubits)} qubits")
        if len(op.angles) != spec.num_params:
            out.append(f"{where}: takes {spec.num_params} angle(s), got {len(op.angles)}")
        for a in op.angles:
            problem = self._angle_problem(where, a, used)
            if problem is not None:
                out.append(problem)
        return out

    def _angle_problem(self, where: str, a: Angle, used: dict[str, set]) -> str | None:
        """What is wrong with one of an op's angles, or None (a bound parameter is added to ``used``)."""
        if not (isinstance(a, Angle) and _finite(a.scale) and _finite(a.offset)):
            return f"{where}: angle {shown(a, 160)} is not a finite number or affine symbol"
        if a.kind == "const":
            return None
        count = self.n_columns if a.kind == "input" else self.n_weights
        if a.kind not in used or not 0 <= a.index < count:
            return (f"{where}: unbound parameter ({a.kind if isinstance(a.kind, str) else shown(a.kind)} "
                    f"#{number(a.index)}) is not declared")
        used[a.kind].add(a.index)
        return None

    def _derived_problems(self, used: dict[str, set]) -> list[str]:
        """Derived inputs that are not expressions, use no input or other symbols, or that no gate uses;
        the inputs they use are added to ``used``."""
        out: list[str] = []
        n_in = self.n_inputs
        for k, e in enumerate(self.derived):
            where = f"circuit {_clip(self.name)}, derived input {k}"
            if not isinstance(e, Expr):
                out.append(f"{where}: must be an Expr, got {type(e).__name__}")
                continue
            syms = e.symbols()
            if not syms:
                out.append(f"{where}: {e} uses no input (a constant belongs in the angle's offset)")
            for kind, i in sorted(syms):
                if kind != "input" or not 0 <= i < n_in:
                    out.append(f"{where}: {e} uses {kind} #{i}; a derived input may use only the "
                               f"circuit's {n_in} input(s)")
                else:
                    used["input"].add(i)
            if n_in + k not in used["input"]:
                out.append(f"{where} ({e.format(self.input_names)}) is not used by any gate")
        return out

    def _unused_problems(self, used: dict[str, set]) -> list[str]:
        """Declared inputs and weights that nothing uses."""
        out: list[str] = []
        for kind, names in (("input", self.input_names), ("weight", self.weight_names)):
            extra = [n for i, n in enumerate(names) if i not in used[kind]]
            if extra:
                out.append(f"circuit {_clip(self.name)}: extra {kind} parameter(s) {extra} not used by any gate")
        return out

    def _observable_problems(self) -> list[str]:
        """Observables with a coefficient that is not finite or a qubit outside the circuit."""
        out: list[str] = []
        for j, obs in enumerate(self.observables):
            text = _clip(str(obs))[1:-1]
            if not all(_finite(t.coeff) for t in obs.terms):
                out.append(f"circuit {_clip(self.name)}: observable {j} ({text}) has a coefficient that is not finite")
            bad = [w for w in obs.wires if not 0 <= w < self.n_qubits]
            if bad:
                out.append(
                    f"circuit {_clip(self.name)}: observable {j} ({text}) acts on qubit(s) {_few(bad)} "
                    f"but the circuit has only {number(self.n_qubits)} qubits"
                )
        return out

    def _shots_problems(self) -> list[str]:
        if self.shots is not None and not (_integer(self.shots) and self.shots >= 1):
            return [f"circuit {_clip(self.name)}: shots must be a positive integer or None, got {shown(self.shots)}"]
        if self.shots is not None and self.shots > MAX_SHOTS:
            return [f"circuit {_clip(self.name)}: shots {number(self.shots)} are more than any backend takes "
                    "(at most 2**63 - 1: random generators count in 64-bit integers)"]
        return []

    def check(self) -> CircuitTemplate:
        """Raise ``CircuitError`` listing every problem; return self if none."""
        probs = self.problems()
        if probs:
            raise CircuitError("; ".join(probs))
        return self

    def to_dict(self) -> dict:
        """Plain-data form (used for hashing and display; serialization uses QPY)."""

        def ang(a: Angle) -> list:
            return [a.kind, a.index, a.scale + 0.0, a.offset + 0.0]  # -0.0 -> 0.0: stable fingerprints

        return {
            "name": self.name,
            "n_qubits": self.n_qubits,
            "ops": [[op.name, list(op.wires), [ang(a) for a in op.angles]] for op in self.ops],
            "inputs": list(self.input_names),
            "weights": list(self.weight_names),
            "observables": [[[t.coeff, [list(p) for p in t.paulis]] for t in o.terms] for o in self.observables],
            "shots": self.shots,
            **({"derived": [e.to_json() for e in self.derived]} if self.derived else {}),
            **({"phase": [ang(a) for a in self.phase]} if self.phase else {}),
        }

    @staticmethod
    def from_dict(d: dict) -> CircuitTemplate:
        return CircuitTemplate(
            n_qubits=int(d["n_qubits"]),
            ops=tuple(Op(name, tuple(wires), tuple(_angle_of(a) for a in angs)) for name, wires, angs in d["ops"]),
            input_names=tuple(d.get("inputs", ())),
            weight_names=tuple(d.get("weights", ())),
            observables=tuple(
                Observable(tuple(PauliTerm(as_float(c, "coefficient"), tuple((int(w), p) for w, p in ps))
                                 for c, ps in o))
                for o in d.get("observables", ())
            ),
            shots=d.get("shots"),
            name=d.get("name", "circuit"),
            derived=tuple(Expr.from_json(e) for e in d.get("derived", ())),
            phase=tuple(_angle_of(a) for a in d.get("phase", ())),
        )

    def fingerprint(self) -> str:
        """A stable content hash (cache key for compiled or transpiled forms)."""
        if "fingerprint" not in self._memo:
            blob = json.dumps(self.to_dict(), sort_keys=True).encode()
            self._memo["fingerprint"] = hashlib.sha256(blob).hexdigest()[:16]
        return self._memo["fingerprint"]

    def __str__(self) -> str:
        lines = [
            f"CircuitTemplate {_clip(self.name)}: {number(self.n_qubits)} qubits, {len(self.ops)} ops, "
            f"{self.n_inputs} inputs" + (f" (+{len(self.derived)} derived)" if self.derived else "")
            + f", {self.n_weights} weights, "
            + (f"{number(self.shots)} shots" if self.shots else "exact")
        ]
        for k, name in enumerate(self.derived_names()):
            lines.append(f"  input {self.n_inputs + k} = {name}")
        for j, o in enumerate(self.observables):
            lines.append(f"  <O{j}> = {o}")
        return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class DerivativeProbes:
    """From ``CircuitTemplate.derivative_probes``: the singular pairs (row ``rows[k]``, input ``inputs[k]``).
    A pair with ``probed[k]`` has two probe rows in ``points`` (in pair order), its row with the input moved
    up and down, and its derivative is their mean (``combine``); along the input of any other pair the
    derived inputs do not change, so only the inputs that gates read themselves contribute to it."""

    rows: object  # numpy [m]
    inputs: object  # numpy [m]
    points: object  # numpy [2p, n_inputs], p = probed.sum()
    probed: object  # numpy bool [m]
    slopes: object = None
    """numpy [2p, n_derived]: the derived inputs' slopes along the input at probe rows where the chain rule
    still breaks down (a singular operation whose argument stays put: ``sqrt(x0 * x1)`` at ``x1 = 0``),
    from central differences; NaN rows elsewhere (differentiate there as usual)"""

    @property
    def point_rows(self):
        """The row each probe row stands in for ``[2p]``."""
        import numpy as np

        return np.repeat(self.rows[self.probed], 2)

    @property
    def point_inputs(self):
        """The input each probe row moves ``[2p]``."""
        import numpy as np

        return np.repeat(self.inputs[self.probed], 2)

    def combine(self, slopes):
        """The derivatives of the probed pairs ``[p, ...]`` from those at their probe rows ``[2p, ...]``, each
        with respect to its pair's input: the mean of the two."""
        return 0.5 * (slopes[0::2] + slopes[1::2])


def _concrete(a):
    """``a`` as a float numpy array (numpy, torch, autograd), or None when its values cannot be read
    (a traced jax value)."""
    import numpy as np

    while hasattr(a, "_value"):  # autograd's ArrayBox
        a = a._value
    if hasattr(a, "detach"):
        a = a.detach().cpu()
    try:
        return np.asarray(a, dtype=float)
    except Exception:  # abstract values (jax tracing) and the like: nothing to check
        return None


def _clip(text: str, limit: int = 60) -> str:
    """``repr`` of user text for a message: escaped (no control characters reach the terminal) and short."""
    r = shown(text, limit=None)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


def _few(items: list, k: int = 5) -> str:
    """A list of numbers for a message: its first ``k`` items, and how many more."""
    head = ", ".join(number(i) for i in items[:k])
    return f"[{head}]" if len(items) <= k else f"[{head}, ... {len(items) - k} more]"


def too_many_qubits(n: int) -> str:
    return f"n_qubits must be at most {MAX_QUBITS:,} (hqflow.ir.circuit.MAX_QUBITS), got {number(n)}"


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _finite(v) -> bool:
    """Whether ``v`` is a finite real number that a float holds (an integer past a float's range is not)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer past a float's range
        return False


def _angle_of(a) -> Angle:
    """``[kind, index, scale, offset]`` (``to_dict``'s form) as an ``Angle``."""
    kind, index, scale, offset = a
    return Angle(kind, int(index), as_float(scale, "angle scale"), as_float(offset, "angle offset"))


def _replace(t: CircuitTemplate, **changes) -> CircuitTemplate:
    import dataclasses

    return dataclasses.replace(t, **changes)
