"""The ranges of the RL algorithms' hyperparameters, shared by their ``Config``s and checked at
construction (``hqflow.config.check_fields``): a bad ``--set`` is refused before a run starts."""

BOUNDS = {
    "n_qubits": (1, 32), "n_layers": (1, 100), "beta": (0, 1e3, "(]"), "max_episodes": (1, 10**7),
    "gamma": (0, 1, "(]"), "lr_in": (0, 10), "lr_var": (0, 10), "lr_out": (0, 10), "lr_critic": (0, 10),
    "seed": (0, 2**63 - 1), "threads": (1, 256), "solve_window": (1, 10**5), "num_envs": (1, 4096),
    "groups": (1, 4096), "batch_episodes": (1, 10**5), "memory": (1, 10**7), "batch_size": (1, 10**6),
    "train_every": (1, 10**6), "target_every": (1, 10**6), "episodes_per_update": (1, 10**5),
    "eps_start": (0, 1), "eps_min": (0, 1), "eps_decay": (0, 1, "(]"), "critic_hidden": (1, 4096),
    "num_steps": (1, 10**6), "update_epochs": (1, 1000), "num_minibatches": (1, 10**6), "gae_lambda": (0, 1),
    "clip_coef": (0, 10, "(]"), "ent_coef": (0, 100), "vf_coef": (0, 100), "max_grad_norm": (0, 1e6, "(]"),
}
