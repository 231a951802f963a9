"""Tests for surprisal_cc.data.manifest: one manifest folder per set of preparation options."""
import csv
from pathlib import Path

import pytest

from surprisal_cc.data import manifest
from surprisal_cc.data import DataPreparationError
from surprisal_cc.data.manifest import (AUDIO_COLUMNS, LABELLED_COLUMNS, cached_prepare, options_digest, read_manifest,
                                       write_manifest)


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fake_build(phones, calls):
    """A ``build`` for cached_prepare that labels one utterance per split with ``phones``, noting each call."""
    def build(folder):
        calls.append(phones)
        row = {"ID": "u1", "duration": 1.0, "wav": "/a.flac", "spk_id": "s", "wrd": "A", "phn": phones}
        return {split: write_manifest(folder / f"{split}.csv", [row], LABELLED_COLUMNS) for split in ("train", "valid")}
    return build


@pytest.fixture()
def inputs(tmp_path):
    audio = tmp_path / "a.flac"
    audio.write_bytes(b"audio")
    return [audio]


def test_other_options_get_their_own_manifests(tmp_path, inputs):
    """Two label configurations in one save folder: neither overwrites the other's manifests, each
    call returns its own, and going back to the first reuses it without building again."""
    calls = []
    mfa = cached_prepare(tmp_path / "m", "prep", {"labels": "mfa"}, inputs, fake_build("sil AH sil", calls))
    lexicon = cached_prepare(tmp_path / "m", "prep", {"labels": "lexicon"}, inputs, fake_build("sil AA sil", calls))
    assert calls == ["sil AH sil", "sil AA sil"]
    assert set(mfa) == set(lexicon) == {"train", "valid"}
    assert not set(mfa.values()) & set(lexicon.values())
    assert {r["phn"] for p in mfa.values() for r in read(p)} == {"sil AH sil"}
    assert {r["phn"] for p in lexicon.values() for r in read(p)} == {"sil AA sil"}
    assert mfa["train"].parent == (tmp_path / "m").resolve() / f"prep-{options_digest({'labels': 'mfa'})}"
    assert cached_prepare(tmp_path / "m", "prep", {"labels": "mfa"}, inputs, fake_build("x", calls)) == mfa
    assert cached_prepare(tmp_path / "m", "prep", {"labels": "lexicon"}, inputs, fake_build("x", calls)) == lexicon
    assert calls == ["sil AH sil", "sil AA sil"]


def test_same_options_reuse_their_manifests_until_the_inputs_change(tmp_path, inputs):
    calls = []
    first = cached_prepare(tmp_path / "m", "prep", {"labels": "mfa", "seed": 1}, inputs, fake_build("sil AH sil", calls))
    stamps = {p: p.stat().st_mtime_ns for p in first.values()}
    again = cached_prepare(tmp_path / "m", "prep", {"seed": 1, "labels": "mfa"}, inputs, fake_build("x", calls))
    assert again == first and calls == ["sil AH sil"]
    assert {p: p.stat().st_mtime_ns for p in first.values()} == stamps  # nothing rewritten
    inputs[0].write_bytes(b"other audio")
    rebuilt = cached_prepare(tmp_path / "m", "prep", {"labels": "mfa", "seed": 1}, inputs, fake_build("sil AA sil", calls))
    assert rebuilt == first and calls == ["sil AH sil", "sil AA sil"]  # the same folder, made again
    assert read(first["train"])[0]["phn"] == "sil AA sil"


def test_a_failed_build_records_nothing(tmp_path, inputs):
    """A build cut off half-way leaves no record, so the next call builds again instead of reusing it."""
    calls = []

    def failing(folder):
        write_manifest(folder / "train.csv", [], LABELLED_COLUMNS)
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        cached_prepare(tmp_path / "m", "prep", {"labels": "mfa"}, inputs, failing)
    out = cached_prepare(tmp_path / "m", "prep", {"labels": "mfa"}, inputs, fake_build("sil AH sil", calls))
    assert calls == ["sil AH sil"] and read(out["train"])[0]["phn"] == "sil AH sil"


