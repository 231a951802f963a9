"""Recording the APC of results files written before it was recorded (surprisal_cc.experiments.apc_provenance,
``surprisal-cc backfill-apc``), from the APC file a git repository held at the run's commit."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from surprisal_cc.model.apc import APCModel, save_apc
from surprisal_cc.experiments.apc_provenance import fill_apc_fingerprints, fingerprint_at_commit
from surprisal_cc.cli.commands import main
from surprisal_cc.model.nnet import weights_fingerprint
from surprisal_cc.experiments.report import write_report

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def _apc(seed: int) -> APCModel:
    torch.manual_seed(seed)
    return APCModel(input_size=4, hidden_size=8, num_layers=1)


@pytest.fixture
def repo(tmp_path):
    """A git repository whose first commit tracks pretrained/apc.pt (APC A) and whose second replaces it
    (APC B): the same path, another APC."""
    root = tmp_path / "repo"
    (root / "pretrained").mkdir(parents=True)
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "test@example.org")
    _git(root, "config", "user.name", "test")
    commits = {}
    for name, seed in (("a", 1), ("b", 2)):
        save_apc(_apc(seed), root / "pretrained" / "apc.pt")
        _git(root, "add", "pretrained/apc.pt")
        _git(root, "commit", "-q", "-m", f"APC {name}")
        commits[name] = _git(root, "rev-parse", "--short", "HEAD")
    return root, commits


def _run(folder: Path, commit: str, apc_path: str = "pretrained/apc.pt", apc_macs: int = 100, **row) -> Path:
    folder.mkdir(parents=True)
    (folder / "hyperparams.yaml").write_text(f"apc_path: {apc_path}\nseed: {row.get('seed', 1)}\n")
    results = folder / "results.json"
    results.write_text(json.dumps({"controller": "surprisal", "seed": 1, "PER": 30.0, "commit": commit,
                                   "component_macs": {"apc": apc_macs}, **row}, indent=2))
    return results


def test_the_fingerprint_is_that_of_the_file_at_the_runs_commit_not_of_the_file_there_today(repo, tmp_path):
    root, commits = repo
    old = _run(tmp_path / "runs" / "old", commits["a"])
    new = _run(tmp_path / "runs" / "new", commits["b"], seed=2)
    found = {Path(f.results).parent.name: f for f in fill_apc_fingerprints(tmp_path / "runs", repository=root, write=True)}
    assert found["old"].status == found["new"].status == "filled"
    assert json.loads(old.read_text())["apc"] == weights_fingerprint(_apc(1))
    assert json.loads(new.read_text())["apc"] == weights_fingerprint(_apc(2)) != weights_fingerprint(_apc(1))
    assert json.loads(old.read_text())["apc_source"] == f"git:{commits['a']}:pretrained/apc.pt"
    again = fill_apc_fingerprints(tmp_path / "runs", repository=root, write=True)
    assert [f.status for f in again] == ["recorded", "recorded"]


def test_runs_git_cannot_vouch_for_are_left_as_they_are(repo, tmp_path):
    root, commits = repo
    untracked = _run(tmp_path / "runs" / "untracked", commits["a"], apc_path="results/apc.pt")
    no_apc = _run(tmp_path / "runs" / "fbank", commits["a"], apc_macs=0, controller="big_only", input_features="fbank")
    before = {p: p.read_text() for p in (untracked, no_apc)}
    found = {Path(f.results).parent.name: f for f in fill_apc_fingerprints(tmp_path / "runs", repository=root, write=True)}
    assert found["untracked"].status == "unknown" and "results/apc.pt" in found["untracked"].reason
    assert found["fbank"].status == "no_apc"
    assert {p: p.read_text() for p in before} == before
    assert fingerprint_at_commit(commits["a"], "pretrained/apc.pt", tmp_path)[0] is None  # not a git repository


def test_a_dry_run_writes_nothing_and_a_test_only_evaluation_reads_its_own_hyperparams(repo, tmp_path, capsys):
    root, commits = repo
    run = tmp_path / "runs" / "seed1"
    results = _run(run, commits["a"], apc_path="elsewhere/apc.pt")
    (run / "hyperparams_test_only.yaml").write_text("apc_path: pretrained/apc.pt\n")
    test_only = run / "results_test_only.json"
    test_only.write_text(json.dumps({**json.loads(results.read_text()), "test_only": True, "commit": commits["b"]}))
    before = test_only.read_text()
    assert main(["backfill-apc", str(tmp_path / "runs"), "--repository", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 to fill" in out and "1 unknown" in out and test_only.read_text() == before
    assert main(["backfill-apc", str(tmp_path / "runs"), "--repository", str(root)]) == 0
    assert json.loads(test_only.read_text())["apc"] == weights_fingerprint(_apc(2))


def test_backfilled_seeds_join_the_row_of_a_seed_that_recorded_its_apc(repo, tmp_path):
    root, commits = repo
    _run(tmp_path / "runs" / "seed1", commits["a"], seed=1, PER=30.0)
    _run(tmp_path / "runs" / "seed2", commits["a"], seed=2, PER=31.0, apc=weights_fingerprint(_apc(1)))
    before = write_report(tmp_path / "runs", tmp_path / "before")
    fill_apc_fingerprints(tmp_path / "runs", repository=root, write=True)
    after = write_report(tmp_path / "runs", tmp_path / "after")
    assert "30.50% ± 0.71%" not in before and "30.50% ± 0.71%" in after


def test_a_repository_that_is_not_a_git_checkout_and_a_damaged_results_file_are_named(repo, tmp_path, capsys):
    root, commits = repo
    results = _run(tmp_path / "runs" / "seed1", commits["a"])
    assert main(["backfill-apc", str(tmp_path / "runs"), "--repository", str(tmp_path / "runs")]) == 1
    assert f"{tmp_path / 'runs'}: not a git checkout" in capsys.readouterr().err
    results.write_text("{not json")
    assert main(["backfill-apc", str(tmp_path / "runs"), "--repository", str(root)]) == 1
    assert f"{results}: not valid JSON" in capsys.readouterr().err
