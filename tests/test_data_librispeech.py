import csv
import hashlib
import io
import os
import shutil
import tarfile
import warnings

import pytest

from data_fixtures import assert_prepare_reuses, make_librispeech_fixture, require_dev_clean_2, write_mfa_csv
from surprisal_cc.data import (
    DataPreparationError, DataPreparationWarning, LIBRISPEECH_PHONES, prepare_librispeech,
    prepare_mini_librispeech,
)
from surprisal_cc.data import download, librispeech
from surprisal_cc.data.librispeech import select_valid_speakers
from surprisal_cc.data.download import safe_extract, verify_checksum

TRAIN_SPEAKERS = {"11": "F", "12": "M", "13": "F", "14": "M", "15": "F", "16": "M"}
DEV_LABELS = {"21-5-0000": "sil DH AH K AE T sil", "21-5-0001": "sil sil AH D sil", "22-6-0000": "sil S T AA P sil"}


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture()
def corpus(tmp_path):
    root = make_librispeech_fixture(
        tmp_path / "data",
        {"train-clean-5": {f"{s}-1": ["THE CAT", "DON'T STOP"] for s in TRAIN_SPEAKERS},
         "dev-clean-2": {"21-5": ["THE CAT", "ADD"], "22-6": ["STOP"]}},
        genders={**TRAIN_SPEAKERS, "21": "M", "22": "F"},
    )
    write_mfa_csv(root / "phone_labels" / "dev-clean-2_mfa.csv", "dev-clean-2", DEV_LABELS)
    return root


MIXED = {"train": "lexicon", "valid": "lexicon", "test": "mfa"}


def test_prepare_mini_librispeech(corpus, tmp_path):
    out = prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, g2p="error", valid_speakers=2)
    train, valid, test = (read(out[s]) for s in ("train", "valid", "test"))
    assert {r["spk_id"] for r in valid} == {"14", "15"}  # 1 F + 1 M, seeded
    assert {r["spk_id"] for r in train} == set(TRAIN_SPEAKERS) - {"14", "15"}
    assert [r["ID"] for r in test] == sorted(DEV_LABELS)
    assert test[1]["phn"] == "sil AH D sil" and test[1]["wrd"] == "ADD"
    row = next(r for r in train if r["ID"] == "12-1-0001")
    assert row["phn"] == "sil D OW N T S T AA P sil" and row["wrd"] == "DON'T STOP"
    assert float(row["duration"]) == pytest.approx(0.2) and row["wav"].startswith("/")
    assert all(set(r["phn"].split()) <= set(LIBRISPEECH_PHONES) for r in train + valid + test)

    from speechbrain.dataio.dataset import DynamicItemDataset
    assert len(DynamicItemDataset.from_csv(str(out["train"]))) == 8

    assert_prepare_reuses(librispeech, lambda: prepare_mini_librispeech(
        corpus, tmp_path / "s", labels=MIXED, g2p="error", valid_speakers=2), out)
    out2 = prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, g2p="error", valid_speakers=["12"])
    assert {r["spk_id"] for r in read(out2["valid"])} == {"12"}
    # other options, the same save folder: their own manifests, the first preparation's left intact
    assert out2["valid"].parent != out["valid"].parent and out["valid"].parent.parent == (tmp_path / "s").resolve()
    assert {r["spk_id"] for r in read(out["valid"])} == {"14", "15"}


def test_preparation_names_audio_at_another_rate_than_the_models(corpus, tmp_path):
    """16 kHz audio for an 8 kHz model is named in one warning; the manifests are those of 16 kHz."""
    with pytest.warns(DataPreparationWarning, match=r"(?s)file\(s\) are not 8000 Hz; resampled to 8000 Hz.*\(16000 Hz\)"):
        at_8k = prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, g2p="error", valid_speakers=2,
                                         sample_rate=8000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataPreparationWarning)
        assert prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, g2p="error",
                                        valid_speakers=2) == at_8k
        assert prepare_librispeech(corpus, tmp_path / "a", subsets=["train-clean-5"], valid_utterances=3)
    with pytest.warns(DataPreparationWarning, match="not 8000 Hz"):
        prepare_librispeech(corpus, tmp_path / "a8", subsets=["train-clean-5"], valid_utterances=3, sample_rate=8000)


