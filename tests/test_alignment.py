"""Tests for surprisal_cc.alignment.realign and surprisal_cc.alignment.label_eval: CTC alignment with optional silence, corpus
relabelling, and the new labels scored against MFA's."""
from __future__ import annotations

import csv
import itertools

import numpy as np
import pytest
import torch

from data_fixtures import (
    REPO,
    make_librispeech_fixture,
    make_mini_librispeech_subset,
    require_dev_clean_2,
    write_mfa_csv,
)
from surprisal_cc.data import load_mfa_labels, prepare_mini_librispeech
from surprisal_cc.data.mfa import read_mfa_csv, write_alignment_csv
from surprisal_cc.alignment.label_eval import lexicon_vs_mfa_per, read_boundary_silences, silence_precision_recall
from surprisal_cc.alignment.realign import (
    RealignedUtterance,
    align_words,
    realign_corpus,
    realign_utterance,
    silence_statistics,
)
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.training.labels import label_encoder_for, phone_set
from surprisal_cc.decoding.viterbi import AlignmentError, ctc_viterbi_graph, ctc_viterbi_optional

BLANK, SIL = 0, 1


def align_one_pronunciation(log_probs, words, blank, sil):
    """:func:`align_words` with one pronunciation per word (each word: its phone ids)."""
    return align_words(log_probs, [[word] for word in words], blank, sil)


def collapse(path, blank=BLANK):
    out, prev = [], None
    for p in path:
        if p != prev and p != blank:
            out.append(int(p))
        prev = p
    return tuple(out)


def all_frame_paths(lp: np.ndarray):
    """Every frame path of (T, V) log-probs with its score and its CTC label sequence."""
    T, V = lp.shape
    paths = np.array(list(itertools.product(range(V), repeat=T)))
    scores = lp[np.arange(T), paths].sum(axis=1)
    return [(collapse(p), s) for p, s in zip(paths, scores)]


def variants(tokens, optional):
    """Every label sequence obtained by dropping some of the optional tokens."""
    idx = [i for i, o in enumerate(optional) if o]
    for drop in itertools.product([False, True], repeat=len(idx)):
        dropped = {i for i, d in zip(idx, drop) if d}
        yield tuple(t for i, t in enumerate(tokens) if i not in dropped)


def brute_force_best(lp, tokens, optional):
    """(score, labels) of the best frame path whose labels are a variant of ``tokens``; None if none fits."""
    allowed = set(variants(tokens, optional))
    feasible = [(score, seq) for seq, score in all_frame_paths(lp) if seq in allowed]
    return max(feasible) if feasible else None


def viterbi_reference(lp: np.ndarray, labels) -> float:
    """Plain CTC Viterbi score of one fixed label sequence (loops, textbook recursion)."""
    T = lp.shape[0]
    ext = [BLANK]
    for label in labels:
        ext += [label, BLANK]
    S = len(ext)
    alpha = np.full(S, -np.inf)
    alpha[0] = lp[0, ext[0]]
    if S > 1:
        alpha[1] = lp[0, ext[1]]
    for t in range(1, T):
        new = np.full(S, -np.inf)
        for s in range(S):
            best = alpha[s]
            if s >= 1:
                best = max(best, alpha[s - 1])
            if s >= 2 and ext[s] != BLANK and ext[s] != ext[s - 2]:
                best = max(best, alpha[s - 2])
            new[s] = best + lp[t, ext[s]]
        alpha = new
    return float(max(alpha[-1], alpha[-2] if S > 1 else -np.inf))


def word_tokens(words):
    tokens, optional = [SIL], [True]
    for word in words:
        tokens += list(word) + [SIL]
        optional += [False] * len(word) + [True]
    return tokens, optional


def random_log_probs(gen, T, V, scale=3.0):
    return (torch.randn(T, V, generator=gen, dtype=torch.float64) * scale).log_softmax(-1).numpy()


def test_enumeration_is_ctc():
    """The brute-force path enumeration sums to torch's CTC likelihood (so its max is the Viterbi score)."""
    gen = torch.Generator().manual_seed(0)
    lp = random_log_probs(gen, 6, 4)
    paths = all_frame_paths(lp)
    for labels in [(2, 3), (2, 2), (1, 2, 1), (3,)]:
        total = np.logaddexp.reduce([s for seq, s in paths if seq == labels])
        nll = torch.nn.functional.ctc_loss(torch.from_numpy(lp)[:, None], torch.tensor([labels]), torch.tensor([6]),
                                           torch.tensor([len(labels)]), blank=BLANK, reduction="sum")
        assert total == pytest.approx(-float(nll), abs=1e-9)
        assert max(s for seq, s in paths if seq == labels) == pytest.approx(viterbi_reference(lp, labels), abs=1e-12)


