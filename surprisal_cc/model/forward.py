"""The model's forward pass, one for training, inference and realignment: filterbanks → frozen APC → encoder;
and what one padded batch through a loaded model gives (:class:`ForwardResult`, :class:`DecodedBatch`).

APC runs only when the encoder reads its features (``input_features: apc``) or its controller
reads surprisal; features and surprisal that the recipes' feature cache computed once stand in
for that APC run. The Brain (training, validation, test, realignment) and the inference runtime
both call :func:`run_model`, so they cannot drift apart.

Example
-------
>>> import torch
>>> from surprisal_cc.model.apc import APCModel, FrozenAPC
>>> from surprisal_cc.model.architectures import build_encoder
>>> encoder = build_encoder("conditional", input_size=512, num_outputs=42, controller="surprisal").eval()
>>> step = run_model(encoder, torch.randn(2, 7, 80), torch.tensor([7, 5]), apc=FrozenAPC(APCModel()))
>>> step.output.log_probs.shape, step.surprisal.shape, step.uses_apc
(torch.Size([2, 7, 42]), torch.Size([2, 7]), True)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, NamedTuple, Optional

from torch import Tensor, nn

from surprisal_cc.model.nnet import EncoderOutput, unwrap


@dataclass
class CachedInputs:
    """What the feature cache holds for a batch: filterbanks and, where APC ran, its features and surprisal."""

    fbank: Tensor  # (B, T, n_mels)
    features: Optional[Tensor] = None  # (B, T, H) APC features
    surprisal: Optional[Tensor] = None  # (B, T)


@dataclass
class ForwardStep:
    """One batch through the model: the encoder's output, the APC surprisal (None where the model
    reads no APC) and ``uses_apc``: whether the model needs APC for this batch, whether it ran here
    or the feature cache stood in for it (its MACs are charged either way, as a deployed model runs it)."""

    output: EncoderOutput
    surprisal: Optional[Tensor]
    uses_apc: bool


class ForwardResult(NamedTuple):
    """One padded batch through a loaded model, not decoded: what
    :meth:`ConditionalASR.forward <surprisal_cc.inference.asr.ConditionalASR.forward>` and ``forward_pass`` return
    (it unpacks as ``out, fbank, frames, surprisal``).

    Arguments
    ---------
    output : EncoderOutput
        Log-probabilities (``log_probs``, (B, T, labels)), ``lengths`` and routing statistics.
    fbank : torch.Tensor
        (B, T, n_mels) log-mel frames.
    frames : torch.Tensor
        (B,) frame count of each utterance.
    surprisal : torch.Tensor, optional
        (B, T) APC surprisal; None when the model runs no APC.

    Example
    -------
    >>> ForwardResult._fields
    ('output', 'fbank', 'frames', 'surprisal')
    """

    output: EncoderOutput
    fbank: Tensor
    frames: Tensor
    surprisal: Optional[Tensor]


class DecodedBatch(NamedTuple):
    """One padded batch through a loaded model and decoded: what
    :meth:`ConditionalASR.run_batch <surprisal_cc.inference.asr.ConditionalASR.run_batch>` returns. The fields of
    :class:`ForwardResult` with ``hyps``, the label ids of each utterance's best hypothesis (beam search),
    and ``seconds``, the wall time of the forward pass and the beam search; it unpacks as
    ``out, hyps, fbank, frames, surprisal, seconds``.

    Example
    -------
    >>> DecodedBatch._fields
    ('output', 'hyps', 'fbank', 'frames', 'surprisal', 'seconds')
    """

    output: EncoderOutput
    hyps: List[List[int]]
    fbank: Tensor
    frames: Tensor
    surprisal: Optional[Tensor]
    seconds: float


def run_model(encoder: nn.Module, fbank: Optional[Tensor], lengths: Tensor, *, apc: Optional[nn.Module] = None,
           use_apc_features: bool = True, cached: Optional[CachedInputs] = None,
           transform: Optional[Callable[[Tensor], Tensor]] = None) -> ForwardStep:
    """Run the model on one padded batch, in the encoder's mode (``encoder.training``): its controller
    in that mode decides whether APC surprisal is read.

    Arguments
    ---------
    encoder : torch.nn.Module
        An :class:`~surprisal_cc.model.nnet.Encoder` (or a wrapper of one with ``.module``).
    fbank : torch.Tensor or None
        (B, T, n_mels) log-mel frames; None when ``cached`` is given.
    lengths : torch.Tensor
        (B,) frames of each utterance, on any device (moved to the features').
    apc : torch.nn.Module, optional
        The frozen APC model (:class:`~surprisal_cc.model.apc.FrozenAPC`); needed without ``cached``
        when its features or surprisal are used.
    use_apc_features : bool
        Whether the encoder reads APC features (else the filterbanks).
    cached : CachedInputs, optional
        The batch's cached filterbanks, APC features and surprisal, used instead of running APC.
    transform : callable, optional
        Applied to the encoder's input features (e.g. training-time masking); the surprisal
        stays that of the clean audio.

    Returns
    -------
    ForwardStep
    """
    lengths = lengths.to((fbank if fbank is not None else cached.fbank).device)  # masks are made on their device
    need_surprisal = unwrap(encoder).needs_surprisal(unwrap(encoder).training)
    uses_apc = use_apc_features or need_surprisal  # nnet.runs_apc for this mode
    if cached is not None:
        features = cached.features if use_apc_features else cached.fbank
        surprisal = cached.surprisal if uses_apc else None
    elif uses_apc:
        if apc is None:
            raise ValueError("this model reads APC features or surprisal: pass the APC model (apc=...)")
        apc_out = apc(fbank, lengths)
        features = apc_out.features if use_apc_features else fbank
        surprisal = apc_out.surprisal
    else:
        features, surprisal = fbank, None
    if transform is not None:
        features = transform(features)
    output = encoder(features, lengths, surprisal if need_surprisal else None)
    return ForwardStep(output, surprisal, uses_apc)
