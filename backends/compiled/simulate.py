"""Running a plan: phases, stages, the unitary stacks, and the fused autograd node."""
from __future__ import annotations

import torch

from . import config
from .perm import _inverse, _permute
from .plan import _Piece, _Plan, _Stage


def _phases(theta: torch.Tensor) -> torch.Tensor:
    """``exp(i theta)`` (``torch.polar`` is several times slower on CPU)."""
    return torch.complex(torch.cos(theta), torch.sin(theta))


def _times(psi: torch.Tensor, phases: torch.Tensor, pc: _Piece) -> torch.Tensor:
    """``psi`` ``[..., 2**n]`` times a piece's phases (``[rows, 2**k]`` per sample, or ``[2**k]``) on its axes."""
    if pc.full:
        return psi * phases
    out = psi.reshape(psi.shape[:-1] + pc.dims) * phases.reshape(phases.shape[:-1] + pc.shape)
    return out.reshape(out.shape[: out.ndim - len(pc.dims)] + (-1,))


def _reduce(g: torch.Tensor, pc: _Piece, rows: bool) -> torch.Tensor:
    """``g`` ``[rows, 2**n]`` summed onto a piece's ``2**k`` entries (and over the rows, with ``rows``)."""
    if pc.full:
        return g.sum(0) if rows else g
    gaps = [1 + i for i, size in enumerate(pc.shape) if size == 1]
    out = g.reshape(g.shape[:1] + pc.dims).sum([0] + gaps if rows else gaps)
    return out.reshape(-1) if rows else out.reshape(g.shape[0], -1)


class _SamplePhases:
    """Per-sample phases ``exp(+-i (sym @ sample_a[cols] + bias[cols]))``, one piece at a time.

    A piece's phases are computed when a stage first asks for them and kept, or, with
    ``release``, dropped after the last stage to use them (``order`` -1: stages are
    visited backwards), so at most a layer or two are alive in the adjoint method.
    """

    def __init__(self, plan: _Plan, sym, bias, sign: int = 1, release: bool = False, order: int = 1):
        self.plan, self.sym, self.bias, self.sign = plan, sym, bias, sign
        self.release, self.order = release, order
        self.cache: dict = {}

    def angles(self, cols: tuple) -> torch.Tensor:
        a, b = cols
        return torch.addmm(self.bias[a:b], self.sym, self.plan.sample_a[cols])

    def __call__(self, cols: tuple, stage: int) -> torch.Tensor:
        p = self.cache.get(cols)
        if p is None:
            p = self.cache[cols] = _phases(self.sign * self.angles(cols))
        if self.release and stage == self.plan.sample_uses[cols][1 if self.order > 0 else 0]:
            del self.cache[cols]
        return p


def _apply(st: _Stage, i: int, psi: torch.Tensor, n: int, stacks, p_sample, p_shared) -> torch.Tensor:
    if st.kind == "phase":
        for pc in st.pieces:
            psi = _times(psi, p_sample(pc.cols, i) if st.per_sample else p_shared[pc.cols[0]:pc.cols[1]], pc)
        return psi
    if st.kind == "dense":
        u = stacks[st.unitary[0]][st.unitary[1]]
        if st.width == n:
            return psi @ u.transpose(0, 1)
        if st.at + st.width == n:
            return (psi.reshape(-1, u.shape[0]) @ u.transpose(0, 1)).reshape(psi.shape[0], -1)
        return torch.matmul(u, _mid(psi, st, n)).reshape(psi.shape[0], -1)  # in place on axes at.. (wide)
    return _permute(psi, st.perm, n)


def _mid(psi: torch.Tensor, st: _Stage, n: int) -> torch.Tensor:
    """``[..., 2**n]`` as ``[-1, 2**width, rest]``: a block's axes in the middle of the state."""
    return psi.reshape(-1, 2**st.width, 2 ** (n - st.at - st.width))


def _simulate(plan: _Plan, stacks, p_sample, p_shared, dtype, device, keep: list | None = None,
              keep_all: bool = False) -> torch.Tensor:
    """The final state; ``keep`` collects each stage's input (all, or those before the batch appears)."""
    psi = torch.zeros(1, 2**plan.n, dtype=dtype, device=device)
    psi[0, 0] = 1
    for i, st in enumerate(plan.stages):
        if keep is not None and (keep_all or not st.batched):
            keep.append(psi)
        psi = _apply(st, i, psi, plan.n, stacks, p_sample, p_shared)
    return psi


