"""The main job's training figures: REINFORCE with the softmax-PQC policy on CartPole-v1.

Part 1, learning. The main-job configuration (``hqflow train cartpole``: the TFQ
tutorial's setup on the default compiled backend, ``sync`` distribution) for S
seeds. Per seed: episodes until the mean of the last 10 episode returns reaches
500 (budget 1000 episodes), wall-clock seconds to that point, environment steps
per second and circuit evaluations per second (the actor's rows plus the
learner's rows).

Part 2, overlap. REINFORCE whose circuit runs on an emulated cloud QPU
(``emulated-qpu`` over the compiled simulator, exact values, 50 ms of queue
latency per job, jobs' queue waits overlapping as a cloud service's do; two
device slots, so the learner's large gradient job does not hold up the actors'
small jobs). The
learner's gradient is one batched parameter-shift job. Wall-clock for the first
E episodes (default 100) under ``sync`` and under ``pipelined`` (staleness 1: the
next rollout starts while the learner works), summed over seeds 0..2; the speedup
is the ratio of seconds per 100 episodes. Stale parameters change the episodes'
lengths, so the ratio of environment steps per second is reported too. Whether staleness 1 changes episodes-to-solve is measured on the compiled
backend (part 3) rather than on the slow emulated QPU.

Part 3 (skipped with --quick): episodes to solve under ``pipelined`` staleness 1 on
the compiled backend, same seeds as part 1.

    python benchmarks/rl_cartpole.py [--quick] [--seeds S] [--plot docs/rl_cartpole.png]

The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time

import _curves
import numpy as np
from hqflow.backends import register_backend
from hqflow.backends.emulated import EmulatedQPU
from hqflow.engine.distribution import Pipelined
from hqflow.workloads.rl import reinforce, runner

_QPU: dict = {}


def _shared_qpu(suffix=None, **options):
    """One emulated QPU per process, shared by every policy copy (actors and learner), like one cloud device."""
    if "qpu" not in _QPU:
        _QPU["qpu"] = EmulatedQPU("compiled", queue_wait=0.05, max_in_flight=2, name="qpu-50ms")
    return _QPU["qpu"]


def seed_figures(out: dict) -> dict:
    solved = out["episodes_to_solve"]
    return {"seed": out["config"]["seed"], "solved": solved is not None, "episodes_to_solve": solved,
            "seconds": round(out["seconds"], 3), "env_steps_per_s": round(out["env_steps_per_s"], 1),
            "circuits_per_s": round(out["circuit_evals_per_s"], 1), "episodes": len(out["returns"])}


def plot(curves: list, path: str, budget: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    _curves.draw(ax, curves, 10, budget, 500, "mean return of the last 10 episodes",
                 "REINFORCE, softmax-PQC (4 qubits, 5 layers), CartPole-v1")
    _curves.save(fig, path, "grey: each seed, until it stops at 500; the mean carries a stopped seed's last value")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 seeds, 50 emulated-QPU episodes, no part 3 (< 60 s)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds 0..S-1 (default 10; quick 2)")
    ap.add_argument("--episodes", type=int, default=1000, help="episode budget per seed (default 1000)")
    ap.add_argument("--overlap-episodes", type=int, default=None, help="episodes timed on the emulated QPU (100)")
    ap.add_argument("--overlap-seeds", type=int, default=None, help="seeds timed on the emulated QPU (3; quick 1)")
    ap.add_argument("--plot", metavar="PNG", help="write the learning curves over the seeds here")
    args = ap.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 10)
    overlap_episodes = args.overlap_episodes or (50 if args.quick else 100)
    if seeds < 1 or args.episodes < 10 or overlap_episodes < 10:
        ap.error("need --seeds >= 1, --episodes >= 10 and --overlap-episodes >= 10")
    start = time.perf_counter()

    # ---- part 1: the main-job configuration over seeds
    print(f"part 1: REINFORCE, main-job config, {seeds} seeds, budget {args.episodes} episodes (sync, compiled)")
    print(f"{'seed':>4} {'solved':>7} {'episodes':>9} {'seconds':>8} {'env steps/s':>12} {'circuits/s':>11}")
    rows, curves = [], []
    for s in range(seeds):
        out = runner.train("reinforce", reinforce.Config(seed=s, max_episodes=args.episodes), "sync")
        row = seed_figures(out)
        rows.append(row)
        curves.append(out["returns"])
        print(f"{s:>4} {str(row['solved']):>7} {str(row['episodes_to_solve'] or '-'):>9} {row['seconds']:>8.2f} "
              f"{row['env_steps_per_s']:>12,.0f} {row['circuits_per_s']:>11,.0f}", flush=True)
    solved = [r for r in rows if r["solved"]]
    figures = {"seeds": seeds, "episode_budget": args.episodes, "solved": len(solved),
               "median_episodes_to_solve": statistics.median(r["episodes_to_solve"] for r in solved) if solved else None,
               "median_seconds_to_solve": round(statistics.median(r["seconds"] for r in solved), 3) if solved else None,
               "env_steps_per_s": round(statistics.median(r["env_steps_per_s"] for r in rows), 1),
               "circuits_per_s": round(statistics.median(r["circuits_per_s"] for r in rows), 1),
               "per_seed": rows}
    if args.plot:
        plot(curves, args.plot, args.episodes)
        print(f"wrote {args.plot}")

    # ---- part 2: the overlap on an emulated cloud QPU
    register_backend("qpu-50ms", _shared_qpu, listed=False)
    oseeds = args.overlap_seeds or (1 if args.quick else 3)
    print(f"\npart 2: REINFORCE on an emulated QPU (50 ms queue latency per job, exact), first {overlap_episodes} "
          f"episodes, seeds 0..{oseeds - 1}")
    # warm-up (not timed): compiles the circuit programs and starts the emulated QPU's threads
    # the actor as before issue 11 (one group of 10 envs, fresh episodes): this part measures what
    # pipelined distribution alone hides; benchmarks/rl_qpu.py measures the groups and autoreset
    warm = reinforce.Config(seed=0, backend="qpu-50ms", max_episodes=10, stop_when_solved=False, groups=1,
                            num_envs=10, autoreset=False)
    runner.train("reinforce", warm, "sync")
    totals = {"sync": [0.0, 0, 0], "pipelined": [0.0, 0, 0]}  # seconds, episodes, env steps
    for s in range(oseeds):
        cfg = dataclasses.replace(warm, seed=s, max_episodes=overlap_episodes)
        for name, dist in (("sync", "sync"), ("pipelined", Pipelined(staleness=1))):
            out = runner.train("reinforce", cfg, dist)
            t = totals[name]
            t[0], t[1], t[2] = t[0] + out["seconds"], t[1] + len(out["returns"]), t[2] + out["env_steps"]
            print(f"  seed {s} {name:<10} {out['seconds']:7.2f} s  {out['env_steps']:6d} env steps  "
                  f"mean return {np.mean(out['returns']):.1f}", flush=True)
    for name, (secs, eps, steps) in totals.items():
        figures[f"{name}_seconds_per_100_episodes_emulated_qpu"] = round(secs * 100 / eps, 3)
        figures[f"{name}_env_steps_per_s_emulated_qpu"] = round(steps / secs, 1)
    figures["pipelined_speedup_emulated_qpu"] = round(
        figures["sync_seconds_per_100_episodes_emulated_qpu"] / figures["pipelined_seconds_per_100_episodes_emulated_qpu"], 3)
    figures["pipelined_env_steps_per_s_ratio_emulated_qpu"] = round(
        figures["pipelined_env_steps_per_s_emulated_qpu"] / figures["sync_env_steps_per_s_emulated_qpu"], 3)
    print(f"  per 100 episodes: sync {figures['sync_seconds_per_100_episodes_emulated_qpu']:.2f} s, pipelined "
          f"{figures['pipelined_seconds_per_100_episodes_emulated_qpu']:.2f} s: speedup "
          f"x{figures['pipelined_speedup_emulated_qpu']:.2f} (target >= 1.8); env steps/s ratio "
          f"x{figures['pipelined_env_steps_per_s_ratio_emulated_qpu']:.2f} (the two runs' episodes differ in length)")

    # ---- part 3: does staleness 1 change learning? (compiled backend, same seeds)
    if not args.quick:
        print(f"\npart 3: REINFORCE pipelined (staleness 1) on the compiled backend, {seeds} seeds")
        prow = []
        for s in range(seeds):
            out = runner.train("reinforce", reinforce.Config(seed=s, max_episodes=args.episodes), Pipelined(staleness=1))
            prow.append(seed_figures(out))
            print(f"  seed {s}: {'solved at ' + str(out['episodes_to_solve']) if out['episodes_to_solve'] else 'not solved'}"
                  f" in {out['seconds']:.2f} s", flush=True)
        psolved = [r for r in prow if r["solved"]]
        figures["pipelined_solved"] = len(psolved)
        figures["pipelined_median_episodes_to_solve"] = (
            statistics.median(r["episodes_to_solve"] for r in psolved) if psolved else None)

    figures["targets"] = {"solved_ge_8_of_10": len(solved) >= 8 * seeds / 10,
                          "median_seconds_le_20": bool(solved) and figures["median_seconds_to_solve"] <= 20,
                          "pipelined_speedup_ge_1.8": figures["pipelined_speedup_emulated_qpu"] >= 1.8}
    figures["total_s"] = round(time.perf_counter() - start, 1)
    print(f"\nsolved {len(solved)}/{seeds}; median episodes {figures['median_episodes_to_solve']}, median seconds "
          f"{figures['median_seconds_to_solve']}; total {figures['total_s']} s")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
