"""``evaluate_corpus`` (``surprisal-cc evaluate``): long utterances decoded alone, in parts with context,
and scored and counted as the short ones, which keep their batches.

The long-audio functions are wrapped with 0.5 s of context (instead of 8 s), so that a few seconds of
synthetic audio with 1 s parts take the long path quickly; the wrappers also record what ran.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import soundfile as sf
import torch

from surprisal_cc.inference import long_audio
from surprisal_cc.inference.evaluation import evaluate_corpus
from surprisal_cc.inference import ConditionalASR
from surprisal_cc.training.labels import phone_set

CONTEXT_S = 0.5


@pytest.fixture(scope="module")
def big_only() -> ConditionalASR:
    """An untrained big-only model reading APC features: every frame costs the same MACs, APC's included."""
    torch.manual_seed(0)
    return ConditionalASR.untrained(phone_set("librispeech"), controller="big_only", input_features="apc")


@pytest.fixture
def corpus(tmp_path) -> Path:
    """A manifest of a 5 s utterance between two short ones."""
    rows = ["ID,wav,phn"]
    for i, (utt, seconds) in enumerate((("s1", 0.5), ("long", 5.0), ("s2", 0.75))):
        signal = 0.1 * np.random.default_rng(i).uniform(-1, 1, int(16000 * seconds))
        sf.write(tmp_path / f"{utt}.wav", signal.astype(np.float32), 16000)
        rows.append(f"{utt},{utt}.wav,sil AH B sil" + " AH" * i)
    (tmp_path / "utts.csv").write_text("\n".join(rows) + "\n")
    return tmp_path / "utts.csv"


@pytest.fixture
def ran(monkeypatch, big_only) -> Dict[str, List]:
    """What ran: the files decoded in parts (``long``) and the size of each batch (``batches``)."""
    calls: Dict[str, List] = {"long": [], "batches": []}
    from surprisal_cc.inference import passes

    decode_long, decode_batch = long_audio.decode_long, passes.decode_batch

    def spy_long(asr, path, **kwargs):
        calls["long"].append(Path(path).name)
        return decode_long(asr, path, context_s=CONTEXT_S, **kwargs)

    def spy_batch(asr, wavs, samples):
        calls["batches"].append(int(wavs.shape[0]))
        return decode_batch(asr, wavs, samples)

    monkeypatch.setattr(long_audio, "is_long", functools.partial(long_audio.is_long, context_s=CONTEXT_S))
    monkeypatch.setattr(long_audio, "decode_long", spy_long)
    monkeypatch.setattr(passes, "decode_batch", spy_batch)
    return calls


def _evaluate(asr, corpus, tmp_path, **kwargs):
    rows: List[dict] = []
    alignments = tmp_path / f"alignments{len(list(tmp_path.glob('alignments*')))}.txt"
    scores = evaluate_corpus(asr, corpus, batch_size=2, per_utterance=rows.append, alignments=alignments, **kwargs)
    return scores, {row["id"]: row for row in rows}, alignments.read_text()


def test_a_long_utterance_is_decoded_alone_in_parts_and_counted_as_whole_decoding_counts_it(
        big_only, corpus, ran, tmp_path):
    """Above the threshold (1 s parts: 1 s + twice the context), the 5 s utterance is decoded by
    decode_long while the short ones share one batch; its frames, reference, MACs per frame and p_big
    enter the totals as whole-file decoding's do (long_chunk_s=0: every utterance in batches)."""
    parts, part_rows, part_alignments = _evaluate(big_only, corpus, tmp_path, long_chunk_s=1.0)
    assert ran == {"long": ["long.wav"], "batches": [2]}
    ran["batches"].clear()
    whole, whole_rows, _ = _evaluate(big_only, corpus, tmp_path, long_chunk_s=0)
    assert ran == {"long": ["long.wav"], "batches": [2, 1]}  # nothing more in parts
    assert list(part_rows) == ["long", "s1", "s2"]  # the long one as it comes, the short ones batched
    assert part_rows["long"]["num_frames"] == whole_rows["long"]["num_frames"] == 249
    for utt, row in part_rows.items():
        assert (row["num_frames"], row["reference"]) == (whole_rows[utt]["num_frames"], whole_rows[utt]["reference"])
        assert row["flops_per_frame"] == pytest.approx(whole_rows[utt]["flops_per_frame"], rel=1e-12)
        assert row["big_fraction"] == row["p_big_mean"] == 1.0
        assert f"{utt}, %WER" in part_alignments
    for key in ("num_utterances", "num_ref_tokens", "audio_s", "big_fraction", "p_big_mean"):
        assert parts[key] == whole[key], key
    assert parts["num_ref_tokens"] == 4 + 5 + 6 and parts["audio_s"] == 6.25
    assert parts["flops_per_frame"] == pytest.approx(whole["flops_per_frame"], rel=1e-12)
    assert parts["flops_components"] == pytest.approx(whole["flops_components"], rel=1e-12)
    assert parts["flops_components"]["apc"] == big_only.apc_macs
    for key in ("substitutions", "deletions", "insertions"):
        assert parts[key] == sum(row[key] for row in part_rows.values())
    assert parts["compute_s"] > 0 and parts["rtf"] == pytest.approx(parts["compute_s"] / 6.25)


def test_short_utterances_keep_their_batches(big_only, corpus, ran, tmp_path):
    """Below the threshold (the default, 60 s parts) nothing is decoded in parts: the same batches and
    totals as with long_chunk_s=0."""
    default, default_rows, _ = _evaluate(big_only, corpus, tmp_path)
    whole, whole_rows, _ = _evaluate(big_only, corpus, tmp_path, long_chunk_s=0)
    assert ran == {"long": [], "batches": [2, 1, 2, 1]}
    assert default_rows == whole_rows and list(default_rows) == ["s1", "long", "s2"]
    assert {k: v for k, v in default.items() if k not in ("rtf", "compute_s")} == \
        {k: v for k, v in whole.items() if k not in ("rtf", "compute_s")}