def _build_stacks(plan: _Plan, p_shared: torch.Tensor) -> list[torch.Tensor]:
    """All unitaries, ``[G, K, K]`` per stack: ``F[m] diag(P[m]) ... diag(P[1]) F[0]``, batched."""
    out = []
    for spec in plan.stacks:
        if "const" in spec:
            out.append(spec["const"])
            continue
        size, dim, fixed = spec["size"], spec["dim"], spec["fixed"]
        u = fixed[0]
        for s, first in enumerate(spec["slots"]):
            u = p_shared[first: first + size * dim].view(size, dim, 1) * u
            u = torch.matmul(fixed[s + 1], u)
        out.append(u)
    return out


class _FusedSim(torch.autograd.Function):
    """The state pipeline and readout as one autograd node, with a hand-written backward.

    Backward walks the stages in reverse carrying ``lambda`` (torch's gradient with
    respect to the state) through each stage's adjoint map (``conj(P)``,
    ``conj(U)``, the inverse permutation) and reads each parameter's gradient off
    ``lambda`` and the stage's input or output state. Those states are either kept
    from the forward pass (``uncompute=False``: fastest) or, with the **adjoint
    method** (``uncompute=True``), recomputed backwards by the same adjoint maps:
    ``Z = [lambda, psi]`` is carried as one stacked tensor, so memory stays at a few
    states whatever the depth. Stages before the first per-sample phase act on a
    state that is the same for every row (``[1, d]``); their inputs are kept, except in a wide circuit
    (past ``config._WIDE`` qubits), where the adjoint method un-computes every stage, those too (from the
    first row), so that memory stays at a few states whatever the circuit.
    """

    @staticmethod
    def forward(ctx, plan, readout, uncompute, sym, bias, p_shared, *stacks):
        keep_all = not uncompute and any(ctx.needs_input_grad)  # else no backward needs the phases either
        p_sample = _SamplePhases(plan, sym, bias, release=not keep_all)
        kept: list = []
        through = uncompute and plan.n > config._WIDE  # un-compute every stage: keep no state
        keep = None if through or not any(ctx.needs_input_grad) else kept  # no backward: keep nothing
        psi = _simulate(plan, stacks, p_sample, p_shared, p_shared.dtype, p_shared.device,
                        keep=keep, keep_all=keep_all)
        ctx.plan, ctx.readout, ctx.kept, ctx.uncompute, ctx.p_sample = plan, readout, kept, uncompute, p_sample
        ctx.through = through
        ctx.save_for_backward(psi, sym, bias, p_shared, *stacks)
        return readout(psi)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        return _Backward(ctx).run(ctx, grad_out)


class _ConjKeptPhases:
    """The conjugates of the per-sample phase layers kept from the forward pass, each made once.

    A callable object rather than a bound method of ``_Backward``: stored there, a bound
    method would make a reference cycle, and the states it holds would wait for the collector.
    """

    def __init__(self, forward: _SamplePhases):
        self.forward, self.cache = forward, {}

    def __call__(self, cols: tuple, stage: int) -> torch.Tensor:
        if cols not in self.cache:
            self.cache[cols] = self.forward(cols, stage).conj().resolve_conj()
        return self.cache[cols]