def test_test_labels_are_found_in_any_data_folder(corpus, tmp_path):
    """The test labels may be staged apart from the audio: ``phone_labels/`` of any of the data folders
    (here the second, which holds no audio) is searched after the one beside dev-clean-2."""
    labels = tmp_path / "labels_only"
    labels.mkdir()
    (corpus / "phone_labels").rename(labels / "phone_labels")
    with pytest.raises(DataPreparationError, match="neither phone_labels/dev-clean-2_mfa.csv nor the TextGrid folder "
                                                   "phone_labels/dev-clean-2/ is in any of the data folders"):
        prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, g2p="error", valid_speakers=2)
    out = prepare_mini_librispeech([corpus, labels], tmp_path / "s", labels=MIXED, g2p="error", valid_speakers=2)
    assert [r["ID"] for r in read(out["test"])] == sorted(DEV_LABELS)


TEXTGRID = """File type = "ooTextFile"
Object class = "TextGrid"
xmin = 0
xmax = 0.2
tiers? <exists>
size = 1
item []:
    item [1]:
        class = "IntervalTier"
        name = "phones"
        xmin = 0
        xmax = 0.2
        intervals: size = {n}
{intervals}"""


def write_textgrid(path, marks):
    step = 0.2 / len(marks)
    intervals = "".join(f"        intervals [{i + 1}]:\n            xmin = {i * step}\n            xmax = "
                        f"{(i + 1) * step}\n            text = \"{m}\"\n" for i, m in enumerate(marks))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TEXTGRID.format(n=len(marks), intervals=intervals))


def test_dev_split_reads_mfa_textgrids(corpus, tmp_path):
    make_librispeech_fixture(corpus, {"mfa-dev": {"31-7": ["THE CAT"]}}, genders={**TRAIN_SPEAKERS, "21": "M", "22": "F", "31": "F"})
    write_textgrid(corpus / "phone_labels" / "mfa-dev" / "31" / "7" / "31-7-0000.TextGrid",
                   ["", "DH", "AH0", "sp", "K", "AE1", "T", "sil"])
    out = prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, g2p="error", valid_speakers=2,
                                   dev_subset="mfa-dev")
    assert [(r["ID"], r["phn"], r["wrd"]) for r in read(out["dev"])] == [("31-7-0000", "sil DH AH sil K AE T sil", "THE CAT")]
    assert [r["ID"] for r in read(out["test"])] == sorted(DEV_LABELS)  # the other splits as without it
    with pytest.raises(DataPreparationError, match=r"dev_subset 'mfa_dev' not found under .*check its spelling "
                                                   r"\(the recipes' development split is mfa-dev\), or set dev_subset "
                                                   r"to null \(--dev_subset=null\)"):
        prepare_mini_librispeech(corpus, tmp_path / "s2", labels=MIXED, g2p="error", valid_speakers=2,
                                 dev_subset="mfa_dev")
    shutil.rmtree(corpus / "LibriSpeech" / "mfa-dev")  # the recipes' subset, where it is not staged: a warning
    with pytest.warns(DataPreparationWarning, match="dev_subset .mfa-dev. not found.*phone_labels/mfa-dev/"):
        out = prepare_mini_librispeech(corpus, tmp_path / "s2", labels=MIXED, g2p="error", valid_speakers=2,
                                       dev_subset="mfa-dev")
    assert "dev" not in out and set(out) == {"train", "valid", "test"}


@pytest.mark.parametrize("split,labels", [("test", {"test": "missing.csv"}), ("train", "realigned.csv")])
def test_mfa_labels_that_are_not_there_are_named_with_their_split(corpus, tmp_path, monkeypatch, split, labels):
    """Not an os.stat error from the preparation's fingerprint: the split, the path and what to do."""
    monkeypatch.chdir(tmp_path)
    expected = (r"mfa_labels of split 'train' \(train-clean-5\): .*realigned.csv does not exist: give MFA's CSV "
                r"export or TextGrid folder \(realigned training labels: `make mini_librispeech` makes them"
                if split == "train" else
                r"mfa_labels of split 'test' \(dev-clean-2\): .*missing.csv does not exist: give MFA's CSV export or "
                r"TextGrid folder$")
    with pytest.raises(DataPreparationError, match=expected):
        prepare_mini_librispeech(corpus, tmp_path / "s", labels="mfa", mfa_labels=labels, splits=[split])