def test_sampled_routing_of_a_long_utterance_draws_from_the_evaluation_seed(corpus, monkeypatch, tmp_path):
    """The parts draw from the corpus's seeded RNG: the same seed, the same routing; another, another."""
    torch.manual_seed(0)
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="random")
    monkeypatch.setattr(long_audio, "is_long", functools.partial(long_audio.is_long, context_s=CONTEXT_S))
    monkeypatch.setattr(long_audio, "decode_long", functools.partial(long_audio.decode_long, context_s=CONTEXT_S))
    asr.set_routing("sampled", seed=1)
    runs = [_evaluate(asr, corpus, tmp_path, long_chunk_s=1.0, seed=seed)[1]["long"] for seed in (3, 3, 5)]
    assert runs[0] == runs[1] and runs[0]["p_big_mean"] == runs[2]["p_big_mean"]
    assert runs[0]["big_fraction"] != runs[2]["big_fraction"]


def test_a_flops_budget_holds_for_its_evaluation_only(corpus, tmp_path):
    """evaluate(flops_fraction=F) decodes at the budget's shift and leaves the model's own shift as it was;
    a batch size that is not a positive whole number is refused before any audio is read."""
    from surprisal_cc.errors import ConfigurationError

    torch.manual_seed(0)
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="surprisal", input_features="apc")
    asr.set_bias_shift(0.25)
    scores = evaluate_corpus(asr, corpus, flops_fraction=0.9)
    assert scores["budget"]["bias_shift"] != 0.25 and asr.encoder.test_bias_shift == 0.25
    assert scores["bias_shift"] == scores["budget"]["bias_shift"]  # reported as decoded
    for batch_size in (-1, 2.5):
        with pytest.raises(ConfigurationError, match="batch_size must be a whole number"):
            evaluate_corpus(asr, corpus, batch_size=batch_size)


def test_the_model_protocols_name_members_of_conditional_asr(big_only):
    """``evaluate_corpus``, the long-audio, budget and batch functions type their model with one protocol
    (``ConditionalASR`` imports their modules): ``ConditionalASR`` has every member it names, its methods with
    the same parameters, and the protocol's module loads no torch (the command line's help reads long_audio)."""
    import inspect
    import subprocess
    import sys

    from surprisal_cc.inference import budget, evaluation, passes
    from surprisal_cc.inference.protocol import LoadedModel

    assert isinstance(big_only, LoadedModel) and not isinstance(object(), LoadedModel)
    members = [name for klass in LoadedModel.__mro__ if klass.__module__ == LoadedModel.__module__
               for name in (*klass.__annotations__, *vars(klass)) if not name.startswith("_")]
    assert "encoder" in members and "feature_config" in members
    for name in members:
        assert hasattr(big_only, name), name
    methods = [name for name, member in vars(LoadedModel).items() if inspect.isfunction(member) and not name.startswith("_")]
    assert methods == ["transcribe_batch", "set_bias_shift"]
    for name in methods:
        assert list(inspect.signature(getattr(LoadedModel, name)).parameters) == \
            list(inspect.signature(getattr(ConditionalASR, name)).parameters), name
    for module in (evaluation, long_audio, budget, passes):
        assert "LoadedModel" in vars(module), module.__name__
    code = "import sys, surprisal_cc.inference.long_audio; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]


def test_audio_too_short_for_the_models_window_is_listed_up_front_and_skipped_with_skip_bad(tmp_path, monkeypatch):
    """A 50 ms window: a 37.5 ms utterance (which the 25 ms check made where no model is known passes) is
    named in one line before any decoding, and skip_bad scores the others; min_samples gives one frame."""
    from surprisal_cc.data.errors import BadAudioError

    torch.manual_seed(0)
    plain = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
    asr = ConditionalASR({**plain.config, "features": {**plain.config["features"], "frame_length_ms": 50.0}},
                         plain.encoder)
    least = asr.feature_config.min_samples
    rows = ["ID,wav,phn"]
    for utt, samples in (("ok", 8000), ("short", 600), ("least", least)):
        sf.write(tmp_path / f"{utt}.wav", (0.1 * np.random.default_rng(0).uniform(-1, 1, samples)).astype(np.float32),
                 16000)
        rows.append(f"{utt},{utt}.wav,sil AH B sil")
    (tmp_path / "utts.csv").write_text("\n".join(rows) + "\n")
    line = (f"{tmp_path / 'short.wav'}: too short (37.5 ms; the model's shortest usable audio is 50 ms, 800 samples "
            "at 16000 Hz: one frame)")
    decoded = []
    from surprisal_cc.inference import passes

    decode_batch = passes.decode_batch
    monkeypatch.setattr(passes, "decode_batch", lambda model, wavs, samples: decoded.append(samples.tolist())
                        or decode_batch(model, wavs, samples))
    with pytest.raises(BadAudioError) as err:
        evaluate_corpus(asr, tmp_path / "utts.csv")
    assert line in str(err.value).splitlines() and "--skip-bad" in str(err.value) and not decoded
    rows_seen: List[dict] = []
    with pytest.warns(UserWarning, match="skipping 1 unusable audio file"):
        scores = evaluate_corpus(asr, tmp_path / "utts.csv", skip_bad=True, per_utterance=rows_seen.append)
    assert scores["skipped"] == [line] and scores["num_utterances"] == 2
    assert {row["id"]: row["num_frames"] for row in rows_seen} == {"ok": asr.feature_config.num_frames(8000),
                                                                   "least": 1}
