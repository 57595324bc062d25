"""Executors: where fragment work runs. ``sync`` runs it inline on the scheduler's thread (the reference),
``local`` on a thread pool per classical resource (the default), both in ``local.py``; ``ray`` on Ray actors
(``ray.py``, imported only when a run uses it; what runs inside its actors: ``actors.py``).

The scheduler's one loop (and the cost model's simulated executor) drives each through
``submit(fragment, args, resource, client, replica, kept) -> Future[(outputs, spans, node)]`` for classical
fragments (``spans``: jobs the run's own job service did not see, timed from the call's start; ``node``: the
Ray node, or None in this process) and ``backend(spec, default_in_flight) -> (backend, node)`` for quantum
backends: a ``Backend`` (the instance, one made from its spec, or a proxy of one in a Ray actor) and the Ray
node it runs on. A backend spec is a backend instance (``sync``/``local`` only), a registry name, or
``(name, options)``.
"""
from __future__ import annotations

from ..placement import Placement
from ..scheduler_config import ExecutorKind
from .local import Executor, LocalExecutor, SyncExecutor

__all__ = ["Executor", "ExecutorKind", "LocalExecutor", "SyncExecutor", "make_executor"]


def make_executor(kind: ExecutorKind | str, cpu_workers: int = 1, gpu_workers: int = 1, ray_num_cpus: int | None = None,
                  ray_address: str | None = None, placement: Placement | None = None):
    """An executor of ``kind`` (an :class:`ExecutorKind`, or its name)."""
    kind = ExecutorKind.of(kind)
    if kind is ExecutorKind.RAY:
        from .ray import RayExecutor

        return RayExecutor(ray_num_cpus, cpu_workers, gpu_workers, ray_address, placement or Placement())
    return LocalExecutor(cpu_workers, gpu_workers) if kind is ExecutorKind.LOCAL else SyncExecutor()
