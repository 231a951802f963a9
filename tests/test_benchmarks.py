"""Smoke test of the benchmark suite: every benchmark runs at the tiniest sizes and reports numeric ratios.

Speed targets are deliberately not asserted here: they live in the benchmark output (``met?``).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from data_fixtures import write_mfa_csv  # noqa: E402

from benchmarks.run_all import BENCHMARKS, run_benchmarks  # noqa: E402
from surprisal_cc.testing import make_librispeech_fixture  # noqa: E402


@pytest.fixture
def tiny_corpus(tmp_path, monkeypatch):
    """A two-utterance dev-clean-2 with MFA labels, so the data-prep benchmark runs in the test."""
    root = make_librispeech_fixture(tmp_path / "data", {"dev-clean-2": {"21-5": ["THE CAT", "STOP"]}},
                                    genders={"21": "M"})
    write_mfa_csv(root / "phone_labels" / "dev-clean-2_mfa.csv", "dev-clean-2",
                  {"21-5-0000": "sil DH AH K AE T sil", "21-5-0001": "sil S T AA P sil"})
    monkeypatch.setenv("SURPRISAL_CC_DATA", str(root))
    return root


def _numeric(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_run_benchmarks_smoke_json(tiny_corpus, capsys):
    status = run_benchmarks(as_json=True, quick=True, size="smoke")
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report["errors"]
    assert report["size"] == "smoke"
    for key in ("date", "cpu", "cores", "torch", "torch_threads"):
        assert key in report["machine"]
    assert set(report["benchmarks"]) == set(BENCHMARKS)
    for name, result in report["benchmarks"].items():
        assert result["skipped"] is None, (name, result["skipped"])
        assert result["summary"], name
        assert result["details"], name
        ratios = [row for row in result["summary"] if row["ratio"] is not None]
        assert ratios, f"{name}: no ratio"
        for row in ratios:
            assert _numeric(row["ratio"]) and row["ratio"] > 0, (name, row)
            assert _numeric(row["ours"]) and _numeric(row["baseline"]), (name, row)
            assert isinstance(row["target"], str) and row["met"] in (True, False, None)


def test_markdown_table_and_skip(tmp_path, monkeypatch, capsys):
    """Markdown output has the combined table; a missing corpus is a skip with a message, not an error."""
    monkeypatch.setenv("SURPRISAL_CC_DATA", str(tmp_path / "nowhere"))
    assert run_benchmarks(as_json=False, size="smoke", only=["dataprep"]) == 0
    out = capsys.readouterr().out
    assert "| benchmark | ours | baseline | ratio | target | met? |" in out
    assert "SKIPPED: dev-clean-2 not found" in out