class _Backward:
    """One call of ``_FusedSim.backward``: the saved tensors, the gradients being summed,
    the conjugated phases and unitaries (made once, when first needed), and the reverse walk."""

    def __init__(self, ctx):
        self.plan, self.n, self.kept = ctx.plan, ctx.plan.n, ctx.kept
        psi, sym, bias, p_shared, *stacks = ctx.saved_tensors
        self.psi, self.sym, self.bias, self.p_shared, self.stacks = psi, sym, bias, p_shared, stacks
        need_sym, need_bias = ctx.needs_input_grad[3], ctx.needs_input_grad[4]
        self.need_sym, self.need_bias = need_sym, need_bias
        self.need_s, self.need_sh, self.need_m = need_sym or need_bias, ctx.needs_input_grad[5], ctx.needs_input_grad[6:]
        self.g_sample: dict = {}
        self.g_shared = torch.zeros_like(p_shared) if self.need_sh else None
        self.g_stacks: list = [None] * len(stacks)
        self.conj_stacks: dict = {}
        if ctx.uncompute:  # recomputed, one layer at a time, as the stages are visited backwards
            self.conj_sample = _SamplePhases(self.plan, sym, bias, sign=-1, release=True, order=-1)
        else:
            self.conj_sample = _ConjKeptPhases(ctx.p_sample)
        self.conj_shared = p_shared.conj().resolve_conj()
        self.g_sym = torch.zeros_like(sym) if need_sym else None
        self.g_bias = torch.zeros_like(bias) if need_bias else None

    def back_map(self, st: _Stage, s: int, carry: torch.Tensor) -> torch.Tensor:
        """The adjoint of a stage's linear map, on ``[..., rows, d]``."""
        if st.kind == "perm":
            return _permute(carry, _inverse(st.perm), self.n)
        if st.kind == "phase":
            for pc in st.pieces:
                a, b = pc.cols
                carry = _times(carry, self.conj_sample(pc.cols, s) if st.per_sample else self.conj_shared[a:b], pc)
            return carry
        i, j = st.unitary
        if i not in self.conj_stacks:
            self.conj_stacks[i] = self.stacks[i].conj().resolve_conj()
        if st.at + st.width < self.n:  # in place in the middle: U^dag from the left
            return torch.matmul(self.conj_stacks[i][j].transpose(0, 1), _mid(carry, st, self.n)).reshape(carry.shape)
        k = 2**st.width
        return (carry.reshape(-1, k) @ self.conj_stacks[i][j]).reshape(carry.shape)

    def param_grads(self, st: _Stage, s: int, lam_out, psi_in, psi_out) -> None:
        """Add a stage's parameter gradients (per-sample phases, shared phases or a unitary's)."""
        if st.kind == "phase" and st.per_sample and self.need_s:
            self._sample_grads(st, s, lam_out, psi_out)
        elif st.kind == "phase" and not st.per_sample and self.need_sh:
            self._shared_grads(st, lam_out, psi_in, psi_out)
        elif st.kind == "dense" and self.need_m[st.unitary[0]]:
            i, j = st.unitary
            k = 2**st.width
            if self.g_stacks[i] is None:
                self.g_stacks[i] = torch.zeros_like(self.stacks[i])
            if st.at + st.width < self.n:
                self.g_stacks[i][j] += torch.einsum("gjs,gis->ji", _mid(lam_out, st, self.n), _mid(psi_in, st, self.n).conj())
            else:
                self.g_stacks[i][j] += (psi_in.reshape(-1, k).mH @ lam_out.reshape(-1, k)).transpose(0, 1)

    def _shared_grads(self, st: _Stage, lam_out, psi_in, psi_out) -> None:
        """The gradient of a shared phase stage's pieces: one piece, ``lambda conj(psi_in)`` summed onto
        it; several, ``lambda conj(psi_out)`` summed onto each times the piece's own phases (the others'
        phases cancel), so no piece's phases are divided out."""
        if len(st.pieces) == 1:
            (pc,) = st.pieces
            a, b = pc.cols
            self.g_shared[a:b] += _reduce(lam_out * psi_in.conj(), pc, rows=True)
            return
        g = lam_out * psi_out.conj()
        for pc in st.pieces:
            a, b = pc.cols
            self.g_shared[a:b] += _reduce(g, pc, rows=True) * self.p_shared[a:b]

    def _sample_grads(self, st: _Stage, s: int, lam_out, psi_out) -> None:
        # d L / d theta = Im(lambda conj(psi)) at the stage's output, summed onto each piece; a piece's
        # gradient is summed over the stages sharing it and applied at its first use
        g = (lam_out * psi_out.conj()).imag  # [B, 2**n]
        for pc in st.pieces:
            a, b = pc.cols
            g_theta = _reduce(g, pc, rows=False)  # [B, 2**k]
            if pc.cols in self.g_sample:
                g_theta = g_theta + self.g_sample.pop(pc.cols)
            if s != self.plan.sample_uses[pc.cols][0]:
                self.g_sample[pc.cols] = g_theta
                continue
            if self.need_sym:
                self.g_sym.add_(g_theta @ self.plan.sample_a[pc.cols].transpose(0, 1))
            if self.need_bias:
                self.g_bias[a:b] += g_theta.sum(0)

    def run(self, ctx, grad_out) -> tuple:
        """Walk the stages in reverse, carrying ``lambda`` (and, un-computing, ``psi``); the gradients."""
        plan, kept, psi = self.plan, self.kept, self.psi
        lam = ctx.readout.grad(psi, grad_out.to(psi.real.dtype))
        through = ctx.through
        stacked = ctx.uncompute and (bool(plan.sample_a) or through)  # else every stage's input was kept
        carry = torch.stack([lam, psi]) if stacked else lam
        del lam
        psi_out = psi
        for s in range(len(plan.stages) - 1, -1, -1):
            st = plan.stages[s]
            lam_out = carry[0] if stacked else carry
            new = self.back_map(st, s, carry)
            psi_in = (new[1] if st.batched else new[1][:1]) if stacked and (st.batched or through) else kept[s]
            self.param_grads(st, s, lam_out, psi_in, psi_out)
            carry, psi_out = new, psi_in
            if st.kind == "phase" and st.per_sample and not st.batched:
                # the first per-sample phase: its input was the same for every row
                if through:  # every row un-computes to the same state: carry on from the first
                    carry = torch.stack([carry[0].sum(0, keepdim=True), psi_in])
                else:
                    carry = (carry[0] if stacked else carry).sum(0, keepdim=True)
                    stacked = False
        return (None, None, None, self.g_sym, self.g_bias, self.g_shared, *self.g_stacks)