def with_mfa_dev(corpus):
    """The corpus with an mfa-dev subset of one utterance and its MFA TextGrid."""
    make_librispeech_fixture(corpus, {"mfa-dev": {"31-7": ["THE CAT"]}},
                             genders={**TRAIN_SPEAKERS, "21": "M", "22": "F", "31": "F"})
    write_textgrid(corpus / "phone_labels" / "mfa-dev" / "31" / "7" / "31-7-0000.TextGrid",
                   ["", "DH", "AH0", "sp", "K", "AE1", "T", "sil"])
    return corpus


def test_one_kind_of_labels_is_that_of_the_splits_asked_for(corpus, tmp_path):
    """labels="mfa" with splits=["test"] labels the test split (and the dev split its dev_subset adds), not
    every split of SPLITS; the recipe's dict may name the splits that were not asked for."""
    with_mfa_dev(corpus)
    for labels in ("mfa", {"train": "lexicon", "valid": "lexicon", "test": "mfa"}):
        out = prepare_mini_librispeech(corpus, tmp_path / "s", labels=labels, splits=["test"], dev_subset="mfa-dev")
        assert set(out) == {"test", "dev"} and [r["ID"] for r in read(out["test"])] == sorted(DEV_LABELS)
        assert [r["phn"] for r in read(out["dev"])] == ["sil DH AH sil K AE T sil"]


def test_one_mfa_labels_source_leaves_the_dev_split_its_own(corpus, tmp_path):
    """mfa_labels=PATH labels the splits asked for; the dev split, which dev_subset adds, keeps its TextGrids
    (PATH does not label its utterances) unless a dict names it."""
    with_mfa_dev(corpus)
    test_csv = write_mfa_csv(tmp_path / "test.csv", "dev-clean-2", DEV_LABELS)
    out = prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, mfa_labels=str(test_csv),
                                   g2p="error", valid_speakers=2, dev_subset="mfa-dev")
    assert [r["phn"] for r in read(out["dev"])] == ["sil DH AH sil K AE T sil"]
    assert [r["ID"] for r in read(out["test"])] == sorted(DEV_LABELS)
    with pytest.raises(DataPreparationError, match=r"split 'dev': none of its 1 utterance ids \(such as 31-7-0000\) "
                                                   r"is in its MFA labels .*test.csv, which hold ids such as 21-5-0000: "
                                                   r"give the labels of this split's audio"):
        prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, mfa_labels={"dev": str(test_csv)},
                                 g2p="error", valid_speakers=2, dev_subset="mfa-dev", mfa_fallback="lexicon")
    # no labels at all, and mfa_fallback lexicon: lexicon labels, as before
    for labels in (corpus / "phone_labels").iterdir():
        shutil.rmtree(labels) if labels.is_dir() else labels.unlink()
    with pytest.warns(DataPreparationWarning, match="had no MFA labels"):
        out = prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, g2p="spn", valid_speakers=2,
                                       dev_subset="mfa-dev", mfa_fallback="lexicon")
    assert [r["phn"] for r in read(out["dev"])] == ["sil DH AH K AE T sil"]


def test_valid_speakers_do_not_depend_on_dev(corpus, tmp_path):
    """The validation speakers are drawn from train-clean-5 alone: the same with or without the test
    subset's speakers in SPEAKERS.TXT, and the same manifests with or without dev-clean-2 prepared."""
    assert select_valid_speakers(sorted(TRAIN_SPEAKERS), 3, {**TRAIN_SPEAKERS}, 1234) == ["11", "14", "15"]
    with_dev = {**TRAIN_SPEAKERS, "21": "M", "22": "F"}
    assert select_valid_speakers(sorted(TRAIN_SPEAKERS), 3, with_dev, 1234) == ["11", "14", "15"]
    lexicon = {"train": "lexicon", "valid": "lexicon"}
    alone = prepare_mini_librispeech(corpus, tmp_path / "a", labels=lexicon, splits=["train", "valid"], valid_speakers=3)
    both = prepare_mini_librispeech(corpus, tmp_path / "b", labels=MIXED, valid_speakers=3)
    assert {r["spk_id"] for r in read(alone["valid"])} == {r["spk_id"] for r in read(both["valid"])}


