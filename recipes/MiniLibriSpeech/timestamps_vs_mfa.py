#!/usr/bin/env python3
"""Phone times of a model (CTC Viterbi, ``Transcription.segments``) against MFA's boundaries.

Each hypothesis is aligned to the MFA phones of the export CSV (minimum edit distance, repeated
``sil`` merged on both sides). For every phone recognised correctly, the difference between the
two start times (the utterance's first phone left out) and between the two end times (its last left
out) is collected; printed as JSON: the median, mean and 90th percentile of the start differences,
the share of starts within 50 ms, the signed median (model minus MFA: positive where the model's
phones start late) and the share of starts after MFA's, and the median end difference
(docs/results/MiniLibriSpeech/timestamps_vs_mfa.json holds the shipped model's on dev-clean-2).

    python recipes/MiniLibriSpeech/timestamps_vs_mfa.py ../shared/data [--model DIR] [--limit N] [--show UTT_ID]

``--show`` prints one utterance's CTM above its MFA phones in the same format.
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
from speechbrain.utils.edit_distance import wer_details_for_batch

from surprisal_cc.data.mfa import SILENCE_MARKS, read_mfa_export
from surprisal_cc.inference import ConditionalASR


def merge_silences(segments):
    """``(phone, start, end)`` with MFA's silence marks as ``sil`` and adjacent ``sil`` merged."""
    out = []
    for phone, start, end in segments:
        phone = "sil" if phone in SILENCE_MARKS else phone
        if out and phone == "sil" and out[-1][0] == "sil":
            out[-1] = ("sil", out[-1][1], end)
        else:
            out.append((phone, start, end))
    return out


def mfa_segments(row, sample_rate=16000):
    """``(phone, start, end)`` in seconds of an export row (:func:`read_mfa_export`), silences merged."""
    return merge_silences(zip(row.phn, [s / sample_rate for s in row.phn_starts],
                              [e / sample_rate for e in row.phn_ends]))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="folder holding LibriSpeech/dev-clean-2 and phone_labels/dev-clean-2_mfa.csv")
    parser.add_argument("--model", default=None, help="model folder (default: the shipped model)")
    parser.add_argument("--limit", type=int, default=None, help="every k-th utterance, N in all")
    parser.add_argument("--show", default=None, help="print this utterance's CTM and its MFA phones")
    args = parser.parse_args(argv)
    root = Path(args.data)
    rows = sorted(read_mfa_export(root / "phone_labels" / "dev-clean-2_mfa.csv", ("phn", "phn_starts", "phn_ends"),
                                  "sample-level phone boundaries"), key=lambda r: r.path)
    if args.show:
        rows = [r for r in rows if r.utt_id == args.show]
    elif args.limit:
        rows = rows[::max(1, len(rows) // args.limit)][:args.limit]
    asr = ConditionalASR.from_pretrained(args.model)
    starts, ends, start_time = [], [], time.time()  # signed, model minus MFA
    for row in rows:
        utt = row.utt_id
        result = asr.transcribe_file(root / "LibriSpeech" / row.path)
        hyp, ref = merge_silences(result.segments), mfa_segments(row)
        alignment = wer_details_for_batch(["u"], [[p for p, _, _ in ref]], [[p for p, _, _ in hyp]],
                                          compute_alignments=True)[0]["alignment"]
        for op, i, j in alignment:
            if op == "=" and i > 0:
                starts.append((hyp[j][1] - ref[i][1]) * 1000)
            if op == "=" and i < len(ref) - 1:
                ends.append(abs(hyp[j][2] - ref[i][2]) * 1000)
        if args.show:
            print(result.to_ctm(utt))
            print("MFA:")
            print("\n".join(f"{utt} 1 {s:.2f} {e - s:.2f} {p}" for p, s, e in ref))
    signed = np.array(starts)
    d = np.abs(signed)
    stats = {"utterances": len(rows), "matched_phone_starts": int(d.size),
             "median_start_diff_ms": float(np.median(d)), "mean_start_diff_ms": float(d.mean()),
             "p90_start_diff_ms": float(np.percentile(d, 90)), "within_50ms": float((d <= 50).mean()),
             "median_signed_start_diff_ms": float(np.median(signed)), "starts_after_mfa": float((signed > 0).mean()),
             "median_end_diff_ms": float(np.median(ends)), "seconds": round(time.time() - start_time, 1)}
    print(json.dumps(stats))
    return stats


if __name__ == "__main__":
    main()
