#!/usr/bin/env python3
"""A model's PER on a corpus played back quieter or louder: each utterance's samples times a gain.

The features are log-mel energies without level normalisation, so a recording much quieter (or
louder) than the training speech shifts every feature. This scores one LibriSpeech-format subset
(every ``--every``-th utterance) at each ``--gains`` dB (clipped to [-1, 1]), with the corpus's labels (``--mfa-labels``,
else the lexicon), and prints JSON: the corpus-level PER per gain and the utterances' RMS level
(dBFS) at 0 dB, beside that of the ``--reference`` folder's audio (e.g. the training subset), silent
files counted apart (``silent_files``). With ``--input-level DBFS`` the model scales each utterance
to that level first (``--input-level`` of ``surprisal-cc transcribe`` and ``evaluate``)::

    python recipes/MiniLibriSpeech/level_sensitivity.py data/MiniLibriSpeech/LibriSpeech/mfa-dev \\
        --mfa-labels data/MiniLibriSpeech/phone_labels/mfa-dev --every 8 --gains 0 -20 -40 \\
        --reference data/MiniLibriSpeech/LibriSpeech/train-clean-5

(docs/results/MiniLibriSpeech/level_sensitivity.json holds the shipped model's on mfa-dev.)
"""
import argparse
import json
import time
from typing import Dict, List, Optional, Sequence

import soundfile
import torch
from speechbrain.utils.edit_distance import wer_details_for_batch

from surprisal_cc.inference.corpora import corpus_items
from surprisal_cc.data.audio import inspect_audio, level_summary
from surprisal_cc.data.manifest import list_files
from surprisal_cc.inference import ConditionalASR


def scored(asr: ConditionalASR, items: Sequence, gain_db: float, batch_size: int = 8) -> float:
    """Corpus-level PER (%) of ``items`` (id, audio path, reference phones) with every waveform times the gain."""
    gain = 10 ** (gain_db / 20)
    hyps: List[List[str]] = []
    for start in range(0, len(items), batch_size):
        batch = items[start:start + batch_size]
        wavs = []
        for _, path, _ in batch:
            audio, rate = soundfile.read(path, dtype="float32", always_2d=True)
            if rate != asr.feature_config.sample_rate:
                raise SystemExit(f"error: {path}: {rate} Hz; this tool scores {asr.feature_config.sample_rate} Hz audio")
            wavs.append((torch.from_numpy(audio.mean(axis=1)) * gain).clamp(-1.0, 1.0))  # clipped, as a recording is
        hyps += [result.phones for result in asr.transcribe_batch(wavs)]
    details = wer_details_for_batch([u for u, _, _ in items], [ref for _, _, ref in items], hyps)
    return 100.0 * sum(d["num_edits"] for d in details) / max(1, sum(d["num_ref_tokens"] for d in details))


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="one LibriSpeech-format subset's folder")
    parser.add_argument("--mfa-labels", help="its MFA labels (CSV export or TextGrid folder); default: the lexicon")
    parser.add_argument("--model", help="model folder (default: the shipped model)")
    parser.add_argument("--gains", type=float, nargs="+", default=[0.0, -20.0, -40.0], help="gains in dB")
    parser.add_argument("--every", type=int, default=1, help="score every k-th utterance")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--input-level", type=float, metavar="DBFS",
                        help="the model scales each utterance to this RMS level first (ConditionalASR.set_input_level)")
    parser.add_argument("--reference", help="a folder whose .flac files' RMS levels are given beside (e.g. the training subset)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    asr = ConditionalASR.from_pretrained(args.model)
    asr.set_input_level(args.input_level)
    items, labels = corpus_items(args.data, asr, mfa_labels=args.mfa_labels)
    items = items[::max(1, args.every)]
    levels = [inspect_audio(path).rms_dbfs for _, path, _ in items]  # of the channel mean, as the model hears it
    began = time.time()
    result = {"data": args.data, "labels": labels, "model": str(asr.source), "input_level_dbfs": args.input_level,
              "utterances": len(items), **level_summary(levels),
              "per_by_gain_db": {f"{gain:+g}": round(scored(asr, items, gain), 2) for gain in args.gains}}
    if args.reference:
        reference = [inspect_audio(path).rms_dbfs for path in list_files(args.reference, (".flac",))]
        result["reference"] = {"folder": args.reference, "files": len(reference), **level_summary(reference)}
    result["seconds"] = round(time.time() - began, 1)
    print(json.dumps(result, allow_nan=False))
    return result


if __name__ == "__main__":
    main()
