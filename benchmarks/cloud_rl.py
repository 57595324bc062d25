"""RL on a paid QPU under its noise: circuits, list price per step and per solved run, by gradient and sharing.

    python benchmarks/cloud_rl.py [--quick] [--seeds N] [--episodes 1000] [--variants A,B] [--workers 2]
                                  [--spsa-samples 8] [--no-sim-to-qpu] [--keep DIR] [--twin-as-mux]

REINFORCE on CartPole-v1 (the default 4-qubit, 5-layer policy: 92 circuit parameters), 10 environments stepped
together (autoreset) in one group, 10 episodes per update, ``--distribution sync`` (a run is a function of its
seed: shots and noise are seeded per row), at 1,000 shots, on the emulated QPU priced as IonQ Aria (debiasing on:
a $97.50 minimum per circuit) **under the Aria noise model** (``noise=ionq.qpu.aria-1``: depolarizing gates and
readout error from IonQ's published fidelities). Each run is ``hqflow train`` in its own process. The variants:

* ``baseline``: parameter shift, one circuit per job, noiseless, as the last wave ran it: it learns in process
  (autograd is parameter shift's exact gradient) and is priced at its circuits, 186 per env step
  (``runner.circuits_per_env_step``), each an Aria circuit at 1,000 shots.
* ``ps_noisy``: parameter shift under the Aria noise: it learns in process on the ``density`` simulator (the exact
  gradient of the noisy values, which parameter shift estimates; its shot noise is not modelled) and is priced
  as ``baseline``.
* ``twin``: the QPU acts (one circuit per env step, 1,000 shots, noisy); the learner differentiates the local
  twin under the same noise model (``--gradient twin --twin-noise``).
* ``twin_mux``: ``twin`` with rows that share a circuit (``share=auto``: 6 rows of 4 qubits on Aria's 25).
* ``spsa_packed``: SPSA (``--spsa-samples`` directions, 2 circuits each per row) at 1,000 shots, noisy, packed.

Solved: the run's criterion (the mean return of the last 10 episodes reaches the env's threshold) within
``--episodes``. Per solved run: what all seeds' runs cost (each until it solved, or to the end) over the runs that
solved. ``usd_reduction``: baseline's per solved run over the best variant's (the cheapest that solves 4 of 5;
with fewer seeds, two thirds); ``usd_reduction_per_step`` the same per env step (``--quick`` reports it); both
again with debiasing off (Aria's $12.4166 minimum: its gate-shots, $39.74 a circuit here, then bind).

``twin_cosine_median``: over states of a rollout, the cosine between the twin's gradient of log π(a|s) (the
``density`` simulator under the noise model) and parameter shift's on the noisy emulated QPU at 1,000 shots
(``twin_cosine_median_noiseless_twin``: with the noiseless compiled twin). ``sim_to_qpu``: the best twin run's
policy (pretrained free on the noisy emulator) evaluated greedily for 10 episodes on the Aria-priced, noisy
emulated QPU at 1,000 shots with shared circuits: the mean return and the list price.

``--keep DIR`` keeps the run directories there (each with its ``result.json``) and reuses the runs it finds
finished (unfinished ones resume from their last checkpoint, bit for bit), so a long benchmark stopped part way
goes on where it was. ``--quick`` (under 300 s on 2 cores): 2 seeds, 20 episodes: the per-step circuits and prices of every variant.
``--twin-as-mux`` takes ``twin``'s runs from ``twin_mux``'s, repriced: sharing a circuit changes no value (the
differential tests), so the two learn bit for bit alike; ``twin``'s circuits are its rows, one job per step of the
10 envs, each row an Aria circuit alone. Where a seed has both runs kept, their learning columns and the repricing
are checked equal first (``twin_as_mux_checked``). It saves ``twin``'s hours of emulated-QPU runs.
The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ("baseline", "ps_noisy", "twin", "twin_mux", "spsa_packed")
ARIA = "ionq.qpu.aria-1"
COMMON = ["cartpole", "--set", "batch_episodes=10", "--set", "num_envs=10", "--set", "groups=1", "--set",
          "autoreset=true", "--distribution", "sync", "--json", "--no-tensorboard", "--checkpoint-every", "1"]
SHOTS = 1000


def _opts(*pairs: str) -> list[str]:
    return [a for p in pairs for a in ("--backend-opt", p)]


def qpu(share: bool = False) -> list[str]:
    """The emulated QPU: priced as Aria at 1,000 shots, under Aria's noise model (optionally sharing circuits)."""
    return ["--backend", "emulated-qpu", *_opts("wrapped=compiled", f"price_as={ARIA}", f"price_shots={SHOTS}",
                                                f"noise={ARIA}", *(["share=auto"] if share else []))]


