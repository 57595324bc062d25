"""Scale out on a Ray cluster (issue 15): overlap, actors, several learners, a killed learner, bytes moved.

Everything runs on a two-node ``ray.cluster_utils.Cluster`` started on this machine (raylets
with 2 and 3 logical CPUs: Ray only counts them), reached with ``ray_address`` as a real
cluster would be, and shut down at the end.

1. Overlap: ``benchmarks/overlap.py``'s C = Q case (N micro-batches, an ``emulated-qpu`` job of
   Q ms, a learner of real torch work tuned to C = Q ms in the sequential loop, max_staleness 2)
   on the ``ray`` executor, two cpu worker actors spread over the nodes. Efficiency is the lower
   bound N * max(C, Q) + min(C, Q) over the makespan (median of ``--rounds``).
2. Actors: REINFORCE (1-layer policy, one environment group, fresh episodes) on an emulated QPU
   (compiled simulator, exact, 50 ms queue wait per job, 4 device slots) under ``ray-actors``
   with 1 and with 4 actors spread over the nodes, staleness 4 (so 4 rollouts can be in flight);
   the ratio of environment steps per second. Worker actors are started by a warm-up run first.
3. Several learners: ``multi-learner`` (2 learners, staleness 0, on the cluster) against ``sync``,
   20 updates of REINFORCE (default policy, float64, compiled backend): largest parameter
   difference.
4. A killed learner: the same multi-learner run while a thread SIGKILLs learner slot 1's
   process in the middle of a call after update 10; Ray restarts the actor and redoes the call.
   The final parameters against the undisturbed run of part 3.
5. Bytes moved between processes per update of part 3's run, estimated from the pickled sizes of
   real objects (there is no byte counter on Ray's transfers): the parameters (to the actor, and
   with Adam's state to each learner), the batch (actor to driver, driver to each learner), the
   learners' outputs back, and the gradient reduction (each learner hands in its float64
   gradients and gets the sum back).

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

import cloudpickle
import overlap
import ray
import torch
from ray.cluster_utils import Cluster

import hqflow as hq
from hqflow.distribution import MultiLearner, RayActors, Sync
from hqflow.placement import Placement
from hqflow.workloads import synthetic
from hqflow.workloads.rl import reinforce, runner

TARGETS = {"overlap_efficiency_2_nodes": 0.9, "actors_scaling_4": 3.0, "multi_learner_max_param_diff": 1e-5}
SPREAD = Placement(actors="spread")


def part_overlap(address: str, q: float, n: int, rounds: int) -> dict:
    base = synthetic.Config(staleness=2, backend="qpu", matrix=128, repeats=1)
    stream = synthetic.stream(n, base)

    def on_cluster(cfg, items):
        return hq.run(synthetic.build_graph(cfg), items, backends={"qpu": ("emulated-qpu", {"per_job": q})},
                      executor="ray", ray_address=address, cpu_workers=2, placement=SPREAD)

    on_cluster(base, stream[:6])  # worker actors started outside the timed runs
    trials = []
    for _ in range(rounds):  # the learner re-tuned each round, as overlap.py does
        cfg = overlap.tune(base, q, q, stream)
        c = overlap.sequential(cfg, stream, q)[2]
        res = on_cluster(cfg, stream)
        c = min(c, overlap.learn_seconds(res))  # a faster step inside the run keeps the bound a bound
        bound = n * max(c, q) + min(c, q)
        trials.append((bound / res.seconds, c, bound, res.seconds, len({s.node for s in res.spans})))
        print(f"  C {c * 1e3:6.1f} ms  Q {q * 1e3:4.0f} ms  bound {bound:5.2f} s  ray {res.seconds:5.2f} s  "
              f"efficiency {trials[-1][0]:.3f}  ({trials[-1][4]} nodes)", flush=True)
    eff, c, bound, seconds, nodes = sorted(trials)[len(trials) // 2]
    return {"overlap_efficiency_2_nodes": eff, "overlap_C_ms": c * 1e3, "overlap_Q_ms": q * 1e3,
            "overlap_bound_s": bound, "overlap_ray_s": seconds, "overlap_nodes_used": nodes}


def part_actors(address: str, episodes: int) -> dict:
    pool = {"qpu": [("emulated-qpu", {"wrapped": "compiled", "queue_wait": 0.05, "max_in_flight": 4,
                                      "name": "qpu-50ms"})]}
    cfg = reinforce.Config(seed=0, backend="qpu", n_layers=1, batch_episodes=10, max_episodes=episodes,
                           stop_when_solved=False, groups=1, autoreset=False)

    def train(actors, eps):
        return runner.train("reinforce", dataclasses.replace(cfg, max_episodes=eps),
                            RayActors(staleness=4, actors=actors, placement=SPREAD), backends=pool, ray_address=address)

    train(4, 40)  # warm-up: starts the 4 actor processes and the learner, compiles the circuit
    rates = {}
    for actors in (1, 4):
        out = train(actors, episodes)
        rates[actors] = out["env_steps_per_s"]
        print(f"  {actors} actor{'s' if actors > 1 else ' '}  {out['seconds']:6.2f} s  {out['env_steps']:6d} env steps  "
              f"{rates[actors]:7.1f} env steps/s", flush=True)
    print(f"  scaling 1 -> 4 actors: x{rates[4] / rates[1]:.2f} (ideal 4)")
    return {"actors_env_steps_per_s_1": rates[1], "actors_env_steps_per_s_4": rates[4],
            "actors_scaling_4": rates[4] / rates[1]}


def learner_pid(rank: int = 1) -> tuple:
    from hqflow.executors import _WORKERS

    actor = next(a for key, a in _WORKERS.items() if key[3:] == ("gpu", rank))
    return actor, ray.get(actor.pid.remote())


def kill_mid_call(actor_pid: tuple, reached: threading.Event, report: dict) -> None:
    """After update 10: SIGKILL the learner's process while its title says it runs a call."""
    reached.wait(300)
    _, pid = actor_pid
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                title = fh.read().decode(errors="replace")
        except OSError:
            return
        if "_Worker.call" in title:
            os.kill(pid, signal.SIGKILL)
            report["killed_pid"] = pid
            return
        time.sleep(0.002)


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def part_learners(address: str) -> dict:
    cfg = reinforce.Config(seed=0, max_episodes=200, batch_episodes=10, stop_when_solved=False, dtype="float64")
    multi = MultiLearner(learners=2, staleness=0, actors=1, executor="ray", placement=SPREAD)
    sync = runner.train("reinforce", cfg, Sync())
    undisturbed = runner.train("reinforce", cfg, multi, ray_address=address)
    diff = max_diff(undisturbed["params"], sync["params"])
    print(f"  sync {sync['seconds']:6.2f} s, multi-learner (2) {undisturbed['seconds']:6.2f} s, "
          f"{undisturbed['updates']} updates: largest parameter difference {diff:.2e}", flush=True)

    before = learner_pid()
    reached, report = threading.Event(), {}
    killer = threading.Thread(target=kill_mid_call, args=(before, reached, report), daemon=True)
    killer.start()
    disturbed = runner.train("reinforce", cfg, multi, ray_address=address,
                             progress=lambda episodes, _m: episodes >= 100 and reached.set())
    killer.join(5)
    after = ray.get(before[0].pid.remote())
    killed = report.get("killed_pid") == before[1] and after != before[1]
    kill_diff = max_diff(disturbed["params"], undisturbed["params"])
    print(f"  learner 1 (pid {before[1]}) {'SIGKILLed mid-call after update 10, now pid ' + str(after) if killed else 'NOT killed'}"
          f": {disturbed['seconds']:.2f} s, largest difference to the undisturbed run {kill_diff:.2e}", flush=True)
    return {"multi_learner_max_param_diff": diff, "multi_learner_updates": undisturbed["updates"],
            "multi_learner_s": undisturbed["seconds"], "sync_s": sync["seconds"], "learner_killed": killed,
            "learner_killed_max_param_diff": kill_diff, "learner_killed_same_result": killed and kill_diff <= 1e-5,
            "_cfg": cfg}


