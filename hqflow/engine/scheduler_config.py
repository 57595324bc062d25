"""How a graph is run: ``SchedulerConfig``, one flat frozen set of knobs, checked at construction, that users,
plans and saved configs name flat (``hq.run(..., prefetch=0)``); each component reads its group of fields."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from .collective import Compression
from ..common.config import as_type, check_ints
from ..jobs.ledger import check_budgets
from ..jobs.service import JobSettings
from .placement import Placement


class ExecutorKind(str, Enum):
    """Which executor a run uses (``SchedulerConfig.executor``). A kind equals, prints and saves to JSON as
    its name, so configs written with names keep working; the scheduler asks its properties."""

    SYNC = "sync"
    LOCAL = "local"
    RAY = "ray"

    @classmethod
    def _missing_(cls, kind):  # ExecutorKind(name): a name that is none of them is a one-line ValueError
        raise ValueError(f"executor must be 'sync', 'local' or 'ray', got {kind!r}")

    @property
    def one_at_a_time(self) -> bool:
        """The reference: one fragment call or job at a time, in graph order, on the scheduler's thread."""
        return self is ExecutorKind.SYNC

    @property
    def resizable(self) -> bool:
        """Its classical worker slots can change mid-run (``RunHandle.set_workers``)."""
        return self is ExecutorKind.LOCAL

    def __str__(self) -> str:  # and so format(): Enum's defers to an overridden __str__
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)  # a config or a policy prints as it did with names


