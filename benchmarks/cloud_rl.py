"""RL on a paid cloud QPU: service jobs, shots and list price per episode, by gradient estimator and packing.

    python benchmarks/cloud_rl.py [--quick] [--seeds N] [--episodes 1000] [--latency 0.05] [--workers 2]
                                  [--variants baseline,ps_packed,spsa_packed,spsa_single]
                                  [--spsa-samples 2] [--spsa-epsilon 0.1] [--segment-updates 2]

REINFORCE on CartPole-v1 (the default 4-qubit, 5-layer policy: 92 circuit parameters), 10 environments
stepped together (autoreset) in one group, so each step round is one job, 10 episodes per update, under
``--distribution sync``: a run is then a function of its seed (shots are seeded per row), the same at any
latency and any packing. Each run is ``hqflow train`` in its own process, ``--workers`` at a time, on the
emulated QPU (over the compiled simulator, ``--latency`` seconds per service job) priced as IonQ Aria
(``price_as=ionq.qpu.aria-1``: one circuit per service job, list price at the run's shots, exact jobs at
1,000). The variants:

* ``baseline``: today: parameter shift, exact values, one circuit per service job. It learns in process
  (autograd is the exact parameter-shift gradient) and its service jobs are its circuits (186 per env
  step); a one-episode segment on the emulated QPU with one circuit per job checks that count
  (``baseline_segment_ok``).
* ``ps_packed``: parameter shift at 1,000 shots, a whole batch per service job.
* ``spsa_packed``: SPSA (``--spsa-samples`` directions shared by all rows, no centre row: 2k circuits per
  row) at 1,000 shots, packed.
* ``spsa_single``: SPSA at 1,000 shots, one circuit per service job. It learns exactly what
  ``spsa_packed`` learns: a segment of ``--segment-updates`` updates at one circuit per job must be
  bit-identical to spsa_packed's first updates (``packing_independent``); its jobs are its circuits.

Solved: the mean return of the last 10 episodes reaches 500 within ``--episodes`` episodes. With
``--quick`` (under 300 s on 2 cores): 3 seeds, 150 episodes (the jobs, shots and price per episode of early
learning; whether a variant solves is judged by the full run), no latency. At latency 0
``seconds_per_episode_at_50ms`` is modelled: service jobs x 0.05 s + the measured compute. The last line is
one JSON object.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ("baseline", "ps_packed", "spsa_packed", "spsa_single")
COMMON = ["cartpole", "--set", "batch_episodes=10", "--set", "num_envs=10", "--set", "groups=1", "--set",
          "autoreset=true", "--distribution", "sync", "--json", "--no-tensorboard", "--checkpoint-every", "1000"]
ARIA = "ionq.qpu.aria-1"


def _emulated(latency: float, per_job_rows: int | None) -> list[str]:
    opts = ["wrapped=compiled", f"per_job={latency}", f"price_as={ARIA}", "price_shots=1000"]
    if per_job_rows is not None:
        opts.append(f"max_circuits_per_job={per_job_rows}")
    return ["--backend", "emulated-qpu", *[a for o in opts for a in ("--backend-opt", o)]]


def command(variant: str, seed: int, episodes: int, args, latency: float, single: bool = False) -> list[str]:
    """The ``hqflow train`` arguments of one run (``single``: the one-circuit-per-job segment)."""
    cmd = [*COMMON, "--seed", str(seed), "--episodes", str(episodes)]
    if variant == "baseline":  # its segment: one episode on one env (186 single-circuit jobs a step add up fast)
        small = ["--set", "batch_episodes=1", "--set", "num_envs=1", "--episodes", "1"]
        return cmd + (_emulated(0.0, 1) + small if single else ["--backend", "compiled"])
    cmd += ["--shots", "1000"] + _emulated(latency, 1 if single else None)
    if variant.startswith("spsa"):
        cmd += ["--gradient", "spsa", "--spsa-samples", str(args.spsa_samples), "--spsa-epsilon",
                str(args.spsa_epsilon)]
    return cmd


def train(cmd: list[str], run_dir: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hqflow.cli", "train", *cmd, "--run-dir", run_dir],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1], "wall": time.perf_counter() - t0}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        out["rows"] = [json.loads(line) for line in f if line.strip()]
    out["wall"] = time.perf_counter() - t0
    return out


def per_step_figures() -> dict:
    """The baseline's circuits per env step, and Aria's list price of one circuit of the policy at 1,000 shots."""
    import numpy as np
    from hqflow.backends import CircuitBatch
    from hqflow.backends.azure.cost import list_price
    from hqflow.workloads.rl import reinforce, runner
    from hqflow.workloads.rl.policies import pqc_template

    cfg = reinforce.Config()
    circuits, parameters = runner.circuits_per_env_step("reinforce", cfg)
    template = pqc_template(4, cfg.n_layers)
    row = CircuitBatch.make(template, np.zeros((1, template.n_inputs)), np.zeros(template.n_weights))
    return {"circuits_per_step": circuits, "parameters": parameters,
            "usd_per_circuit": list_price(ARIA, row, shots=1000).amount}


def summarize(variant: str, runs: list[dict], episodes: int, base: dict, latency: float) -> dict:
    ok = [r for r in runs if "error" not in r]
    solved = sorted(r["episodes_to_solve"] for r in ok if r["episodes_to_solve"] is not None
                    and r["episodes_to_solve"] <= episodes)
    eps = sum(r["episodes"] for r in ok) or 1
    steps = sum(r["env_steps"] for r in ok)
    if variant == "baseline":  # in process: its service jobs are its circuits, one per job
        circuits = base["circuits_per_step"] * steps
        jobs, shots, usd = circuits, 0, circuits * base["usd_per_circuit"]
    else:
        circuits = sum(r.get("circuits", 0) for r in ok)
        jobs = circuits if variant == "spsa_single" else sum(r.get("service_jobs", 0) for r in ok)
        shots, usd = sum(r.get("shots", 0) for r in ok), sum(r.get("list_cost", 0.0) for r in ok)
    seconds = sum(r["seconds"] for r in ok)
    median = statistics.median([*solved, *[float("inf")] * (len(runs) - len(solved))]) if runs else float("inf")
    return {"solved": len(solved), "median_episodes": None if median == float("inf") else median,
            "service_jobs_per_episode": round(jobs / eps, 2), "circuits_per_episode": round(circuits / eps, 2),
            "service_jobs_per_step": round(jobs / max(1, steps), 3),
            "shots_per_episode": round(shots / eps), "usd_per_episode_aria": round(usd / eps, 2),
            "mean_episode_length": round(steps / eps, 1),
            "seconds_per_episode_at_50ms": round((jobs * 0.05 + (seconds if latency == 0 else 0)) / eps
                                                 if latency == 0 else seconds / eps, 3),
            "errors": [r["error"] for r in runs if "error" in r]}


def segments(args, folder: str, pool, runs: dict) -> dict:
    """The one-circuit-per-job segments: the baseline's count of service jobs, and SPSA's packing independence."""
    n = 10 * args.segment_updates
    out = {}
    jobs = {}
    if "baseline" in args.variants:
        jobs["baseline"] = pool.submit(train, command("baseline", 0, n, args, 0.0, single=True),
                                       os.path.join(folder, "seg-baseline"))
    if {"spsa_single", "spsa_packed"} & set(args.variants):
        jobs["spsa"] = pool.submit(train, command("spsa_single", 0, n, args, 0.0, single=True),
                                   os.path.join(folder, "seg-spsa"))
        jobs["spsa_packed"] = pool.submit(train, command("spsa_packed", 0, n, args, 0.0),
                                          os.path.join(folder, "seg-spsa-packed"))
    done = {k: f.result() for k, f in jobs.items()}
    if "baseline" in done:
        seg = done["baseline"]
        per_step = seg.get("circuits", 0) / max(1, seg.get("env_steps", 0))  # the actor may step past the batch
        out["baseline_segment_ok"] = ("error" not in seg and seg["service_jobs"] == seg["circuits"]
                                      and abs(per_step / runs["base"]["circuits_per_step"] - 1) < 0.05)
        out["baseline_segment"] = {k: seg.get(k) for k in ("service_jobs", "circuits", "env_steps", "error")}
    if "spsa" in done:
        one, packed = done["spsa"], done["spsa_packed"]
        same = ("error" not in one and "error" not in packed
                and [r["returns"] for r in one["rows"]] == [r["returns"] for r in packed["rows"]]
                and [r["shots"] for r in one["rows"]] == [r["shots"] for r in packed["rows"]])
        out["packing_independent"] = bool(same and one["service_jobs"] == one["circuits"])
        out["spsa_segment"] = {"single_jobs": one.get("service_jobs"), "packed_jobs": packed.get("service_jobs"),
                               "circuits": one.get("circuits"), "error": one.get("error") or packed.get("error")}
    return out


def table(figures: dict, variants: list[str]) -> None:
    cols = ("solved", "median_episodes", "service_jobs_per_episode", "shots_per_episode", "usd_per_episode_aria",
            "mean_episode_length")
    print(f"{'variant':<12}" + "".join(f"{c.replace('_per_episode', '/ep').replace('_aria', ''):>22}" for c in cols))
    for v in variants:
        print(f"{v:<12}" + "".join(f"{str(figures.get(f'{v}_{c}')):>22}" for c in cols))


def overall(figures: dict, variants: list[str], seeds: int) -> dict:
    need = 4 if seeds >= 5 else max(1, -(-2 * seeds // 3))  # "solving": 4 of 5 (2 of 3 with --quick)
    solving = [v for v in variants if figures.get(f"{v}_solved", 0) >= need]
    better = [v for v in solving if v != "baseline"]  # the variants that change something
    base_jobs = figures.get("baseline_service_jobs_per_episode")
    base_usd = figures.get("baseline_usd_per_episode_aria")
    packed = [figures[f"{v}_service_jobs_per_episode"] for v in ("ps_packed", "spsa_packed") if v in solving]
    out = {"solving_means": f"at least {need} of {seeds} seeds",
           "jobs_reduction_packed": round(base_jobs / min(packed), 1) if base_jobs and packed else None,
           "jobs_reduction_single": (round(base_jobs / figures["spsa_single_service_jobs_per_episode"], 1)
                                     if base_jobs and "spsa_single" in variants else None),
           # per env step: free of how long each variant's episodes are (a policy that does not learn has short ones)
           "jobs_reduction_single_per_step": (round(figures["baseline_service_jobs_per_step"]
                                                    / figures["spsa_single_service_jobs_per_step"], 1)
                                              if base_jobs and "spsa_single" in variants else None),
           "usd_reduction": (round(base_usd / min(figures[f"{v}_usd_per_episode_aria"] for v in better), 2)
                             if base_usd and better else None),
           "frugal_best_solved": max([figures.get(f"{v}_solved", 0) for v in ("spsa_packed", "spsa_single")
                                      if v in variants] or [0])}
    out["targets"] = {"jobs_reduction_packed_300": (out["jobs_reduction_packed"] or 0) >= 300,
                      "jobs_reduction_single_30": (out["jobs_reduction_single"] or 0) >= 30,
                      "usd_reduction_20": (out["usd_reduction"] or 0) >= 20,
                      "frugal_4_of_5": out["frugal_best_solved"] >= 4 and seeds >= 5}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 seeds, 150 episodes, no latency (under 300 s)")
    ap.add_argument("--seeds", type=int, help="seeds 0..N-1 (default 5, --quick 3)")
    ap.add_argument("--episodes", type=int, help="episode budget per run (default 1000, --quick 150)")
    ap.add_argument("--latency", type=float, help="seconds per service job (default 0.05, --quick 0)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs at a time (default: cores)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    ap.add_argument("--spsa-samples", type=int, default=2, help="SPSA directions (default 2)")
    ap.add_argument("--spsa-epsilon", type=float, default=0.1, help="SPSA perturbation (default 0.1)")
    ap.add_argument("--segment-updates", type=int, default=2, help="updates of each one-circuit-per-job segment")
    args = ap.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    if not args.variants or set(args.variants) - set(VARIANTS):
        ap.error(f"--variants takes names from {', '.join(VARIANTS)}")
    seeds = args.seeds or (3 if args.quick else 5)
    episodes = args.episodes or (150 if args.quick else 1000)
    latency = args.latency if args.latency is not None else (0.0 if args.quick else 0.05)
    if seeds < 1 or episodes < 1 or args.workers < 1 or latency < 0 or args.segment_updates < 1:
        ap.error("--seeds, --episodes, --workers and --segment-updates must be at least 1, --latency >= 0")
    t0 = time.perf_counter()
    base = per_step_figures()
    learners = [v for v in args.variants if v != "spsa_single"]
    if "spsa_single" in args.variants and "spsa_packed" not in learners:
        learners.append("spsa_packed")  # spsa_single learns what spsa_packed learns
    with tempfile.TemporaryDirectory() as folder, cf.ThreadPoolExecutor(args.workers) as pool:
        order = [(v, s) for v in ("ps_packed", "spsa_packed", "baseline") if v in learners for s in range(seeds)]
        futures = {(v, s): pool.submit(train, command(v, s, episodes, args, latency),
                                       os.path.join(folder, f"{v}-{s}")) for v, s in order}
        checks = segments(args, folder, pool, {"base": base})
        runs = {key: f.result() for key, f in futures.items()}
    figures: dict = {"seeds": seeds, "episodes_cap": episodes, "latency": latency, "spsa_samples": args.spsa_samples,
                     "spsa_epsilon": args.spsa_epsilon, "baseline_circuits_per_step": base["circuits_per_step"],
                     "aria_usd_per_circuit_1000_shots": round(base["usd_per_circuit"], 4)}
    for v in args.variants:
        source = "spsa_packed" if v == "spsa_single" else v
        mine = [runs[(source, s)] for s in range(seeds)]
        for k, value in summarize(v, mine, episodes, base, latency).items():
            figures[f"{v}_{k}"] = value
    if "baseline" in args.variants:
        figures["baseline_shots_per_episode_at_1000"] = round(figures["baseline_circuits_per_episode"] * 1000)
    figures.update(checks)
    figures.update(overall(figures, args.variants, seeds))
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    table(figures, args.variants)
    print(json.dumps(figures, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
