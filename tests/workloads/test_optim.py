"""The numpy Adam used by learner fragments matches torch.optim.Adam step for step."""
import numpy as np
import torch

from hqflow.workloads.optim import adam_init, adam_step


def test_adam_matches_torch():
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=5)
    param = torch.nn.Parameter(torch.tensor(p0, dtype=torch.float64))
    opt = torch.optim.Adam([param], lr=0.05)
    ours, state = p0.copy(), adam_init(5)
    for _ in range(20):
        grad = rng.normal(size=5)
        param.grad = torch.tensor(grad, dtype=torch.float64)
        opt.step()
        ours, state = adam_step(ours, grad, state, lr=0.05)
    np.testing.assert_allclose(ours, param.detach().numpy(), rtol=1e-10, atol=1e-12)
    assert state["t"] == 20