WORD_CASES = [[[2]], [[2], [3]], [[2], [2]], [[2, 3], [3]], [[3, 2], [2, 3]], [[2], [2], [2]], [[1, 2]]]


@pytest.mark.parametrize("case", range(len(WORD_CASES)))
def test_matches_brute_force_on_tiny_inputs(case):
    """Best score and label sequence equal the exhaustive maximum over every frame path and sil choice."""
    words = WORD_CASES[case]
    if any(w[0] == SIL or w[-1] == SIL for w in words):
        with pytest.raises(ValueError, match="sil"):
            align_one_pronunciation(np.zeros((3, 4)), words, BLANK, SIL)
        return
    tokens, optional = word_tokens(words)
    gen = torch.Generator().manual_seed(case)
    for T in range(1, 8):
        for scale in (0.5, 3.0):
            lp = random_log_probs(gen, T, 4, scale)
            best = brute_force_best(lp, tokens, optional)
            if best is None:
                with pytest.raises(AlignmentError):
                    align_one_pronunciation(lp, words, BLANK, SIL)
                continue
            best_score, best_seq = best
            ali = align_one_pronunciation(lp, words, BLANK, SIL)
            assert ali.score == pytest.approx(best_score, abs=1e-9)
            assert tuple(ali.labels) == best_seq
            assert ali.silences == [b for b in range(len(words) + 1) if ali.kept[np.flatnonzero(optional)[b]]]


def test_matches_reference_dp_over_every_silence_choice():
    """Medium sizes: the score is the best plain-CTC Viterbi score over all 2^(words+1) sil choices."""
    gen = torch.Generator().manual_seed(1)
    rng = np.random.default_rng(1)
    for _ in range(12):
        V = int(rng.integers(3, 7))
        words = [list(rng.integers(2, V, size=rng.integers(1, 4))) for _ in range(int(rng.integers(1, 5)))]
        tokens, optional = word_tokens(words)
        T = int(rng.integers(len(tokens), 3 * len(tokens) + 2))
        lp = random_log_probs(gen, T, V, scale=float(rng.uniform(0.5, 4)))
        scores = {seq: viterbi_reference(lp, seq) for seq in variants(tokens, optional)}
        ali = align_one_pronunciation(lp, words, BLANK, SIL)
        assert ali.score == pytest.approx(max(scores.values()), abs=1e-9)
        assert scores[tuple(ali.labels)] == pytest.approx(ali.score, abs=1e-9)
        # the frame path really is a CTC path of the chosen labels with that score
        frames = [BLANK if k < 0 else tokens[k] for k in ali.frame_tokens]
        assert collapse(frames) == tuple(ali.labels)
        assert lp[np.arange(T), frames].sum() == pytest.approx(ali.score, abs=1e-9)


def test_general_optional_tokens_match_brute_force():
    gen = torch.Generator().manual_seed(2)
    rng = np.random.default_rng(2)
    for _ in range(25):
        n = int(rng.integers(1, 5))
        tokens = [int(x) for x in rng.integers(1, 4, size=n)]
        optional = [bool(x) for x in rng.random(n) < 0.5]  # runs of optional tokens included
        T = int(rng.integers(1, 7))
        lp = random_log_probs(gen, T, 4)
        best = brute_force_best(lp, tokens, optional)
        if best is None:
            with pytest.raises(AlignmentError):
                ctc_viterbi_optional(lp, tokens, optional, BLANK)
            continue
        best_score, best_seq = best
        ali = ctc_viterbi_optional(lp, tokens, optional, BLANK)
        assert ali.score == pytest.approx(best_score, abs=1e-9) and tuple(ali.labels) == best_seq


