"""Tests for surprisal_cc.inference.long_audio: a long file read part by part, at any rate, in bounded memory."""
from __future__ import annotations

import argparse

import numpy as np
import pytest
import soundfile as sf
import torch

from surprisal_cc.inference import long_audio
from surprisal_cc.checks import chunk_seconds
from surprisal_cc.data.audio import read_audio
from surprisal_cc.errors import ConfigurationError
from numerics import assert_close_up_to_summation_order


@pytest.mark.parametrize("rate, channels", [(44100, 2), (8000, 1)])
def test_a_file_at_another_rate_is_read_part_by_part_as_resampling_it_whole_gives_it(rate, channels, tmp_path,
                                                                                     monkeypatch):
    """Each part reads only its own samples (and a few for the resampling filter), never the whole file;
    the parts join into what resampling the whole file gives."""
    path = tmp_path / f"{rate}.wav"
    sf.write(path, np.random.default_rng(0).uniform(-0.5, 0.5, (3 * rate + 77, channels)), rate, subtype="FLOAT")
    whole = read_audio(path)
    read, real_read = [], sf.SoundFile.read
    monkeypatch.setattr(sf.SoundFile, "read", lambda self, *args, **kwargs: read.append(
        len(out := real_read(self, *args, **kwargs))) or out)
    reader = long_audio._Reader(path, 16000)
    part = 1000
    try:
        parts = [reader.read(start, min(start + part, reader.total)) for start in range(0, reader.total, part)]
    finally:
        reader.close()
    assert reader.total == whole.numel() and [p.numel() for p in parts[:-1]] == [part] * (len(parts) - 1)
    assert_close_up_to_summation_order(torch.cat(parts), whole)  # the resampling filter's sums, in parts
    assert max(read) < (part + 2000) * rate / 16000, read  # the part, a margin for the filter: not the file


def test_a_long_file_at_another_rate_decodes_as_its_16k_copy(tmp_path):
    """decode_long of a 44.1 kHz file in 1 s parts: the frames, phones and surprisal of the 16 kHz audio
    that resampling it whole gives."""
    from surprisal_cc.inference import ConditionalASR

    torch.manual_seed(0)
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="surprisal")
    native = tmp_path / "native.wav"
    sf.write(native, np.random.default_rng(1).uniform(-0.5, 0.5, 44100 * 4), 44100, subtype="FLOAT")
    copy = tmp_path / "copy.wav"
    sf.write(copy, read_audio(native).numpy(), 16000, subtype="FLOAT")
    parts = long_audio.decode_long(asr, native, chunk_s=1.0, context_s=0.5)
    expected = long_audio.decode_long(asr, copy, chunk_s=1.0, context_s=0.5)
    assert parts["num_frames"] == expected["num_frames"] == 199
    # the surprisal, not the phones: an untrained model's near-uniform output may decode otherwise for
    # inputs 1e-7 apart, and by how much they differ depends on the CPU's float summation order
    torch.testing.assert_close(parts["surprisal"], expected["surprisal"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seconds", [0.01, -5.0, float("nan"), "60"])
def test_part_seconds_are_checked_as_the_command_line_checks_them(seconds):
    assert long_audio.part_seconds(None) == long_audio.CHUNK_S and long_audio.part_seconds(0) == 0.0
    with pytest.raises(ConfigurationError, match=r"^long_chunk_s must be 0 \(whole files\) or at least 1 second"):
        long_audio.part_seconds(seconds)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be 0 \(whole files\) or at least 1 second"):
        chunk_seconds(str(seconds) if seconds != "60" else "sixty")


def test_an_input_level_scales_every_part_by_the_whole_files_gain(tmp_path, monkeypatch):
    """With an input level, a long file's parts are scaled as the whole file is (one gain): a quiet pause
    keeps the features whole-file decoding gives it, not raised to speech level on its own."""
    from surprisal_cc.inference import ConditionalASR

    torch.manual_seed(0)
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="surprisal")
    asr.set_input_level(-26.0)
    rng = np.random.default_rng(2)
    loud, pause = rng.uniform(-0.1, 0.1, 16000 * 2), rng.uniform(-1e-3, 1e-3, 16000 * 3)  # pause 40 dB quieter
    path = tmp_path / "pause.wav"
    sf.write(path, np.concatenate([loud, pause]), 16000, subtype="FLOAT")
    parts = long_audio.decode_long(asr, path, chunk_s=1.0, context_s=0.5, keep_fbank=True)
    whole = asr.transcribe_file(path, long_chunk_s=0)
    assert parts["fbank"].shape == whole.fbank.shape
    torch.testing.assert_close(parts["fbank"], whole.fbank, rtol=1e-4, atol=1e-3)

    gains = []
    from surprisal_cc.inference import passes

    filterbanks = passes.filterbanks
    monkeypatch.setattr(passes, "filterbanks", lambda model, wavs, samples, gain=None: gains.append(gain)
                        or filterbanks(model, wavs, samples, gain=gain))
    assert len(list(long_audio.long_surprisal(asr, path, chunk_s=1.0, context_s=0.5))) == 5
    assert len(set(gains)) == 1 and gains[0] is not None and gains[0] > 1  # the whole file's gain, on every part
