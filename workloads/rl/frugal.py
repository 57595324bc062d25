"""What an RL training costs on a paid target: the estimator's settings for ``--objective cost``, chosen in closed
form within the user's bounds (``choose``, ``policy_config``); the target checked before a run (``check_target``);
and what a dry run's updates say of the whole run (``projection``).

``choose(backend, one_row, parameters, bounds, ...)`` reads only the backend protocol (``capabilities``,
``usage``, ``estimate_cost``, ``priced``) and the policy circuit: its parameter count P (inputs and weights) and
a one-row batch of it.

* **gradient**: of the allowed ones, the fewest circuits per state: parameter shift's 1 + 2P, or SPSA's 2k at the
  smallest allowed k (a tie keeps parameter shift, which is exact);
* **shots**: the largest in the range whose one-row price equals the price at the range's lower bound (a per-job
  minimum makes shots free up to it), so the lower bound where the price rises from the first shot, and the upper
  bound where jobs are free or unpriced; capped by ``capabilities.max_shots``;
* **packing**: all of a step's rows in one job (``rows_per_job`` None) and one actor group (``groups=1``): one
  job per step round, as few service jobs as the backend packs.

A setting without a bound stays as configured: the cost objective trades away no learning quality that the user
did not offer. Whether the choice still learns is the user's bound to set.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hqflow.backends import BackendError, CircuitBatch, as_backend, preflight
from hqflow.gradients import GRADIENTS, GradientMethod
from hqflow.workloads.rl.policies import policy_rows


@dataclass(frozen=True)
class Bounds:
    """What the user offers to trade: the gradients allowed, a shots range, an SPSA samples range (None: keep)."""

    gradients: tuple[str, ...] | None = None
    shots: tuple[int, int] | None = None
    spsa_samples: tuple[int, int] | None = None

    def __post_init__(self):
        if self.gradients is not None and (not self.gradients or set(self.gradients) - set(GRADIENTS)):
            raise ValueError(f"gradients must be some of {', '.join(GRADIENTS)}, got {self.gradients!r}")
        for name, bound in (("shots", self.shots), ("spsa_samples", self.spsa_samples)):
            if bound is not None and not (isinstance(bound, tuple) and len(bound) == 2 and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in bound) and 1 <= bound[0] <= bound[1]):
                raise ValueError(f"{name} must be (lo, hi) with 1 <= lo <= hi integers, got {bound!r}")


@dataclass(frozen=True)
class Frugal:
    """The chosen settings, a reason for each, and what one state (an environment step) uses with them."""

    gradient: str
    shots: int | None
    spsa_samples: int
    reasons: dict = field(compare=False)
    """setting -> why (``gradient``, ``shots``, ``spsa_samples``, ``packing``)"""
    circuits_per_state: float = 0.0
    shots_per_state: float = 0.0
    service_jobs_per_state: float | None = None
    """None where a submitted job is one service job whatever its rows (the plan's prediction counts them)"""
    cost_per_state: float | None = None
    """list price, one circuit a job (an upper bound where the backend packs); None where unpriced"""
    currency: str | None = None
    groups: int = 1

    def settings(self) -> dict:
        """The config fields this choice sets (``groups`` where the algorithm has it)."""
        return {"gradient": self.gradient, "shots": self.shots, "spsa_samples": self.spsa_samples,
                "groups": self.groups}

    def per_episode(self, length: float) -> dict:
        """The predicted use of one episode of ``length`` states."""
        scale = lambda x: None if x is None else x * length  # noqa: E731
        return {"circuits": scale(self.circuits_per_state), "shots": scale(self.shots_per_state),
                "service_jobs": scale(self.service_jobs_per_state), "cost": scale(self.cost_per_state),
                "currency": self.currency}


def _gradient(parameters: int, bounds: Bounds, gradient: str, k: int) -> tuple[str, int, str, str]:
    """``(gradient, k, why the gradient, why k)``."""
    low = k if bounds.spsa_samples is None else bounds.spsa_samples[0]
    shift, spsa = GradientMethod.PARAM_SHIFT, GradientMethod.SPSA
    offered = {shift: 1 + 2 * parameters, spsa: 2 * low}
    if bounds.gradients is None:
        chosen, why = gradient, f"{gradient}: as configured (no gradients offered)"
    else:
        chosen = min((g for g in GRADIENTS if g in bounds.gradients), key=offered.get)  # a tie: parameter shift
        how = f"1 + 2 x {parameters} parameters" if chosen is shift else f"2 x {low} directions"
        others = "".join(f", against {g}'s {offered[g]}" for g in bounds.gradients if g != chosen)
        why = f"{chosen}: {offered[chosen]} circuits per state ({how}){others}"
    if chosen != spsa or bounds.spsa_samples is None:
        return chosen, k, why, f"{k}: as configured" + ("" if chosen == spsa else f" (unused by {chosen})")
    return chosen, low, why, f"{low}: the fewest in the range"


def _price(backend, one_row: CircuitBatch, shots: int | None):
    """The backend's ``Cost`` of ``one_row`` at ``shots``; None where it does not price its jobs."""
    return backend.estimate_cost(replace(one_row, shots=shots)) if backend.priced else None


def _shots(backend, one_row: CircuitBatch, bounds: Bounds, shots: int | None) -> tuple[int | None, str]:
    """``(shots, why)``."""
    if bounds.shots is None:
        return shots, f"{shots if shots is not None else 'exact'}: as configured (no shots range offered)"
    lo, hi = bounds.shots
    cap = backend.capabilities.max_shots
    if cap is not None and lo > cap:
        raise ValueError(f"the shots range starts at {lo}, above the most shots {backend.name} takes a circuit, {cap}")
    capped = f" (capped at {backend.name}'s most, {cap})" if cap is not None and hi > cap else ""
    hi = hi if cap is None else min(hi, cap)
    if not backend.priced:
        return hi, f"{hi}: {backend.name} does not price its jobs, so the most in the range{capped}"
    try:
        at_lo = _price(backend, one_row, lo)
        floor, price = at_lo.amount, f"{at_lo.amount:.4g} {at_lo.currency}"
        good, bad = lo, hi + 1  # the price is monotone in shots: the largest at the lower bound's price
        while bad - good > 1:
            mid = (good + bad) // 2
            flat = _price(backend, one_row, mid).amount <= floor + 1e-9 * max(1.0, abs(floor))
            good, bad = (mid, bad) if flat else (good, mid)
    except BackendError as exc:
        return hi, f"{hi}: {backend.name} cannot price this circuit ({exc}), so the most in the range{capped}"
    if good == hi:
        return hi, f"{hi}: a circuit costs {price} at any shots in the range, so the most{capped}"
    if good == lo:
        return lo, f"{lo}: a circuit's price rises from the lower bound's {price}, so the fewest"
    return good, (f"{good}: the most shots at the lower bound's price, {price} a circuit (a per-job minimum: "
                  f"fewer save nothing, more cost more)")


def choose(backend, one_row: CircuitBatch, parameters: int, bounds: Bounds = Bounds(), *, gradient: str = GradientMethod.PARAM_SHIFT,
           shots: int | None = None, spsa_samples: int = 2,
           circuits_per_state: Callable[[int], float] = lambda rows: 1 + rows) -> Frugal:
    """The settings the module docstring says, from ``gradient``, ``shots`` and ``spsa_samples`` as configured.
    ``circuits_per_state(gradient_rows)``: circuits an environment step costs (default: one to act and the
    gradient's rows)."""
    backend = as_backend(backend)
    if one_row.size != 1:
        raise ValueError(f"one_row must be a batch of one row, got {one_row.size}")
    if isinstance(parameters, bool) or not isinstance(parameters, int) or parameters < 0:
        raise ValueError(f"parameters must be an integer >= 0, got {parameters!r}")
    chosen, k, why_gradient, why_k = _gradient(parameters, bounds, gradient, spsa_samples)
    n, why_shots = _shots(backend, one_row, bounds, shots)
    caps, used = backend.capabilities, backend.usage(replace(one_row, shots=n))
    rows = circuits_per_state(2 * k if chosen == GradientMethod.SPSA else 1 + 2 * parameters)
    try:
        cost = _price(backend, one_row, n)
    except BackendError:  # (said in the shots' reason where a range was offered)
        cost = None
    per = "" if caps.service_job_rows is None else (
        "; one service job per circuit" if caps.service_job_rows == 1 else
        f"; up to {caps.service_job_rows} rows per service job")
    reasons = {"gradient": why_gradient, "shots": why_shots, "spsa_samples": why_k,
               "packing": f"all of a step's rows in one job and one actor group: one job per step round{per}"}
    return Frugal(chosen, n, k, reasons, rows * used.circuits, rows * used.shots,
                  None if caps.service_job_rows is None else rows * used.service_jobs / caps.service_job_rows,
                  None if cost is None else rows * cost.amount, None if cost is None else cost.currency)


def policy_config(mod, cfg, backend, bounds: Bounds, say=lambda text: print(text, file=sys.stderr)):
    """``cfg`` (of the algorithm module ``mod``) with the settings ``choose`` makes for ``backend`` (the pool's first
    member) within ``bounds``; ``say`` gets each choice, its reason and the predicted use per state and episode.
    A ``ValueError`` (one line) where nothing can be chosen."""
    one = policy_rows(mod.make_policy(cfg))
    try:
        chosen = choose(backend, one, one.template.n_inputs + one.template.n_weights, bounds, gradient=cfg.gradient,
                        shots=cfg.shots, spsa_samples=cfg.spsa_samples,
                        circuits_per_state=lambda rows: mod.circuits_per_step(cfg, rows))
        settings = {k: v for k, v in chosen.settings().items() if hasattr(cfg, k)}
        if getattr(cfg, "groups", None) is not None:  # set by the user: kept
            settings["groups"] = cfg.groups
        cfg = replace(cfg, **settings)
    except (BackendError, TypeError, ValueError) as exc:
        raise ValueError(f"--objective cost: {exc}") from None
    lines = [f"  {k:<13} {chosen.reasons[k]}" for k in ("gradient", "spsa_samples", "shots", "packing")]
    if settings.get("groups", 1) != 1:
        lines[-1] += f" (but {settings['groups']} actor groups, as configured)"
    longest = cfg.spec.max_episode_steps()
    for label, length in (("per state", 1), (f"per episode of {longest} steps (the longest)", longest)):
        if length:
            lines.append(f"  {label}: {_use(chosen.per_episode(length))}")
    say("hqflow: --objective cost chose:\n" + "\n".join(lines))
    return cfg


def check_target(members, mod, cfg, needs_price: str | None = None, warn=lambda text: print(
        f"hqflow: warning: {text}; its jobs' cost is reported as unknown", file=sys.stderr)) -> None:
    """Before a run of ``mod`` (an algorithm's module) with ``cfg``: a one-line ``ValueError`` where a member
    refuses the policy circuit's shots, or has no price where ``needs_price`` (what needs one: ``"--budget"``)
    is given; ``warn`` gets each member without a price otherwise."""
    for refused, unpriced in (preflight(b, policy_rows(mod.make_policy(cfg))) for b in members):
        if refused or (unpriced and needs_price):
            raise ValueError(refused or f"{needs_price} needs a price: {unpriced}")
        if unpriced:
            warn(unpriced)


def projection(out: dict, cfg, longest: int | None, circuits_per_step: float) -> dict:
    """What a dry run's updates (``runner.train``'s ``out``) say of the whole run: per episode, over
    ``cfg.max_episodes`` at the dry run's episode lengths, and the bound where every episode lasts ``longest``
    steps."""
    used, episodes = out["usage"], max(1, len(out["returns"]))
    per = {"list_cost" if k == "cost" else k: v / episodes for k, v in used.items()
           if k not in ("currency", "failed_service_jobs")}
    steps = out["env_steps"] / episodes
    figures = {"dry_run_updates": out["updates"], "dry_run_episodes": len(out["returns"]),
               "mean_episode_length": round(steps, 1), "circuits_per_env_step": round(circuits_per_step, 2)}
    figures |= {f"{k}_per_episode": round(v, 4) for k, v in per.items()}
    figures |= {f"{k}_for_{cfg.max_episodes}_episodes": round(v * cfg.max_episodes, 2) for k, v in per.items()}
    if longest:
        scale = longest / max(steps, 1e-9)  # a learning policy's episodes grow: the bound at the longest
        figures |= {f"{k}_bound_at_{longest}_steps": round(v * scale * cfg.max_episodes, 2) for k, v in per.items()}
    figures["currency"] = used["currency"]
    return figures


def _use(used: dict) -> str:
    """Predicted use as text: circuits, shots, service jobs and list price where known."""
    def n(x: float) -> str:
        return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"

    text = f"{n(used['circuits'])} circuits, {n(used['shots'])} shots"
    if used["service_jobs"] is not None:
        text += f", {n(used['service_jobs'])} service jobs"
    if used["cost"] is not None:
        text += f", {used['cost']:,.2f} {used['currency']} at list price"
    return text


__all__ = ["GRADIENTS", "Bounds", "Frugal", "check_target", "choose", "policy_config", "projection"]
