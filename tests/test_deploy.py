"""The ONNX export and runtime (surprisal_cc.deploy) against the PyTorch model: the numpy front end and
resampler, every encoder kind exported and run (per-frame log-probabilities, routing, phones, FLOPs counted
from what ran), long files in parts, the shipped model on a fixture corpus (PER), bad input, and the
runtime's imports (no torch). The dev-clean-2 comparison is an integration test."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from data_fixtures import REPO, require_dev_clean_2, tone

from surprisal_cc.data.errors import BadAudioError
from surprisal_cc.deploy.audio import resample
from surprisal_cc.deploy.bundle import BundleError
from surprisal_cc.deploy.export import export_onnx
from surprisal_cc.deploy.frontend import fbank_numpy
from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.deploy.runtime import OnnxASR, context_rows
from surprisal_cc.inference.asr import ConditionalASR
from surprisal_cc.model.features import FilterbankFrontEnd
from surprisal_cc.model.model_folder import default_model_dir

LOG_PROB_TOLERANCE = 1e-3  # largest per-frame log-probability difference allowed (dev-clean-2: 5.7e-4 at most, median 3.8e-5)
LABELS = ["AH", "B", "S", "sil"]


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """Tones with noise and pauses: frames that differ, so that routing varies."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 16000)
    t = np.arange(n) / 16000
    wav = 0.2 * np.sin(2 * np.pi * (150 + 100 * np.sin(3 * t)) * t) + 0.05 * rng.standard_normal(n)
    wav *= (np.sin(2 * np.pi * 1.3 * t) > -0.3)
    return wav.astype(np.float32)


def assert_same(asr: ConditionalASR, onnx: OnnxASR, wav_path: Path) -> None:
    """Both runtimes on one file: log-probabilities within the tolerance, the same routing, phones, phone
    times and FLOPs per frame (each counted from what ran)."""
    a = onnx.transcribe_file(wav_path, keep_log_probs=True)
    b = asr.transcribe_file(wav_path)
    log_probs = asr.forward(asr.load_audio(wav_path)[None]).output.log_probs[0].numpy()
    assert a.num_frames == b.num_frames == log_probs.shape[0]
    assert np.abs(a.log_probs - log_probs).max() < LOG_PROB_TOLERANCE
    if b.use_big is not None:
        assert np.array_equal(a.use_big, b.use_big.numpy())
        assert np.allclose(a.p_big, b.p_big.numpy(), atol=1e-5)
    if b.steps is not None:
        assert np.array_equal(a.steps, b.steps.numpy())
    assert a.phones == b.phones and a.segments == b.segments
    assert a.flops_components.keys() == b.flops_components.keys()
    assert a.flops_per_frame == pytest.approx(b.flops_per_frame, rel=1e-12)


def test_the_numpy_front_end_is_torchaudios_kaldi_fbank():
    front_end = FilterbankFrontEnd()
    for wav in (speech_like(1.3), tone(0.5).astype(np.float32), np.zeros(400, np.float32), np.zeros(399, np.float32)):
        ours = fbank_numpy(wav, FeatureConfig())
        theirs = front_end.single(torch.from_numpy(wav)).numpy()
        assert ours.shape == theirs.shape
        if ours.size:
            assert np.abs(ours - theirs).max() < 1e-3


def test_the_numpy_resampler_is_torchaudios():
    import torchaudio

    wav = speech_like(0.5)
    for rate in (8000, 22050, 44100, 48000):
        signal = resample(wav, 16000, rate)  # there and back: the same kernel both ways
        theirs = torchaudio.functional.resample(torch.from_numpy(signal), rate, 16000).numpy()
        assert np.abs(resample(signal, rate, 16000) - theirs).max() < 1e-4


def test_context_rows_are_the_pytorch_windows():
    from surprisal_cc.model.encoders import gather_frames

    x = torch.randn(1, 7, 3)
    rows = np.array([0, 3, 6])
    theirs = gather_frames(x, torch.tensor([7]), torch.zeros(3, dtype=torch.long), torch.from_numpy(rows), 5)
    assert np.array_equal(context_rows(x[0].numpy(), rows, 5), theirs.numpy())


