"""Using a trained model: export a real recipe run, load it, transcribe and evaluate real dev-clean-2 audio.

The recipe runs for a few steps on the stand-in Mini-LibriSpeech of ``mini_corpus`` (one APC epoch,
one training epoch) with deterministic routing at test time, so that ``evaluate`` on the same
utterances must reproduce the recipe's own test decoding, up to the few frames that float32 rounding
can move across the routing threshold in batches of another composition (``tests/numerics.py``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from data_fixtures import REPO, mini_corpus, require_dev_clean_2  # noqa: F401  (a fixture)
from numerics import (assert_same_errors_up_to_summation_order, assert_same_phones_up_to_summation_order,
                      assert_same_routing_up_to_summation_order,
                      error_rate_tolerance)
from surprisal_cc.model.apc import APCModel, save_apc
from surprisal_cc.cli.commands import main
from surprisal_cc.data import DataPreparationWarning
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.data.audio import check_audio_each
from surprisal_cc.data.waveforms import batch_waveforms
from surprisal_cc.inference import passes
from surprisal_cc.inference.asr import BadAudioError, ConditionalASR, ModelFormatError, default_model_dir, transcribe_checked_file
from surprisal_cc.inference.budget import budget_big_fraction, frame_surprisal, meet_flops_budget
from surprisal_cc.inference.evaluation import evaluate_corpus
from surprisal_cc.model.nnet import weights_fingerprint

RECIPE = REPO / "recipes" / "MiniLibriSpeech" / "train.py"
HPARAMS = REPO / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml"
APC, PRE, SMALL, BIG, POST42 = 3_054_672, 1_182_720, 262_656, 2_099_712, 1_204_266


@pytest.fixture(scope="module")
def trained_run(mini_corpus):  # noqa: F811
    """Output folder of the real Mini-LibriSpeech recipe, run briefly with ``--test_stochastic=False``."""
    options = {"data_folder": mini_corpus / "corpus", "experiment_root": mini_corpus / "exp", "valid_speakers": 2,
               "number_of_epochs": 1, "batch_size": 4, "apc_epochs": 1, "apc_batch_size": 4, "seed": 3,
               "test_stochastic": False}
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, str(RECIPE), str(HPARAMS), *(f"--{k}={v}" for k, v in options.items())],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return mini_corpus / "exp" / "conditional-surprisal-paper-apc" / "seed3"


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "model"
    assert main(["export", str(trained_run), str(out)]) == 0
    return out


@pytest.mark.integration
def test_export_writes_a_safe_model_folder_with_a_card(exported, trained_run):
    assert {p.name for p in exported.iterdir()} == {"model.json", "encoder.pt", "apc.pt", "README.md"}
    config = json.loads((exported / "model.json").read_text())
    results = json.loads((trained_run / "results.json").read_text())
    assert config["format_version"] == 1 and config["encoder"]["controller"] == "surprisal"
    assert config["source"]["apc_fingerprint"] == results["apc"]  # the APC the run trained with
    assert not absolute_paths(config), "a model card names the building machine's paths"
    assert config["labels"][0] == "<blank>" and len(config["labels"]) == 42 and config["beam_size"] == 10
    state = torch.load(exported / "encoder.pt", weights_only=True)  # plain tensors, no pickled code
    assert float(state["controller.weight"]) == pytest.approx(results["calibration"]["weight"], rel=1e-6)
    assert bool(state["controller.calibrated"])
    card = (exported / "README.md").read_text()
    for text in ("MiniLibriSpeech", "seed | 3", f"{results['PER']:.2f} %", results["commit"] or "None",
                 f"{results['flops_per_frame'] / 1e6:.2f}M", "epoch 1", f"weights fingerprint {results['apc']}"):
        assert text in card, text


@pytest.mark.integration
def test_transcribe_file_reports_phones_routing_flops_and_rtf(exported, mini_corpus):  # noqa: F811
    asr = ConditionalASR.from_pretrained(exported)
    flac = sorted((mini_corpus / "corpus" / "LibriSpeech" / "dev-clean-2").rglob("*.flac"))[0]
    result = asr.transcribe_file(flac)
    import soundfile

    assert result.num_frames == FeatureConfig().num_frames(soundfile.info(str(flac)).frames)
    assert result.phones and set(result.phones) <= set(asr.labels[1:])
    assert result.surprisal.shape == result.p_big.shape == result.use_big.shape == (result.num_frames,)
    assert torch.equal(result.use_big, result.p_big > 0.5)  # the run tested with deterministic routing
    big = result.big_fraction
    assert result.flops_per_frame == pytest.approx(APC + PRE + POST42 + 2 + SMALL + big * (BIG - SMALL), rel=1e-12)
    assert result.rtf > 0 and result.duration_s == pytest.approx(soundfile.info(str(flac)).duration)


@pytest.mark.integration
def test_evaluate_reproduces_the_recipe_test_decoding(exported, trained_run, mini_corpus, capsys):  # noqa: F811
    """Same utterances, same model, same labels (MFA): the same PER, S/D/I, FLOPs and routing as the recipe.

    The recipe decoded them in batches of another composition, so a frame whose p_big is within float32
    rounding of 0.5 may have gone to the other network: routing is compared up to a few frames, the
    errors up to a few edits, and the FLOPs must differ by exactly what the switched frames cost."""
    import soundfile

    results = json.loads((trained_run / "results.json").read_text())
    subset = mini_corpus / "corpus" / "LibriSpeech" / "dev-clean-2"
    mfa = mini_corpus / "corpus" / "phone_labels" / "dev-clean-2_mfa.csv"
    assert main(["evaluate", str(subset), "--model", str(exported), "--mfa-labels", str(mfa), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    details = results["error_rate_details"]
    assert report["apc"] == results["apc"]  # the APC the run trained with, exported in fp32
    assert report["num_utterances"] == details["num_utterances"]
    assert_same_errors_up_to_summation_order(report, details)
    assert report["per"] == pytest.approx(results["PER"], abs=error_rate_tolerance(details["num_ref_tokens"]))
    asr = ConditionalASR.from_pretrained(exported)
    frames = sum(asr.feature_config.num_frames(soundfile.info(str(f)).frames) for f in subset.rglob("*.flac"))
    assert_same_routing_up_to_summation_order(report["big_fraction"], results["big_fraction"], frames)
    # FLOPs per frame are linear in the big fraction (tests above): they move only with switched frames
    assert report["flops_per_frame"] - results["flops_per_frame"] == pytest.approx(
        (report["big_fraction"] - results["big_fraction"]) * (BIG - SMALL), abs=1e-12 * results["flops_per_frame"])
    # p_big itself goes through the APC network in float32: equal up to rounding, far below any model change
    assert report["p_big_mean"] == pytest.approx(results["p_big_mean"], abs=1e-4)
    assert report["rtf"] > 0 and report["skipped"] == []
    # the recipe's own test manifest gives the same
    from_manifest = evaluate_corpus(asr, Path(results["data"]["test"]))
    assert_same_errors_up_to_summation_order(from_manifest, details)
    assert from_manifest["per"] == pytest.approx(results["PER"], abs=error_rate_tolerance(details["num_ref_tokens"]))


@pytest.mark.integration
def test_lexicon_labels_follow_the_training_g2p_policy(exported, mini_corpus):  # noqa: F811
    subset = mini_corpus / "corpus" / "LibriSpeech" / "dev-clean-2"
    with pytest.warns(UserWarning, match="OOV"):  # words CMUdict lacks become spn (the run's g2p: spn)
        report = evaluate_corpus(ConditionalASR.from_pretrained(exported), subset)
    assert report["labels"].startswith("lexicon") and "g2p=spn" in report["labels"]
    assert report["num_utterances"] == 6 and report["per"] > 0


@pytest.mark.integration
def test_evaluate_against_any_pronunciation(exported, mini_corpus, tmp_path, capsys):  # noqa: F811
    """Scored against the closest pronunciation of each word, every utterance parses (MFA's and the
    lexicon's labels are their words' phones) and no utterance has more edits than against its labels."""
    from surprisal_cc.inference.corpora import pronunciation_references
    from surprisal_cc.errors import ConfigurationError

    subset = mini_corpus / "corpus" / "LibriSpeech" / "dev-clean-2"
    mfa = mini_corpus / "corpus" / "phone_labels" / "dev-clean-2_mfa.csv"
    asr = ConditionalASR.from_pretrained(exported)
    for labels in (str(mfa), None):
        with warnings.catch_warnings():  # lexicon labels: the words CMUdict lacks are announced (spn)
            warnings.simplefilter("ignore", DataPreparationWarning)
            report = evaluate_corpus(asr, subset, mfa_labels=labels, any_pronunciation=True)
        free = report["any_pronunciation"]
        assert free["fixed"] == 0
        edits = report["substitutions"] + report["deletions"] + report["insertions"]
        assert free["substitutions"] + free["deletions"] + free["insertions"] <= edits
    assert main(["evaluate", str(subset), "--model", str(exported), "--mfa-labels", str(mfa),
                 "--any-pronunciation"]) == 0
    assert "against the closest pronunciation of each word" in capsys.readouterr().out
    (tmp_path / "TIMIT" / "TEST").mkdir(parents=True)
    with pytest.raises(ConfigurationError, match="hand-labelled"):
        pronunciation_references(tmp_path / "TIMIT", [], {})
    manifest = tmp_path / "m.csv"
    manifest.write_text("ID,wav,phn\nu1,x.flac,sil AH sil\n")
    with pytest.raises(ConfigurationError, match="a wrd column"):
        pronunciation_references(manifest, [("u1", "x.flac", ["sil", "AH", "sil"])], {})


@pytest.mark.integration
def test_fp16_export_halves_the_size_and_loads_as_fp32(trained_run, exported, tmp_path):
    half = tmp_path / "half"
    assert main(["export", str(trained_run), str(half), "--dtype", "fp16"]) == 0
    size = lambda folder: sum(p.stat().st_size for p in folder.glob("*.pt"))  # noqa: E731
    assert size(half) < 0.55 * size(exported)
    asr = ConditionalASR.from_pretrained(half)
    assert {p.dtype for p in asr.encoder.parameters()} == {torch.float32}
    full = ConditionalASR.from_pretrained(exported)
    assert float(asr.encoder.controller.weight) == float(full.encoder.controller.weight)  # calibration kept exact
    wav = torch.randn(16000) * 0.1
    assert asr.transcribe_batch(wav)[0].num_frames == 49


@pytest.mark.integration
def test_export_averages_the_best_checkpoints(trained_run, exported, tmp_path, capsys):
    """The best complete checkpoints are averaged; one whose save was cut short is passed over."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("*.flac"))
    best = next(p for p in (run / "save").iterdir() if p.name.startswith("CKPT+"))
    other = best.with_name(best.name + "-worse")
    shutil.copytree(best, other)
    meta = yaml.safe_load((other / "CKPT.yaml").read_text())
    (other / "CKPT.yaml").write_text(yaml.safe_dump({**meta, "PER": meta["PER"] + 1.0}))
    state = torch.load(other / "encoder.ckpt", weights_only=True)
    torch.save({k: v * 3 if torch.is_floating_point(v) and v.dim() >= 2 else v for k, v in state.items()},
               other / "encoder.ckpt")
    cut = best.with_name(best.name + "-cut-short")  # the best by PER, but its save was cut short
    shutil.copytree(best, cut)
    (cut / "CKPT.yaml").write_text(yaml.safe_dump({**meta, "PER": meta["PER"] - 1.0}))
    (cut / "encoder.ckpt").unlink()
    assert main(["export", str(run), str(tmp_path / "avg"), "--average", "2"]) == 0
    assert "averaged with the next 1 best" in capsys.readouterr().out
    averaged = torch.load(tmp_path / "avg" / "encoder.pt", weights_only=True)
    single = torch.load(exported / "encoder.pt", weights_only=True)
    for key, value in single.items():
        if torch.is_floating_point(value) and value.dim() >= 2:  # (1 + 3) / 2
            assert torch.allclose(averaged[key], 2 * value, rtol=1e-6, atol=0), key
        else:  # vectors equal in both checkpoints; flags and counters from the best
            assert torch.equal(averaged[key], value), key
    config = json.loads((tmp_path / "avg" / "model.json").read_text())
    assert [c["valid_PER"] for c in config["source"]["averaged_checkpoints"]] == [meta["PER"], meta["PER"] + 1.0]
    assert "weights averaged | over the 2 best checkpoints" in (tmp_path / "avg" / "README.md").read_text()
    assert main(["export", str(run), str(tmp_path / "avg3"), "--average", "3"]) == 1
    assert "2 checkpoints with a validation PER, not 3" in capsys.readouterr().err


