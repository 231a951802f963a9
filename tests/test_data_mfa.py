import os

import pytest

from data_fixtures import require_dev_clean_2, write_mfa_csv, write_textgrids_from_mfa_csv
from surprisal_cc.data import DataPreparationError
from surprisal_cc.data import mfa
from surprisal_cc.data.mfa import (
    build_mfa_command, find_mfa_labels, load_mfa_labels, load_mfa_word_phones, parse_textgrid, read_mfa_csv,
    read_mfa_export, read_word_phones, run_mfa, textgrid_phones, utterance_id,
)


def textgrid(tiers):
    """Long-format TextGrid as `mfa align` writes it."""
    end = max(iv[1] for ivs in tiers.values() for iv in ivs)
    out = ['File type = "ooTextFile"', 'Object class = "TextGrid"', "", "xmin = 0",
           f"xmax = {end}", "tiers? <exists>", f"size = {len(tiers)}", "item []:"]
    for i, (name, ivs) in enumerate(tiers.items(), 1):
        out += [f"    item [{i}]:", '        class = "IntervalTier"', f'        name = "{name}"',
                "        xmin = 0", f"        xmax = {end}", f"        intervals: size = {len(ivs)}"]
        for j, (a, b, text) in enumerate(ivs, 1):
            out += [f"        intervals [{j}]:", f"            xmin = {a}", f"            xmax = {b}",
                    f'            text = "{text}"']
    return "\n".join(out) + "\n"


TG = textgrid({
    "words": [(0, 0.1, ""), (0.1, 0.5, "hello"), (0.5, 0.6, ""), (0.6, 0.9, "gwyn"), (0.9, 1.0, "")],
    "phones": [(0, 0.1, ""), (0.1, 0.2, "HH"), (0.2, 0.3, "AH0"), (0.3, 0.4, "L"), (0.4, 0.5, "OW1"),
               (0.5, 0.55, "sp"), (0.55, 0.6, "sil"), (0.6, 0.9, "spn"), (0.9, 1.0, "")],
})


def test_parse_textgrid():
    tiers = parse_textgrid(TG)
    assert set(tiers) == {"words", "phones"}
    assert tiers["words"][1] == (0.1, 0.5, "hello")
    assert textgrid_phones(tiers) == "sil HH AH L OW sil spn sil".split()


def test_textgrid_folder_and_unknown_symbol(tmp_path):
    (tmp_path / "spk").mkdir()
    (tmp_path / "spk" / "1-2-0003.TextGrid").write_text(TG)
    assert load_mfa_labels(tmp_path) == {"1-2-0003": "sil HH AH L OW sil spn sil".split()}
    (tmp_path / "spk" / "1-2-0004.TextGrid").write_text(TG.replace('"L"', '"LL"'))
    with pytest.raises(DataPreparationError, match=r"1-2-0004.*\['LL'\]"):
        load_mfa_labels(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataPreparationError, match=r"empty: no .TextGrid file under it"):
        load_mfa_labels(tmp_path / "empty")


def test_a_textgrid_without_phones_or_twice_is_refused_naming_the_files(tmp_path):
    """As the CSV reader refuses an utterance without labels or on two rows: a phones tier with no
    interval, and one utterance's TextGrid in two speaker folders (one would silently win)."""
    empty = textgrid({"words": [(0, 1.0, "")], "phones": []}).replace("xmax = 1.0", "xmax = 1")
    (tmp_path / "spk").mkdir()
    (tmp_path / "spk" / "1-2-0003.TextGrid").write_text(empty)
    with pytest.raises(DataPreparationError, match=r"spk/1-2-0003.TextGrid: utterance 1-2-0003 has no phone labels "
                                                   r"\(its phones tier holds no interval\); align it again or remove"):
        load_mfa_labels(tmp_path)
    (tmp_path / "spk" / "1-2-0003.TextGrid").write_text(TG)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "1-2-0003.TextGrid").write_text(TG)
    for read in (load_mfa_labels, load_mfa_word_phones):
        with pytest.raises(DataPreparationError, match=r"other/1-2-0003.TextGrid and .*spk/1-2-0003.TextGrid: two "
                                                       "TextGrids of utterance 1-2-0003; keep the one that labels it"):
            read(tmp_path)