def test_manifests_are_replaced_whole(tmp_path, monkeypatch):
    """write_manifest writes a temporary file in the same folder and renames it over the manifest: a
    process reading it meanwhile (one preparing the same options) sees the old file whole, then the new."""
    path = tmp_path / "train.csv"
    path.write_text("old\n")
    seen = []
    rename = manifest.os.replace

    def replace(src, dst):
        seen.append((Path(src).parent, Path(dst), path.read_text()))
        rename(src, dst)

    monkeypatch.setattr(manifest.os, "replace", replace)
    write_manifest(path, [{"ID": "b", "duration": 2, "wav": "w", "spk_id": "s"},
                          {"ID": "a", "duration": 1, "wav": "w", "spk_id": "s"}], AUDIO_COLUMNS)
    assert seen == [(tmp_path, path, "old\n")]
    assert path.read_text() == "ID,duration,wav,spk_id\na,1.000,w,s\nb,2.000,w,s\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.csv"]  # no temporary file left


def test_read_manifest_reads_what_write_manifest_writes(tmp_path):
    row = {"ID": "u1", "duration": 1.5, "wav": "/a.flac", "spk_id": "s", "wrd": "A", "phn": "sil AH sil"}
    path = write_manifest(tmp_path / "train.csv", [row], LABELLED_COLUMNS)
    columns, rows = read_manifest(path, LABELLED_COLUMNS)
    assert columns == LABELLED_COLUMNS
    assert rows == [{**row, "duration": "1.500"}]


def test_read_manifest_drops_a_bom_and_resolves_relative_wav_paths(tmp_path, monkeypatch):
    """wav relative to the CSV's folder, or to the current folder where only that one exists; absolute as is."""
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "beside.flac").write_bytes(b"")
    (tmp_path / "cwd.flac").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "csv" / "test.csv"
    path.write_text("\ufeffID,wav\nu1,beside.flac\nu2,cwd.flac\nu3,/abs.flac\nu4,gone.flac\n", encoding="utf-8")
    columns, rows = read_manifest(path)
    assert columns == ["ID", "wav"]
    assert [r["wav"] for r in rows] == [str(tmp_path / "csv" / "beside.flac"), "cwd.flac", "/abs.flac",
                                       str(tmp_path / "csv" / "gone.flac")]
    assert [r["wav"] for r in read_manifest(path, resolve_wav=False).rows] == [
        "beside.flac", "cwd.flac", "/abs.flac", "gone.flac"]


def test_read_manifest_names_the_file_and_the_missing_columns(tmp_path):
    path = tmp_path / "test.csv"
    path.write_text("ID,duration\nu1,1.0\n")
    with pytest.raises(DataPreparationError) as raised:
        read_manifest(path, ["ID", "wav", ("phn", "wrd")], hint="expected ID, wav and phn")
    assert str(raised.value) == f"{path}: manifest lacks the column(s) ['phn or wrd', 'wav'] (expected ID, wav and phn)"
    path.write_bytes("ID,wav\nu1,caf\xe9.flac\n".encode("latin-1"))
    with pytest.raises(DataPreparationError, match="not UTF-8"):
        read_manifest(path)


def test_an_empty_split_is_refused_naming_its_manifest_and_why():
    """By default the reason is that skip_bad_audio left out every file, of which the warning lists the first
    MAX_LISTED; a caller may give its own reason."""
    from surprisal_cc.data.errors import MAX_LISTED
    from surprisal_cc.data.manifest import refuse_empty_split

    refuse_empty_split("save/test.csv", "test", [{"ID": "u1"}])
    with pytest.raises(DataPreparationError, match=rf"^save/test.csv: split 'test' has no utterance: skip_bad_audio "
                                                   rf"left out the audio of every one of its utterances \(the first "
                                                   rf"{MAX_LISTED} listed in the warning above\)"):
        refuse_empty_split("save/test.csv", "test", [])
    with pytest.raises(DataPreparationError, match=r"^save/test.csv: split 'test' has no utterance: prepare again$"):
        refuse_empty_split("save/test.csv", "test", [], why="prepare again")
