"""One padded batch through a loaded model (:class:`~surprisal_cc.inference.asr.ConditionalASR`, typed by
:class:`~surprisal_cc.inference.protocol.LoadedModel`): the steps that ``transcribe_batch``,
``encode_batch``, long files (:mod:`~surprisal_cc.inference.long_audio`), a FLOPs budget
(:mod:`~surprisal_cc.inference.budget`), corpus evaluation (:mod:`~surprisal_cc.inference.evaluation`) and
realignment share.

Filterbanks are computed on the CPU in float32, as the recipes' feature cache computes them; the
networks run on the model's device at its precision; :func:`forward_pass` and :func:`decode_batch` run
on the caller's threads and random state (:func:`seeded_routing` seeds sampled routing with the
model's seed; :func:`surprisal_cc.runtime.decoding_threads` sets the threads).

Example
-------
>>> import torch
>>> from surprisal_cc.inference.asr import ConditionalASR
>>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
>>> batch = decode_batch(asr, torch.rand(2, 8000) - 0.5, torch.tensor([8000, 4000]))
>>> batch.frames.tolist(), len(batch.hyps), batch.seconds > 0
([24, 12], 2, True)
>>> tuple(forward_pass(asr, torch.rand(2, 8000) - 0.5).output.log_probs.shape)
(2, 24, 4)
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from surprisal_cc.data.audio import refuse_short_waveforms
from surprisal_cc.data.waveforms import batch_waveforms, scaled_to_level
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.inference.protocol import LoadedModel
from surprisal_cc.model.forward import DecodedBatch, ForwardResult, run_model
from surprisal_cc.model.nnet import EncoderOutput, seeded_draws
from surprisal_cc.runtime import INFERENCE_PRECISIONS, native_bf16

__all__ = ["resolve_inference_precision", "autocast", "seeded_routing", "filterbanks", "forward_pass", "decode_batch",
           "apc_surprisal", "frame_results", "frame_macs", "flops_components", "segments", "phones_of"]


def resolve_inference_precision(precision: str, device: torch.device) -> str:
    """``fp32``, or ``bf16`` where the device computes it natively; ``auto``: the faster one.

    ``auto`` is fp32 for inference: in the inference benchmark (benchmarks/README.md) bf16 autocast
    made ``transcribe`` slower on CPUs with native bf16 (RTF 0.052 against 0.037 at batch 1: the
    APC's and encoder's GRUs run small per-step products where the casts cost more than they
    save), and on GPUs (kernel launches, not arithmetic, bound these small networks). Training,
    with its large batched products, keeps bf16 there (:func:`surprisal_cc.runtime.auto_precision`).

    Arguments
    ---------
    precision : str
        ``"fp32"``, ``"bf16"`` or ``"auto"``.
    device : torch.device
        The device the model runs on.

    Returns
    -------
    str
        ``"fp32"`` or ``"bf16"``.

    Raises
    ------
    ConfigurationError
        For an unknown precision, or ``bf16`` on a device without native bf16.

    Example
    -------
    >>> resolve_inference_precision("fp32", torch.device("cpu")), resolve_inference_precision("auto", torch.device("cpu"))
    ('fp32', 'fp32')
    """
    if precision not in INFERENCE_PRECISIONS:
        raise ConfigurationError(f"precision must be one of {INFERENCE_PRECISIONS}, got {precision!r}")
    if precision == "auto":
        return "fp32"
    if precision == "bf16" and not native_bf16(device):
        raise ConfigurationError(f"precision bf16: this {device.type.upper()} has no native bf16 "
                                 "(CPU: AVX-512-BF16 or AMX; GPU: Ampere or newer); use fp32")
    return precision


def autocast(asr: LoadedModel):
    """bf16 autocast context when the model's ``precision`` is bf16, else a null context."""
    if asr.precision == "bf16":
        return torch.autocast(device_type=asr.device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def seeded_routing(asr: LoadedModel, seed: Optional[int] = None) -> Iterator[None]:
    """Sampled routing: the body draws from the RNG seeded with ``seed`` (default: the model's), the
    global RNG restored after; deterministic routing: nothing.

    Example
    -------
    >>> from surprisal_cc.inference.asr import ConditionalASR
    >>> asr = ConditionalASR.untrained(["AH", "sil"], controller="random")
    >>> asr.set_routing("sampled", seed=5)
    >>> wav = torch.rand(1, 8000) - 0.5
    >>> draws = []
    >>> for _ in range(2):
    ...     with seeded_routing(asr):
    ...         draws.append(forward_pass(asr, wav).output.stats["use_big"])
    >>> bool(torch.equal(*draws))
    True
    """
    seed = asr.seed if seed is None else seed
    with seeded_draws(seed if asr.routing == "sampled" else None, asr.device):
        yield


def filterbanks(asr: LoadedModel, wavs: Tensor, samples: Tensor, gain: Optional[float] = None) -> Tuple[Tensor, Tensor]:
    """(fbank, frame counts) of a padded batch (``samples``: (B,) sample counts) on the model's device.
    The filterbanks are computed on the CPU in float32, after scaling each utterance to the model's
    ``input_level_dbfs`` where it is set (``ConditionalASR.set_input_level``), or by ``gain`` where it
    is given instead (the parts of a long file, scaled by the gain of the whole file:
    :mod:`surprisal_cc.inference.long_audio`); utterances shorter than one frame are a
    :class:`~surprisal_cc.data.errors.DataPreparationError` naming their places in the batch
    (:func:`~surprisal_cc.data.audio.refuse_short_waveforms`).

    Example
    -------
    >>> from surprisal_cc.inference.asr import ConditionalASR
    >>> fbank, frames = filterbanks(ConditionalASR.untrained(["AH", "sil"]), torch.zeros(2, 16000),
    ...                             torch.tensor([16000, 8000]))
    >>> fbank.shape, frames.tolist()
    (torch.Size([2, 49, 80]), [49, 24])
    """
    refuse_short_waveforms(samples, **asr.feature_config.audio_limits)  # the one length check of a batch
    wavs = wavs.detach().to("cpu", torch.float32)
    if gain is not None:
        wavs = (wavs.double() * gain).to(torch.float32)
    elif asr.input_level_dbfs is not None:
        wavs = scaled_to_level(wavs, samples, asr.input_level_dbfs)
    fbank, frames = asr.front_end(wavs, samples)
    return fbank.to(asr.device), frames.to(asr.device)


@torch.no_grad()
def forward_pass(asr: LoadedModel, wavs: Tensor, wav_lens: Optional[Tensor] = None,
                 gain: Optional[float] = None) -> ForwardResult:
    """The encoder output, fbank, frame counts and surprisal of one padded batch, not decoded, on the
    caller's threads and random state (sampled routing draws from the global RNG as it is: seed it with
    :func:`seeded_routing`, e.g. once per corpus). ``wavs`` and ``wav_lens`` as
    ``ConditionalASR.forward`` takes them (``wav_lens`` relative, or sample counts where it is an integer
    tensor); ``gain`` as :func:`filterbanks` takes it."""
    wavs, samples = batch_waveforms(wavs, wav_lens, None, None, asr.feature_config.sample_rate, stacklevel=3)
    fbank, frames = filterbanks(asr, wavs, samples, gain=gain)
    with autocast(asr):
        step = run_model(asr.encoder, fbank, frames, apc=asr.apc, use_apc_features=asr.use_apc_features)
    surprisal = step.surprisal.float() if step.surprisal is not None else None
    return ForwardResult(output=step.output, fbank=fbank, frames=frames, surprisal=surprisal)


def decode_batch(asr: LoadedModel, wavs: Tensor, samples: Tensor) -> DecodedBatch:
    """One padded batch (``samples``: (B,) sample counts) through the model and its beam search, on the
    model's threads and the caller's random state: the :class:`~surprisal_cc.model.forward.ForwardResult`
    fields with each utterance's label ids (``hyps``) and the wall time of both (``seconds``)."""
    from surprisal_cc.runtime import decoding_threads

    with decoding_threads(asr.threads):
        start = time.perf_counter()
        forward = forward_pass(asr, wavs, samples)
        hyps = asr.beam_search(forward.output.log_probs.float(), forward.output.lengths)
        if asr.device.type == "cuda":
            torch.cuda.synchronize(asr.device)
        return DecodedBatch(output=forward.output, hyps=hyps, fbank=forward.fbank, frames=forward.frames,
                            surprisal=forward.surprisal, seconds=time.perf_counter() - start)


@torch.no_grad()
def apc_surprisal(asr: LoadedModel, fbank: Tensor, lengths: Tensor) -> Tensor:
    """(B, T) float32 APC surprisal of a padded batch of filterbank frames (``lengths``: (B,) frame
    counts), on the model's threads and precision; zero on padding."""
    from surprisal_cc.runtime import decoding_threads

    with decoding_threads(asr.threads), autocast(asr):
        return asr.apc(fbank, lengths).surprisal.float()


def frame_results(out: EncoderOutput, b: int, n: int, surprisal: Optional[Tensor]) -> Dict[str, Any]:
    """Per-frame arrays of utterance ``b`` (its first ``n`` frames) from one forward pass:
    ``surprisal``, ``p_big``, ``steps``, ``use_big`` (None where the model has none)."""
    stat = (lambda key: out.stats[key][b, :n].detach().float().cpu() if key in out.stats else None)
    return {"surprisal": surprisal[b, :n].cpu() if surprisal is not None else None,
            "p_big": stat("p_big"), "steps": stat("steps"),
            "use_big": out.stats["use_big"][b, :n].cpu() if "use_big" in out.stats else None}


def frame_macs(out: EncoderOutput, b: int, frames: slice) -> Dict[str, float]:
    """MACs per component that ran on the ``frames`` of utterance ``b`` of one forward pass, summed
    (:func:`flops_components` makes them per frame, with the APC's)."""
    return {name: float(m[b, frames].double().sum()) for name, m in out.frame_macs.items()}


def flops_components(asr: LoadedModel, macs: Dict[str, float], frames: int) -> Dict[str, float]:
    """MACs per frame of each component (APC first when it ran) from MACs summed over ``frames``."""
    comps = {"apc": float(asr.apc_macs)} if asr.uses_apc else {}
    comps.update({name: total / frames for name, total in macs.items()})
    return comps


def segments(asr: LoadedModel, log_probs: Tensor, ids: Sequence[int],
             offset_frames: int = 0) -> List[Tuple[str, float, float]]:
    """``(phone, start_s, end_s)`` of the phones ``ids`` decoded from ``log_probs`` ((T, V) of one
    utterance): :func:`surprisal_cc.decoding.timestamps.phone_segments`."""
    from surprisal_cc.decoding.timestamps import phone_segments

    return phone_segments(log_probs, ids, asr.labels, asr.beam_search.blank, asr.frame_shift_s, offset_frames)


def phones_of(asr: LoadedModel, ids: Sequence[int]) -> List[str]:
    """Label names of label ids."""
    return [asr.labels[i] for i in ids]
