"""Profiles: what a run measured about its fragments and backends, as data the cost model reads.

``profile(spans)`` fits a :class:`BackendProfile` per pool member and a :class:`FragmentProfile` per
classical fragment and resource from a run's spans. A job's time past its queue (``Span.device``, else its
seconds less ``Span.queued``), its price (``Span.cost``) and its computation here (``Span.compute``) are each
fitted as ``per_job + per_row * rows + per_shot * rows * shots`` (:func:`_fit`), and the service jobs it created
(``Span.service_jobs``, where the spans say) as ``per_job + per_row * rows``. Where every job of a member had
the same rows (a calibration cuts some jobs smaller to tell the two apart), it takes the per-row and per-shot
terms of its pool's members that ran several sizes (``_borrowed``), else it is all ``per_job``.

Profiles are saved as JSON (``save``/``load``; version 1 files still load) and combined with ``merged``,
weighted by what each measured, so every run can update the profile a later run plans with.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from ..common.files import atomic_text
from ..common.lanes import Lane, member
from ..trace import Span

PROFILE_FORMAT = "hqflow.planning.profile"
PROFILE_VERSION = 2  # 2 added ``cores`` and a backend's ``compute_per_*``; 1 is read too


class ProfileError(ValueError):
    """A profile file is missing, unreadable or malformed."""


@dataclass(frozen=True)
class BackendProfile:
    backend: Lane
    """the pool member's lane (``qpu:<backend name>``, ``#k`` in a pool of several): its jobs' lane, no slot"""
    pool: Lane
    """the pool's lane, the resource of its jobs (``qpu:<pool name>``)"""
    queue: float
    """mean seconds a job waits in the backend's queue (0 where the backend does not say)"""
    per_job: float
    per_row: float
    per_shot: float
    """a job holds a device ``per_job + per_row * rows + per_shot * rows * shots`` seconds, past its queue"""
    failure_rate: float
    """the share of attempts that failed or timed out"""
    price_per_job: float | None = None
    price_per_row: float = 0.0
    price_per_shot: float = 0.0
    """a job's spend in the backend's currency, fitted as its device time (``price_per_job`` None: unpriced)"""
    jobs: int = 0
    """attempts measured"""
    devices: int = 1
    """device slots the member ran jobs on at once (the job spans' lanes)"""
    compute_per_job: float | None = None
    compute_per_row: float | None = None
    compute_per_shot: float | None = None
    """CPU seconds a job computes on this machine beside its device time (it ends when both are done), fitted
    the same way; None: not measured (the backend does not say, or the profile is older), merged as unknown"""
    service_jobs_per_job: float | None = None
    service_jobs_per_row: float | None = None
    """service jobs one job creates on its service, fitted as ``per_job + per_row * rows`` from the spans'
    ``service_jobs``; None: no span said (a job is one service job)"""

    def __post_init__(self):  # names as a user writes them ("qpu:emulated-qpu#1") become lanes
        for name in ("backend", "pool"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, member(getattr(self, name)))

    def compute(self, rows: int, shots: int | None = None) -> float:
        """Predicted CPU seconds one job of ``rows`` circuits computes on this machine."""
        return ((self.compute_per_job or 0.0) + (self.compute_per_row or 0.0) * rows
                + (self.compute_per_shot or 0.0) * rows * (shots or 0))

    def seconds(self, rows: int, shots: int | None = None) -> float:
        """Predicted seconds of one job of ``rows`` circuits, queue included."""
        return self.queue + self.per_job + self.per_row * rows + self.per_shot * rows * (shots or 0)

    def service_jobs(self, rows: int) -> int:
        """Predicted service jobs of one job of ``rows`` circuits (at least 1; 1 where not measured)."""
        if self.service_jobs_per_job is None:
            return 1
        return max(1, round(self.service_jobs_per_job + (self.service_jobs_per_row or 0.0) * rows))

    def price(self, rows: int, shots: int | None = None) -> float:
        """Predicted spend of one job (0 where unpriced)."""
        if self.price_per_job is None:
            return 0.0
        return self.price_per_job + self.price_per_row * rows + self.price_per_shot * rows * (shots or 0)


