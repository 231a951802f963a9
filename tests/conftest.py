"""Unit tests run on a clean clone: a test that reads the shared corpus must be marked integration.

Every test runs torch on one thread (:data:`TORCH_THREADS`), whichever test files were collected.
"""
import pytest

import data_fixtures

#: torch's intra-op threads in every test (set once for the session).
TORCH_THREADS = 1


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    data_fixtures.CORPUS_ALLOWED = item.get_closest_marker("integration") is not None


@pytest.fixture(scope="session", autouse=True)
def torch_threads():
    """One explicit thread count for the whole session (no test file sets it on import)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    yield TORCH_THREADS
    torch.set_num_threads(before)
