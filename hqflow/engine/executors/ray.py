"""The ray executor: classical slots as long-lived Ray actors, backends and the run's ledger and rendezvous
in Ray actors of their own (what runs inside them: ``hqflow.engine.executors.actors``)."""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import logging
import os
import sys
import threading
from typing import Any

from hqflow.backends import Backend, FutureJob, as_backend, backend_spec, is_backend, registration
from hqflow.ir.graph import CircuitCall, Fragment, Graph, resolve_fn
from hqflow.ir.text import one_line

from . import _NO_TRAFFIC, Executor
from .actors import _BackendActor, _size, _Worker
from ..collective import RayRendezvous, Replica
from ..scheduler_config import ExecutorKind
from ..placement import Placement
from ...common.remote import RayFailure, Remote, future, get
from ...jobs.client import JobClient
from ...jobs.ledger import RemoteLedger


def _by_value(fragment: Fragment):
    """The function of a fragment defined in the driver's ``__main__`` (a script), which no worker
    can import: Ray sends it by value (cloudpickle pickles ``__main__`` functions whole). None otherwise."""
    in_main = isinstance(fragment.fn, str) and fragment.fn.startswith("__main__:")
    return resolve_fn(fragment.fn) if in_main else None


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class RemoteValue:
    """An output a Ray worker kept in the object store (``Scheduler``'s ``kept`` ports): the driver holds
    the reference, and owns the object, and hands it to the call that takes the value."""

    ref: Any
    port: str

    def __repr__(self) -> str:
        return f"<RemoteValue {self.port} in Ray's object store>"


# Worker actors hold no state (fragments travel by reference, state by value), so one
# Ray session keeps them for every run: (namespace, job id, placement, resource, index) -> actor.
_WORKERS: dict[tuple, Any] = {}
# ... and the placement groups of packed ones: (namespace, job id, placement) -> (group, bundles).
_GROUPS: dict[tuple, tuple] = {}

_WORKER_RETRIES = 3  # calls redone on a worker actor that Ray restarted after its process died
_READY_TIMEOUT = 120.0  # seconds for worker actors to answer before the run starts


class _RayJob(FutureJob):
    """A job on a backend actor. A call running in an actor cannot be interrupted, so cancelling
    one (a job past its timeout) restarts the actor: a hung backend does not hold its slots."""

    def __init__(self, handle: "_RayHandle", ref):
        super().__init__(future(ref, lost=handle.lost), handle.name)
        self._handle = handle

    def cancel(self) -> bool:
        if self.done():
            return False
        self._handle.restart()
        return True


class _RayHandle(Remote, Backend, calls=("estimate_cost", "usage")):
    """A backend in a Ray actor, as a ``Backend`` here (picklable: worker actors' job services submit to it
    too). Ray restarts the actor when its process dies: the job it held fails and is retried. Ray fails a call
    made while the process starts again (seconds on a busy machine), so after a loss each job waits for the
    actor to answer, and retries are not used up on a process still starting."""

    def __init__(self, actor_cls, spec: Any, default_in_flight: int, node: str | None = None):
        if is_backend(spec):
            raise ValueError(f"the ray executor makes its backends inside Ray actors; give "
                             f"{as_backend(spec).name!r} as a name or (name, options), not as an instance")
        name, options = backend_spec(spec)
        entry = registration(name)  # passed only where needed: a subclass of the actor may take (name, options)
        slots = int(options.get("max_in_flight", default_in_flight))
        # slots for the jobs, and two more so that pricing and closing never wait behind them; with a node,
        # beside the worker actors that use it (Placement.backends="with-actors")
        super().__init__(actor_cls, name, options, *(() if entry is None else (entry,)), node=node,
                         max_concurrency=max(slots, 1) + 2, max_restarts=-1)
        self.name, self.capabilities, self.max_in_flight, self.priced, self.node = self.call("describe")
        self._lock = threading.Lock()
        self._back, self._lost = None, False  # after a loss or a restart: a call that returns once the actor answers

    def __getstate__(self):  # sent to worker actors inside their job clients' pools
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_back")}

    def __setstate__(self, state):
        self.__dict__.update(state, _lock=threading.Lock(), _back=None, _lost=False)

    priced = False  # set from the actor's backend: what the job service asks before estimate_cost

    def submit(self, batch) -> FutureJob:
        with self._lock:
            if self._lost:
                self._lost, self._back = False, self.actor.describe.options(max_task_retries=-1).remote()
            back = self._back  # an argument Ray resolves before it sends the call: the actor is up again
        return _RayJob(self, self.send("run", batch) if back is None else self.send("run", batch, back))

    def stop(self) -> None:
        """Close the backend (its Azure session, say: best effort, the actor may be gone), then end the actor."""
        with contextlib.suppress(Exception):
            get(self.send("close"), timeout=10)
        super().stop()

    def lost(self) -> None:
        """A job failed with the actor's process: the next jobs wait until it answers again. (Called on
        Ray's callback thread, so it only notes it.)"""
        self._lost = True

    def restart(self) -> None:
        """A fresh process for this backend (its running jobs fail, and are retried by the job service).
        Once per start: jobs that time out while the new process starts do not restart it again."""
        import ray

        with self._lock:
            if self._back is not None and not ray.wait([self._back], timeout=0)[0]:
                return  # still starting
            ray.kill(self.actor, no_restart=False)
            self._lost, self._back = False, self.actor.describe.options(max_task_retries=-1).remote()