def command(variant: str, seed: int, episodes: int, args) -> list[str]:
    """The ``hqflow train`` arguments of one run."""
    cmd = [*COMMON, "--seed", str(seed), "--episodes", str(episodes)]
    if variant == "baseline":
        return cmd + ["--backend", "compiled"]
    if variant == "ps_noisy":
        return cmd + ["--backend", f"density:{ARIA}"]
    cmd += ["--shots", str(SHOTS)]
    if variant.startswith("twin"):
        return cmd + ["--gradient", "twin", "--twin-noise", ARIA] + qpu(share=variant == "twin_mux")
    return cmd + ["--gradient", "spsa", "--spsa-samples", str(args.spsa_samples)] + qpu()


def train(cmd: list[str], run_dir: str) -> dict:
    done = os.path.join(run_dir, "result.json")
    if os.path.exists(done):  # (--keep: a run of an earlier, stopped invocation)
        with open(done) as f:
            return json.load(f)
    t0 = time.perf_counter()
    if os.path.exists(os.path.join(run_dir, "checkpoint.pt")):  # a run cut short: resumed (bit for bit)
        argv = ["--resume", run_dir, *(a for a in COMMON[COMMON.index("--json"):])]
    else:
        if os.path.exists(run_dir):  # stopped before its first checkpoint: again, from the start
            import shutil

            shutil.rmtree(run_dir)
        argv = [*cmd, "--run-dir", run_dir]
    proc = subprocess.run([sys.executable, "-m", "hqflow.cli", "train", *argv],
                          capture_output=True, text=True, timeout=6 * 3600)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1], "wall": time.perf_counter() - t0}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        out["rows"] = [json.loads(line) for line in f if line.strip()]
    out["run_dir"], out["wall"] = run_dir, time.perf_counter() - t0
    with open(done, "w") as f:
        json.dump(out, f)
    return out


def prices() -> dict:
    """Aria's list price of the policy circuit at 1,000 shots: one circuit alone, and k rows sharing one circuit,
    debiasing on and off; the baseline's circuits per env step."""
    import numpy as np
    from hqflow.backends import CircuitBatch
    from hqflow.backends.azure.cost import list_price
    from hqflow.workloads.rl import reinforce, runner
    from hqflow.workloads.rl.policies import pqc_template

    cfg = reinforce.Config()
    t = pqc_template(4, cfg.n_layers)
    one = CircuitBatch.make(t, np.zeros((1, t.n_inputs)), np.zeros(t.n_weights))
    ten = CircuitBatch.make(t, np.zeros((10, t.n_inputs)), np.zeros(t.n_weights))  # a step of the 10 envs
    shared = [list_price(ARIA, ten, shots=SHOTS, share="auto", debias=d).amount for d in (None, False)]
    return {"circuits_per_step": runner.circuits_per_env_step("reinforce", cfg)[0],
            "usd": list_price(ARIA, one, shots=SHOTS).amount,
            "usd_off": list_price(ARIA, one, shots=SHOTS, debias=False).amount,
            "shared_off_ratio": shared[1] / shared[0]}


def _cumulative(run: dict) -> list[tuple[int, int, float, int]]:
    """Per update: (episodes, env steps, list price so far, circuits so far)."""
    return [(row["episodes"], row["env_steps"], row.get("list_cost_total", 0.0), row.get("circuits_total", 0))
            for row in run["rows"]]  # (metrics.jsonl's episodes and env steps are the run's so far)


