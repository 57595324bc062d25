"""The machine the cost model simulates: nothing is computed, and everything takes the time a profile says.

``Host`` shares this machine's CPUs among the work on it; ``SimBackend`` is a profiled pool member (its queue,
devices, failures and price); ``SimExecutor`` runs a fragment call as its profiled seconds, and a call that submits
jobs itself (``nested_calls``) as slices of its own work between its jobs. ``costmodel`` runs the scheduler on them.
"""
from __future__ import annotations

import concurrent.futures as cf
import itertools
import random

import numpy as np

from hqflow.backends import Backend, BatchResult, Capabilities, CircuitBatch, Cost, FutureJob, JobFailed, Usage
from hqflow.ir.circuit import CircuitTemplate
from hqflow.ir.graph import CircuitCall, Graph

from ..common.clock import SimClock
from ..engine.executors import SyncExecutor
from .profile import BackendProfile, Profile


class Host:
    """This machine's CPUs, shared (processor sharing): while ``n`` pieces of work compute here at once, each
    progresses at ``min(1, cores / n)`` of its full speed (``cores`` None: full speed)."""

    def __init__(self, clock: SimClock, cores: float | None):
        self.clock, self.cores = clock, cores
        self.running: dict[int, list] = {}  # token -> [CPU seconds left, what to call when done]
        self.last, self.generation = 0.0, 0
        self.tokens = itertools.count()

    def run(self, work: float, then) -> None:
        """Compute ``work`` CPU seconds, then call ``then()``."""
        if self.cores is None or work <= 0:
            self.clock.at(self.clock.now() + max(0.0, work), then)
            return
        self._advance()
        self.running[next(self.tokens)] = [work, then]
        self._next()

    def _rate(self) -> float:
        return min(1.0, self.cores / max(1, len(self.running)))

    def _advance(self) -> None:
        now = self.clock.now()
        done = (now - self.last) * self._rate()
        for piece in self.running.values():
            piece[0] -= done
        self.last = now

    def _next(self) -> None:
        """Be woken when the piece with the least left ends (a later change of ``n`` makes a new wake-up)."""
        self.generation += 1
        if self.running:
            token = min(self.running, key=lambda t: self.running[t][0])
            generation = self.generation
            self.clock.at(self.clock.now() + max(0.0, self.running[token][0]) / self._rate(),
                          lambda: self._wake(generation, token))

    def _wake(self, generation: int, token: int) -> None:
        if generation != self.generation:
            return
        self._advance()
        # the piece this wake-up was for ends now, whatever rounding left of it (a clock far from 0 cannot
        # step by less than its own precision), and so does any piece within that precision of its end
        tolerance = 1e-9 * max(1.0, self.clock.now())
        ended = [t for t, piece in self.running.items() if t == token or piece[0] <= tolerance]
        calls = [self.running.pop(t)[1] for t in ended]
        self._next()
        for then in calls:
            then()


