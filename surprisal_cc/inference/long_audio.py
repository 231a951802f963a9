"""Audio of any length in bounded memory: decoding in parts with context, joined at pauses.

A long file is read part by part, each part's samples alone (resampled to the model's rate and
downmixed as they are read). Each part covers about ``chunk_s`` seconds of frames and is computed with
``context_s`` seconds of audio on both sides, which the APC's GRU and the encoder's BiGRUs see but
whose frames are not kept. Filterbank frames depend only on their own window (25 ms by default), so a part's
frames are the whole file's frames; only the recurrent layers' state at the part's edges differs,
and the context lets it settle. It settles slowly: on 40 s of dev-clean-2 speech in 10 s parts,
the phones differed from whole-file decoding in 12 places with 2 s of context, 8 with 4 s and 4
with 8 s (the default).

The join is the frame of the last two seconds of a part where the model itself is surest of a
blank (its posteriors): the parts' phones are found by the beam search and aligned (phone times)
separately, and a CTC path through a blank frame is split there without changing its phones. The
last phone before a join continues over the next part's blank frames up to its first phone, within
the phone's limit (:func:`surprisal_cc.decoding.timestamps.extend_segment`), as in whole-file decoding.
With an input level (``ConditionalASR.set_input_level``), every part is scaled by the gain that
scales the whole file to it, as whole-file decoding scales the file: a part scaled on its own would
raise a long pause's background noise to speech level. Memory is that of one part, whatever the file's length; the per-frame arrays of the result
(surprisal, p_big, ...) are the only thing that grows, at a few bytes per 20 ms frame. The result's
FLOPs per frame charge each kept frame once, as whole-file decoding does, so that they stay the
model's figure; the context frames computed again at each part's edges (about ``2 * context_s /
chunk_s`` more: 27 % with the defaults) are the price of bounded memory and show in the real-time
factor only.
:func:`long_surprisal` computes the APC surprisal alone the same way (the APC is causal: a part
needs only the context before it); ``evaluate`` decodes its long utterances with
:func:`decode_long` and solves ``--flops-fraction`` on long files with :func:`long_surprisal`.

Peak memory, wall time and the phones that differ from whole-file decoding:
``python -m benchmarks.long_audio MINUTES`` (figures in benchmarks/README.md, "Long files").

Example
-------
>>> from surprisal_cc.inference.asr import ConditionalASR
>>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
>>> import tempfile
>>> from pathlib import Path
>>> import numpy as np
>>> import soundfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     wav = Path(tmp) / "long.flac"
...     soundfile.write(wav, np.random.default_rng(0).uniform(-0.5, 0.5, 16000 * 5), 16000)
...     parts = decode_long(asr, wav, chunk_s=1.0, context_s=0.5)
...     whole = asr.transcribe_file(wav, long_chunk_s=0)
>>> parts["num_frames"] == whole.num_frames == 249, parts["flops_per_frame"] == whole.flops_per_frame
(True, True)
"""
from __future__ import annotations

import os
import time
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Tuple, Union

from surprisal_cc.inference.protocol import LoadedModel

# annotations only: importing this module loads neither torch nor feature or decoding code (the command
# line's help reads its constants)
if TYPE_CHECKING:
    import torch

    from surprisal_cc.model.forward import ForwardResult

CHUNK_S = 60.0  # seconds of kept frames per part
CONTEXT_S = 8.0  # seconds of audio on each side of a part
SEAM_WINDOW_S = 2.0  # the join is searched in the last SEAM_WINDOW_S of a part
PROGRESS_AFTER_S = 60.0  # files longer than this report progress

PathLike = Union[str, os.PathLike]

__all__ = ["CHUNK_S", "CONTEXT_S", "PROGRESS_AFTER_S", "part_seconds", "is_long", "decode_long", "long_surprisal"]


