"""Waveforms in memory, as the inference runtime takes them: a padded batch or a list of 1-D waveforms as
float (B, S) waveforms at the model's rate with their sample counts (:func:`batch_waveforms`; int16 scaled,
far out-of-range float refused: :func:`as_waveforms`), and a batch scaled to a level (:func:`scaled_to_level`).
Audio files are :mod:`surprisal_cc.data.audio`'s.
"""
from __future__ import annotations

import os
import warnings
from typing import Optional, Tuple

import torch

from surprisal_cc.data.audio import MAX_PEAK, TARGET_SAMPLE_RATE, resample, resampled_length, sample_rate_hz
from surprisal_cc.data.errors import DataPreparationWarning

MAX_LEVEL_GAIN_DB = 40.0  # the most scaled_to_level raises a waveform (-26 dBFS from -66)


#: Widest (samples, channels) layout :func:`as_waveforms` recognises as one recording's channels.
MAX_CHANNELS = 8


def as_waveforms(wavs, name: str = "wavs") -> torch.Tensor:
    """(B, S) float waveforms in [-1, 1] from a (B, S) or (S,) tensor or array; int16 is scaled by
    1/32768, and float audio far outside [-1, 1] (int16-scaled, say) is refused. ``name``: how the
    errors call the input.

    Example
    -------
    >>> as_waveforms(torch.tensor([0, 16384, -32768], dtype=torch.int16))
    tensor([[ 0.0000,  0.5000, -1.0000]])
    >>> as_waveforms(torch.tensor([0.0, 1200.0]))
    Traceback (most recent call last):
        ...
    ValueError: wavs must be audio in [-1, 1], but its largest magnitude is 1200 (int16-scaled?): divide by 32768
    >>> as_waveforms(torch.tensor([0.0, float("nan")]))
    Traceback (most recent call last):
        ...
    ValueError: wavs hold NaN or infinite samples
    >>> as_waveforms([torch.zeros(3), torch.zeros(2)])
    Traceback (most recent call last):
        ...
    ValueError: wavs is a list of 2 waveforms: pad them into one (batch, samples) tensor first, e.g. wavs, wav_lens = speechbrain.utils.data_utils.batch_pad_right(wavs)
    >>> as_waveforms(torch.tensor([0.0, 3.0]))
    Traceback (most recent call last):
        ...
    ValueError: wavs must be audio in [-1, 1], but its largest magnitude is 3: scale it into [-1, 1]
    """
    if isinstance(wavs, (list, tuple)) and wavs and all(getattr(w, "ndim", 0) >= 1 for w in wavs):
        raise ValueError(f"{name} is a list of {len(wavs)} waveforms: pad them into one (batch, samples) tensor "
                         "first, e.g. wavs, wav_lens = speechbrain.utils.data_utils.batch_pad_right(wavs)")
    wavs = torch.as_tensor(wavs)
    if wavs.dtype == torch.int16:
        wavs = wavs.float() / 32768.0
    elif not wavs.is_floating_point():
        raise ValueError(f"{name} must be float audio in [-1, 1] (or int16), got {wavs.dtype}")
    if wavs.ndim == 1:
        wavs = wavs[None]
    if wavs.ndim != 2:
        raise ValueError(f"{name} must be (batch, samples), got shape {tuple(wavs.shape)}")
    if wavs.shape[1] <= MAX_CHANNELS < wavs.shape[0]:
        raise ValueError(f"{name} of shape {tuple(wavs.shape)} look like (samples, channels): give (batch, samples) "
                         "mono audio, e.g. wavs.mean(dim=1)[None] to downmix one recording")
    if wavs.numel() == 0:
        raise ValueError(f"{name} hold no audio (shape {tuple(wavs.shape)})")
    wavs = wavs.detach()
    if not bool(torch.isfinite(wavs).all()):
        raise ValueError(f"{name} hold NaN or infinite samples")
    peak = float(wavs.abs().max())
    if peak > MAX_PEAK:
        # int16 values stored as float reach hundreds or thousands; a little over 1 is clipping or a gain
        hint = "(int16-scaled?): divide by 32768" if peak > 256 else ": scale it into [-1, 1]"
        raise ValueError(f"{name} must be audio in [-1, 1], but its largest magnitude is {peak:g}"
                         + (" " if hint.startswith("(") else "") + hint)
    return wavs


