"""The CLI's settings of what a run costs on a paid target: shots, the gradient estimator, a shot budget.

``hqflow train`` takes them as flags (the same as ``--set shots=N`` and so on); ``add_cost_arguments`` adds
the group and ``cost_overrides`` reads it back.
"""
from __future__ import annotations

import argparse


def _at_least(low: int, expected: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
        return value
    return parse


def _epsilon(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 3.2], got {text!r}") from None
    if not 0 < value <= 3.2:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 3.2], got {text!r}")
    return value


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """The group of flags: ``--shots``, ``--gradient``, ``--spsa-samples``, ``--spsa-epsilon``, ``--shot-budget``."""
    group = parser.add_argument_group("cost on a paid target", "shots, the gradient estimator and a shot budget "
                                      "(README: Train on a paid target)")
    group.add_argument("--shots", type=_at_least(1, "a positive number of shots"), help="shots per circuit on any "
                       "backend (default: exact values where the backend has them)")
    group.add_argument("--gradient", choices=["param-shift", "spsa"], help="the policy circuit's gradient: "
                       "param-shift (default; 1 + 2 x parameters circuits per state) or spsa (2 x --spsa-samples "
                       "circuits per state, an estimate)")
    group.add_argument("--spsa-samples", type=_at_least(1, "a positive number of directions"), metavar="K",
                       help="spsa: random directions per update (default 2)")
    group.add_argument("--spsa-epsilon", type=_epsilon, metavar="E", help="spsa: perturbation size (default 0.1)")
    group.add_argument("--shot-budget", type=_at_least(1, "a positive number of shots"), metavar="N",
                       help="the most shots the run may use; past it the run stops, checkpointed")


def cost_overrides(args) -> dict:
    """The config fields these flags set (those given)."""
    given = {"shots": args.shots, "gradient": args.gradient, "spsa_samples": args.spsa_samples,
             "spsa_epsilon": args.spsa_epsilon}
    return {k: v for k, v in given.items() if v is not None}


def add_dry_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="submit nothing: run a few updates on dry-run:BACKEND "
                        "(each job priced by the real target, answered by a local simulator) and print what the "
                        "run would use: service jobs, circuits, shots and list price, per episode and projected")
    parser.add_argument("--dry-run-updates", type=_at_least(1, "a positive number of updates"), default=1,
                        metavar="N", help="with --dry-run: updates to run (default 1)")


def dry_run_tally():
    """Register ``dry-run:<backend>`` for this process with a fresh ``Tally`` (every job priced into it, none
    submitted) and return the tally."""
    from hqflow.backends import register_backend
    from hqflow.backends.dryrun import DryRunBackend, Tally

    tally = Tally()
    register_backend("dry-run", lambda target=None, **o: DryRunBackend(target, tally, **o), listed=False,
                     suffix="target")
    return tally


def projection(out: dict, cfg, longest: int | None, circuits_per_step: float) -> dict:
    """What a dry run's updates say of the whole run: per episode, over ``cfg.max_episodes`` at the dry run's
    episode lengths, and the bound where every episode lasts ``longest`` steps."""
    used, episodes = out["usage"], max(1, len(out["returns"]))
    per = {k: v / episodes for k, v in used.items() if k not in ("currency", "failed_service_jobs")}
    steps = out["env_steps"] / episodes
    figures = {"dry_run_updates": out["updates"], "dry_run_episodes": len(out["returns"]),
               "mean_episode_length": round(steps, 1), "circuits_per_env_step": round(circuits_per_step, 2)}
    for k, v in per.items():
        figures[f"{k}_per_episode"] = round(v, 4)
    for k, v in per.items():
        figures[f"{k}_for_{cfg.max_episodes}_episodes"] = round(v * cfg.max_episodes, 2)
    if longest:
        scale = longest / max(steps, 1e-9)  # a learning policy's episodes grow: the bound at the longest
        for k, v in per.items():
            figures[f"{k}_bound_at_{longest}_steps"] = round(v * scale * cfg.max_episodes, 2)
    figures["currency"] = used["currency"]
    return figures
