"""Backend throughput on the RL policy circuit: the baseline the compiled backend must beat.

Circuit (DESIGN.md §4): 4 qubits, 5 layers, RY data encoding, RZ·RY weights,
a CZ ring, readout <Z0 Z1 Z2 Z3>. Measures, for each backend, in one run:

* forward: exact expectation values for B inputs, circuits/s;
* fwd+grad: values plus the parameter-shift jacobian, submitted as one job
  (B * (1 + 2 * n_weights) circuits), samples/s.

    python benchmarks/backends.py [--quick] [--batch B] [--repeats R]

The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from hqflow.backends import CircuitBatch, get_backend
from hqflow.gradients import param_shift

from _circuits import policy_circuit  # benchmarks/_circuits.py (the script's folder is on sys.path)

BACKENDS = ["reference", "aer", "pennylane:default.qubit", "pennylane:lightning.qubit"]


def best_seconds(fn, repeats: int) -> float:
    fn()  # warm up: transpile / build QNodes / caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small batches, one repeat (under a minute)")
    ap.add_argument("--batch", type=int, default=None, help="rows per forward job (default 1000; quick 200)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats, best kept (default 3; quick 1)")
    args = ap.parse_args()
    B = args.batch or (200 if args.quick else 1000)
    grad_B = max(B // 20, 4)
    repeats = args.repeats or (1 if args.quick else 3)

    t = policy_circuit()
    rng = np.random.default_rng(0)
    x = rng.uniform(-np.pi, np.pi, (B, t.n_inputs))
    w = rng.uniform(-np.pi, np.pi, t.n_weights)
    ref_values = None
    rows, figures = [], {"batch": B, "grad_batch": grad_B, "circuit": t.name}
    for name in BACKENDS:
        b = get_backend(name)
        fwd = best_seconds(lambda: b.submit(CircuitBatch.make(t, x, w)).result(), repeats)
        values = b.submit(CircuitBatch.make(t, x, w)).result().values
        ref_values = values if ref_values is None else ref_values
        batch, post = param_shift(t, x[:grad_B], w)
        grad = best_seconds(lambda: post(b.submit(batch).result()), repeats)
        key = name.replace("pennylane:", "pl_").replace(".", "_")
        figures[f"{key}_forward_circuits_per_s"] = round(B / fwd, 1)
        figures[f"{key}_grad_samples_per_s"] = round(grad_B / grad, 1)
        figures[f"{key}_max_abs_diff_vs_reference"] = float(np.abs(values - ref_values).max())
        rows.append((name, B / fwd, batch.size / grad, grad_B / grad))
    base = rows[0]
    print(f"RL policy circuit {t.name}: forward B={B}, fwd+grad B={grad_B} ({t.n_weights} weights, "
          f"{1 + 2 * t.n_weights} circuits per sample), best of {repeats}")
    print(f"{'backend':<28}{'fwd circ/s':>12}{'x ref':>8}{'grad circ/s':>13}{'grad samples/s':>16}{'x ref':>8}")
    for name, f, gc, gs in rows:
        print(f"{name:<28}{f:>12.0f}{f / base[1]:>8.2f}{gc:>13.0f}{gs:>16.1f}{gs / base[3]:>8.2f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