def sample_counts(wavs: torch.Tensor, wav_lens: Optional[torch.Tensor]) -> torch.Tensor:
    """(B,) sample counts: ``wav_lens`` relative in (0, 1] (floating point) or sample counts (integers).

    Example
    -------
    >>> sample_counts(torch.zeros(2, 100), torch.tensor([1.0, 0.5])).tolist()
    [100, 50]
    >>> sample_counts(torch.zeros(2, 100), torch.tensor([100, 20])).tolist()
    [100, 20]
    """
    batch, width = wavs.shape[0], wavs.shape[1]
    if wav_lens is None:
        return torch.full((batch,), width, dtype=torch.long)
    lens = torch.as_tensor(wav_lens).detach().cpu()
    if lens.shape != (batch,):
        raise ValueError(f"wav_lens must have one length per waveform ({batch}), got shape {tuple(lens.shape)}")
    if not lens.is_floating_point() and width > 1 and bool((lens <= 1).all()):
        raise ValueError(f"integer wav_lens are read as sample counts, and {lens.tolist()} would keep at most one "
                         "sample: give relative lengths as floating point (torch.tensor([1.0, 0.5]))")
    if lens.is_floating_point():
        if bool(((lens <= 0) | (lens > 1 + 1e-6)).any()):
            raise ValueError(f"relative wav_lens must lie in (0, 1] (SpeechBrain's convention), got {lens.tolist()}; "
                             "give sample counts as num_samples=")
        return (lens.double() * width).round().long().clamp(1, width)
    if bool(((lens < 1) | (lens > width)).any()):
        raise ValueError(f"sample counts must lie in [1, {width}] (the padded width), got {lens.tolist()}")
    return lens.long()


def batch_waveforms(wavs, wav_lens: Optional[torch.Tensor] = None, num_samples: Optional[torch.Tensor] = None,
                    sample_rate: Optional[int] = None, rate: int = TARGET_SAMPLE_RATE,
                    stacklevel: int = 2) -> Tuple[torch.Tensor, torch.Tensor]:
    """(B, S) float waveforms at ``rate`` Hz and (B,) sample counts, from a padded batch (``wavs`` with
    relative ``wav_lens`` or absolute ``num_samples``, at ``sample_rate``; None: ``rate``) or a list of
    1-D waveforms, padded here; int16 audio is scaled (:func:`as_waveforms`). Resampled counts are those
    :func:`resample` makes of each waveform alone (:func:`resampled_length`), as of a file. ValueError for
    files instead of waveforms, lengths given twice or out of range; a :class:`DataPreparationWarning`
    (``stacklevel`` as :func:`warnings.warn`'s) for audio below ``rate``. No length check: a model's
    filterbanks refuse waveforms too short for one frame (:func:`refuse_short_waveforms`).

    Example
    -------
    >>> wavs, samples = batch_waveforms([torch.zeros(800), torch.zeros(400)])
    >>> tuple(wavs.shape), samples.tolist()
    ((2, 800), [800, 400])
    >>> wavs, samples = batch_waveforms(torch.zeros(2, 800), num_samples=torch.tensor([800, 400]), sample_rate=32000)
    >>> tuple(wavs.shape), samples.tolist()
    ((2, 400), [400, 200])
    """
    if isinstance(wavs, (str, os.PathLike)) or (isinstance(wavs, (list, tuple)) and wavs
                                                 and isinstance(wavs[0], (str, os.PathLike))):
        raise ValueError("transcribe_batch and encode_batch take waveforms, not files: transcribe a file with "
                         "transcribe_file, or read it with load_audio first")
    if isinstance(wavs, (list, tuple)) and not wavs:
        raise ValueError("wavs is an empty list: give at least one waveform")
    if isinstance(wavs, (list, tuple)) and wavs and all(isinstance(w, (list, tuple)) or getattr(w, "ndim", 0) >= 1
                                                        for w in wavs):  # waveforms, not numbers
        if wav_lens is not None or num_samples is not None:
            raise ValueError("a list of waveforms carries its own lengths: give no wav_lens or num_samples")
        listed = [as_waveforms(w, f"wavs[{i}]") for i, w in enumerate(wavs)]  # each scaled on its own
        if any(w.shape[0] != 1 for w in listed):
            shapes = [tuple(torch.as_tensor(w).shape) for w in wavs]
            raise ValueError(f"wavs is a list of waveforms of shapes {shapes[:4]}{' ...' if len(shapes) > 4 else ''}: "
                             "give each as 1-D (samples,) mono audio, e.g. w.mean(dim=0) to downmix")
        num_samples = torch.tensor([w.shape[1] for w in listed])
        wavs = torch.nn.utils.rnn.pad_sequence([w[0] for w in listed], batch_first=True)
    wavs = as_waveforms(wavs)
    if num_samples is not None:
        if wav_lens is not None:
            raise ValueError("give wav_lens (relative) or num_samples (absolute), not both")
        counts = torch.as_tensor(num_samples)
        if counts.is_floating_point() and not bool((counts == counts.round()).all()):
            raise ValueError(f"num_samples are whole numbers of samples, got {counts.tolist()}; relative "
                             "lengths go in wav_lens")
        wav_lens = counts.long()
    samples = sample_counts(wavs, wav_lens)
    given_rate = rate if sample_rate is None else sample_rate_hz(sample_rate)
    if given_rate < rate:  # as warn_converted says it of files
        warnings.warn(f"audio at {given_rate} Hz has no content above {given_rate // 2} Hz, where speech at {rate} Hz "
                      "(the model's training audio) has it; expect a higher error rate", DataPreparationWarning,
                      stacklevel=stacklevel)
    if given_rate != rate:
        wavs = resample(wavs, given_rate, rate)
        samples = torch.tensor([resampled_length(n, given_rate, rate) for n in samples.tolist()], dtype=torch.long)
    return wavs, samples