def test_missing_mfa_labels_error_and_fallback(corpus, tmp_path):
    with pytest.raises(DataPreparationError, match="no MFA labels were given for train-clean-5"):
        prepare_mini_librispeech(corpus, tmp_path / "s")
    write_mfa_csv(corpus / "phone_labels" / "dev-clean-2_mfa.csv", "dev-clean-2",
                  {k: v for k, v in DEV_LABELS.items() if k != "22-6-0000"})
    with pytest.raises(DataPreparationError, match="22-6-0000"):
        prepare_mini_librispeech(corpus, tmp_path / "s", splits=["test"])
    with pytest.warns(DataPreparationWarning, match="22-6-0000"):
        out = prepare_mini_librispeech(corpus, tmp_path / "s", splits=["test"], mfa_fallback="lexicon", g2p="spn")
    assert read(out["test"])[2]["phn"] == "sil S T AA P sil"


def test_unknown_phone_in_mfa_labels(corpus, tmp_path):
    write_mfa_csv(tmp_path / "bad.csv", "dev-clean-2", {**DEV_LABELS, "22-6-0000": "sil S T AA1 P sil"})
    with pytest.raises(DataPreparationError, match=r"22-6-0000.*\['AA1'\]"):
        prepare_mini_librispeech(corpus, tmp_path / "s", splits=["test"], mfa_labels={"dev-clean-2": tmp_path / "bad.csv"})


def test_a_split_whose_audio_is_all_left_out_is_refused_at_preparation(corpus, tmp_path):
    """skip_bad_audio=True with no usable test audio: not a manifest of its header alone, which would fail only
    after training (evaluating an empty split), but an error naming the split and its manifest."""
    for flac in (corpus / "LibriSpeech" / "dev-clean-2").rglob("*.flac"):
        flac.write_bytes(b"fLaC" + bytes(range(256)))
    with pytest.warns(DataPreparationWarning, match="leaving out 3 unusable audio file"):
        with pytest.raises(DataPreparationError, match=r"test.csv: split 'test' has no utterance: skip_bad_audio left "
                                                       "out the audio of every one of its utterances"):
            prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, g2p="error", skip_bad_audio=True)


@pytest.mark.parametrize("line,reason", [("", "no transcript line"), ("22-6-0000", "empty transcript")])
def test_transcript_problems(corpus, tmp_path, line, reason):
    (corpus / "LibriSpeech" / "dev-clean-2" / "22" / "6" / "22-6.trans.txt").write_text(line + "\n")
    with pytest.raises(DataPreparationError, match=f"22-6-0000.flac: {reason}"):
        prepare_mini_librispeech(corpus, tmp_path / "s", splits=["test"])


