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

from dataclasses import asdict, dataclass
from typing import Dict, Tuple

import torch
from torch import Tensor, nn
from torchaudio.compliance import kaldi


@dataclass(frozen=True)
class FeatureConfig:
    """Everything that determines the features; part of the feature-cache key."""

    sample_rate: int = 16000
    n_mels: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    window_type: str = "hamming"
    dither: float = 0.0
    frame_skip: int = 2

    def as_dict(self) -> Dict[str, object]:
        return asdict(self)

    @property
    def window_samples(self) -> int:
        return int(round(self.sample_rate * self.frame_length_ms / 1000.0))

    @property
    def shift_samples(self) -> int:
        return int(round(self.sample_rate * self.frame_shift_ms / 1000.0))

    def num_frames(self, num_samples: int) -> int:
        """Exact number of output frames for a signal of ``num_samples`` samples."""
        if num_samples < self.window_samples:
            return 0
        full = 1 + (num_samples - self.window_samples) // self.shift_samples
        return -(-full // self.frame_skip)  # ceil: frames 0, k, 2k, ... are kept


class FilterbankFrontEnd(nn.Module):
    """Waveforms (B, S) with sample lengths (B,) -> features (B, T, n_mels), frame lengths (B,).

    ``lengths`` are absolute sample counts (int). Each utterance is processed on its real
    samples only, so padding never leaks into features, and the frame counts are exact.
    """

    def __init__(self, config: FeatureConfig | None = None, **overrides):
        super().__init__()
        self.config = config or FeatureConfig(**overrides)

    def single(self, waveform: Tensor) -> Tensor:
        """Features of one 1-D waveform: (T, n_mels)."""
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
        per_utt = [self.single(w[: int(n)]) for w, n in zip(wavs, lengths.tolist())]
        frame_lengths = torch.tensor([f.shape[0] for f in per_utt], dtype=torch.long)
        feats = nn.utils.rnn.pad_sequence(per_utt, batch_first=True)
        return feats, frame_lengths.to(wavs.device)


def lengths_to_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """Boolean mask (B, T), True on real frames."""
    max_len = int(lengths.max()) if max_len is None else max_len
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]
