"""Train a variational quantum policy on CartPole with REINFORCE, then run it again pipelined.

The algorithm is written once (hqflow.workloads.rl.reinforce) as two fragments,
``rollout`` and ``learn``; the distribution policy decides how they run.

    python examples/rl_cartpole.py            # until solved (about 300 episodes, a few seconds)
    python examples/rl_cartpole.py --quick    # 40 episodes of 2 layers (what CI runs)
"""
import argparse

import numpy as np

from hqflow.engine.distribution import Pipelined
from hqflow.workloads.rl import reinforce, runner

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--quick", action="store_true")
args = ap.parse_args()

# The TensorFlow Quantum tutorial's setup: 4 qubits, 5 layers, 10 episodes per update.
cfg = reinforce.Config(seed=1, n_layers=2, max_episodes=40) if args.quick else reinforce.Config(seed=1)

out = runner.train("reinforce", cfg, "sync", run_dir="runs/example-sync")
print(f"sync:      {len(out['returns'])} episodes in {out['seconds']:.1f} s, solved at {out['episodes_to_solve']}, "
      f"last 10 episodes' mean return {np.mean(out['returns'][-10:]):.1f}")

# The same algorithm, actors running one parameter version ahead of the learner.
out = runner.train("reinforce", cfg, Pipelined(staleness=1), run_dir="runs/example-pipelined")
print(f"pipelined: {len(out['returns'])} episodes in {out['seconds']:.1f} s, solved at {out['episodes_to_solve']}")
print("run directories: runs/example-sync, runs/example-pipelined (learning_curve.png, metrics.jsonl, trace.json)")