@dataclass(frozen=True)
class SchedulerConfig:
    """How a graph is run. Changing it never changes the algorithm; with every
    loop edge at ``max_staleness=0`` it never changes the results either."""

    # -- the loop: the seed and the learner replicas ---------------------------------------------
    seed: int | None = 0
    """run seed; shot seeds derive from (seed, step, fragment)"""
    learners: int = 1
    """replicas of each ``learn`` fragment instance, each on a learner slot (``gpu_workers`` must be at
    least this many); they reduce with ``hqflow.engine.collective`` and rank 0's outputs are the instance's"""
    compression: Compression = Compression()
    """how the learner replicas compress the gradient shares they reduce (``hqflow.engine.collective.Compression``)"""

    # -- where classical work runs (``hqflow.engine.executors``) ---------------------------------------
    executor: ExecutorKind = ExecutorKind.LOCAL
    """``sync`` (one thing at a time), ``local`` (threads) or ``ray``: an ``ExecutorKind``, or its name"""
    cpu_workers: int = 1
    """classical worker slots for ``cpu`` fragments"""
    gpu_workers: int = 1
    """learner slots for ``gpu`` fragments"""
    ray_num_cpus: int | None = None
    """CPUs for ``ray.init`` when the ray executor starts Ray itself"""
    ray_address: str | None = None
    """a running Ray cluster for the ray executor to connect to (``"host:port"``, ``"ray://host:port"``
    or ``"auto"``); None: the Ray this process is connected to, or a local one it starts"""
    placement: Placement = Placement()
    """where the ray executor puts its actors on a cluster's nodes (``hqflow.engine.placement``)"""

    # -- backend pools (``hqflow.engine.elastic``) -----------------------------------------------------
    max_in_flight: int = 1
    """device slots per backend, unless the backend says otherwise (``max_in_flight`` attribute)"""
    prefetch: int = 1
    """extra jobs submitted to each backend beyond its device slots, so its queue never runs dry
    and submission round-trips hide behind running jobs (0: submit only into free slots)"""

    # -- the job service and the budget (``hqflow.jobs.service``, ``hqflow.jobs.ledger``) --------------------
    rows_per_job: int | None = None
    """circuits per quantum job at most (None: only a backend's own limit cuts a step's batch); the parts run
    side by side over a pool's members. Exact values never change with the cut; with shots a part's seed is
    the batch's plus its first row, so a different cut draws different (equally distributed) samples"""
    max_retries: int = 3
    """retries of a failed or timed-out quantum job before the run fails"""
    job_timeout: float | None = None
    """seconds before an unfinished quantum job is cancelled and retried (None: wait)"""
    run_id: str | None = None
    """the run's identity, from which cloud backends derive idempotent job ids (give the same one to a
    resumed run so that it finds the jobs that already ran); None: a fresh one, or the checkpoint's"""
    budget: float | None = None
    """the most the run may spend on priced quantum jobs, in their backend's currency (``estimate_cost``);
    a job that would go past it is refused and the run stops with ``BudgetExceeded``, results kept"""
    shot_budget: int | None = None
    """the most shots the run may take on sampling quantum jobs (each job's predicted shots, ``Backend.usage``,
    counted before it is submitted, then its reported ones); a job that would go past it is refused and the run
    stops with ``BudgetExceeded``, results kept. Exact jobs take no shots and are never refused"""
    ledger: str | None = None
    """a file the run's spend and shots are written to before each job is submitted, and read from at the start,
    so the budgets hold across a killed run and its resumption (``hqflow.jobs.ledger``); None: ``RUN_DIR/ledger.jsonl``
    with a ``run_dir``, else none"""

    # -- the window of steps in flight (``hqflow.engine.window``) --------------------------------------
    window: int | None = None
    """micro-batches admitted and not yet finished, at most (backpressure); None: twice the jobs
    all backends keep in flight, plus 2, and at least 8"""

    # -- checkpoints (``hqflow.engine.checkpoint``) ----------------------------------------------------
    run_dir: str | None = None
    """a folder for the run's checkpoints: loop-carried values and the stream position after each
    ``checkpoint_every`` finished steps, and every step's outputs"""
    checkpoint_every: int = 1
    """finished steps between checkpoints in ``run_dir``"""
    resume: bool = False
    """continue the run checkpointed in ``run_dir``: its first steps are skipped in the stream, its
    outputs and loop values restored (the same graph, stream and seed; any executor and backends)"""

    def __post_init__(self):
        object.__setattr__(self, "executor", ExecutorKind(self.executor))  # a name, from users and JSON
        lows = dict(cpu_workers=1, gpu_workers=1, max_in_flight=1, window=1, learners=1, prefetch=0)
        for name, low in lows.items():
            value = getattr(self, name)
            if not (value is None and name == "window") and (not isinstance(value, int) or value < low):
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        as_type(self, "compression", Compression)
        if self.learners > self.gpu_workers:
            raise ValueError(f"learners={self.learners} needs as many learner slots, but gpu_workers={self.gpu_workers}")
        if self.learners > 1 and self.executor.one_at_a_time:
            raise ValueError("learners > 1 runs replicas at once: use the local or ray executor, not sync")
        as_type(self, "placement", Placement)
        if self.ray_address is not None and (not isinstance(self.ray_address, str) or not self.ray_address):
            raise ValueError(f"ray_address must be a non-empty string or None, got {self.ray_address!r}")
        if self.ray_address is not None and self.ray_num_cpus is not None:
            raise ValueError("ray_num_cpus sizes a Ray that hqflow starts; a cluster at ray_address has its own CPUs")
        check_ints(self, checkpoint_every=1)
        if self.resume and self.run_dir is None:
            raise ValueError("resume=True needs the run_dir of the run to continue")
        check_budgets(self.budget, self.shot_budget)
        JobSettings.of(self)  # (checked there)

    @property
    def jobs(self) -> JobSettings:
        """The job service's settings (``hqflow.jobs.service.JobSettings``): its fields of the same names."""
        return JobSettings.of(self)


def configure(config: SchedulerConfig | None, options: dict) -> SchedulerConfig:
    """``config`` (default: the defaults) with ``options``, flat ``SchedulerConfig`` fields, in place of its own."""
    cfg = config or SchedulerConfig()
    if options:
        unknown = sorted(set(options) - {f.name for f in dataclasses.fields(SchedulerConfig)})
        if unknown:
            raise TypeError(f"unknown scheduler option(s) {unknown}; see hqflow.SchedulerConfig")
        cfg = dataclasses.replace(cfg, **options)
    return cfg
