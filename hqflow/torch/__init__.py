"""A circuit as a ``torch.nn.Module``, on any backend.

    from hqflow.torch import QuantumLayer

    layer = QuantumLayer(template, backend="compiled")     # or "aer", "pennylane:default.qubit", ...
    model = torch.nn.Sequential(torch.nn.Linear(2, template.n_inputs), layer, torch.nn.Linear(n_obs, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)     # the circuit's weights are in there

``layer(x)`` maps inputs ``[B, n_inputs]`` (or ``[n_inputs]``) to the observables' values ``[B, n_obs]``
(or ``[n_obs]``), differentiable in the inputs and ``layer.weights``. On a backend with a torch program
(``gradient="autograd"``, such as ``compiled``) the program runs in the autograd graph; on any other, the
forward pass is one job and the backward pass one batched parameter-shift job (a ``torch.compile`` graph
break); with ``gradient_in_forward=True``, a forward pass that needs a gradient is one job that holds the
parameter-shift rows too, and backward applies the jacobians it saved. ``backend`` is a registry name, a
backend object, ``(name, options)``, or the name of a pool of the running fragment's job client
(``job_backends``), whose jobs go through the scheduler.

Devices follow torch's convention: the output lives where ``layer.weights`` live, in their dtype (as
``nn.Linear``'s), whatever device the backend computes on, and ``x`` may be on any device (autograd carries its
gradient back). ``QuantumLayer(t, "compiled:cuda")`` with CPU weights simulates on the GPU and answers on the
CPU; ``layer.cuda()`` on a CPU backend simulates on the CPU and answers on the GPU.

``gradient="spsa"`` (with ``spsa=Spsa(samples, epsilon, center)``) estimates the gradients from a few random
simultaneous perturbations instead (``hqflow.gradients.spsa``: ``2 * samples`` rows per input row, whatever
the number of parameters), as jobs on any backend, never through a torch program. Every row of a job shares
its directions, drawn from the job's seed: with ``seed=None`` and outside ``seeded``, from fresh entropy, so
pass a ``seed`` or run inside ``seeded(...)`` for reproducible runs. ``gradient="twin"`` (with ``twin=``, a backend
that differentiates in process: ``compiled``, or ``density`` under a target's noise) runs only the values on the
backend, one circuit per row, and takes the gradient from the twin's program at the same inputs and weights: the
output is the backend's values, its gradient the twin's (biased where the twin is not the device).

``seeded(*key)`` gives the jobs submitted inside it (by any layer, on this thread and the threads that copy
its context) the seeds ``SeedSequence([*key, k])`` for the k-th job, with one shot seed per row (row-seeded
batches), so results depend on the key alone, not on which layer or thread submitted first elsewhere.

``TorchLearner`` and ``ReducedGradients`` (``hqflow.torch.learners``) keep a ``learn`` fragment's model and
optimizer between steps and reduce its gradients across replicas.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import threading
import zlib

import numpy as np
import torch
from torch import nn

from hqflow.backends import CircuitBatch, as_backend, make_backend
from hqflow.ir import CircuitTemplate
from hqflow.ir.circuit import MAX_SHOTS
from hqflow.ir.text import shown

from ..jobs import accounting
from ..gradients import METHODS, GradientMethod, Spsa, estimate
from ..jobs.client import pool_backend
from .learners import ReducedGradients, TorchLearner  # noqa: F401  (hqflow.torch.TorchLearner, as before)



class _Seeds:
    """A ``seeded`` context's key and its job counter (shared by the threads that copy the context)."""

    def __init__(self, key: tuple[int, ...]):
        self.key, self.jobs, self._lock = key, 0, threading.Lock()

    def next(self) -> int:
        with self._lock:
            k, self.jobs = self.jobs, self.jobs + 1
        return int(np.random.SeedSequence([*self.key, k]).generate_state(1)[0])


_SEEDED: contextvars.ContextVar[_Seeds | None] = contextvars.ContextVar("hqflow_torch_seeded", default=None)


