"""A priced training run for ``test_budget_kill.py`` to kill: ``python priced_run.py RUN_DIR GIVEN BUDGET [resume]``.

Its backend, an emulated QPU priced as IonQ Aria, appends each job's price to the file GIVEN before the job is
submitted, so the file says what the backend was given by every process of the run. Exit 3: stopped by the budget.
"""
import sys

import hqflow as hq
from hqflow.backends.emulated import EmulatedQPU
from hqflow.engine.distribution import Pipelined
from hqflow.workloads.rl import reinforce, runner

CFG = reinforce.Config(n_layers=1, batch_episodes=3, max_episodes=300, seed=7, backend="qpu", shots=100,
                       gradient="spsa", stop_when_solved=False)


class Given(EmulatedQPU):
    def __init__(self, path, **options):
        super().__init__(**options)
        self.path = path

    def submit(self, batch):
        with open(self.path, "a") as fh:
            fh.write(f"{self.estimate_cost(batch).amount!r}\n")
        return super().submit(batch)


def main(run_dir, given, budget, resume=False):
    backend = Given(given, wrapped="compiled", price_as="ionq.qpu.aria-1", per_job=0.01, seed=3)
    try:
        runner.train("reinforce", None if resume else CFG, Pipelined(staleness=1), run_dir=run_dir, resume=resume,
                     backends={"qpu": [backend]}, tensorboard=False, checkpoint_every=3, budget=budget)
    except hq.RunFailed as exc:
        print(exc, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), len(sys.argv) > 4))
