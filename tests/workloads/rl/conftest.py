import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """The RL batches are tiny: one torch thread is fastest (and immune to oversubscription)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