@contextlib.contextmanager
def seeded(*key):
    """Inside the block, the k-th job (k = 0, 1, ...) that any ``QuantumLayer`` submits gets the seed
    ``SeedSequence([*key, k]).generate_state(1)[0]`` and a shot seed per row (``per_row``), whatever the
    layer's own ``seed``. ``key`` holds non-negative integers and strings (a string counts as its
    ``zlib.crc32``). The counter belongs to this context: another thread that enters its own ``seeded``
    counts on its own, and a nested block counts afresh and gives the outer count back when it ends."""
    token = _SEEDED.set(_Seeds(tuple(_key_int(v) for v in key)))
    try:
        yield
    finally:
        _SEEDED.reset(token)


def seeded_part(index: int):
    """A context for part ``index`` of work that runs on several threads inside ``seeded(*key)``: its own
    counter, ``seeded(*key, "part", index)``, so each thread's jobs get the same seeds whatever the threads'
    timing. Outside a ``seeded`` block: nothing."""
    seeds = _SEEDED.get()
    return contextlib.nullcontext() if seeds is None else seeded(*seeds.key, "part", index)


def _key_int(v) -> int:
    if isinstance(v, str):
        return zlib.crc32(v.encode())
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0:
        return int(v)
    raise ValueError(f"seeded: a key part must be a non-negative integer or a string, got {v!r}")