@pytest.mark.integration
def test_export_refuses_an_apc_the_run_did_not_train_with(trained_run, tmp_path, capsys):
    other = APCModel(num_layers=1)
    save_apc(other, tmp_path / "other_apc.pt")
    assert main(["export", str(trained_run), str(tmp_path / "model"), "--apc", str(tmp_path / "other_apc.pt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'other_apc.pt'}: APC weights fingerprint {weights_fingerprint(other)}")
    assert "pass that APC with --apc PATH" in err and not (tmp_path / "model").exists()


@pytest.mark.integration
def test_export_refuses_a_folder_that_is_not_a_model(trained_run, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["export", str(trained_run), str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(f"error: {tmp_path}: exists and is not a model folder")
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.integration
@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no native bf16 on this CPU")
def test_bf16_inference(exported, mini_corpus):  # noqa: F811
    flac = sorted((mini_corpus / "corpus" / "LibriSpeech" / "dev-clean-2").rglob("*.flac"))[0]
    fp32 = ConditionalASR.from_pretrained(exported).transcribe_file(flac)
    bf16 = ConditionalASR.from_pretrained(exported, precision="bf16").transcribe_file(flac)
    assert bf16.num_frames == fp32.num_frames and bf16.phones
    assert float((bf16.p_big - fp32.p_big).abs().max()) < 0.05  # bf16 surprisal, same routing up to rounding


@pytest.mark.integration
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(exported, mini_corpus):  # noqa: F811
    flac = sorted((mini_corpus / "corpus" / "LibriSpeech" / "dev-clean-2").rglob("*.flac"))[0]
    cpu = ConditionalASR.from_pretrained(exported).transcribe_file(flac)
    gpu = ConditionalASR.from_pretrained(exported, device="cuda").transcribe_file(flac)
    assert gpu.num_frames == cpu.num_frames
    assert float((gpu.p_big - cpu.p_big).abs().max()) < 1e-3


def test_default_model_folder_is_the_packaged_pretrained_folder(monkeypatch, tmp_path):
    assert default_model_dir() == REPO / "surprisal_cc" / "pretrained"
    monkeypatch.setattr("surprisal_cc.inference.asr.default_model_dir", lambda: tmp_path / "pretrained")
    with pytest.raises(ModelFormatError, match="surprisal-cc export RUN_DIR"):
        ConditionalASR.from_pretrained()


def test_card_counts_the_epochs_trained_from_the_history(tmp_path):
    """results.json's ``epochs`` is the evaluated (best) checkpoint's counter; the card's "trained"
    count is the history's last epoch."""
    from surprisal_cc.training.export import _epochs_trained

    assert _epochs_trained(tmp_path) is None
    (tmp_path / "history.jsonl").write_text("".join(json.dumps({"epoch": e, "PER": 40.0 - e}) + "\n" for e in (1, 2, 3)))
    assert _epochs_trained(tmp_path) == 3


# ---------------------------------------------------------------------------------------------- Python API
@pytest.fixture(scope="module")
def untrained():
    from surprisal_cc.training.labels import phone_set

    torch.manual_seed(0)
    return ConditionalASR.untrained(phone_set("librispeech"), controller="surprisal", input_features="apc")


def test_transcribe_batch_speechbrain_lengths_sample_rate_and_int16(untrained):
    """``wav_lens`` are relative (SpeechBrain), ``num_samples`` absolute; int16 audio is scaled and
    int16-scaled floats are refused; other sample rates are resampled when named."""
    g = torch.Generator().manual_seed(1)
    wavs = (0.1 * torch.randn(2, 16000, generator=g)).clamp(-1, 1)
    relative = untrained.transcribe_batch(wavs, torch.tensor([1.0, 0.5]))
    absolute = untrained.transcribe_batch(wavs, num_samples=torch.tensor([16000, 8000]))
    assert [r.num_frames for r in relative] == [r.num_frames for r in absolute] == [49, 24]
    assert [r.phones for r in relative] == [r.phones for r in absolute]
    assert untrained.forward(wavs, torch.tensor([1.0, 0.5])).frames.tolist() == [49, 24]  # relative lengths too
    with pytest.raises(ValueError, match=r"relative wav_lens must lie in \(0, 1\]"):
        untrained.transcribe_batch(wavs, torch.tensor([1.0, 1.5]))
    with pytest.raises(ValueError, match="int16-scaled"):
        untrained.transcribe_batch(wavs * 32768)
    int16 = (wavs * 32767).round().to(torch.int16)
    assert untrained.transcribe_batch(int16)[0].num_frames == 49
    with pytest.warns(DataPreparationWarning, match="at 8000 Hz has no content above 4000 Hz") as caught:
        low = untrained.transcribe_batch(wavs[:, ::2], sample_rate=8000)
    assert caught[0].filename == __file__
    assert [r.duration_s for r in low] == [1.0, 1.0] and low[0].num_frames == 49
    result = relative[0]
    assert str(result) == result.text == " ".join(result.phones) and result.frame_shift_s == 0.02
    assert untrained.to("cpu") is untrained and untrained.routing == "deterministic"


def test_batch_inputs_a_user_may_give(untrained):
    """A list of waveforms is padded; encode_batch takes num_samples and sample_rate as transcribe_batch
    does; layouts and lengths that would be misread are one clear error each."""
    g = torch.Generator().manual_seed(3)
    wavs = (0.1 * torch.randn(2, 16000, generator=g)).clamp(-1, 1)
    listed = untrained.transcribe_batch([wavs[0], wavs[1, :8000]])
    padded = untrained.transcribe_batch(wavs, num_samples=torch.tensor([16000, 8000]))
    assert [r.phones for r in listed] == [r.phones for r in padded] and [r.num_frames for r in listed] == [49, 24]
    with pytest.warns(DataPreparationWarning, match="8000 Hz"):
        assert untrained.encode_batch(wavs[:, ::2], num_samples=torch.tensor([8000, 4000]), sample_rate=8000).shape[1] == 49
    for bad, message in [((wavs.T,), r"look like \(samples, channels\)"),
                         ((wavs, torch.tensor([1, 1])), "integer wav_lens are read as sample counts"),
                         (([wavs[0], wavs[1]], torch.tensor([1.0, 1.0])), "carries its own lengths")]:
        with pytest.raises(ValueError, match=message):
            untrained.transcribe_batch(*bad)
    with pytest.raises(ValueError, match="whole numbers of samples"):
        untrained.transcribe_batch(wavs, num_samples=torch.tensor([16000.0, 7999.5]))
    with pytest.raises(ValueError, match="finite"):
        untrained.set_bias_shift(float("nan"))
    with pytest.raises(TypeError, match="takes the path of an audio file"):
        untrained.transcribe_file(wavs[0])
    with pytest.raises(ValueError, match="got none"):
        meet_flops_budget(untrained, [], 0.9)
    assert untrained.transcribe_batch(wavs.clone().requires_grad_())[0].num_frames == 49
    # each waveform of a list is scaled on its own: int16 beside float, (1, S) as torchaudio.load gives it
    int16 = (wavs[0] * 32767).round().to(torch.int16)
    mixed = batch_waveforms([int16, wavs[1, :8000]])[0]
    torch.testing.assert_close(mixed, batch_waveforms([wavs[0], wavs[1, :8000]])[0], atol=1e-4, rtol=0)
    assert torch.equal(batch_waveforms([wavs[:1], wavs[1, :8000]])[1], torch.tensor([16000, 8000]))
    with pytest.raises(ValueError, match=r"shapes \[\(2, 16000\)\]: give each as 1-D"):
        untrained.transcribe_batch([wavs])
    with pytest.raises(ValueError, match="not files: transcribe a file with transcribe_file"):
        untrained.transcribe_batch(["a.flac", "b.flac"])
    with pytest.raises(ValueError, match="wavs is an empty list: give at least one waveform"):
        untrained.transcribe_batch([])
    with pytest.raises(ValueError, match="magnitude is 3: scale it into"):
        untrained.transcribe_batch(torch.tensor([0.0, 3.0] * 800))
    # forward takes what transcribe_batch takes
    torch.testing.assert_close(untrained.forward(int16).output.log_probs,
                               untrained.forward(wavs[0].numpy()).output.log_probs, atol=1e-3, rtol=0)


def test_transcribe_batch_resamples_a_rate_sharing_no_factor_with_16k_in_bounded_memory(untrained, monkeypatch):
    """16001 Hz: a polyphase filter, not torchaudio's kernel of 16000 x 16001 taps (gigabytes, minutes)."""
    import torchaudio

    def refuse(wav, orig, new, *args, **kwargs):
        raise AssertionError(f"torchaudio's {orig} -> {new} Hz kernel")

    monkeypatch.setattr(torchaudio.functional, "resample", refuse)
    g = torch.Generator().manual_seed(3)
    odd = untrained.transcribe_batch((0.1 * torch.randn(2, 16001, generator=g)).clamp(-1, 1), sample_rate=16001)
    assert [r.duration_s for r in odd] == [1.0, 1.0] and odd[0].num_frames == 49


@pytest.mark.parametrize("rate", [8000.5, 0, -16000, float("nan")])
def test_a_sample_rate_that_is_not_a_positive_whole_number_is_refused_not_truncated(untrained, rate):
    """8000.5 Hz is not read as 8000; 8000.0 is."""
    from surprisal_cc.data.audio import resample

    g = torch.Generator().manual_seed(4)
    wavs = (0.1 * torch.randn(1, 4000, generator=g)).clamp(-1, 1)
    message = re.escape(f"must be a positive whole number of Hz, got {rate!r}")
    with pytest.raises(ValueError, match="sample_rate " + message):
        untrained.transcribe_batch(wavs, sample_rate=rate)
    with pytest.raises(ValueError, match="rate " + message):
        resample(wavs, rate, 16000)
    with pytest.warns(DataPreparationWarning, match="8000 Hz"):
        assert untrained.transcribe_batch(wavs, sample_rate=8000.0)[0].duration_s == 0.5


def test_encode_batch_gives_the_log_probabilities_that_transcribe_batch_decodes(untrained):
    """SpeechBrain's encode_batch: the same forward pass as transcribe_batch, before the beam search."""
    g = torch.Generator().manual_seed(2)
    wavs = (0.1 * torch.randn(2, 16000, generator=g)).clamp(-1, 1)
    from surprisal_cc.runtime import decoding_threads

    log_probs = untrained.encode_batch(wavs, torch.tensor([1.0, 0.5]))
    with decoding_threads(untrained.threads):  # the same threads: one code path, one batch, the same sums
        result = untrained.forward(wavs, torch.tensor([1.0, 0.5]))
    frames = result.frames
    assert log_probs.shape == (2, 49, len(untrained.labels)) and frames.tolist() == [49, 24]
    torch.testing.assert_close(log_probs, result.output.log_probs.float(), rtol=0, atol=0)
    hyps = untrained.beam_search(log_probs, frames)
    results = untrained.transcribe_batch(wavs, torch.tensor([1.0, 0.5]), timestamps=False)
    assert [passes.phones_of(untrained, h) for h in hyps] == [r.phones for r in results]


def test_from_hparams_loads_from_savedir_as_speechbrain_does(untrained, tmp_path):
    """A local source loads where it is; with ``savedir`` its files are linked there (SpeechBrain's default
    strategy; copied with ``local_strategy=COPY``) and loaded from there; the other keywords go to the
    constructor; ``from_pretrained`` is the same method."""
    from speechbrain.utils.fetching import LocalStrategy

    folder = untrained.save(tmp_path / "model")
    assert ConditionalASR.from_hparams(folder).source == folder
    loaded = ConditionalASR.from_hparams(source=str(folder), savedir=str(tmp_path / "saved"),
                                         run_opts={"device": "cpu"})
    saved = tmp_path / "saved"
    assert loaded.source == saved and loaded.routing == "deterministic" and loaded.threads == 1
    assert sorted(p.name for p in saved.iterdir()) == ["README.md", "apc.pt", "encoder.pt", "model.json"]
    assert all((saved / p.name).resolve() == (folder / p.name).resolve() for p in folder.iterdir())
    copied = ConditionalASR.from_hparams(folder, savedir=tmp_path / "copy", local_strategy=LocalStrategy.COPY)
    assert not any(p.is_symlink() for p in (tmp_path / "copy").iterdir())
    assert copied.config == loaded.config and copied.source == tmp_path / "copy"
    assert ConditionalASR.from_pretrained(folder, routing="sampled", seed=4).seed == 4
    assert ConditionalASR.from_pretrained is ConditionalASR.from_hparams or \
        ConditionalASR.from_pretrained.__func__ is ConditionalASR.from_hparams.__func__
    with pytest.raises(ModelFormatError, match="no model folder there"):  # a missing folder: not fetched
        ConditionalASR.from_hparams(tmp_path / "missing", savedir=tmp_path / "saved2")


def test_conditional_asr_is_shaped_like_speechbrains_encoder_asr():
    """SpeechBrain's EncoderASR entry points, and at most 15 methods in all: long files, phone times, a
    FLOPs budget and corpus evaluation are functions beside the class."""
    import inspect

    members = [name for name, value in vars(ConditionalASR).items()
               if inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod, property))]
    assert len(members) <= 15, members
    for name in ("from_hparams", "transcribe_file", "load_audio", "transcribe_batch", "encode_batch", "forward", "to"):
        assert name in members, name
    assert [name for name in members if name.startswith("_") and name != "__init__"] == ["_read_audio"]
    assert list(inspect.signature(ConditionalASR.from_hparams).parameters) == ["source", "savedir", "run_opts", "kwargs"]
    assert list(inspect.signature(ConditionalASR.transcribe_batch).parameters)[:3] == ["self", "wavs", "wav_lens"]
    assert list(inspect.signature(ConditionalASR.encode_batch).parameters)[:3] == ["self", "wavs", "wav_lens"]


def test_from_hparams_reads_speechbrain_run_options_as_speechbrain_does(untrained, tmp_path):
    """SpeechBrain's parsed options (device None unless --device) load on the CPU; a misspelt option is an error."""
    from speechbrain.utils.run_opts import RunOptions

    folder = untrained.save(tmp_path / "model")
    _, parsed, _ = RunOptions.from_command_line_args(["hyperparams.yaml"])
    assert ConditionalASR.from_hparams(source=folder, run_opts=parsed).device == torch.device("cpu")
    with pytest.raises(TypeError, match="devcie"):
        ConditionalASR.from_hparams(source=folder, run_opts={"devcie": "cpu"})


def test_a_cuda_device_number_the_machine_lacks_is_one_clear_error(monkeypatch):
    """``cuda:1`` on a one-GPU machine is refused when the model is made, not by a CUDA error later."""
    from surprisal_cc.errors import ConfigurationError
    from surprisal_cc.inference.asr import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda") == torch.device("cuda") and resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ConfigurationError, match=re.escape("device cuda:1: this machine has 1 CUDA device(s), "
                                                           "cuda:0 to cuda:0")):
        resolve_device("cuda:1")


