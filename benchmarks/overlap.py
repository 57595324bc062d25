"""Does the scheduler keep classical and quantum resources busy at once?

A hybrid loop with N micro-batches (``hqflow.workloads.synthetic``): an
``emulated-qpu`` job of about Q ms per micro-batch, then a learner step doing
real torch work (a chain of matrix products) of about C ms, whose weights flow
back to the circuit with ``max_staleness=2`` (``--staleness``). For C/Q in {0.25, 1, 4}, in one run:

* the sequential loop a user writes: submit, wait, learn, repeat;
* hqflow ``local`` (threads) and ``ray`` (Ray tasks and a backend actor);
* the lower bound ``N * max(C, Q) + min(C, Q)``, with C the learner step as
  measured in the sequential loop of the same run and Q the modelled job time
  (what the QPU itself takes, without any submission overhead).

Then QPU-bound scaling: the same loop with a trivial learner on k = 1, 2, 4, 8
emulated QPUs of equal latency. Torch uses one thread throughout, so every
variant does the same classical work. This VM's speed drifts, so each ratio
runs ``--rounds`` times (3; 1 with ``--quick``), the learner re-tuned each time,
and the median round is reported.

    python benchmarks/overlap.py [--quick] [--gantt DIR]

The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np
import torch

import hqflow as hq
from hqflow.backends import CircuitBatch
from hqflow.backends.emulated import EmulatedQPU
from hqflow.common.lanes import Lane
from hqflow.trace import Span, summary
from hqflow.workloads import synthetic

RATIOS = (0.25, 1.0, 4.0)
TARGETS = {"efficiency_local": 0.95, "efficiency_ray": 0.85, "speedup_vs_sequential_at_1": 1.85,
           "bottleneck_utilization": 0.95, "scaling_efficiency_k8": 0.90}


def sequential(cfg: synthetic.Config, stream: list[dict], q: float) -> tuple[float, list[Span], float, float]:
    """The loop a user writes by hand; returns makespan, spans, mean C and mean Q (seconds)."""
    backend = EmulatedQPU(per_job=q)
    template = synthetic.circuit(cfg.n_qubits)
    weights = np.array([0.1 * (k + 1) for k in range(cfg.n_qubits)])
    spans, t0 = [], time.perf_counter()
    for step, item in enumerate(stream):
        a = time.perf_counter()
        values = backend.submit(CircuitBatch.make(template, item["x"], weights)).result().values
        b = time.perf_counter()
        weights = synthetic.learn(values, weights, cfg.matrix, cfg.repeats, cfg.lr)["weights"]
        c = time.perf_counter()
        spans += [Span("circuit", "execute", Lane("qpu", "emulated-qpu"), step, a - t0, b - t0),
                  Span("learn", "learn", Lane("cpu"), step, b - t0, c - t0)]
    backend.close()
    makespan = time.perf_counter() - t0
    mean = lambda kind: float(np.mean([s.seconds for s in spans if s.kind == kind]))  # noqa: E731
    return makespan, spans, mean("learn"), mean("execute")


def tune(cfg: synthetic.Config, target: float, q: float, stream: list[dict], rounds: int = 6) -> synthetic.Config:
    """Size the learner so its step takes ``target`` seconds (within 3%) *in the sequential loop*.

    Measured there, not back to back: a step that follows an idle wait for the QPU runs
    on a cooler CPU and takes longer, and that is the C the bound and the speedup need.
    """
    cfg = dataclasses.replace(cfg, repeats=synthetic.calibrate(target * 1e3, cfg.matrix))
    for _ in range(rounds):
        c = sequential(cfg, stream[:8], q)[2]
        if abs(c / target - 1) < 0.03:
            break
        cfg = dataclasses.replace(cfg, repeats=max(1, round(cfg.repeats * target / c)))
    return cfg


def learn_seconds(res: hq.RunResult) -> float:
    return float(np.mean([s.seconds for s in res.spans if s.kind == "learn"]))


def scheduled(cfg, stream, q: float, executor: str, k: int = 1) -> hq.RunResult:
    if executor == "ray":
        pool = [("emulated-qpu", {"per_job": q, "name": f"qpu{j}"}) for j in range(k)]
    else:
        pool = [EmulatedQPU(per_job=q, name=f"qpu{j}") for j in range(k)]
    return hq.run(synthetic.build_graph(cfg), stream, backends={"qpu": pool}, executor=executor, ray_num_cpus=2)


def bottleneck_util(res: hq.RunResult, c: float, q: float) -> float:
    util = {r: v["utilization"] for r, v in summary(res.spans)["resources"].items()}
    quantum = max(v for r, v in util.items() if r.startswith("qpu"))
    classical = util.get("cpu", 0.0)
    if abs(c - q) / max(c, q) < 0.2:  # balanced: either side is the bottleneck
        return max(quantum, classical)
    return classical if c > q else quantum


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="Q = 20 ms (under a minute)")
    ap.add_argument("--q-ms", type=float, default=None, help="QPU latency per job in ms (default 50; quick 20)")
    ap.add_argument("--steps", type=int, default=50, help="micro-batches N (default 50)")
    ap.add_argument("--no-ray", action="store_true", help="skip the ray executor")
    ap.add_argument("--staleness", type=int, default=2, help="max_staleness of the learner -> circuit weights (default 2)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per ratio, median reported (default 3; quick 1)")
    ap.add_argument("--gantt", metavar="DIR", help="write Gantt PNGs of the sequential and local runs at C = Q")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    q = (args.q_ms or (20.0 if args.quick else 50.0)) / 1e3
    n = args.steps
    base = synthetic.Config(staleness=args.staleness, backend="qpu", matrix=128, repeats=1)
    stream = synthetic.stream(n, base)

    def bound(c: float) -> float:  # the makespan with no overhead at all: Q as modelled
        return n * max(c, q) + min(c, q)

    # C is the learner step as measured in the sequential loop; where it ran faster inside a run
    # (machine noise), that run's own, smaller C keeps the bound a bound.
    rounds = args.rounds or (1 if args.quick else 3)
    cases = []
    for ratio in RATIOS:  # the sequential loop and local first: Ray's processes stay out of their way
        trials = []
        for _ in range(rounds):  # this VM's speed drifts: re-tune each round, report the median round
            cfg = tune(base, ratio * q, q, stream)
            seq, seq_spans, c, q_meas = sequential(cfg, stream, q)
            local = scheduled(cfg, stream, q, "local")
            eff = bound(min(c, learn_seconds(local))) / local.seconds
            trials.append((eff, cfg, seq, seq_spans, c, q_meas, local))
        trials.sort(key=lambda t: t[0])
        cases.append((ratio, *trials[len(trials) // 2]))

    rows, figures = [], {"N": n, "Q_ms": q * 1e3, "rounds": rounds, "staleness": args.staleness}
    eff_local, eff_ray, utils, seq_at_1 = [], [], [], None
    scale_n = 64
    scale_cfg = dataclasses.replace(base, staleness=scale_n, repeats=1, matrix=8)
    scale_stream = synthetic.stream(scale_n, scale_cfg)
    throughput = {}
    for k in (1, 2, 4, 8):
        res = scheduled(scale_cfg, scale_stream, q, "local", k=k)
        throughput[k] = scale_n / res.seconds
    scaling = {k: throughput[k] / (k * throughput[1]) for k in throughput}

    if not args.no_ray:  # start Ray and warm its workers outside the timed runs
        scheduled(base, stream[:6], q, "ray")
    for ratio, e_local, cfg, seq, seq_spans, c, q_meas, local in cases:
        ray, e_ray = None, None
        if not args.no_ray:  # the median of the rounds, as for local
            runs = sorted(((bound(min(c, learn_seconds(r))) / r.seconds, r)
                           for r in (scheduled(cfg, stream, q, "ray") for _ in range(rounds))), key=lambda t: t[0])
            e_ray, ray = runs[len(runs) // 2]
        u = bottleneck_util(local, c, q)
        eff_local.append(e_local)
        utils.append(u)
        if e_ray is not None:
            eff_ray.append(e_ray)
        if ratio == 1.0:
            seq_at_1 = seq / local.seconds
            if args.gantt:
                from hqflow.trace.export import draw_gantt

                draw_gantt(seq_spans, f"{args.gantt}/overlap_sequential.png", title="sequential loop, C = Q")
                draw_gantt(local.spans, f"{args.gantt}/overlap_local.png", title="hqflow local, C = Q")
        key = f"ratio_{ratio:g}"
        local_bound = bound(min(c, learn_seconds(local)))  # the bound the local efficiency uses
        figures.update({f"{key}_C_ms": c * 1e3, f"{key}_Q_ms": q_meas * 1e3, f"{key}_bound_s": local_bound,
                        f"{key}_sequential_s": seq, f"{key}_local_s": local.seconds,
                        f"{key}_ray_s": None if ray is None else ray.seconds,
                        f"{key}_efficiency_local": e_local, f"{key}_efficiency_ray": e_ray,
                        f"{key}_bottleneck_utilization": u})
        rows.append((ratio, c, q_meas, local_bound, seq, local.seconds, ray.seconds if ray else float("nan"), e_local,
                     e_ray if e_ray is not None else float("nan"), u))

    print(f"Overlap: N={n} micro-batches, Q={q * 1e3:.0f} ms per emulated-QPU job, learner = real torch work "
          f"(1 thread), max_staleness={args.staleness}")
    print(f"{'C/Q':>5}{'C ms':>8}{'Q ms':>8}{'bound s':>9}{'seq s':>8}{'local s':>9}{'ray s':>8}"
          f"{'eff local':>11}{'eff ray':>9}{'bottleneck util':>17}")
    for r in rows:
        print(f"{r[0]:>5g}{r[1] * 1e3:>8.1f}{r[2] * 1e3:>8.1f}{r[3]:>9.2f}{r[4]:>8.2f}{r[5]:>9.2f}{r[6]:>8.2f}"
              f"{r[7]:>11.3f}{r[8]:>9.3f}{r[9]:>16.1%}")
    print(f"QPU-bound scaling ({scale_n} micro-batches): " + ", ".join(
        f"k={k}: {throughput[k]:.1f}/s ({scaling[k]:.2f} of ideal)" for k in throughput))
    figures.update({f"throughput_k{k}": v for k, v in throughput.items()})
    figures.update({f"scaling_efficiency_k{k}": v for k, v in scaling.items()})
    figures.update({
        "efficiency_local": min(eff_local),
        "efficiency_ray": min(eff_ray) if eff_ray else None,
        "speedup_vs_sequential_at_1": seq_at_1,
        "bottleneck_utilization": min(utils),
    })
    met = {k: figures[k] is not None and figures[k] >= v for k, v in TARGETS.items()}
    print("targets: " + ", ".join(f"{k} {figures[k]:.3f} >= {v} {'ok' if met[k] else 'MISSED'}"
                                   if figures[k] is not None else f"{k} not run" for k, v in TARGETS.items()))
    figures["targets_met"] = all(met.values())
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
