"""Kaldi data folders (wav.scp + text): read as utterances, labelled by the lexicon for ``evaluate``."""
from __future__ import annotations

from pathlib import Path

import pytest

from surprisal_cc.inference.corpora import corpus_items, pronunciation_references
from surprisal_cc.data.errors import BadAudioError, BadLabelsError, DataPreparationError
from surprisal_cc.data.kaldi import KaldiUtterance, is_kaldi_data_folder, read_kaldi_data_folder, read_wav_scp
from surprisal_cc.data.phones import LIBRISPEECH_PHONES
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.inference import ConditionalASR


def _data_folder(root: Path, wav_scp: str, text: str) -> Path:
    folder = root / "data" / "test"
    folder.mkdir(parents=True)
    (folder / "wav.scp").write_text(wav_scp)
    (folder / "text").write_text(text)
    (folder / "utt2spk").write_text("this file is not read\n")
    return folder


def test_utterances_are_read_sorted_with_relative_paths_from_the_working_folder_or_the_data_folder(
        tmp_path, monkeypatch):
    (tmp_path / "audio").mkdir()
    (tmp_path / "audio" / "b.wav").touch()
    folder = _data_folder(tmp_path, "b audio/b.wav\n\na\t/corpus/a file.flac\nc beside.wav\n",
                          "a hello  world\nb Good\tmorning\nc BESIDE\n")
    (folder / "beside.wav").touch()
    monkeypatch.chdir(tmp_path)
    assert is_kaldi_data_folder(folder) and not is_kaldi_data_folder(tmp_path)
    assert read_kaldi_data_folder(folder) == [
        KaldiUtterance("a", "/corpus/a file.flac", ("HELLO", "WORLD")),
        KaldiUtterance("b", "audio/b.wav", ("GOOD", "MORNING")),  # Kaldi reads it from the current folder
        KaldiUtterance("c", str(folder / "beside.wav"), ("BESIDE",)),
    ]


def test_entries_that_are_not_audio_files_and_missing_transcripts_are_listed(tmp_path):
    folder = _data_folder(
        tmp_path,
        "ok /a/ok.wav\npipe flac -c -d -s /a/p.flac |\nark /a/feats.ark:1234\nnotext /a/n.wav\nempty /a/e.wav\n",
        "ok HELLO\npipe HELLO\nark HELLO\nempty\nnoaudio HELLO\n")
    with pytest.raises(BadLabelsError) as raised:
        read_kaldi_data_folder(folder)
    problems = raised.value.problems  # by utterance id, then the transcripts without audio
    assert len(problems) == 5 and raised.value.total == 6
    assert f"{folder / 'wav.scp'}: pipe: a command (flac -c -d -s /a/p.flac |)" in problems[3]
    assert "ark: an offset into a Kaldi archive" in problems[0]
    assert problems[1] == f"{folder / 'text'}: no words for empty"
    assert problems[2] == f"{folder / 'text'}: no line for notext"
    assert problems[4] == f"{folder / 'wav.scp'}: no line for noaudio (it has a transcript in text)"
    assert "5 of 6 utterances" in str(raised.value) and "--skip-bad" in str(raised.value)
    found = []
    assert read_kaldi_data_folder(folder, problems=found) == [KaldiUtterance("ok", "/a/ok.wav", ("HELLO",))]
    assert found == problems


def test_standard_input_is_refused_and_a_file_name_with_a_dash_is_not(tmp_path):
    folder = _data_folder(tmp_path, "a -\nb /a/take-\nc /a/-c.wav\n", "a HELLO\nb HELLO\nc HELLO\n")
    found = []
    assert [u.wav for u in read_kaldi_data_folder(folder, problems=found)] == ["/a/take-", "/a/-c.wav"]
    assert found == [f"{folder / 'wav.scp'}: a: standard input (-), not an audio file"]