def figures_of(variant: str, runs: list[dict], episodes: int, p: dict) -> dict:
    """A variant's figures over its seeds' runs."""
    ok = [r for r in runs if "error" not in r]
    in_process = variant in ("baseline", "ps_noisy")
    spent = spent_off = steps = circuits = eps = 0.0
    solved = []
    for r in ok:
        rows = _cumulative(r)
        at = r["episodes_to_solve"]
        cut = next((k for k, (e, *_) in enumerate(rows) if at is not None and e >= at), len(rows) - 1)
        e, s, usd, c = rows[cut] if rows else (0, 0, 0.0, 0)
        if in_process:  # its circuits are parameter shift's per env step, each an Aria circuit
            c = p["circuits_per_step"] * s
            usd, usd_off = c * p["usd"], c * p["usd_off"]
        else:  # debias off: every job is a step of the 10 envs, alone (1 row a circuit) or shared (6 and 4)
            usd_off = usd * (p["shared_off_ratio"] if variant == "twin_mux" else p["usd_off"] / p["usd"])
        spent, spent_off, steps, circuits, eps = spent + usd, spent_off + usd_off, steps + s, circuits + c, eps + e
        if at is not None and at <= episodes:
            solved.append(at)
    median = statistics.median([*solved, *[float("inf")] * (len(runs) - len(solved))]) if runs else float("inf")
    return {"solved": len(solved), "median_episodes": None if median == float("inf") else median,
            "circuits_per_step": round(circuits / max(1, steps), 3), "usd_per_step": round(spent / max(1, steps), 2),
            "usd_per_episode": round(spent / max(1, eps), 2),
            "usd_per_solved_run": round(spent / len(solved), 2) if solved else None,
            "usd_per_step_debias_off": round(spent_off / max(1, steps), 2),
            "usd_per_solved_run_debias_off": round(spent_off / len(solved), 2) if solved else None,
            "errors": [r["error"] for r in runs if "error" in r]}


LEARNING = ("update", "episodes", "returns", "lengths", "env_steps", "loss", "service_jobs", "service_jobs_total")
PRICED = ("circuits", "circuits_total", "shots", "shots_total", "list_cost", "list_cost_total", "spend", "seconds")


def twin_from_mux(mux: dict, usd: float, rows_per_job: int = 10) -> dict:
    """``twin``'s run as ``twin_mux``'s run repriced: each job's rows are circuits alone, at ``usd`` each."""
    def reprice(row: dict) -> dict:
        jobs, total = row["service_jobs"], row["service_jobs_total"]
        return {k: v for k, v in row.items() if k not in PRICED} | {
            "circuits": rows_per_job * jobs, "circuits_total": rows_per_job * total,
            "list_cost": usd * rows_per_job * jobs, "list_cost_total": usd * rows_per_job * total}
    return {**mux, "rows": [reprice(row) for row in mux["rows"]], "derived_from": mux["run_dir"]}


def check_twin_from_mux(twin: dict, mux: dict, usd: float) -> None:
    """A kept ``twin`` run equals ``twin_mux``'s repriced, update by update: the learning columns and the circuits
    exactly, the list price to 1e-6."""
    derived = twin_from_mux(mux, usd)["rows"]
    same = len(derived) == len(twin["rows"]) and all(
        all(a[k] == b[k] for k in (*LEARNING, "circuits_total")) and abs(a["list_cost_total"] - b["list_cost_total"])
        <= 1e-6 for a, b in zip(twin["rows"], derived))
    if not same:
        raise SystemExit(f"--twin-as-mux: {twin['run_dir']} is not {mux['run_dir']} repriced")


def twin_cosine(folder: str, states: int = 24) -> dict:
    """The cosine, per sampled state, between the twin's gradient of log π(a|s) and parameter shift's on the noisy
    emulated QPU at 1,000 shots (median), at the initial policy's parameters, for a noisy and a noiseless twin."""
    import numpy as np
    import torch
    from hqflow.torch import seeded
    from hqflow.workloads.rl import reinforce
    from hqflow.workloads.rl.policies import learning_on_twin

    qpu_spec = ("emulated-qpu", {"wrapped": "compiled", "noise": ARIA, "seed": 1})
    cfg = reinforce.resolve(reinforce.Config(seed=3, dtype="float64", batch_episodes=2), in_process=True)
    policy = reinforce.make_policy(cfg, "compiled")
    batch, _ = reinforce.act(policy, reinforce.make_envs(cfg), cfg, 0, None)
    pick = np.random.default_rng(0).choice(batch.n_steps, size=min(states, batch.n_steps), replace=False)
    s, a = torch.from_numpy(batch.states[pick]), torch.from_numpy(batch.actions[pick])

    def grads(make) -> np.ndarray:
        out = []
        for i in range(len(pick)):
            p = make()
            p.load_state_dict(policy.state_dict())
            with seeded(7, i):
                p.log_probs(s[i:i + 1]).gather(1, a[i:i + 1, None]).sum().backward()
            out.append(torch.cat([p.input_scaling.grad.ravel(), p.weights.grad.ravel()]).numpy())
        return np.array(out)

    circuit = {"shots": SHOTS, "gradient": "param-shift"}
    shift = grads(lambda: reinforce.SoftmaxPQC(4, 5, 2, backend=qpu_spec, dtype=torch.float64, circuit=circuit))
    out = {}
    for key, twin in (("noisy", ("density", {"noise": ARIA})), ("noiseless", "compiled")):
        def make(twin=twin):
            p = reinforce.SoftmaxPQC(4, 5, 2, backend=qpu_spec, dtype=torch.float64,
                                     circuit={"gradient": "twin", "twin": twin})
            p.on_twin = True
            return p
        with learning_on_twin(policy, False):
            g = grads(make)
        cos = (g * shift).sum(1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(shift, axis=1) + 1e-300)
        out[key] = float(np.median(cos))
    return {"twin_cosine_median": round(out["noisy"], 4), "twin_cosine_median_noiseless_twin": round(out["noiseless"], 4),
            "twin_cosine_states": len(pick)}


