"""Backend throughput on the RL policy circuit: the baseline the compiled backend must beat.

Circuit (DESIGN.md §4): 4 qubits, 5 layers, RY data encoding, RZ·RY weights,
a CZ ring, readout <Z0 Z1 Z2 Z3>. Measures, for each backend, in one run:

* forward: exact expectation values for B inputs, circuits/s;
* fwd+grad: values plus the parameter-shift jacobian, submitted as one job
  (B * (1 + 2 * n_weights) circuits), samples/s;
* scaling: one forward job of 1k, 4k, 16k and 32k rows (quick: 1k and 32k), each backend in
  a fresh process: rows/s at each size and the process's peak memory after it. Time and
  memory must grow linearly with rows: rows/s at 32k within 2x of 1k (issue 14's target
  for aer), peak memory growing by the rows' own data, not by the simulator's.

    python benchmarks/backends.py [--quick] [--batch B] [--repeats R]

The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
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


SCALING = BACKENDS + ["compiled"]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def scaling_child(name: str, sizes: list[int]) -> None:
    """In a fresh process: rows/s of one forward job per size, and the peak memory after each."""
    t = policy_circuit()
    rng = np.random.default_rng(1)
    w = rng.uniform(-np.pi, np.pi, t.n_weights)
    b = get_backend(name)
    b.submit(CircuitBatch.make(t, rng.uniform(-np.pi, np.pi, (64, t.n_inputs)), w)).result()  # warm up
    out = {"warm_mb": _peak_mb()}
    for size in sizes:
        x = rng.uniform(-np.pi, np.pi, (size, t.n_inputs))
        t0 = time.perf_counter()
        b.submit(CircuitBatch.make(t, x, w)).result()
        out[str(size)] = {"rows_per_s": size / (time.perf_counter() - t0), "peak_mb": _peak_mb()}
    print(json.dumps(out))


def scaling(sizes: list[int], figures: dict) -> list[tuple]:
    rows = []
    for name in SCALING:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--scaling-child", name,
                               "--sizes", ",".join(map(str, sizes))], capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"scaling of {name} failed: {proc.stderr.strip().splitlines()[-1:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        speeds = [got[str(s)]["rows_per_s"] for s in sizes]
        peaks = [got[str(s)]["peak_mb"] for s in sizes]
        key = name.replace("pennylane:", "pl_").replace(".", "_")
        ratio = speeds[-1] / speeds[0]
        figures[f"{key}_rows_per_s_{sizes[0]}"] = round(speeds[0], 1)
        figures[f"{key}_rows_per_s_{sizes[-1]}"] = round(speeds[-1], 1)
        figures[f"{key}_scaling_ratio"] = round(ratio, 3)  # rows/s at the largest size / at the smallest
        figures[f"{key}_peak_mb_growth"] = round(peaks[-1] - got["warm_mb"], 1)
        rows.append((name, speeds, peaks[-1] - got["warm_mb"]))
    figures["aer_scaling_within_2x"] = 0.5 <= figures["aer_scaling_ratio"] <= 2.0
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small batches, one repeat (under a minute)")
    ap.add_argument("--scaling-child", metavar="BACKEND", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default=None, help="rows of the scaling jobs, comma-separated "
                                                  "(default 1000,4000,16000,32000; quick 1000,32000)")
    ap.add_argument("--batch", type=int, default=None, help="rows per forward job (default 1000; quick 200)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats, best kept (default 3; quick 1)")
    args = ap.parse_args(argv)
    try:
        sizes = [int(v) for v in (args.sizes or ("1000,32000" if args.quick else "1000,4000,16000,32000")).split(",")]
    except ValueError:
        ap.error(f"--sizes takes integers separated by commas, got {args.sizes!r}")
    if args.scaling_child:
        return scaling_child(args.scaling_child, sizes)
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
    print()
    print("scaling: one forward job per size, rows/s; peak memory growth past warm-up, each backend in a fresh process")
    print(f"{'backend':<28}" + "".join(f"{s:>10}" for s in sizes) + f"{'ratio':>8}{'+MB':>8}")
    for name, speeds, growth in scaling(sizes, figures):
        print(f"{name:<28}" + "".join(f"{v:>10.0f}" for v in speeds) + f"{speeds[-1] / speeds[0]:>8.2f}{growth:>8.0f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
