"""Unit tests run on a clean clone: a test that reads the shared corpus must be marked integration."""
import pytest

import data_fixtures


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    data_fixtures.CORPUS_ALLOWED = item.get_closest_marker("integration") is not None
