import pytest

from surprisal_cc.data import (
    ARPABET_39, LIBRISPEECH_PHONES, TIMIT_61_TO_39, TIMIT_PHONES_39, DataPreparationError,
    strip_stress, validate_phones,
)
from surprisal_cc.data.phones import fold_timit, merge_repeated

TIMIT_61 = (
    "aa ae ah ao aw ax ax-h axr ay b bcl ch d dcl dh dx eh el em en eng epi er ey f g gcl h# hh "
    "hv ih ix iy jh k kcl l m n ng nx ow oy p pau pcl q r s sh t tcl th uh uw ux v w y z zh"
).split()


def test_inventories():
    assert len(ARPABET_39) == 39 and ARPABET_39 == sorted(ARPABET_39)
    assert LIBRISPEECH_PHONES == ARPABET_39 + ["sil", "spn"]
    assert sorted(TIMIT_61_TO_39) == sorted(TIMIT_61) and len(TIMIT_61) == 61
    assert len(TIMIT_PHONES_39) == 39 and "sil" in TIMIT_PHONES_39
    assert set(TIMIT_PHONES_39) == {v for v in TIMIT_61_TO_39.values() if v}


@pytest.mark.parametrize("src,dst", [
    ("ao", "aa"), ("ax", "ah"), ("ax-h", "ah"), ("axr", "er"), ("hv", "hh"), ("ix", "ih"),
    ("el", "l"), ("em", "m"), ("en", "n"), ("nx", "n"), ("eng", "ng"), ("zh", "sh"), ("ux", "uw"),
    ("bcl", "sil"), ("dcl", "sil"), ("gcl", "sil"), ("pcl", "sil"), ("tcl", "sil"), ("kcl", "sil"),
    ("h#", "sil"), ("pau", "sil"), ("epi", "sil"), ("q", None), ("dx", "dx"), ("iy", "iy"),
])
def test_timit_folding(src, dst):
    assert TIMIT_61_TO_39[src] == dst


def test_fold_drops_q_and_merges_sil():
    assert fold_timit("h# q bcl b q tcl pau epi h#".split()) == ["sil", "b", "sil"]
    assert merge_repeated(["sil", "sil", "AA", "AA"]) == ["sil", "AA", "AA"]


def test_merge_repeated_collapses_only_the_given_symbol():
    assert merge_repeated([]) == []
    assert merge_repeated(["sil"]) == ["sil"]
    assert merge_repeated(["sil", "sil", "a", "a", "sil", "sil"]) == ["sil", "a", "a", "sil"]
    assert merge_repeated(["h#", "h#", "x"], symbol="h#") == ["h#", "x"]


def test_strip_stress():
    assert [strip_stress(p) for p in ["AH0", "EY1", "OW2", "sil", "spn"]] == ["AH", "EY", "OW", "sil", "spn"]


def test_validate_phones_names_utterance_and_symbols():
    validate_phones(["sil", "AH", "spn"], LIBRISPEECH_PHONES, "u1")
    with pytest.raises(DataPreparationError, match=r"utt-7.*\['AH0', 'XX'\]"):
        validate_phones(["AH0", "XX", "AH"], LIBRISPEECH_PHONES, "utt-7")
    with pytest.raises(ValueError):  # DataPreparationError is a ValueError
        fold_timit(["h#", "zz"], where="a.phn")