class QuantumLayer(nn.Module):
    """``template``'s observables as a differentiable function of its inputs and weights."""

    def __init__(self, template: CircuitTemplate, backend="compiled", *, weights=None, seed: int | None = None,
                 shots: int | None = None, dtype: torch.dtype = torch.float32, gradient_in_forward: bool = False,
                 gradient: GradientMethod | str = GradientMethod.PARAM_SHIFT, spsa: Spsa | None = None, twin="compiled"):
        super().__init__()
        if not isinstance(template, CircuitTemplate):
            raise TypeError(f"template must be a CircuitTemplate (hqflow.ir.Circuit(...).build(), from_qiskit, "
                            f"from_pennylane), got {type(template).__name__}")
        if not template.observables:
            raise ValueError(f"circuit {template.name!r} has no observables: build it with observables=[...]")
        if shots is not None and (isinstance(shots, bool) or not isinstance(shots, int) or not 1 <= shots <= MAX_SHOTS):
            raise ValueError(f"shots must be a positive integer (at most 2**63 - 1) or None, got {shown(shots)}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        if gradient not in METHODS:
            *some, last = map(repr, METHODS)
            raise ValueError(f"gradient must be {', '.join(some)} or {last}, got {shown(gradient)}")
        if spsa is not None and not isinstance(spsa, Spsa):
            raise TypeError(f"spsa must be a hqflow.gradients.Spsa or None, got {type(spsa).__name__}")
        self.template, self.backend, self.shots, self.seed = template, backend, shots, seed
        self.gradient_in_forward, self.gradient = gradient_in_forward, GradientMethod(gradient)
        self.spsa = spsa or Spsa()
        self.twin = make_backend(twin) if self.gradient is GradientMethod.TWIN else None
        if self.twin is not None and not differentiates(self.twin):
            raise ValueError(f"gradient='twin' needs a twin that differentiates in process (compiled, density), "
                             f"got {shown(self.twin.name)}")
        if weights is None:
            gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
            weights = torch.rand(template.n_weights, generator=gen, dtype=dtype) * (2 * math.pi)
        weights = torch.as_tensor(weights, dtype=dtype).detach().clone()
        if weights.shape != (template.n_weights,):
            raise ValueError(f"weights must have shape [{template.n_weights}], got {list(weights.shape)}")
        self.weights = nn.Parameter(weights)
        self._backend = None if isinstance(backend, str) else make_backend(backend)
        self._programs: dict = {}
        self._jobs = 0  # jobs submitted: each shot job gets its own seed from (seed, count)

    def _next_seed(self) -> int | None:
        """The next job's seed: the ``seeded`` context's, else from the layer's ``seed`` and job count."""
        ctx = _SEEDED.get()
        if ctx is not None:
            return ctx.next()
        if self.seed is None:
            return None
        self._jobs += 1
        return int(np.random.SeedSequence([int(self.seed), self._jobs]).generate_state(1)[0])

    def extra_repr(self) -> str:
        name = self.backend if isinstance(self.backend, str) else self._backend.name
        return (f"{self.template.name!r}, qubits={self.template.n_qubits}, inputs={self.template.n_inputs}, "
                f"weights={self.template.n_weights}, observables={len(self.template.observables)}, "
                f"backend={name!r}" + (f", shots={self.shots}" if self.shots else "")
                + (f", gradient={self.gradient!r}, {self.spsa}" if self.gradient is GradientMethod.SPSA else ""))

    def job_backend(self):
        """Where this layer's jobs go now: the running fragment's pool of that name, else the backend."""
        pool = pool_backend(self.backend)
        if pool is not None:
            return pool
        if self._backend is None:
            self._backend = make_backend(self.backend)
        return self._backend

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        n = self.template.n_inputs
        if x is None:
            if n:
                raise ValueError(f"circuit {self.template.name!r} takes {n} inputs; call the layer with x [B, {n}]")
            x = torch.zeros(1, 0, dtype=self.weights.dtype, device=self.weights.device)
        x = torch.as_tensor(x)
        single = x.ndim == 1
        if single:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != n:
            raise ValueError(f"inputs must have shape [B, {n}] (or [{n}]) for circuit {self.template.name!r}, "
                             f"got {list(x.shape)}")
        # the output lives where the weights live (as nn.Linear's), whatever device the backend computes on;
        # x may be on any device: autograd carries its gradient back across the moves
        w = self.weights
        x = x.to(w.dtype)
        if x.shape[0] == 0:  # nothing to run: an empty result, still in the graph
            out = x.to(w.device).new_zeros((0, len(self.template.observables))) + 0 * w.sum()
            return out[0] if single else out
        backend = self.job_backend()
        program = self._program(backend)
        if self.twin is not None:  # the backend's values; the twin's gradient (its values' change, nothing more)
            out = _values_job(self, x, w)
            if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
                t = self.twin_values(x)
                out = out + (t - t.detach())
        elif program is not None:  # it moves x and w to its own device, and its result comes back here
            out = program(x, w).to(device=w.device, dtype=w.dtype)
        else:  # (inside a Function grad mode is off: whether a gradient is needed is decided here)
            shift = self.gradient_in_forward and torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)
            out = _ShiftRule.apply(x.to(w.device), w, self, shift)
        return out[0] if single else out

    def twin_values(self, x: torch.Tensor) -> torch.Tensor:
        """The twin's values of inputs ``x`` [B, n_inputs] at the layer's weights, in the autograd graph."""
        w = self.weights
        return self._compiled(self.twin)(x.to(w.dtype), w).to(device=w.device, dtype=w.dtype)

    def _program(self, backend):
        """The backend's differentiable torch program (exact values, parameter shift's gradient), or None."""
        if self.shots is not None or self.gradient is not GradientMethod.PARAM_SHIFT or not differentiates(backend):
            return None
        return self._compiled(backend)

    def _compiled(self, backend):
        key = (id(backend), self.weights.dtype)
        if key not in self._programs:
            complex_dtype = torch.complex128 if self.weights.dtype == torch.float64 else torch.complex64
            self._programs[key] = backend.program(self.template, dtype=complex_dtype)
        return self._programs[key]


def differentiates(backend) -> bool:
    """Whether ``backend`` gives an in-process torch program that autograd differentiates (its capabilities
    say so: ``gradient == "autograd"`` declares ``Backend.program``)."""
    return as_backend(backend).capabilities.gradient == "autograd"


