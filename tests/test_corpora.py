"""The corpora ``evaluate`` scores: a LibriSpeech folder is one subset, never several read as one corpus."""
from __future__ import annotations

import re

import pytest

from data_fixtures import make_librispeech_fixture
from surprisal_cc.inference.corpora import corpus_items
from surprisal_cc.data.errors import DataPreparationError
from surprisal_cc.data.librispeech import scan_subset
from surprisal_cc.data.phones import LIBRISPEECH_PHONES
from surprisal_cc.inference import ConditionalASR

SUBSETS = {"dev-clean-2": {"1-2": ["HELLO WORLD"]}, "train-clean-5": {"3-4": ["GOOD MORNING", "AND"]}}


@pytest.fixture(scope="module")
def asr() -> ConditionalASR:
    return ConditionalASR.untrained(LIBRISPEECH_PHONES, controller="big_only")


@pytest.mark.parametrize("under", ["", "LibriSpeech"])
def test_a_folder_holding_several_subsets_is_refused_naming_them(tmp_path, asr, under):
    """A LibriSpeech root (or the folder above it) with a test and a training subset: refused, the subsets named,
    and the folder of one given instead, before any utterance is read."""
    root = make_librispeech_fixture(tmp_path, SUBSETS)
    given = root / under
    prefix = "LibriSpeech/" if not under else ""
    expected = (f"{given}: holds 2 LibriSpeech subsets ({prefix}dev-clean-2, {prefix}train-clean-5), which would "
                f"be read as one corpus: give one subset's folder, such as {given / prefix / 'dev-clean-2'}")
    with pytest.raises(DataPreparationError, match="^" + re.escape(expected) + "$"):
        corpus_items(given, asr, problems=[])
    with pytest.raises(DataPreparationError, match="holds 2 LibriSpeech subsets"):  # realign_corpus reads it so
        scan_subset(given)


def test_one_subset_is_read_whether_given_itself_or_the_folder_holding_it(tmp_path, asr):
    root = make_librispeech_fixture(tmp_path, {"train-clean-5": SUBSETS["train-clean-5"]})
    items, _ = corpus_items(root / "LibriSpeech" / "train-clean-5", asr)
    assert [utt for utt, _, _ in items] == ["3-4-0000", "3-4-0001"]
    assert corpus_items(root, asr)[0] == items
    make_librispeech_fixture(tmp_path, {"dev-clean-2": SUBSETS["dev-clean-2"]})
    assert [utt for utt, _, _ in corpus_items(root / "LibriSpeech" / "dev-clean-2", asr)[0]] == ["1-2-0000"]


def test_folders_not_laid_out_as_subsets_are_read_as_before(tmp_path, asr):
    """A speaker's or a chapter's folder, and audio whose names are not LibriSpeech's, name no second subset."""
    root = make_librispeech_fixture(tmp_path, {"dev-clean-2": {"1-2": ["HELLO WORLD"], "1-5": ["AND"]}})
    speaker = root / "LibriSpeech" / "dev-clean-2" / "1"
    assert [utt for utt, _, _ in corpus_items(speaker, asr)[0]] == ["1-2-0000", "1-5-0000"]
    assert [utt for utt, _, _ in corpus_items(speaker / "2", asr)[0]] == ["1-2-0000"]


def test_a_timit_split_is_refused_for_another_corpus(tmp_path, asr):
    from surprisal_cc.errors import ConfigurationError

    root = make_librispeech_fixture(tmp_path, {"dev-clean-2": SUBSETS["dev-clean-2"]})
    with pytest.raises(ConfigurationError, match="not a TIMIT folder, which alone has splits: leave out --timit-split"):
        corpus_items(root / "LibriSpeech" / "dev-clean-2", asr, timit_split="valid")


def test_a_folder_of_links_to_speaker_folders_is_read(tmp_path, asr):
    """Speaker or chapter folders linked in from elsewhere are read, as transcribe reads them."""
    root = make_librispeech_fixture(tmp_path / "corpus", {"dev-clean-2": {"1-2": ["HELLO WORLD"], "1-5": ["AND"]}})
    picked = tmp_path / "picked"
    (picked / "1").mkdir(parents=True)
    (picked / "1" / "2").symlink_to(root / "LibriSpeech" / "dev-clean-2" / "1" / "2", target_is_directory=True)
    assert [utt for utt, _, _ in corpus_items(picked, asr)[0]] == ["1-2-0000"]


def test_scoring_against_any_pronunciation_is_refused_from_the_labels_alone(tmp_path, asr):
    """A TIMIT folder, or a manifest without words, is refused from what corpus_items gives: no audio is
    read (the manifest's audio files do not even exist)."""
    from data_fixtures import make_timit_fixture
    from surprisal_cc.inference.corpora import check_pronunciation_words
    from surprisal_cc.errors import ConfigurationError

    manifest = tmp_path / "test.csv"
    manifest.write_text("ID,wav,phn\nu1,missing.flac,sil AH B sil\n")
    words = {}
    items, _ = corpus_items(manifest, asr, words=words)
    with pytest.raises(ConfigurationError, match=re.escape(f"{manifest}: scoring against any pronunciation needs "
                                                           "the words (a wrd column)")):
        check_pronunciation_words(manifest, items, words)
    timit = make_timit_fixture(tmp_path / "timit")
    with pytest.raises(ConfigurationError, match="TIMIT's labels are hand-labelled phones"):
        check_pronunciation_words(timit, items, words)
    manifest.write_text("ID,wav,wrd\nu1,missing.flac,HELLO WORLD\n")
    items, _ = corpus_items(manifest, asr, words=words)
    check_pronunciation_words(manifest, items, words)