@pytest.mark.parametrize("device", ["mps", "meta"])
def test_a_device_other_than_cpu_and_cuda_is_one_clear_error(untrained, device):
    """Refused when the model is made or moved, not by a late error of the device's backend."""
    from surprisal_cc.errors import ConfigurationError
    from surprisal_cc.inference.asr import resolve_device

    message = f"device {device}: only cpu and cuda[:N] are supported; use cpu"
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        resolve_device(device)
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        untrained.to(torch.device(device))
    assert untrained.device == torch.device("cpu")


@pytest.mark.parametrize("damage", ["truncated", "pickled code"])
def test_a_damaged_apc_file_is_one_error_naming_it(untrained, tmp_path, damage):
    import argparse

    folder = untrained.save(tmp_path / "model")
    if damage == "truncated":
        (folder / "apc.pt").write_bytes((folder / "apc.pt").read_bytes()[:4])
    else:  # weights_only refuses it
        torch.save({"config": {}, "state_dict": {}, "extra": argparse.Namespace(x=1)}, folder / "apc.pt")
    with pytest.raises(ModelFormatError, match="^" + re.escape(f"{folder / 'apc.pt'}: cannot be loaded")):
        ConditionalASR.from_pretrained(folder)



def test_load_audio_batches_as_speechbrain_pads_and_decodes_as_transcribe_file(untrained, tmp_path):
    """SpeechBrain's load_audio: mono at the model's rate (converted with a warning), padded with
    SpeechBrain's batch_pad_right; each file decodes as transcribe_file decodes it alone."""
    import soundfile
    from speechbrain.utils.data_utils import batch_pad_right

    from surprisal_cc.inference.asr import BadAudioError

    g = torch.Generator().manual_seed(3)
    long, short = (0.1 * torch.randn(16000, generator=g)).clamp(-1, 1), (0.1 * torch.randn(4000, generator=g))
    soundfile.write(tmp_path / "long.flac", long.numpy(), 16000)
    soundfile.write(tmp_path / "short8k.wav", torch.stack([short, short], 1).clamp(-1, 1).numpy(), 8000)
    paths = [tmp_path / "long.flac", tmp_path / "short8k.wav"]
    with pytest.warns(DataPreparationWarning) as record:
        wavs = [untrained.load_audio(path) for path in paths]
    assert {"resampled", "downmixed"} <= {word for w in record for word in str(w.message).split()}
    assert [(w.shape, w.dtype, w.device.type) for w in wavs] == [((16000,), torch.float32, "cpu"),
                                                                  ((8000,), torch.float32, "cpu")]
    torch.testing.assert_close(wavs[0], long, rtol=0, atol=1e-4)  # FLAC's 16 bits
    batch = untrained.transcribe_batch(*batch_pad_right(wavs))
    with pytest.warns(DataPreparationWarning):
        alone = [untrained.transcribe_file(path) for path in paths]
    assert [r.num_frames for r in batch] == [r.num_frames for r in alone] == [49, 24]
    # padded in a batch of two: other matrix shapes, so another float32 summation order
    assert_same_phones_up_to_summation_order([r.phones for r in batch], [r.phones for r in alone])
    (tmp_path / "bad.wav").write_text("not audio")
    with pytest.raises(BadAudioError, match="bad.wav"):
        untrained.load_audio(tmp_path / "bad.wav")


