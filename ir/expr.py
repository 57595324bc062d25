"""Classical functions of a circuit's inputs: the expressions behind *derived inputs*.

A template angle is affine in one symbol (``a * x + b``). Feature maps such as
Qiskit's ``ZZFeatureMap`` use angles like ``2 (π - x0)(π - x1)``; the converters
lower each such angle into a **derived input**: one more input column whose value
an ``Expr`` computes from the raw inputs, row by row, before a job runs. The
circuit stays affine in its columns, so batching, compilation and parameter shift
work unchanged, and gradients with respect to the raw inputs follow the chain rule
(``derivative``).

An ``Expr`` is plain data: an operation name, its arguments, and for leaves a value
(``const``) or an index (``input``/``weight``; templates only keep ``input``
leaves: ``weight`` leaves exist while converters trace, to tell mixed angles apart).
Besides arithmetic and numpy's functions, ``guard(v, c)`` is ``v`` where ``c != 0``
and undefined (NaN) where ``c == 0``: an amplitude encoding's angles exist only for
a vector that is not zero.

Where an operation has no finite derivative (``sqrt`` of 0, ``arctan2`` at (0, 0))
the chain rule fails even when a circuit's values are smooth; ``singular_inputs``
says where, so that callers differentiate there another way
(``CircuitTemplate.derivative_probes``). ``undefined_reason`` says why a value is
not a number (``'log of 0'``).

    e = mul(const(2.0), add(const(math.pi), mul(const(-1.0), input(0))), ...)
    evaluate(e, x, np)            # x [B, n_inputs] -> [B]; torch works too: evaluate(e, t, torch)
    e.to_json(); Expr.from_json(data)
    e.format(("x0", "x1"))        # '2*(π - x0)*(π - x1)'
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .text import number, one_line, shown

# unary functions, by their numpy/torch name (both libraries spell these alike)
FUNCTIONS = ("sin", "cos", "tan", "arcsin", "arccos", "arctan", "exp", "log", "sqrt", "abs", "sign")
_SCALAR = {
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "arcsin": math.asin, "arccos": math.acos,
    "arctan": math.atan, "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "abs": abs,
    "sign": lambda v: float((v > 0) - (v < 0)),
}
_ARITY = {"add": None, "mul": None, "pow": 2, "arctan2": 2, "guard": 2, **{f: 1 for f in FUNCTIONS}}
MAX_DEPTH, MAX_NODES = 64, 100_000  # bounds on expressions read from documents


class ExprError(ValueError):
    """A malformed expression (or one read from a document). The message is one line."""

    def __init__(self, message: object = ""):
        super().__init__(one_line(str(message)))


@dataclass(frozen=True)
class Expr:
    """One node: ``op`` is ``const``/``input``/``weight`` (leaves) or a function of ``args``."""

    op: str
    args: tuple[Expr, ...] = ()
    value: float = 0.0  # the constant (op == "const")
    index: int = -1  # the symbol's column (op == "input" or "weight")

    def symbols(self) -> frozenset[tuple[str, int]]:
        """Every ``(kind, index)`` leaf the expression uses."""
        if self.op in ("input", "weight"):
            return frozenset({(self.op, self.index)})
        out: frozenset = frozenset()
        for a in self.args:
            out |= a.symbols()
        return out

    @property
    def is_const(self) -> bool:
        return self.op == "const"

    def format(self, input_names=(), weight_names=()) -> str:
        """Infix text, naming leaves by ``input_names``/``weight_names`` (``x[i]``/``w[j]`` otherwise)."""
        return _fmt(self, tuple(input_names), tuple(weight_names), 0)

    def __str__(self) -> str:
        return self.format()

    def to_json(self) -> Any:
        """Nested lists: ``["const", v]``, ``["input", i]``, ``[op, arg, ...]``."""
        if self.op == "const":
            return ["const", self.value]
        if self.op in ("input", "weight"):
            return [self.op, self.index]
        return [self.op, *(a.to_json() for a in self.args)]

    @staticmethod
    def from_json(data: Any) -> Expr:
        """Inverse of ``to_json``; raises ``ExprError`` naming what is wrong (bounded depth and size)."""
        count = [0]

        def read(d: Any, depth: int) -> Expr:
            count[0] += 1
            if depth > MAX_DEPTH or count[0] > MAX_NODES:
                raise ExprError(f"expression deeper than {MAX_DEPTH} levels or larger than {MAX_NODES} nodes")
            if not isinstance(d, list) or not d or not isinstance(d[0], str):
                raise ExprError(f"expression node must be a list [op, ...], got {_short(d)}")
            op, rest = d[0], d[1:]
            if op == "const":
                if len(rest) != 1 or not _is_number(rest[0]) or not _finite(rest[0]):
                    got = number(rest[0]) if len(rest) == 1 else _short(rest)
                    raise ExprError(f"'const' takes one finite number a float holds, got {got}")
                return const(rest[0])
            if op in ("input", "weight"):
                if len(rest) != 1 or not isinstance(rest[0], int) or isinstance(rest[0], bool) or rest[0] < 0:
                    raise ExprError(f"{op!r} takes one non-negative integer index, got {_short(rest)}")
                return Expr(op, index=rest[0])
            if op not in _ARITY:
                raise ExprError(f"unknown expression operation {_short(op)}; known: {', '.join(sorted(_ARITY))}")
            arity = _ARITY[op]
            if (arity is not None and len(rest) != arity) or (arity is None and len(rest) < 2):
                want = f"{arity}" if arity else "at least 2"
                raise ExprError(f"{op!r} takes {want} argument(s), got {len(rest)}")
            return apply(op, *(read(a, depth + 1) for a in rest))

        return read(data, 0)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: float) -> bool:
    """Whether the number ``v`` is finite and a float holds it (an integer past a float's range is not)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _short(v: Any) -> str:
    return shown(v, 40)


# --- building (constant subtrees fold, so evaluation never meets a function of a constant) ---------


def const(v: float) -> Expr:
    """The constant ``v`` as a float; ``ExprError`` if it is not a real number or is past a float's range."""
    try:
        return Expr("const", value=float(v) + 0.0)
    except OverflowError:
        raise ExprError(f"the constant {number(v)} is past a float's range") from None
    except (TypeError, ValueError):
        raise ExprError(f"the constant {_short(v)} is not a real number") from None


def input(i: int) -> Expr:  # noqa: A001 - mirrors Angle.input
    return Expr("input", index=int(i))


def weight(j: int) -> Expr:
    return Expr("weight", index=int(j))


def apply(op: str, *args: Expr) -> Expr:
    """``op`` of ``args``, with constants folded and sums and products flattened."""
    if op not in _ARITY:
        raise ExprError(f"unknown expression operation {op!r}")
    if all(a.is_const for a in args):
        return const(_scalar(op, [a.value for a in args]))
    if op in ("add", "mul"):
        flat: list[Expr] = []
        for a in args:
            flat.extend(a.args if a.op == op else (a,))
        neutral = 0.0 if op == "add" else 1.0
        c = [a.value for a in flat if a.is_const]
        rest = [a for a in flat if not a.is_const]
        folded = _scalar(op, c) if c else neutral
        if op == "mul" and folded == 0.0:
            return const(0.0)
        if folded != neutral:
            rest.insert(0, const(folded))
        return rest[0] if len(rest) == 1 else Expr(op, tuple(rest))
    if op == "pow" and args[1].is_const and args[1].value == 1.0:
        return args[0]
    return Expr(op, tuple(args))


def add(*a: Expr) -> Expr:
    return apply("add", *a)


def mul(*a: Expr) -> Expr:
    return apply("mul", *a)


def neg(a: Expr) -> Expr:
    return mul(const(-1.0), a)


def power(a: Expr, b: Expr) -> Expr:
    return apply("pow", a, b)


def _scalar(op: str, vals: list[float]) -> float:
    """``op`` of constants, folded; ``ExprError`` where that is not a finite real number (``log(0)``, or a
    product past a float's range)."""
    try:
        out = _fold(op, vals)
    except (ValueError, OverflowError, ZeroDivisionError):
        raise ExprError(f"{op} of the constant(s) {shown(vals, 80)} is not a real number") from None
    if not math.isfinite(out):
        raise ExprError(f"{op} of the constant(s) {shown(vals, 80)} is not a finite number")
    return out


def _fold(op: str, vals: list[float]) -> float:
    if op == "add":
        return math.fsum(vals)
    if op == "mul":
        return math.prod(vals)
    if op == "pow":
        out = vals[0] ** vals[1]
        if isinstance(out, complex):
            raise ValueError
        return out
    if op == "arctan2":
        return math.atan2(vals[0], vals[1])
    if op == "guard":
        if vals[1] == 0.0:
            raise ValueError
        return vals[0]
    return float(_SCALAR[op](vals[0]))


# --- evaluating --------------------------------------------------------------------------------


def evaluate(e: Expr, x: Any, xp: Any, w: Any = None) -> Any:
    """The expression per row: ``x`` is ``[B, n_inputs]`` (or ``[n_inputs]``) (``w`` ``[n_weights]`` or ``[B, n_weights]``,
    if it has weight leaves) as numpy arrays (``xp=numpy``) or torch tensors (``xp=torch``); returns ``[B]``."""
    op = e.op
    if op == "const":
        return e.value
    if op == "input":
        return x[..., e.index]
    if op == "weight":
        return w[..., e.index]
    return _apply(op, [evaluate(a, x, xp, w) for a in e.args], xp)


def evaluate_checked(e: Expr, x: Any) -> tuple[Any, Any]:
    """``evaluate(e, x, numpy)`` (the same arithmetic), and per row whether any value on the way is not a
    finite number: ``arctan(1 / x)`` at 0 is π/2 to numpy, but ``1 / 0`` is not a real number."""
    import numpy as np

    bad = [np.zeros(np.shape(x)[:-1], dtype=bool)]

    def walk(node: Expr) -> Any:
        if node.op == "const":
            return node.value
        if node.op == "input":
            return x[..., node.index]
        value = _apply(node.op, [walk(a) for a in node.args], np)
        bad[0] = bad[0] | ~np.isfinite(value)
        return value

    with np.errstate(all="ignore"):
        value = walk(e)
    return value, np.broadcast_to(bad[0], np.shape(x)[:-1])


def _apply(op: str, vals: list, xp: Any) -> Any:
    """One operation on its arguments' values."""
    if op == "add":
        out = vals[0]
        for v in vals[1:]:
            out = out + v
        return out
    if op == "mul":
        out = vals[0]
        for v in vals[1:]:
            out = out * v
        return out
    if op == "pow":
        return vals[0] ** vals[1]
    if op == "arctan2":
        y, xx = vals
        return xp.arctan2(*_like(xp, y, xx))
    if op == "guard":
        v, c = _like(xp, *vals)
        return xp.where(c != 0, v, c * 0.0 + math.nan)  # NaN where c is 0 (its gradient: none)
    return getattr(xp, op)(vals[0])


def _like(xp: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """Both arguments as arrays of one kind (a constant next to a column)."""
    if isinstance(a, float):
        a = b * 0 + a
    if isinstance(b, float):
        b = a * 0 + b
    return a, b


# --- differentiating ---------------------------------------------------------------------------


def derivative(e: Expr, kind: str, index: int) -> Expr:
    """``d e / d symbol`` as an expression (folded: a symbol ``e`` does not use gives ``const(0)``)."""
    if (kind, index) not in e.symbols():
        return const(0.0)
    op, args = e.op, e.args
    if op in ("input", "weight"):
        return const(1.0)
    d = [derivative(a, kind, index) for a in args]
    if op == "add":
        return add(*d)
    if op == "mul":
        return add(*(mul(*args[:k], dk, *args[k + 1:]) for k, dk in enumerate(d) if dk != const(0.0)))
    a = args[0]
    if op == "pow":
        base, ex = args
        if ex.is_const:
            return mul(ex, power(base, const(ex.value - 1.0)), d[0])
        return mul(e, add(mul(d[1], apply("log", base)), mul(ex, d[0], power(base, const(-1.0)))))
    if op == "arctan2":
        y, x = args
        return mul(add(mul(x, d[0]), neg(mul(y, d[1]))), power(add(power(x, const(2.0)), power(y, const(2.0))),
                                                                 const(-1.0)))
    if op == "guard":  # the guarded value's derivative where it is defined
        return d[0]
    one = const(1.0)
    inner = {
        "sin": lambda: apply("cos", a),
        "cos": lambda: neg(apply("sin", a)),
        "tan": lambda: add(one, power(apply("tan", a), const(2.0))),
        "arcsin": lambda: power(add(one, neg(power(a, const(2.0)))), const(-0.5)),
        "arccos": lambda: neg(power(add(one, neg(power(a, const(2.0)))), const(-0.5))),
        "arctan": lambda: power(add(one, power(a, const(2.0))), const(-1.0)),
        "exp": lambda: e,
        "log": lambda: power(a, const(-1.0)),
        "sqrt": lambda: mul(const(0.5), power(e, const(-1.0))),
        "abs": lambda: apply("sign", a),
        "sign": lambda: const(0.0),
    }[op]()
    return mul(inner, d[0])


# --- where the chain rule breaks down, and why a value is undefined ---------------------------


def singular_inputs(e: Expr, x: Any) -> Any:
    """``[B, n_inputs]`` booleans: the rows and inputs at which ``derivative(e, "input", i)`` breaks down.

    Some operation on the way from input ``i`` has no finite derivative there (``sqrt`` of 0, ``arctan2``
    at (0, 0), ``arcsin``/``arccos`` at ±1) or is at the edge of its domain (a fractional power of 0), so
    the chain rule meets 0/0 or ∞, or gives a one-sided slope, even where a circuit's values are smooth in
    the inputs (an amplitude encoding with a zero block of features). ``x`` is a numpy ``[B, n_inputs]``
    array; only input leaves are expected."""
    import numpy as np

    out = np.zeros(x.shape, dtype=bool)

    def walk(node: Expr) -> Any:
        if node.op == "const":
            return node.value
        if node.op == "input":
            return x[:, node.index]
        vals = [walk(a) for a in node.args]
        value = _apply(node.op, vals, np)
        rows = np.flatnonzero(np.broadcast_to(np.logical_not(_finite_slope(node.op, vals, value, np)), (x.shape[0],)))
        if rows.size:
            out[np.ix_(rows, sorted(i for kind, i in node.symbols() if kind == "input"))] = True
        return value

    with np.errstate(all="ignore"):
        walk(e)
    return out


def _finite_slope(op: str, vals: list, value: Any, np: Any) -> Any:
    """Whether the operation's own partial derivatives are finite at ``vals`` (per row)."""
    if op in ("sqrt", "log"):
        return np.isfinite(1.0 / (value if op == "sqrt" else vals[0]))
    if op in ("arcsin", "arccos"):
        return np.isfinite((1.0 - vals[0] * vals[0]) ** -0.5)
    if op == "tan":
        return np.isfinite(value * value)
    if op == "exp":
        return np.isfinite(value)
    if op == "arctan2":
        return np.isfinite(1.0 / (vals[0] * vals[0] + vals[1] * vals[1]))
    if op == "pow":
        base, exponent = vals
        slope = np.isfinite(exponent * base ** (exponent - 1.0))
        if isinstance(exponent, float):  # a fractional power of 0 is at the edge of its domain
            return slope & ((base != 0) | float(exponent).is_integer())
        return slope & np.isfinite(value * np.log(base))
    return True  # add, mul, sin, cos, arctan, abs, sign, guard


def undefined_reason(e: Expr, x: Any, names: tuple = ()) -> str:
    """Why ``e`` is not a finite number at one row ``x`` (a numpy ``[n_inputs]``): the innermost operation
    whose arguments are finite and whose value is not, e.g. ``'log of 0'`` or ``'arcsin of 1.5'``."""
    import numpy as np

    found: list[str] = []

    def walk(node: Expr) -> Any:
        if node.op == "const":
            return node.value
        if node.op == "input":
            return float(x[node.index])
        vals = [walk(a) for a in node.args]
        value = float(_apply(node.op, [np.float64(v) for v in vals], np))
        if not found and not math.isfinite(value) and all(math.isfinite(v) for v in vals):
            found.append(_why(node, vals, names))
        return value if math.isfinite(value) else math.nan  # later operations can hide it (arctan(inf))

    with np.errstate(all="ignore"):
        walk(e)
    return found[0] if found else "a value on the way is not a finite number"


def _why(node: Expr, vals: list, names: tuple) -> str:
    if node.op == "guard":
        return f"it is undefined where {_clip(node.args[1].format(names), 60)} is 0"
    if node.op == "pow":
        return f"{vals[0]:.6g} ** {vals[1]:.6g} is not a real number"
    if node.op in ("add", "mul"):
        return f"a {'sum' if node.op == 'add' else 'product'} overflows"
    if node.op in ("exp", "tan"):
        return f"{node.op} of {vals[0]:.6g} overflows"
    return f"{node.op} of {vals[0]:.6g}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- text --------------------------------------------------------------------------------------

_PRECEDENCE = {"add": 1, "mul": 2, "pow": 3}


def _num(v: float) -> str:
    for k, name in ((1.0, "π"), (-1.0, "-π"), (2.0, "2π"), (0.5, "π/2")):
        if v == k * math.pi:
            return name
    return f"{v:.12g}"


def _fmt(e: Expr, xs: tuple, ws: tuple, outer: int) -> str:
    op = e.op
    if op == "const":
        text = _num(e.value)
        return f"({text})" if outer >= 2 and e.value < 0 else text
    if op in ("input", "weight"):
        names = xs if op == "input" else ws
        if e.index < len(names):
            return names[e.index]
        return f"{'x' if op == 'input' else 'w'}[{e.index}]"
    prec = _PRECEDENCE.get(op, 4)
    if op == "add":
        args = [a for a in e.args if not a.is_const] + [a for a in e.args if a.is_const]  # x - π, not -π + x
        text = _fmt(args[0], xs, ws, 1)
        for a in args[1:]:
            if a.op == "mul" and a.args[0].is_const and a.args[0].value < 0:
                rest = mul(const(-a.args[0].value), *a.args[1:])
                text += " - " + _fmt(rest, xs, ws, 2 if rest.op == "add" else 1)
            elif a.is_const and a.value < 0:
                text += " - " + _num(-a.value)
            else:
                text += " + " + _fmt(a, xs, ws, 1)
    elif op == "mul":
        if e.args[0].is_const and e.args[0].value == -1.0:
            text = "-" + _fmt(mul(*e.args[1:]), xs, ws, 2)
        else:
            text = "*".join(_fmt(a, xs, ws, 2) for a in e.args)
    elif op == "pow":
        text = f"{_fmt(e.args[0], xs, ws, 4)}**{_fmt(e.args[1], xs, ws, 4)}"
    else:
        text = f"{op}({', '.join(_fmt(a, xs, ws, 0) for a in e.args)})"
    return f"({text})" if prec <= outer and prec < 4 else text
