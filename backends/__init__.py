"""Quantum backends behind one asynchronous protocol, looked up by name.

    from hqflow.backends import get_backend
    backend = get_backend("aer")                      # or "reference", "pennylane:default.qubit"
    job = backend.submit(CircuitBatch.make(template, inputs, weights))
    values = job.result().values

Backends are imported lazily, so ``import hqflow.backends`` stays cheap.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Mapping

from hqflow.ir.text import one_line, shown

from .base import (
    Backend,
    BackendAccessError,
    BackendError,
    BatchResult,
    Capabilities,
    CircuitBatch,
    Cost,
    FutureJob,
    Job,
    JobCancelled,
    JobFailed,
    LocalBackend,
    RequestRefused,
    Usage,
    as_backend,
    as_job,
    is_backend,
    preflight,
)

# name -> "module:factory" (or the factory), called with the backend's options as keywords
_REGISTRY: dict[str, str | Callable[..., Backend]] = {
    "reference": "hqflow.backends.reference:ReferenceBackend",
    "aer": "hqflow.backends.aer:AerBackend",
    "pennylane": "hqflow.backends.pennylane_device:PennyLaneBackend",
    "emulated-qpu": "hqflow.backends.emulated:EmulatedQPU",
    "compiled": "hqflow.backends.compiled:CompiledBackend",
    "density": "hqflow.backends.compiled.density:DensityBackend",  # exact and differentiable, noise=TARGET
    "azure": "hqflow.backends.azure.backend:AzureBackend",  # azure:<target>; its targets are listed from the workspace
}
_BUILTIN = dict(_REGISTRY)
# name -> the keyword that the part after "name:" sets (pennylane:default.qubit, azure:ionq.simulator);
# a backend not named here takes no suffix
_SUFFIX: dict[str, str] = {"aer": "method", "pennylane": "device_name", "emulated-qpu": "wrapped", "compiled": "device",
                           "azure": "target", "density": "noise"}  # density:ionq.qpu.aria-1
# The default for exact local simulation: the fastest backend at small widths
# (benchmarks/simulators.py). ``Pipeline.execute`` and the workloads default to it.
DEFAULT_BACKEND = "compiled"
# backend options that hold a secret: warned about on a command line, never written to a run directory
SECRETS = ("key", "api_key", "connection_string", "credential", "password", "token", "secret")

# Names shown by ``hqflow backends`` (a prefix backend lists its common suffixes).
_LISTED = ["reference", "aer", "pennylane:default.qubit", "pennylane:lightning.qubit", "emulated-qpu", "compiled",
           "density"]


def register_backend(name: str, factory: str | Callable[..., Backend], listed: bool = True,
                     suffix: str | None = None) -> None:
    """Register ``factory`` (a callable or ``"module:qualname"``) under ``name``. With ``suffix``,
    ``"name:text"`` passes ``text`` as that keyword (``suffix="device"``: ``"mine:gpu"`` is
    ``factory(device="gpu")``); without, a name with a suffix is refused."""
    if ":" in name:
        raise ValueError(f"backend names cannot contain ':' ({name!r}); register suffix= to take 'name:text'")
    _REGISTRY[name] = factory
    if suffix is None:
        _SUFFIX.pop(name, None)
    else:
        _SUFFIX[name] = suffix
    if listed and name not in _LISTED:
        _LISTED.append(name)


def _resolve(factory: str | Callable[..., Backend]) -> Callable[..., Backend]:
    if callable(factory):
        return factory
    module, _, attr = factory.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_backend(name: str, /, **options) -> Backend:
    """Make the backend registered as ``name``; ``"prefix:text"`` sets the keyword the backend
    takes its suffix as (``pennylane:lightning.qubit`` is ``device_name="lightning.qubit"``)."""
    if not isinstance(name, str) or not name:
        raise BackendError(f"backend name must be a non-empty string, got {name!r}")
    prefix, colon, suffix = name.partition(":")
    if prefix not in _REGISTRY:
        raise BackendError(f"unknown backend {one_line(repr(name))}; known: {', '.join(sorted(_REGISTRY))}")
    if colon:
        keyword = _SUFFIX.get(prefix)
        if keyword is None:
            raise BackendError(f"backend {prefix!r} takes no ':' suffix, got {one_line(repr(name))}")
        if not suffix:
            raise BackendError(f"backend {one_line(repr(name))}: give its {keyword} after the ':'")
        if keyword in options:
            raise BackendError(f"backend {one_line(repr(name))}: {keyword} is given twice, as the suffix and as an option")
        options = {keyword: suffix, **options}
    factory = _resolve(_REGISTRY[prefix])
    problem = _bad_options(factory, options)
    if problem:
        raise BackendError(f"backend {one_line(repr(name))}: {problem}")
    return as_backend(factory(**options))


def backend_spec(spec) -> tuple[str, dict]:
    """``(name, options)`` of a backend name or ``(name, options)`` spec."""
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str) and isinstance(spec[1], Mapping):
        return spec[0], dict(spec[1])
    raise ValueError(f"a backend spec is a backend, a name, or (name, options); got {spec!r}")


def make_backend(spec) -> Backend:
    """The backend a spec stands for: the instance itself (``as_backend``: a ``Backend``), or one made from a
    name or (name, options). The one place a spec becomes a backend."""
    if is_backend(spec):
        return as_backend(spec)
    name, options = backend_spec(spec)
    return get_backend(name, **options)


def _bad_options(factory, options: dict) -> str | None:
    """What is wrong with ``options`` for ``factory``: each unknown key named, with the nearest known one
    ("did you mean") or, with none near, the keys it takes; or what else binding says (None: they bind)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without one: the call says
        return None
    params = signature.parameters.values()
    known = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [] if any(p.kind is p.VAR_KEYWORD for p in params) else [k for k in options if k not in known]
    if unknown:
        near = {k: difflib.get_close_matches(str(k), known, n=1) for k in unknown}
        said = ", ".join(shown(k) + (f" (did you mean {v[0]!r}?)" if v else "") for k, v in near.items())
        takes = "" if all(near.values()) else f"; it takes {', '.join(known)}" if known else "; it takes none"
        return f"unknown option{'s' if len(unknown) > 1 else ''} {said}{takes}"
    try:
        signature.bind(**options)
    except TypeError as exc:
        return f"bad options: {exc}"
    return None


