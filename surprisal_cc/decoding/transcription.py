"""The result of transcribing one utterance: :class:`Transcription` (phones with their times, and per frame
what the model computed), as both runtimes return it (:class:`~surprisal_cc.inference.asr.ConditionalASR`,
per-frame arrays as tensors; :class:`~surprisal_cc.deploy.runtime.OnnxASR`, as numpy arrays), with its JSON
and CTM forms and the lines ``surprisal-cc transcribe`` prints (:func:`format_text`). Imports no torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

if TYPE_CHECKING:  # annotations only
    from torch import Tensor

__all__ = ["Transcription", "format_text"]


@dataclass
class Transcription:
    """One utterance: phones with their times and, per frame, what the model computed.

    ``str(t)`` (and ``t.text``) is the phones separated by spaces. Per-frame arrays (``surprisal``,
    ``p_big``, ``use_big``, ``steps``, ``fbank``) have one entry per frame of ``frame_shift_s``
    seconds; frame ``t`` starts at ``t * frame_shift_s``.

    Arguments
    ---------
    phones : list of str
        The recognised phones.
    num_frames : int
        Frames of the utterance.
    duration_s : float
        Audio duration in seconds.
    flops_per_frame : float
        MACs per frame that ran, all components together (APC included when it ran).
    flops_components : dict of str to float
        MACs per frame of each component.
    rtf : float
        Real-time factor: compute time of the utterance's batch (features, APC, encoder, beam
        search) divided by the batch's audio duration.
    surprisal : torch.Tensor, optional
        (T,) APC surprisal; None when no APC ran.
    p_big : torch.Tensor, optional
        (T,) probability of the big network; None for ACT and PonderNet.
    use_big : torch.Tensor, optional
        (T,) bool, where the big network ran; None for ACT and PonderNet.
    steps : torch.Tensor, optional
        (T,) steps executed per frame (ACT and PonderNet).
    fbank : torch.Tensor, optional
        (T, n_mels) filterbank features.
    path : str, optional
        The audio file, when transcribed from a file.
    segments : list of (str, float, float), optional
        Each phone with its start and end in seconds (CTC Viterbi alignment,
        :mod:`surprisal_cc.decoding.timestamps`).
    frame_shift_s : float
        Seconds between frames of the per-frame arrays.
    routing : str, optional
        ``"deterministic"`` (``p_big > 0.5``) or ``"sampled"``.
    seed : int, optional
        The seed of sampled routing.
    log_probs : array, optional
        (T, V) per-frame log-probabilities, where the caller asked to keep them.

    Example
    -------
    >>> import torch
    >>> t = Transcription(["sil", "AH", "sil"], num_frames=4, duration_s=0.08, flops_per_frame=1000.0,
    ...                   flops_components={"encoder": 1000.0}, rtf=0.1,
    ...                   use_big=torch.tensor([True, False, False, True]),
    ...                   segments=[("sil", 0.0, 0.02), ("AH", 0.02, 0.06), ("sil", 0.06, 0.08)])
    >>> t.big_fraction, t.to_dict()["use_big"], str(t)
    (0.5, [True, False, False, True], 'sil AH sil')
    >>> print(t.to_ctm("utt"))
    utt 1 0.00 0.02 sil
    utt 1 0.02 0.04 AH
    utt 1 0.06 0.02 sil
    """

    phones: List[str]
    num_frames: int
    duration_s: float
    flops_per_frame: float
    flops_components: Dict[str, float]
    rtf: float
    surprisal: Optional[Tensor] = field(default=None, repr=False)
    p_big: Optional[Tensor] = field(default=None, repr=False)
    use_big: Optional[Tensor] = field(default=None, repr=False)
    steps: Optional[Tensor] = field(default=None, repr=False)
    fbank: Optional[Tensor] = field(default=None, repr=False)
    path: Optional[str] = None
    segments: Optional[List[Tuple[str, float, float]]] = field(default=None, repr=False)
    frame_shift_s: float = 0.02
    routing: Optional[str] = None
    seed: Optional[int] = None
    log_probs: Optional[Any] = field(default=None, repr=False)

    @property
    def text(self) -> str:
        """The phones separated by spaces."""
        return " ".join(self.phones)

    def __str__(self) -> str:
        return self.text

    @property
    def big_fraction(self) -> Optional[float]:
        """Fraction of frames that ran the big network (None without a small/big choice)."""
        if self.use_big is None:
            return None
        if hasattr(self.use_big, "double"):  # a tensor
            return float(self.use_big.double().mean())
        import numpy as np

        return float(np.mean(self.use_big, dtype=np.float64))

    def to_ctm(self, name: Optional[str] = None) -> str:
        """The phones with their times as CTM lines (:func:`~surprisal_cc.decoding.timestamps.format_ctm`);
        ``name`` defaults to the file's stem."""
        from surprisal_cc.decoding.timestamps import format_ctm

        if self.segments is None:
            raise ValueError("this transcription has no phone times (segments)")
        return format_ctm(name or (Path(self.path).stem if self.path else "utterance"), self.segments)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready: per-frame arrays as lists (``fbank`` left out), phone times as
        ``{"phone", "start", "end"}`` objects in seconds."""
        out: Dict[str, Any] = {"path": self.path, "text": self.text, "phones": self.phones,
                               "segments": None if self.segments is None else
                               [{"phone": p, "start": s, "end": e} for p, s, e in self.segments],
                               "num_frames": self.num_frames, "frame_shift_s": self.frame_shift_s,
                               "duration_s": self.duration_s, "flops_per_frame": self.flops_per_frame,
                               "flops_components": self.flops_components, "rtf": self.rtf,
                               "big_fraction": self.big_fraction, "routing": self.routing, "seed": self.seed}
        for name in ("surprisal", "p_big", "use_big", "steps"):
            value = getattr(self, name)
            out[name] = None if value is None else value.tolist()
        return out


def format_text(result: Transcription, utterance: Optional[str] = None) -> str:
    """The lines ``surprisal-cc transcribe`` prints for one file (``utterance``: its id in a Kaldi data
    folder): the file, its phones, and what ran.

    >>> t = Transcription(["sil"], num_frames=1, duration_s=0.02, flops_per_frame=2e6, flops_components={},
    ...                   rtf=0.5, path="a.wav")
    >>> print(format_text(t))
    a.wav
      sil
      0.02 s, 1 frame, 2.00M FLOPs per frame, RTF 0.500
    """
    routing = ""
    if result.p_big is not None:
        routing = (f", p_big {float(result.p_big.mean()):.3f} (big network on {100 * result.big_fraction:.1f} % "
                   f"of frames, {result.routing} routing{'' if result.seed is None else f' seed {result.seed}'})")
    elif result.steps is not None:
        routing = f", {float(result.steps.mean()):.2f} steps per frame"
    header = f"{utterance} ({result.path})" if utterance else result.path
    text = result.text or "(no phones recognised)"  # silence, or audio too short to hold a phone
    frames = f"{result.num_frames} frame{'' if result.num_frames == 1 else 's'}"
    return (f"{header}\n  {text}\n  {result.duration_s:.2f} s, {frames}, "
            f"{result.flops_per_frame / 1e6:.2f}M FLOPs per frame{routing}, RTF {result.rtf:.3f}")
