import csv

import pytest

from data_fixtures import TIMIT_PHN_CASES, assert_prepare_reuses, make_timit_fixture, tone, write_sphere
from surprisal_cc.data import DataPreparationError, prepare_timit, timit as timit_module
from surprisal_cc.data.timit import TIMIT_CORE_TEST_SPEAKERS, TIMIT_DEV_SPEAKERS


def read(path):
    with open(path, newline="") as f:
        return {r["ID"]: r for r in csv.DictReader(f)}


@pytest.fixture()
def timit(tmp_path):
    return make_timit_fixture(tmp_path / "timit")


def test_speaker_lists():
    assert len(TIMIT_DEV_SPEAKERS) == 50 and len(TIMIT_CORE_TEST_SPEAKERS) == 24
    assert not TIMIT_DEV_SPEAKERS & TIMIT_CORE_TEST_SPEAKERS
    assert {"mjsw0", "faks0", "mrws1"} <= TIMIT_DEV_SPEAKERS and {"mdab0", "fmld0"} <= TIMIT_CORE_TEST_SPEAKERS


def test_prepare_timit_splits_and_folding(timit, tmp_path):
    out = prepare_timit(timit, tmp_path / "save")
    splits = {k: read(v) for k, v in out.items()}
    assert sorted(splits["train"]) == ["fcjf0_si1027", "fcjf0_sx127", "mdwk0_si1027", "mdwk0_sx127"]
    assert sorted(splits["valid"]) == ["mjsw0_si1027", "mjsw0_sx127"]
    assert sorted(splits["test"]) == ["mdab0_si1027", "mdab0_sx127"]  # FCMR0 (plain test) unused
    row = splits["test"]["mdab0_si1027"]
    assert row["phn"] == "sil ah sil b aa sil t ih sil er l m sil" == TIMIT_PHN_CASES["si"][1]
    assert splits["train"]["mdwk0_sx127"]["phn"] == TIMIT_PHN_CASES["sx"][1]
    assert row["wrd"] == "SHE HAD" and row["spk_id"] == "mdab0"
    assert float(row["duration"]) == pytest.approx(0.3) and row["wav"].endswith("MDAB0/SI1027.WAV")
    assert list(next(csv.reader(open(out["train"])))) == ["ID", "duration", "wav", "spk_id", "wrd", "phn"]

    assert_prepare_reuses(timit_module, lambda: prepare_timit(timit, tmp_path / "save"), out)


def test_prepare_timit_names_audio_at_another_rate_than_the_models(timit, tmp_path):
    from surprisal_cc.data import DataPreparationWarning

    with pytest.warns(DataPreparationWarning, match="are not 8000 Hz; resampled to 8000 Hz"):
        prepare_timit(timit, tmp_path / "save", sample_rate=8000)


def test_sa_folding_case():  # the SA template is only used for SA sentences, which are removed
    from surprisal_cc.data.phones import fold_timit
    phn, expected = TIMIT_PHN_CASES["sa"]
    assert " ".join(fold_timit(phn.split())) == expected


def test_unknown_timit_phone_names_file(timit, tmp_path):
    phn = timit / "TRAIN" / "DR1" / "FCJF0" / "SI1027.PHN"
    phn.write_text(phn.read_text().replace(" ao\n", " xx\n"))
    with pytest.raises(DataPreparationError, match=r"SI1027.PHN.*fcjf0_si1027.*\['xx'\]"):
        prepare_timit(timit, tmp_path / "save")


@pytest.mark.parametrize("content", ["", "0 100 q\n"])
def test_a_phn_file_without_phones_is_refused_naming_it(timit, tmp_path, content):
    """An empty reference would count every recognised phone as an insertion: prepare and evaluate refuse it."""
    from surprisal_cc.inference.corpora import _timit_items

    (timit / "TRAIN" / "DR1" / "FCJF0" / "SI1027.PHN").write_text(content)
    with pytest.raises(DataPreparationError, match=r"SI1027.PHN \(utterance fcjf0_si1027\) has no phone labels; "
                                                   "restore it from the corpus"):
        prepare_timit(timit, tmp_path / "save")
    (timit / "test" / "DR1" / "MDAB0" / "SI1027.PHN").write_text(content)
    with pytest.raises(DataPreparationError, match=r"SI1027.PHN \(utterance mdab0_si1027\) has no phone labels"):
        _timit_items(timit, "test")


