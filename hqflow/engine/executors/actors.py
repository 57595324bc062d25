"""What runs inside Ray's processes for the ray executor (``hqflow.engine.executors.ray``): a classical worker
slot (``_Worker``), which calls fragments by reference with a job service of its own, and the holder of one
backend (``_BackendActor``)."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import time

from hqflow.backends import make_backend, register_backend
from hqflow.ir.graph import Fragment

from ..collective import Replica, as_replica
from ..fragments import call_fragment
from ...common.remote import this_node
from ...jobs.dispatch import Member, Pool
from ...jobs.accounting import job_usage
from ...jobs.client import JobClient
from ...jobs.service import JobService

# A Ray worker process's pools, kept between calls of one run so their latency estimates and
# circuit breakers carry over: (run id, pool name) -> Pool.
_REMOTE_POOLS: dict[tuple, Pool] = {}


def _remote_service(spec: dict, t0: float, record) -> JobService:
    """A job service inside a Ray worker, for a call's client, over pools of the driver's backend actors: its
    jobs go straight to the devices, with no round trip through the driver."""
    pools = {}
    for name, members in spec["pools"].items():
        key = (spec["run"], name)
        if key not in _REMOTE_POOLS:
            if len(_REMOTE_POOLS) > 64:  # pools of finished runs
                _REMOTE_POOLS.clear()
            _REMOTE_POOLS[key] = Pool(name, [Member(handle, lane, devices, capacity, node=node)
                                             for handle, lane, devices, capacity, node in members])
        pools[name] = _REMOTE_POOLS[key]
    return JobService(pools, spec["settings"], ledger=spec["ledger"], t0=t0, record=record, run_id=spec["run"])


class _Worker:
    """A classical worker slot inside a Ray actor: calls fragments by reference."""

    def call(self, fragment: Fragment, args: dict, client_spec: dict | None = None, fn=None,
             replica: Replica | None = None, kept: tuple = (), taken: tuple = (), *payloads):
        """Run ``fragment``; ``taken[i] = (arg, port)``: argument ``arg`` is ``payloads[i][port]``, a value another
        call kept. Returns what the driver reads (the outputs but the ``kept`` ports, the spans, the node, bytes
        moved, its jobs' counts and usage) and the kept outputs, which stay in Ray's object store (``RemoteValue``)."""
        t0, spans = time.perf_counter(), []
        args = dict(args, **{arg: payload[port] for (arg, port), payload in zip(taken, payloads)})
        service = None if client_spec is None else _remote_service(client_spec, t0, spans.append)
        client = service and JobClient(service, client_spec["names"], client_spec["parent"])
        with as_replica(replica), contextlib.closing(service) if service else contextlib.nullcontext():
            out = call_fragment(fragment, args, client, fn)  # (the service closes with it: its watchdog is a thread)
        node = _node()  # span times: seconds from this call's start
        keep = {port: out.pop(port) for port in kept if port in out}
        moved = {"workers_to_driver": _size(out),
                 "taken": sum(_size(payload[port]) for (_, port), payload in zip(taken, payloads))}
        jobs = service and (service.stats, service.usage)  # for the driver's figures (``Books.absorb``)
        return (out, [s if s.node else dataclasses.replace(s, node=node) for s in spans], node, moved, jobs), keep

    def ready(self) -> bool:
        return True

    def pid(self) -> int:
        """This worker's process id (what a fault test kills)."""
        return os.getpid()

    def node(self) -> str:
        return _node()

    def node_id(self) -> str:
        """This worker's whole Ray node id (what node affinity takes)."""
        return this_node()


def _size(value) -> int:
    """Bytes of ``value`` as it crosses a process boundary (its pickle, buffers out of band)."""
    buffers = []
    head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return len(head) + sum(memoryview(b).nbytes for b in buffers)


def _node() -> str:
    """This Ray process's node: the first 8 hex digits of its id (what spans carry)."""
    return this_node()[:8]


class _BackendActor:
    """Holds one backend inside a Ray actor; ``run`` blocks until its job is done."""

    def __init__(self, name: str, options: dict, registration: tuple | None = None):
        if registration is not None:  # a backend registered in the driver beyond the built-ins
            prefix, factory, suffix = registration
            register_backend(prefix, factory, listed=False, suffix=suffix)
        self.backend = make_backend((name, options))

    def describe(self):
        b = self.backend
        return b.name, b.capabilities, b.max_in_flight, b.priced, _node()

    def estimate_cost(self, batch):
        return self.backend.estimate_cost(batch)

    def usage(self, batch):
        return self.backend.usage(batch)

    def run(self, batch, _back=None):
        """``_back``: the answer of a call made after the actor was lost (resolved by Ray before this runs).
        The result carries what the job used (``metadata["usage"]``, ``job_usage``), worked out here, where
        the backend is: the job service then needs no call back to ask its prediction."""
        result = self.backend.submit(batch).result()
        result.metadata["usage"] = job_usage(self.backend, batch, result.metadata)
        return result

    def close(self) -> None:
        self.backend.close()  # the run's session, the backend's threads

