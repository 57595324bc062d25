"""DQN with the Skolik et al. Q-value PQC: CartPole-v1 and FrozenLake 4x4 (not slippery), over seeds.

Per seed: episodes until solved (CartPole: mean return of the last 10 episodes reaching
500, budget 2000 episodes; FrozenLake: all of the last 100 episodes reaching the goal,
budget 1000 episodes), seconds, environment steps per second. Default configuration of
``hqflow.workloads.rl.dqn`` (``hqflow train cartpole --algo dqn``), compiled backend.

    python benchmarks/rl_dqn.py [--quick] [--seeds S] [--envs frozenlake,cartpole] [--plot docs/rl_dqn.png]

The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import _curves
from hqflow.workloads.rl import dqn, runner

BUDGET = {"cartpole": 2000, "frozenlake": 1000}
TARGET = {"cartpole": 6, "frozenlake": 8}  # seeds of 10 that must solve


def plot(curves: dict, path: str, budgets: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 3.8), squeeze=False)
    for ax, (env, runs) in zip(axes[0], curves.items()):
        if env == "cartpole":
            _curves.draw(ax, runs, 10, budgets[env], 500, "mean return of the last 10 episodes",
                         "DQN, Q-value PQC (4 qubits, 5 layers), CartPole-v1")
        else:
            _curves.draw(ax, runs, 100, budgets[env], 1.0, "goal reached, share of the last 100 episodes",
                         "DQN, Q-value PQC (4 qubits, 5 layers), FrozenLake 4x4")
    _curves.save(fig, path, "grey: each seed, until it is solved; the mean carries a stopped seed's last value")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="FrozenLake, 1 seed, 150 episodes (< 60 s)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds 0..S-1 (default 10)")
    ap.add_argument("--envs", default="frozenlake,cartpole", help="comma-separated subset of cartpole,frozenlake")
    ap.add_argument("--budget", type=int, default=None, help="episode budget (default: 2000 cartpole, 1000 frozenlake)")
    ap.add_argument("--plot", metavar="PNG", help="write the learning curves over the seeds here")
    args = ap.parse_args(argv)
    envs = ["frozenlake"] if args.quick else [e.strip() for e in args.envs.split(",") if e.strip()]
    if any(e not in BUDGET for e in envs):
        ap.error(f"unknown env in {envs}; known: {', '.join(BUDGET)}")
    seeds = args.seeds or (1 if args.quick else 10)
    start = time.perf_counter()
    figures: dict = {"seeds": seeds}
    curves: dict = {}
    for env in envs:
        budget = args.budget or (150 if args.quick else BUDGET[env])
        print(f"DQN on {env}: {seeds} seeds, budget {budget} episodes")
        print(f"{'seed':>4} {'solved':>7} {'episodes':>9} {'seconds':>8} {'env steps/s':>12}")
        rows, curves[env] = [], []
        for s in range(seeds):
            out = runner.train("dqn", dqn.Config(env=env, seed=s, max_episodes=budget), "sync")
            solved = out["episodes_to_solve"]
            curves[env].append(out["returns"])
            rows.append({"seed": s, "solved": solved is not None, "episodes_to_solve": solved,
                         "seconds": round(out["seconds"], 2), "env_steps_per_s": round(out["env_steps_per_s"], 1)})
            print(f"{s:>4} {solved is not None!s:>7} {solved or '-'!s:>9} {out['seconds']:>8.1f} "
                  f"{out['env_steps_per_s']:>12,.0f}", flush=True)
        ok = [r for r in rows if r["solved"]]
        figures[f"{env}_budget"] = budget
        figures[f"{env}_solved"] = len(ok)
        figures[f"{env}_median_episodes_to_solve"] = statistics.median(r["episodes_to_solve"] for r in ok) if ok else None
        figures[f"{env}_median_seconds"] = statistics.median(r["seconds"] for r in rows)
        figures[f"{env}_per_seed"] = rows
        if not args.quick and seeds == 10:
            figures[f"{env}_target_met"] = len(ok) >= TARGET[env]
        print(f"  solved {len(ok)}/{seeds}; median episodes {figures[f'{env}_median_episodes_to_solve']}\n")
    if args.plot:
        plot(curves, args.plot, {env: figures[f"{env}_budget"] for env in envs})
        print(f"wrote {args.plot}")
    figures["total_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