def registration(name: str) -> tuple | None:
    """``(prefix, factory, suffix keyword)`` of ``name`` where it is registered in this process beyond the
    built-ins (what another process, a Ray actor's, must register to make it); None for a built-in or an
    unknown name."""
    prefix = name.partition(":")[0] if isinstance(name, str) else None
    factory = _REGISTRY.get(prefix)
    if factory is None or _BUILTIN.get(prefix) is factory:
        return None
    return prefix, factory, _SUFFIX.get(prefix)


def _capabilities(name: str) -> Capabilities:
    backend = make_backend(name)
    try:
        return backend.capabilities
    finally:
        backend.close()  # made only to ask


def registry_capabilities(names) -> dict[str, Capabilities | None]:
    """For ``Graph.validate(backends=...)``: each registered name's ``Capabilities``, and None for a
    name that is not registered (a pool name, which ``hq.run(..., backends={name: [...]})`` binds
    when the graph runs). A registered name whose backend cannot be made is a ``BackendError``."""
    return {name: _capabilities(name) if is_registered(name) else None
            for name in names if isinstance(name, str) and name}


def is_registered(name: str) -> bool:
    """Whether ``name`` (``"prefix:suffix"`` by its prefix) names a registered backend."""
    return isinstance(name, str) and bool(name) and name.partition(":")[0] in _REGISTRY


def backend_names() -> list[str]:
    """The names ``hqflow backends`` lists."""
    return list(_LISTED)


__all__ = [
    "DEFAULT_BACKEND",
    "SECRETS",
    "is_registered",
    "registry_capabilities",
    "Backend",
    "BackendAccessError",
    "BackendError",
    "BatchResult",
    "Capabilities",
    "CircuitBatch",
    "Cost",
    "FutureJob",
    "Job",
    "JobCancelled",
    "JobFailed",
    "LocalBackend",
    "RequestRefused",
    "Usage",
    "as_backend",
    "as_job",
    "backend_names",
    "get_backend",
    "is_backend",
    "make_backend",
    "backend_spec",
    "preflight",
    "register_backend",
    "registration",
]
