"""Executors: where fragment work runs. ``sync`` runs it inline on the scheduler's thread (the reference),
``local`` on a thread pool per classical resource (the default), both here; ``ray`` on Ray actors (``ray.py``,
imported only when a run uses it; what runs inside its actors: ``actors.py``); ``scheduler.make_executor``
makes the one a run's config names.

The scheduler's one loop (and the cost model's simulated executor) drives each through
``submit(fragment, args, resource, client, replica, kept) -> Future[(outputs, spans, node)]`` for classical
fragments (``spans``: jobs the run's own job service did not see, timed from the call's start; ``node``: the
Ray node, or None in this process) and ``backend(spec, default_in_flight) -> (backend, node)`` for quantum
backends: a ``Backend`` (the instance, one made from its spec, or a proxy of one in a Ray actor) and the Ray
node it runs on. A backend spec is a backend instance (``sync``/``local`` only), a registry name, or
``(name, options)``.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
from typing import Any

from hqflow.backends import Backend, is_backend, make_backend
from hqflow.ir.graph import Fragment, Graph

from ..collective import Rendezvous, Replica, as_replica
from ..fragments import call_fragment, execute_batch, execute_outputs
from ..scheduler_config import ExecutorKind
from ...common.threads import DaemonPool
from ...jobs.ledger import Ledger
from ...jobs.client import JobClient

_NO_TRAFFIC = {"driver_to_workers": 0, "workers_to_driver": 0, "worker_to_worker": 0}


class Executor:
    """What every executor shares: a circuit call's batch is built, and its outputs taken from its job's
    result, on the scheduler's side (``hqflow.engine.fragments``); values stay in this process."""

    def kept_ports(self, graph: Graph) -> dict[str, tuple[str, ...]]:
        """Per classical fragment, the output ports that may stay where they were made (none: values stay here)."""
        return {}

    circuit_batch = staticmethod(execute_batch)  # (fragment, args, seed) -> (the call's one batch, postprocessing)
    circuit_outputs = staticmethod(execute_outputs)  # (fragment, result, post) -> the call's output ports

    _rendezvous = None
    _new_rendezvous = Rendezvous

    def rendezvous(self) -> Rendezvous:
        """Where this run's fragment replicas reduce (``hqflow.engine.collective``), made at first use: in this
        process, or in a Ray actor under ``ray``."""
        if self._rendezvous is None:
            self._rendezvous = self._new_rendezvous()
        return self._rendezvous


class SyncExecutor(Executor):
    """Runs every task inline; the scheduler runs one thing at a time with it."""

    kind = ExecutorKind.SYNC

    def __init__(self):
        self.owned: list[Backend] = []  # backends made here from a name: closed with the run

    def submit(self, fragment: Fragment, args: dict, resource: str, client: JobClient | None = None,
               replica: Replica | None = None, kept: tuple = ()) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(_local_call(fragment, args, client, replica))
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    def moved(self) -> dict:
        """Bytes this run moved between processes (none: everything ran in this one)."""
        return dict(_NO_TRAFFIC, reduce=0)

    def backend(self, spec: Any, default_in_flight: int) -> tuple[Backend, None]:
        """The backend ``spec`` stands for, in this process (no Ray node)."""
        backend = make_backend(spec)
        if not is_backend(spec):
            self.owned.append(backend)
        return backend, None

    ledger = staticmethod(Ledger)  # (budget, shot_budget, path) -> the run's spend and budgets, here with its jobs

    def close(self) -> None:
        for backend in self.owned:
            with contextlib.suppress(Exception):
                backend.close()  # ends what the backend opened for the run (an Azure session, its threads)
        self.owned.clear()


class LocalExecutor(SyncExecutor):
    """A thread pool per classical resource: ``cpu`` with ``cpu_workers``, ``gpu`` with ``gpu_workers``."""

    kind = ExecutorKind.LOCAL

    def __init__(self, cpu_workers: int = 1, gpu_workers: int = 1):
        super().__init__()
        self.pools = {"cpu": DaemonPool(cpu_workers, "hqflow-cpu"), "gpu": DaemonPool(gpu_workers, "hqflow-gpu")}

    def submit(self, fragment: Fragment, args: dict, resource: str, client: JobClient | None = None,
               replica: Replica | None = None, kept: tuple = ()) -> cf.Future:
        return self.pools[resource].submit(_local_call, fragment, args, client, replica)

    def close(self) -> None:
        for pool in self.pools.values():
            pool.shutdown()
        super().close()


def _local_call(fragment: Fragment, args: dict, client: JobClient | None, replica: Replica | None = None):
    with as_replica(replica):
        return call_fragment(fragment, args, client), [], None