def test_wav_scp_alone_is_what_transcription_reads(tmp_path):
    """Transcribing needs no text; entries that are not audio files are listed or collected."""
    folder = _data_folder(tmp_path, "b /a/b.wav\npipe sox /a/p.wav -t wav - |\na /a/a.flac\n", "")
    (folder / "text").unlink()
    with pytest.raises(BadLabelsError) as raised:
        read_wav_scp(folder)
    assert raised.value.problems == [f"{folder / 'wav.scp'}: pipe: a command (sox /a/p.wav -t wav - |), not an "
                                     "audio file: write its output to a file and list that, e.g. with Kaldi's wav-copy"]
    assert "1 of 3 utterances" in str(raised.value) and "--skip-bad to transcribe the others" in str(raised.value)
    found = []
    assert read_wav_scp(folder, problems=found) == {"a": "/a/a.flac", "b": "/a/b.wav"}
    assert list(read_wav_scp(folder, problems=[])) == ["a", "b"] and found == raised.value.problems
    (folder / "wav.scp").write_text("u1 cat x.wav |\n")
    with pytest.raises(BadAudioError, match="wav.scp: no utterance with an audio file") as raised:
        read_wav_scp(folder, problems=[])
    assert raised.value.problems[0].startswith(f"{folder / 'wav.scp'}: u1: a command")  # why, even when skipping
    (folder / "wav.scp").unlink()
    with pytest.raises(DataPreparationError, match="needs wav.scp"):
        read_wav_scp(folder)


@pytest.mark.parametrize("files, message", [
    ({"text": None}, "a Kaldi data folder needs text"),
    ({"segments": "u1 rec1 0.0 1.5\n"}, "segments: utterances cut from longer recordings are not read"),
    ({"wav.scp": "u1 /a.wav\nu1 /b.wav\n"}, "wav.scp, line 2: utterance id 'u1' occurs twice"),
    ({"wav.scp": "u1\n"}, "wav.scp, line 1: 'u1' has no value"),
])
def test_a_broken_data_folder_is_one_line_naming_the_file(tmp_path, files, message):
    folder = _data_folder(tmp_path, "u1 /a.wav\n", "u1 HELLO\n")
    for name, content in files.items():
        if content is None:
            (folder / name).unlink()
        else:
            (folder / name).write_text(content)
    with pytest.raises(DataPreparationError, match=message.replace("(", r"\(")) as raised:
        read_kaldi_data_folder(folder, problems=[])
    assert str(folder) in str(raised.value) and "\n" not in str(raised.value)


def test_a_folder_without_a_usable_utterance_says_why_of_each(tmp_path):
    folder = _data_folder(tmp_path, "u1 /a.wav\n", "u2 HELLO\n")
    with pytest.raises(BadLabelsError, match="no utterance with both audio and words") as raised:
        read_kaldi_data_folder(folder, problems=[])
    assert raised.value.problems == [f"{folder / 'text'}: no line for u1",
                                     f"{folder / 'wav.scp'}: no line for u2 (it has a transcript in text)"]


def test_evaluate_labels_a_kaldi_folder_by_the_models_lexicon_policy(tmp_path):
    folder = _data_folder(tmp_path, "u1 /a/u1.wav\nu2 /a/u2.wav\n", "u1 don't stop\nu2 QWXZT AND\n")
    asr = ConditionalASR.untrained(LIBRISPEECH_PHONES)
    words: dict = {}
    with pytest.warns(UserWarning, match="QWXZT"):
        items, source = corpus_items(folder, asr, g2p="spn", words=words)
    assert items == [("u1", "/a/u1.wav", ["sil", "D", "OW", "N", "T", "S", "T", "AA", "P", "sil"]),
                     ("u2", "/a/u2.wav", ["sil", "spn", "AH", "N", "D", "sil"])]
    assert source.startswith(f"Kaldi text {folder / 'text'} by the lexicon (CMUdict, g2p=spn")
    assert words == {"u1": ["DON'T", "STOP"], "u2": ["QWXZT", "AND"]}
    tokens, _ = pronunciation_references(folder, items, words)["u2"]
    assert "AE" in tokens  # AND's second CMUdict pronunciation is in the graph
    with pytest.raises(ConfigurationError, match="labelled from its text by the lexicon"):
        corpus_items(folder, asr, mfa_labels=tmp_path / "mfa.csv")