def test_bad_tokens_and_graphs_are_rejected():
    with pytest.raises(ValueError, match="non-blank"):
        ctc_viterbi_optional(np.zeros((4, 3)), [0, 2], [False, False], BLANK)
    with pytest.raises(ValueError, match="flags"):
        ctc_viterbi_optional(np.zeros((4, 3)), [1, 2], [False], BLANK)
    with pytest.raises(ValueError, match="earlier tokens"):  # not topological
        ctc_viterbi_graph(np.zeros((4, 3)), [1, 2], [[-1], [1]], [1], BLANK)
    with pytest.raises(ValueError, match="pronunciation 1"):
        align_words(np.zeros((4, 3)), [[[2], [SIL, 2]]], BLANK, SIL)


def pronunciation_choices(words):
    """Every (label sequence, pronunciation indices, sil boundaries) that ``words`` (alternatives per word) allow."""
    for choice in itertools.product(*[range(len(w)) for w in words]):
        for sils in itertools.product([False, True], repeat=len(words) + 1):
            seq = [SIL] if sils[0] else []
            for i, v in enumerate(choice):
                seq += list(words[i][v]) + ([SIL] if sils[i + 1] else [])
            yield tuple(seq), list(choice), [b for b, on in enumerate(sils) if on]


def test_pronunciation_choice_is_the_best_over_every_combination():
    """align_words: the score is the best plain-CTC Viterbi score over every pronunciation and sil
    choice, and the chosen labels, pronunciations and pauses are one that reaches it."""
    gen = torch.Generator().manual_seed(3)
    rng = np.random.default_rng(3)
    for _ in range(20):
        V = int(rng.integers(3, 7))
        words = [[list(rng.integers(2, V, size=rng.integers(1, 4))) for _ in range(int(rng.integers(1, 4)))]
                 for _ in range(int(rng.integers(1, 4)))]
        longest = sum(max(len(p) for p in w) for w in words) + len(words) + 1
        T = int(rng.integers(max(len(w[0]) for w in words), 2 * longest + 2))
        lp = random_log_probs(gen, T, V, scale=float(rng.uniform(0.5, 4)))
        choices = list(pronunciation_choices(words))
        scores = {seq: viterbi_reference(lp, seq) for seq, _, _ in choices}
        best = max(scores.values())
        if not np.isfinite(best):
            with pytest.raises(AlignmentError):
                align_words(lp, words, BLANK, SIL)
            continue
        ali = align_words(lp, words, BLANK, SIL)
        assert ali.score == pytest.approx(best, abs=1e-9)
        assert (tuple(ali.labels), ali.pronunciations, ali.silences) in [tuple([seq, c, b]) for seq, c, b in choices]
        assert scores[tuple(ali.labels)] == pytest.approx(ali.score, abs=1e-9)
        # the frame path is a CTC path of the chosen labels with that score
        label_of = dict(zip(np.flatnonzero(ali.kept).tolist(), ali.labels))
        frames = [BLANK if k < 0 else label_of[int(k)] for k in ali.frame_tokens]
        assert collapse(frames) == tuple(ali.labels)
        assert lp[np.arange(T), frames].sum() == pytest.approx(ali.score, abs=1e-9)


def test_a_clearly_heard_second_pronunciation_is_chosen():
    # "the" as DH AH (ids 2 3) or DH IY (2 4), heard as DH IY
    lp = peaked([2, 4, 4, 0, 0])
    ali = align_words(lp, [[[2, 3], [2, 4]]], BLANK, SIL)
    assert ali.labels == [2, 4] and ali.pronunciations == [1] and ali.silences == []
    forced = align_one_pronunciation(lp, [[2, 3]], BLANK, SIL)  # one pronunciation: no choice
    assert [k for k in forced.labels if k != SIL] == [2, 3] and forced.pronunciations == [0]


def peaked(frames, V=5, p=0.9):
    """(T, V) log-probs where frame t puts probability p on class frames[t]."""
    lp = np.full((len(frames), V), np.log((1 - p) / (V - 1)))
    lp[np.arange(len(frames)), frames] = np.log(p)
    return lp


def test_pause_with_high_sil_posterior_gets_sil():
    words = [[2, 3], [4]]
    # word 1, a pause the model hears as sil, word 2
    ali = align_one_pronunciation(peaked([2, 0, 3, 0, 1, 1, 1, 0, 4, 0]), words, BLANK, SIL)
    assert ali.labels == [2, 3, SIL, 4] and ali.silences == [1]
    # the same pause heard as blank: no sil
    ali = align_one_pronunciation(peaked([2, 0, 3, 0, 0, 0, 0, 0, 4, 0]), words, BLANK, SIL)
    assert ali.labels == [2, 3, 4] and ali.silences == []
    # silence at both ends
    ali = align_one_pronunciation(peaked([1, 1, 2, 3, 0, 4, 1, 1]), words, BLANK, SIL)
    assert ali.labels == [SIL, 2, 3, 4, SIL] and ali.silences == [0, 2]


