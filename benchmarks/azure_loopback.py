"""Azure Quantum end to end over real HTTP, against the loopback job service and Azurite.

The real azure-quantum SDK talks to a loopback Azure Quantum job service
(``hqflow.backends.azure.loopback``, its own process, running circuits on the
reference simulator) and to Azurite for blob storage. Nothing is patched.

1. ``batch_seconds_64``: a 64-row batch on ``azure:ionq.simulator`` (64 service jobs), the
   service adding 200 ms to every job: the median of 3 after a first, cold one
   (``batch_seconds_64_cold``: threads and HTTP connections start). The sequential bound
   (64 x 0.2 s) is beside it.
2. ``lost``, ``duplicated_jobs``: 500 rows through the scheduler with 20% of jobs failing
   and 5% of HTTP calls answered 503: rows without a result, and service jobs run twice
   for the same row and attempt (the service counts runs per job id).
3. ``within_5_sigma``: every value of part 2 against the reference simulator's exact value.
4. ``cost_matches_formula``: ``estimate_cost`` against the IonQ and Quantinuum formulas,
   computed here from the submitted payloads, on 5 random circuits.
5. ``budget_respected``: a run whose budget allows half its jobs stops cleanly, spend <=
   budget, with the completed steps kept.
6. ``rates``: 128 rows in one batch with 1%, 10% and 20% of service jobs failing: per rate the
   service jobs ``created``, ``failed``, ``cancelled`` (healthy ones: 0 is the target),
   ``left`` running after the run (0), ``reruns`` (a row's input run twice: 0) and rows ``lost``
   (0); a failed service job is retried alone, its siblings run on.
7. ``long_queue``: 4 rows behind a 3 s queue with ``job_timeout`` 1.5 s: a queued job is not a
   hung job (no timeout, 4 service jobs, none cancelled).
8. ``learn_batch``: a training-sized learn batch (1,596 rows, one service job each; ``--quick``:
   400) with 1% of service jobs failing: it completes, with the counts of part 6.
9. ``rl_updates``: ``hqflow train cartpole --backend azure:ionq.simulator --episodes 10
   --set n_layers=1`` against the service (``--quick``: 2 episodes, one update);
   ``trace_jobs``: the Azure jobs ``hqflow trace`` shows for it. Every environment step
   costs 2 + 2 x (inputs + weights) circuits, one service job each on IonQ (one to act, the
   learner's unshifted row and its parameter-shift rows): 58 with one layer, 186 with the
   default five, which the loopback service runs at about 90 jobs/s.
10. ``packed_*``: a 64-row batch of a 2-qubit, 2-group template on ``azure:rigetti.sim.qvm`` in
   Rigetti's Quil with ``max_bindings=16`` (one program per group, a parameter set per row):
   ``packed_service_jobs`` (clean; the target's limit gives 2 x ceil(64 / 16) = 8), and under
   20% failing jobs, 5% HTTP 503s and 2% dropped connections through the scheduler:
   ``packed_within_5_sigma`` (both runs; by the exact binomial tail, which judges values near +-1
   fairly), ``packed_lost``, ``packed_duplicated``, ``packed_reruns``
   (0 each) and ``packed_faulty_service_jobs`` (created, retries included). The same batch on
   ``azure:ionq.simulator``, which takes one circuit per job, is ``packed_ionq_service_jobs`` (128).

    python benchmarks/azure_loopback.py [--quick]

Needs node and npm (Azurite); without them it prints why and a JSON line with "skipped".
The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _template(n_qubits=3, n_ops=14, seed=0):
    from hqflow.ir.random import random_template

    return random_template(np.random.default_rng(seed), n_qubits, n_ops=n_ops)


def part_batch(options, svc, rows=64, latency=0.2, repeats=3):
    """A cold 64-row batch (the backend's threads and HTTP connections start), then the median of
    ``repeats`` more: ``batch_seconds_64`` is the steady state, the target's subject."""
    from hqflow.backends import CircuitBatch, get_backend
    from hqflow.ir import Circuit

    c = Circuit(2, name="enc")
    x, w = c.inputs("x", 2), c.weights("w", 2)
    c.ry(x[0], 0).ry(x[1], 1).cx(0, 1).ry(w[0], 0).ry(w[1], 1)
    t = c.build(observables=["Z0", "Z1 Z0"])
    backend = get_backend("azure:ionq.simulator", **options, shots=200)
    rng = np.random.default_rng(1)
    backend.submit(CircuitBatch.make(t, rng.uniform(-1, 1, (2, 2)), [0.1, 0.2], seed=0)).result(timeout=60)
    svc.configure(reset=True, latency=latency)
    times = []
    for k in range(repeats + 1):
        batch = CircuitBatch.make(t, rng.uniform(-1, 1, (rows, 2)), [0.3, -0.4], seed=1 + k)
        t0 = time.perf_counter()
        backend.submit(batch).result(timeout=120)
        times.append(time.perf_counter() - t0)
    backend.close()
    return {"batch_seconds_64": round(float(np.median(times[1:])), 3), "batch_seconds_64_cold": round(times[0], 3),
            "sequential_bound_s": round(rows * latency, 3), "service_jobs_64": svc.stats()["jobs"] // (repeats + 1)}


FAULT_CHUNK = 50


def _fault_data(rows: int):
    t = _template(3, 12, seed=4)
    rng = np.random.default_rng(2)
    return t, rng.uniform(-np.pi, np.pi, (rows, t.n_inputs)), rng.uniform(-np.pi, np.pi, t.n_weights)


def fault_actor(step, rows):
    """One actor step: 50 rows through the run's pool (module level: fragments are held by reference)."""
    import hqflow as hq
    from hqflow.backends import CircuitBatch

    t, x, w = _fault_data(rows)
    lo = step * FAULT_CHUNK
    batch = CircuitBatch.make(t, x[lo:lo + FAULT_CHUNK], w, shots=2000, seed=int(step))
    res = hq.get_client().submit("qpu", batch).result()
    return {"values": res.values, "stderr": res.stderr}


def part_faults(options, svc, rows=500):
    import hqflow as hq
    from hqflow.backends import CircuitBatch, get_backend

    t, x, w = _fault_data(rows)
    exact = get_backend("reference").run_checked(CircuitBatch.make(t, x, w)).values
    pipe = hq.Pipeline("faults")
    pipe.input("step", "scalar")
    pipe.preprocess(fault_actor, outputs={"values": "array", "stderr": "array"}, job_backends=("qpu",),
                    name="actor", params={"rows": rows})
    pipe.output("actor.values")
    pipe.output("actor.stderr")
    graph = pipe.build()
    svc.configure(reset=True, latency=0.02, job_failure=0.2, http_503=0.05, seed=7)
    backend = ("azure:ionq.simulator", dict(options, max_concurrency=64))
    t0 = time.perf_counter()
    result = hq.run(graph, [{"step": i} for i in range(rows // FAULT_CHUNK)], backends={"qpu": [backend]},
                    executor="local", cpu_workers=2, max_retries=20, window=4)
    # a failed service job is retried alone by the backend (job_tries); a batch fails only when one row
    # fails job_tries times, and the runtime's retry then reuses every row done or still running
    seconds = time.perf_counter() - t0
    stats = svc.stats()
    values = np.concatenate(result.column("values"))
    errs = np.concatenate(result.column("stderr"))
    lost = rows - int(np.isfinite(values).all(axis=1).sum())
    within = float(np.mean(np.abs(values - exact) <= 5 * errs + 1e-9))
    return {"lost": lost, "duplicated_jobs": stats["duplicated"], "within_5_sigma": within,
            "fault_rows": rows, "fault_seconds": round(seconds, 2), "fault_service_jobs": stats["jobs"],
            "fault_failed_jobs": stats["by_status"].get("Failed", 0), "fault_503": stats["faults"].get("http_503", 0),
            "fault_retries": result.extra["retries"]}


def _one_batch(options, svc, rows: int, **run):
    """``rows`` rows in one batch through the scheduler: ``(result or None, error or None, seconds, stats)``,
    the service's counters read after the run ended (and its backend closed)."""
    import hqflow as hq

    pipe = hq.Pipeline("rows")
    pipe.input("step", "scalar")
    pipe.preprocess(rows_actor, outputs={"values": "array"}, job_backends=("qpu",), name="actor",
                    params={"rows": rows})
    pipe.output("actor.values")
    t0, result, error = time.perf_counter(), None, None
    try:
        result = hq.run(pipe.build(), [{"step": 0}], backends={"qpu": [("azure:ionq.simulator", options)]},
                        executor="local", **run)
    except hq.RunFailed as exc:
        error = str(exc).splitlines()[0][:200]
    return result, error, round(time.perf_counter() - t0, 2), svc.stats()


def rows_actor(step, rows):
    """``rows`` rows of a 2-qubit circuit with one measurement group: one service job per row."""
    import hqflow as hq
    from hqflow.backends import CircuitBatch
    from hqflow.ir import Circuit

    c = Circuit(2, name="pair")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).rx(x[1], 1).cx(0, 1).rz(w[0], 1)
    t = c.build(observables=["Z0", "Z0 Z1"])
    inputs = np.random.default_rng(rows).uniform(-np.pi, np.pi, (rows, 2))
    batch = CircuitBatch.make(t, inputs, [0.3], shots=100, seed=int(step))
    return {"values": hq.get_client().submit("qpu", batch).result().values}


def _counts(result, error, seconds, stats, rows) -> dict:
    values = None if result is None else result.outputs[0]["values"]
    lost = rows if values is None else rows - int(np.isfinite(values).all(axis=1).sum())
    return {"created": stats["jobs"], "failed": stats["by_status"].get("Failed", 0),
            "cancelled": stats["cancelled_waiting"] + stats["cancelled_executing"], "left": stats["left"],
            "reruns": stats["reruns"], "duplicated": stats["duplicated"], "lost": lost, "seconds": seconds,
            "runtime_retries": None if result is None else result.extra["retries"], "error": error}


def part_rates(options, svc, rows=128):
    out = {}
    for rate in (0.01, 0.1, 0.2):
        svc.configure(reset=True, latency=0.02, job_failure=rate, seed=3)
        out[f"{rate:.0%}"] = _counts(*_one_batch(options, svc, rows), rows)
    return {"rates": out}


def part_long_queue(options, svc, rows=4):
    svc.configure(reset=True, latency=3.0)
    result, error, seconds, stats = _one_batch(options, svc, rows, job_timeout=1.5, max_retries=3)
    return {"long_queue": dict(_counts(result, error, seconds, stats, rows),
                               timeouts=None if result is None else result.extra["timeouts"])}


def part_learn_batch(options, svc, rows=1596):
    svc.configure(reset=True, latency=0.0, job_failure=0.01, seed=4)
    return {"learn_batch": dict(_counts(*_one_batch(options, svc, rows), rows), rows=rows)}


def part_cost():
    """estimate_cost against the formulas, counted here from the payloads that would be submitted."""
    from qiskit import qasm2

    from hqflow.backends import CircuitBatch, get_backend
    from hqflow.backends.azure.translate import FORMATS, Payloads

    ok = True
    for k in range(5):
        t = _template(3, 10 + 3 * k, seed=10 + k)
        batch = CircuitBatch.make(t, np.zeros((4, t.n_inputs)), np.zeros(t.n_weights), shots=1000)
        for target, kind in (("ionq.qpu.aria-1", "ionq"), ("quantinuum.qpu.h2-1", "qasm")):
            cost = get_backend(f"azure:{target}").estimate_cost(batch)
            rows = Payloads(t, FORMATS[kind]).rows(batch)
            want = 0.0
            for row in rows:
                for body in row:
                    if kind == "ionq":
                        gates = json.loads(body)["circuit"]
                        n2 = sum(1 if len(g.get("targets", [])) + len(g.get("controls", [])) == 2 else
                                 6 * (len(g.get("targets", [])) + len(g.get("controls", [])) - 2)
                                 for g in gates if len(g.get("targets", [])) + len(g.get("controls", [])) > 1)
                        n1 = sum(1 for g in gates if len(g.get("targets", [])) + len(g.get("controls", [])) == 1)
                        want += max(1000 * (0.00022 * n1 + 0.000975 * n2), 97.5)  # Azure's pricing page, Aria
                    else:
                        qc = qasm2.loads(body.decode(), custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
                        nm = sum(1 for i in qc.data if i.operation.name == "measure")
                        n1 = sum(1 for i in qc.data if i.operation.num_qubits == 1 and i.operation.name != "measure")
                        n2 = sum(1 for i in qc.data if i.operation.num_qubits > 1)
                        want += 5 + 1000 * (n1 + 10 * n2 + 5 * nm) / 5000
            ok = ok and abs(cost.amount - want) <= 1e-9 * max(1.0, want)
    return {"cost_matches_formula": bool(ok)}


def coin_actor(step):
    import hqflow as hq
    from hqflow.backends import CircuitBatch
    from hqflow.ir import Circuit

    c = Circuit(1, name="coin")
    x = c.inputs("x", 1)
    c.ry(x[0], 0)
    t = c.build(observables=["Z0"])
    res = hq.get_client().submit("qpu", CircuitBatch.make(t, [[0.1 * step]], shots=100, seed=int(step))).result()
    return {"y": float(res.values[0, 0])}


def part_budget(options, svc, steps=8):
    import hqflow as hq

    pipe = hq.Pipeline("budget")
    pipe.input("step", "scalar")
    pipe.preprocess(coin_actor, outputs={"y": "scalar"}, job_backends=("qpu",), name="actor")
    pipe.output("actor.y")
    # quantinuum.sim.h2-1e is priced in EHQC: 5 + 100 * (1 + 5) / 5000 = 5.12 per job; the budget allows half
    backend = ("azure:quantinuum.sim.h2-1e", options)
    per_job = 5 + 100 * (1 + 5) / 5000
    budget = per_job * steps / 2
    svc.configure(reset=True, latency=0.0)
    try:
        hq.run(pipe.build(), [{"step": i} for i in range(steps)], backends={"qpu": backend}, executor="sync",
               budget=budget)
        return {"budget_respected": False, "budget_note": "the run was not stopped"}
    except hq.RunFailed as exc:
        partial, message = exc.result, str(exc)
    spend = partial.extra["spend"]
    ok = (spend <= budget + 1e-9 and len(partial.outputs) == steps // 2 and "budget reached" in message
          and svc.stats()["jobs"] == steps // 2)
    return {"budget_respected": bool(ok), "budget": budget, "budget_spend": spend,
            "budget_steps_kept": len(partial.outputs), "budget_service_jobs": svc.stats()["jobs"]}


PACKED_ROWS, PACKED_BINDINGS = 64, 16


def _packed_data():
    from hqflow.ir import Circuit

    c = Circuit(2, name="packed")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).rx(x[1], 1).cx(0, 1).rz(w[0], 1)
    t = c.build(observables=["Z0", "X1", "Z0 Z1"])  # two measurement groups
    return t, np.random.default_rng(25).uniform(-np.pi, np.pi, (PACKED_ROWS, 2)), [0.4]


def packed_actor(step):
    """The 64-row batch through the run's pool (module level: fragments are held by reference)."""
    import hqflow as hq
    from hqflow.backends import CircuitBatch

    t, x, w = _packed_data()
    res = hq.get_client().submit("qpu", CircuitBatch.make(t, x, w, shots=1000, seed=int(step))).result()
    return {"values": res.values, "stderr": res.stderr}


def _packed_run(backend):
    import hqflow as hq

    pipe = hq.Pipeline("packed")
    pipe.input("step", "scalar")
    pipe.preprocess(packed_actor, outputs={"values": "array", "stderr": "array"}, job_backends=("qpu",),
                    name="actor")
    pipe.output("actor.values")
    pipe.output("actor.stderr")
    out = hq.run(pipe.build(), [{"step": 0}], backends={"qpu": [backend]}, executor="local",
                 max_retries=10).outputs[0]
    return out["values"], out["stderr"]


def _within_5_sigma(values, exact, shots):
    """Per value, within 5 sigma of the exact one by the exact binomial tail: each observable is one Pauli
    product, so a value is ``1 - 2k / shots`` with ``k ~ Binomial(shots, (1 - exact) / 2)``; within when its
    two-sided tail probability is at least the normal's beyond 5 sigma (5.7e-7), which, unlike the normal
    approximation, judges values near +-1 (where one shot moves a value by many sigma) fairly."""
    from scipy.stats import binom

    k, p = np.rint((1 - values) / 2 * shots), np.clip((1 - exact) / 2, 0.0, 1.0)
    return 2 * np.minimum(binom.cdf(k, shots, p), binom.sf(k - 1, shots, p)) >= 5.733e-7


def part_packed(options, svc):
    """Part 10: the 64-row batch packed 16 bindings to a service job, clean and under faults, and on IonQ."""
    from hqflow.backends import CircuitBatch, get_backend
    from hqflow.backends.azure.translate import measurement_groups

    t0 = time.perf_counter()
    t, x, w = _packed_data()
    exact = get_backend("reference").run_checked(CircuitBatch.make(t, x, w)).values
    quil = ("azure:rigetti.sim.qvm", dict(options, input_format="quil", max_bindings=PACKED_BINDINGS))
    svc.configure(reset=True, latency=0.0)
    values, _ = _packed_run(quil)
    clean = svc.stats()["jobs"]
    within = [_within_5_sigma(values, exact, 1000)]
    svc.configure(reset=True, latency=0.02, job_failure=0.2, http_503=0.05, drop_connection=0.02, seed=10)
    values, _ = _packed_run(quil)
    stats = svc.stats()
    within.append(_within_5_sigma(values, exact, 1000))
    svc.configure(reset=True, latency=0.0)
    _packed_run(("azure:ionq.simulator", options))
    return {"packed_service_jobs": clean,
            "packed_expected_service_jobs": len(measurement_groups(t)) * -(-PACKED_ROWS // PACKED_BINDINGS),
            "packed_within_5_sigma": float(np.mean(np.concatenate(within))),
            "packed_lost": PACKED_ROWS - int(np.isfinite(values).all(axis=1).sum()),
            "packed_duplicated": stats["duplicated"], "packed_reruns": stats["reruns"],
            "packed_faulty_service_jobs": stats["jobs"], "packed_failed_service_jobs": stats["by_status"].get("Failed", 0),
            "packed_ionq_service_jobs": svc.stats()["jobs"], "packed_seconds": round(time.perf_counter() - t0, 1)}


def part_rl(options, svc, episodes=10, extra=(), env_name="cartpole"):
    svc.configure(reset=True, latency=0.0)
    env = dict(os.environ, AZURE_QUANTUM_API_KEY=options["key"])
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        args = [sys.executable, "-m", "hqflow.cli", "train", env_name, "--backend", "azure:ionq.simulator",
                "--episodes", str(episodes), "--run-dir", run_dir, "--json", *extra]
        for k in ("subscription_id", "resource_group", "name", "location", "endpoint"):
            args += ["--backend-opt", f"{k}={options[k]}"]
        t0 = time.perf_counter()
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            return {"rl_updates": 0, "rl_error": proc.stderr.strip().splitlines()[-1:]}
        lines = Path(run_dir, "metrics.jsonl").read_text().splitlines()
        trace = subprocess.run([sys.executable, "-m", "hqflow.cli", "trace", run_dir], capture_output=True, text=True)
        spans = json.loads(Path(run_dir, "spans.json").read_text())["spans"]
        azure_jobs = sum(1 for s in spans if s["resource"]["kind"] == "qpu" and s["resource"]["name"].startswith("azure:"))
        key = options["key"].encode()
        leaked = (any(key in p.read_bytes() for p in Path(run_dir).rglob("*") if p.is_file())
                  or any(options["key"] in out for out in (proc.stdout, proc.stderr, trace.stdout, trace.stderr)))
    return {"rl_updates": len(lines), "rl_seconds": round(seconds, 1), "rl_service_jobs": svc.stats()["jobs"],
            "trace_jobs": azure_jobs, "trace_shows_azure": "qpu:azure:ionq.simulator" in trace.stdout,
            "key_leaked": leaked}


def main(argv=None, service=None) -> int:
    """``service``: a running ``LoopbackService`` to use (the test suite's own, on its Azurite) instead of
    starting Azurite and a service of this run's own."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer RL episodes, a smaller learn batch")
    ap.add_argument("--fault-rows", type=int, default=500, help="rows of the fault part (default 500)")
    ap.add_argument("--rl-episodes", type=int, default=None, help="episodes of the RL part (default 10; --quick 2)")
    ap.add_argument("--rate-rows", type=int, default=128, help="rows of each failure rate's batch (default 128)")
    ap.add_argument("--rl-env", default="cartpole", help="the RL part's environment (default cartpole)")
    ap.add_argument("--learn-rows", type=int, default=None,
                    help="rows of the learn batch part (default 1596, a training run's; --quick 400)")
    args = ap.parse_args(argv)
    if args.fault_rows < FAULT_CHUNK or args.fault_rows % FAULT_CHUNK:
        ap.error(f"--fault-rows must be a positive multiple of {FAULT_CHUNK}")
    if args.rl_episodes is not None and args.rl_episodes < 1:
        ap.error("--rl-episodes must be at least 1")
    if args.learn_rows is not None and args.learn_rows < 1:
        ap.error("--learn-rows must be at least 1")
    if args.rate_rows < 1:
        ap.error("--rate-rows must be at least 1")

    from hqflow.backends.azure.azurite import Azurite, ensure_installed
    from hqflow.backends.azure.loopback import LoopbackService

    exe = ensure_installed(str(ROOT)) if service is None else None
    if service is None and exe is None:
        why = "node and npm are needed for Azurite (npm ci installs it from package.json)"
        print(why)
        print(json.dumps({"skipped": why}))
        return 0
    figures: dict = {}
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if service is None:
            azurite = stack.enter_context(Azurite.start(exe))
            service = stack.enter_context(LoopbackService.start(storage=azurite.connection_string,
                                                                key="bench-" + os.urandom(8).hex()))
        svc = service
        options = svc.workspace_options()
        figures.update(part_batch(options, svc))
        figures.update(part_faults(options, svc, rows=args.fault_rows))
        figures.update(part_cost())
        figures.update(part_budget(options, svc))
        figures.update(part_rates(options, svc, rows=args.rate_rows))
        figures.update(part_long_queue(options, svc))
        figures.update(part_learn_batch(options, svc, rows=args.learn_rows or (400 if args.quick else 1596)))
        # Every environment step is one job to act and one per parameter-shift row, 1 + 2 x (inputs +
        # weights): 58 with one layer (186 with the default five), so the RL part runs one layer.
        episodes = args.rl_episodes or (2 if args.quick else 10)
        rl = ["--set", "n_layers=1", "--set", f"batch_episodes={min(episodes, 10)}"]
        figures.update(part_rl(options, svc, episodes=episodes, extra=rl, env_name=args.rl_env))
        figures["rl_args"] = " ".join([args.rl_env, *rl])
        figures.update(part_packed(options, svc))
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"{'figure':<24} {'value':>12}  target")
    targets = {"batch_seconds_64": "<= 1.0", "lost": "0", "duplicated_jobs": "0", "within_5_sigma": "1.0",
               "cost_matches_formula": "true", "budget_respected": "true", "rl_updates": ">= 1",
               "rates": "cancelled, left, reruns, lost: 0", "long_queue": "created 4, cancelled 0",
               "learn_batch": "completes; cancelled, left, lost: 0", "packed_service_jobs": "8",
               "packed_within_5_sigma": "1.0", "packed_lost": "0", "packed_duplicated": "0", "packed_reruns": "0",
               "packed_ionq_service_jobs": "128"}
    for k, v in figures.items():
        if isinstance(v, dict):
            print(f"{k:<24} {targets.get(k, '')}")
            for name, x in v.items():
                print(f"  {name:<22} {json.dumps(x)}")
            continue
        print(f"{k:<24} {str(v):>12}  {targets.get(k, '')}")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