def part_bytes(cfg, learners: int = 2) -> dict:
    """Pickled sizes of one update's real objects (update 0 of part 3's run)."""
    size = lambda obj: len(cloudpickle.dumps(obj))  # noqa: E731
    cfg = reinforce.resolve(cfg, in_process=True, devices=1)
    config, state = dataclasses.asdict(cfg), runner.initial_state("reinforce", cfg)
    batch = runner.rollout(state["learn.params"], 0, "reinforce", config)["batch"]
    out = runner.learn(batch, state["learn.params"], state["learn.opt"], state["learn.extra"], 0, "reinforce", config)
    learner_in = {k: v for k, v in state.items() if k.startswith("learn.")}
    grad_bytes = sum(p.numel() * 8 for p in out["params"].values())  # float64 gradients, every parameter
    parts = {"bytes_params": size(state["learn.params"]) + learners * size(learner_in),
             "bytes_batch": (1 + learners) * size(batch),
             "bytes_outputs": learners * size(out),
             "bytes_reduce": 2 * learners * grad_bytes}
    parts["bytes_per_update"] = sum(parts.values())
    print("  " + ", ".join(f"{k[6:]} {v:,} B" for k, v in parts.items()))
    return parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="Q = 20 ms, 1 round, fewer actor episodes (< 2 minutes)")
    ap.add_argument("--steps", type=int, default=50, help="overlap micro-batches N (default 50)")
    ap.add_argument("--rounds", type=int, default=None, help="overlap rounds, median reported (default 3; quick 1)")
    ap.add_argument("--actor-episodes", type=int, default=None, help="episodes per actors run (default 160; quick 80)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    q = 0.02 if args.quick else 0.05
    rounds = args.rounds or (1 if args.quick else 3)
    episodes = args.actor_episodes or (80 if args.quick else 160)
    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    figures = {"quick": args.quick}
    try:
        cluster.add_node(num_cpus=3)
        cluster.wait_for_nodes()
        print(f"cluster: {len(cluster.list_all_nodes())} nodes, 5 logical CPUs on this machine's "
              f"{os.cpu_count()} cores, at {cluster.address}")
        print(f"\n1. overlap at C = Q on the ray executor, N = {args.steps}, {rounds} round(s)")
        figures.update(part_overlap(cluster.address, q, args.steps, rounds))
        print(f"\n2. REINFORCE on an emulated QPU (50 ms per job, 4 slots), 1 vs 4 actors, {episodes} episodes each")
        figures.update(part_actors(cluster.address, episodes))
        print("\n3-4. multi-learner (2 learners) vs sync, 20 updates, float64; then learner 1 killed after update 10")
        learners = part_learners(cluster.address)
        cfg = learners.pop("_cfg")
        figures.update(learners)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print("\n5. bytes between processes per update (multi-learner, 2 learners, 1 actor; pickled sizes)")
    figures.update(part_bytes(cfg))
    met = {k: figures[k] <= v if k.endswith("diff") else figures[k] >= v for k, v in TARGETS.items()}
    met["learner_killed_same_result"] = bool(figures["learner_killed_same_result"])
    figures["targets"] = met
    figures["total_s"] = time.perf_counter() - start
    print("\ntargets: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in met.items())
          + f"; total {figures['total_s']:.1f} s")
    print(json.dumps({k: round(v, 4) if isinstance(v, float) and not k.endswith("diff") else v
                      for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
