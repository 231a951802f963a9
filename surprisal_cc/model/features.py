"""Log-mel filterbank front end shared by APC pretraining and the ASR recipes.

One definition is used everywhere: torchaudio's Kaldi-compatible ``fbank``
(80 mel bins, 25 ms Hamming window, 10 ms hop, dither 0, no CMVN) on 16 kHz
audio scaled to [-1, 1], followed by frame skipping (keep every ``frame_skip``-th
frame; the paper keeps every second frame, i.e. 20 ms frames).

Example
-------
>>> import torch
>>> front_end = FilterbankFrontEnd()
>>> feats, lengths = front_end(torch.randn(2, 16000), torch.tensor([16000, 8000]))
>>> feats.shape, lengths.tolist()
(torch.Size([2, 49, 80]), [49, 24])
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor, nn
from torchaudio.compliance import kaldi

from surprisal_cc.model.feature_config import FeatureConfig


class FilterbankFrontEnd(nn.Module):
    """Waveforms (B, S) with sample lengths (B,) -> features (B, T, n_mels), frame lengths (B,).

    ``lengths`` are absolute sample counts (int). Each utterance is processed on its real
    samples only, so padding never leaks into features, and the frame counts are exact.

    Arguments
    ---------
    config : FeatureConfig, optional
        The feature definition; None: ``FeatureConfig(**overrides)``.
    **overrides
        Fields of :class:`FeatureConfig`, used when ``config`` is None.

    Example
    -------
    >>> import torch
    >>> front_end = FilterbankFrontEnd(frame_skip=1)
    >>> feats, lengths = front_end(torch.randn(2, 16000), torch.tensor([16000, 399]))
    >>> feats.shape, lengths.tolist()
    (torch.Size([2, 98, 80]), [98, 0])
    """

    def __init__(self, config: FeatureConfig | None = None, **overrides):
        super().__init__()
        self.config = config or FeatureConfig(**overrides)

    def single(self, waveform: Tensor) -> Tensor:
        """Features of one 1-D waveform: (T, n_mels); T is 0 when it is shorter than one window."""
        cfg = self.config
        if waveform.numel() < cfg.window_samples:
            return waveform.new_zeros(0, cfg.n_mels)
        feats = kaldi.fbank(
            waveform.unsqueeze(0).float(),
            num_mel_bins=cfg.n_mels,
            frame_length=cfg.frame_length_ms,
            frame_shift=cfg.frame_shift_ms,
            dither=cfg.dither,
            window_type=cfg.window_type,
            sample_frequency=float(cfg.sample_rate),
            energy_floor=0.0,
        )
        return feats[:: cfg.frame_skip]

    @torch.no_grad()
    def forward(self, wavs: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
        """Features of a padded batch.

        Arguments
        ---------
        wavs : torch.Tensor
            (B, S) waveforms in [-1, 1], padded at the end.
        lengths : torch.Tensor
            (B,) sample counts (integers, not relative lengths).

        Returns
        -------
        feats : torch.Tensor
            (B, T, n_mels) features, zero-padded after each utterance's frames.
        frame_lengths : torch.Tensor
            (B,) frame counts, on the device of ``wavs``.
        """
        per_utt = [self.single(w[: int(n)]) for w, n in zip(wavs, lengths.tolist())]
        frame_lengths = torch.tensor([f.shape[0] for f in per_utt], dtype=torch.long)
        feats = nn.utils.rnn.pad_sequence(per_utt, batch_first=True)
        return feats, frame_lengths.to(wavs.device)