@pytest.fixture(scope="module")
def audio(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("audio") / "utt.flac"
    sf.write(path, speech_like(2.2), 16000)
    return path


@pytest.mark.parametrize("encoder, options", [
    ("conditional", {"controller": "learned"}),
    ("conditional", {"controller": "big_only"}),
    ("conditional", {"controller": "surprisal", "architecture": "model1"}),
    ("conditional", {"controller": "small_only", "architecture": "model3"}),
    ("act", {}),
    ("pondernet", {}),
    ("pondernet", {"adaptive_options": {"pondernet": {"inference": "threshold"}}}),
    ("pondernet", {"adaptive_options": {"pondernet": {"inference": "expected"}}}),
])
def test_every_deployable_encoder_runs_as_in_pytorch(tmp_path, audio, encoder, options):
    torch.manual_seed(0)
    asr = ConditionalASR.untrained(LABELS, encoder=encoder, **options)
    folder = export_onnx(asr.save(tmp_path / "model"))
    assert_same(ConditionalASR.from_pretrained(folder), OnnxASR.from_folder(folder), audio)


def test_a_random_controller_is_sampled_and_charged_for_what_ran(tmp_path, audio):
    asr = ConditionalASR.untrained(LABELS, controller="random")
    onnx = OnnxASR.from_folder(export_onnx(asr.save(tmp_path / "model")), seed=5)
    first, again = onnx.transcribe_file(audio), onnx.transcribe_file(audio)
    assert onnx.routing == "sampled" and np.array_equal(first.use_big, again.use_big)
    assert 0 < first.big_fraction < 1
    macs = onnx.macs
    expected = macs["pre_net"] + macs["post_net"] + first.big_fraction * macs["big_net"] \
        + (1 - first.big_fraction) * macs["small_net"]
    assert first.flops_per_frame == pytest.approx(expected)
    with pytest.raises(ValueError, match="routes by chance"):
        onnx.set_routing("deterministic")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Path:
    """The shipped model with its graphs, in a copy."""
    return export_onnx(default_model_dir(), tmp_path_factory.mktemp("shipped") / "model")


def test_the_shipped_model_runs_as_in_pytorch(shipped, audio):
    asr = ConditionalASR.from_pretrained(shipped)
    assert_same(asr, OnnxASR.from_folder(shipped), audio)
    asr.set_bias_shift(-0.7)
    onnx = OnnxASR.from_folder(shipped)
    onnx.set_bias_shift(-0.7)
    assert_same(asr, onnx, audio)


def test_long_files_in_parts_as_in_pytorch(shipped, tmp_path):
    from surprisal_cc.deploy import parts
    from surprisal_cc.inference import long_audio

    assert (parts.CHUNK_S, parts.CONTEXT_S, parts.SEAM_WINDOW_S, parts.PROGRESS_AFTER_S) == \
        (long_audio.CHUNK_S, long_audio.CONTEXT_S, long_audio.SEAM_WINDOW_S, long_audio.PROGRESS_AFTER_S)
    path = tmp_path / "long.wav"
    sf.write(path, speech_like(5.0, seed=1), 16000)
    ours = parts.decode_long(OnnxASR.from_folder(shipped), path, chunk_s=1.0, context_s=0.5)
    theirs = long_audio.decode_long(ConditionalASR.from_pretrained(shipped), path, chunk_s=1.0, context_s=0.5)
    assert ours["num_frames"] == theirs["num_frames"] and ours["phones"] == theirs["phones"]
    assert ours["segments"] == theirs["segments"]
    assert np.array_equal(ours["use_big"], theirs["use_big"].numpy())
    assert ours["flops_per_frame"] == pytest.approx(theirs["flops_per_frame"], rel=1e-12)


def test_the_shipped_models_per_on_a_fixture_corpus_is_pytorchs(shipped, tmp_path):
    """The PER of a small corpus through both runtimes, scored as evaluate scores it."""
    from benchmarks.onnx_equivalence import compare

    corpus = tmp_path / "LibriSpeech" / "dev-fixture" / "1" / "2"
    corpus.mkdir(parents=True)
    lines = []
    for i, words in enumerate(["SHE HAD", "A CAT", "THE BUS"]):
        sf.write(corpus / f"1-2-{i:04d}.flac", speech_like(1.0 + 0.4 * i, seed=i), 16000)
        lines.append(f"1-2-{i:04d} {words}\n")
    (corpus / "1-2.trans.txt").write_text("".join(lines))
    result = compare(shipped, str(corpus.parents[1]), None)
    assert result["utterances"] == 3 and result["utterances_with_different_phones"] == 0
    assert result["routing_agreement"] == 1.0 and result["max_abs_log_prob_diff"] < LOG_PROB_TOLERANCE
    assert result["per"]["onnx"] == pytest.approx(result["per"]["pytorch"], abs=1e-9)
    assert result["flops_per_frame"]["utterances_differing"] == 0


def test_bad_input_is_one_clear_line(shipped, tmp_path, audio, capsys):
    from surprisal_cc.deploy.command import transcribe_main

    copy = tmp_path / "copy"
    copy.mkdir()
    for item in shipped.iterdir():
        if item.is_file():
            (copy / item.name).write_bytes(item.read_bytes())
    with pytest.raises(BundleError, match=r"onnx/\w+\.onnx: missing \(the \w+ graph\)"):
        OnnxASR.from_folder(copy)
    with pytest.raises(BundleError, match="no ONNX graphs"):
        OnnxASR.from_folder(default_model_dir()) if not (default_model_dir() / "onnx.json").exists() else \
            OnnxASR.from_folder(tmp_path)
    (copy / "onnx").symlink_to(shipped / "onnx")
    OnnxASR.from_folder(copy)
    config = json.loads((copy / "model.json").read_text())
    (copy / "model.json").write_text(json.dumps({**config, "beam_size": 4}))
    with pytest.raises(BundleError, match="another version of the model"):
        OnnxASR.from_folder(copy)
    (copy / "onnx.json").write_text("{")
    with pytest.raises(BundleError, match="onnx.json: unreadable"):
        OnnxASR.from_folder(copy)

    short = tmp_path / "short.wav"
    sf.write(short, np.zeros(100, np.float32), 16000)
    capsys.readouterr()
    assert transcribe_main([str(audio), str(short), str(tmp_path / "missing.flac"), "--model", str(shipped)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {short}: too short") and err[1] == f"error: {tmp_path / 'missing.flac'}: file does not exist"
    assert transcribe_main([str(audio), "--model", str(copy)]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(BadAudioError):
        OnnxASR.from_folder(shipped).transcribe_file(short)


def test_transcribe_main_prints_what_transcribe_prints(shipped, audio, capsys):
    from surprisal_cc.cli.commands import main
    from surprisal_cc.deploy.command import transcribe_main

    def without_rtf(text: str) -> str:
        return text.rsplit(", RTF", 1)[0]

    assert main(["transcribe", str(audio), "--model", str(shipped)]) == 0
    theirs = capsys.readouterr().out
    assert transcribe_main([str(audio), "--model", str(shipped)]) == 0
    ours = capsys.readouterr().out
    assert without_rtf(ours) == without_rtf(theirs)
    assert transcribe_main([str(audio), "--model", str(shipped), "--format", "ctm"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("utt 1 ")
    assert transcribe_main([str(audio), "--model", str(shipped), "--json", "--decoder", "greedy"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["backend"] == "onnx" and record["decoder"] == "greedy" and record["phones"]


def test_the_runtime_imports_no_torch():
    """The deploy runtime, in a fresh interpreter, loads neither torch, torchaudio, speechbrain nor scipy."""
    code = ("import sys, surprisal_cc.deploy.runtime, surprisal_cc.deploy.command, surprisal_cc.deploy.parts; "
            "from surprisal_cc.deploy import OnnxASR; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchaudio', 'speechbrain', 'scipy')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]"]


@pytest.mark.integration
def test_dev_clean_2_through_onnx_is_pytorch():
    """The shipped model on dev-clean-2 (1089 utterances) through both runtimes: per-frame log-probabilities
    within the tolerance, every frame routed alike, the phones of at least 99.9 % of the utterances the same,
    the FLOPs per frame equal, and the PER equal to 0.01 (docs/results/onnx_equivalence.json)."""
    from benchmarks.onnx_equivalence import compare

    root = require_dev_clean_2()
    labels = root / "phone_labels" / "dev-clean-2_mfa.csv"
    shipped = export_onnx(default_model_dir(), Path(os.environ.get("TMPDIR", "/tmp")) / "surprisal_cc_onnx_dev_clean_2")
    result = compare(shipped, str(root / "LibriSpeech" / "dev-clean-2"), str(labels))
    assert result["utterances"] == 1089
    assert result["max_abs_log_prob_diff"] < LOG_PROB_TOLERANCE and result["routing_agreement"] == 1.0
    assert result["same_phones_fraction"] >= 0.999
    assert result["flops_per_frame"]["onnx"] == pytest.approx(result["flops_per_frame"]["pytorch"], rel=1e-9)
    assert abs(result["per"]["onnx"] - result["per"]["pytorch"]) <= 0.01


def test_the_command_lines_namespace_is_taken_and_torch_only_options_refused(shipped, audio, capsys):
    """What ``cmd_transcribe`` hands over for ``--backend onnx``: the ``transcribe`` parser's namespace."""
    from surprisal_cc.cli.commands import build_parser
    from surprisal_cc.deploy.command import transcribe_args
    from surprisal_cc.errors import UsageError

    args = build_parser("transcribe").parse_args(["transcribe", str(audio), "--model", str(shipped), "--json"])
    assert transcribe_args(args) == 0 and json.loads(capsys.readouterr().out)["backend"] == "onnx"
    args = build_parser("transcribe").parse_args(["transcribe", str(audio), "--model", str(shipped), "--plot", "a.png"])
    with pytest.raises(UsageError, match="--plot is an option of the PyTorch runtime"):
        transcribe_args(args)