def test_word_phones_from_textgrids_and_a_csv_without_timings(tmp_path):
    (tmp_path / "spk").mkdir()
    (tmp_path / "spk" / "1-2-0003.TextGrid").write_text(TG)
    assert load_mfa_word_phones(tmp_path) == {"1-2-0003": [("hello", ("HH", "AH", "L", "OW")), ("gwyn", ("spn",))]}
    path = write_mfa_csv(tmp_path / "x.csv", "dev-clean-2", {"1-2-0000": "sil AH D sil"})
    with pytest.raises(DataPreparationError, match=r"x.csv: utterance .*1-2-0000.flac: malformed phn \(SyntaxError.*"
                                                   "give the CSV export of MFA alignments with word timings"):
        load_mfa_word_phones(path)
    path.write_text("path,phn\nspk/u1.flac,[]\n")
    with pytest.raises(DataPreparationError, match="x.csv: no column phn_starts, words, wrd_starts, wrd_ends; "
                                                   "give the CSV export of MFA alignments with word timings"):
        load_mfa_word_phones(path)


def test_csv_reader(tmp_path):
    path = write_mfa_csv(tmp_path / "x.csv", "dev-clean-2", {"1-2-0000": "sil sil AH D sil"})
    assert read_mfa_csv(path) == {"1-2-0000": ["sil", "AH", "D", "sil"]}
    write_mfa_csv(path, "dev-clean-2", {"1-2-0000": "sil AH0 D sil"})
    with pytest.raises(DataPreparationError, match=r"1-2-0000.*\['AH0'\]"):
        read_mfa_csv(path)


def test_utterance_ids_keep_every_dot_but_the_extension(tmp_path):
    """The id is the file name without its extension, as scan_subset and the TextGrid readers make it,
    by every reader of the export."""
    from surprisal_cc.experiments.analysis import read_aligned_csv
    from surprisal_cc.alignment.label_eval import read_boundary_silences

    assert utterance_id("dev-clean-2/84/121123/84-121123-0000.flac") == "84-121123-0000"
    assert utterance_id("spk/u1.v2.flac") == "u1.v2"
    path = tmp_path / "x.csv"
    path.write_text("path,phonemes_39,phn,phn_starts,phn_ends,words,wrd_starts,wrd_ends\n"
                    "spk/u1.v2.flac,sil AH sil,\"['sil', 'AH', '']\",0 1 2,1 2 3,\"['', 'a', '']\",0 1 2,1 2 3\n")
    assert list(read_mfa_csv(path)) == list(read_word_phones(path)) == list(read_boundary_silences(path)) == ["u1.v2"]
    assert [u.utt_id for u in read_aligned_csv(path, tmp_path)] == ["u1.v2"]


def test_an_export_made_on_windows_gives_the_utterance_ids(tmp_path):
    """The export's paths as MFA writes them on Windows: backslashes separate the folders on any system."""
    path = tmp_path / "x.csv"
    path.write_text("path,phonemes_39\n"
                    "C:\\corpus\\dev-clean-2\\84\\121123\\84-121123-0000.flac,sil AH sil\n")
    assert read_mfa_csv(path) == {"84-121123-0000": ["sil", "AH", "sil"]}
    assert utterance_id("C:\\corpus\\spk/u1.v2.flac") == "u1.v2"