class SimBackend(Backend):
    """A pool member as its profile says, on the simulated clock: ``devices`` jobs at once, each after the queue,
    ending when both its device time and its computation here (``Host``) are done. ``draw``: None folds a
    job's expected retries into its time; a ``random.Random`` fails attempts."""

    def __init__(self, profile: BackendProfile, clock: SimClock, host: Host, overhead: float,
                 draw: random.Random | None):
        self.p, self.clock, self.host, self.overhead, self.draw = profile, clock, host, overhead, draw
        self.name, self.fails = profile.backend.name, min(profile.failure_rate, 0.99)  # a job ends some day
        self.capabilities = Capabilities(self.name, 1 << 20, device="qpu")
        self.max_in_flight = max(1, profile.devices)
        self.free = self.max_in_flight
        self.ready: list = []  # jobs out of the queue, waiting for a device, in order
        self.busy = 0.0
        self.priced = profile.price_per_job is not None

    def estimate_cost(self, batch: CircuitBatch) -> Cost:
        """A first attempt's expected spend, its retries included (a retry adds nothing more), in the profile's
        currency ("profiled")."""
        amount = 0.0 if batch.attempt else self.p.price(batch.size, batch.shots) / max(1e-9, 1.0 - self.fails)
        return Cost(amount, "profiled", 1)

    def usage(self, batch: CircuitBatch) -> Usage:
        """Its rows as circuits, and the service jobs the profile fitted for that many rows."""
        return Usage.of(batch, self.p.service_jobs(batch.size))

    def submit(self, batch: CircuitBatch) -> FutureJob:
        future: cf.Future = cf.Future()
        # the dispatch takes ``overhead``; a job sent ahead (prefetch) has it behind the running one
        self.clock.at(self.clock.now() + self.overhead + self.p.queue, lambda: self._queued(batch, future))
        return FutureJob(future, self.name)

    def _queued(self, batch: CircuitBatch, future: cf.Future) -> None:
        self.ready.append((batch, future))
        self._start()

    def _start(self) -> None:
        while self.free and self.ready:
            batch, future = self.ready.pop(0)
            self.free -= 1
            p, rows = self.p, batch.size
            retries = 1.0 if self.draw is not None else 1.0 / max(1e-9, 1.0 - self.fails)
            hold = (p.per_job + p.per_row * rows + p.per_shot * rows * (batch.shots or 0)) * retries
            start, parts = self.clock.now(), [2]

            def part_done(batch=batch, future=future, start=start, parts=parts):
                parts[0] -= 1
                if not parts[0]:
                    self._finish(batch, future, start)

            self.clock.at(start + hold, part_done)
            self.host.run(p.compute(rows, batch.shots) * retries, part_done)

    def _finish(self, batch: CircuitBatch, future: cf.Future, start: float) -> None:
        self.busy += self.clock.now() - start
        self.free += 1
        if not future.cancelled():
            if self.draw is not None and self.draw.random() < self.fails:
                future.set_exception(JobFailed(f"simulated failure on {self.name}"))
            else:
                future.set_result(BatchResult(values=np.zeros((batch.size, 0))))
        self._start()


class SimExecutor(SyncExecutor):
    """Fragment calls that compute nothing: after the scheduler's overhead, each takes its profiled seconds,
    on this machine's shared CPUs (``Host``) for a ``cpu`` call."""

    def __init__(self, profile: Profile, clock: SimClock, host: Host, rows: dict, nested: dict):
        super().__init__()
        self.profile, self.clock, self.host, self.rows, self.nested = profile, clock, host, rows, nested
        self.elsewhere = Host(clock, None)

    def submit(self, fragment, args, resource, client=None, replica=None, kept=()) -> cf.Future:
        future: cf.Future = cf.Future()
        outputs = ({p.name: None for p in fragment.outputs}, [], None)
        now, overhead = self.clock.now(), self.profile.overhead
        host = self.host if resource == "cpu" else self.elsewhere
        if fragment.name not in self.nested or client is None:
            seconds = self.profile.fragment(fragment.name).seconds
            self.clock.at(now + overhead, lambda: host.run(seconds, lambda: future.set_result(outputs)))
            return future
        pool, rounds, size, piece, shots = self.nested[fragment.name]
        batch = CircuitBatch(CircuitTemplate(1, ()), np.zeros((size, 0)), np.zeros(0), shots or None)

        def round_(left: int) -> None:  # a slice of the call's own work is done: its job goes out
            job = client.submit(pool, batch)
            job.add_done_callback(lambda job: future.set_exception(job.exception()) if job.exception() else
                                  host.run(piece, lambda: round_(left - 1)) if left > 1 else
                                  future.set_result(outputs))

        self.clock.at(now + overhead, lambda: host.run(piece, lambda: round_(rounds)))
        return future

    def circuit_batch(self, fragment, args, seed):
        c = fragment.circuit
        stand_in = CircuitTemplate(c.n_qubits, (), shots=c.shots, name=c.name)
        return CircuitBatch(stand_in, np.zeros((self.rows[fragment.name], 0)), np.zeros(0), c.shots, seed), None

    def circuit_outputs(self, fragment, result, post) -> dict:
        return {p.name: None for p in fragment.outputs}


def nested_calls(graph: Graph, profile: Profile) -> dict:
    """Classical fragments that submit jobs themselves: name -> (pool, rounds, rows per job, seconds per round,
    shots per circuit)."""
    out = {}
    for f in graph.fragments:
        if isinstance(f, CircuitCall) or not f.job_backends:
            continue
        try:
            p = profile.fragment(f.name)
        except KeyError:
            continue
        if p.jobs > 0 and p.classical is not None:
            rounds = max(1, round(p.jobs))
            out[f.name] = (f.job_backends[0], rounds, max(1, round(p.rows)), p.classical / rounds, round(p.shots))
    return out
