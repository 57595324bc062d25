"""Calling fragments: the conventions every executor shares.

* a classical fragment's function gets its input ports (and ``params``) as
  keywords and returns its outputs as a dict, a tuple in port order, or a
  single value when it has one output;
* a micro-batch's shot seed depends only on (run seed, step, fragment index),
  so every executor draws the same samples;
* numeric JSON ``init`` lists reach array ports as numpy arrays;
* a classical fragment that runs quantum jobs itself (an RL actor's policy
  forward passes) times each one with ``job_span(backend)``; ``call_fragment``
  hands them back on its outputs (``Outputs.jobs``, times from the call's start)
  and the executors add them to the run's spans, so the trace shows that
  quantum work too.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hqflow.backends import BatchResult, CircuitBatch
from hqflow.ir.graph import Fragment, resolve_fn

from .gradients import param_shift
from .trace import Span


class FragmentError(RuntimeError):
    """A fragment raised or returned something its ports do not allow."""


@dataclass
class RunResult:
    outputs: list[dict[str, Any]]  # graph outputs, one dict per step
    spans: list[Span]
    state: dict[str, Any]  # final value on each loop-carried edge, keyed "src_frag.port"
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def column(self, name: str) -> list[Any]:
        """One graph output across all steps."""
        return [o[name] for o in self.outputs]


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


class Outputs(dict):
    """A classical fragment's outputs, plus ``jobs``: the quantum jobs it ran itself, as
    ``(backend, start, end, outcome)`` with times in seconds from the call's start."""

    jobs: tuple = ()


_CALL = threading.local()  # the fragment call running on this thread: its start and its jobs


@contextmanager
def job_span(backend: str):
    """Time one quantum job that a classical fragment runs itself, for the run's trace.

    ``with job_span(backend.name): backend.submit(batch).result()``. Outside a
    fragment call (plain Python) it does nothing.
    """
    jobs = getattr(_CALL, "jobs", None)
    if jobs is None:
        yield
        return
    start, outcome = time.perf_counter(), "ok"
    try:
        yield
    except BaseException as exc:
        outcome = f"error: {exc}"
        raise
    finally:
        jobs.append((str(backend), start - _CALL.t0, time.perf_counter() - _CALL.t0, outcome))


def job_spans(out: Any, fragment: str, resource: str, step: int, start: float, version=None,
              lane: str = "") -> list[Span]:
    """The spans of the jobs a fragment call ran itself, placed on the run's clock at ``start``.

    Each is an ``execute`` span on resource ``qpu:BACKEND``, in lane ``qpu:BACKEND/LANE``
    (the worker that submitted it), named ``FRAGMENT/job``.
    """
    return [Span(f"{fragment}/job", "execute", f"qpu:{b}", step, start + t0, start + t1, outcome, version,
                 f"qpu:{b}/{lane or resource}")
            for b, t0, t1, outcome in getattr(out, "jobs", ())]


def call_fragment(f: Fragment, args: Mapping[str, Any]) -> dict[str, Any]:
    """Call a classical fragment's function and check its outputs against its ports."""
    fn = resolve_fn(f.fn)
    outer = getattr(_CALL, "jobs", None), getattr(_CALL, "t0", None)
    _CALL.jobs, _CALL.t0 = [], time.perf_counter()
    try:
        result = fn(**args, **f.kwargs)
    except Exception as exc:
        raise FragmentError(f"fragment {f.name!r} ({f.fn}) raised {type(exc).__name__}: {exc}") from exc
    finally:
        jobs = tuple(_CALL.jobs)
        _CALL.jobs, _CALL.t0 = outer
    out = Outputs(_check_outputs(f, result))
    out.jobs = jobs
    return out


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
    if f.gradient == "param-shift":
        return param_shift(f.circuit, inputs, weights, seed=seed)
    return CircuitBatch.make(f.circuit, inputs, weights, seed=seed), None


def execute_outputs(f: Fragment, result: BatchResult, post) -> dict[str, Any]:
    """An ``execute`` fragment's output ports from its job's result."""
    if post is not None:
        g = post(result)
        out = {"values": g.values, "jacobian": g.jacobian, "stderr": g.stderr}
    else:
        out = {"values": result.values, "stderr": result.stderr, "probs": result.probs, "counts": result.counts}
    return {p.name: out[p.name] for p in f.outputs}