def test_many_transcript_problems_are_counted_and_the_first_listed(corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(librispeech, "MAX_LISTED", 2)
    for trans in (corpus / "LibriSpeech" / "dev-clean-2").rglob("*.trans.txt"):
        trans.write_text("")
    with pytest.raises(DataPreparationError, match=r"3 transcript problem\(s\) in .*dev-clean-2:\n  .*21-5-0000.flac: "
                                                   r".*\n  .*21-5-0001.flac: .*\n  ... and 1 more$"):
        prepare_mini_librispeech(corpus, tmp_path / "s", labels=MIXED, g2p="error")


def test_a_chapter_without_its_transcript_file_is_named_as_such(corpus, tmp_path):
    (corpus / "LibriSpeech" / "dev-clean-2" / "22" / "6" / "22-6.trans.txt").unlink()
    with pytest.raises(DataPreparationError, match="22-6-0000.flac: no transcript: its folder has no \\*.trans.txt"):
        prepare_mini_librispeech(corpus, tmp_path / "s", splits=["test"])


def test_transcript_that_is_not_utf8_is_named(corpus, tmp_path):
    trans = corpus / "LibriSpeech" / "dev-clean-2" / "22" / "6" / "22-6.trans.txt"
    trans.write_bytes("22-6-0000 CAF\u00c9\n".encode("cp1252"))
    with pytest.raises(DataPreparationError, match="22-6.trans.txt: not UTF-8 text"):
        prepare_mini_librispeech(corpus, tmp_path / "s", splits=["test"])


def test_oov_with_g2p_error(corpus, tmp_path):
    (corpus / "LibriSpeech" / "dev-clean-2" / "22" / "6" / "22-6.trans.txt").write_text("22-6-0000 QZXQ\n")
    with pytest.raises(DataPreparationError, match=r"22-6-0000.*'QZXQ'"):
        prepare_mini_librispeech(corpus, tmp_path / "s", splits=["test"], labels="lexicon", g2p="error")


def test_missing_data_folder(tmp_path):
    with pytest.raises(DataPreparationError, match=r"\['dev-clean-2'\] not found.*download=True"):
        prepare_mini_librispeech(tmp_path / "empty", tmp_path / "s", splits=["test"])


def test_prepare_librispeech_audio_only(corpus, tmp_path):
    out = prepare_librispeech(corpus, tmp_path / "s", subsets=["train-clean-5"], valid_utterances=3)
    train, valid = read(out["train"]), read(out["valid"])
    assert list(train[0]) == ["ID", "duration", "wav", "spk_id"]
    assert len(train) + len(valid) == 12 and len(valid) == 4  # two whole speakers
    assert not {r["spk_id"] for r in train} & {r["spk_id"] for r in valid}
    by_utterance = prepare_librispeech(corpus, tmp_path / "s", subsets=["train-clean-5"], valid_utterances=3,
                                       valid_by="utterance")
    assert len(read(by_utterance["valid"])) == 3
    assert len(read(out["valid"])) == 4  # the same save folder: the first split is still there


def test_prepare_librispeech_extra_train_subsets_keep_the_validation_split(corpus, tmp_path):
    base = prepare_librispeech(corpus, tmp_path / "s", subsets=["train-clean-5"], valid_utterances=3)
    more = prepare_librispeech(corpus, tmp_path / "s2", subsets=["train-clean-5"], valid_utterances=3,
                               extra_train_subsets=["dev-clean-2"])
    assert read(more["valid"]) == read(base["valid"])
    added = {r["ID"] for r in read(more["train"])} - {r["ID"] for r in read(base["train"])}
    assert added == set(DEV_LABELS)
    with pytest.raises(DataPreparationError, match="both"):
        prepare_librispeech(corpus, tmp_path / "s3", subsets=["train-clean-5"], extra_train_subsets=["train-clean-5"])


def _tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for info in members:
            data = b"x" if info.type == tarfile.REGTYPE else None
            if data:
                info.size = 1
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


@pytest.mark.parametrize("name,link", [("../evil.txt", None), ("/tmp/evil.txt", None),
                                       ("LibriSpeech/ok/../../../evil.txt", None), ("LibriSpeech/l", "../../etc")])
def test_safe_extract_refuses(tmp_path, name, link):
    info = tarfile.TarInfo(name)
    if link:
        info.type, info.linkname = tarfile.SYMTYPE, link
    archive = _tar(tmp_path / "bad.tar.gz", [tarfile.TarInfo("LibriSpeech/README.TXT"), info])
    with pytest.raises(DataPreparationError, match="unsafe member"):
        safe_extract(archive, tmp_path / "dest")
    assert not (tmp_path / "dest" / "LibriSpeech" / "README.TXT").exists()


def test_checksum_and_download(corpus, tmp_path, monkeypatch):
    archive = tmp_path / "dev-clean-2.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(corpus / "LibriSpeech" / "dev-clean-2", arcname="LibriSpeech/dev-clean-2")
    with pytest.raises(DataPreparationError, match="md5 checksum mismatch"):
        verify_checksum(archive, "0" * 32)
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    verify_checksum(archive, f"sha256:{sha}")

    monkeypatch.setattr(download.urllib.request, "urlretrieve",
                        lambda url, dest: dest.write_bytes(archive.read_bytes()))
    target = tmp_path / "downloaded"
    with pytest.raises(DataPreparationError, match="checksum mismatch"):  # built-in official MD5
        prepare_mini_librispeech(target, tmp_path / "s", splits=["test"], download=True)
    out = prepare_mini_librispeech(target, tmp_path / "s", splits=["test"], labels="lexicon", g2p="spn",
                                   download=True, checksums={"dev-clean-2": f"sha256:{sha}"})
    assert len(read(out["test"])) == 3 and not (target / "dev-clean-2.tar.gz").exists()


@pytest.mark.integration
def test_dev_clean_2_with_mfa_labels(tmp_path):
    root = require_dev_clean_2()
    mfa_csv = root / "phone_labels" / "dev-clean-2_mfa.csv"
    if not mfa_csv.is_file():  # staged beside dev-clean-2: CI has both
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"{mfa_csv} not found")
    out = prepare_mini_librispeech(root, tmp_path / "s", splits=["test"], mfa_labels=mfa_csv)
    rows = read(out["test"])
    assert len(rows) == 1089 and [r["ID"] for r in rows] == sorted(r["ID"] for r in rows)
    assert rows[0]["ID"] == "1272-135031-0000" and rows[0]["wrd"].startswith("BECAUSE YOU WERE")
    assert all(set(r["phn"].split()) <= set(LIBRISPEECH_PHONES) for r in rows)
    assert_prepare_reuses(librispeech, lambda: prepare_mini_librispeech(
        root, tmp_path / "s", splits=["test"], mfa_labels=mfa_csv), out)


