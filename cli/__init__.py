"""The ``hqflow`` command line: ``backends``, ``inspect``, ``run``, ``plan``, ``trace``, ``train`` and
``eval`` (README "Command line"). The parser and ``main`` are here; each subcommand's ``cmd_*`` is in its own
module (``backends`` also holds ``inspect``).

Bad usage or bad input, found before any job runs, exits with status 2 and a one-line message on
stderr. A run that fails exits with status 1 and one line: a fragment's error, a job out of retries,
or a backend that refused the credentials or could not be reached (those end the run at once).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from hqflow.ir.text import one_line

from hqflow import __version__
from .cost import OBJECTIVES, _amount, _at_least, add_cost_arguments, add_dry_run_arguments, add_frugal_arguments
from .pool import UsageError, choice, make_member, output


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hqflow", description="A runtime for hybrid classical/quantum programs.")
    p.add_argument("--version", action="version", version=f"hqflow {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    from hqflow.workloads import WORKLOADS

    workloads = sorted(WORKLOADS)
    _add_backends(sub)
    _add_inspect(sub)
    _add_run(sub, workloads)
    _add_plan(sub, workloads)
    _add_trace(sub)
    _add_eval(sub)
    _add_train(sub)
    return p


_ONE_JSON_LINE = "print the figures as one JSON line"
_MEMBER_OPT = "a backend option (K: only the pool's K-th member), repeatable"


def _add_backends(sub) -> None:
    b = sub.add_parser("backends", help="list backends and their capabilities",
                       description="List the registered quantum backends and what each can do.")
    b.add_argument("--json", action="store_true", help="print one JSON object per line")
    b.add_argument("--azure-opt", metavar="KEY=VALUE", action="append", default=[],
                   help="an Azure Quantum workspace option (subscription_id, resource_group, name, location, "
                        "endpoint, ...; the key is best left to AZURE_QUANTUM_API_KEY), repeatable")


def _add_inspect(sub) -> None:
    i = sub.add_parser("inspect", help="validate and pretty-print a saved graph",
                       description="Load GRAPH.json, validate it, and print it. Exit 2 if it is malformed or invalid.")
    i.add_argument("graph", metavar="GRAPH.json", help="a graph written by Graph.to_json()")
    i.add_argument("--png", metavar="PATH", type=output(".png", ".svg", ".pdf"),
                   help="also draw the graph to this PNG file")
    i.add_argument("--no-resolve", action="store_true", help="do not import fragment functions while validating")


def _add_run(sub, workloads: list[str]) -> None:
    r = sub.add_parser("run", help="run a registered workload",
                       description="Run a registered workload and print its figures.")
    r.add_argument("workload", metavar="WORKLOAD", type=choice(workloads, "unknown workload"),
                   help="one of: " + ", ".join(workloads))
    r.add_argument("--steps", type=_steps, help="optimization steps (default: the workload's)")
    r.add_argument("--seed", type=_natural, help="random seed (default: the workload's)")
    r.add_argument("--backend", type=_backend, help="backend name, e.g. reference, aer, pennylane:default.qubit")
    r.add_argument("--out", metavar="FILE", type=output(), help="also write the figures as JSON to FILE")
    r.add_argument("--json", action="store_true", help=_ONE_JSON_LINE)
    r.add_argument("--run-dir", metavar="DIR", type=output(folder=True),
                   help="write config.json, result.json and (when the workload reports them) spans.json to DIR")
    r.add_argument("--dry-run", action="store_true", help="submit nothing: price every job the run would send to "
                   "--backend (jobs, shots, estimated cost), answering them from a local simulator")
    r.add_argument("--plan", choices=["auto"], type=choice(["auto"]),
                   help="auto: plan the run with the cost model first (as hqflow plan does) and run the plan")
    r.add_argument("--profile", metavar="FILE", type=output(),
                   help="with --plan auto: plan from this saved profile, and fold this run's measurements into it")
    r.add_argument("--max-staleness", type=_staleness, default=None,
                   help="with --plan auto: how many versions old the parameters may be (default: the graph's own)")
    r.add_argument("--objective", choices=OBJECTIVES, type=choice(OBJECTIVES), help="with --plan auto: the "
                   "shortest run (default), or the cheapest")
    r.add_argument("--pool", type=_replicas, default=None, help="with --backend: a pool of N such backends")
    r.add_argument("--backend-opt", metavar="[K:]KEY=VALUE", action="append", default=[], help=_MEMBER_OPT)
    add_cost_arguments(r, run=True)


def _add_plan(sub, workloads: list[str]) -> None:
    pl = sub.add_parser("plan", help="choose how to run a workload with the cost model",
                        description="Profile a workload (a short calibration run, a saved --profile, or a run "
                                    "directory's spans), search staleness, prefetch, rows per job, worker slots and "
                                    "the pool's members, and print the plan with its predicted makespan, "
                                    "utilization and spend.")
    workload = choice(workloads, "unknown workload", ", or a run directory")
    pl.add_argument("workload", metavar="WORKLOAD|RUN_DIR", type=lambda text: text if os.path.isdir(text) else
                    workload(text), help="one of: " + ", ".join(workloads) + "; or a directory of hqflow run --run-dir")
    pl.add_argument("--steps", type=_steps, help="steps of the run to plan (default: the workload's)")
    pl.add_argument("--seed", type=_natural, help="random seed (default: the workload's)")
    pl.add_argument("--backend", type=_backend, help="backend name, e.g. emulated-qpu, aer, azure:ionq.simulator")
    pl.add_argument("--pool", type=_replicas, default=None, help="a pool of N such backends")
    pl.add_argument("--backend-opt", metavar="[K:]KEY=VALUE", action="append", default=[], help=_MEMBER_OPT)
    pl.add_argument("--objective", choices=OBJECTIVES, type=choice(OBJECTIVES), default="time",
                    help="the shortest run (default), or the cheapest")
    pl.add_argument("--budget", type=_amount, default=None,
                    help="the most the run may spend: the fastest plan predicted within it")
    pl.add_argument("--max-staleness", type=_staleness, default=None,
                    help="how many versions old the parameters may be (default: the graph's own)")
    pl.add_argument("--calibrate", type=_steps, default=None, help="steps of a calibration round (default 5; "
                    "rounds go on, up to 3, until two predict the same within 10%%)")
    pl.add_argument("--profile", metavar="FILE", type=output(), help="plan from this saved profile (no "
                    "calibration run unless --calibrate), and save the merged profile to it")
    pl.add_argument("--measure", action="store_true", help="then run the plan and print its measured makespan")
    pl.add_argument("--json", action="store_true", help="print the plan's figures as one JSON line")


def _add_trace(sub) -> None:
    t = sub.add_parser("trace", help="show where a run spent its time",
                       description="Read RUN/spans.json, print the utilization table and write trace.json "
                                   "(Chrome trace; open it in https://ui.perfetto.dev) and gantt.png.")
    t.add_argument("run", metavar="RUN", help="a run directory holding spans.json, or a spans JSON file")
    t.add_argument("--out", metavar="DIR", type=output(folder=True),
                   help="write trace.json and gantt.png here (default: the run directory)")


def _add_eval(sub) -> None:
    ev = sub.add_parser("eval", help="run greedy episodes of a trained policy",
                        description="Load a run directory's policy at its last checkpoint and run greedy evaluation "
                                    "episodes; print the mean and standard deviation of the return.")
    ev.add_argument("run", metavar="RUN_DIR", help="a directory written by hqflow train")
    ev.add_argument("--episodes", type=_episodes, default=10, help="evaluation episodes (default 10)")
    ev.add_argument("--seed", type=_natural, default=10_000, help="seed of the first episode (default 10000)")
    ev.add_argument("--backend", help="run the policy circuit here instead of the run's backend, e.g. compiled")
    ev.add_argument("--backend-opt", metavar="KEY=VALUE", action="append", default=[], help="an option of --backend "
                    "(repeatable), e.g. price_as=ionq.qpu.aria-1")
    ev.add_argument("--shots", type=_at_least(1, "a positive number of shots"), help="shots per circuit (default: "
                    "the run's)")
    ev.add_argument("--budget", type=_amount, metavar="AMOUNT", help="the most the evaluation may spend on priced "
                    "jobs; it stops before a step that would pass it (exit 1), its completed episodes reported")
    ev.add_argument("--dry-run", action="store_true", help="submit nothing: print the most the evaluation can cost "
                    "(every episode to the time limit)")
    ev.add_argument("--record", metavar="DIR", type=output(folder=True), help="save a video of every episode in DIR "
                    "(gymnasium's RecordVideo; needs pip install \"gymnasium[other]\")")
    ev.add_argument("--json", action="store_true", help=_ONE_JSON_LINE)


def _add_train(sub) -> None:
    tr = sub.add_parser("train", help="train a variational quantum policy with RL",
                        description="Train a variational quantum policy on a gymnasium environment and write a run "
                                    "directory: config.json, metrics.jsonl, checkpoint.pt, learning_curve.png, "
                                    "spans.json and trace.json. Defaults: REINFORCE with the softmax-PQC policy "
                                    "(Jerbi et al. 2021) on the compiled simulator.")
    tr.add_argument("env", metavar="ENV", nargs="?", help="cartpole, acrobot, frozenlake, a gymnasium id, or MODULE:ID "
                    "for your own (not with --resume)")
    tr.add_argument("--env-module", metavar="MODULE", help="import MODULE (it registers ENV) in every process; the "
                    "same as ENV given as MODULE:ENV")
    tr.add_argument("--algo", type=choice(_names("hqflow.workloads.rl.runner", "ALGORITHMS"), "unknown algorithm"),
                    help="reinforce (default), dqn or ppo")
    tr.add_argument("--backend", help="backend of the policy circuit (default: compiled)")
    tr.add_argument("--seed", type=_natural, help="random seed (default 0)")
    tr.add_argument("--episodes", type=_episodes, help="episode budget (default: the algorithm's, 1000 for reinforce)")
    tr.add_argument("--backend-opt", metavar="[K:]KEY=VALUE", action="append", default=[],
                    help=_MEMBER_OPT + ", e.g. per_job=0.05 or 1:failure_rate=0.2")
    tr.add_argument("--pool", type=_replicas, default=None, help="a pool of N copies of --backend (default 1)")
    tr.add_argument("--distribution", default="auto", type=choice(_names("hqflow.engine.distribution", "DISTRIBUTIONS",
                    "auto"), "unknown distribution policy"), help="auto (default: sync in process, pipelined with "
                    "staleness 1 on a job backend), sync, pipelined, ray-actors or multi-learner")
    tr.add_argument("--staleness", type=_staleness, help="parameter versions an actor may lag behind (default 1)")
    tr.add_argument("--learners", type=_replicas, help="multi-learner: learners that share each update (default 2)")
    tr.add_argument("--compression", metavar="KIND", help="multi-learner: how learners compress their gradients: "
                    "none (default), float16, topk or topk:RATIO (default 0.1), with error feedback")
    tr.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                    help="a field of the algorithm's Config, e.g. n_layers=3, repeatable")
    tr.add_argument("--run-dir", metavar="DIR", type=output(folder=True),
                    help="where to write the run (default: runs/ALGO-ENV-seedN)")
    tr.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint; its pool and "
                    "distribution may change")
    tr.add_argument("--init-from", metavar="RUN_DIR", help="start from another run's policy (its last checkpoint: "
                    "one pretrained for free on the target's noisy emulator, say), not from the seed's")
    tr.add_argument("--resources", metavar="FILE", help='an elastic pool: a JSON file {"pools": {"NAME": [member, '
                    '...]}} whose changes the run follows (polled every 0.5 s; SIGHUP: read it now)')
    tr.add_argument("--plan", choices=["auto"], type=choice(["auto"]), help="auto: let the cost model choose the "
                    "distribution, prefetch, rows per job and the pool's members, then train")
    tr.add_argument("--max-staleness", type=_staleness, default=None, help="with --plan auto: how many versions old "
                    "the actors' parameters may be (default 1 on a job backend, 0 in process)")
    tr.add_argument("--profile", metavar="FILE", type=output(), help="with --plan auto: plan from this saved "
                    "profile, and fold the run's measurements into it")
    tr.add_argument("--tensorboard", action=argparse.BooleanOptionalAction, default=True,
                    help="write TensorBoard event files to RUN_DIR/tensorboard (default: on)")
    tr.add_argument("--checkpoint-every", type=_positive, default=5, help="updates between checkpoints (default 5)")
    tr.add_argument("--budget", type=_amount, metavar="AMOUNT", help="the most the run may spend on priced jobs, in "
                    "the target's currency; past it the run stops, checkpointed")
    tr.add_argument("--ray-address", metavar="ADDR", help="ray-actors or multi-learner: a Ray cluster to join "
                    "(host:port, ray://host:port or auto; default: a local Ray)")
    tr.add_argument("--json", action="store_true", help=_ONE_JSON_LINE)
    add_dry_run_arguments(tr)
    add_cost_arguments(tr)
    add_frugal_arguments(tr)


_natural, _positive = _at_least(0, "an integer >= 0"), _at_least(1, "a positive integer")
_steps, _episodes = _at_least(1, "a positive integer", 10**6), _at_least(1, "a positive integer", 10**7)  # see README
_replicas, _staleness = _at_least(1, "a positive integer", 64), _at_least(0, "an integer >= 0", 32)


def _backend(name: str) -> str:
    """An argparse type: a backend the registry makes (made here, and closed; a usage error names what is wrong)."""
    make_member(name).close()
    return name


def _names(module: str, table: str, *first: str):
    """The names of ``module.table`` (imported when a choice is checked), after ``first``."""
    return lambda: [*first, *getattr(importlib.import_module(module), table)]


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        module = importlib.import_module(f"{__name__}.{'backends' if args.command == 'inspect' else args.command}")
        # --json: the figures alone on stdout; anything else printed meanwhile (Ray's messages about
        # its workers, a library's own prints) goes to stderr
        args.json_out = sys.stdout
        with contextlib.redirect_stdout(sys.stderr) if getattr(args, "json", False) else contextlib.nullcontext():
            return getattr(module, f"cmd_{args.command}")(args)
    except UsageError as exc:
        print(f"hqflow: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        from hqflow.backends import BackendError

        from .train import RunStopped
        from hqflow.common.remote import RayFailure
        from hqflow.engine.fragments import FragmentError

        if not isinstance(exc, (RunStopped, FragmentError, BackendError, RayFailure)):  # a failure, not a usage error
            raise  # a bug: its traceback
        print(f"hqflow: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of stdout left (``hqflow backends | head``): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor one at exit, flushing to it
        return 1
    except KeyboardInterrupt as exc:  # a command that can be continued says how
        from hqflow.backends import threads

        threads.hurry()  # the exit does not wait for work still running
        print(f"hqflow: {str(exc) or 'interrupted'}", file=sys.stderr)
        return 130