def test_weak_sil_evidence_is_not_enough():
    """A sil only a little above chance in a blank stretch costs more than it gains: left out."""
    lp = peaked([2, 0, 0, 0, 0, 3, 0])
    lp[2:4, SIL] = np.log(0.2)
    lp[2:4, BLANK] = np.log(0.75)
    assert align_one_pronunciation(lp, [[2], [3]], BLANK, SIL).silences == []
    lp[2:4, SIL], lp[2:4, BLANK] = np.log(0.75), np.log(0.2)
    assert align_one_pronunciation(lp, [[2], [3]], BLANK, SIL).silences == [1]


def test_repeated_phone_across_a_left_out_sil_needs_a_blank():
    # "S | S": without a blank or a sil between them the two S cannot both be emitted
    lp = peaked([2, 2, 2])
    with pytest.raises(AlignmentError):
        align_one_pronunciation(lp[:1], [[2], [2]], BLANK, SIL)
    ali = align_one_pronunciation(peaked([2, 1, 2]), [[2], [2]], BLANK, SIL)
    assert ali.labels == [2, SIL, 2]
    ali = align_one_pronunciation(peaked([2, 0, 2]), [[2], [2]], BLANK, SIL)
    assert ali.labels == [2, 2]


def test_segments_cover_the_utterance():
    gen = torch.Generator().manual_seed(3)
    lp = random_log_probs(gen, 60, 8)
    ali = align_one_pronunciation(lp, [[2, 3], [4, 5, 6], [7]], BLANK, SIL)
    seg = ali.segments()
    assert seg.shape == (len(ali.labels), 2)
    assert seg[0, 0] == 0 and seg[-1, 1] == 60
    assert (seg[1:, 0] == seg[:-1, 1]).all() and (seg[:, 1] > seg[:, 0]).all()
    kept = np.flatnonzero(ali.kept)
    for (start, end), k in zip(seg, kept):  # every label emits inside its span
        assert k in ali.frame_tokens[start:end]


def test_phone_times_start_at_the_first_phone_not_at_the_audio():
    """A hypothesis that does not begin with sil: its first phone starts where it is emitted, not at 0 s."""
    from surprisal_cc.decoding.timestamps import phone_frames, phone_segments

    lp = np.log(np.full((6, 4), 0.01))  # ids: 0 blank, 1 sil, 2 and 3 phones
    for t, k in enumerate([0, 0, 2, 2, 0, 3]):
        lp[t, k] = np.log(0.97)
    assert phone_frames(lp, [2, 3], blank=0).tolist() == [[2, 5], [5, 6]]
    assert phone_segments(lp, [2, 3], ["<blank>", "sil", "AH", "B"], 0, 0.02)[0] == ("AH", 0.04, 0.1)


def test_long_utterance_and_torch_input():
    gen = torch.Generator().manual_seed(4)
    words = [[int(x) for x in torch.randint(2, 42, (4,), generator=gen)] for _ in range(100)]
    lp = torch.randn(1500, 42, generator=gen).log_softmax(-1)
    ali = align_one_pronunciation(lp, words, BLANK, SIL)
    phones = [p for p in ali.labels if p != SIL]
    assert phones == [p for w in words for p in w]
    assert len(ali.frame_tokens) == 1500


# --------------------------------------------------------------------------- corpus labels
ENCODER = label_encoder_for(phone_set("librispeech"))


def test_realign_utterance_and_fallback():
    words, word_phones = ["THE", "CAT"], [["DH", "AH"], ["K", "AE", "T"]]
    ids = {p: ENCODER.lab2ind[p] for p in ["DH", "AH", "K", "AE", "T", "sil"]}
    frames = [ids["DH"], ids["AH"], ids["sil"], ids["sil"], ids["K"], ids["AE"], ids["T"], 0]
    lp = peaked(frames, V=42)
    utt = realign_utterance(lp, "1-2-0000", "/x/train-clean-5/1/2/1-2-0000.flac", words, word_phones, ENCODER, 0)
    assert utt.phones == ["DH", "AH", "sil", "K", "AE", "T"] and utt.silences == [1] and not utt.fallback
    short = realign_utterance(lp[:3], "u", "/x/u.flac", words, word_phones, ENCODER, 0)
    assert short.fallback and short.phones == ["sil", "DH", "AH", "K", "AE", "T", "sil"]
    assert short.silences == [0, 2] and short.segments.shape == (7, 2)


