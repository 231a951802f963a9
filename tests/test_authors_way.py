"""recipes/MiniLibriSpeech/authors_way.py: the authors' FLOPs and PER counting rules on made-up inputs
(no corpus, no model)."""
from __future__ import annotations

import numpy as np
import pytest

from data_fixtures import REPO


@pytest.fixture
def authors_way(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "recipes" / "MiniLibriSpeech"))
    import authors_way

    return authors_way


def test_sample_slicing_keeps_the_padded_frames_that_frame_slicing_drops(authors_way):
    rows = [[1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1]]  # 3, 2 and 6 real frames
    samples, frames = [48000, 32000, 96000], [3, 2, 6]
    by_samples = authors_way.authors_batch_flops(rows, samples, small=5.0, big=7.0)
    by_frames = authors_way.authors_batch_flops(rows, frames, small=5.0, big=7.0)
    assert by_samples == pytest.approx(5.0 + 2.0 * 9 / 18)  # every frame of the padded batch averaged
    assert by_frames == pytest.approx(5.0 + 2.0 * 9 / 11)  # real frames only: the same 9 big ones
    assert authors_way.authors_batch_flops([[1, 1]], [1], small=5.0, big=7.0) == 7.0
    with pytest.raises(ValueError):
        authors_way.authors_batch_flops([[1]], [0], small=5.0, big=7.0)


def test_batch_means_are_weighted_by_batch_size_not_by_frames(authors_way):
    assert authors_way.batch_size_weighted_mean([7.0, 5.0, 6.0], [32, 32, 1]) == pytest.approx((224 + 160 + 6) / 65)
    # a long batch of few utterances counts less than its frames would make it
    assert authors_way.batch_size_weighted_mean([7.0, 5.0], [1, 3]) == 5.5
    with pytest.raises(ValueError):
        authors_way.batch_size_weighted_mean([], [])


def test_authors_flops_drops_long_utterances_and_averages_padding(authors_way):
    """Four utterances in one shuffled batch; the long one dropped; padding (p_big 0.2) routed small."""
    num_frames = lambda samples: samples // 100  # noqa: E731  (made-up frame rule)
    records = [{"samples": s, "frames": num_frames(s), "use_big": np.ones(num_frames(s), dtype=bool)}
               for s in (400, 200, 100, 600_000)]
    padded = [np.full(6000, 0.2, dtype=np.float32) for _ in records]
    result = authors_way.authors_flops(records, padded, keep=[0, 1, 2], seed=0,
                                       rows={"small-only": 5.0, "big-only": 7.0}, num_frames=num_frames, sampled=False)
    # 7 real frames of 3 x 4 averaged: m = 7/12
    assert result["real_fraction"] == pytest.approx(7 / 12)
    assert result["flops_per_frame"] == pytest.approx(5.0 + 2.0 * 7 / 12)
    assert result["real_frames_only"] == pytest.approx(7.0)
    assert result["batches"] == 1
    padded_big = [np.full(6000, 0.9, dtype=np.float32) for _ in records]
    result = authors_way.authors_flops(records, padded_big, keep=[0, 1, 2], seed=0,
                                       rows={"small-only": 5.0, "big-only": 7.0}, num_frames=num_frames, sampled=False)
    assert result["flops_per_frame"] == pytest.approx(7.0)


def test_shuffled_batches_are_fixed_by_the_seed(authors_way):
    assert authors_way.shuffled_batches(100, seed=4) == authors_way.shuffled_batches(100, seed=4)
    assert authors_way.shuffled_batches(100, seed=4) != authors_way.shuffled_batches(100, seed=5)
    assert [len(b) for b in authors_way.shuffled_batches(65, seed=0)] == [32, 32, 1]


def test_authors_per_cuts_hypotheses_and_averages_utterances(authors_way):
    refs = [["sil", "AH", "B", "sil"], ["K", "AE", "T"]]
    hyps = [["sil", "AH", "B", "sil", "Z", "Z", "Z"], ["K", "T"]]
    assert authors_way.authors_utterance_wer(refs[0], hyps[0]) == 0.0  # the insertions are cut off
    assert authors_way.authors_utterance_wer(refs[1], hyps[1]) == pytest.approx(1 / 3)
    assert authors_way.authors_per(refs, hyps) == pytest.approx(100 * (0 + 1 / 3) / 2)
    # corpus-level counts the 3 insertions and the deletion over all 7 reference phones
    assert authors_way.corpus_per(refs, hyps) == pytest.approx(100 * 4 / 7)
    assert authors_way.corpus_per(refs, hyps, cut=True) == pytest.approx(100 * 1 / 7)


def test_authors_per_cuts_before_merging_silence(authors_way):
    """The cut is at the raw reference's length, before repeated sil is merged in either."""
    ref = ["sil", "sil", "AH", "B"]  # 4 tokens; merged: sil AH B
    hyp = ["sil", "sil", "AH", "B", "K"]  # cut to 4: sil sil AH B -> sil AH B
    assert authors_way.authors_utterance_wer(ref, hyp) == 0.0
    assert authors_way.authors_utterance_wer(["AH"], []) == 1.0


def test_the_markdown_table_has_a_column_per_routing(authors_way):
    seeds = [{"seed": s, "flops_per_frame": 6.4e6 + s, "real_frames_only": 7.0e6, "real_fraction": 0.37, "batches": 35}
             for s in (0, 1)]
    entry = {"model": "surprisal_cc/pretrained", "dropped_by_authors_collate": ["u9"],
             "flops_table": {"small-only": 5.70e6, "big-only": 7.54e6},
             "a_real_frames": {"flops_per_frame": 7.07e6, "big_fraction": 0.74},
             "b_authors_way": {"flops_per_frame": 6.4e6, "shuffle_seed": 0, "real_fraction": 0.37, "by_seed": seeds,
                               "seeds_mean": 6.4e6, "seeds_min": 6.4e6, "seeds_max": 6.4e6 + 1,
                               "real_frames_only_batch_weighted": 7.0e6, "paper": 6.43e6,
                               "padded_routing": {"one_real_padded_batch": {"utterances": 32, "max_abs_p_big_diff": 0.0,
                                                                            "decision_flips": 0}}},
             "c_per": {"corpus_level": 27.2, "authors_way": 27.5, "per_utterance_mean_uncut": 27.6,
                       "corpus_level_cut": 27.1},
             "seconds": {"decoding": 600.0, "padded_pass": 300.0, "total": 900.0}}
    text = authors_way.markdown({"deterministic": entry, "sampled, seed 1": entry}, "python x.py")
    assert "| | deterministic | sampled, seed 1 |" in text
    assert "| (a) FLOPs per frame, real frames (evaluate) | 7.07M | 7.07M |" in text
    assert "| PER, the authors' way | 27.50 % | 27.50 % |" in text and "u9" in text and "10 min (deterministic)" in text
