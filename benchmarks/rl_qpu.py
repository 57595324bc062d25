"""RL on an emulated QPU through the scheduler: groups, full jobs, and a pool that learns from failures.

Part 1, throughput. REINFORCE on CartPole-v1 whose policy circuit runs on ``emulated-qpu``
(over the compiled simulator, exact values, 50 ms per job on each of 2 device slots):

* old: 10 environments, one group, fresh episodes every update (jobs shrink as episodes end);
* new: the defaults this issue chose for a job backend (one group per device slot, a
  batch's worth of environments per group, autoreset, and the ``auto`` distribution:
  ``pipelined`` with staleness 1, so the learner overlaps the next rollout).

The old run uses ``sync`` distribution. Both have the same seeds and episode budget;
figures are env steps/s (the steps the environments ran) and the QPU device slots'
utilization (busy slot-seconds over slots x makespan, from the trace). With autoreset,
the episodes still running when the run ends were stepped but not learned from; the
steps of the episodes the learner got, per second, are reported beside.

Part 2, faults. The same training (small) on a pool of two emulated QPUs, one failing 20%
of its jobs, against a pool of two healthy ones: lost and duplicated updates (metrics and
spans) and whether the final parameters are bit-identical (staleness 0, exact values).

Part 3, the pool's choices (an execute graph, one job in flight): the share of jobs after
the first 10 that go to the fast member of a 10 ms / 100 ms pair (slow one listed first),
and the share of all jobs that a member failing every job gets.

Part 4, the local simulator: REINFORCE on ``compiled`` with G = 1 and the forward pass in
process, against the defaults (on an in-process backend they resolve to the same), env
steps/s ratio over the same seeds.

    python benchmarks/rl_qpu.py [--quick] [--gantt docs/rl_qpu_gantt.png]

The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

import hqflow as hq
from hqflow.ir import Circuit
from hqflow.trace import makespan
from hqflow.workloads.rl import reinforce, runner


def qpu(per_job=0.05, slots=2, name="qpu-50ms", **faults):
    return ("emulated-qpu", dict(wrapped="compiled", per_job=per_job, max_in_flight=slots, name=name, **faults))


def device_busy(spans, resource: str, slots: int) -> float:
    """Busy slot-seconds of the pool's device slots over slots x the run's makespan.

    A device slot works while a job is on it; jobs wait in the QPU's queue only while every
    slot is taken (the emulated QPU, like a cloud device, starts a queued job as soon as a
    slot frees). So with n jobs in flight, min(n, slots) slots are busy: the integral of that
    over the run, from the job spans. (Lanes, the pool's guess of which slot ran a job, are
    for drawing: a long job may be drawn on a slot other than the one it ran on.)
    """
    events = sorted([(s.start, 1) for s in spans if s.resource == resource] +
                    [(s.end, -1) for s in spans if s.resource == resource])
    busy, n, last = 0.0, 0, None
    for t, step in events:
        if last is not None:
            busy += min(n, slots) * (t - last)
        n, last = n + step, t
    return busy / (slots * makespan(spans))


def train(cfg, backends, distribution="auto", **options):
    return runner.train("reinforce", cfg, distribution, backends=backends, **options)


def part1(episodes: int, seeds: list[int]) -> dict:
    print(f"part 1: REINFORCE on an emulated QPU (50 ms per job, 2 device slots), {episodes} episodes, seeds {seeds}")
    print(f"{'run':<6} {'seed':>4} {'G':>2} {'envs':>4} {'autoreset':>9} {'steps run':>9} {'learned':>8} "
          f"{'seconds':>8} {'steps/s':>8} {'learned/s':>9} {'QPU busy':>8}")
    figures = {}
    # warm-up, not timed: compiles the circuit programs
    train(reinforce.Config(seed=0, backend="qpu", max_episodes=10, stop_when_solved=False), {"qpu": [qpu(0.0)]})
    for label, extra, dist in (("old", {"groups": 1, "num_envs": 10, "autoreset": False}, "sync"), ("new", {}, "auto")):
        steps = learned = secs = 0.0
        busy = []
        for s in seeds:
            cfg = reinforce.Config(seed=s, backend="qpu", max_episodes=episodes, stop_when_solved=False, **extra)
            out = train(cfg, {"qpu": [qpu()]}, dist)
            b = device_busy(out["spans"], "qpu:qpu", 2)
            steps, learned, secs = steps + out["env_steps_taken"], learned + out["env_steps"], secs + out["seconds"]
            busy.append(b)
            c = out["config"]
            print(f"{label:<6} {s:>4} {c['groups']:>2} {c['num_envs']:>4} {str(c['autoreset']):>9} "
                  f"{out['env_steps_taken']:>9} {out['env_steps']:>8} {out['seconds']:>8.2f} "
                  f"{out['env_steps_taken_per_s']:>8.1f} {out['env_steps_per_s']:>9.1f} {b:>8.2f}", flush=True)
        figures[f"env_steps_per_s_{label}"] = round(steps / secs, 1)
        figures[f"learned_steps_per_s_{label}"] = round(learned / secs, 1)
        figures[f"qpu_busy_{label}"] = round(float(np.mean(busy)), 3)
        if label == "new":
            figures["new_config"] = dict({k: out["config"][k] for k in ("groups", "num_envs", "autoreset")},
                                         distribution=out["distribution"])
            figures["last_new_run"] = out
    figures["qpu_speedup"] = round(figures["env_steps_per_s_new"] / figures["env_steps_per_s_old"], 3)
    figures["qpu_speedup_learned"] = round(figures["learned_steps_per_s_new"] / figures["learned_steps_per_s_old"], 3)
    figures["qpu_busy"] = figures.pop("qpu_busy_new")
    print(f"  env steps/s: old {figures['env_steps_per_s_old']}, new {figures['env_steps_per_s_new']}: "
          f"x{figures['qpu_speedup']} (target >= 3); QPU busy {figures['qpu_busy']} (target >= 0.85)")
    print(f"  steps of the episodes the learner got, per second: x{figures['qpu_speedup_learned']} (with autoreset "
          "the episodes still running when the run ends are not learned from)")
    return figures


def part2(episodes: int) -> dict:
    print(f"\npart 2: a pool of two emulated QPUs (10 ms per job), one failing 20% of jobs, {episodes} episodes")
    cfg = reinforce.Config(seed=3, backend="qpu", max_episodes=episodes, stop_when_solved=False, n_layers=2)
    healthy = [qpu(0.01, 1, "qpu-a", seed=1), qpu(0.01, 1, "qpu-b", seed=2)]
    flaky = [qpu(0.01, 1, "qpu-a", seed=1), qpu(0.01, 1, "qpu-b", seed=2, failure_rate=0.2)]
    good = train(cfg, {"qpu": healthy}, "sync")
    bad = train(cfg, {"qpu": flaky}, "sync", max_retries=10)
    expected = good["updates"]
    learned = [s.step for s in bad["spans"] if s.fragment == "learn" and s.kind == "learn" and s.outcome == "ok"]
    failed = [s for s in bad["spans"] if s.resource == "qpu:qpu" and s.outcome != "ok"]
    lost = expected - len(set(learned)) + abs(expected - bad["updates"])
    duplicated = len(learned) - len(set(learned))
    same = all(torch.equal(good["params"][k], bad["params"][k]) for k in good["params"])
    same = same and good["returns"] == bad["returns"]
    print(f"  updates {bad['updates']} of {expected}; failed job attempts {len(failed)} (all retried); lost {lost}, "
          f"duplicated {duplicated}; final parameters and returns identical to the healthy pool: {same}")
    return {"flaky_pool_lost": lost, "flaky_pool_duplicated": duplicated, "flaky_pool_same_result": bool(same),
            "flaky_pool_failed_attempts": len(failed)}


def part3(jobs: int) -> dict:
    print(f"\npart 3: the pool's choices, {jobs} jobs one at a time")
    c = Circuit(2, name="probe")
    w = c.weights("w", 1)
    c.ry(w[0], 0).cx(0, 1)
    pipe = hq.Pipeline("probe")
    pipe.input("w", "array")
    pipe.execute("circuit", c.build(observables=["Z0 Z1"]), backend="qpu")
    pipe.connect("input.w", "circuit.weights")
    pipe.output("circuit.values")
    graph = pipe.build(validate=False)
    stream = [{"w": np.array([0.1 * i])} for i in range(jobs)]
    pool = [qpu(0.1, 1, "slow"), qpu(0.01, 1, "fast")]
    res = hq.run(graph, stream, backends={"qpu": pool}, executor="sync")
    order = sorted((s for s in res.spans if s.resource == "qpu:qpu"), key=lambda s: s.start)[10:]
    fast = sum(1 for s in order if "fast" in s.row.name) / len(order)
    dead_pool = [qpu(0.01, 1, "dead", failure_rate=1.0), qpu(0.01, 1, "alive")]
    res = hq.run(graph, stream, backends={"qpu": dead_pool}, executor="sync", max_retries=5)
    spans = [s for s in res.spans if s.resource == "qpu:qpu"]
    dead = sum(1 for s in spans if "dead" in s.row.name) / len(spans)
    print(f"  fast member's share after the first 10 jobs: {fast:.3f} (target >= 0.85)")
    print(f"  a member failing every job: {dead:.3f} of all jobs (target <= 0.05); "
          f"{res.extra['retries']} retries, run completed with {len(res.outputs)} steps")
    return {"fast_member_share": round(fast, 3), "dead_member_share": round(dead, 3)}


def part4(episodes: int, seeds: list[int]) -> dict:
    print(f"\npart 4: REINFORCE on compiled, {episodes} episodes, seeds {seeds}: G=1 in process vs the defaults")
    totals = {"g1": [0, 0.0], "defaults": [0, 0.0]}
    runner.train("reinforce", reinforce.Config(seed=0, max_episodes=20, stop_when_solved=False))  # warm-up
    for s in seeds:
        for label, extra in (("g1", {"groups": 1, "autoreset": False}), ("defaults", {})):
            cfg = reinforce.Config(seed=s, max_episodes=episodes, stop_when_solved=False, **extra)
            out = runner.train("reinforce", cfg, "sync")
            totals[label][0] += out["env_steps"]
            totals[label][1] += out["seconds"]
    rate = {k: v[0] / v[1] for k, v in totals.items()}
    ratio = rate["g1"] / rate["defaults"]
    print(f"  env steps/s: G=1 {rate['g1']:.0f}, defaults {rate['defaults']:.0f}: ratio {ratio:.3f} (target <= 1.1)")
    return {"compiled_ratio": round(ratio, 3), "compiled_env_steps_per_s": round(rate["defaults"], 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer episodes and seeds (< 90 s)")
    ap.add_argument("--gantt", metavar="PNG", help="draw the Gantt chart of a short run on two emulated QPUs here")
    ap.add_argument("--episodes", type=int, default=None, help="part 1: episodes per run (default 150; quick 40)")
    ap.add_argument("--fault-episodes", type=int, default=None, help="part 2: episodes per run (default 60; quick 20)")
    ap.add_argument("--jobs", type=int, default=None, help="part 3: jobs per pool (default 200; quick 60)")
    ap.add_argument("--compiled-episodes", type=int, default=None,
                    help="part 4: episodes per run (default 300; quick 100)")
    args = ap.parse_args(argv)
    episodes = args.episodes or (40 if args.quick else 150)
    fault_episodes = args.fault_episodes or (20 if args.quick else 60)
    jobs = args.jobs or (60 if args.quick else 200)
    compiled_episodes = args.compiled_episodes or (100 if args.quick else 300)
    if min(episodes, fault_episodes, compiled_episodes) < 10 or jobs < 11:
        ap.error("need --episodes, --fault-episodes and --compiled-episodes >= 10 (one update) and --jobs >= 11 "
                 "(the fast member's share counts the jobs after the first 10)")
    start = time.perf_counter()
    torch.set_num_threads(1)
    figures = {}
    fig1 = part1(episodes, [0] if args.quick else [0, 1, 2])
    fig1.pop("last_new_run")
    figures.update(fig1)
    figures.update(part2(fault_episodes))
    figures.update(part3(jobs))
    figures.update(part4(compiled_episodes, [0, 1] if args.quick else [0, 1, 2, 3]))
    if args.gantt:
        gantt(args.gantt)
    figures["targets"] = {"qpu_speedup_ge_3": figures["qpu_speedup"] >= 3, "qpu_busy_ge_0.85": figures["qpu_busy"] >= 0.85,
                          "flaky_pool_lost_0": figures["flaky_pool_lost"] == 0,
                          "flaky_pool_duplicated_0": figures["flaky_pool_duplicated"] == 0,
                          "flaky_pool_same_result": figures["flaky_pool_same_result"],
                          "fast_member_share_ge_0.85": figures["fast_member_share"] >= 0.85,
                          "dead_member_share_le_0.05": figures["dead_member_share"] <= 0.05,
                          "compiled_ratio_le_1.1": figures["compiled_ratio"] <= 1.1}
    figures["total_s"] = round(time.perf_counter() - start, 1)
    print(f"\ntotal {figures['total_s']} s")
    print(json.dumps(figures))
    return 0


def gantt(path: str) -> None:
    """A short run on two emulated QPUs (one device slot each, one failing its 6th job): the actor's
    groups keep both QPUs busy, the learner has its own lane, the failed job is retried on the other QPU."""
    from hqflow.trace.export import draw_gantt

    pool = [qpu(0.05, 1, "qpu-a", seed=1, fail_jobs=(5,)), qpu(0.05, 1, "qpu-b", seed=2)]
    cfg = reinforce.Config(seed=0, backend="qpu", max_episodes=20, stop_when_solved=False)
    out = train(cfg, {"qpu": pool})
    spans = [s for s in out["spans"] if s.start < 3.0]
    draw_gantt(spans, path, "REINFORCE on two emulated QPUs: 2 env groups, learner on gpu/0, a failed job retried")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