def sim_to_qpu(run_dir: str | None) -> dict:
    """10 greedy episodes of a pretrained run's policy on the Aria-priced noisy emulated QPU, sharing circuits."""
    if run_dir is None:
        return {"sim_to_qpu_mean_return": None, "sim_to_qpu_usd": None}
    argv = [sys.executable, "-m", "hqflow.cli", "eval", run_dir, "--episodes", "10", "--shots", str(SHOTS),
            "--json", "--backend", "emulated-qpu", *_opts("wrapped=compiled", f"price_as={ARIA}", f"noise={ARIA}",
                                                          "share=auto")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {"sim_to_qpu_error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    dry = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, timeout=600)
    return {"sim_to_qpu_mean_return": out["mean_return"], "sim_to_qpu_usd": round(out["usage"]["cost"], 2),
            "sim_to_qpu_circuits": out["usage"]["circuits"],
            "sim_to_qpu_usd_at_most": json.loads(dry.stdout)["at_most"] if dry.returncode == 0 else None}


@contextlib.contextmanager
def _kept(folder: str):
    os.makedirs(folder, exist_ok=True)
    yield folder


def overall(figures: dict, variants: list[str], seeds: int) -> dict:
    need = 4 if seeds >= 5 else max(1, -(-2 * seeds // 3))
    solving = [v for v in variants if v != "baseline" and figures.get(f"{v}_solved", 0) >= need]
    best = min(solving, key=lambda v: figures[f"{v}_usd_per_solved_run"], default=None)
    base, base_off = figures.get("baseline_usd_per_solved_run"), figures.get("baseline_usd_per_solved_run_debias_off")
    cheapest_step = min((v for v in variants if v != "baseline"), key=lambda v: figures[f"{v}_usd_per_step"],
                        default=None)
    ratio = lambda a, b: round(a / b, 1) if a and b else None  # noqa: E731
    out = {"solving_means": f"at least {need} of {seeds} seeds", "best_variant": best,
           "best_solved": figures.get(f"{best}_solved") if best else 0,
           "usd_reduction": ratio(base, figures.get(f"{best}_usd_per_solved_run")) if best else None,
           "usd_reduction_debias_off": ratio(base_off, figures.get(f"{best}_usd_per_solved_run_debias_off"))
           if best else None}
    step_of = best or cheapest_step
    if step_of and "baseline" in variants:
        out["usd_reduction_per_step"] = ratio(figures["baseline_usd_per_step"], figures[f"{step_of}_usd_per_step"])
        out["usd_reduction_per_step_debias_off"] = ratio(figures["baseline_usd_per_step_debias_off"],
                                                         figures[f"{step_of}_usd_per_step_debias_off"])
        out["usd_reduction_per_step_of"] = step_of
    out["targets"] = {"best_solves_4_of_5": out["best_solved"] >= 4 and seeds >= 5,
                      "usd_reduction_300": (out["usd_reduction"] or 0) >= 300,
                      "sim_to_qpu_475": (figures.get("sim_to_qpu_mean_return") or 0) >= 475}
    return out


def table(figures: dict, variants: list[str]) -> None:
    cols = ("solved", "median_episodes", "circuits_per_step", "usd_per_step", "usd_per_episode", "usd_per_solved_run",
            "usd_per_step_debias_off")
    print(f"{'variant':<12}" + "".join(f"{c.replace('usd_per_', '$/').replace('_debias_off', ' (off)'):>20}"
                                       for c in cols))
    for v in variants:
        print(f"{v:<12}" + "".join(f"{str(figures.get(f'{v}_{c}')):>20}" for c in cols))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, 20 episodes: per-step circuits and prices")
    ap.add_argument("--seeds", type=int, help="seeds 0..N-1 (default 5, --quick 2)")
    ap.add_argument("--episodes", type=int, help="episode budget per run (default 1000, --quick 20)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs at a time (default: cores)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    ap.add_argument("--spsa-samples", type=int, default=8, help="spsa_packed's directions (default 8)")
    ap.add_argument("--no-sim-to-qpu", action="store_true", help="skip the pretrain-then-evaluate figures")
    ap.add_argument("--no-cosine", action="store_true", help="skip the twin's gradient bias")
    ap.add_argument("--keep", metavar="DIR", help="keep the run directories in DIR and reuse the finished ones there")
    ap.add_argument("--twin-as-mux", action="store_true",
                    help="twin's runs are twin_mux's repriced (checked where both are kept); needs both variants")
    args = ap.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    if not args.variants or set(args.variants) - set(VARIANTS):
        ap.error(f"--variants takes names from {', '.join(VARIANTS)}")
    seeds = args.seeds or (2 if args.quick else 5)
    episodes = args.episodes or (20 if args.quick else 1000)
    if seeds < 1 or episodes < 1 or args.workers < 1 or args.spsa_samples < 1:
        ap.error("--seeds, --episodes, --workers and --spsa-samples must be at least 1")
    if args.twin_as_mux and not {"twin", "twin_mux"} <= set(args.variants):
        ap.error("--twin-as-mux needs both twin and twin_mux in --variants")
    t0 = time.perf_counter()
    p = prices()
    figures: dict = {"seeds": seeds, "episodes_cap": episodes, "shots": SHOTS, "noise": ARIA,
                     "spsa_samples": args.spsa_samples, "aria_usd_per_circuit": round(p["usd"], 4),
                     "aria_usd_per_circuit_debias_off": round(p["usd_off"], 4),
                     "baseline_circuits_per_step_formula": p["circuits_per_step"]}
    with tempfile.TemporaryDirectory() if args.keep is None else _kept(args.keep) as folder:
        with cf.ThreadPoolExecutor(args.workers) as pool:
            at = lambda v, s: os.path.join(folder, f"{v}-{s}")  # noqa: E731
            kept_twin = {s for s in range(seeds) if os.path.exists(os.path.join(at("twin", s), "result.json"))}
            futures = {(v, s): pool.submit(train, command(v, s, episodes, args), at(v, s))
                       for s in range(seeds) for v in args.variants
                       if not (args.twin_as_mux and v == "twin" and s not in kept_twin)}
            runs = {key: f.result() for key, f in futures.items()}
        if args.twin_as_mux:
            checked, derived = [], []
            for s in range(seeds):
                twin, mux = runs.get(("twin", s)), runs[("twin_mux", s)]
                if twin is None:  # no kept twin run: twin_mux's, repriced
                    runs[("twin", s)] = mux if "error" in mux else twin_from_mux(mux, p["usd"])
                    derived.append(s)
                elif "error" not in twin and "error" not in mux:  # both ran: they must agree
                    check_twin_from_mux(twin, mux, p["usd"])
                    checked.append(s)
            figures["twin_as_mux_checked"], figures["twin_as_mux_derived"] = checked, derived
        for v in args.variants:
            for k, value in figures_of(v, [runs[(v, s)] for s in range(seeds)], episodes, p).items():
                figures[f"{v}_{k}"] = value
        if not args.no_cosine:
            figures.update(twin_cosine(folder, 6 if args.quick else 24))
        if not args.no_sim_to_qpu:
            twins = [r for v in ("twin_mux", "twin") if v in args.variants for s in range(seeds)
                     for r in [runs[(v, s)]] if "error" not in r]
            best = max(twins, key=lambda r: r["mean_return_last_10"], default=None)
            figures.update(sim_to_qpu(best["run_dir"] if best else None))
    figures.update(overall(figures, args.variants, seeds))
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    table(figures, args.variants)
    print(json.dumps(figures, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