def synthetic_utterance(utt_id, subset, words, word_phones, silences, frames_per_label=3):
    phones = []
    for b in range(len(words) + 1):
        if b in silences:
            phones.append("sil")
        if b < len(words):
            phones += word_phones[b]
    starts = np.arange(len(phones)) * frames_per_label
    segments = np.stack([starts, starts + frames_per_label], 1)
    spk, chapter, _ = utt_id.split("-")
    return RealignedUtterance(utt_id, f"/data/{subset}/{spk}/{chapter}/{utt_id}.flac", words,
                              [len(p) for p in word_phones], phones, sorted(silences), segments,
                              int(segments[-1, 1]))


def test_csv_round_trip_and_silence_scores(tmp_path):
    utts = [
        synthetic_utterance("1-2-0000", "train-clean-5", ["THE", "CAT"], [["DH", "AH"], ["K", "AE", "T"]], {0, 1, 2}),
        synthetic_utterance("1-2-0001", "train-clean-5", ["DON'T", "STOP", "NOW"],
                            [["D", "OW", "N", "T"], ["S", "T", "AA", "P"], ["N", "AW"]], {2}),
    ]
    path = write_alignment_csv(tmp_path / "labels.csv", utts)
    assert read_mfa_csv(path) == {u.id: u.phones for u in utts}
    rows = list(csv.DictReader(open(path, newline="")))
    assert rows[0]["path"] == "train-clean-5/1/2/1-2-0000.flac"
    assert rows[0]["words"] == "['', 'the', '', 'cat', '']"
    assert rows[0]["phn_starts"].split()[:3] == ["0", "960", "1920"]
    assert rows[1]["wrd_starts"] == "0 3840 7680 8640" and rows[1]["wrd_ends"] == "3840 7680 8640 10560"
    hyp = read_boundary_silences(path)
    assert hyp == {"1-2-0000": (2, {0, 1, 2}), "1-2-0001": (3, {2})}
    ref = {"1-2-0000": (2, {0, 2}), "1-2-0001": (3, {1, 2})}
    scores = silence_precision_recall(hyp, ref)
    assert (scores["true_positives"], scores["false_positives"], scores["false_negatives"]) == (1, 1, 1)
    assert scores["boundaries"] == 3
    everything = silence_precision_recall(hyp, ref, interior_only=False)
    assert everything["true_positives"] == 3 and everything["boundaries"] == 7
    stats = silence_statistics(utts)
    assert stats["interior_sil_per_utterance"] == 1.0 and stats["interior_boundaries_with_sil"] == pytest.approx(2 / 3)


def test_realigned_csv_feeds_the_data_preparation(tmp_path):
    """Per-split label files: realigned train/valid labels, the default MFA file for test."""
    speakers = {"11": "F", "12": "M", "13": "F", "14": "M"}
    root = make_librispeech_fixture(
        tmp_path / "data",
        {"train-clean-5": {f"{s}-1": ["THE CAT", "STOP"] for s in speakers}, "dev-clean-2": {"21-5": ["ADD"]}},
        genders={**speakers, "21": "M"})
    write_mfa_csv(root / "phone_labels" / "dev-clean-2_mfa.csv", "dev-clean-2", {"21-5-0000": "sil AE D sil"})
    utts = [synthetic_utterance(f"{s}-1-0000", "train-clean-5", ["THE", "CAT"], [["DH", "AH"], ["K", "AE", "T"]],
                                {1}) for s in speakers]
    utts += [synthetic_utterance(f"{s}-1-0001", "train-clean-5", ["STOP"], [["S", "T", "AA", "P"]], {0, 1})
             for s in speakers]
    labels = write_alignment_csv(tmp_path / "realigned.csv", utts)
    out = prepare_mini_librispeech(root, tmp_path / "prep", labels="mfa", valid_speakers=1,
                                   mfa_labels={"train": labels, "valid": labels, "test": None})
    rows = {r["ID"]: r["phn"] for split in ("train", "valid") for r in csv.DictReader(open(out[split]))}
    assert rows["11-1-0000"] == "DH AH sil K AE T" and rows["12-1-0001"] == "sil S T AA P sil"
    assert next(csv.DictReader(open(out["test"])))["phn"] == "sil AE D sil"