@pytest.mark.parametrize("controller", ["surprisal", "random", "learned"])
def test_a_bias_shift_moves_the_routing_of_controllers_with_a_logit(controller):
    """Appendix B's test-time shift: more frames on the big network at +4 than at -4; big-only and
    small-only have no logit to shift, and say so."""
    torch.manual_seed(0)
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller=controller)
    if controller == "surprisal":  # uncalibrated, a random APC's surprisal saturates p_big
        asr.encoder.controller.weight.fill_(1e-3)
    wavs = (0.1 * torch.randn(1, 16000, generator=torch.Generator().manual_seed(2))).clamp(-1, 1)
    fractions = []
    for shift in (-4.0, 4.0):
        asr.set_bias_shift(shift)
        fractions.append(float(asr.transcribe_batch(wavs)[0].use_big.float().mean()))
    assert fractions[0] < fractions[1]
    for constant in ("big_only", "small_only"):
        with pytest.raises(ConfigurationError, match=f"the '{constant}' controller has no bias to shift"):
            ConditionalASR.untrained(["AH", "B", "sil"], controller=constant).set_bias_shift(1.0)


def test_a_flops_budget_is_solved_on_the_frames_of_the_audio_given(tmp_path):
    """``meet_flops_budget`` solves the shift on the real frames of every file (in padded batches) and sets
    it; a budget the model cannot meet fails before any audio is read."""
    import math

    import soundfile as sf

    torch.manual_seed(0)
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="surprisal")
    asr.encoder.controller.set_parameters(weight=0.0, bias=0.0)  # p_big = sigmoid(shift) on every frame
    asr.set_routing("sampled", seed=0)  # the expected fraction, the mean p_big, meets the budget
    paths = [tmp_path / f"u{i}.wav" for i in range(3)]
    for i, (path, seconds) in enumerate(zip(paths, (1.0, 0.5, 0.75))):
        signal = 0.1 * torch.randn(int(16000 * seconds), generator=torch.Generator().manual_seed(i))
        sf.write(path, signal.numpy(), 16000)
    budget = meet_flops_budget(asr, paths, 0.9, batch_size=2)
    assert list(budget) == ["fraction", "big_fraction", "bias_shift", "frames"]
    assert budget["fraction"] == 0.9 and budget["big_fraction"] == budget_big_fraction(asr, 0.9)
    big = budget["big_fraction"]
    assert budget["bias_shift"] == pytest.approx(math.log(big / (1 - big)), abs=1e-3)
    assert asr.encoder.test_bias_shift == budget["bias_shift"]
    frames = sum(asr.transcribe_batch(sf.read(path, dtype="float32")[0])[0].num_frames for path in paths)
    assert budget["frames"] == frames == meet_flops_budget(asr, paths, 0.9, batch_size=1)["frames"]
    with pytest.raises(ConfigurationError, match="FLOPs fraction 0.1"):
        meet_flops_budget(asr, [tmp_path / "missing.wav"], 0.1)
    with pytest.raises(BadAudioError, match="missing.wav: file does not exist"):
        meet_flops_budget(asr, [paths[0], tmp_path / "missing.wav"], 0.9)
    with pytest.raises(ConfigurationError, match="batch_size must be a whole number"):
        meet_flops_budget(asr, paths, 0.9, batch_size=0)
    # the budget's shift is saved with the model and loaded back; a shift set back to 0 replaces it
    loaded = ConditionalASR.from_pretrained(asr.save(tmp_path / "model"))
    assert loaded.encoder.test_bias_shift == budget["bias_shift"]
    loaded.set_bias_shift(0.0)
    assert ConditionalASR.from_pretrained(loaded.save(tmp_path / "model0")).encoder.test_bias_shift == 0.0