class _Reader:
    """Samples ``[start, stop)`` of an audio file at the model's rate, mono float32, as
    :func:`surprisal_cc.data.audio.read_audio` decodes it, read part by part
    (:func:`~surprisal_cc.data.audio.read_resampled_span`: a file at another rate too)."""

    def __init__(self, path: PathLike, sample_rate: int):
        import soundfile

        from surprisal_cc.data.audio import resampled_length, soundfile_name

        self.file = soundfile.SoundFile(soundfile_name(path))
        self.sample_rate = sample_rate
        self.total = resampled_length(self.file.frames, self.file.samplerate, sample_rate)

    def refuse_short(self, path: PathLike, min_samples: int) -> None:
        """A :class:`~surprisal_cc.data.errors.BadAudioError` of one line naming ``path`` and its own duration
        where it is too short for ``min_samples`` at the model's rate
        (:func:`~surprisal_cc.data.audio.refuse_short_audio`)."""
        from surprisal_cc.data.audio import refuse_short_audio

        refuse_short_audio(path, self.file.frames, self.file.samplerate, min_samples, self.sample_rate)

    def read_frames(self, cfg, first: int, upto: int) -> torch.Tensor:
        """The samples that frames ``[first, upto)`` of feature config ``cfg`` read (frame t's window
        starts at t x its hop)."""
        hop = cfg.shift_samples * cfg.frame_skip
        return self.read(first * hop, min(self.total, (upto - 1) * hop + cfg.window_samples))

    def read(self, start: int, stop: int) -> torch.Tensor:
        from surprisal_cc.data.audio import read_resampled_span

        return read_resampled_span(self.file, start, stop, self.sample_rate)

    def level_gain(self, dbfs: Optional[float]) -> Optional[float]:
        """The gain that :func:`~surprisal_cc.data.waveforms.scaled_to_level` gives the whole file for an RMS
        level of ``dbfs`` (None: no scaling), from its RMS, read part by part: every part of the file is
        scaled by it, as whole-file decoding scales the file. A part scaled on its own would raise a
        long pause's background noise to speech level, where the model finds phones."""
        import torch

        from surprisal_cc.data.waveforms import level_gain

        if dbfs is None:
            return None
        energy, block = 0.0, int(round(max(CHUNK_S, 1.0) * self.sample_rate))
        for start in range(0, self.total, block):
            energy += float((self.read(start, min(self.total, start + block)).double() ** 2).sum())
        rms = (energy / max(self.total, 1)) ** 0.5
        return float(level_gain(torch.tensor([rms], dtype=torch.float64), dbfs)[0])

    def close(self) -> None:
        self.file.close()


def part_seconds(long_chunk_s: Optional[float] = None) -> float:
    """Seconds of frames per part: ``long_chunk_s``, or :data:`CHUNK_S` where it is None (0: no file is
    long, :func:`is_long`); anything but 0 or at least 1 second is a :class:`ConfigurationError`
    (:func:`~surprisal_cc.checks.check_chunk_seconds`, as ``--chunk-seconds`` is checked).

    Example
    -------
    >>> part_seconds(), part_seconds(0), part_seconds(20)
    (60.0, 0.0, 20.0)
    >>> part_seconds(0.01)
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.ConfigurationError: long_chunk_s must be 0 (whole files) or at least 1 second, got 0.01
    """
    from surprisal_cc.checks import check_chunk_seconds

    return CHUNK_S if long_chunk_s is None else check_chunk_seconds(long_chunk_s)


def is_long(path: PathLike, chunk_s: float = CHUNK_S, context_s: float = CONTEXT_S) -> bool:
    """Whether ``path`` lasts longer than one part with its context on both sides (never where
    ``chunk_s`` is 0: every file whole)."""
    import soundfile

    from surprisal_cc.data.audio import soundfile_name

    if chunk_s <= 0:
        return False
    info = soundfile.info(soundfile_name(path))
    return info.frames > (chunk_s + 2 * context_s) * info.samplerate