def test_lexicon_vs_mfa_per_scores_the_lexicon_labels_of_a_subset(tmp_path):
    """The lexicon has no pause between words, MFA has one: a deletion, which ``ignore_sil`` leaves out;
    an utterance MFA lacks is named."""
    from surprisal_cc.data import DataPreparationError

    root = make_librispeech_fixture(tmp_path / "data", {"dev-clean-2": {"21-5": ["THE CAT", "ZZXQ ADD"]}})
    subset = root / "LibriSpeech" / "dev-clean-2"
    mfa = write_mfa_csv(root / "phone_labels" / "dev-clean-2_mfa.csv", "dev-clean-2",
                        {"21-5-0000": "sil DH AH sil K AE T sil", "21-5-0001": "sil spn AE D sil"})
    scores = lexicon_vs_mfa_per(subset, mfa)
    assert scores == {"per": pytest.approx(100 / 13), "substitutions": 0, "deletions": 1, "insertions": 0,
                      "ref_phones": 13, "utterances": 2, "oov_tokens": 1}
    assert lexicon_vs_mfa_per(subset, mfa, ignore_sil=True)["per"] == 0.0
    partial = write_mfa_csv(tmp_path / "partial.csv", "dev-clean-2", {"21-5-0000": "sil DH AH K AE T sil"})
    with pytest.raises(DataPreparationError, match="lacks 1 utterance"):
        lexicon_vs_mfa_per(subset, partial)


@pytest.mark.integration
def test_mfa_export_silences_match_its_phone_labels():
    """On the real dev-clean-2 export, the ``words`` column marks the same pauses as ``phonemes_39``."""
    mfa_csv = require_dev_clean_2() / "phone_labels" / "dev-clean-2_mfa.csv"
    boundaries, phones = read_boundary_silences(mfa_csv), load_mfa_labels(mfa_csv)
    assert len(boundaries) == len(phones) == 1089
    for utt, (n_words, silences) in boundaries.items():
        assert len(silences) == phones[utt].count("sil")
    assert silence_precision_recall(boundaries, boundaries)["recall"] == 1.0


@pytest.mark.integration
def test_realign_script_on_a_run_folder(tmp_path, monkeypatch):
    """A run folder with a (tiny, untrained) checkpoint: the script realigns it and the CSV prepares data."""
    from surprisal_cc.training.run_settings import create_experiment_directory, load_hparams

    shared = require_dev_clean_2()
    make_mini_librispeech_subset(shared / "LibriSpeech" / "dev-clean-2", tmp_path / "corpus", train_speakers=3,
                                 test_speakers=1, utterances_per_speaker=2,
                                 mfa_csv=shared / "phone_labels" / "dev-clean-2_mfa.csv")
    run = tmp_path / "run"
    hparams_file = REPO / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml"
    overrides = "\n".join(f"{k}: {v}" for k, v in {
        "data_folder": tmp_path / "corpus", "experiment_root": tmp_path / "exp", "output_folder": run,
        "valid_speakers": 1, "input_features": "fbank", "controller": "big_only", "hidden_size": 8}.items())
    hparams = load_hparams(str(hparams_file), overrides)
    create_experiment_directory(str(run), str(hparams_file), overrides)
    hparams["checkpointer"].save_checkpoint(meta={"PER": 90.0})

    monkeypatch.syspath_prepend(str(REPO / "recipes" / "MiniLibriSpeech"))
    monkeypatch.chdir(REPO)
    import realign_labels

    out_csv = tmp_path / "realigned.csv"
    stats = realign_labels.main([str(run), str(out_csv), "--batch_size", "2"])
    assert stats["utterances"] == 6 and stats["fallbacks"] == 0
    labels = read_mfa_csv(out_csv)
    assert len(labels) == 6
    # the stand-in train-clean-5 is dev-clean-2 audio: the MFA export scores it
    stats = realign_labels.main([str(run), str(tmp_path / "test.csv"), "--split", "test"])
    assert stats["sil_vs_reference_interior"]["utterances"] == 2
    assert 0 <= stats["per_vs_reference_realigned"] <= 100
    # pauses heard in the audio: an untrained model inserts no sil itself, the audio adds some
    paused = realign_labels.main([str(run), str(tmp_path / "test_pauses.csv"), "--split", "test", "--pauses",
                                  "--min_pause_frames", "3"])
    assert paused["pauses"] == {"threshold": 0.25, "min_frames": 3}
    assert paused["interior_boundaries_with_sil"] >= stats["interior_boundaries_with_sil"]