def test_export_reader_names_missing_columns_and_malformed_values(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("path,phn,phn_starts\nspk/u1.flac,\"['sil']\",0 x\n")
    with pytest.raises(DataPreparationError, match="x.csv: no column phn_ends; give the CSV export of MFA"):
        read_mfa_export(path, ("phn", "phn_ends"))
    with pytest.raises(DataPreparationError, match=r"x.csv: utterance spk/u1.flac: malformed phn_starts \(ValueError"):
        read_mfa_export(path, ("phn", "phn_starts"))
    row, = read_mfa_export(path, ("phn",))
    assert (row.utt_id, row.phn, row.phn_starts) == ("u1", ["sil"], None)


def test_mfa_labels_beside_a_corpus_must_be_a_file_or_a_folder(tmp_path):
    """The export CSV before the TextGrid folder, inside LibriSpeech/ before beside it; a folder named
    like the export (or a file named like the TextGrid folder) is not taken."""
    subset_dir = tmp_path / "LibriSpeech" / "dev-clean-2"
    (tmp_path / "phone_labels" / "dev-clean-2_mfa.csv").mkdir(parents=True)
    (tmp_path / "phone_labels" / "dev-clean-2").write_text("")
    assert find_mfa_labels(subset_dir) is None
    inside = tmp_path / "LibriSpeech" / "phone_labels" / "dev-clean-2"
    inside.mkdir(parents=True)
    assert find_mfa_labels(subset_dir) == inside
    (tmp_path / "LibriSpeech" / "phone_labels" / "dev-clean-2_mfa.csv").write_text("")
    assert find_mfa_labels(subset_dir) == inside.parent / "dev-clean-2_mfa.csv"
    (tmp_path / "phone_labels" / "dev-clean-2").unlink()
    (tmp_path / "phone_labels" / "dev-clean-2").mkdir()
    (inside.parent / "dev-clean-2_mfa.csv").unlink()
    inside.rmdir()
    assert find_mfa_labels(subset_dir, "dev-clean-2") == tmp_path / "phone_labels" / "dev-clean-2"


def test_run_mfa_missing_explains_install(monkeypatch, tmp_path):
    monkeypatch.setattr(mfa.shutil, "which", lambda _: None)
    with pytest.raises(DataPreparationError, match="conda install -c conda-forge montreal-forced-aligner.*labels='lexicon'"):
        run_mfa(tmp_path, "dict", "model", tmp_path / "out")


def test_run_mfa_with_fake_executable(monkeypatch, tmp_path):
    fake = tmp_path / "bin" / "mfa"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args.txt\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}/usr/bin:/bin")
    out = run_mfa("corpus", "english_us_arpa", "english_us_arpa", tmp_path / "aligned", num_jobs=2)
    assert out == tmp_path / "aligned" and out.is_dir()
    expected = build_mfa_command("corpus", "english_us_arpa", "english_us_arpa", tmp_path / "aligned")[1:]
    assert (tmp_path / "args.txt").read_text().split() == expected
    assert expected[:5] == ["align", "corpus", "english_us_arpa", "english_us_arpa", str(tmp_path / "aligned")]


@pytest.mark.integration
def test_textgrids_map_to_the_test_labels_convention(tmp_path):
    """mfa-dev's TextGrids (ARPAbet with stress, sil/sp/"" silences) give the 41-symbol labels the way
    dev-clean-2's MFA export does: every dev-clean-2 utterance, written as a TextGrid from the export's
    raw tiers, reads back as its phonemes_39 column, with the same word-boundary silences. The one
    exception is the export's own: in 6 utterances its phonemes_39 drops the final silence that its
    raw phone tier has (other utterances with as short a final silence keep it)."""
    from surprisal_cc.alignment.label_eval import read_boundary_silences

    csv_path = require_dev_clean_2() / "phone_labels" / "dev-clean-2_mfa.csv"
    expected = write_textgrids_from_mfa_csv(csv_path, tmp_path / "tg")
    labels, export = mfa.load_mfa_labels(tmp_path / "tg"), mfa.read_mfa_csv(csv_path)
    assert len(labels) == len(expected) == len(export) == 1089
    differ = {u for u in labels if labels[u] != export[u]}
    assert all(labels[u] == export[u] + ["sil"] for u in differ) and len(differ) <= 6
    assert {u: " ".join(p) for u, p in labels.items() if u not in differ} == \
        {u: " ".join(p.split()) for u, p in expected.items() if u not in differ}
    silences, export_silences = read_boundary_silences(tmp_path / "tg"), read_boundary_silences(csv_path)
    assert {u: v for u, v in silences.items() if u not in differ} == \
        {u: v for u, v in export_silences.items() if u not in differ}
    assert mfa.load_mfa_word_phones(tmp_path / "tg") == mfa.load_mfa_word_phones(csv_path)


def test_a_textgrid_folder_skips_hidden_files_and_names_a_broken_one(tmp_path):
    """macOS's ``._x.TextGrid`` companions are not labels (the preparation's fingerprint skips them too),
    any case of the suffix is read, and a TextGrid that does not parse or has no phones tier is named."""
    (tmp_path / "1-2-0003.textgrid").write_text(TG)
    (tmp_path / "._1-2-0003.TextGrid").write_bytes(b"\x00\x05\x16\x07 not text")
    assert list(load_mfa_labels(tmp_path)) == ["1-2-0003"]
    (tmp_path / "1-2-0004.TextGrid").write_text(TG.replace('name = "phones"', 'name = "segments"'))
    with pytest.raises(DataPreparationError, match=r"1-2-0004.TextGrid: TextGrid has no 'phones' tier"):
        load_mfa_labels(tmp_path)
    (tmp_path / "1-2-0004.TextGrid").write_text(TG.replace("xmin = 0.1", "xmin = zero", 1))
    with pytest.raises(DataPreparationError, match=r"1-2-0004.TextGrid: "):
        load_mfa_labels(tmp_path)
