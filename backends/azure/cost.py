"""What a job will cost before it runs, from a versioned price table (``prices.json``).

The SDK no longer estimates costs (``estimate_cost`` left it in 2.3.0), so the
formulas it used live here and the prices live in data:

* IonQ: ``max(shots * (price_1q * N1q + price_2q * N2q), minimum)`` USD per job,
  a gate on ``N > 2`` qubits billed as ``6 * (N - 2)`` two-qubit gates;
* Quantinuum: ``5 + shots * (N1q + 10 * N2q + 5 * Nm) / 5000`` HQC per job (EHQC on
  emulators; syntax checkers are free);
* simulators marked ``free``: 0.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache

from ..base import BackendError
from ..base import Cost as Cost  # the protocol's; importable from here as before

PRICES = os.path.join(os.path.dirname(__file__), "prices.json")


@lru_cache(maxsize=8)
def load_prices(path: str = PRICES) -> dict:
    """The price table: ``{"version", "date", "source", "targets": {target: entry}}``."""
    try:
        with open(path, encoding="utf-8") as fh:
            table = json.load(fh)
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot read price table {path}: {exc}") from None
    for key in ("version", "date", "source", "targets"):
        if key not in table:
            raise BackendError(f"price table {path} has no {key!r}")
    return table


def price_entry(target: str, path: str = PRICES) -> dict | None:
    return load_prices(path)["targets"].get(target)


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


def job_cost(entry: dict, target: str, counts: tuple[int, int, int], shots: int) -> float:
    """The cost of one job with these gate counts."""
    model = entry.get("model")
    n1, n2, nm = counts
    if model == "free":
        return 0.0
    if model == "ionq":
        return max(shots * (entry["price_1q"] * n1 + entry["price_2q"] * n2), entry["minimum"])
    if model == "hqc":
        return 5 + shots * (n1 + 10 * n2 + 5 * nm) / 5000
    raise BackendError(f"no price is known for target {target!r} (model {model!r} in the price table); "
                       f"pass prices= with an entry for it")