@pytest.mark.parametrize("options, message", [
    ({"labels": {"train": "lexicon", "test": "mfa"}}, r"labels has no entry for split\(s\) \['valid'\]"),
    ({"labels": {"train": "lexicon", "valid": "lexicon", "test": "mfaa"}}, r"labels must be one of .*'test': 'mfaa'"),
    ({"splits": ["train", "dev"]}, "splits must be a non-empty subset"),
    ({"mfa_fallback": "skip"}, "mfa_fallback must be 'error' or 'lexicon'"),
])
def test_bad_preparation_options_are_data_preparation_errors(corpus, tmp_path, options, message):
    with pytest.raises(DataPreparationError, match=message):
        prepare_mini_librispeech(corpus, tmp_path / "s", **options)


def test_bad_valid_by_is_a_data_preparation_error(corpus, tmp_path):
    with pytest.raises(DataPreparationError, match="valid_by must be"):
        prepare_librispeech(corpus, tmp_path / "s", subsets=["train-clean-5"], valid_by="speakers")


def test_labels_and_mfa_labels_keys_must_name_splits():
    """A misspelt split would be merged into the recipe's dict and ignored: it is an error naming it."""
    from surprisal_cc.data import librispeech

    splits = ["train", "valid", "test"]
    with pytest.raises(DataPreparationError, match=r"labels names no split \['tset'\]"):
        librispeech._per_split({"train": "mfa", "valid": "mfa", "test": "mfa", "tset": "lexicon"}, splits, "labels",
                               ("mfa", "lexicon"))
    subsets = {"train": "train-clean-5", "valid": "train-clean-5", "test": "dev-clean-2"}
    with pytest.raises(DataPreparationError, match=r"mfa_labels names no split or subset \['trian'\]"):
        librispeech._mfa_sources({"train": "lexicon"}, subsets, {}, {"trian": "/tmp/nope.csv"}, "error")


def test_one_apc_subset_given_as_a_string_is_that_subset(tmp_path):
    with pytest.raises(DataPreparationError, match=r"\['train-clean-100'\] not found") as raised:
        prepare_librispeech(tmp_path, tmp_path / "save", subsets="train-clean-100")
    assert "download=True" not in str(raised.value)  # only Mini-LibriSpeech subsets are fetched


def test_apc_validation_needs_a_speaker_to_hold_out(tmp_path):
    """One speaker cannot be held out whole and leave one to train on: one line saying what to do, not
    an empty validation split whose loss ties every checkpoint."""
    root = make_librispeech_fixture(tmp_path / "data", {"train-clean-5": {"11-1": ["THE CAT"] * 4}},
                                    genders={"11": "F"})
    with pytest.raises(DataPreparationError, match="one speaker only.*valid_by: utterance"):
        prepare_librispeech(root, tmp_path / "s", subsets=["train-clean-5"], valid_utterances=1)
    out = prepare_librispeech(root, tmp_path / "s", subsets=["train-clean-5"], valid_utterances=1, valid_by="utterance")
    assert len(read(out["valid"])) == 1 and len(read(out["train"])) == 3
