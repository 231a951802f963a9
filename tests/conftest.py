"""Unit tests run on a clean clone: a test that reads the shared corpus must be marked integration.

Every test runs torch on one thread (:data:`TORCH_THREADS`), whichever test files were collected, and a unit
test's ``precision: auto`` takes the fixed bf16 speedup :data:`UNIT_TEST_BF16_SPEEDUP` instead of timing
bf16 on this CPU (load-dependent, and about a second per process).
"""
import pytest

import data_fixtures

#: torch's intra-op threads in every test (set once for the session).
TORCH_THREADS = 1

#: What :func:`surprisal_cc.precision.bf16_speedup` returns in a unit test: below ``BF16_MIN_SPEEDUP``, so
#: ``precision: auto`` is fp32 on every CPU. A test of the measurement calls ``measure_bf16_speedup`` itself,
#: or monkeypatches ``precision._cached_speedup`` (the seam this uses) with a value of its own.
UNIT_TEST_BF16_SPEEDUP = 1.0


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


@pytest.fixture(autouse=True)
def fixed_bf16_speedup(request, monkeypatch):
    """A unit test does not time bf16 against fp32: ``precision: auto`` resolves the same on any CPU and load.
    Integration tests measure, as a recipe run does."""
    if request.node.get_closest_marker("integration") is None:
        from surprisal_cc import precision

        monkeypatch.setattr(precision, "_cached_speedup", lambda threads: UNIT_TEST_BF16_SPEEDUP)
