"""Long files through :class:`~surprisal_cc.deploy.runtime.OnnxASR` in parts with context, in bounded memory:
the algorithm of :mod:`surprisal_cc.inference.long_audio` (its constants, the same part boundaries, the join
at the frame of a part's last seconds surest of a blank, the phone that continues across a join), in numpy.
``tests/test_deploy.py`` checks that the constants are the PyTorch runtime's and that both give the same
phones on a long file.

Example
-------
>>> part_seconds(), part_seconds(0)
(60.0, 0.0)
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np
import soundfile as sf

from surprisal_cc.checks import check_chunk_seconds
from surprisal_cc.decoding.timestamps import extend_segment
from surprisal_cc.data.audio_files import refuse_short_audio, soundfile_name
from surprisal_cc.deploy.audio import SpanReader

PathLike = Union[str, os.PathLike]

CHUNK_S = 60.0  # seconds of kept frames per part (surprisal_cc.inference.long_audio.CHUNK_S)
CONTEXT_S = 8.0  # seconds of audio on each side of a part
SEAM_WINDOW_S = 2.0  # the join is searched in the last SEAM_WINDOW_S of a part
PROGRESS_AFTER_S = 60.0  # files longer than this report progress


def part_seconds(long_chunk_s: Optional[float] = None) -> float:
    """Seconds of frames per part: ``long_chunk_s``, or :data:`CHUNK_S` where it is None (0: whole files)."""
    return CHUNK_S if long_chunk_s is None else check_chunk_seconds(long_chunk_s)


def is_long(path: PathLike, chunk_s: float = CHUNK_S, context_s: float = CONTEXT_S) -> bool:
    """Whether ``path`` lasts longer than one part with its context on both sides (never for ``chunk_s`` 0)."""
    if chunk_s <= 0:
        return False
    info = sf.info(soundfile_name(path))
    return info.frames > (chunk_s + 2 * context_s) * info.samplerate


def decode_long(asr: Any, path: PathLike, chunk_s: float = CHUNK_S, context_s: float = CONTEXT_S,
                progress: Optional[Callable[[float, float], None]] = None) -> Dict[str, Any]:
    """Decode a file of any length part by part with ``asr``, an :class:`~surprisal_cc.deploy.runtime.OnnxASR`
    (see :mod:`surprisal_cc.inference.long_audio`): the fields of its
    :class:`~surprisal_cc.decoding.transcription.Transcription`."""
    cfg = asr.features
    rate = cfg.sample_rate
    reader = SpanReader(path, rate)
    try:
        refuse_short_audio(path, reader.file.frames, reader.file.samplerate, cfg.min_samples, rate)
        total_frames = cfg.num_frames(reader.total)
        per_s = 1.0 / asr.frame_shift_s
        chunk, context = max(1, int(round(chunk_s * per_s))), max(0, int(round(context_s * per_s)))
        window = min(chunk, max(1, int(round(SEAM_WINDOW_S / asr.frame_shift_s))))
        hop = cfg.shift_samples * cfg.frame_skip
        gain = _file_gain(asr, reader)
        asr.start_draws()
        macs: Dict[str, float] = {}
        pieces: Dict[str, List[np.ndarray]] = {"surprisal": [], "p_big": [], "use_big": [], "steps": []}
        phones: List[int] = []
        segments: list = []
        seconds, start = 0.0, 0
        while start < total_frames:
            last = total_frames - start <= chunk + context
            stop = total_frames if last else start + chunk
            first = max(0, start - context)
            upto = min(total_frames, stop + context)
            wav = reader.read(first * hop, min(reader.total, (upto - 1) * hop + cfg.window_samples))
            began = time.perf_counter()
            out = asr.forward(wav, gain)
            if not last:
                lo = stop - window - first
                stop = first + lo + 1 + int(np.argmax(out.log_probs[lo + 1:stop - first + 1, asr.blank]))
            keep = slice(start - first, stop - first)
            ids = asr.decode(out.log_probs[keep])
            seconds += time.perf_counter() - began
            part_segments = asr.segments(out.log_probs[keep], ids, offset_frames=start)
            if segments:
                shift = asr.frame_shift_s
                to_s = part_segments[0][1] if part_segments else stop * shift
                segments[-1] = extend_segment(segments[-1], start * shift, to_s, shift)
            segments += part_segments
            phones += ids
            for name, values in out.frame_macs.items():
                macs[name] = macs.get(name, 0.0) + float(values[keep].sum())
            for name in pieces:
                value = getattr(out, name)
                if value is not None:
                    pieces[name].append(value[keep])
            start = stop
            if progress is not None:
                progress(min(start * asr.frame_shift_s, reader.total / rate), reader.total / rate)
    finally:
        reader.close()
    comps = asr.flops_components(macs, total_frames)
    joined = {name: np.concatenate(parts) if parts else None for name, parts in pieces.items()}
    duration = reader.total / rate
    return dict(phones=[asr.labels[i] for i in phones], num_frames=total_frames, duration_s=duration,
                flops_per_frame=sum(comps.values()), flops_components=comps, rtf=seconds / max(duration, 1e-9),
                path=str(path), segments=segments, frame_shift_s=asr.frame_shift_s,
                routing=asr.routing if asr.routing_info else None, seed=asr.seed, **joined)


def _file_gain(asr: Any, reader: SpanReader) -> Optional[float]:
    """The input-level gain of the whole file (its RMS read part by part), as every part is scaled."""
    if asr.input_level_dbfs is None:
        return None
    energy, block = 0.0, int(round(max(CHUNK_S, 1.0) * reader.target_sr))
    for begin in range(0, reader.total, block):
        energy += float((reader.read(begin, min(reader.total, begin + block)).astype(np.float64) ** 2).sum())
    return asr.level_gain((energy / max(reader.total, 1)) ** 0.5)
