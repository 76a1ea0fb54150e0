"""Policy tests run on one intra-op thread: OpenMP spinning on a busy 2-core machine is very slow."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