def decode_long(asr: LoadedModel, path: PathLike, chunk_s: float = CHUNK_S, context_s: float = CONTEXT_S,
                progress: Optional[Callable[[float, float], None]] = None, keep_fbank: bool = False,
                seeded: bool = True) -> Dict:
    """Decode a file of any length part by part (see the module's description).

    Arguments
    ---------
    asr : LoadedModel
        The model, a :class:`~surprisal_cc.inference.asr.ConditionalASR`.
    path : str or path
        The audio file.
    chunk_s : float
        Seconds of frames kept per part (the last part takes up to ``chunk_s + context_s``).
    context_s : float
        Seconds of audio computed on each side of a part and not kept.
    progress : callable, optional
        ``progress(done_s, total_s)`` after each part.
    keep_fbank : bool
        Also return the filterbank frames (``fbank``; 320 bytes per frame).
    seeded : bool
        Seed sampled routing with the model's seed (:func:`~surprisal_cc.inference.passes.seeded_routing`); False:
        draw from the RNG as the caller left it (``evaluate``, which seeds the whole corpus once).

    Returns
    -------
    dict
        The fields of the :class:`~surprisal_cc.inference.asr.Transcription` that
        :meth:`ConditionalASR.transcribe_file` returns: phones with their times, per-frame arrays,
        MACs per frame over the whole file and the real-time factor of all parts.
    """
    import torch

    from surprisal_cc.inference import passes

    cfg = asr.feature_config
    rate = cfg.sample_rate
    reader = _Reader(path, rate)
    try:
        reader.refuse_short(path, cfg.min_samples)
        total_frames = cfg.num_frames(reader.total)
        chunk, context = _part_frames(asr, chunk_s, context_s)
        window = min(chunk, max(1, int(round(SEAM_WINDOW_S / asr.frame_shift_s))))
        blank = asr.beam_search.blank
        gain = reader.level_gain(asr.input_level_dbfs)
        acc = _Accumulator()
        start = 0
        with passes.seeded_routing(asr) if seeded else contextlib.nullcontext():
            while start < total_frames:
                part = _decode_part(asr, reader, cfg, start, total_frames, chunk, context, window, blank, gain)
                acc.add(asr, part, start, keep_fbank)
                start = part.stop
                if progress is not None:
                    progress(min(start * asr.frame_shift_s, reader.total / rate), reader.total / rate)
    finally:
        reader.close()
    comps = passes.flops_components(asr, acc.macs, total_frames)
    joined = {name: torch.cat(parts) if parts else None for name, parts in acc.pieces.items()}
    return dict(phones=passes.phones_of(asr, acc.phones), num_frames=total_frames, duration_s=reader.total / rate,
                flops_per_frame=sum(comps.values()), flops_components=comps,
                rtf=acc.seconds / max(reader.total / rate, 1e-9), path=str(path), segments=acc.segments,
                frame_shift_s=asr.frame_shift_s, routing=asr.routing, seed=asr.seed, **joined)


@dataclass
class _Part:
    """One decoded part: the forward pass, its log posteriors, the kept frames ``keep``
    (``[start, stop)`` relative to the audio read), their phone ids and the seconds it took."""

    forward: ForwardResult
    log_probs: torch.Tensor
    keep: slice
    ids: List[int]
    stop: int
    seconds: float


def _decode_part(asr: LoadedModel, reader: _Reader, cfg, start: int, total_frames: int, chunk: int, context: int,
                 window: int, blank: int, gain: Optional[float] = None) -> _Part:
    """Decode the part whose kept frames begin at ``start``, with ``context`` frames on each side; its
    end is the frame of the last ``window`` surest of a blank (the file's end for the last part);
    ``cfg``: the model's feature config; ``gain``: the file's input-level gain (:meth:`_Reader.level_gain`)."""
    import torch

    from surprisal_cc.inference import passes
    from surprisal_cc.runtime import decoding_threads

    last = total_frames - start <= chunk + context
    stop = total_frames if last else start + chunk  # nominal end of the kept frames
    first = max(0, start - context)
    wav = reader.read_frames(cfg, first, min(total_frames, stop + context))
    began = time.perf_counter()
    with decoding_threads(asr.threads):
        forward = passes.forward_pass(asr, wav[None], torch.tensor([wav.numel()]), gain=gain)
        log_probs = forward.output.log_probs[0].float().cpu()
        if not last:  # join at the frame of the last seconds surest of a blank
            lo = stop - window - first
            stop = first + lo + 1 + int(torch.argmax(log_probs[lo + 1:stop - first + 1, blank]))
        keep = slice(start - first, stop - first)
        ids = asr.beam_search(log_probs[keep][None], torch.tensor([stop - start]))[0]
    seconds = time.perf_counter() - began
    return _Part(forward, log_probs, keep, ids, stop, seconds)


