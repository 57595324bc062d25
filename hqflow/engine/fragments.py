"""Calling fragments: the conventions every executor shares.

* a classical fragment's function gets its input ports (and ``params``) as keywords and returns its
  outputs as a dict, a tuple in port order, or a single value when it has one output;
* a micro-batch's shot seed depends only on (run seed, step, fragment index), so every executor draws
  the same samples;
* numeric JSON ``init`` lists reach array ports as numpy arrays.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hqflow.backends import BatchResult, CircuitBatch
from hqflow.ir.graph import Fragment, resolve_fn
from hqflow.ir.text import one_line

from ..gradients import Spsa, estimate
from ..jobs.client import JobClient, bound_client


class FragmentError(RuntimeError):
    """A fragment raised or returned something its ports do not allow. The message is one line
    (``one_line``): a fragment's own multi-line error text is escaped."""

    def __init__(self, message: object = ""):
        super().__init__(one_line(str(message)))


def step_seed(seed: int | None, step: int, index: int) -> int | None:
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, step, index]).generate_state(1)[0])


def as_port_value(value: Any, port_type: str) -> Any:
    """JSON ``init`` values are lists; hand numeric lists to array-like ports as numpy arrays."""
    if isinstance(value, list) and port_type in ("array", "tensor", "any"):
        try:
            arr = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            return value
        if port_type == "tensor":
            import torch

            return torch.as_tensor(arr)
        return arr
    return value


def call_fragment(f: Fragment, args: Mapping[str, Any], client: JobClient | None = None, fn=None) -> dict[str, Any]:
    """Call a classical fragment's function (with ``client`` as its ``get_client()``) and check
    its outputs against its ports. ``fn``: the function itself, where it came by value (a
    ``__main__`` function in a Ray worker); otherwise it is resolved from ``f.fn``."""
    fn = fn if fn is not None else resolve_fn(f.fn)
    with bound_client(client):
        try:
            result = fn(**args, **f.kwargs)
        except Exception as exc:
            raise FragmentError(f"fragment {f.name!r} ({f.fn}) raised {type(exc).__name__}: {exc}") from exc
    return _check_outputs(f, result)


def _check_outputs(f: Fragment, result: Any) -> dict[str, Any]:
    names = [p.name for p in f.outputs]
    if not names:
        return {}
    if isinstance(result, dict) and set(result) == set(names):
        return result
    if len(names) == 1 and not isinstance(result, dict):
        return {names[0]: result}
    if isinstance(result, tuple) and len(result) == len(names):
        return dict(zip(names, result))
    got = sorted(result) if isinstance(result, dict) else type(result).__name__
    raise FragmentError(f"fragment {f.name!r} must return its outputs {names} (a dict or a tuple in order), got {got}")


def execute_batch(f: Fragment, args: Mapping[str, Any], seed: int | None):
    """The one batch an ``execute`` fragment submits, and its postprocessing (``None`` without gradient)."""
    inputs, weights = args.get("inputs"), args.get("weights")
    if f.gradient is None:
        return CircuitBatch.make(f.circuit, inputs, weights, seed=seed), None
    settings = None if f.spsa is None else Spsa(*f.spsa, center=True)  # the centre row gives the values port
    return estimate(f.gradient, f.circuit, inputs, weights, settings=settings, seed=seed)


def execute_outputs(f: Fragment, result: BatchResult, post) -> dict[str, Any]:
    """An ``execute`` fragment's output ports from its job's result."""
    if post is not None:
        g = post(result)
        out = {"values": g.values, "jacobian": g.jacobian, "stderr": g.stderr}
    else:
        out = {"values": result.values, "stderr": result.stderr, "probs": result.probs, "counts": result.counts}
    return {p.name: out[p.name] for p in f.outputs}
