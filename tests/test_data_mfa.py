import os

import pytest

from data_fixtures import require_dev_clean_2, write_mfa_csv, write_textgrids_from_mfa_csv
from surprisal_cc.data import DataPreparationError
from surprisal_cc.data import mfa
from surprisal_cc.data.mfa import (
    build_mfa_command, load_mfa_labels, load_mfa_word_phones, parse_textgrid, read_mfa_csv, run_mfa,
    textgrid_phones,
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


def test_word_phones_from_textgrids_and_a_csv_without_timings(tmp_path):
    (tmp_path / "spk").mkdir()
    (tmp_path / "spk" / "1-2-0003.TextGrid").write_text(TG)
    assert load_mfa_word_phones(tmp_path) == {"1-2-0003": [("hello", ("HH", "AH", "L", "OW")), ("gwyn", ("spn",))]}
    path = write_mfa_csv(tmp_path / "x.csv", "dev-clean-2", {"1-2-0000": "sil AH D sil"})
    with pytest.raises(DataPreparationError, match="x.csv: no word timings"):
        load_mfa_word_phones(path)


def test_csv_reader(tmp_path):
    path = write_mfa_csv(tmp_path / "x.csv", "dev-clean-2", {"1-2-0000": "sil sil AH D sil"})
    assert read_mfa_csv(path) == {"1-2-0000": ["sil", "AH", "D", "sil"]}
    write_mfa_csv(path, "dev-clean-2", {"1-2-0000": "sil AH0 D sil"})
    with pytest.raises(DataPreparationError, match=r"1-2-0000.*\['AH0'\]"):
        read_mfa_csv(path)


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
    from surprisal_cc.label_eval import read_boundary_silences

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
