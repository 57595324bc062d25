"""Reinforcement learning with variational quantum policies.

* ``policies``: ``pqc_template``, ``SoftmaxPQC`` (Jerbi et al. 2021), ``QValuePQC`` (Skolik et al. 2022);
* ``envs``: ``EnvSpec``, ``get_spec``, ``make_env``, ``vector_env`` (gymnasium's ``SyncVectorEnv``),
  ``FreshEnvs`` (CartPole, Acrobot, FrozenLake, any gymnasium id);
* ``reinforce``, ``dqn``, ``ppo``: one algorithm per file, each with a ``Config``, ``train(cfg)``
  and the two fragment functions ``act`` (the actor) and ``learn`` (the learner);
* ``trained``: ``load_policy(run_dir)`` (a ready ``nn.Module``) and ``evaluate(run_dir)``
  (greedy episodes), also as ``hqflow.workloads.rl.load_policy`` / ``.evaluate``;
* ``runner``: runs an algorithm as a dataflow graph under a distribution policy
  (``hqflow.distribution``: sync, pipelined, ray-actors), with a run directory, checkpoints
  and resume; ``hqflow train`` calls it.

Submodules are imported on use (``from hqflow.workloads.rl import reinforce``), so importing
this package does not import gymnasium.
"""


def __getattr__(name: str):
    if name in ("load_policy", "evaluate"):
        import importlib

        return getattr(importlib.import_module("hqflow.workloads.rl.trained"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