def test_the_surprisal_of_a_long_file_is_computed_in_parts(tmp_path, monkeypatch):
    """``long_surprisal`` gives the whole file's surprisal part by part (the same where the context reaches
    the file's start); ``meet_flops_budget`` reads a long file that way (1 s parts, 0.5 s of context),
    the short ones in batches, and solves on as many frames as whole-file reading."""
    import functools

    import soundfile as sf

    from surprisal_cc.inference import long_audio

    torch.manual_seed(0)
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="surprisal")
    paths = [tmp_path / "short.wav", tmp_path / "long.wav"]
    for i, (path, seconds) in enumerate(zip(paths, (0.5, 3.0))):
        signal = 0.1 * torch.randn(int(16000 * seconds), generator=torch.Generator().manual_seed(i))
        sf.write(path, signal.numpy(), 16000)
    fbank, frames = passes.filterbanks(asr, asr.load_audio(paths[1])[None], torch.tensor([48000]))
    whole = passes.apc_surprisal(asr, fbank, frames)[0]
    reaching = list(long_audio.long_surprisal(asr, paths[1], chunk_s=1.0, context_s=3.0))
    assert [part.numel() for part in reaching] == [50, 50, 49] and whole.numel() == 149
    torch.testing.assert_close(torch.cat(reaching), whole, rtol=1e-5, atol=1e-5)
    short_context = list(long_audio.long_surprisal(asr, paths[1], chunk_s=1.0, context_s=0.5))
    assert torch.equal(short_context[0], reaching[0]) and sum(p.numel() for p in short_context) == 149

    calls, in_parts = [], long_audio.long_surprisal
    monkeypatch.setattr(long_audio, "is_long", functools.partial(long_audio.is_long, context_s=0.5))
    monkeypatch.setattr(long_audio, "long_surprisal", lambda asr, path, chunk_s: calls.append(path.name) or
                        in_parts(asr, path, chunk_s, context_s=0.5))
    asr.encoder.controller.set_parameters(weight=0.0, bias=0.0)  # p_big = sigmoid(shift) on every frame
    asr.set_routing("sampled", seed=0)
    parts = meet_flops_budget(asr, paths, 0.9, long_chunk_s=1.0)
    assert calls == ["long.wav"]
    whole_budget = meet_flops_budget(asr, paths, 0.9, long_chunk_s=0)
    assert calls == ["long.wav"] and parts["frames"] == whole_budget["frames"] == 24 + 149
    assert parts["bias_shift"] == pytest.approx(whole_budget["bias_shift"], abs=1e-6)