@dataclass
class _Accumulator:
    """What the parts of a file add up to: phone ids and segments, MACs per component, the per-frame
    arrays' pieces and the seconds of decoding."""

    pieces: Dict[str, List[torch.Tensor]] = field(default_factory=lambda: {
        "surprisal": [], "p_big": [], "use_big": [], "steps": [], "fbank": []})
    macs: Dict[str, float] = field(default_factory=dict)
    phones: List[int] = field(default_factory=list)
    segments: list = field(default_factory=list)
    seconds: float = 0.0

    def add(self, asr: LoadedModel, part: _Part, start: int, keep_fbank: bool) -> None:
        """Add the kept frames of ``part`` (whose kept frames begin at frame ``start`` of the file)."""
        from surprisal_cc.decoding.timestamps import extend_segment
        from surprisal_cc.inference import passes

        keep = part.keep
        self.seconds += part.seconds
        segments = passes.segments(asr, part.log_probs[keep], part.ids, offset_frames=start)
        if self.segments:  # the blank frames before this part's first phone continue the last one, within its limit
            shift = asr.frame_shift_s
            to_s = segments[0][1] if segments else part.stop * shift
            self.segments[-1] = extend_segment(self.segments[-1], start * shift, to_s, shift)
        self.segments += segments
        self.phones += part.ids
        forward = part.forward
        per_frame = passes.frame_results(forward.output, 0, int(forward.frames[0]), forward.surprisal)
        for name, total in passes.frame_macs(forward.output, 0, keep).items():  # the kept frames' only
            self.macs[name] = self.macs.get(name, 0.0) + total
        for name in ("surprisal", "p_big", "use_big", "steps"):
            if per_frame[name] is not None:
                self.pieces[name].append(per_frame[name][keep])
        if keep_fbank:
            self.pieces["fbank"].append(forward.fbank[0, keep].cpu())


def _part_frames(asr: LoadedModel, chunk_s: float, context_s: float) -> Tuple[int, int]:
    """Frames kept per part (at least 1) and frames of context (at least 0) for these seconds."""
    per_s = 1.0 / asr.frame_shift_s
    return max(1, int(round(chunk_s * per_s))), max(0, int(round(context_s * per_s)))


def long_surprisal(asr: LoadedModel, path: PathLike, chunk_s: float = CHUNK_S,
                   context_s: float = CONTEXT_S) -> Iterator[torch.Tensor]:
    """The APC surprisal of a file's frames, ``chunk_s`` seconds of frames at a time (1-D tensors,
    in order), each part computed after ``context_s`` seconds of the audio before it.

    Example
    -------
    >>> from surprisal_cc.inference.asr import ConditionalASR
    >>> asr = ConditionalASR.untrained(["AH", "sil"], controller="surprisal")
    >>> import tempfile, numpy as np, soundfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     soundfile.write(f"{tmp}/a.wav", np.random.default_rng(0).uniform(-0.5, 0.5, 16000 * 3), 16000)
    ...     parts = list(long_surprisal(asr, f"{tmp}/a.wav", chunk_s=1.0, context_s=0.5))
    >>> [part.numel() for part in parts]
    [50, 50, 49]
    """
    import torch

    from surprisal_cc.inference import passes

    cfg = asr.feature_config
    reader = _Reader(path, cfg.sample_rate)
    try:
        reader.refuse_short(path, cfg.min_samples)
        chunk, context = _part_frames(asr, chunk_s, context_s)
        total_frames = cfg.num_frames(reader.total)
        gain = reader.level_gain(asr.input_level_dbfs)
        for start in range(0, total_frames, chunk):
            stop, first = min(total_frames, start + chunk), max(0, start - context)
            wav = reader.read_frames(cfg, first, stop)
            fbank, frames = passes.filterbanks(asr, wav[None], torch.tensor([wav.numel()]), gain=gain)
            yield passes.apc_surprisal(asr, fbank, frames)[0, start - first:stop - first].cpu()
    finally:
        reader.close()
