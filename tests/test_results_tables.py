"""The results tables of the READMEs say what the published results files hold: each test-PER cell is
the mean ± sample std (n seeds) of the ``results.json`` files of the runs it names."""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from data_fixtures import REPO

RESULTS = REPO / "docs/results/MiniLibriSpeech"

# README.md's Table 2, on the shipped APC: row label -> the run folders (one per seed) of its PER column; a row
# whose runs have no results files yet says "–"
README_ROWS: Dict[str, str] = {
    "big-only": "apc_tc30/converged_apc_tc30/controller-big_only",
    "surprisal": "apc_tc30/converged_apc_tc30/controller-surprisal",
    "random (p_big 0.5)": "apc_tc30/converged_apc_tc30_rows/controller-random",
    "small-only": "apc_tc30/converged_apc_tc30_rows/controller-small_only",
    "learned (straight-through, λ = 1e-3 per utterance)": "apc_tc30/converged_apc_tc30_learned/controller-learned",
    "ACT (up to 8 steps of a 512→256→512 block)": "apc_tc30/converged_apc_tc30_adaptive/encoder-act",
    "PonderNet (the same block; truncated inference)": "apc_tc30/converged_apc_tc30_adaptive/encoder-pondernet",
}

# RESULTS.md's "Table 2 with the earlier APC": row label -> the run folders of its PER column
EARLIER_APC_ROWS: Dict[str, str] = {
    "big-only": "apc_tc5/converged/controller-big_only",
    "surprisal": "apc_tc5/converged/controller-surprisal",
    "random (p_big 0.5)": "apc_tc5/converged/controller-random",
    "small-only": "apc_tc5/converged_others/controller-small_only apc_tc5/converged_small_only/controller-small_only",
    "learned (straight-through, λ = 1e-3 per utterance)": "apc_tc5/converged_learned/controller-learned",
    "ACT (up to 8 steps of a 512→256→512 block; 5.12 steps)": "apc_tc5/converged_adaptive/encoder-act",
    "PonderNet (the same block; expected-state training, truncated inference; 5.35 steps)":
        "apc_tc5/converged_adaptive/encoder-pondernet",
}

# recipes/MiniLibriSpeech/README.md: row label -> the run folders of its test-PER column
RECIPE_ROWS: Dict[str, str] = {
    "big-only": "apc_tc5/converged/controller-big_only",
    "surprisal": "apc_tc5/converged/controller-surprisal",
    "ACT (5.12 steps)": "apc_tc5/converged_adaptive/encoder-act",
    "random": "apc_tc5/converged/controller-random",
    "PonderNet (5.35 steps)": "apc_tc5/converged_adaptive/encoder-pondernet",
    "small-only": "apc_tc5/converged_others/controller-small_only apc_tc5/converged_small_only/controller-small_only",
    "learned (λ = 1e-3 per utterance, the default)": "apc_tc5/converged_learned/controller-learned",
    "learned, the authors' penalty summed over a batch's frames": "apc_tc5/converged_others/controller-learned",
    "surprisal, bf16 (the model shipped before)": "apc_tc5/bf16_at_convergence/controller-surprisal",
    "surprisal, filterbanks into the pre-net (Table 3)":
        "apc_tc5/converged_features/controller-surprisal+input_features-fbank",
    "surprisal, the shipped APC (`surprisal_cc/pretrained/` is seed 1)": "apc_tc30/converged_apc_tc30/controller-surprisal",
    "big-only, the shipped APC": "apc_tc30/converged_apc_tc30/controller-big_only",
    "surprisal, filterbanks into the pre-net, the shipped APC's surprisal (Table 3)":
        "apc_tc30/converged_apc_tc30_features/controller-surprisal+input_features-fbank",
}

CELL = re.compile(r"(\d+\.\d\d)(?: ± (\d+\.\d\d))? %(?:\** \(n = (\d+))?")


def test_per_cells_are_read():
    assert CELL.search("**26.84 ± 0.00 %** (n = 3)").groups() == ("26.84", "0.00", "3")
    assert CELL.search("30.29 % (n = 1; the authors' summed penalty: 30.99 %)").groups() == ("30.29", None, "1")
    assert CELL.search("29.31 %").groups() == ("29.31", None, None)


def table_rows(path: Path, section: str = "") -> Dict[str, List[str]]:
    """The cells of each Markdown table row of ``path`` (of its first table after the heading ``section``,
    where given), by the row's first cell."""
    rows = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    if section:
        lines = lines[lines.index(section) + 1:]
        start = next(i for i, line in enumerate(lines) if line.startswith("| "))
        end = next((i for i, line in enumerate(lines[start:], start) if not line.startswith("|")), len(lines))
        lines = lines[start:end]
    for line in lines:
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def results_files(folders: str) -> List[Path]:
    """The ``results.json`` of every seed of the run folders (space-separated) under docs/results/MiniLibriSpeech."""
    return [path for folder in folders.split() for path in sorted((RESULTS / folder).glob("seed*/results.json"))]


def published_pers(folders: str) -> List[float]:
    """Test PER of every seed of the run folders (space-separated) under docs/results/MiniLibriSpeech."""
    files = results_files(folders)
    assert files, f"no results.json under {folders}"
    return [json.loads(path.read_text())["PER"] for path in files]


def check_cell(cell: str, folders: str) -> None:
    match = CELL.search(cell)
    assert match, f"no PER in {cell!r}"
    mean, std, n = match.groups()
    pers = published_pers(folders)
    assert mean == f"{statistics.mean(pers):.2f}", f"{cell!r}: the {len(pers)} results of {folders} give mean {statistics.mean(pers):.2f}"
    if len(pers) > 1:
        assert std == f"{statistics.stdev(pers):.2f}", f"{cell!r}: the results of {folders} give std {statistics.stdev(pers):.2f}"
    assert n is None or int(n) == len(pers), f"{cell!r}: {folders} holds {len(pers)} seeds"


@pytest.mark.parametrize("label", README_ROWS)
def test_readme_table_says_what_the_results_files_hold(label):
    rows = table_rows(REPO / "README.md")
    assert label in rows, f"README.md has no row {label!r}"
    cell = rows[label][0]
    if results_files(README_ROWS[label]):
        check_cell(cell, README_ROWS[label])
    else:
        assert cell == "–", f"README.md {label!r}: {cell!r} has no results files here"


@pytest.mark.parametrize("label", EARLIER_APC_ROWS)
def test_the_earlier_apcs_table_says_what_the_results_files_hold(label):
    rows = table_rows(RESULTS / "RESULTS.md", "### Table 2 with the earlier APC")
    assert label in rows, f"RESULTS.md's table of the earlier APC has no row {label!r}"
    check_cell(rows[label][0], EARLIER_APC_ROWS[label])


@pytest.mark.parametrize("label", RECIPE_ROWS)
def test_recipe_table_says_what_the_results_files_hold(label):
    rows = table_rows(REPO / "recipes/MiniLibriSpeech/README.md")
    assert label in rows, f"recipes/MiniLibriSpeech/README.md has no row {label!r}"
    check_cell(rows[label][1], RECIPE_ROWS[label])  # columns: validation PER, test PER, ...