class RayExecutor(Executor):
    """Classical slots as long-lived Ray actors (``cpu`` slots hold one CPU each; ``gpu`` slots a GPU when
    the cluster has one), backends as Ray actors that reserve no CPU and are made anew for each run.
    Fragments travel by reference (``module:qualname``) and state by value. Actors, not tasks: a call on a
    warm actor costs about a millisecond, a fresh task several, and the learner keeps its process (and GPU)."""

    kind = ExecutorKind.RAY
    _new_rendezvous = RayRendezvous

    def kept_ports(self, graph: Graph) -> dict[str, tuple[str, ...]]:
        """Per classical fragment, the output ports that only other classical fragments read, in the same
        step: they may stay in the object store (submit's ``kept``), since the driver never reads them."""
        kept = {}
        for f in graph.fragments:
            if not isinstance(f, CircuitCall):
                edges = {p.name: [e for e in graph.edges if e.src == (f.name, p.name)] for p in f.outputs}
                kept[f.name] = tuple(p for p, es in edges.items() if es and all(
                    not e.loop and e.dst[0] is not None and not isinstance(graph.fragment(e.dst[0]), CircuitCall)
                    for e in es))
        return kept

    def __init__(self, num_cpus: int | None = None, cpu_workers: int = 1, gpu_workers: int = 1,
                 address: str | None = None, placement: Placement = Placement()):
        import ray
        from ray.util.placement_group import remove_placement_group

        if ray.is_initialized() and address is not None and address != "auto" \
                and address.split("://")[-1] != ray.get_runtime_context().gcs_address:
            raise ValueError(f"this process is connected to the Ray at {ray.get_runtime_context().gcs_address}, "
                             f"not {address}; call ray.shutdown() first to connect elsewhere")
        if not ray.is_initialized():  # workers import what this process can (a user's env module, say)
            env = {"env_vars": {"PYTHONPATH": _import_path()}}
            # no address: "local", a Ray of its own, even where another runs on this machine; its workers
            # are the run's own work, as urgent as this process: Ray's default (niceness 15) starved them
            # to a few percent of a core beside any other busy process
            own = {"num_cpus": num_cpus, "include_dashboard": False, "_system_config": {"worker_niceness": 0}}
            # Ray's notice that it enabled token authentication (its secure default, kept) is not the user's business
            auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
            level = auth_log.level
            auth_log.setLevel(logging.ERROR)
            try:
                ray.init(address="local" if address is None else address, log_to_driver=False,
                         configure_logging=False, runtime_env=env, **(own if address is None else {}))
            except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception when its node times out starting
                where = "a local Ray" if address is None else f"the Ray cluster at {address}"
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise RayFailure(f"cannot start or reach {where}: {one_line(first)} (a busy machine starts Ray "
                                 "slowly: try again, or run without Ray)") from None
            finally:
                auth_log.setLevel(level)
        self._ray = ray
        cluster = ray.cluster_resources()
        gpus = cluster.get("GPU", 0) > 0
        if cpu_workers > cluster.get("CPU", 0):
            raise ValueError(f"cpu_workers={cpu_workers} but the Ray cluster has {cluster.get('CPU', 0):g} CPUs; "
                             "each cpu worker actor holds one")
        context = ray.get_runtime_context()
        self.placement = placement
        self._session = (context.namespace, context.get_job_id())  # a Ray started anew has other actors
        for table in (_WORKERS, _GROUPS):  # handles of an earlier Ray session: not valid in this one
            for key in [k for k in table if k[:2] != self._session]:
                del table[key]
        for key in [k for k in _WORKERS if k[2] != placement]:
            ray.kill(_WORKERS.pop(key), no_restart=True)  # placed otherwise: they would hold CPUs the new ones need
        for key in [k for k in _GROUPS if k[2] != placement]:
            remove_placement_group(_GROUPS.pop(key)[0])  # its reserved CPUs too
        self._options = {"cpu": {"num_cpus": 1, **placement.options("cpu")},
                         "gpu": {"num_cpus": 0, "num_gpus": 1 if gpus else 0, **placement.options("gpu")}}
        self._group = self._placement_group(cpu_workers) if placement.actors == "pack" else None
        self._idle = {resource: [self._worker(resource, i) for i in range(count)]
                      for resource, count in (("cpu", cpu_workers), ("gpu", gpu_workers))}
        self._check_ready()  # started before the run's clock
        self._running: dict[int, Any] = {}  # id -> worker actor, while it runs a call
        self._backends: list[_RayHandle] = []
        self._ledgers: list[RemoteLedger] = []
        self._lock = threading.Lock()
        self.traffic = dict(_NO_TRAFFIC)

    def _placement_group(self, bundles: int):
        """The session's placement group for ``pack``ed worker actors: one CPU bundle each, reserved at once.
        One of another size is removed (with the workers in it) and made anew."""
        from ray.util.placement_group import placement_group, remove_placement_group

        key = (*self._session, self.placement)
        group = _GROUPS.get(key)
        if group is not None and group[1] != bundles:
            remove_placement_group(group[0])  # ends the actors in it
            for k in [k for k in _WORKERS if k[:3] == key and k[3] == "cpu"]:
                del _WORKERS[k]
            group = None
        if group is None:
            pg = placement_group([{"CPU": 1}] * bundles, strategy="PACK")
            ready, _ = self._ray.wait([pg.ready()], timeout=_READY_TIMEOUT)
            if not ready:
                remove_placement_group(pg)
                raise RayFailure(f"a placement group of {bundles} CPUs could not be reserved within "
                                 f"{_READY_TIMEOUT:g} s (the cluster has {self._ray.cluster_resources().get('CPU', 0):g})")
            group = _GROUPS[key] = (pg, bundles)
        return group[0]

    def _worker(self, resource: str, index: int, fresh: bool = False):
        """The session's worker actor for a slot: kept between runs, restarted by Ray when its
        process dies (a call it held is redone: fragments are functions of their inputs)."""
        key = (*self._session, self.placement, resource, index)
        if fresh or key not in _WORKERS:
            options = dict(self._options[resource])
            if resource == "cpu" and self._group is not None:
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=index)
            _WORKERS[key] = self._ray.remote(_Worker).options(
                max_restarts=-1, max_task_retries=_WORKER_RETRIES, **options).remote()
        return _WORKERS[key]

    def _check_ready(self) -> None:
        """Wait for every worker actor; one that died for good or does not answer is replaced once."""
        ray = self._ray
        for attempt in (0, 1):
            slots = [(r, i, a) for r, pool in self._idle.items() for i, a in enumerate(pool)]
            refs = [a.ready.remote() for _, _, a in slots]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=_READY_TIMEOUT)
            bad = []
            for (resource, i, actor), ref in zip(slots, refs):
                try:
                    if ref not in ready:
                        raise TimeoutError
                    ray.get(ref)
                except (ray.exceptions.RayError, TimeoutError):
                    bad.append((resource, i, actor))
            if not bad:
                return
            if attempt:
                cluster = ray.cluster_resources().get("CPU", 0)
                free = ray.available_resources().get("CPU", 0)
                raise RayFailure(f"{len(bad)} Ray worker actors did not start within {_READY_TIMEOUT:g} s "
                                 f"(the cluster has {cluster:g} CPUs, {free:g} free)")
            for resource, i, actor in bad:
                ray.kill(actor, no_restart=True)
                self._idle[resource][i] = self._worker(resource, i, fresh=True)

    def submit(self, fragment: Fragment, args: dict, resource: str, client: JobClient | None = None,
               replica: Replica | None = None, kept: tuple = ()) -> cf.Future:
        """``kept``: output ports that stay in Ray's object store, as ``RemoteValue``s, for later calls
        to take worker to worker; a ``RemoteValue`` in ``args`` is taken so."""
        with self._lock:  # the scheduler never asks for more than the slots it has
            actor = self._idle[resource].pop()
        spec = None if client is None else self._client_spec(client)
        remote = {k: v for k, v in args.items() if isinstance(v, RemoteValue)}
        plain = {k: v for k, v in args.items() if k not in remote}
        self.traffic["driver_to_workers"] += _size(plain)
        taken = tuple((k, v.port) for k, v in remote.items())
        meta, payload = actor.call.options(num_returns=2).remote(
            fragment, plain, spec, _by_value(fragment), replica, tuple(kept), taken, *[v.ref for v in remote.values()])
        with self._lock:
            self._running[id(actor)] = actor

        def unpack(result):
            out, spans, node, moved, jobs = result
            if jobs:  # a worker's job counts and usage join the driver's service's: what a run reports is all it did
                client._service.books.absorb(*jobs)
            self.traffic["workers_to_driver"] += moved["workers_to_driver"]
            self.traffic["worker_to_worker"] += moved["taken"]  # each call that takes a kept value
            out.update({port: RemoteValue(payload, port) for port in kept})
            return out, spans, node

        fut = future(meta, unpack)

        def release(_):
            with self._lock:
                self._running.pop(id(actor), None)
                self._idle[resource].append(actor)

        fut.add_done_callback(release)
        return fut

    def _client_spec(self, client: JobClient) -> dict:
        service = client._service
        pools = {name: [(m.handle, m.lane, m.devices, m.capacity, m.node) for m in service.pools[name].members]
                 for name in client.names}
        return {"run": service.run_id, "names": client.names, "parent": client.parent, "pools": pools,
                "settings": service.settings, "ledger": service.ledger}  # the settings as they are, pickled

    def backend(self, spec: Any, default_in_flight: int) -> tuple[_RayHandle, str]:
        """A proxy of backend ``spec`` made in a Ray actor of its own, and the node that actor runs on."""
        node = None
        if self.placement.backends == "with-actors":  # round-robin over the cpu worker actors' nodes
            workers = self._idle["cpu"]
            node = get(workers[len(self._backends) % len(workers)].node_id.remote())
        handle = _RayHandle(_BackendActor, spec, default_in_flight, node)
        self._backends.append(handle)
        return handle, handle.node

    def moved(self) -> dict:
        """Bytes this run moved between processes: arguments the driver sent, outputs it read, outputs
        that went worker to worker through the object store, and the replicas' reductions."""
        return dict(self.traffic, reduce=self._rendezvous.traffic() if self._rendezvous else 0)

    def ledger(self, budget: float | None, shot_budget: int | None = None, path=None) -> RemoteLedger:
        """The run's spend and budgets in an actor: the workers' job services charge it too."""
        ledger = RemoteLedger(budget, shot_budget, path)
        self._ledgers.append(ledger)
        return ledger

    def close(self) -> None:
        """Release this run's backend and ledger actors; worker actors and Ray stay up for the next run,
        except a worker still running a call (the run failed or was interrupted): it is ended, and
        the next run starts a fresh one."""
        with self._lock:
            running = list(self._running.values())
        for actor in running:
            for key in [key for key, cached in _WORKERS.items() if cached is actor]:
                del _WORKERS[key]
            self._ray.kill(actor, no_restart=True)
        for remote in [*self._backends, *self._ledgers, *([self._rendezvous] if self._rendezvous else [])]:
            remote.stop()
        self._backends, self._ledgers, self._rendezvous = [], [], None


def _import_path() -> str:
    """This process's ``sys.path`` as a PYTHONPATH for Ray's workers (the current directory made absolute)."""
    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    extra = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(dict.fromkeys([p for p in paths if os.path.isdir(p)] + ([extra] if extra else [])))

