"""The client a running classical fragment submits circuit jobs through (``get_client()``), and its pools seen
as backends (``PoolBackend``)."""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import contextvars
import dataclasses

from hqflow.backends import Backend, BackendError, Capabilities, CircuitBatch, FutureJob

from ..common.outcome import OK, Outcome
from ..trace import Span
from . import accounting
from .dispatch import Parent, Pool
from .service import JobService


class JobClient:
    """What a running classical fragment submits circuit jobs through: ``submit(name, batch)`` gives a
    ``Future`` of the ``BatchResult``, ``backend(name)`` the pool as a backend for code that takes one.
    Only the backend names the fragment declared (``Fragment.job_backends``) are open to it."""

    def __init__(self, service: JobService, names: tuple[str, ...], parent: Parent):
        self._service, self.names, self.parent = service, tuple(names), parent

    def _pool(self, name: str) -> Pool:
        if name not in self.names:
            raise BackendError(f"fragment {self.parent.fragment!r} did not declare backend {name!r} "
                               f"(job_backends={list(self.names)}); declare every backend it submits to")
        return self._service.pools[name]

    def submit(self, name: str, batch: CircuitBatch) -> cf.Future:
        """Run ``batch`` on pool ``name``; a ``Future`` of its ``BatchResult``. Under a usage meter
        (``hqflow.jobs.accounting.meter()``, bound where this is called) the job's usage, all its attempts, is
        recorded into that meter before the future is done: the result's ``metadata["usage"]``, or a failed
        job's ``exception.usage``."""
        self._pool(name)
        return self._service.submit(name, batch, self.parent, accounting.current())

    def capabilities(self, name: str) -> Capabilities:
        return self._pool(name).capabilities

    def devices(self, name: str) -> int:
        """How many jobs pool ``name`` runs at once."""
        return self._pool(name).devices

    def backend(self, name: str) -> PoolBackend:
        self._pool(name)
        return PoolBackend(self, name)

    @contextlib.contextmanager
    def work(self, label: str):
        """Time a stretch of the fragment's own work done while its jobs are in flight (an actor group
        stepping its environments) as a span in lane ``LANE/label``, so the trace shows the overlap."""
        now = self._service.clock.now
        start = now()
        outcome = OK
        try:
            yield
        except BaseException as exc:
            outcome = Outcome.error(exc)
            raise
        finally:
            p, t0 = self.parent, self._service.t0
            self._service.record(Span(p.fragment, p.kind, p.resource, p.step, start - t0, now() - t0,
                                      outcome, p.version, p.lane.within(label), p.lane))


class PoolBackend(Backend):
    """A pool seen through a client, as a backend: ``submit(batch) -> Job``. Its jobs go through the
    scheduler, never in process: its capabilities say no ``program`` (gradient None for an "autograd" pool)."""

    def __init__(self, client: JobClient, name: str):
        self._client, self.name = client, name

    @property
    def capabilities(self) -> Capabilities:
        caps = self._client.capabilities(self.name)
        return dataclasses.replace(caps, gradient=None) if caps.gradient == "autograd" else caps

    def submit(self, batch: CircuitBatch) -> FutureJob:
        return FutureJob(self._client.submit(self.name, batch), self.name)


_CLIENT: contextvars.ContextVar[JobClient | None] = contextvars.ContextVar("hqflow_job_client", default=None)


def get_client() -> JobClient:
    """The job client of the fragment running on this thread (``BackendError`` outside one). Threads a
    fragment starts do not inherit it: hand them the client (or ``client.backend(name)``) explicitly."""
    client = _CLIENT.get()
    if client is None:
        raise BackendError("get_client() is only available inside a running fragment that declares job_backends")
    return client


def current_client() -> JobClient | None:
    """The running fragment's client, or ``None`` outside a fragment (or one that declared no backends)."""
    return _CLIENT.get()


def pool_backend(name):
    """The running fragment's pool ``name`` as a backend (``JobClient.backend``), or None when
    ``name`` is not a string naming one of its pools (or no fragment is running)."""
    client = _CLIENT.get()
    if isinstance(name, str) and client is not None and name in client.names:
        return client.backend(name)
    return None


@contextlib.contextmanager
def bound_client(client: JobClient | None):
    """Run the body with ``client`` as the current one (what ``get_client()`` returns)."""
    token = _CLIENT.set(client)
    try:
        yield
    finally:
        _CLIENT.reset(token)
