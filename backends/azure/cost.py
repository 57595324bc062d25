"""What a job will cost before it runs, and what a target takes in one job, from a versioned target
table (``prices.json``).

The SDK no longer estimates costs (``estimate_cost`` left it in 2.3.0), so the
formulas it used live here and the prices live in data:

* IonQ: the gate-shot price ``shots * (price_1q * N1q + price_2q * N2q)`` and the per-job ``minimum``, read as the
  table's ``minimum_reading`` says: ``"max"`` (the default: ``max(gates, minimum)``) or ``"add"`` (``gates +
  minimum``); a gate on ``N > 2`` qubits billed as ``6 * (N - 2)`` two-qubit gates. With IonQ's error mitigation off
  (``debias=False``) the minimum is ``minimum_no_debias``;
* Quantinuum: ``5 + shots * (N1q + 10 * N2q + 5 * Nm) / 5000`` HQC per job (EHQC on
  emulators; syntax checkers are free);
* simulators marked ``free``: 0;
* Rigetti's QPUs (``time``): ``price_per_10ms`` per 10 ms of a job's execution time, which no documented model
  predicts, so their jobs cannot be priced before they run (``job_cost`` raises, saying so), as with ``unknown``.

Version 2 of the table adds each target's job limits with their sources (``limits_source``):
``packing`` (input format -> rows per service job: 1, or null for a format that packs parameter
bindings with no documented cap) and ``max_shots``. ``limits`` reads them; a version 1 table, or a
target or format the table does not list, takes one circuit per job and no shot cap.

Version 3 names each value's source: a target's ``sources`` maps each of its keys to an entry of ``references``
(what, where, the date it was read). It adds ``minimum_no_debias`` to IonQ's QPUs, ``noise_models`` to IonQ's
simulator, and ``minimum_reading`` (top level, or a target's own), the switch between the two readings of IonQ's
minimum; a table before version 3 reads ``"max"``, as hqflow always did.

``list_price(target, batch, shots)`` prices a batch offline (no workspace, no network), as
``AzureBackend(target).estimate_cost`` does: both call ``batch_cost``.
"""
from __future__ import annotations

import json
import os
import threading
from functools import lru_cache

import numpy as np

from hqflow.ir.text import shown

from .. import share as shared
from ..base import BackendError, CircuitBatch
from ..base import Cost as Cost  # the protocol's; importable from here as before

PRICES = os.path.join(os.path.dirname(__file__), "prices.json")
VERSIONS = (1, 2, 3)
READINGS = ("max", "add")  # of IonQ's per-job minimum: a floor, or a charge beside the gate-shots
MAX_BINDINGS = 512
"""parameter bindings hqflow sends in one service job where the table documents no cap (``packing`` null):
its request-size choice (the bindings travel in the job's ``inputParams``), not the service's"""


@lru_cache(maxsize=8)
def load_prices(path: str = PRICES) -> dict:
    """The target table: ``{"version", "date", "source", "targets": {target: entry}}`` (version 1 or 2)."""
    try:
        with open(path, encoding="utf-8") as fh:
            table = json.load(fh)
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot read price table {path}: {exc}") from None
    for key in ("version", "date", "source", "targets"):
        if key not in table:
            raise BackendError(f"price table {path} has no {key!r}")
    if table["version"] not in VERSIONS:
        raise BackendError(f"price table {path} has version {table['version']!r}; hqflow reads versions "
                           f"{', '.join(map(str, VERSIONS))}")
    default = table.get("minimum_reading", "max")
    for target, entry in table["targets"].items():
        if entry.get("model") == "ionq" and entry.setdefault("minimum_reading", default) not in READINGS:
            raise BackendError(f"price table {path}: minimum_reading of {target!r} must be 'max' or 'add', got "
                               f"{entry['minimum_reading']!r}")
    return table


def price_entry(target: str, path: str = PRICES) -> dict | None:
    return load_prices(path)["targets"].get(target)


