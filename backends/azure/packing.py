"""A batch's rows into service jobs, and their outputs back into rows (issue 25).

A submitted batch of ``B`` rows and ``G`` measurement groups becomes ``ceil(B / per_job) * G`` service
jobs, ``Chunk``s: rows ``lo:hi`` of one group. ``per_job`` is the target's packing for the backend's
input format (``cost.limits``): 1 for IonQ and Quantinuum, whose formats carry one circuit, and up to
``max_bindings`` for Rigetti's Quil, whose job runs one program once per parameter set
(``substitutions``, ``count`` shots each).

Each chunk's service job ids come from ``id_base``: a one-row chunk keeps the per-row form hqflow used
before packing, ``{key}|{digest}|{row}|{group}``, so a run resumed across the change finds its jobs; a
packed chunk's is ``{key}|{digest}|{lo}:{hi}|{group}``, which the per-row form cannot spell. The chunks are
a function of the batch and ``per_job`` alone, so a retry of the batch makes the same chunks and looks up
the same ids.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import numpy as np

from ..base import BackendError, CircuitBatch
from .results import counts_of, counts_of_bindings
from .translate import Format, Payloads

NAMESPACE = uuid.UUID("6b1f3c2e-8d1a-4c55-9a57-0d6c2f6f1a11")
PACKS = ("quil",)  # the input formats whose service job holds several rows (parameter bindings)


@dataclass(frozen=True)
class Chunk:
    """Rows ``lo:hi`` of one measurement group: one service job (and its tries)."""

    lo: int
    hi: int
    group: int
    base: str  # the id base: its service jobs' ids are ``job_id(base, attempt, try)``
    body: bytes  # the job's input data
    params: dict = field(default_factory=dict)  # input parameters beyond the shots (Quil's substitutions)

    @property
    def rows(self) -> int:
        return self.hi - self.lo

    def label(self) -> str:
        return f"row {self.lo}" if self.rows == 1 else f"rows {self.lo}-{self.hi - 1}"


def ranges(rows: int, per_job: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` of each service job's rows: ``per_job`` at a time, in order."""
    return [(lo, min(lo + per_job, rows)) for lo in range(0, rows, per_job)]


def id_base(key: str, digest: str, lo: int, hi: int, group: int) -> str:
    """The per-row form for one row (the ids from before packing), ``lo:hi`` for several."""
    return f"{key}|{digest}|{lo}|{group}" if hi == lo + 1 else f"{key}|{digest}|{lo}:{hi}|{group}"


def job_id(base: str, attempt: int, try_: int) -> str:
    """A service job's id: try 0 keeps the ids of hqflow before per-row tries."""
    return str(uuid.uuid5(NAMESPACE, f"{base}|{attempt}" + (f"|{try_}" if try_ else "")))


def plan(payloads: Payloads, batch: CircuitBatch, key: str, digest: str, per_job: int) -> list[Chunk]:
    """The batch's service jobs, chunk by chunk and group by group (row-major, as before packing)."""
    out = []
    if payloads.format.kind in PACKS:
        for lo, hi in ranges(batch.size, per_job):
            texts, subs = payloads.bindings(batch, lo, hi)
            out += [Chunk(lo, hi, g, id_base(key, digest, lo, hi, g), text, {"substitutions": subs})
                    for g, text in enumerate(texts)]
        return out
    if per_job != 1:
        raise BackendError(f"{payloads.format.input_data_format} carries one circuit per job, not {per_job}")
    for r, row in enumerate(payloads.rows(batch)):
        out += [Chunk(r, r + 1, g, id_base(key, digest, r, r + 1, g), body) for g, body in enumerate(row)]
    return out


def sampling_rng(batch: CircuitBatch, row: int, group: int, service_job: str) -> np.random.Generator:
    """The generator that samples a returned distribution for ``row`` and ``group``: from the row's own seed
    where the batch has ``row_seeds`` (results then do not depend on how rows are cut), else as before
    (the batch's seed with the row's index in it, or the service job's id)."""
    if batch.row_seeds is not None:
        return np.random.default_rng([int(batch.row_seeds[row]), group])
    seed = batch.seed
    return np.random.default_rng([seed, row, group] if seed is not None else uuid.UUID(service_job).int % 2**63)


def service_seed(batch: CircuitBatch, row: int, group: int, service_job: str, base: int = 0) -> int:
    """A seed in 1..2**31 - 1 for the service's own sampling of ``row``'s ``group`` (IonQ's noisy simulator takes it as
    ``noise.seed``; Azure's IonQ page allows 1 to 2**31): drawn from ``sampling_rng``'s generator, mixed with ``base``
    (the ``noise_seed`` option), so that a run's noisy samples are a function of its seeds."""
    draw = int(sampling_rng(batch, row, group, service_job).integers(2**63))
    return int(np.random.default_rng([int(base), draw]).integers(1, 2**31))


def unpack(fmt: Format, raw: bytes, chunk: Chunk, batch: CircuitBatch, shots: int, service_job: str,
           sample: bool) -> list[dict[str, int]]:
    """Counts of each of the chunk's rows, in order, from its service job's output."""
    n = batch.template.n_qubits
    if fmt.kind == "quil":
        return counts_of_bindings(raw, n, shots, chunk.rows)
    rng = sampling_rng(batch, chunk.lo, chunk.group, service_job)
    return [counts_of(fmt, raw, n, shots, rng, sample)]
