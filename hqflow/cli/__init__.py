"""The ``hqflow`` command line: ``backends``, ``inspect``, ``run``, ``plan``, ``trace``, ``train`` and
``eval`` (README "Command line"); ``train`` and ``eval`` are in ``cli_train``, ``plan`` in ``cli_plan``.

Bad usage or bad input, found before any job runs, exits with status 2 and a one-line message on
stderr. A run that fails exits with status 1 and one line: a fragment's error, a job out of retries,
or a backend that refused the credentials or could not be reached (those end the run at once).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import sys

from hqflow.ir.text import one_line

from .. import __version__
from .cost import (OBJECTIVES, _amount, _at_least, add_cost_arguments, add_dry_run_arguments, add_frugal_arguments,
                   cost_overrides, dry_run_tally)
from .plan import _spans, cmd_plan, fold, made, make_plan, with_options
from .pool import (UsageError, backend_pool, choice, key_value, make_folder, make_member, output, show_figures,
                   warn_secrets)
from ..common.files import atomic_text
from ..gradients import GradientMethod


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


def cmd_backends(args) -> int:
    from hqflow.backends import backend_names, make_backend

    azure = dict(key_value(item, "--azure-opt", parse=str) for item in args.azure_opt)  # values as text
    warn_secrets(azure, "--azure-opt")
    for name in backend_names():
        try:
            backend = make_backend(name)
            caps = backend.capabilities
            backend.close()  # made only to ask
        except Exception as exc:  # a missing plugin or device shows as unavailable
            _unavailable(args, name, str(exc))
            continue
        _line(args, {"name": name, "available": True, **dataclasses.asdict(caps)}, f"{name:<28} {caps.describe()}")
    _azure_targets(args, azure)
    return 0


def _line(args, record: dict, text: str) -> None:
    """One line of ``hqflow backends``: ``record`` with --json, else ``text``."""
    print(json.dumps(record) if args.json else text, file=args.json_out)


def _unavailable(args, name: str, reason: str) -> None:
    reason = reason.splitlines()[0]
    _line(args, {"name": name, "available": False, "reason": reason}, f"{name:<28} unavailable: {reason}")


def _azure_targets(args, options: dict) -> None:
    """The targets of the configured Azure Quantum workspace, or, in one line, why none (the settings unset)."""
    from hqflow.backends import BackendError
    from hqflow.backends.azure.backend import AzureBackend

    try:
        found = AzureBackend("any", **options).targets()
    except (BackendError, TypeError) as exc:
        return _unavailable(args, "azure:<target>", str(exc))
    for provider, target, status in found:
        _line(args, {"name": f"azure:{target}", "available": status == "Available", "provider": provider,
                     "status": status}, f"{f'azure:{target}':<28} {status} (provider {provider})")


def cmd_inspect(args) -> int:
    from hqflow.ir.graph import Graph, GraphError

    from ..pipeline import registry_backends
    from ..trace import read_text

    try:
        graph = Graph.from_json(read_text(args.graph, "a graph document (JSON)"))
        graph.validate(registry_backends(graph), resolve=not args.no_resolve)
    except GraphError as exc:
        hint = ("; --no-resolve checks the graph without importing its functions"
                if not args.no_resolve and "cannot import function" in str(exc) else "")
        raise UsageError(f"{args.graph}: {exc}{hint}") from None
    except ValueError as exc:  # read_text's: no such file, not text
        raise UsageError(str(exc)) from None
    print(graph)
    if args.png:
        print(f"drew {one_line(graph.draw(args.png))}")
    return 0


def cmd_run(args) -> int:
    from hqflow.workloads import get_workload

    from .progress import Progress

    module = get_workload(args.workload)  # a known name: argparse's type checked it
    cfg = _run_config(args, module)
    tally = None
    if args.dry_run:  # cfg on dry-run:<its backend>, which prices every job into the tally and submits none
        if not hasattr(cfg, "backend"):
            raise UsageError(f"workload {args.workload!r} runs no quantum jobs to price")
        tally, cfg = dry_run_tally(), dataclasses.replace(cfg, backend=f"dry-run:{cfg.backend}")  # registered first
    with _run_options(args, module, cfg) as options, Progress(getattr(cfg, "steps", 1), args.workload) as bar:
        result = module.run(cfg, progress=bar, **options)
    if args.plan:
        fold(args.profile, _spans(result))
    if tally is not None:
        print(json.dumps(tally.figures()) if args.json else tally.table(), file=args.json_out)
        return 0
    figures = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
    show_figures(args, figures, 24)  # first: a file that cannot be written after all loses no figures
    try:
        if args.out:
            atomic_text(args.out, json.dumps(result, indent=2, default=float))
        if args.run_dir:
            _write_run_dir(args.run_dir, args.workload, cfg, result)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename}: {exc.strerror}") from None
    return 0


def _run_config(args, module):
    """The workload's ``Config`` with --steps, --seed, --backend and the gradient and shots flags given."""
    cfg, given = with_options(args.workload, module.Config(), args), cost_overrides(args)
    flag = {field: "--" + field.replace("_", "-") for field in given}
    for field in given:
        if not hasattr(cfg, field):
            raise UsageError(f"workload {args.workload!r} has no setting for {flag[field]}")
    try:
        cfg = dataclasses.replace(cfg, **given)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"workload {args.workload!r}: {exc}") from None
    spsa_only = [flag[f] for f in ("spsa_samples", "spsa_epsilon") if f in given]
    if spsa_only and getattr(cfg, "gradient", None) != GradientMethod.SPSA:
        raise UsageError(f"{spsa_only[0]} goes with --gradient spsa")
    return cfg


