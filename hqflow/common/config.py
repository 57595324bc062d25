"""Frozen config dataclasses, checked at construction: every field's type and range, named in the error.

    @dataclass(frozen=True)
    class Config:
        n_layers: int = 5
        gamma: float = 0.99
        def __post_init__(self):
            check_fields(self, {"n_layers": (1, 100), "gamma": (0, 1, "(]")})

A field's type comes from its annotation: ``int`` (not ``bool``), ``float`` (an int or a
float, finite), ``bool``, ``str``, ``tuple[str, ...]`` (a list is taken and frozen),
each optionally ``| None``. A range is ``(lo, hi)``, inclusive, or ``(lo, hi, "(]")``
style for open ends; ``None`` leaves a side open. The error is a ``ValueError`` whose
message starts with the field's name, so a command line can say which ``--set`` was wrong.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any


def check_fields(cfg: Any, bounds: dict[str, tuple] | None = None) -> None:
    """Raise ``ValueError`` for the first field of ``cfg`` of the wrong type or out of its range."""
    hints = typing.get_type_hints(type(cfg))
    bounds = bounds or {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        allowed = _alternatives(hints.get(f.name, Any))
        if value is None:
            if type(None) in allowed or Any in allowed:
                continue
            raise ValueError(f"{f.name} must be {_describe(allowed, bounds.get(f.name))}, got None")
        base = next((a for a in allowed if a is not type(None)), Any)
        ok, value = _coerce(value, base)
        if ok and f.name in bounds:
            ok = _within(value, bounds[f.name])
        if not ok:
            raise ValueError(f"{f.name} must be {_describe(allowed, bounds.get(f.name))}, got {_show(value)}")
        if value is not getattr(cfg, f.name):
            object.__setattr__(cfg, f.name, value)


def check_ints(cfg: Any, **lows: int) -> None:
    """``ValueError`` unless each named field of ``cfg`` is an integer (not a bool) at least its given low."""
    for name, low in lows.items():
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def as_type(cfg: Any, name: str, kind: type) -> None:
    """Field ``name`` of the frozen ``cfg`` as a ``kind``: a dict (from a run directory's JSON) is made one,
    anything else that is not one is refused."""
    value = getattr(cfg, name)
    if isinstance(value, dict):
        object.__setattr__(cfg, name, value := kind(**value))
    if not isinstance(value, kind):
        raise ValueError(f"{name} must be a {kind.__module__}.{kind.__name__}, got {value!r}")


def _alternatives(t: Any) -> tuple:
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        return typing.get_args(t)
    return (t,)


def _coerce(value: Any, base: Any) -> tuple[bool, Any]:
    if base is Any:
        return True, value
    if base is bool:
        return isinstance(value, bool), value
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if base is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return ok, value
    if base is str:
        return isinstance(value, str), value
    if typing.get_origin(base) is tuple:
        (item, *_) = typing.get_args(base) or (Any,)
        if isinstance(value, (list, tuple)) and all(_coerce(v, item)[0] for v in value):
            return True, tuple(value)
        return False, value
    return isinstance(value, base) if isinstance(base, type) else True, value


def _within(value: Any, bound: tuple) -> bool:
    lo, hi, ends = (*bound, "[]")[:3]
    return ((lo is None or (value >= lo if ends[0] == "[" else value > lo))
            and (hi is None or (value <= hi if ends[1] == "]" else value < hi)))


def _describe(allowed: tuple, bound: tuple | None) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}
    kinds = [names.get(a, "a list of strings" if typing.get_origin(a) is tuple else getattr(a, "__name__", str(a)))
             for a in allowed if a is not type(None)]
    text = " or ".join(kinds)
    if bound:
        lo, hi, ends = (*bound, "[]")[:3]
        sides = ((">=" if ends[0] == "[" else ">", lo), ("<=" if ends[1] == "]" else "<", hi))
        text += " " + " and ".join(f"{op} {x}" for op, x in sides if x is not None)
    return text + (", or null" if type(None) in allowed else "")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
