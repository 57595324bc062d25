"""Timed spans: what ran where, and when; their utilization, idle time and overlap; ``spans.json``.

Every executor records one ``Span`` per fragment call and per quantum job attempt (``parent_lane`` marks
a job that a classical fragment submitted through its job client). Busy time is the length of the
*union* of the spans' intervals, so parallel spans on two lanes of one resource count once; failed,
timed-out and cancelled spans count as busy (the worker was occupied). Chrome-trace export and the
Gantt chart live in :mod:`hqflow.trace.export`.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import MISSING, asdict, dataclass, fields, replace

from ..common.files import atomic_text
from ..common.lanes import Lane
from ..common.outcome import OK, Outcome

SPANS_FORMAT = "hqflow.spans"
SPANS_VERSION = 6  # 6: outcomes and lanes as objects, and ``compute``; every earlier version is read too
_LANES = ("resource", "lane", "parent_lane")


@dataclass(frozen=True)
class Span:
    """A fragment call or job attempt; ``to_dict`` writes it to spans.json (the README lists its fields and their
    JSON types). ``outcome`` equals its text (``"ok"``), which ``from_dict`` reads too (files before version 6)."""

    fragment: str
    kind: str
    resource: Lane  # the pool: Lane("cpu"), Lane("gpu"), or a quantum pool's Lane("qpu", name) (``hqflow.common.lanes``)
    step: int  # index of the micro-batch / iteration
    start: float  # seconds since the run began
    end: float
    outcome: Outcome = OK  # ok, an error with its message, timeout, cancelled (``hqflow.common.outcome``)
    version: int | None = None  # parameter version used (loop-carried inputs), if any
    lane: Lane | None = None  # the worker within the resource; None means the resource itself
    parent_lane: Lane | None = None
    """the lane of the classical fragment's call whose job client recorded this span (a job it submitted,
    or a stretch of its own work, ``JobClient.work``; ``fragment`` and ``step`` are the call's); else None"""
    cost: float | None = None
    """a quantum job's spend, in its backend's currency (``Backend.estimate_cost``); None where unpriced"""
    node: str | None = None
    """the Ray node the work ran on (its id's first 8 hex digits); None for work in the driver's process"""
    rows: int | None = None
    """a quantum job's circuits (rows of its batch); None for other spans"""
    shots: int | None = None
    """a quantum job's shots per circuit; None for exact values and other spans"""
    queued: float | None = None
    """seconds of the job's span it waited in its backend's queue (``queue_seconds`` in its metadata), or None"""
    device: float | None = None
    """seconds the job held a device, where the backend says (``device_seconds``); None where it does not"""
    service_jobs: int | None = None
    """the priced jobs a cloud backend created on its service for this job (``service_jobs`` in the result's
    or a failed job's metadata: rows x measurement groups, and retried rows), or None"""
    compute: float | None = None
    """CPU seconds the job's computation took on this machine (``compute_seconds``: a simulator, an emulated
    QPU), or None"""

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def row(self) -> Lane:
        """The Gantt row: the lane if set, else the resource."""
        return self.resource if self.lane is None else self.lane

    def to_dict(self) -> dict:
        """The span as JSON-friendly data: its outcome and lanes as objects (spans.json from version 6 on)."""
        return dict(asdict(self), outcome=self.outcome.to_dict(),
                    **{k: None if getattr(self, k) is None else getattr(self, k).to_dict() for k in _LANES})

    @staticmethod
    def from_dict(d: dict) -> Span:
        """A span from :meth:`to_dict`'s data, or from that of an earlier version (its outcome and
        lanes as text; ``""`` for no lane). ``ValueError`` for an outcome or a lane that is none."""
        lanes = {k: _lane(d[k]) for k in _LANES if k in d}
        return Span(**dict(d, outcome=Outcome.read(d.get("outcome", OK)), **lanes))


def _lane(value) -> Lane | None:
    """A lane as a span's data holds it: a Lane, its object form, its text (files of earlier
    versions; ``""`` for none), or None."""
    if value is None or value == "":
        return None
    return value if isinstance(value, Lane) else Lane.parse(value) if isinstance(value, str) else Lane.from_dict(value)


