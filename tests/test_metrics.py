"""Tests for surprisal_cc.decoding.metrics and label_eval.label_error_rate: corpus-level rates checked against jiwer
(word error rates through :func:`word_error_rate`, the tests' own helper)."""

from __future__ import annotations

import random
from typing import Sequence

import jiwer
import pytest

from surprisal_cc.model.ctc import chain_predecessors, pronunciation_graph
from surprisal_cc.alignment.label_eval import label_error_rate
from surprisal_cc.decoding.metrics import ErrorRate, closest_path


def word_error_rate(
    refs: Sequence[Sequence[str] | str], hyps: Sequence[Sequence[str] | str]
) -> float:
    """Corpus-level WER in percent through :class:`ErrorRate`; strings are split on whitespace.

    >>> word_error_rate(["the cat sat", "hi"], ["the cat sat down", "hi"])
    25.0
    """
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    split = lambda xs: [x.split() if isinstance(x, str) else list(x) for x in xs]  # noqa: E731
    er = ErrorRate()
    er.append([str(i) for i in range(len(refs))], split(hyps), split(refs))
    return float(er.summarize()["error_rate"])


PHONES = ["aa", "ae", "b", "d", "iy", "k", "s", "t", "sil"]


def random_corpus(rng: random.Random, n: int) -> tuple[list[list[str]], list[list[str]]]:
    refs, hyps = [], []
    for _ in range(n):
        ref = [rng.choice(PHONES) for _ in range(rng.randint(1, 12))]
        hyp = []
        for p in ref:  # noisy copy: substitutions, deletions, insertions
            r = rng.random()
            if r < 0.15:
                hyp.append(rng.choice(PHONES))
            elif r < 0.25:
                pass
            else:
                hyp.append(p)
            if rng.random() < 0.1:
                hyp.append(rng.choice(PHONES))
        if rng.random() < 0.1:
            hyp = [rng.choice(PHONES) for _ in range(rng.randint(0, 15))]
        refs.append(ref)
        hyps.append(hyp)
    return refs, hyps


def corpus_per(refs: list[list[str]], hyps: list[list[str]], merge_sil: bool = True) -> float:
    """:func:`label_error_rate`'s PER of parallel lists of label sequences."""
    ids = [f"u{i}" for i in range(len(refs))]
    return label_error_rate(dict(zip(ids, hyps)), dict(zip(ids, refs)), merge_sil=merge_sil)["per"]


def test_corpus_counts_match_jiwer() -> None:
    rng = random.Random(0)
    for _ in range(5):
        refs, hyps = random_corpus(rng, 40)
        er = ErrorRate()
        er.append([f"u{i}" for i in range(len(refs))], hyps, refs)
        s = er.summarize()
        out = jiwer.process_words([" ".join(r) for r in refs], [" ".join(h) for h in hyps])
        n_ref = sum(len(r) for r in refs)
        edits = out.substitutions + out.deletions + out.insertions
        assert s["num_ref_tokens"] == n_ref == out.hits + out.substitutions + out.deletions
        assert s["num_utterances"] == len(refs)
        # total edits = summed minimum edit distances (S/D/I split may tie-break differently)
        assert s["substitutions"] + s["deletions"] + s["insertions"] == edits
        assert s["insertions"] - s["deletions"] == out.insertions - out.deletions
        assert s["error_rate"] == pytest.approx(100 * out.wer)
        assert corpus_per(refs, hyps, merge_sil=False) == pytest.approx(100 * out.wer)
        ids = [f"u{i}" for i in range(len(refs))]
        counts = label_error_rate(dict(zip(ids, hyps)), dict(zip(ids, refs)), merge_sil=False)
        assert counts["ref_phones"] == n_ref and counts["utterances"] == len(refs)
        assert counts["substitutions"] + counts["deletions"] + counts["insertions"] == edits


def test_accumulates_over_batches() -> None:
    rng = random.Random(1)
    refs, hyps = random_corpus(rng, 30)
    er = ErrorRate()
    for i in range(0, 30, 7):
        er.append([str(j) for j in range(i, min(i + 7, 30))], hyps[i : i + 7], refs[i : i + 7])
    assert len(er) == 30
    assert er.summarize()["error_rate"] == pytest.approx(corpus_per(refs, hyps, merge_sil=False))


def test_corpus_level_not_mean_of_utterances() -> None:
    # utt 1: 1 ref token, 1 error (100 %); utt 2: 9 ref tokens, 0 errors (0 %)
    refs = [["a"], list("bcdefghij")]
    hyps = [["z"], list("bcdefghij")]
    per = corpus_per(refs, hyps, merge_sil=False)
    assert per == pytest.approx(10.0)  # 1 / 10, corpus level
    mean_of_rates = (100.0 + 0.0) / 2
    assert per != pytest.approx(mean_of_rates)


