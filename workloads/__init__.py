"""Ready-made hybrid workloads, each one module with ``Config``, ``build_graph`` and ``run``.

    from hqflow.workloads import get_workload
    vqe = get_workload("vqe")
    print(vqe.run(vqe.Config(steps=60))["error_mha"])

Modules are imported on first use, so ``import hqflow.workloads`` stays cheap.
"""
from __future__ import annotations

import importlib
from types import ModuleType

WORKLOADS = {
    "vqe": "hqflow.workloads.vqe",
    "qaoa": "hqflow.workloads.qaoa",
    "classifier": "hqflow.workloads.classifier",
}


def get_workload(name: str) -> ModuleType:
    """The workload module registered as ``name`` (``KeyError`` listing the known names)."""
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}; known workloads: {', '.join(sorted(WORKLOADS))}")
    return importlib.import_module(WORKLOADS[name])


__all__ = ["WORKLOADS", "get_workload"]