def with_debias(entry: dict | None, target: str, debias, path: str = PRICES) -> dict | None:
    """``entry`` priced with IonQ's error mitigation (debiasing) on (``debias`` None or True: the service's default,
    at ``minimum``) or off (False: at ``minimum_no_debias``). Only a target whose entry has a debias-off price takes
    ``debias``: IonQ's QPUs (its simulators do not debias)."""
    if debias is None:
        return entry
    if not isinstance(debias, (bool, np.bool_)):
        raise BackendError(f"debias must be true or false, got {shown(debias)}")
    if not entry or "minimum_no_debias" not in entry:
        able = ", ".join(t for t, e in load_prices(path)["targets"].items() if "minimum_no_debias" in e)
        raise BackendError(f"debias={str(bool(debias)).lower()}: IonQ's error mitigation (debiasing) is an option "
                           f"of IonQ's QPUs ({able}), not of {shown(target)}")
    return entry if debias else dict(entry, minimum=entry["minimum_no_debias"])


def limits(target: str, fmt: str, path: str = PRICES) -> tuple[int | None, int | None]:
    """``(rows per service job, max shots)`` of ``target`` in input format ``fmt`` (a ``Format.kind``:
    "ionq", "qasm", "qir", "quil"): rows None where the format packs bindings with no documented cap;
    shots None where no cap is documented. Not in the table: ``(1, None)``."""
    entry = price_entry(target, path) or {}
    rows = (entry.get("packing") or {}).get(fmt, 1)
    cap = entry.get("max_shots")
    for what, value in (("packing", rows), ("max_shots", cap)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise BackendError(f"price table {path}: {what} of {target!r} ({fmt}) must be a positive integer or "
                               f"null, got {value!r}")
    return rows, cap


def gate_counts(circuit, model: str) -> tuple[int, int, int]:
    """(N1q, N2q, Nm) of a Qiskit circuit as ``model`` bills them."""
    n1 = n2 = nm = 0
    for inst in circuit.data:
        name, k = inst.operation.name, inst.operation.num_qubits
        if name in ("barrier", "id"):
            continue
        if name in ("measure", "reset"):
            nm += 1
        elif k == 1:
            n1 += 1
        elif model == "ionq" and k > 2:
            n2 += 6 * (k - 2)
        else:
            n2 += 1
    return n1, n2, nm


_COUNTS: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
_COUNTS_LOCK = threading.Lock()


def template_counts(template, model: str) -> list[tuple[int, int, int]]:
    """(N1q, N2q, Nm) of each measurement group's circuit as ``model`` bills them: the lowered gates, the
    group's basis rotations and a measurement of every qubit, as every input format sends them."""
    key = (template.fingerprint(), model)
    with _COUNTS_LOCK:
        got = _COUNTS.get(key)
    if got is None:
        from .translate import lowered_ops, measurement_groups, qiskit_circuit

        ops = lowered_ops(template)
        values = np.full(sum(a.kind != "const" for op in ops for a in op.angles), 0.5)
        got = [gate_counts(qiskit_circuit(template, ops, g, values), model) for g in measurement_groups(template)]
        with _COUNTS_LOCK:
            if len(_COUNTS) > 1024:
                _COUNTS.clear()
            _COUNTS[key] = got
    return got


def job_cost(entry: dict, target: str, counts: tuple[int, int, int], shots: int, rows: int = 1) -> float:
    """The cost of one service job with these gate counts, holding ``rows`` parameter bindings of the circuit.
    No price is documented for a job of several bindings, so only a free target prices one."""
    model = entry.get("model")
    n1, n2, nm = counts
    if model == "free":
        return 0.0
    if rows != 1 and model in ("ionq", "hqc"):
        raise BackendError(f"no price is documented for a {target!r} job of {rows} parameter bindings")
    if model == "ionq":
        gates = shots * (entry["price_1q"] * n1 + entry["price_2q"] * n2)
        return gates + entry["minimum"] if entry.get("minimum_reading") == "add" else max(gates, entry["minimum"])
    if model == "hqc":
        return 5 + shots * (n1 + 10 * n2 + 5 * nm) / 5000
    if model == "time":
        raise BackendError(f"no price is known for a job on {target!r} before it runs: it bills execution time "
                           f"({entry.get('price_per_10ms')} {entry.get('currency', 'USD')} per 10 ms), and no "
                           "documented model predicts a job's execution time")
    raise BackendError(f"no price is known for target {target!r} (model {model!r} in the price table); "
                       f"pass prices= with an entry for it")


def batch_cost(entry: dict, target: str, counts: list[tuple[int, int, int]], rows: int, shots: int,
               rows_per_job: int = 1) -> Cost:
    """``rows`` rows of one template (``counts`` per measurement group) at ``shots``, each group's rows packed
    ``rows_per_job`` to a service job: the cost and the service jobs."""
    currency = entry.get("currency", "USD")
    n1, n2, nm = (sum(c[i] for c in counts) * rows for i in range(3))
    if rows_per_job == 1:
        per_row = [job_cost(entry, target, c, shots) for c in counts]
        amount, jobs = sum(per_row) * rows, rows * len(per_row)
    else:
        sizes = [min(rows_per_job, rows - lo) for lo in range(0, rows, rows_per_job)]
        amount = sum(job_cost(entry, target, c, shots, k) for c in counts for k in sizes)
        jobs = len(sizes) * len(counts)
    return Cost(amount, currency, jobs, shots, {"1q": n1, "2q": n2, "measurements": nm})


def list_price(target: str, batch: CircuitBatch, shots: int | None = None, *, input_format: str | None = None,
               prices: str = PRICES, debias: bool | None = None, share: int | str = 1) -> Cost:
    """The list price of ``batch`` on ``target``, offline: the target's default input format (or
    ``input_format``) and its packing from the table (one circuit per service job on IonQ and Quantinuum).
    ``shots`` None takes the batch's; an exact batch (shots None) must be given ``shots``. ``debias=False``: with
    IonQ's error mitigation off. ``share``: rows that share a circuit (``hqflow.backends.share``: K at most, or
    ``"auto"``, as many as fit the target's qubits), each circuit priced as one of k × the gates (a per-job minimum
    once). The same figure as ``AzureBackend(target, debias=debias, share=share).estimate_cost(batch)`` at those
    shots."""
    from .translate import format_for

    entry = price_entry(target, prices)
    if entry is None:
        known = ", ".join(sorted(load_prices(prices)["targets"]))
        raise BackendError(f"target {target!r} is not in the price table ({prices}); known: {known}")
    entry = with_debias(entry, target, debias, prices)
    shots = batch.shots if shots is None else shots
    if shots is None:
        raise BackendError(f"batch of {batch.template.name!r} is exact (shots None): pass shots= to price it "
                           f"on {target}")
    if not isinstance(shots, (int, np.integer)) or isinstance(shots, bool) or shots < 1:
        raise BackendError(f"shots must be a positive integer, got {shots!r}")
    qubits = entry.get("qubits", 20)
    if batch.template.n_qubits > qubits:
        raise BackendError(f"circuit {batch.template.name!r} has {batch.template.n_qubits} qubits but "
                           f"azure:{target} has {qubits}")
    rows_per_job = limits(target, format_for(target, input_format).kind, prices)[0] or MAX_BINDINGS
    counts = template_counts(batch.template, entry.get("model", "free"))
    k = shared.rows_per_circuit(shared.option(share), batch.template.n_qubits, qubits, f"azure:{target}")
    parts = [batch_cost(entry, target, [tuple(regs * c for c in group) for group in counts], rows, int(shots),
                        rows_per_job) for rows, regs in shared.layout(batch.size, k)]
    return sum(parts[1:], parts[0])