@pytest.mark.integration
def test_realign_script_with_the_shipped_model(tmp_path, monkeypatch):
    """The shipped model realigns real dev-clean-2 audio: every utterance fits, the sil it places
    agree with the MFA labels, and the realigned labels are at least as close to them as the lexicon's."""
    shared = require_dev_clean_2()
    monkeypatch.syspath_prepend(str(REPO / "recipes" / "MiniLibriSpeech"))
    monkeypatch.chdir(REPO)
    import realign_labels

    shipped = "surprisal_cc/pretrained"

    corpus = shared / "LibriSpeech" / "dev-clean-2"
    stats = realign_labels.main([shipped, str(tmp_path / "dev.csv"), "--corpus", str(corpus), "--limit", "12",
                                 "--batch_size", "4"])
    assert stats["utterances"] == 12 and stats["fallbacks"] == 0
    assert stats["checkpoint"] == shipped and stats["splits"] == [str(corpus)]
    assert stats["sil_vs_reference_all"]["utterances"] == 12 and stats["sil_vs_reference_all"]["f1"] >= 0.8
    assert stats["per_vs_reference_realigned"] <= stats["per_vs_reference_lexicon"]
    assert len(read_mfa_csv(tmp_path / "dev.csv")) == 12
    # every CMUdict pronunciation to choose from, as MFA has: closer to its labels still
    chosen = realign_labels.main([shipped, str(tmp_path / "dev_all.csv"), "--corpus", str(corpus), "--limit",
                                  "12", "--batch_size", "4", "--all_pronunciations"])
    assert chosen["all_pronunciations"] and 0 < chosen["other_pronunciations"] < 0.5
    assert chosen["per_vs_reference_realigned"] <= stats["per_vs_reference_realigned"]
    agree = chosen["pronunciations_vs_reference"]
    assert agree["words"] > 0 and agree["agreement"] >= agree["agreement_first"]
    assert stats["pronunciations_vs_reference"]["agreement"] == agree["agreement_first"]  # first ones only
    with pytest.raises(SystemExit):  # an exported model needs --corpus
        realign_labels.main([shipped, str(tmp_path / "x.csv")])


def test_silent_frames_follow_the_recording_level():
    """The same utterance 20 dB louder (log-mel + log(100)) or with a noise floor has the same pauses."""
    from surprisal_cc.alignment.realign import silent_frames

    rng = np.random.default_rng(0)
    speech = rng.normal(2.0, 0.5, size=(40, 8))
    speech[10:18] = rng.normal(-8.0, 0.3, size=(8, 8))  # a pause
    assert silent_frames(speech).tolist() == silent_frames(speech + np.log(100.0)).tolist()
    assert silent_frames(speech)[10:18].all() and not silent_frames(speech)[20:].any()
    noisy = np.logaddexp(speech, -4.0)  # a noise floor 6 nepers above the pause, far below the speech
    assert silent_frames(noisy).tolist() == silent_frames(speech).tolist()


def test_doctests():
    import doctest

    from surprisal_cc.alignment import label_eval
    from surprisal_cc.alignment import realign

    assert doctest.testmod(realign).failed == 0 and doctest.testmod(label_eval).failed == 0


def test_realigning_with_a_model_without_sil_is_a_configuration_error(monkeypatch):
    import types

    from surprisal_cc.inference import ConditionalASR

    monkeypatch.setattr(ConditionalASR, "from_pretrained", lambda *a, **k: types.SimpleNamespace(labels=["<blank>", "AH"]))
    with pytest.raises(ConfigurationError, match="no 'sil' label"):
        next(realign_corpus("models/chars", "corpus"))


