"""Rows that share a circuit: k rows of a batch run as one circuit on disjoint registers, and each row is read
from its own register's marginal (issue 35).

On a target billed per circuit, a narrow circuit leaves the device's other qubits idle under the same charge:
IonQ Aria has 25 qubits and bills at least $97.50 a circuit, and the 4-qubit RL policy uses 4 of them. A backend
with the ``share`` option (``emulated-qpu``, ``azure:<target>``) runs ``k`` rows of a batch as one circuit::

    k = Capabilities.rows_per_circuit(n)   # min(share, ⌊qubits / n⌋); share=auto: ⌊qubits / n⌋
    parts = widen(batch, k)                # the wide batches
    result = narrow(batch, k, [backend.run(p) for p in parts])  # back into the batch's B rows

IR only: any backend that runs templates runs the wide ones.

* **Layout.** Row ``r = i * k + j`` of the batch is register ``j``, wires ``[j * n, (j + 1) * n)``, of wide row ``i``:
  ``⌊B / k⌋`` rows of the template with ``k`` registers, then, where ``B`` is not a multiple of ``k``, one row of the
  template with ``B mod k`` registers (not padded: a padded register would pay gates for nothing). ``circuits(B, k)``
  = ⌈B / k⌉ per measurement group.
* **The wide template** (``wide_template``) copies the gates per register. Inputs are per register (column
  ``j * n_in + c`` is column ``c`` of register ``j``'s row). Weights shared by every row (``[n_w]``) stay shared
  symbols; per-row weights (``[B, n_w]``, as parameter shift sends) are per register (``j * n_w + c``). Observable
  ``j * n_obs + o`` is observable ``o`` on register ``j``; the global phase is the registers' sum. Names get ``@j``
  (per register) or ``@*`` (shared), so they stay distinct.
* **Why a register's marginal is its row.** Every register starts in ``|0…0⟩`` and no gate joins two of them, so the
  wide state is the product of the rows' states, and a shot's bits are drawn from the product of the rows'
  distributions. A register's marginal is then exactly the distribution its row has alone, and the registers of
  one circuit are independent of each other: a shared row's values, counts and probabilities are those of the row
  run alone (exact values equal to rounding; a differential test checks 1e-12). On hardware, crosstalk between
  neighbouring registers is physics that no layout removes.
* **Measurement groups.** Terms on different registers act on different wires, so they always commute qubit-wise:
  grouping the wide observables (register after register, greedily, as ``azure/translate.py`` does) gives exactly
  the template's groups, each the union of its registers' copies. A batch is ⌈B / k⌉ × G circuits, not B × G.
* **Shots.** A wide circuit runs the batch's shots, and every register sees all of them: each row gets ``shots``
  samples of its own distribution and the standard error it has alone.
* **Seeds.** A wide row samples from its first row's seed (``row_seeds``): draws that are distributionally the rows'
  own, but not the same draws as the rows alone, and they depend on which rows share a circuit (where the backend
  samples a returned distribution itself: Azure's simulators). ``emulated-qpu`` computes its values row by row, so
  it keeps every row's own draws.
* **Refused.** An explicit ``share=K`` (K > 1) where no two rows of a template fit the device (a template wider than
  half of it) is refused at submit (``RequestRefused``, never retried): running it unshared would cost K times what
  the option promised. ``share=auto`` takes what fits, one row where that is all.
"""
from __future__ import annotations

import threading
import time
from functools import lru_cache

import numpy as np
from hqflow.ir.circuit import Angle, CircuitTemplate, Observable, Op, PauliTerm
from hqflow.ir.text import number, shown

from .base import BackendError, BatchResult, Capabilities, CircuitBatch, Job, JobFailed, RequestRefused, Usage

AUTO = "auto"
ADDED = ("usage", "found", "cost", "service_jobs", "reused_jobs", "failed_jobs")  # metadata the parts' jobs sum


def option(share) -> int | str:
    """The ``share`` option checked: a positive integer (at most that many rows per circuit) or ``"auto"`` (as many as
    fit); anything else a one-line ``BackendError``."""
    if isinstance(share, str) and share.strip().lower() == AUTO:
        return AUTO
    if isinstance(share, (int, np.integer)) and not isinstance(share, bool) and share >= 1:
        return int(share)
    raise BackendError(f"share must be a positive integer (at most that many rows of a batch per circuit) or 'auto' "
                       f"(as many as fit the device's qubits), got {shown(share)}")