def test_many_timit_label_problems_are_counted_and_the_first_listed(timit, tmp_path, monkeypatch):
    monkeypatch.setattr(timit_module, "MAX_LISTED", 2)
    for words in [*timit.rglob("*.WRD"), *timit.rglob("*.wrd"), *timit.rglob("*.TXT"), *timit.rglob("*.txt")]:
        words.unlink()
    with pytest.raises(DataPreparationError, match=r"8 TIMIT label problem\(s\):\n  .*\n  .*\n  ... and 6 more$"):
        prepare_timit(timit, tmp_path / "save")


def test_corrupt_sphere_and_missing_folder(timit, tmp_path):
    with pytest.raises(DataPreparationError, match="does not exist"):
        prepare_timit(tmp_path / "nope", tmp_path / "save")
    bad = timit / "TRAIN" / "DR1" / "FCJF0" / "SX127.WAV"
    bad.write_bytes(b"NIST_1A\n   1024\ngarbage")
    with pytest.raises(DataPreparationError, match="SX127.WAV"):
        prepare_timit(timit, tmp_path / "save")
    with pytest.warns(UserWarning, match="SX127.WAV"):
        out = prepare_timit(timit, tmp_path / "save", skip_bad_audio=True)
    assert "fcjf0_sx127" not in read(out["train"])
    write_sphere(bad, tone(0.3))  # repaired input -> regenerated
    assert "fcjf0_sx127" in read(prepare_timit(timit, tmp_path / "save", skip_bad_audio=True)["train"])


def test_a_copy_without_the_standard_speakers_names_the_empty_split(timit, tmp_path):
    import shutil

    core = [folder for folder in timit.glob("*/*/*") if folder.name.lower() in TIMIT_CORE_TEST_SPEAKERS]
    assert core
    for folder in core:  # the core-test speakers removed: no test split
        shutil.rmtree(folder)
    with pytest.raises(DataPreparationError, match=r"no utterance of test \(the 24 core-test speakers"):
        prepare_timit(timit, tmp_path / "save")


def test_evaluate_leaves_out_a_timit_file_without_labels_only_when_asked(timit):
    """A TIMIT file without its ``.PHN`` is one named problem: an error listing it (and saying to pass
    --skip-bad), or, given a problems list (``--skip-bad``), an utterance left out of the scored ones."""
    from surprisal_cc.inference.corpora import corpus_items
    from surprisal_cc.data.phones import TIMIT_PHONES_39
    from surprisal_cc.inference import ConditionalASR

    asr = ConditionalASR.untrained(TIMIT_PHONES_39)
    items, _ = corpus_items(timit, asr, timit_split="test")
    phn = next(p for p in timit.rglob("SI1027.PHN") if p.parent.name == "MDAB0")
    phn.unlink()
    with pytest.raises(DataPreparationError, match=r"SI1027.WAV: no .PHN file[\s\S]*pass --skip-bad"):
        corpus_items(timit, asr, timit_split="test")
    problems: list = []
    kept, _ = corpus_items(timit, asr, timit_split="test", problems=problems)
    assert [i for i, _, _ in items if i not in {k for k, _, _ in kept}] == ["mdab0_si1027"]
    assert len(problems) == 1 and "SI1027.WAV: no .PHN file" in problems[0]


def test_a_damaged_timit_label_line_names_its_file_and_line(tmp_path):
    phn = tmp_path / "SX1.PHN"
    phn.write_text("0 2400 h#\n2400 3200\n")
    with pytest.raises(DataPreparationError, match=r"SX1.PHN:2: '2400 3200' is not '<start> <end> <label>'"):
        timit_module.read_phn(phn)