def scaled_to_level(wavs: torch.Tensor, samples: torch.Tensor, dbfs: float) -> torch.Tensor:
    """Each waveform of the padded batch ``wavs`` (B, S) scaled so that the RMS of its first ``samples[b]``
    samples is ``dbfs`` dB relative to full scale, by at most :data:`MAX_LEVEL_GAIN_DB` (near-silence stays
    quiet, not noise at speech level); silent ones (RMS under -100 dBFS) are left as they are.

    Example
    -------
    >>> out = scaled_to_level(torch.tensor([[0.01, -0.01, 0.0], [0.0, 0.0, 0.0]]), torch.tensor([2, 3]), -20.0)
    >>> [round(v, 3) for v in out[0].tolist()], out[1].tolist()
    ([0.1, -0.1, 0.0], [0.0, 0.0, 0.0])
    """
    real = torch.arange(wavs.shape[1])[None, :] < samples.to(wavs.device)[:, None]
    energy = (wavs.double() ** 2 * real).sum(dim=1) / samples.clamp(min=1).to(wavs.device)
    return (wavs.double() * level_gain(energy.sqrt(), dbfs)[:, None]).to(wavs.dtype)


def level_gain(rms: torch.Tensor, dbfs: float) -> torch.Tensor:
    """The gains that bring signals of RMS ``rms`` (float64) to ``dbfs`` dB relative to full scale, as
    :func:`scaled_to_level` applies them: at most :data:`MAX_LEVEL_GAIN_DB`, and 1 for a silent signal
    (RMS under -100 dBFS).

    Example
    -------
    >>> level_gain(torch.tensor([0.01, 1e-4, 0.0], dtype=torch.float64), -20.0).tolist()
    [10.0, 100.0, 1.0]
    """
    gain = ((10 ** (dbfs / 20)) / rms.clamp(min=1e-5)).clamp(max=10 ** (MAX_LEVEL_GAIN_DB / 20))
    return torch.where(rms > 1e-5, gain, torch.ones_like(rms))
