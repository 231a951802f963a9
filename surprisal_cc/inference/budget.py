"""A FLOPs budget at test time: the controller's bias shift at which a loaded model
(:class:`~surprisal_cc.inference.asr.ConditionalASR`) spends a fraction of the big-only MACs per frame on
given audio, solved from the audio's APC surprisal alone (no labels):
:func:`~surprisal_cc.model.calibration.solve_budget` on the frames of the files (``transcribe`` and
``evaluate --flops-fraction``).

Example
-------
>>> import tempfile
>>> from pathlib import Path
>>> import numpy as np
>>> import soundfile
>>> from surprisal_cc.inference.asr import ConditionalASR
>>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="surprisal")
>>> with tempfile.TemporaryDirectory() as tmp:
...     wav = Path(tmp) / "utt.flac"
...     soundfile.write(wav, np.random.default_rng(0).uniform(-0.5, 0.5, 8000), 16000)
...     budget = meet_flops_budget(asr, [wav], 0.9)
>>> budget["fraction"], budget["frames"], asr.encoder.test_bias_shift == budget["bias_shift"]
(0.9, 24, True)
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterator, Optional, Sequence, Union

import torch
from torch import Tensor

from surprisal_cc.checks import check_batch_size, is_number
from surprisal_cc.data.audio import check_audio_each, refuse_bad_audio, split_checked
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.inference import passes
from surprisal_cc.inference.protocol import LoadedModel
from surprisal_cc.model.calibration import budget_big_fraction as encoder_budget_big_fraction
from surprisal_cc.model.calibration import solve_budget
from surprisal_cc.model.nnet import lengths_to_mask

PathLike = Union[str, os.PathLike]

__all__ = ["budget_big_fraction", "meet_flops_budget", "frame_surprisal"]


def budget_big_fraction(asr: LoadedModel, fraction: float) -> float:
    """The fraction of frames on the big network that spends ``fraction`` x the big-only MACs per frame;
    a clear error for a model without a surprisal controller or a budget out of range.

    Example
    -------
    >>> from surprisal_cc.inference.asr import ConditionalASR
    >>> 0 < budget_big_fraction(ConditionalASR.untrained(["AH", "sil"], controller="surprisal"), 0.9) < 1
    True
    """
    if not is_number(fraction):
        raise ConfigurationError(f"FLOPs fraction must be a finite number, got {fraction!r}")
    try:
        return encoder_budget_big_fraction(asr.encoder, asr.apc_macs, float(fraction))
    except ValueError as err:
        raise ConfigurationError(f"FLOPs fraction {fraction}: {err}") from None


@torch.no_grad()
def meet_flops_budget(asr: LoadedModel, audio: Sequence[PathLike], fraction: float, batch_size: int = 8,
                      long_chunk_s: Optional[float] = None) -> Dict[str, Any]:
    """Set the model's bias shift (``ConditionalASR.set_bias_shift``) at which the expected MACs per frame
    over the frames of ``audio`` are ``fraction`` x those of big-only, from their APC surprisal alone
    (:func:`~surprisal_cc.model.calibration.solve_budget`; no labels). One extra APC pass over the audio
    (:func:`frame_surprisal`: long files in parts); the surprisal controller only.

    Returns ``{"fraction", "big_fraction", "bias_shift", "frames"}``.

    Raises
    ------
    ConfigurationError
        For a model without a surprisal controller, a fraction out of range or a batch size below 1.
    BadAudioError
        Listing every file of ``audio`` that is not usable audio, before any is decoded.
    """
    if isinstance(audio, (str, os.PathLike)):
        audio = [audio]
    audio = list(audio)
    if not audio:
        raise ConfigurationError("meet_flops_budget needs audio files to solve the bias shift on; got none")
    if not all(isinstance(path, (str, os.PathLike)) for path in audio):
        raise ConfigurationError("meet_flops_budget reads audio files: give their paths")
    check_batch_size(batch_size)
    budget_big_fraction(asr, fraction)  # a budget this model cannot meet fails before any audio is read
    hint = "the bias shift of a FLOPs budget is solved on usable audio"
    problems = split_checked(check_audio_each(audio, **asr.feature_config.audio_limits))[1]
    refuse_bad_audio(problems, len(audio), False, hint, hint)
    solution = solve_budget(asr.encoder, asr.apc_macs, float(fraction),
                            frame_surprisal(asr, audio, batch_size, long_chunk_s))
    asr.set_bias_shift(solution["bias_shift"])
    return solution


@torch.no_grad()
def frame_surprisal(asr: LoadedModel, audio: Sequence[PathLike], batch_size: int = 8,
                    long_chunk_s: Optional[float] = None) -> Iterator[Tensor]:
    """The APC surprisal of the real frames of the files ``audio`` (checked already), ``batch_size`` files
    at a time (one 1-D tensor per batch); a file longer than ``long_chunk_s`` plus twice the context
    (as ``transcribe_file`` decides) alone, in parts with context
    (:func:`~surprisal_cc.inference.long_audio.long_surprisal`), in bounded memory."""
    from surprisal_cc.inference.long_audio import is_long, long_surprisal, part_seconds

    chunk_s = part_seconds(long_chunk_s)
    paths = list(audio)
    long = [is_long(path, chunk_s) for path in paths]  # headers only
    short = [path for path, in_parts in zip(paths, long) if not in_parts]
    for start in range(0, len(short), batch_size):
        signals = [asr.feature_config.read_audio(path) for path in short[start:start + batch_size]]
        samples = torch.tensor([signal.numel() for signal in signals])
        fbank, lengths = passes.filterbanks(asr, torch.nn.utils.rnn.pad_sequence(signals, batch_first=True), samples)
        surprisal = passes.apc_surprisal(asr, fbank, lengths)
        yield surprisal[lengths_to_mask(lengths, surprisal.shape[1])]
    for path in (path for path, in_parts in zip(paths, long) if in_parts):
        yield from long_surprisal(asr, path, chunk_s)
