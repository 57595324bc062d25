"""Train a quantum policy on two emulated cloud QPUs, one of them flaky, and see where the time went.

Every circuit job of the actor and the learner goes through the scheduler's pool "qpu":
the faster, healthier QPU gets more work, a failed job is retried on the other one, and
the trace shows both QPUs busy while the environments step.

    python examples/rl_qpu_pool.py            # 100 episodes, 50 ms per job
    python examples/rl_qpu_pool.py --quick    # 20 episodes of 1 layer, 10 ms per job (what CI runs)
"""
import argparse

import hqflow as hq
from hqflow.trace import format_table
from hqflow.workloads.rl import reinforce, runner

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--quick", action="store_true")
args = ap.parse_args()

per_job = 0.01 if args.quick else 0.05
qpus = [("emulated-qpu", {"wrapped": "compiled", "per_job": per_job, "name": "qpu-a", "seed": 1}),
        ("emulated-qpu", {"wrapped": "compiled", "per_job": per_job, "name": "qpu-b", "seed": 2,
                          "failure_rate": 0.2})]  # fails one job in five
cfg = reinforce.Config(seed=0, backend="qpu", max_episodes=20 if args.quick else 100, stop_when_solved=False,
                       n_layers=1 if args.quick else 5)
try:
    out = runner.train("reinforce", cfg, backends={"qpu": qpus}, run_dir="runs/example-qpu-pool", max_retries=5)
except hq.RunFailed as exc:  # a job failed 6 times in a row: the last update is checkpointed
    raise SystemExit(f"stopped: {exc}; resume with runner.train(run_dir='runs/example-qpu-pool', resume=True)") from None

c = out["config"]
print(f"{len(out['returns'])} episodes, {out['env_steps_taken']} env steps in {out['seconds']:.1f} s "
      f"({out['env_steps_taken_per_s']:.0f}/s); {c['groups']} env groups of {c['num_envs'] // c['groups']}, "
      f"autoreset={c['autoreset']}, distribution {out['distribution']}")
print(f"jobs retried: {out['stats']['retries']}; pool: {out['stats']['pools']['qpu']}")
print(format_table(out["spans"]))
print("trace: runs/example-qpu-pool/trace.json (open it in https://ui.perfetto.dev)")
