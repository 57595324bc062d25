"""Scale out on a Ray cluster (issue 15): overlap, actors, several learners, a killed learner, bytes moved.

Everything runs on a two-node ``ray.cluster_utils.Cluster`` started on this machine (raylets
with 2 and 3 logical CPUs: Ray only counts them; the second has a ``learner`` resource), reached
through ``ray_address`` as a real cluster would be, and shut down at the end. Placement: worker
actors spread over the nodes, learners on the second node (``Placement(actors="spread",
learner="learner")``). Torch uses one thread throughout.

1. Overlap: ``benchmarks/overlap.py``'s C = Q case (N micro-batches, an ``emulated-qpu`` job of
   Q ms, a learner of real torch work tuned to C = Q in the sequential loop, max_staleness 2) on
   the ``ray`` executor, the learner on the second node, the QPU's backend actor where Ray puts
   it (``overlap_nodes_used``: the nodes the spans show). Efficiency: the lower bound
   N * max(C, Q) + min(C, Q) over the makespan (the median of ``--rounds``).
2. Actors: REINFORCE (1-layer policy, one environment group, fresh episodes) on an emulated QPU
   (compiled simulator, exact, Q ms queue wait per job as in part 1, 4 device slots) under ``ray-actors``
   with 1 and with 4 actors spread over the nodes, staleness 8 (rollouts need not wait for a
   slow one ahead of them), the same first E episodes. Environment steps per second over the
   training itself (the first rollout's start to the last update's end, from the spans);
   ``*_end_to_end`` also counts each run's fixed ~1.5 s of setup (the backend actor's process,
   the workers' ready check) and teardown. A warm-up run first starts the worker actors. Short
   runs scale less: the actors that finish first wait for the last rollout.
3. Several learners: ``multi-learner`` (2 learners, staleness 0, on the cluster) against ``sync``,
   20 updates of REINFORCE (default policy, float64, compiled backend): largest parameter difference.
4. A killed learner: the same multi-learner run while a thread SIGKILLs learner slot 1's process
   after update 10, when its title shows it inside a call; Ray restarts the actor and redoes the
   call. The final parameters against part 3's undisturbed run; ``learner_killed`` says whether
   the kill landed (that pid killed, the actor back with a new one).
5. Bytes moved between processes per update of part 3's undisturbed run: the run's own count
   (``stats["bytes_moved"]``, the pickled sizes of what crosses a process boundary) over its
   updates: arguments the driver sends the workers (parameters, Adam's state), outputs it reads
   back, outputs taken worker to worker through Ray's object store (the actor's batch, by each
   learner) and the gradient reductions at the rendezvous. Not counted: Ray's own control
   messages (no quantum jobs here: the compiled backend runs in the learners' processes).
6. Compression and learning: REINFORCE on CartPole (the main job's config) under ``multi-learner``
   (2 learners, staleness 0, threads in this process) with each compression, seeds 0..S-1 (1 with
   ``--quick``, 5 without): episodes to solve (budget 600) and the bytes one learner contributes
   to one reduction of the circuit parameters' gradient (92 entries; ``Compression.encode``).

    python benchmarks/scale_out.py [--quick]

The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
import time

import overlap
import ray
import torch
from ray.cluster_utils import Cluster

import hqflow as hq
from hqflow.engine.distribution import MultiLearner, RayActors, Sync
from hqflow.engine.placement import Placement
from hqflow.workloads import synthetic
from hqflow.workloads.rl import reinforce, runner

TARGETS = {"overlap_efficiency_2_nodes": 0.9, "actors_scaling_4": 3.0, "multi_learner_max_param_diff": 1e-5}
PLACE = Placement(actors="spread", learner="learner")  # actors over both nodes, learners on the second
EXACT = reinforce.Config(seed=0, max_episodes=200, batch_episodes=10, stop_when_solved=False, dtype="float64")
MULTI = MultiLearner(learners=2, staleness=0, actors=1, executor="ray", placement=PLACE)


def part_overlap(address: str, q: float, n: int, rounds: int) -> dict:
    base = synthetic.Config(staleness=2, backend="qpu", matrix=128, repeats=1, resource="gpu")  # the learner slot
    stream = synthetic.stream(n, base)

    def on_cluster(cfg, items):
        return hq.run(synthetic.build_graph(cfg), items, backends={"qpu": ("emulated-qpu", {"per_job": q})},
                      executor="ray", ray_address=address, placement=PLACE)

    on_cluster(base, stream[:6])  # worker actors started outside the timed runs
    trials = []
    for _ in range(rounds):  # the learner re-tuned each round, as overlap.py does
        cfg = overlap.tune(base, q, q, stream)
        c = overlap.sequential(cfg, stream, q)[2]
        res = on_cluster(cfg, stream)
        c = min(c, overlap.learn_seconds(res))  # a faster step inside the run keeps the bound a bound
        bound = n * max(c, q) + min(c, q)
        trials.append((bound / res.seconds, c, bound, res.seconds, len({s.node for s in res.spans} - {None})))
        print(f"  C {c * 1e3:5.1f} ms  Q {q * 1e3:3.0f} ms  bound {bound:5.2f} s  ray {res.seconds:5.2f} s  "
              f"efficiency {trials[-1][0]:.3f}  (spans on {trials[-1][4]} nodes)", flush=True)
    eff, c, bound, seconds, nodes = sorted(trials)[len(trials) // 2]
    return {"overlap_efficiency_2_nodes": eff, "overlap_C_ms": c * 1e3, "overlap_Q_ms": q * 1e3,
            "overlap_bound_s": bound, "overlap_ray_s": seconds, "overlap_nodes_used": nodes}


def part_actors(address: str, q: float, episodes: int) -> dict:
    pool = {"qpu": [("emulated-qpu", {"wrapped": "compiled", "queue_wait": q, "max_in_flight": 4,
                                      "name": f"qpu-{q * 1e3:g}ms"})]}
    cfg = reinforce.Config(seed=0, backend="qpu", n_layers=1, batch_episodes=10, stop_when_solved=False, groups=1,
                           autoreset=False)  # no carry between updates: rollouts are independent

    def train(actors, eps, **changes):
        return runner.train("reinforce", dataclasses.replace(cfg, max_episodes=eps, **changes),
                            RayActors(staleness=8, actors=actors, placement=PLACE), backends=pool, ray_address=address)

    train(4, 4, batch_episodes=1)  # warm-up, not timed: starts the 4 actors' processes and the learner's
    figures = {"actors_episodes": episodes}
    for actors in (1, 4):
        out = train(actors, episodes)
        busy = max(s.end for s in out["spans"]) - min(s.start for s in out["spans"])
        figures[f"actors_env_steps_per_s_{actors}"] = out["env_steps"] / busy
        figures[f"actors_env_steps_per_s_{actors}_end_to_end"] = out["env_steps_per_s"]
        print(f"  {actors} actor{'s' if actors > 1 else ' '}  {out['env_steps']:5d} env steps  training {busy:6.2f} s "
              f"{out['env_steps'] / busy:6.1f}/s   end to end {out['seconds']:6.2f} s {out['env_steps_per_s']:6.1f}/s",
              flush=True)
    figures["actors_scaling_4"] = figures["actors_env_steps_per_s_4"] / figures["actors_env_steps_per_s_1"]
    figures["actors_scaling_4_end_to_end"] = (figures["actors_env_steps_per_s_4_end_to_end"]
                                              / figures["actors_env_steps_per_s_1_end_to_end"])
    print(f"  1 -> 4 actors: x{figures['actors_scaling_4']:.2f} training, "
          f"x{figures['actors_scaling_4_end_to_end']:.2f} end to end (ideal 4)")
    return figures


def kill_mid_call(pid: int, reached: threading.Event, finished: threading.Event, report: dict) -> None:
    """Once ``reached``: SIGKILL ``pid`` as soon as its process title shows a call running (Ray's ``ray::_Worker.call``)."""
    while not reached.wait(0.05):
        if finished.is_set():
            return
    while not finished.is_set():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                title = fh.read().decode(errors="replace")
        except OSError:
            return
        if "_Worker.call" in title:
            os.kill(pid, signal.SIGKILL)
            report["killed_pid"] = pid
            return
        time.sleep(0.001)


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def part_learners(address: str, updates: int = 20) -> dict:
    exact = dataclasses.replace(EXACT, max_episodes=updates * EXACT.batch_episodes)
    sync = runner.train("reinforce", exact, Sync())
    undisturbed = runner.train("reinforce", exact, MULTI, ray_address=address)
    diff = max_diff(undisturbed["params"], sync["params"])
    print(f"  sync {sync['seconds']:5.2f} s, multi-learner {undisturbed['seconds']:5.2f} s, {undisturbed['updates']} "
          f"updates: largest parameter difference {diff:.2e}", flush=True)

    from hqflow.engine.executors.ray import _WORKERS

    learner = next(a for key, a in _WORKERS.items() if key[2:] == (PLACE, "gpu", 1))
    pid = ray.get(learner.pid.remote())
    reached, finished, report = threading.Event(), threading.Event(), {}
    killer = threading.Thread(target=kill_mid_call, args=(pid, reached, finished, report), daemon=True)
    killer.start()

    def progress(episodes, _metrics):
        if episodes >= updates // 2 * EXACT.batch_episodes:  # half the updates done
            reached.set()

    try:
        disturbed = runner.train("reinforce", exact, MULTI, ray_address=address, progress=progress)
    finally:
        finished.set()
        killer.join()
    new_pid = ray.get(learner.pid.remote())
    killed = report.get("killed_pid") == pid and new_pid != pid
    kill_diff = max_diff(disturbed["params"], undisturbed["params"])
    what = (f"SIGKILLed in a call after update {updates // 2}, back as pid {new_pid}" if killed
            else "NOT killed (the run ended first)")
    print(f"  learner 1 (pid {pid}) {what}: {disturbed['seconds']:.2f} s, largest difference to the "
          f"undisturbed run {kill_diff:.2e}", flush=True)
    moved = {f"bytes_{k}": v / undisturbed["updates"] for k, v in undisturbed["stats"]["bytes_moved"].items()}
    moved["bytes_per_update"] = sum(moved.values())
    return {**moved, "multi_learner_max_param_diff": diff, "multi_learner_updates": undisturbed["updates"],
            "multi_learner_s": undisturbed["seconds"], "sync_s": sync["seconds"], "learner_killed": killed,
            "learner_killed_max_param_diff": kill_diff, "learner_killed_same_result": killed and kill_diff <= 1e-5}


COMPRESSIONS = ("none", "float16", "topk:0.1")


def part_compression(seeds: int) -> dict:
    import numpy as np

    from hqflow.engine.collective import Compression

    grad = np.random.default_rng(0).standard_normal(92)  # λ (20) and θ (72) of the 4-qubit, 5-layer policy
    figures = {}
    for text in COMPRESSIONS:
        sent, _ = Compression.parse(text).encode(grad, None)
        solved = []
        for seed in range(seeds):
            out = runner.train("reinforce", reinforce.Config(seed=seed, max_episodes=600),
                               MultiLearner(learners=2, staleness=0, executor="local", compression=text))
            solved.append(out["episodes_to_solve"])
        key = text.replace(":", "_").replace(".", "")
        done = sorted(e for e in solved if e is not None)
        figures[f"compression_{key}_solved"] = len(done)
        figures[f"compression_{key}_median_episodes"] = done[len(done) // 2] if done else None
        figures[f"compression_{key}_bytes_per_share"] = int(sent.nbytes)
        print(f"  {text:<9} {sent.nbytes:5d} B per share   solved {len(done)}/{seeds}   episodes "
              f"{', '.join(str(e) if e else '-' for e in solved)}", flush=True)
    return figures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 overlap round, 80 episodes per actors run (< 2 minutes)")
    ap.add_argument("--q-ms", type=float, default=50.0,
                    help="the emulated QPU's latency per job in ms, parts 1 and 2 (default 50)")
    ap.add_argument("--steps", type=int, default=50, help="overlap: micro-batches N (default 50)")
    ap.add_argument("--rounds", type=int, default=None, help="overlap: rounds, median reported (default 3; quick 1)")
    ap.add_argument("--actor-episodes", type=int, default=None, help="episodes per actors run (default 240; quick 80)")
    ap.add_argument("--learner-updates", type=int, default=20,
                    help="updates of the multi-learner runs of parts 3-4 (default 20; the kill after half)")
    ap.add_argument("--compression-seeds", type=int, default=None,
                    help="seeds per compression in part 6 (default 5; quick 1; 0 skips the part)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    episodes = args.actor_episodes or (80 if args.quick else 240)
    if args.steps < 2 or rounds < 1 or episodes < 10 or args.q_ms <= 0 or args.learner_updates < 4:
        ap.error("need --steps >= 2, --rounds >= 1, --actor-episodes >= 10, --q-ms > 0 and --learner-updates >= 4")
    torch.set_num_threads(1)
    start = time.perf_counter()
    figures = {"quick": args.quick}
    ray.shutdown()  # this process's own Ray, if any: it connects to the cluster instead
    # workers at this process's priority, as hqflow's own local Ray (Ray's default niceness 15 starves them)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "_system_config": {"worker_niceness": 0}})
    try:
        cluster.add_node(num_cpus=3, resources={"learner": 1})
        cluster.wait_for_nodes()
        print(f"Ray cluster of {len(cluster.list_all_nodes())} nodes (2 + 3 logical CPUs) on this machine's {os.cpu_count()} "
              f"cores, at {cluster.address}")
        print(f"\n1. overlap at C = Q, ray executor, N = {args.steps}, {rounds} round(s)")
        figures.update(part_overlap(cluster.address, args.q_ms / 1e3, args.steps, rounds))
        print(f"\n2. REINFORCE on an emulated QPU ({args.q_ms:g} ms per job, 4 slots): 1 vs 4 actors, first {episodes} "
              "episodes")
        figures.update(part_actors(cluster.address, args.q_ms / 1e3, episodes))
        print(f"\n3-4. multi-learner (2 learners) vs sync, {args.learner_updates} updates, float64; then learner 1 "
              f"killed after update {args.learner_updates // 2}")
        figures.update(part_learners(cluster.address, args.learner_updates))
        print(f"\n5. bytes between processes per update of part 3's undisturbed run ({MULTI.learners} learners, 1 actor)")
        print("  " + ", ".join(f"{k[6:].replace('_', ' ')} {v:,.0f} B" for k, v in figures.items() if k.startswith("bytes_")))
    finally:
        ray.shutdown()
        cluster.shutdown()
    seeds = args.compression_seeds if args.compression_seeds is not None else (1 if args.quick else 5)
    if seeds:
        print(f"\n6. compression (2 learners, threads): REINFORCE on CartPole, seeds 0..{seeds - 1}, budget 600 episodes")
        figures.update(part_compression(seeds))
    met = {k: figures[k] <= v if k.endswith("diff") else figures[k] >= v for k, v in TARGETS.items()}
    met["learner_killed_same_result"] = figures["learner_killed_same_result"]
    figures["targets"] = met
    figures["total_s"] = time.perf_counter() - start
    shown = {k: str(figures[k]) if isinstance(figures[k], bool) else f"{figures[k]:.3g}" for k in met}
    print("\ntargets: " + ", ".join(f"{k} {shown[k]} {'ok' if v else 'MISSED'}" for k, v in met.items())
          + f"; total {figures['total_s']:.1f} s")
    print(json.dumps({k: round(v, 4) if isinstance(v, float) and not k.endswith("diff") else v
                      for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