@pytest.mark.parametrize("controller,sampled", [("random", True), ("surprisal", False)])
def test_a_run_routed_by_chance_is_realigned_with_drawn_routing(tmp_path, controller, sampled):
    """Thresholding p_big = 0.5 would send every frame to the small network: such a run stays sampled."""
    from surprisal_cc.model.nnet import unwrap
    from surprisal_cc.alignment.realign import load_run
    from surprisal_cc.training.run_settings import create_experiment_directory, load_hparams

    run = tmp_path / "run"
    hparams_file = REPO / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml"
    overrides = "\n".join(f"{k}: {v}" for k, v in {
        "data_folder": tmp_path, "experiment_root": tmp_path / "exp", "output_folder": run,
        "controller": controller, "hidden_size": 8}.items())
    hparams = load_hparams(str(hparams_file), overrides)
    create_experiment_directory(str(run), str(hparams_file), overrides)
    hparams["checkpointer"].save_checkpoint(meta={"PER": 90.0})
    _, brain, _ = load_run(run)
    assert unwrap(brain.modules.encoder).test_stochastic is sampled


def test_an_utterance_without_frames_is_named_not_a_traceback():
    """Audio shorter than one analysis window has no frame to align: one line naming the file."""
    from speechbrain.dataio.encoder import CTCTextEncoder

    from surprisal_cc.data.errors import DataPreparationError
    from surprisal_cc.alignment.realign import realign_utterance

    enc = CTCTextEncoder()
    enc.insert_blank(index=0)
    enc.update_from_iterable([["sil", "AH", "B"]], sequence_input=True)
    enc.expect_len(4)
    with pytest.raises(DataPreparationError, match=r"u1.flac \(utterance u1\): no frames to align \(shorter than "
                                                   r"the model's one 25 ms window\)"):
        realign_utterance(np.zeros((0, 4)), "u1", "u1.flac", ["a"], [["AH"]], enc, blank=0)
    with pytest.raises(DataPreparationError, match=r"one 50 ms window\): leave it out of the corpus$"):
        realign_utterance(np.zeros((0, 4)), "u1", "u1.flac", ["a"], [["AH"]], enc, blank=0, window_ms=50.0)


def test_realigning_audio_too_short_for_the_models_window_names_every_such_file_first(tmp_path):
    """A model with a 50 ms window: every file too short for it (at its own rate) is named in one error before
    any batch; audio of the model's window is realigned, shortest first by duration whatever the rate (a
    44.1 kHz file of more samples is shorter than a 16 kHz one), and ``limit`` keeps the shortest."""
    import soundfile as sf

    from surprisal_cc.data.errors import BadAudioError
    from surprisal_cc.inference import ConditionalASR

    torch.manual_seed(0)
    plain = ConditionalASR.untrained(phone_set("librispeech"), controller="big_only")
    model = ConditionalASR({**plain.config, "features": {**plain.config["features"], "frame_length_ms": 50.0}},
                           plain.encoder).save(tmp_path / "model")
    make_librispeech_fixture(tmp_path / "corpus", {"dev-clean-2": {"1-2": ["A", "A", "A"]}})
    subset = tmp_path / "corpus" / "LibriSpeech" / "dev-clean-2"
    flacs = [subset / "1" / "2" / f"1-2-{i:04d}.flac" for i in range(3)]
    noise = 0.1 * np.random.default_rng(0).uniform(-1, 1, 2205).astype(np.float32)
    sf.write(flacs[0], np.zeros(600, dtype=np.float32), 16000)  # 37.5 ms
    sf.write(flacs[1], noise[:900], 16000)  # 56.25 ms: usable
    sf.write(flacs[2], noise[:2000], 44100)  # 45.35 ms
    with pytest.raises(BadAudioError) as err:
        next(realign_corpus(model, subset, batch_size=1))
    minimum = "the model's shortest usable audio is 50 ms, 800 samples at 16000 Hz: one frame"
    assert str(err.value).splitlines() == [f"{flacs[0]}: too short (37.5 ms; {minimum})",
                                           f"{flacs[2]}: too short (45.35 ms; {minimum})",
                                           f"2 of 3 files are too short for one frame of the model: leave them out "
                                           f"of {subset}"]
    sf.write(flacs[0], noise[:800], 16000)  # one window
    sf.write(flacs[2], noise, 44100)  # 50 ms
    utts = list(realign_corpus(model, subset))  # 50 ms, 50 ms (2205 samples), 56.25 ms
    assert [u.wav for u in utts] == [str(flacs[0]), str(flacs[2]), str(flacs[1])]
    assert utts[0].num_frames == 1 and utts[0].words == ["A"]
    assert [u.wav for u in realign_corpus(model, subset, limit=2)] == [str(flacs[0]), str(flacs[2])]
