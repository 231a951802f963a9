"""SentencePiece units of ``target_unit: sentencepiece``: trained once per training manifest, and two
runs preparing them at the same moment never mix their files (surprisal_cc.recipe.train_units)."""
from __future__ import annotations

import pytest

from surprisal_cc import recipe
from surprisal_cc.errors import ConfigurationError


class FakeUnits:
    """Stands in for SentencePieceLabels: writes a model file naming who trained it."""

    def __init__(self, model_dir, vocab_size, train_manifest):
        (model_dir / f"{vocab_size}_unigram.model").write_text("ours")
        (model_dir / "train.txt").write_text("words")


def test_units_are_trained_once(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe, "SentencePieceLabels", FakeUnits)
    sp_dir = recipe.train_units(tmp_path / "sentencepiece_40", 40, "train.csv")
    assert sorted(p.name for p in sp_dir.iterdir()) == ["40_unigram.model", "train.txt"]

    def must_not_train(*args):
        raise AssertionError("the units exist: nothing to train")

    monkeypatch.setattr(recipe, "SentencePieceLabels", must_not_train)
    assert recipe.train_units(sp_dir, 40, "train.csv") == sp_dir
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentencepiece_40"]  # no private folders left


def test_units_placed_first_by_another_run_are_kept_whole(tmp_path, monkeypatch):
    sp_dir = tmp_path / "sentencepiece_40"

    class OtherRunFinishesFirst(FakeUnits):
        def __init__(self, model_dir, vocab_size, train_manifest):
            super().__init__(model_dir, vocab_size, train_manifest)
            sp_dir.mkdir()
            (sp_dir / f"{vocab_size}_unigram.model").write_text("theirs")
            (sp_dir / "train.txt").write_text("their words")

    monkeypatch.setattr(recipe, "SentencePieceLabels", OtherRunFinishesFirst)
    assert recipe.train_units(sp_dir, 40, "train.csv") == sp_dir
    assert (sp_dir / "40_unigram.model").read_text() == "theirs"
    assert (sp_dir / "train.txt").read_text() == "their words"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentencepiece_40"]


def test_a_units_folder_without_its_model_is_named(tmp_path, monkeypatch):
    sp_dir = tmp_path / "sentencepiece_40"
    sp_dir.mkdir()
    (sp_dir / "train.txt").write_text("half-written")
    monkeypatch.setattr(recipe, "SentencePieceLabels", FakeUnits)
    with pytest.raises(ConfigurationError, match="sentencepiece_40 exists without '40_unigram.model'.*delete"):
        recipe.train_units(sp_dir, 40, "train.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentencepiece_40"]
