"""Reinforcement learning with variational quantum policies: ``policies``, ``envs`` (gymnasium environments, their
encodings), ``algorithm`` (what every algorithm implements), ``reinforce``, ``ppo`` and ``dqn`` (one file each),
``runner`` (the training driver: ``runner.train``, ``hqflow train``) and ``trained`` (``load_policy``, ``evaluate``,
also here). Submodules are imported on use: importing this package does not import gymnasium."""
import importlib


def __getattr__(name: str):
    if name in ("load_policy", "evaluate"):
        return getattr(importlib.import_module("hqflow.workloads.rl.trained"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