def _submit(layer: QuantumLayer, batch: CircuitBatch):
    """Run ``batch`` on the layer's job backend; a job that does not go through a pool (whose job service
    records it) is recorded on the current usage meter."""
    pool = pool_backend(layer.backend)
    backend = pool if pool is not None else layer.job_backend()
    result = backend.submit(batch).result()
    if pool is None:
        accounting.record_job(as_backend(backend), batch, result.metadata)
    return result


def _gradient_batch(layer: QuantumLayer, xs: np.ndarray, ws: np.ndarray, wrt: str, seed: int | None):
    """The batch (and its postprocessing) of the layer's gradient method at ``(xs, ws)``; inside ``seeded``,
    row-seeded."""
    return estimate(layer.gradient, layer.template, xs, ws, settings=layer.spsa, wrt=wrt, shots=layer.shots, seed=seed,
                    per_row=_SEEDED.get() is not None)


@torch.compiler.disable  # a job runs outside the graph: torch.compile breaks the graph here
def _values_job(layer: QuantumLayer, x: torch.Tensor, w: torch.Tensor, shift: bool = False):
    """One job: the values; with ``shift``, the ``Gradient`` of its gradient rows for inputs and weights."""
    xs, ws = x.detach().cpu().double().numpy(), w.detach().cpu().double().numpy()
    if shift:
        batch, post = _gradient_batch(layer, xs, ws, "both", layer._next_seed())
        return post(_submit(layer, batch))
    seed = layer._next_seed()
    batch = CircuitBatch.make(layer.template, xs, ws, shots=layer.shots, seed=seed, per_row=_SEEDED.get() is not None)
    res = _submit(layer, batch)
    return torch.as_tensor(np.asarray(res.values), dtype=w.dtype, device=w.device)


@torch.compiler.disable
def _gradient_job(layer: QuantumLayer, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor, need_x: bool,
                  need_w: bool):
    """One batched gradient job (parameter shift or SPSA); the vector-jacobian products for what needs them."""
    xs, ws = x.detach().cpu().double().numpy(), w.detach().cpu().double().numpy()
    wrt = "both" if need_x and need_w else "inputs" if need_x else "weights"
    batch, post = _gradient_batch(layer, xs, ws, wrt, layer._next_seed())
    g = post(_submit(layer, batch))
    grad64 = grad.detach().cpu().double()
    gx = gw = None
    if need_x:
        gx = torch.einsum("bo,boi->bi", grad64, torch.as_tensor(g.input_jacobian)).to(device=x.device, dtype=x.dtype)
    if need_w:
        gw = torch.einsum("bo,bow->w", grad64, torch.as_tensor(g.jacobian)).to(device=w.device, dtype=w.dtype)
    return gx, gw


class _ShiftRule(torch.autograd.Function):
    """Forward: one job, its values on w's device in w's dtype (``QuantumLayer.forward`` hands x over on w's
    device). Backward: one batched gradient job for what needs a gradient; or (``shift``, from
    ``gradient_in_forward``) the forward job's jacobians, saved in x's and w's dtypes, applied in grad's."""

    @staticmethod
    def forward(ctx, x, w, layer, shift):
        ctx.layer, ctx.shift = layer, shift
        if not shift:
            ctx.save_for_backward(x, w)
            return _values_job(layer, x, w)
        g = _values_job(layer, x, w, shift=True)
        ctx.save_for_backward(torch.as_tensor(g.input_jacobian, dtype=x.dtype),
                              torch.as_tensor(g.jacobian, dtype=w.dtype))
        return torch.as_tensor(np.asarray(g.values), dtype=w.dtype, device=w.device)

    @staticmethod
    def backward(ctx, grad):  # called only when x or w needs a gradient
        a, b = ctx.saved_tensors  # x and w; or (shift) the jacobians [B, n_obs, n_inputs] and [B, n_obs, n_weights]
        if ctx.shift:
            return (torch.einsum("bo,boi->bi", grad, a.to(grad.device)),
                    torch.einsum("bo,bow->w", grad, b.to(grad.device)), None, None)
        gx, gw = _gradient_job(ctx.layer, a, b, grad, *ctx.needs_input_grad[:2])
        return gx, gw, None, None