def after(spans: list[Span], earlier: list[Span], step: int | None = None) -> list[Span]:
    """The spans of a run that followed another, in the first run's time: moved to begin where
    ``earlier`` (the first run's spans) ends, and given ``step`` where one is named (a workload's
    final evaluation after its last step)."""
    offset = max((s.end for s in earlier), default=0.0) - min((s.start for s in spans), default=0.0)
    return [replace(s, start=s.start + offset, end=s.end + offset, step=s.step if step is None else step)
            for s in spans]


class TraceError(ValueError):
    """A spans file is missing, unreadable or malformed."""


# --- analytics -------------------------------------------------------------

def rows(spans: list[Span]) -> list[tuple[Lane, Lane]]:
    """The distinct ``(row, resource)`` pairs by resource, then row: cpu lanes, then gpu, then quantum (lanes
    sort by their text, ``cpu/2`` before ``cpu/10``)."""
    return sorted({(s.row, s.resource) for s in spans}, key=lambda rr: (rr[1], rr[0]))


def makespan(spans: list[Span]) -> float:
    """Last end minus first start; 0 for no spans."""
    return max(s.end for s in spans) - min(s.start for s in spans) if spans else 0.0


def intervals_union(spans: list[Span]) -> list[tuple[float, float]]:
    """The spans' ``[start, end]`` intervals merged into sorted, disjoint intervals."""
    return _merge((s.start, s.end) for s in spans)


