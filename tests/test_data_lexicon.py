import shutil

import pytest

from surprisal_cc.data import DataPreparationError, DataPreparationWarning, Lexicon
from surprisal_cc.data import lexicon as lexicon_module


@pytest.fixture(scope="module")
def spn_lexicon():
    return Lexicon(g2p="spn")


def test_cmudict_without_stress(spn_lexicon):
    assert spn_lexicon.words_to_phones(["TENNESSEE"]) == "sil T EH N AH S IY sil".split()
    assert spn_lexicon.words_to_phones(["DON'T"], add_boundary_silence=False) == ["D", "OW", "N", "T"]
    assert spn_lexicon.lookup("gwynplaine's") is None


def test_every_pronunciation_without_stress_and_duplicates(spn_lexicon):
    # CMUdict: the DH AH0 / DH AH1 / DH IY0 -> two distinct once stress is stripped, first one first
    assert spn_lexicon.pronunciations("THE") == [["DH", "AH"], ["DH", "IY"]]
    assert spn_lexicon.pronunciations("THE")[0] == spn_lexicon.words_to_phones(["THE"], add_boundary_silence=False)
    assert spn_lexicon.pronunciations("TENNESSEE") == [["T", "EH", "N", "AH", "S", "IY"]]
    assert spn_lexicon.pronunciations("WOLVERINE'S") == [["W", "UH", "L", "V", "ER", "IY", "N", "Z"]]
    lex = Lexicon(g2p="spn")
    assert lex.pronunciations("QZXQ", utt_id="u2") == [["spn"]] and lex.oov_by_utterance == {"u2": ["QZXQ"]}


def test_oov_spn_is_counted_and_warned():
    lex = Lexicon(g2p="spn")
    assert lex.words_to_phones(["THE", "QZXQ"], utt_id="u9") == ["sil", "DH", "AH", "spn", "sil"]
    assert lex.oov_by_utterance == {"u9": ["QZXQ"]} and lex.oov_counts["QZXQ"] == 1
    with pytest.warns(DataPreparationWarning, match="1 OOV token.*1 utterance.*QZXQ"):
        lex.warn_oov_summary()


def test_oov_error_names_word_and_utterance():
    with pytest.raises(DataPreparationError, match=r"utt-3.*'QZXQ'"):
        Lexicon(g2p="error").words_to_phones(["THE", "QZXQ"], utt_id="utt-3")


def test_unknown_g2p_is_a_data_preparation_error():
    with pytest.raises(DataPreparationError, match="g2p must be one of"):
        Lexicon(g2p="cmu")


def test_flite_missing_gives_install_hint(monkeypatch):
    monkeypatch.setattr(lexicon_module.shutil, "which", lambda _: None)
    lex = Lexicon(g2p="flite")
    with pytest.raises(DataPreparationError, match="apt-get install flite.*g2p='spn'"):
        lex.words_to_phones(["QZXQ"], utt_id="u1")


def test_flite_batched_with_fake_executable(tmp_path, monkeypatch):
    fake = tmp_path / "flite"
    fake.write_text(
        "#!/bin/sh\necho \"$2\" >> %s\n"
        "echo 'pau b l ax1 k s pau k w ih1 z pau'\n" % (tmp_path / "calls.txt")
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    lex = Lexicon(g2p="flite")
    lex.prefetch(["QWIZ", "BLAXX", "THE"])
    assert lex.words_to_phones(["QWIZ", "BLAXX"], utt_id="u") == "sil K W IH Z B L AH K S sil".split()
    assert (tmp_path / "calls.txt").read_text().splitlines() == ["blaxx, qwiz"]  # one batched call


@pytest.mark.skipif(shutil.which("flite") is None, reason="flite not installed (apt-get install flite)")
def test_real_flite():
    from surprisal_cc.data.phones import LIBRISPEECH_PHONES

    phones = Lexicon(g2p="flite").words_to_phones(["GWYNPLAINE"], add_boundary_silence=False)
    assert len(phones) >= 5 and set(phones) <= set(LIBRISPEECH_PHONES) - {"spn", "sil"}
