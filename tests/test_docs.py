"""The guides' code runs as written: every ```python block of a guide, in order, in one namespace."""
from __future__ import annotations

import re

import pytest

from data_fixtures import REPO
from surprisal_cc.controllers import CONTROLLERS

GUIDES = ["docs/extending.md"]


def python_blocks(text: str) -> list:
    """The ```python code blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_python_blocks_are_found():
    text = "intro\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = x + 1\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x + 1\n"]


@pytest.mark.parametrize("guide", GUIDES)
def test_guide_code_runs(guide, monkeypatch):
    monkeypatch.setattr("surprisal_cc.controllers.CONTROLLERS", dict(CONTROLLERS))  # the guide registers one
    blocks = python_blocks((REPO / guide).read_text(encoding="utf-8"))
    assert blocks, f"{guide} has no python block"
    namespace: dict = {"__name__": "guide"}
    for block in blocks:
        exec(compile(block, guide, "exec"), namespace)