@pytest.mark.integration
def test_long_audio_in_parts_matches_whole_file_decoding(tmp_path):
    """The shipped model on 40 s of real speech, decoded in 10 s parts with 8 s of context: the same
    frames, per-frame routing equal away from the joins, the phones equal but for a few near them."""
    import numpy as np
    import soundfile

    from speechbrain.utils.edit_distance import wer_details_for_batch

    from surprisal_cc.decoding.timestamps import phone_limit_s

    shared = require_dev_clean_2()
    assert (default_model_dir() / "model.json").is_file(), "the shipped model is part of the repository"
    flacs = sorted((shared / "LibriSpeech" / "dev-clean-2").rglob("*.flac"))[:8]
    audio = np.concatenate([soundfile.read(str(f), dtype="float32")[0] for f in flacs])[: 16000 * 40]
    path = tmp_path / "long.flac"
    soundfile.write(path, audio, 16000)
    asr = ConditionalASR.from_pretrained()
    whole = asr.transcribe_file(path, long_chunk_s=0)
    progress = []
    parts = asr.transcribe_file(path, long_chunk_s=10, progress=lambda done, total: progress.append((done, total)))
    assert parts.num_frames == whole.num_frames == parts.p_big.numel() and len(progress) >= 3
    assert progress[-1][1] == 40.0 and progress[-1][0] == pytest.approx(40.0, abs=0.03)  # to the last frame
    assert [s[0] for s in parts.segments] == parts.phones
    for a, b in zip(parts.segments, parts.segments[1:]):  # each phone until the next, or for its longest
        limit = phone_limit_s(a[0])
        assert a[2] == b[1] or (a[2] < b[1] and limit is not None and a[2] - a[1] >= limit - 1e-5), (a, b)
    agree = float((parts.use_big == whole.use_big).double().mean())
    assert agree > 0.98, agree
    edits = wer_details_for_batch(["x"], [whole.phones], [parts.phones])[0]["num_edits"]
    assert edits <= 3 * 3, (edits, len(whole.phones))  # 3 joins, a few phones each at most (4 in all here)