@dataclass(frozen=True)
class FragmentProfile:
    fragment: str
    resource: str
    seconds: float
    """mean seconds of a call"""
    spread: float
    """standard deviation of a call's seconds"""
    calls: int
    jobs: float = 0.0
    """quantum jobs a call submits itself (an RL rollout's policy circuits), on average"""
    rows: float = 0.0
    """circuits per such job, on average"""
    classical: float | None = None
    """seconds of a call outside its own jobs (None: it submits none)"""
    shots: float = 0.0
    """shots per circuit of such jobs, on average (0: exact values)"""


@dataclass(frozen=True)
class Profile:
    backends: tuple[BackendProfile, ...] = ()
    fragments: tuple[FragmentProfile, ...] = ()
    overhead: float = 0.0
    """seconds the scheduler adds to each job and call it dispatches (``hqflow.planning.costmodel.calibrate``)"""
    rows: tuple[tuple[str, int], ...] = ()
    """circuits per step of each ``execute`` fragment measured (its jobs' rows summed; the median step)"""
    cores: float | None = None
    """how many of this machine's CPUs the run's own work (classical calls, jobs' computation) gets at once,
    as a calibration run measured it (``hqflow.planning.costmodel.calibrate_cores``); None: as many as it asks for"""

    def backend(self, name: str | Lane) -> BackendProfile:
        """The profile of the pool member ``name``: its lane, or its name (``qpu:<backend name>``, with
        ``#k`` in a pool of several; ``qpu:`` may be left out: ``hqflow.common.lanes.member``)."""
        lane = member(name)
        for b in self.backends:
            if b.backend == lane:
                return b
        raise KeyError(f"no profile of {str(lane)!r}; profiled: "
                       f"{', '.join(str(b.backend) for b in self.backends) or 'none'}")

    def fragment(self, name: str) -> FragmentProfile:
        for f in self.fragments:
            if f.fragment == name:
                return f
        raise KeyError(f"no profile of fragment {name!r}; profiled: {', '.join(f.fragment for f in self.fragments) or 'none'}")

    def merged(self, other: Profile) -> Profile:
        """Both profiles' measurements together: each figure a mean weighted by jobs or calls."""
        return Profile(_merge(self.backends, other.backends, lambda b: b.backend, "jobs"),
                       _merge(self.fragments, other.fragments, lambda f: (f.fragment, f.resource), "calls"),
                       other.overhead or self.overhead, tuple({**dict(self.rows), **dict(other.rows)}.items()),
                       other.cores if other.cores is not None else self.cores)

    def to_dict(self) -> dict:
        return {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "overhead": self.overhead, "cores": self.cores,
                "backends": [dict(asdict(b), backend=b.backend.to_dict(), pool=b.pool.to_dict()) for b in self.backends],
                "fragments": [asdict(f) for f in self.fragments],
                "rows": dict(self.rows)}

    def save(self, path: str) -> str:
        atomic_text(path, json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @staticmethod
    def load(path: str) -> Profile:
        try:
            with open(path) as fh:
                doc = json.load(fh)
        except OSError as exc:
            raise ProfileError(f"cannot read profile {path}: {exc.strerror}") from None
        except (ValueError, RecursionError) as exc:
            raise ProfileError(f"{path} is not JSON: {str(exc)[:100]}") from None
        return Profile.from_dict(doc, path)

    @staticmethod
    def from_dict(doc, where: str = "profile") -> Profile:
        if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
            raise ProfileError(f"{where}: not an {PROFILE_FORMAT} document")
        if doc.get("version") not in (1, PROFILE_VERSION):
            raise ProfileError(f"{where}: unsupported {PROFILE_FORMAT} version {doc.get('version')!r}")
        try:
            overhead = doc.get("overhead", 0.0)
            if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or not 0 <= overhead < math.inf:
                raise ValueError(f"overhead must be a number >= 0, got {overhead!r}")
            cores = doc.get("cores")
            if cores is not None and (isinstance(cores, bool) or not isinstance(cores, (int, float))
                                      or not 0 < cores < math.inf):
                raise ValueError(f"cores must be a number > 0 or null, got {cores!r}")
            rows = doc.get("rows", {})
            if not isinstance(rows, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(
                    v, bool) and v >= 1 for k, v in rows.items()):
                raise ValueError(f"rows must map fragment names to integers >= 1, got {rows!r}")
            return Profile(tuple(_typed(BackendProfile, d) for d in doc.get("backends", [])),
                           tuple(_typed(FragmentProfile, d) for d in doc.get("fragments", [])), float(overhead),
                           tuple(rows.items()), None if cores is None else float(cores))
        except (TypeError, ValueError) as exc:
            raise ProfileError(f"{where}: {exc}") from None


def _typed(cls, d):
    if not isinstance(d, dict):
        raise ValueError(f"a {cls.__name__} must be an object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    if set(d) - names:
        raise ValueError(f"{cls.__name__} has no field(s) {sorted(set(d) - names)}")
    if cls is BackendProfile:  # lanes: objects, or the text of a file of an earlier version
        d = dict(d, **{k: Lane.parse(d[k]) if isinstance(d[k], str) else Lane.from_dict(d[k])
                       for k in ("backend", "pool") if k in d})
    obj = cls(**d)
    for f in fields(cls):
        value = getattr(obj, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{cls.__name__}.{f.name} must be finite, got {value}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise ValueError(f"{cls.__name__}.{f.name} must be >= 0, got {value}")
    return obj


def _merge(mine, theirs, key, weight: str):
    out = {key(p): p for p in mine}
    for p in theirs:
        q = out.get(key(p))
        if q is None:
            out[key(p)] = p
            continue
        a, b = getattr(q, weight), getattr(p, weight)
        total = a + b
        values = {}
        for f in fields(p):
            x, y = getattr(q, f.name), getattr(p, f.name)
            if f.name == weight:
                values[f.name] = total
            elif isinstance(x, float) and isinstance(y, float) and total:
                values[f.name] = (a * x + b * y) / total
            elif x is None or y is None:
                values[f.name] = y if x is None else x
            elif f.name == "devices":
                values[f.name] = max(x, y)
        out[key(p)] = replace(q, **values)
    return tuple(out.values())


def _fit(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares ``y ~ X @ c`` with every ``c >= 0``: a column beyond the first (the intercept) that does
    not vary, or whose coefficient came out negative, gets 0 and the rest are refitted (the intercept last)."""
    keep = [0] + [j for j in range(1, X.shape[1]) if np.ptp(X[:, j]) > 0]
    while True:
        c, *_ = np.linalg.lstsq(X[:, keep], y, rcond=None)
        if (c >= 0).all() or len(keep) == 1:
            out = np.zeros(X.shape[1])
            out[keep] = np.maximum(c, 0.0)
            return out
        kept = [j for j, v in zip(keep, c) if v >= 0 or j == 0]
        keep = kept if kept != keep else keep[1:]


def _fitted(jobs: list[Span], X: np.ndarray, figure) -> list[float] | None:
    """:func:`_fit` of ``figure(job)`` over the jobs where it is not None; None where it is None for all."""
    measured = [j for j, s in enumerate(jobs) if figure(s) is not None]
    return [float(c) for c in _fit(X[measured], np.array([figure(jobs[j]) for j in measured]))] if measured else None


_FIGURES = {("per_job", "per_row", "per_shot"): lambda s: s.seconds - (s.queued or 0) if s.device is None else s.device,
            ("price_per_job", "price_per_row", "price_per_shot"): lambda s: s.cost,
            ("compute_per_job", "compute_per_row", "compute_per_shot"): lambda s: s.compute,
            ("service_jobs_per_job", "service_jobs_per_row"): lambda s: s.service_jobs}
"""the terms a member's figure of a job is fitted to: time past its queue, price, computation here, service jobs"""


def _borrowed(fit: list[float] | None, x: np.ndarray, peers: list) -> list[float] | None:
    """``fit`` of a member whose jobs all had the columns ``x`` (one size), where its per-row and per-shot terms
    cannot be told from its per-job one: the median of its pool's members' that could (``peers``' fits), scaled
    down where they would pass its own measured time, and per job the rest of it."""
    if fit is None or not (peers := [p[1:] for p in peers if p is not None]):
        return fit
    slopes = np.median(peers, axis=0)
    scale = min(1.0, fit[0] / size) if (size := float(slopes @ x[1:len(fit)])) > 0 else 1.0
    return [fit[0] - scale * size, *(float(v) * scale for v in slopes)]


def _warm(spans: list[Span]) -> list[Span]:
    """Without the first (the one that warms caches, compiles programs, starts threads) when there are 3 or more."""
    return sorted(spans, key=lambda s: s.start)[1:] if len(spans) >= 3 else spans


def _own_jobs(call: Span, jobs: list[Span]) -> list[Span]:
    """The ok jobs that ``call`` (a classical fragment's span) submitted itself."""
    return [s for s in jobs if s.parent_lane == call.lane and s.fragment == call.fragment and s.step == call.step
            and s.outcome.ok and s.rows is not None and call.start <= s.start <= call.end]


def _covered(jobs: list[Span]) -> float:
    """Seconds in which at least one of ``jobs`` ran."""
    total, end = 0.0, -math.inf
    for s in sorted(jobs, key=lambda s: s.start):
        total += max(0.0, s.end - max(s.start, end))
        end = max(end, s.end)
    return total


def profile(spans: list[Span], prior: Profile | None = None) -> Profile:
    """The profiles that ``spans`` measure (see the module docstring); the members of a pool in ``prior`` (the
    profile these are merged into) lend a member of one size their per-row and per-shot terms too."""
    members = []  # (lane, attempts, ok jobs, their columns, each figure's fit)
    jobs = [s for s in spans if s.resource.quantum and s.outcome.kind != "cancelled"]
    for lane in dict.fromkeys(s.row.at(None) for s in jobs):  # the member: a job's lane without its device slot
        attempts = [s for s in jobs if s.row.at(None) == lane]
        ok = _warm([s for s in attempts if s.outcome.ok and s.rows is not None])
        rows = np.array([s.rows for s in ok], dtype=float)
        X = np.column_stack([np.ones(len(ok)), rows, rows * np.array([s.shots or 0 for s in ok], dtype=float)])
        if ok:
            members.append((lane, attempts, ok, X, [_fitted(ok, X[:, :len(t)], f) for t, f in _FIGURES.items()]))
    backends, told = [], [m for m in members if np.ptp(m[3][:, 1:], axis=0).any()]  # jobs of several sizes
    for lane, attempts, ok, X, fits in members:
        pool = attempts[0].resource
        lent = [b for b in (prior.backends if prior else ()) if b.pool == pool]
        peers = [m[4] for m in told if m[1][0].resource == pool] + [
            [None if getattr(b, t[0]) is None else [getattr(b, k) or 0.0 for k in t] for t in _FIGURES] for b in lent]
        if all(m[0] != lane for m in told):
            fits = [_borrowed(fit, X[0], [p[k] for p in peers]) for k, fit in enumerate(fits)]
        terms = {t: v for names, fit in zip(_FIGURES, fits) if fit is not None for t, v in zip(names, fit)}
        backends.append(BackendProfile(lane, pool, float(np.mean([s.queued or 0.0 for s in ok])), jobs=len(attempts),
                                       failure_rate=sum(not s.outcome.ok for s in attempts) / len(attempts),
                                       devices=len({s.lane for s in attempts}), **terms))
    fragments = []
    for name, resource in dict.fromkeys((s.fragment, s.resource.kind) for s in spans
                                        if not s.resource.quantum and s.parent_lane is None):
        calls = _warm([s for s in spans if (s.fragment, s.resource.kind) == (name, resource)
                       and s.parent_lane is None and s.outcome.ok])
        if not calls:
            continue
        times = np.array([s.seconds for s in calls])
        own = [_own_jobs(c, jobs) for c in calls]
        n_jobs = np.array([len(j) for j in own], dtype=float)
        nested = () if not n_jobs.sum() else (  # its own jobs per call, their rows, its seconds outside them, shots
            float(n_jobs.mean()), float(np.mean([s.rows for j in own for s in j])),
            max(0.0, float(np.mean([c.seconds - _covered(j) for c, j in zip(calls, own)]))),
            float(np.mean([s.shots or 0 for j in own for s in j])))
        fragments.append(FragmentProfile(name, resource, float(times.mean()), float(times.std()), len(times), *nested))
    return Profile(tuple(backends), tuple(fragments), rows=tuple(step_rows(spans).items()))


def step_rows(spans: list[Span]) -> dict[str, int]:
    """Circuits per step of each ``execute`` fragment in ``spans``: its ok jobs' rows summed per step
    (a batch cut into parts counts whole), the median step."""
    per: dict[str, dict[int, int]] = {}
    for s in spans:
        if s.resource.quantum and s.parent_lane is None and s.outcome.ok and s.rows:
            steps = per.setdefault(s.fragment, {})
            steps[s.step] = steps.get(s.step, 0) + s.rows
    return {name: int(np.median(list(steps.values()))) for name, steps in per.items()}


__all__ = ["BackendProfile", "FragmentProfile", "Profile", "ProfileError", "profile", "step_rows"]