@contextlib.contextmanager
def _run_options(args, module, cfg):
    """The keywords of the workload's ``run`` besides ``progress``: ``backends`` (--pool, --backend-opt)
    and ``plan`` (--plan auto, made and printed to stderr here, its members made once for it and the run)."""
    options = {}
    if (args.pool or args.backend_opt) and not hasattr(cfg, "backend"):
        raise UsageError(f"workload {args.workload!r} runs no quantum jobs for a pool")
    if (args.pool or args.backend_opt) and not args.plan:
        # under --dry-run every member is a dry-run:<backend> with the member's options: priced, never submitted
        options["backends"] = {cfg.backend: backend_pool(args, name=cfg.backend if args.dry_run else None)}
    given = [flag for flag, on in (("--profile", args.profile), ("--max-staleness", args.max_staleness is not None),
                                   ("--objective", args.objective)) if on]
    if given and not args.plan:
        raise UsageError(f"{given[0]} goes with --plan auto")
    if not args.plan:
        yield options
        return
    if args.dry_run or not hasattr(cfg, "backend"):
        raise UsageError("--plan auto needs a workload that runs quantum jobs, and no --dry-run")
    with made(args, cfg.backend) as options["backends"]:
        options["plan"] = make_plan(module, cfg, options["backends"], profile_path=args.profile,
                                    max_staleness=args.max_staleness, objective=args.objective or "time")
        print(f"{options['plan']}\n", file=sys.stderr)
        yield options


def _write_run_dir(folder: str, workload: str, cfg, result: dict) -> None:
    """config.json, result.json and, if the result carries ``"spans"`` (span dicts), spans.json."""
    from ..trace import save_spans

    config = dataclasses.asdict(cfg)
    atomic_text(os.path.join(folder, "config.json"), json.dumps(config, indent=2, default=float))
    rest = {k: v for k, v in result.items() if k != "spans"}
    atomic_text(os.path.join(folder, "result.json"), json.dumps(rest, indent=2, default=float))
    if "spans" in result:
        save_spans(os.path.join(folder, "spans.json"), _spans(result), {"workload": workload, "config": config})


def cmd_trace(args) -> int:
    from ..trace import TraceError, format_table, load_spans
    from ..trace.export import draw_gantt, write_chrome_trace

    path = os.path.join(args.run, "spans.json") if os.path.isdir(args.run) else args.run
    if not os.path.exists(path):
        what = "run directory has no spans.json" if os.path.isdir(args.run) else "no such run directory or file"
        raise UsageError(f"{args.run}: {what}")
    try:
        spans, meta = load_spans(path)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    out = args.out or os.path.dirname(os.path.abspath(path))
    make_folder(out, "")
    print(format_table(spans))
    title = meta.get("workload") or os.path.basename(os.path.dirname(os.path.abspath(path)))
    print(f"wrote {one_line(write_chrome_trace(os.path.join(out, 'trace.json'), spans, meta))}")
    print(f"wrote {one_line(draw_gantt(spans, os.path.join(out, 'gantt.png'), title=one_line(str(title))))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        from .train import cmd_eval, cmd_train

        commands = {"backends": cmd_backends, "inspect": cmd_inspect, "run": cmd_run, "trace": cmd_trace,
                    "train": cmd_train, "eval": cmd_eval, "plan": cmd_plan}
        # --json: the figures alone on stdout; anything else printed meanwhile (Ray's messages about
        # its workers, a library's own prints) goes to stderr
        args.json_out = sys.stdout
        with contextlib.redirect_stdout(sys.stderr) if getattr(args, "json", False) else contextlib.nullcontext():
            return commands[args.command](args)
    except UsageError as exc:
        print(f"hqflow: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        from hqflow.backends import BackendError

        from .train import RunStopped
        from ..common.remote import RayFailure
        from ..engine.fragments import FragmentError

        if not isinstance(exc, (RunStopped, FragmentError, BackendError, RayFailure)):  # a failure, not a usage error
            raise  # a bug: its traceback
        print(f"hqflow: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # a command that can be continued says how
        from hqflow.backends import threads

        threads.hurry()  # the exit does not wait for work still running
        print(f"hqflow: {str(exc) or 'interrupted'}", file=sys.stderr)
        return 130