def test_a_routing_seed_is_a_whole_number_for_sampled_routing():
    from surprisal_cc.training.labels import phone_set

    asr = ConditionalASR.untrained(phone_set("librispeech"), controller="surprisal", input_features="apc")
    with pytest.raises(ConfigurationError, match="deterministic routing draws nothing"):
        asr.set_routing("deterministic", seed=3)
    assert asr.routing == "deterministic" and not asr.encoder.test_stochastic  # a refused call changes nothing
    assert ConditionalASR.untrained(["AH", "sil"], controller="surprisal", input_features="apc").routing == "deterministic"
    asr.set_routing(None, seed=5)  # a seed asks for sampled routing
    assert (asr.routing, asr.seed, asr.encoder.test_stochastic) == ("sampled", 5, True)
    for seed in (3.5, 2 ** 64, -1, "3", True):
        with pytest.raises(ConfigurationError, match="a routing seed is a whole number"):
            asr.set_routing("sampled", seed=seed)
    asr.set_routing("sampled", seed=np.int64(7))
    assert asr.seed == 7 and type(asr.seed) is int


def test_routing_defaults_to_what_the_controller_can_do():
    """Deterministic by default; a random controller (only a draw routes) is always sampled; a model
    that draws nothing (learned, big-only, ACT) refuses sampled routing."""
    from surprisal_cc.model.nnet import routes_by_chance
    from surprisal_cc.training.labels import phone_set

    labels = phone_set("librispeech")
    assert ConditionalASR.untrained(labels, controller="surprisal", input_features="apc").routing == "deterministic"
    chance = ConditionalASR.untrained(labels, controller="random")
    assert chance.routing == "sampled" and routes_by_chance(chance.encoder) and chance.encoder.routing_draws()
    with pytest.raises(ConfigurationError, match="routes by chance .*'random' controller.* one network on every frame"):
        chance.set_routing("deterministic")
    torch.manual_seed(0)
    out = chance.transcribe_batch(torch.rand(1, 32000) - 0.5)[0]
    assert 0.3 < out.big_fraction < 0.7  # not every frame on one network
    for controller in ("learned", "big_only"):
        fixed = ConditionalASR.untrained(labels, controller=controller)
        assert fixed.routing == "deterministic" and not fixed.encoder.routing_draws()
        with pytest.raises(ConfigurationError, match=f"draws nothing .*{controller} controller"):
            fixed.set_routing("sampled")


def test_conversion_warnings_name_the_callers_line(tmp_path):
    """transcribe_file and load_audio report a resampled file at the user's call, where a warnings filter
    on the caller's module can reach it."""
    import soundfile as sf

    path = tmp_path / "narrow.wav"
    sf.write(path, 0.1 * np.random.default_rng(0).uniform(-1, 1, 8000).astype(np.float32), 8000)
    asr = ConditionalASR.untrained(["AH", "B", "sil"])
    for call in (asr.transcribe_file, asr.load_audio):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call(path)
        assert caught and all(w.filename == __file__ for w in caught), [(w.filename, str(w.message)) for w in caught]


def test_a_new_controller_routed_by_chance_refuses_deterministic_routing(monkeypatch):
    """docs/extending.md: a controller with routes_by_chance = True (and no p_big attribute) is always sampled."""
    from surprisal_cc.model.controllers import CONTROLLERS, Controller

    class CoinController(Controller):
        name, routes_by_chance = "coin", True

        def __init__(self):
            super().__init__()

        def probability(self, features, surprisal, bias_shift=0.0, mask=None):
            return torch.full(features.shape[:2], 0.3)

    monkeypatch.setitem(CONTROLLERS, "coin", CoinController)
    asr = ConditionalASR.untrained(["AH", "sil"], input_features="fbank", controller="coin")
    assert asr.routing == "sampled"
    with pytest.raises(ConfigurationError, match="its 'coin' controller gives the same p_big on every frame"):
        asr.set_routing("deterministic")


def test_forward_is_seeded_like_encode_batch_and_forward_pass_is_not():
    """``forward`` draws sampled routing from the model's seed on every call (as ``encode_batch``) and leaves
    the global RNG as it was; ``passes.forward_pass`` draws from the global RNG, for callers that seed once."""
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="random")
    asr.set_routing("sampled", seed=5)
    wavs = 0.1 * torch.randn(2, 16000, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    first, second = (asr.forward(wavs).output.stats["use_big"] for _ in range(2))
    assert torch.equal(first, second) and torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(asr.encode_batch(wavs), asr.forward(wavs).output.log_probs.float())
    drawn = [passes.forward_pass(asr, wavs).output.stats["use_big"] for _ in range(2)]
    assert not torch.equal(drawn[0], drawn[1])  # 2 x 49 frames drawn at p = 0.5 twice: never the same


def test_forward_and_decode_batch_results_read_by_name_and_unpack_as_before():
    """``forward``/``passes.forward_pass`` return a ``ForwardResult`` and ``passes.decode_batch`` a ``DecodedBatch``: fields by
    name, and the tuples they were before (``out, fbank, frames, surprisal``; ``out, hyps, fbank, frames,
    surprisal, seconds``)."""
    from surprisal_cc.inference.asr import DecodedBatch, ForwardResult

    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="surprisal")
    wavs = 0.1 * torch.randn(2, 16000, generator=torch.Generator().manual_seed(1))
    samples = torch.tensor([16000, 8000])
    result = asr.forward(wavs, samples)
    assert isinstance(result, ForwardResult) and isinstance(passes.forward_pass(asr, wavs, samples), ForwardResult)
    assert result.output.log_probs.shape == (2, 49, 4) and result.frames.tolist() == [49, 24]
    assert result.surprisal.shape == (2, 49) and result.fbank.shape == (2, 49, 80)
    _, _, frames, _ = result
    assert frames.tolist() == [49, 24]
    with passes.seeded_routing(asr):
        batch = passes.decode_batch(asr, wavs, samples)
    assert isinstance(batch, DecodedBatch) and batch.frames.tolist() == [49, 24] and batch.seconds > 0
    assert len(batch.hyps) == 2 and batch.output.log_probs.shape == (2, 49, 4) and batch.fbank.shape == (2, 49, 80)
    _, hyps, _, _, _, seconds = batch
    assert len(hyps) == 2 and seconds > 0


def test_a_saved_model_decodes_with_its_beam_size_and_blank_penalty(tmp_path):
    """``save`` records the decoding as set (beam size, blank penalty) and loading decodes with it."""
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
    asr.beam_search.beam_size, asr.beam_search.blank_penalty = 4, 0.75
    loaded = ConditionalASR.from_pretrained(asr.save(tmp_path / "model"))
    assert (loaded.beam_search.beam_size, loaded.beam_search.blank_penalty) == (4, 0.75)