def test_no_truncation_over_100_percent() -> None:
    refs = [["a", "b"]]
    hyps = [["a", "b"] + ["x"] * 6]
    er = ErrorRate()
    er.append(["u"], hyps, refs)
    s = er.summarize()
    assert s["insertions"] == 6 and s["substitutions"] == 0 and s["deletions"] == 0
    assert s["error_rate"] == pytest.approx(300.0)
    assert corpus_per([["a"]], [["b", "c", "d"]]) == pytest.approx(300.0)


def test_sil_merging() -> None:
    refs = [["sil", "a", "b", "sil"]]
    hyps = [["sil", "sil", "a", "b", "sil", "sil", "sil"]]
    assert corpus_per(refs, hyps, merge_sil=True) == 0.0
    assert corpus_per(refs, hyps, merge_sil=False) == pytest.approx(75.0)
    # ignore_sil: no sil on either side
    assert label_error_rate({"u": ["sil", "a", "sil", "b"]}, {"u": ["a", "b", "sil"]}, ignore_sil=True)["per"] == 0.0
    # merging applies to references too
    er = ErrorRate(merge_sil=True)
    er.append(["u"], [["sil", "a"]], [["sil", "sil", "a"]])
    assert er.summarize()["num_ref_tokens"] == 2 and er.summarize()["error_rate"] == 0.0


def test_word_error_rate_and_alignments(tmp_path) -> None:
    refs = ["the cat sat on the mat", "hello world"]
    hyps = ["the cat sat on mat", "hello big world"]
    out = jiwer.process_words(refs, hyps)
    assert word_error_rate(refs, hyps) == pytest.approx(100 * out.wer)
    assert word_error_rate([r.split() for r in refs], [h.split() for h in hyps]) == pytest.approx(
        100 * out.wer
    )
    er = ErrorRate()
    er.append(["utt1", "utt2"], [h.split() for h in hyps], [r.split() for r in refs])
    path = tmp_path / "wer.txt"
    er.write_alignments(path)
    text = path.read_text(encoding="utf-8")
    assert "utt1" in text and "utt2" in text and "WER" in text


def test_length_mismatch_raises() -> None:
    with pytest.raises(ValueError):
        ErrorRate().append(["a"], [["x"]], [["x"], ["y"]])
    with pytest.raises(ValueError):
        word_error_rate(["a"], [])
    with pytest.raises(ValueError, match="no utterance has both"):
        label_error_rate({}, {"u": ["a"]})
    # only the utterances on both sides are scored
    partial = label_error_rate({"u": ["a"], "v": ["b"]}, {"u": ["a"], "w": ["c"]})
    assert partial["utterances"] == 1 and partial["per"] == 0.0


def _edits(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance (plain dynamic programming)."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[-1]


def _paths(tokens, preds):
    """Every path of a token graph (brute force)."""
    def ending_at(code):
        if code == 1:
            return [[]]
        return [p + [tokens[code - 2]] for c in preds[code - 2] if c for p in ending_at(c)]
    return [p for c in preds[len(tokens)] if c for p in ending_at(c)]


def test_closest_path_is_the_nearest_of_all_paths() -> None:
    """Against brute force over every path of random pronunciation graphs (any word may take any
    of its pronunciations, sil fixed): the returned path is a path, and none is fewer edits away."""
    rng = random.Random(4)
    lexicon = {w: [[rng.choice(PHONES[:-1]) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 3))]
               for w in "abcdef"}
    checked = 0
    for _ in range(60):
        words = [rng.choice("abcdef") for _ in range(rng.randint(0, 4))]
        phones = ["sil"] + [p for w in words for p in rng.choice(lexicon[w]) + (["sil"] if rng.random() < 0.3 else [])]
        graph = pronunciation_graph(phones, words, lexicon.get)
        if graph is None:  # two pronunciations spell the same phones differently split: not a parse
            continue
        tokens, preds = graph
        hyp = [rng.choice(PHONES) for _ in range(rng.randint(0, 8))]
        path = closest_path(hyp, tokens, preds)
        every = _paths(tokens, preds)
        assert path in every
        assert _edits(path, hyp) == min(_edits(p, hyp) for p in every)
        checked += 1
    assert checked > 40


def test_closest_path_of_a_chain_is_the_chain_and_bad_graphs_are_named() -> None:
    assert closest_path(["a", "x"], ["a", "b", "c"], chain_predecessors(3)) == ["a", "b", "c"]
    assert closest_path([], [], chain_predecessors(0)) == []
    with pytest.raises(ValueError, match="one per token and one more"):
        closest_path(["a"], ["a", "b"], [[1], [2]])
    with pytest.raises(ValueError, match="token 1 .'b'. has predecessors"):
        closest_path(["a"], ["a", "b"], [[1], [3], [3]])
