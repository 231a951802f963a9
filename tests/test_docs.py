"""The guides' code runs as written: every ```python block of a guide, in order, in one namespace."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from data_fixtures import REPO
from surprisal_cc.model.controllers import CONTROLLERS

GUIDES = ["docs/extending.md"]


def python_blocks(text: str) -> list:
    """The ```python code blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_python_blocks_are_found():
    text = "intro\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = x + 1\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x + 1\n"]


@pytest.mark.parametrize("guide", GUIDES)
def test_guide_code_runs(guide, monkeypatch):
    monkeypatch.setattr("surprisal_cc.model.controllers.CONTROLLERS", dict(CONTROLLERS))  # the guide registers one
    blocks = python_blocks((REPO / guide).read_text(encoding="utf-8"))
    assert blocks, f"{guide} has no python block"
    namespace: dict = {"__name__": "guide"}
    for block in blocks:
        exec(compile(block, guide, "exec"), namespace)


def named_repository_files(text: str) -> set:
    """The repository files a Markdown text names by path (``recipes/TIMIT/train.py``), placeholders
    such as ``hparams/<Corpus>/...`` left out."""
    return set(re.findall(r"(?<![\w/<>.-])((?:recipes|hparams|surprisal_cc|tests|docs|benchmarks)/[\w./-]*\w\.(?:py|yaml|md|pt))\b",
                          text))


def test_named_repository_files_are_found():
    assert named_repository_files("run `python recipes/TIMIT/train.py hparams/TIMIT/x.yaml` or "
                                  "`hparams/<Corpus>/conditional_ctc.yaml`, `surprisal_cc/data/<corpus>.py`") == \
        {"recipes/TIMIT/train.py", "hparams/TIMIT/x.yaml"}


@pytest.mark.parametrize("guide", GUIDES)
def test_the_files_a_guide_names_exist(guide):
    """The commands of a guide name files that exist."""
    text = (REPO / guide).read_text(encoding="utf-8")
    missing = sorted(name for name in named_repository_files(text) if not (REPO / name).exists())
    assert not missing, missing


def fixture_commands(text: str) -> list:
    """The ``python -c "from tests..."`` commands of a Markdown text (the code each passes to ``-c``)."""
    return re.findall(r'^\s*python -c "(from tests\.[^"]*)"\s*$', text, flags=re.M)


def test_fixture_commands_are_found():
    text = '```bash\n   python -c "from tests.x import f; f(\'/tmp/a\')"\n   python other.py\n```\n'
    assert fixture_commands(text) == ["from tests.x import f; f('/tmp/a')"]


@pytest.mark.parametrize("guide", GUIDES)
def test_the_fixture_commands_of_a_guide_run_from_the_repository_root(guide, tmp_path):
    """Each ``python -c "from tests...."`` line of a guide runs as written in the project's environment, from
    the repository root, in a fresh interpreter (not pytest's, whose ``sys.path`` holds ``tests/``); the
    folder it writes to is moved under ``tmp_path``."""
    import os
    import subprocess
    import sys

    commands = fixture_commands((REPO / guide).read_text(encoding="utf-8"))
    assert commands, f"{guide} has no fixture command"
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    for code in commands:
        folders = re.findall(r"'(/tmp/[^']+)'", code)
        for folder in folders:
            code = code.replace(f"'{folder}'", repr(str(tmp_path / Path(folder).name)))
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, f"{guide}: python -c {code!r}:\n{proc.stderr}"
        assert all(any((tmp_path / Path(folder).name).iterdir()) for folder in folders), code


def markdown_files() -> list:
    """The repository's Markdown files under version control (no experiment folders, no .venv)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
    return sorted(REPO / name for name in listed.stdout.split())


def without_code_blocks(text: str) -> str:
    """A Markdown text without its fenced code blocks (their ``#`` lines and brackets are code)."""
    return re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M)


def heading_anchors(text: str) -> set:
    """GitHub's anchors of a Markdown text's headings: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for heading in re.findall(r"^#+ (.*)$", without_code_blocks(text), flags=re.M):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return anchors


def test_heading_anchors_follow_github():
    assert heading_anchors("# Speed perturbation: not adopted\n## Converged CPU profile (30 epochs)\n") == \
        {"speed-perturbation-not-adopted", "converged-cpu-profile-30-epochs"}


def test_relative_links_of_the_docs_resolve():
    """Every relative link of every tracked Markdown file names a file that exists, and a heading that exists."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    broken = []
    for md in markdown_files():
        text = md.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", without_code_blocks(text)):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            resolved = (md.parent / path).resolve() if path else md
            if not resolved.exists():
                broken.append(f"{md.relative_to(REPO)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved.read_text(encoding="utf-8")):
                broken.append(f"{md.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