def _merge(pairs) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(p for p in pairs if p[1] > p[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _intersection_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two sorted, disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _figures(spans: list[Span], key) -> dict[Lane, dict]:
    """Per ``key(span)``: its span count, busy seconds (the union of their intervals), idle seconds (the
    makespan's others) and utilization (busy over the makespan, 0..1)."""
    total, groups = makespan(spans), {}
    for s in spans:
        groups.setdefault(key(s), []).append(s)
    return {k: {"spans": len(group), "busy": (busy := _length(intervals_union(group))), "idle": total - busy,
                "utilization": busy / total if total else 0.0} for k, group in groups.items()}


def utilization(spans: list[Span], key=lambda s: s.resource) -> dict[Lane, float]:
    """Per resource (or per ``key(span)``): the union of its spans' intervals over the makespan (0..1)."""
    return {k: f["utilization"] for k, f in _figures(spans, key).items()}


def lane_utilization(spans: list[Span]) -> dict[Lane, float]:
    """Per lane (``Span.row``): the union of its spans' intervals over the makespan (0..1)."""
    return utilization(spans, lambda s: s.row)


def idle(spans: list[Span]) -> dict[Lane, float]:
    """Per resource: seconds of the makespan during which none of its lanes was busy."""
    return {k: f["idle"] for k, f in _figures(spans, lambda s: s.resource).items()}


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``a`` without ``b`` (both sorted, disjoint interval lists)."""
    out, j = [], 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > start:
                out.append((start, b[k][0]))
            start = max(start, b[k][1])
            k += 1
        if start < end:
            out.append((start, end))
    return out


def _classical_quantum(spans: list[Span]) -> tuple[list, list]:
    """Classical and quantum busy intervals. A classical lane's time while jobs it submitted itself
    are in flight (spans whose ``parent_lane`` is that lane) counts as quantum only: the fragment
    waits on them; the work it does meanwhile counts through its own work spans (``JobClient.work``,
    in lanes of their own)."""
    waits: dict[Lane, list[Span]] = {}
    lanes: dict[Lane, list[Span]] = {}
    for s in spans:
        if s.resource.quantum and s.parent_lane is not None:  # a job a classical fragment submitted itself
            waits.setdefault(s.parent_lane, []).append(s)
        elif not s.resource.quantum:
            lanes.setdefault(s.row, []).append(s)
    classical = [iv for lane, group in lanes.items()
                 for iv in _minus(intervals_union(group), intervals_union(waits.get(lane, [])))]
    return _merge(classical), intervals_union([s for s in spans if s.resource.quantum])


def overlap_seconds(spans: list[Span]) -> float:
    """Seconds during which some classical resource and some quantum resource were both busy."""
    return _intersection_length(*_classical_quantum(spans))


def overlap_fraction(spans: list[Span]) -> float:
    """How much classical and quantum work ran at the same time, 0..1: ``overlap_seconds / min(classical busy,
    quantum busy)``, busy as :func:`_classical_quantum` counts it. 0 when the two never run together or either
    has no busy time; 1 when the shorter is entirely hidden behind the other, the best a schedule can do."""
    classical, quantum = _classical_quantum(spans)
    shorter = min(_length(classical), _length(quantum))
    return _intersection_length(classical, quantum) / shorter if shorter > 0 else 0.0


def outcome_counts(spans: list[Span]) -> dict[str, int]:
    """Spans per outcome kind: an error counts as ``"error"``, whatever its message."""
    return dict(Counter(s.outcome.kind for s in spans))


def summary(spans: list[Span]) -> dict:
    """The figures of a run's spans as one JSON-friendly dict: ``resources`` and ``lanes`` map each one's text
    to its span count, busy and idle seconds and utilization; ``outcomes`` counts spans by outcome kind."""
    classical, quantum = _classical_quantum(spans)
    lanes, resources, order = _figures(spans, lambda s: s.row), _figures(spans, lambda s: s.resource), rows(spans)
    return {
        "spans": len(spans),
        "makespan": makespan(spans),
        "resources": {str(r): resources[r] for r in dict.fromkeys(res for _, res in order)},
        "lanes": {str(row): {"resource": str(res), **lanes[row]} for row, res in order},
        "classical_busy": _length(classical),
        "quantum_busy": _length(quantum),
        "overlap_seconds": _intersection_length(classical, quantum),
        "overlap_fraction": overlap_fraction(spans),
        "outcomes": outcome_counts(spans),
    }


def service_jobs(spans: list[Span]) -> int:
    """The service jobs the spans' quantum jobs created: each span's ``service_jobs``, or 1 for a job
    whose backend does not say (one backend job, one service job)."""
    return sum(1 if s.service_jobs is None else s.service_jobs for s in spans if s.resource.quantum)


def format_table(spans: list[Span]) -> str:
    """A utilization table: one line per resource, its lanes indented below it; times in seconds, or in
    milliseconds when the whole run took under a second."""
    if not spans:
        return "no spans"
    s = summary(spans)
    scale, unit = (1e3, "ms") if s["makespan"] < 1 else (1.0, "s")
    width = max(len("resource"), *(len(r) + 2 for r in s["lanes"]), *(len(r) for r in s["resources"]))
    lines = [f"{'resource':<{width}}  {'spans':>6}  {'busy ' + unit:>9}  {'idle ' + unit:>9}  {'util':>6}"]

    def line(name: str, f: dict) -> str:
        return (f"{name:<{width}}  {f['spans']:>6}  {scale * f['busy']:>9.3f}  {scale * f['idle']:>9.3f}  "
                f"{100 * f['utilization']:>5.1f}%")

    for resource, figures in s["resources"].items():
        lines.append(line(resource, figures))
        lanes = [(row, f) for row, f in s["lanes"].items() if f["resource"] == resource]
        if len(lanes) > 1 or lanes[0][0] != resource:
            lines += [line("  " + row, f) for row, f in lanes]
    lines.append(f"makespan  {scale * s['makespan']:.3f} {unit}")
    lines.append(f"overlap   {scale * s['overlap_seconds']:.3f} {unit} with classical and quantum both busy = "
                 f"{100 * s['overlap_fraction']:.1f}% of the shorter of classical "
                 f"({scale * s['classical_busy']:.3f} {unit}) and quantum ({scale * s['quantum_busy']:.3f} {unit})")
    outcomes = sorted(s["outcomes"].items(), key=lambda item: (item[0] != "ok", item[0]))
    lines.append("outcomes  " + ", ".join(f"{n} {k}" for k, n in outcomes))
    priced = [x for x in spans if x.cost is not None]
    if priced:
        lines.append(f"spend     {sum(x.cost for x in priced):.4f} over {service_jobs(priced)} priced service jobs "
                     f"in {len(priced)} batches")
    return "\n".join(lines)


# --- persistence -----------------------------------------------------------

def write_json_atomic(path: str, obj) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (``hqflow.common.files``)."""
    atomic_text(path, json.dumps(obj, indent=1, default=float))


def save_spans(path: str, spans: list[Span], meta: dict | None = None) -> str:
    """Write ``{"format": "hqflow.spans", "version": 6, "meta": ..., "spans": [...]}`` atomically."""
    write_json_atomic(path, {"format": SPANS_FORMAT, "version": SPANS_VERSION, "meta": dict(meta or {}),
                             "spans": [s.to_dict() for s in spans]})
    return path


_JSON = {"str": (str,), "int": (int,), "float": (int, float), "Lane": (str, dict), "Outcome": (str, dict),
         "None": (type(None),)}  # a field's JSON types by its annotation's (lanes and outcomes: text before version 6)
_FIELD_TYPES = {f.name: sum((_JSON[t] for t in f.type.split(" | ")), ()) for f in fields(Span)}
_REQUIRED = [f.name for f in fields(Span) if f.default is MISSING]


def _from_version_1(d):
    """Version 1 marked a job a fragment ran itself only by strings: fragment ``F/job`` in lane
    ``qpu:B/LANE``. Read it as version 2's structured ``parent_lane``."""
    if not isinstance(d, dict) or "parent_lane" in d:
        return d
    resource, lane, name = d.get("resource"), d.get("lane"), d.get("fragment")
    if (isinstance(resource, str) and isinstance(lane, str) and isinstance(name, str) and resource.startswith("qpu")
            and name.endswith("/job") and lane.startswith(resource + "/")):
        return dict(d, fragment=name[:-len("/job")], parent_lane=lane[len(resource) + 1:])
    return d


def _span_from_dict(d, index: int) -> Span:
    where = f"span {index}"
    if not isinstance(d, dict):
        raise TraceError(f"{where}: expected an object, got {type(d).__name__}")
    missing = [k for k in _REQUIRED if k not in d]
    if missing:
        raise TraceError(f"{where}: missing field {missing[0]!r}")
    unknown = sorted(set(d) - set(_FIELD_TYPES))
    if unknown:
        raise TraceError(f"{where}: unknown field {unknown[0]!r}")
    for key, value in d.items():
        if not isinstance(value, _FIELD_TYPES[key]) or isinstance(value, bool):
            raise TraceError(f"{where}: field {key!r} has the wrong type ({type(value).__name__})")
    if not (math.isfinite(d["start"]) and math.isfinite(d["end"])):
        raise TraceError(f"{where}: start and end must be finite numbers, got {d['start']} and {d['end']}")
    if d["end"] < d["start"]:
        raise TraceError(f"{where}: ends ({d['end']}) before it starts ({d['start']})")
    try:
        return Span.from_dict(d)
    except (TypeError, ValueError) as exc:  # an outcome or a lane that is none
        raise TraceError(f"{where}: {exc}") from None


def read_text(path: str, what: str, limit: int = 256 * 2**20) -> str:
    """A UTF-8 text file's contents, or ``ValueError`` with one line that names the file: missing,
    unreadable, a directory, larger than ``limit`` bytes, or not text (a checkpoint, a PNG...)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise ValueError(f"{path}: larger than {limit // 2**20} MiB; is it {what}?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not {what} (binary, not UTF-8 text)") from None


def load_spans(path: str) -> tuple[list[Span], dict]:
    """Read a file written by :func:`save_spans`; returns ``(spans, meta)``. Raises :class:`TraceError`."""
    try:
        text = read_text(path, "a spans file")
    except ValueError as exc:
        raise TraceError(str(exc)) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except (RecursionError, ValueError):
        raise TraceError(f"{path}: not a spans file (JSON nested too deeply or numbers too long)") from None
    if not isinstance(doc, dict) or doc.get("format") != SPANS_FORMAT:
        raise TraceError(f"{path}: not an {SPANS_FORMAT} file (no \"format\": \"{SPANS_FORMAT}\")")
    if doc.get("version") not in (1, 2, 3, 4, 5, SPANS_VERSION) or isinstance(doc.get("version"), bool):
        raise TraceError(f"{path}: unsupported {SPANS_FORMAT} version {doc.get('version')!r}")
    if not isinstance(doc.get("spans"), list) or not isinstance(doc.get("meta", {}), dict):
        raise TraceError(f"{path}: \"spans\" must be a list and \"meta\" an object")
    try:
        upgrade = _from_version_1 if doc["version"] == 1 else (lambda d: d)
        spans = [_span_from_dict(upgrade(d), i) for i, d in enumerate(doc["spans"])]
    except TraceError as exc:
        raise TraceError(f"{path}: {exc}") from None
    return spans, doc.get("meta", {})
