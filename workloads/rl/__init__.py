"""Reinforcement learning with quantum policies (issue 5): plain torch building blocks.

* ``policies``: ``pqc_template``, ``SoftmaxPQC`` (Jerbi et al. 2021), ``QValuePQC`` (Skolik et al. 2022);
* ``envs``: ``EnvSpec``, ``get_spec``, ``make_env``, ``SyncEnvs`` (CartPole, Acrobot, FrozenLake);
* ``reinforce``: ``Config``, ``collect`` (actor), ``update`` (learner), ``train``.

Submodules are imported on use (``from hqflow.workloads.rl import reinforce``), so importing
this package does not import gymnasium.
"""
