"""Quantum backends behind one asynchronous protocol, looked up by name.

    from hqflow.backends import get_backend
    backend = get_backend("aer")                      # or "reference", "pennylane:default.qubit"
    job = backend.submit(CircuitBatch.make(template, inputs, weights))
    values = job.result().values

Backends are imported lazily, so ``import hqflow.backends`` stays cheap.
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

from hqflow.ir.validate import set_backend_lookup

from .base import (
    Backend,
    BackendError,
    BatchResult,
    Capabilities,
    CircuitBatch,
    FutureJob,
    Job,
    JobCancelled,
    JobFailed,
    LocalBackend,
)

# name -> "module:factory"; a factory takes (suffix, **options) where suffix is the
# part after "name:" (e.g. the PennyLane device name), or None.
_REGISTRY: dict[str, str | Callable[..., Backend]] = {
    "reference": "hqflow.backends.reference:ReferenceBackend",
    "aer": "hqflow.backends.aer:AerBackend",
    "pennylane": "hqflow.backends.pennylane_device:PennyLaneBackend",
    "emulated-qpu": "hqflow.backends.emulated:EmulatedQPU",
    "compiled": "hqflow.backends.compiled:CompiledBackend",
    "azure": "hqflow.backends.azure.backend:AzureBackend",  # azure:<target>; its targets are listed from the workspace
}
# The default for exact local simulation: the fastest backend at small widths
# (benchmarks/simulators.py). ``Pipeline.execute`` and the workloads default to it.
DEFAULT_BACKEND = "compiled"

# Names shown by ``hqflow backends`` (a prefix backend lists its common suffixes).
_LISTED = ["reference", "aer", "pennylane:default.qubit", "pennylane:lightning.qubit", "emulated-qpu", "compiled"]


def register_backend(name: str, factory: str | Callable[..., Backend], listed: bool = True) -> None:
    """Register ``factory`` (a callable or ``"module:qualname"``) under ``name``."""
    if ":" in name:
        raise ValueError(f"backend names cannot contain ':' ({name!r}); the suffix is passed to the factory")
    _REGISTRY[name] = factory
    if listed and name not in _LISTED:
        _LISTED.append(name)


def _resolve(factory: str | Callable[..., Backend]) -> Callable[..., Backend]:
    if callable(factory):
        return factory
    module, _, attr = factory.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_backend(name: str, /, **options) -> Backend:
    """Make the backend registered as ``name`` (``"prefix:suffix"`` passes the suffix on)."""
    if not isinstance(name, str) or not name:
        raise BackendError(f"backend name must be a non-empty string, got {name!r}")
    prefix, _, suffix = name.partition(":")
    if prefix not in _REGISTRY:
        raise BackendError(f"unknown backend {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    factory = _resolve(_REGISTRY[prefix])
    args = (suffix,) if suffix else ()
    try:
        inspect.signature(factory).bind(*args, **options)
    except TypeError as exc:
        raise BackendError(f"backend {name!r}: bad options {sorted(options)}: {exc}") from None
    return factory(*args, **options)


def _lookup(name: str):
    """For ``Graph.validate()``: the backend, or None for a name that is not registered (a pool name,
    which ``hq.run(..., backends={name: [...]})`` binds when the graph runs)."""
    if isinstance(name, str) and name and not is_registered(name):
        return None
    return get_backend(name)


# Let Graph.validate() check backend names and widths against this registry (the IR itself knows no backend).
set_backend_lookup(_lookup)


def is_registered(name: str) -> bool:
    """Whether ``name`` (``"prefix:suffix"`` by its prefix) names a registered backend."""
    return isinstance(name, str) and bool(name) and name.partition(":")[0] in _REGISTRY


def backend_names() -> list[str]:
    """The names ``hqflow backends`` lists."""
    return list(_LISTED)


__all__ = [
    "DEFAULT_BACKEND",
    "is_registered",
    "Backend",
    "BackendError",
    "BatchResult",
    "Capabilities",
    "CircuitBatch",
    "FutureJob",
    "Job",
    "JobCancelled",
    "JobFailed",
    "LocalBackend",
    "backend_names",
    "get_backend",
    "register_backend",
]
