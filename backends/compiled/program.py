"""The compiled program (``CompiledProgram``) and its cache (``compile_template``, ``clear_cache``)."""
from __future__ import annotations

import threading

import numpy as np
import torch
from hqflow.ir.circuit import CircuitTemplate, DerivedInputError
from hqflow.ir.passes import light_cone

from ..base import BackendError
from . import config
from .config import _DTYPES, _GRADIENTS, _REAL
from .graphs import _Graphs, graphable
from .plan import _build_plan, _Plan, _shared_angles
from .readout import _Readout
from .simulate import _build_stacks, _FusedSim, _phases, _SamplePhases, _simulate


def _resolve_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in _REAL:
        return dtype
    if isinstance(dtype, str) and dtype.replace("torch.", "") in _DTYPES:
        return _DTYPES[dtype.replace("torch.", "")]
    raise BackendError(f"unknown dtype {dtype!r} for the compiled backend; use 'complex64' or 'complex128'")


def _resolve_device(device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise BackendError(f"unknown device {device!r} for the compiled backend; use 'cpu' or 'cuda[:i]'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BackendError(f"device {device!r} requested but CUDA is not available (torch {torch.__version__})")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise BackendError(f"device {device!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist")
        if dev.index is None:  # "cuda" is the current device: one cache entry with "cuda:i"
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type != "cpu":
        raise BackendError(f"device {device!r} is not supported by the compiled backend; use 'cpu' or 'cuda[:i]'")
    return dev


def _check_fusion(fusion) -> None:
    if fusion is not None and (not isinstance(fusion, int) or isinstance(fusion, bool) or fusion < 1):
        raise BackendError(f"fusion must be a positive int (the widest fused block, in qubits) or None, got {fusion!r}")


class Readouts:
    """What a program reads out through its ``_run(inputs, weights, what)``: values, Pauli terms, probabilities."""

    def __call__(self, inputs=None, weights=None) -> torch.Tensor:
        """Expectation values ``[B, n_obs]`` (real, differentiable)."""
        if not self.template.observables:
            raise BackendError(f"circuit {self.template.name!r} has no observables; use probs()")
        return self._run(inputs, weights, "values")

    def term_values(self, inputs=None, weights=None) -> torch.Tensor:
        """``<P>`` of every Pauli term of every observable, in order, unit coefficients: ``[B, n_terms]``."""
        return self._run(inputs, weights, "terms")

    def probs(self, inputs=None, weights=None) -> torch.Tensor:
        """Computational-basis probabilities ``[B, 2**n]``, wire 0 most significant."""
        return self._run(inputs, weights, "probs")


class CompiledProgram(Readouts):
    """A template compiled for one dtype and device; see the package docstring (``hqflow.backends.compiled``).

    ``prog(inputs, weights)``: ``inputs`` ``[B, n_inputs]``, ``weights`` ``[n_weights]``
    (shared) or ``[B, n_weights]`` (per row); tensors or arrays. Returns real
    ``[B, n_obs]`` expectation values, differentiable with respect to both.
    """

    def __init__(self, template: CircuitTemplate, dtype=torch.complex64, device="cpu",
                 fusion: int | None = None, gradient: str = "fused", lightcone: bool = True):
        problems = template.problems()
        if problems:
            raise BackendError("; ".join(problems))
        if template.n_qubits > config.MAX_QUBITS:
            raise BackendError(f"circuit {template.name!r} has {template.n_qubits} qubits; the compiled backend "
                               f"simulates at most {config.MAX_QUBITS}")
        _check_fusion(fusion)
        if gradient not in _GRADIENTS:
            raise BackendError(f"gradient must be one of {', '.join(_GRADIENTS)}, got {gradient!r}")
        self.template = template
        self.dtype = _resolve_dtype(dtype)
        self.real_dtype = _REAL[self.dtype]
        self._itemsize = torch.empty(0, dtype=self.dtype).element_size()
        self.device = _resolve_device(device)
        self.fusion = fusion
        self.gradient = gradient
        self._plans: dict[bool, _Plan] = {}
        self._readouts: dict = {}
        self._lock = threading.Lock()
        self._graphs = _Graphs()
        # expectation values only need the observables' light cone (hqflow.ir.passes)
        self.cone = light_cone(template) if lightcone else None
        self._sub = None
        if self.cone is not None and self.cone.reduces:
            self._sub = CompiledProgram(self.cone.template, self.dtype, self.device, fusion, gradient, False)
        else:
            self._plan(False)  # compile eagerly: errors surface here

    # -- compilation (per weight mode, lazily) -------------------------------------
    def _plan(self, per_row: bool) -> _Plan:
        plan = self._plans.get(per_row)
        if plan is None:
            with self._lock:
                plan = self._plans.get(per_row)
                if plan is None:
                    plan = _build_plan(self.template, per_row, self.fusion, self.dtype, self.device)
                    self._plans[per_row] = plan
        return plan

    def _readout(self, plan: _Plan, what: str) -> _Readout:
        key = (plan.per_row, what)
        ro = self._readouts.get(key)
        if ro is None:
            obs = self.template.observables
            if what == "values":
                cols = [[(t.coeff, t.paulis) for t in o.terms] for o in obs]
            elif what == "terms":  # one column per Pauli term, unit coefficient
                cols = [[(1.0, t.paulis)] for o in obs for t in o.terms]
            else:
                cols = None
            ro = self._readouts[key] = _Readout(plan, cols, self.dtype, self.device)
        return ro

    # -- inputs ----------------------------------------------------------------------
    def _coerce(self, inputs, weights) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.template

        def as_tensor(a):
            if a is None:
                return None
            if not isinstance(a, torch.Tensor):
                try:
                    a = torch.as_tensor(np.asarray(a, dtype=float))
                except (TypeError, ValueError):
                    raise BackendError(f"inputs and weights must be numeric arrays, got {type(a).__name__}") from None
            return a.to(device=self.device, dtype=self.real_dtype)

        x, w = as_tensor(inputs), as_tensor(weights)
        if w is None:
            if t.n_weights:
                raise BackendError(f"circuit {t.name!r} needs weights of shape [{t.n_weights}] or [B, {t.n_weights}]")
            w = torch.zeros(t.n_weights, dtype=self.real_dtype, device=self.device)
        if w.ndim not in (1, 2) or w.shape[-1] != t.n_weights:
            raise BackendError(f"weights for {t.name!r} must have shape [{t.n_weights}] or [B, {t.n_weights}], "
                               f"got {list(w.shape)}")
        if x is None:
            if t.n_inputs:
                raise BackendError(f"circuit {t.name!r} needs inputs of shape [B, {t.n_inputs}]")
            x = torch.zeros(w.shape[0] if w.ndim == 2 else 1, 0, dtype=self.real_dtype, device=self.device)
        if x.ndim == 1 and t.n_inputs:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != t.n_inputs:
            raise BackendError(f"inputs for {t.name!r} must have shape [B, {t.n_inputs}], got {list(x.shape)}")
        if w.ndim == 2 and w.shape[0] != x.shape[0]:
            if x.shape[1] == 0 and x.shape[0] == 1:
                x = x.new_zeros(w.shape[0], 0)
            else:
                raise BackendError(f"per-row weights have {w.shape[0]} rows but inputs have {x.shape[0]}")
        return x, w

    # -- the pipeline ------------------------------------------------------------------
    def _run(self, inputs, weights, what: str) -> torch.Tensor:
        x, w = self._coerce(inputs, weights)
        if self._sub is not None and what != "probs":
            cone = self.cone
            out = self._sub._run(x[:, list(cone.inputs)], w[..., list(cone.weights)], what)
            if torch.is_grad_enabled() and (not cone.weights and w.requires_grad or not cone.inputs and x.requires_grad):
                out = out + 0 * (w.sum() + x.sum())  # parameters outside the cone get zero gradients, not None
            return out
        cpu = self.device.type == "cpu"
        rows = max(1, (config._CHUNK_AMPLITUDES if cpu else config._DEVICE_AMPLITUDES) >> self.template.n_qubits)
        if x.shape[0] > 2 * rows:
            # large batches run in chunks: cache-sized on CPU (faster; the unitaries are rebuilt per chunk),
            # memory-sized on a GPU (a wide circuit's states would not fit at once)
            return torch.cat([self._run_rows(x[i: i + rows], w[i: i + rows] if w.ndim == 2 else w, what, x.shape[0])
                              for i in range(0, x.shape[0], rows)])
        return self._run_rows(x, w, what, x.shape[0])

    def _run_rows(self, x: torch.Tensor, w: torch.Tensor, what: str, total_rows: int) -> torch.Tensor:
        """One chunk of rows; ``total_rows`` (the whole batch, whose kept states all live until
        backward) decides whether the fused backward keeps states or un-computes them. On CUDA without
        gradients, replayed from a CUDA graph (``graphs``)."""
        if graphable(self.device, x.shape[0], self.template.n_qubits):
            key = (what, tuple(x.shape), tuple(w.shape))
            return self._graphs.run(key, x, w, lambda a, b: self._eager_rows(a, b, what, total_rows))
        return self._eager_rows(x, w, what, total_rows)

    def _eager_rows(self, x: torch.Tensor, w: torch.Tensor, what: str, total_rows: int) -> torch.Tensor:
        per_row = w.ndim == 2
        plan = self._plan(per_row)
        readout = self._readout(plan, what)
        theta = _shared_angles(plan, w)
        p_shared = _phases(theta[: plan.n_phase])
        sym = torch.cat([x, w], 1) if per_row else x  # the per-sample symbols
        bias = theta[plan.sample_bias[0]: plan.sample_bias[1]]
        stacks = _build_stacks(plan, p_shared)
        if self.gradient != "autograd":
            uncompute = self.gradient == "adjoint" or (
                torch.is_grad_enabled() and len(plan.stages) * total_rows * 2**plan.n * self._itemsize > config._KEEP_BYTES)
            out = _FusedSim.apply(plan, readout, uncompute, sym, bias, p_shared, *stacks)
        else:
            p_sample = _SamplePhases(plan, sym, bias, release=not torch.is_grad_enabled())
            out = readout(_simulate(plan, stacks, p_sample, p_shared, self.dtype, self.device))
        return out.expand(x.shape[0], -1) if out.shape[0] != x.shape[0] else out

    # -- introspection -------------------------------------------------------------------
    def describe(self, per_row: bool = False) -> str:
        """The compiled program (for shared or per-row weights): stages, fusion width, estimated flops.

        With a light cone smaller than the circuit, this is the program that computes
        expectation values (probabilities run the whole circuit)."""
        if self._sub is not None:
            t, r = self.template, self.cone.template
            return (f"compiled {t.name!r} [{t.fingerprint()}]: light cone of the observables: "
                    f"{r.n_qubits} of {t.n_qubits} qubits (wires {list(self.cone.wires)}), {len(r.ops)} of "
                    f"{len(t.ops)} ops, {r.n_inputs} of {t.n_inputs} inputs, {r.n_weights} of {t.n_weights} "
                    f"weights; expectation values run:\n" + self._sub.describe(per_row))
        plan = self._plan(per_row)
        t = self.template
        counts: dict = {}
        for st in plan.stages:
            counts[st.kind] = counts.get(st.kind, 0) + 1
        built = [s for s in plan.stacks if "const" not in s]
        n_sample = len(plan.sample_a)
        n_layers = sum(1 for st in plan.stages if st.kind == "phase" and st.per_sample)
        lines = [
            (f"compiled {t.name!r} [{t.fingerprint()}]: {t.n_qubits} qubits, {len(t.ops)} ops, "
             f"{t.n_inputs} inputs, {t.n_weights} weights ({'per row' if per_row else 'shared'}), "
             f"{str(self.dtype).replace('torch.', '')} on {self.device}, "
             f"gradient={self.gradient}"),
            f"  fusion width {plan.width}{' (full width)' if plan.width >= plan.n else ''}"
            f"{' (cost model)' if self.fusion is None else ''}"
            f"{'' if plan.width >= plan.n else (', lazy' if plan.lazy else ', eager') + ' single-qubit fusion'}"
            "; stages: "
            + ", ".join(f"{v} {k}" for k, v in counts.items())
            + f"; {n_layers} per-sample phase layer(s) of {n_sample} distinct piece(s); "
            f"{sum(s['size'] for s in built)} unitar{'y' if sum(s['size'] for s in built) == 1 else 'ies'} "
            f"built from weights per call in {len(built)} batched stack(s)",
            f"  estimated {plan.flops:,.0f} real flops per sample (forward)",
        ]
        for i, st in enumerate(plan.stages):
            if st.kind == "perm":
                lines.append(f"  {i:3d} perm    axes {list(st.perm)}")
            elif st.kind == "phase":
                src = "per-sample [B, 2^n]" if st.per_sample else "shared [2^n]"
                if not (len(st.pieces) == 1 and st.pieces[0].full):
                    src += f" as {len(st.pieces)} piece(s) on axes " + " ".join(
                        f"{pc.axes[0]}-{pc.axes[-1]}" if pc.axes == tuple(range(pc.axes[0], pc.axes[-1] + 1))
                        else ",".join(map(str, pc.axes)) for pc in st.pieces)
                lines.append(f"  {i:3d} phase   {src} on wires {list(st.wires)}: {st.note}")
            else:
                spec = plan.stacks[st.unitary[0]]
                how = "constant" if "const" in spec else f"from weights (stack {st.unitary[0]})"
                lines.append(f"  {i:3d} dense   {2 ** st.width}x{2 ** st.width} on wires {list(st.wires)}, "
                             f"{how}: {st.note}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.template.name!r} {self.template.n_qubits}q {self.dtype} {self.device}>"


class EncodedProgram:
    """The program of a template with derived inputs (what ``compile_template`` gives for one): raw inputs
    ``[B, n_inputs]`` in. Their columns are computed in float64 torch, so autograd carries the chain rule
    back to the raw inputs, and checked (``CircuitTemplate.encode``: a row where a derived input is not a
    finite number is a ``BackendError`` naming it, the message every path gives); then ``program``, the
    lowered template's ``CompiledProgram``, runs them.

    Where the chain rule breaks down although the values are smooth in the inputs (an amplitude encoding's
    all-zero block of features; ``CircuitTemplate.derivative_probes``), the gradient with respect to those
    inputs is the mean of the gradients at two probe rows next to the row, which run in the same call, as
    parameter shift does (``hqflow.gradients``); the values are those of the rows themselves."""

    def __init__(self, template: CircuitTemplate, program: CompiledProgram):
        self.template, self.program = template, program

    def __call__(self, inputs=None, weights=None) -> torch.Tensor:
        """Expectation values ``[B, n_obs]`` (real, differentiable)."""
        return self._run("__call__", inputs, weights)

    def term_values(self, inputs=None, weights=None) -> torch.Tensor:
        return self._run("term_values", inputs, weights)

    def probs(self, inputs=None, weights=None) -> torch.Tensor:
        return self._run("probs", inputs, weights)

    def __getattr__(self, name):  # device, dtype, describe(), ... of the lowered program
        if name in ("program", "template"):
            raise AttributeError(name)
        return getattr(self.program, name)

    def __repr__(self) -> str:
        return f"<EncodedProgram {self.template.name!r}: {self.program!r}>"

    def _raw(self, inputs) -> torch.Tensor:
        t, n = self.template, self.template.n_inputs
        if inputs is None:
            raise BackendError(f"circuit {t.name!r} needs inputs of shape [B, {n}]")
        if not isinstance(inputs, torch.Tensor):
            try:
                inputs = torch.as_tensor(np.asarray(inputs, dtype=float))
            except (TypeError, ValueError):
                raise BackendError(f"inputs must be numeric arrays, got {type(inputs).__name__}") from None
        x = inputs.to(device=self.program.device)
        if x.ndim == 1:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != n:
            raise BackendError(f"inputs for {t.name!r} must have shape [B, {n}], got {list(x.shape)}")
        return x

    def _columns(self, x: torch.Tensor) -> torch.Tensor:
        _check_rows(self.template, x)
        cols = self.template.encode(x.to(torch.float64), torch, check=False)
        out = cols.to(self.program.real_dtype)
        if out.dtype != cols.dtype:
            _check_range(self.template, cols, out, self.program.dtype)
        return out

    def _run(self, method: str, inputs, weights) -> torch.Tensor:
        run = getattr(self.program, method)
        x = self._raw(inputs)
        if not (torch.is_grad_enabled() and x.requires_grad):
            return run(self._columns(x), weights)
        probes = _probes(self.template, x)
        if probes is None:
            return run(self._columns(x), weights)
        # the rows themselves: no gradient through the derived inputs where the chain rule breaks down
        # (torch.where drops its NaN), none at all where probe rows carry the whole derivative
        dev = x.device
        hold, hide = (torch.zeros(x.shape, dtype=torch.bool, device=dev) for _ in range(2))
        hold[torch.as_tensor(probes.rows, device=dev), torch.as_tensor(probes.inputs, device=dev)] = True
        probed = np.flatnonzero(probes.probed)
        hide[torch.as_tensor(probes.rows[probed], device=dev), torch.as_tensor(probes.inputs[probed], device=dev)] = True
        cols = self._columns(torch.where(hold, x.detach(), x))
        direct = list(self.template.direct_inputs())
        if direct:
            cols = torch.cat([torch.where(hide, x.detach(), x)[:, direct].to(cols.dtype), cols[:, len(direct):]], 1)
        out = run(cols, weights)
        if not len(probes.points):
            return out
        # the probe rows: each carries the gradient of its one input
        rows = torch.as_tensor(probes.point_rows, device=dev)
        cols = torch.as_tensor(probes.point_inputs, device=dev)
        points = torch.as_tensor(probes.points, dtype=x.dtype, device=dev)
        moved = torch.zeros(points.shape, dtype=torch.bool, device=dev)
        moved[torch.arange(points.shape[0], device=dev), cols] = True
        carried = x[rows, cols] - x[rows, cols].detach()  # zero, with the gradient of x[row, input]
        given = torch.as_tensor(np.isfinite(probes.slopes).all(axis=1), device=dev)  # slopes of their own
        points = torch.where(moved & ~given[:, None], points + carried[:, None], points)
        pcols = self._columns(points)
        if bool(given.any()):  # there the derived inputs move along their slopes (autograd would meet 0/0)
            d = len(direct)
            slopes = torch.as_tensor(np.nan_to_num(probes.slopes), dtype=pcols.dtype, device=dev)
            linear = pcols[:, d:].detach() + carried[:, None].to(pcols.dtype) * slopes
            pcols = torch.cat([torch.where(moved & given[:, None], points + carried[:, None], points)[:, direct]
                               .to(pcols.dtype), torch.where(given[:, None], linear, pcols[:, d:])], 1)
        w = weights
        if w is not None:
            w = (w if isinstance(w, torch.Tensor) else torch.as_tensor(np.asarray(w, dtype=float))).detach()
            w = w.to(dev)[rows] if w.ndim == 2 else w
        at = run(pcols, w)
        slope = probes.combine(at - at.detach())  # zero; its gradient is the probes' mean
        return out.index_add(0, torch.as_tensor(probes.rows[probed], device=dev), slope.to(out.dtype))


# The checks read values, so they run outside torch.compile's graph (a graph break, as a job is).


@torch.compiler.disable
def _check_rows(template: CircuitTemplate, x: torch.Tensor) -> None:
    """The template's own check of the rows (``CircuitTemplate.encode``), as a ``BackendError``."""
    try:
        template.encode(_numpy(x), np)
    except DerivedInputError as exc:
        raise BackendError(str(exc)) from None


@torch.compiler.disable
def _probes(template: CircuitTemplate, x: torch.Tensor):
    """``template.derivative_probes`` of the rows, or its error as a ``BackendError``."""
    try:
        return template.derivative_probes(_numpy(x))
    except DerivedInputError as exc:
        raise BackendError(str(exc)) from None


@torch.compiler.disable
def _check_range(template: CircuitTemplate, cols: torch.Tensor, out: torch.Tensor, dtype: torch.dtype) -> None:
    """Derived inputs too large for the program's precision (finite in float64, not in float32)."""
    if not bool(torch.isfinite(out).all()):
        row, col = (int(i[0]) for i in torch.nonzero(~torch.isfinite(out), as_tuple=True))
        raise BackendError(f"circuit {template.name!r}: derived input {template.lowered().input_names[col]!r} is "
                           f"{float(cols[row, col]):.6g} for row {row}, beyond {str(dtype).replace('torch.', '')}'s "
                           "range: use dtype='complex128'")


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().to("cpu", torch.float64).numpy()


_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


def compile_template(template: CircuitTemplate, dtype=torch.complex64, device="cpu",
                     fusion: int | None = None, adjoint: bool = False, gradient: str | None = None,
                     lightcone: bool = True) -> CompiledProgram | EncodedProgram:
    """The compiled program for ``template``, memoized by (fingerprint, dtype, device, fusion, gradient).

    A template with derived inputs (a feature map, an amplitude encoding) gives an ``EncodedProgram``:
    it takes the raw inputs, computes the derived columns and runs the lowered template's program.

    ``gradient``: ``"fused"`` (default: one autograd node with a hand-written
    backward that keeps the forward states, switching to the adjoint method by
    itself when they would take more than 2 GiB), ``"adjoint"`` (always the adjoint
    method: states are un-computed, memory stays at a few states; ``adjoint=True``
    is a shorthand) or ``"autograd"`` (plain torch ops recorded by autograd:
    slower, but twice differentiable).

    ``lightcone``: expectation values simulate only the gates and wires in the
    observables' light cone (``hqflow.ir.passes.light_cone``); exact, and much
    faster for local observables of wide, shallow circuits.
    """
    dt, dev = _resolve_dtype(dtype), _resolve_device(device)
    _check_fusion(fusion)  # before the cache: fusion=True must not hit fusion=1's entry
    if adjoint and gradient not in (None, "adjoint"):
        raise BackendError(f"adjoint=True contradicts gradient={gradient!r}")
    gradient = gradient or ("adjoint" if adjoint else "fused")
    if template.derived:
        return EncodedProgram(template, compile_template(template.lowered(), dt, dev, fusion, gradient=gradient,
                                                         lightcone=lightcone))
    key = (template.fingerprint(), dt, str(dev), fusion, gradient, bool(lightcone))
    with _CACHE_LOCK:
        prog = _CACHE.get(key)
    if prog is None:
        prog = CompiledProgram(template, dt, dev, fusion, gradient, bool(lightcone))
        with _CACHE_LOCK:
            if len(_CACHE) >= config._CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            prog = _CACHE.setdefault(key, prog)
    return prog


def clear_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()