def most(share: int | str, qubits: int) -> int:
    """``Capabilities.share`` of an option: K, or the device's qubits for ``auto``."""
    return qubits if share == AUTO else share


def rows_per_circuit(share: int | str, width: int, qubits: int, where: str = "the device") -> int:
    """k for a template ``width`` qubits wide on a device of ``qubits`` (``share`` checked by ``option``): min(K,
    ⌊qubits / width⌋), and ⌊qubits / width⌋ for auto; an explicit K > 1 that no two rows fit is ``RequestRefused``."""
    k = Capabilities("", qubits, share=most(share, qubits)).rows_per_circuit(width)
    if k == 1 and share not in (1, AUTO) and width <= qubits:
        raise RequestRefused(f"share={share}: two rows of a {number(width)}-qubit circuit need {number(2 * width)} "
                             f"qubits and {where} has {number(qubits)}, so no rows can share a circuit; use share=1")
    return k


def layout(rows: int, k: int) -> list[tuple[int, int]]:
    """``(wide rows, registers)`` of each wide batch: ``⌊rows / k⌋`` of ``k``, then one of ``rows mod k``."""
    return [(n, regs) for n, regs in ((rows // k, k), (int(rows % k > 0), rows % k)) if n]


def circuits(rows: int, k: int) -> int:
    """Circuits that ``rows`` rows make, ``k`` to a circuit (per measurement group)."""
    return -(-rows // k)


@lru_cache(maxsize=64)
def wide_template(template: CircuitTemplate, k: int, shared: bool = True) -> CircuitTemplate:
    """``k`` registers of ``template`` side by side (see the module docstring); ``shared``: the weights are the
    rows' common ones. One register is the template itself."""
    if template.derived:
        raise BackendError(f"circuit {template.name!r} has derived inputs: widen its lowered template")
    if k == 1:
        return template
    n, n_in, n_w = template.n_qubits, template.n_inputs, template.n_weights

    def angle(a: Angle, j: int) -> Angle:
        if a.kind == "input" or (a.kind == "weight" and not shared):
            return Angle(a.kind, j * (n_in if a.kind == "input" else n_w) + a.index, a.scale, a.offset)
        return a

    ops = tuple(Op(op.name, tuple(w + j * n for w in op.wires), tuple(angle(a, j) for a in op.angles))
                for j in range(k) for op in template.ops)
    observables = tuple(Observable(tuple(PauliTerm(t.coeff, tuple((w + j * n, p) for w, p in t.paulis))
                                         for t in o.terms)) for j in range(k) for o in template.observables)
    inputs = tuple(f"{name}@{j}" for j in range(k) for name in template.input_names)
    weights = tuple(f"{name}@*" for name in template.weight_names) if shared else \
        tuple(f"{name}@{j}" for j in range(k) for name in template.weight_names)
    return CircuitTemplate(n * k, ops, inputs, weights, observables, template.shots, f"{template.name}-share{k}",
                           phase=tuple(angle(a, j) for j in range(k) for a in template.phase))


def widen(batch: CircuitBatch, k: int) -> list[CircuitBatch]:
    """The wide batches of ``batch``, ``k`` rows to a circuit (``layout``); ``[batch]`` itself for ``k`` 1."""
    if k == 1:
        return [batch]
    t, shared, out, lo = batch.template, batch.weights.ndim == 1, [], 0
    for rows, regs in layout(batch.size, k):
        hi = lo + rows * regs
        x = batch.inputs[lo:hi].reshape(rows, regs * t.n_inputs)
        w = batch.weights if shared else batch.weights[lo:hi].reshape(rows, regs * t.n_weights)
        seeds = None if batch.row_seeds is None else batch.row_seeds[lo:hi:regs]
        seed = None if batch.seed is None else batch.seed + lo
        out.append(CircuitBatch(wide_template(t, regs, shared), x, w, batch.shots, seed, batch.key, batch.attempt,
                                row_seeds=seeds))
        lo = hi
    return out


def narrow(batch: CircuitBatch, k: int, results: list[BatchResult]) -> BatchResult:
    """The results of ``widen(batch, k)``'s batches, in order, as ``batch``'s rows: values and standard errors per
    register's observables; probabilities and counts, each register's marginal. Metadata: the first part's, with the
    parts' usage, cost and service jobs added up, and ``share`` k."""
    if k == 1:
        return results[0]
    n, regs = batch.template.n_qubits, [r for _, r in layout(batch.size, k)]

    def rows(name: str, per_register):
        if getattr(results[0], name) is None:
            return None
        return np.concatenate([per_register(getattr(res, name), m) for res, m in zip(results, regs)])

    split = lambda a, m: a.reshape(a.shape[0] * m, -1)  # noqa: E731
    counts = None if results[0].counts is None else [
        _marginal(row, j, n) for res, m in zip(results, regs) for row in res.counts for j in range(m)]
    return BatchResult(rows("values", split), rows("stderr", split), rows("probs", lambda p, m: _marginals(p, m, n)),
                       counts, dict(_added([r.metadata for r in results]), share=k))


def _marginals(probs: np.ndarray, regs: int, n: int) -> np.ndarray:
    """``[W, 2**(regs*n)]`` probabilities (wire 0 first) -> ``[W * regs, 2**n]``, each register's marginal."""
    p = probs.reshape((probs.shape[0],) + (2**n,) * regs)
    axes = set(range(1, regs + 1))
    return np.stack([p.sum(axis=tuple(axes - {1 + j})) for j in range(regs)], 1).reshape(-1, 2**n)


def _marginal(counts: dict[str, int], j: int, n: int) -> dict[str, int]:
    """Register ``j``'s counts (its ``n`` bits, wire 0 first) of a wide circuit's counts."""
    out: dict[str, int] = {}
    for bits, c in counts.items():
        out[bits[j * n:(j + 1) * n]] = out.get(bits[j * n:(j + 1) * n], 0) + c
    return out


def _added(metas: list[dict]) -> dict:
    """The first part's metadata, with the figures in ``ADDED`` that every part reports added up."""
    out = dict(metas[0])
    for key in ADDED:
        values = [m.get(key) for m in metas]
        if all(isinstance(v, (Usage, int, float)) and not isinstance(v, bool) for v in values):
            out[key] = sum(values[1:], values[0])
    return out


class SharedJob(Job):
    """The jobs of a batch's wide batches (``widen``); ``result()`` reads them back into the batch's rows. It fails
    once every part has ended, with the first failure, whose usage (``JobFailed.metadata``) then counts every part's."""

    def __init__(self, batch: CircuitBatch, k: int, jobs: list[Job]):
        self.batch, self.k, self.jobs = batch, k, jobs
        self._lock = threading.Lock()
        self._outcome: BatchResult | BaseException | None = None  # settled once, by the first result() to end

    def done(self) -> bool:
        return all(j.done() for j in self.jobs)

    def started(self) -> bool:
        return all(j.started() for j in self.jobs)

    def cancel(self) -> bool:
        return any([j.cancel() for j in self.jobs])  # every part, not only until one says yes

    def add_done_callback(self, fn) -> None:
        left, lock = [len(self.jobs)], threading.Lock()

        def one(_job) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                fn(self)

        for j in self.jobs:
            j.add_done_callback(one)

    def result(self, timeout: float | None = None) -> BatchResult:
        end = None if timeout is None else time.monotonic() + timeout
        results, errors = [], []
        for j in self.jobs:
            try:
                results.append(j.result(None if end is None else max(0.0, end - time.monotonic())))
            except TimeoutError:
                raise
            except Exception as exc:  # said once every part has ended
                errors.append(exc)
        with self._lock:
            if self._outcome is None:
                self._outcome = self._settle(results, errors)
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome

    def _settle(self, results: list[BatchResult], errors: list[Exception]) -> BatchResult | BaseException:
        if not errors:
            return narrow(self.batch, self.k, results)
        metas = [r.metadata for r in results] + [getattr(e, "metadata", None) for e in errors]
        if isinstance(errors[0], JobFailed) and all(isinstance(m, dict) and "usage" in m for m in metas):
            errors[0].metadata = _added(metas)
        return errors[0]