def _with_window(asr: ConditionalASR, frame_length_ms: float) -> ConditionalASR:
    """``asr`` with another analysis window (its weights, its APC model's)."""
    config = {**asr.config, "features": {**asr.config["features"], "frame_length_ms": frame_length_ms}}
    return ConditionalASR(config, asr.encoder, asr.apc.apc if asr.apc is not None else None)


def test_audio_too_short_for_the_models_window_is_refused_in_one_line_naming_the_file(tmp_path):
    """A 50 ms window: 37.5 ms passes the 25 ms check made where no model is known, and is refused by every
    reader of a loaded model in one line naming the file, before any filterbank; min_samples gives one frame."""
    import soundfile as sf

    from surprisal_cc.data.errors import DataPreparationError
    from surprisal_cc.inference.long_audio import decode_long, long_surprisal

    torch.manual_seed(0)
    asr = _with_window(ConditionalASR.untrained(["AH", "B", "sil"], controller="surprisal"), 50.0)
    least = asr.feature_config.min_samples
    assert least == 800
    short, enough = tmp_path / "short.wav", tmp_path / "enough.wav"
    sf.write(short, 0.1 * np.random.default_rng(0).uniform(-1, 1, 600), 16000)  # 37.5 ms
    sf.write(enough, 0.1 * np.random.default_rng(1).uniform(-1, 1, least), 16000)
    short_44k = tmp_path / "short_44k.wav"  # 799 samples at 16 kHz: each reader gives the file's own 49.89 ms
    sf.write(short_44k, 0.1 * np.random.default_rng(2).uniform(-1, 1, 2200), 44100)
    for path, ms in ((short, "37.5"), (short_44k, "49.89")):
        line = (f"{path}: too short ({ms} ms; the model's shortest usable audio is 50 ms, 800 samples at 16000 Hz: "
                "one frame)")
        assert check_audio_each([path], **asr.feature_config.audio_limits) == [(str(path), None, line.split(": ", 1)[1])]
        calls = {"transcribe_file": lambda: asr.transcribe_file(path),
                 "transcribe_checked_file": lambda: transcribe_checked_file(asr, path),
                 "load_audio": lambda: asr.load_audio(path), "read_audio": lambda: asr.feature_config.read_audio(path),
                 "frame_surprisal": lambda: list(frame_surprisal(asr, [enough, path])),
                 "decode_long": lambda: decode_long(asr, path, chunk_s=1.0, context_s=0.5),
                 "long_surprisal": lambda: list(long_surprisal(asr, path, chunk_s=1.0, context_s=0.5))}
        for name, call in calls.items():
            with pytest.raises(BadAudioError) as err:
                call()
            assert str(err.value) == line, name
        with pytest.raises(BadAudioError) as err:
            meet_flops_budget(asr, [enough, path], 0.9)
        assert line in str(err.value).splitlines()
    batch_line = (r"^waveform\(s\) 1 of the batch \(600 samples at 16000 Hz\) are shorter than the model's shortest "
                  r"usable audio, 50 ms \(800 samples at 16000 Hz: one frame\)$")
    with pytest.raises(DataPreparationError, match=batch_line):
        asr.transcribe_batch([torch.zeros(least), torch.zeros(600)])
    with pytest.raises(DataPreparationError, match=batch_line):  # the same rule where filterbanks are asked for
        passes.filterbanks(asr, torch.zeros(2, least), torch.tensor([least, 600]))
    assert asr.transcribe_file(enough).num_frames == 1
    assert asr.transcribe_batch([asr.load_audio(enough)])[0].num_frames == 1
    # 2203 samples at 44.1 kHz resample to 800: one frame whether read from a file or given as a waveform
    barely = 0.1 * np.random.default_rng(3).uniform(-1, 1, 2203).astype(np.float32)
    sf.write(tmp_path / "barely_44k.wav", barely, 44100, subtype="FLOAT")
    assert asr.feature_config.read_audio(tmp_path / "barely_44k.wav").numel() == 800
    assert asr.transcribe_batch(torch.from_numpy(barely), sample_rate=44100)[0].num_frames == 1
    assert decode_long(asr, enough, chunk_s=1.0, context_s=0.5)["num_frames"] == 1
    assert [part.numel() for part in long_surprisal(asr, enough, chunk_s=1.0, context_s=0.5)] == [1]


def test_level_sensitivity_tool_scores_a_corpus_at_each_gain(tmp_path, monkeypatch):
    """recipes/MiniLibriSpeech/level_sensitivity.py: one PER per gain (a loud gain is clipped, not refused),
    and the RMS levels of the corpus and of the reference folder."""
    from data_fixtures import make_librispeech_fixture
    from surprisal_cc.data.phones import LIBRISPEECH_PHONES

    monkeypatch.syspath_prepend(str(REPO / "recipes" / "MiniLibriSpeech"))
    import level_sensitivity

    root = make_librispeech_fixture(tmp_path, {"dev-clean-2": {"1-2": ["HELLO WORLD", "AND"]}})
    model = tmp_path / "model"
    torch.manual_seed(0)
    ConditionalASR.untrained(LIBRISPEECH_PHONES, controller="big_only").save(model)
    subset = root / "LibriSpeech" / "dev-clean-2"
    result = level_sensitivity.main([str(subset), "--model", str(model), "--gains", "0", "-20", "40",
                                     "--reference", str(subset)])
    assert list(result["per_by_gain_db"]) == ["+0", "-20", "+40"] and result["utterances"] == 2
    assert all(per >= 0 for per in result["per_by_gain_db"].values())
    assert result["reference"]["files"] == 2 and result["reference"]["rms_dbfs_median"] == result["rms_dbfs_median"]


def absolute_paths(value) -> list:
    """Every string in a JSON value that is an absolute path (a model card must name none).

    >>> absolute_paths({"a": ["/x/y", "rel/z"], "b": {"c": "C:/w"}, "d": 1})
    ['/x/y']
    """
    if isinstance(value, dict):
        return [p for v in value.values() for p in absolute_paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in absolute_paths(v)]
    return [value] if isinstance(value, str) and os.path.isabs(value) else []


def test_the_shipped_model_card_names_no_machine_paths():
    """Its provenance is repository-relative paths, commits and fingerprints."""
    config = json.loads((REPO / "surprisal_cc" / "pretrained" / "model.json").read_text())
    assert not absolute_paths(config)
    assert config["source"]["run_dir"].startswith("results/") and config["source"]["commit"]

