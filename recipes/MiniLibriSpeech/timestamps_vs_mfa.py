#!/usr/bin/env python3
"""Phone times of a model (CTC Viterbi, ``Transcription.segments``) against MFA's boundaries.

Each hypothesis is aligned to the MFA phones (the export CSV ``phone_labels/SUBSET_mfa.csv``, or the
TextGrids under ``phone_labels/SUBSET``; minimum edit distance, repeated ``sil`` merged on both sides).
For every phone recognised correctly, the difference between the two start times (the utterance's
first phone left out) and between the two end times (its last left out) is collected; printed as
JSON: the median, mean and 90th percentile of the start differences, the share of starts within
50 ms, the signed median (model minus MFA: positive where the model's phones start late) and the
share of starts after MFA's; the median, mean, 90th and 99th percentile and largest end difference,
the share of ends within 50 ms and the signed median, as the phones are timed (``ends``, with
:data:`surprisal_cc.decoding.timestamps.MAX_PHONE_S`) and as each phone lasting until the next starts
(``ends_without_limit``); what the limit moved (``limit``: the share of the recognised phones, not
silence, whose end it moved, by how much, and how many correctly recognised phones it left ending
before MFA's end); and the durations of MFA's phones (``mfa_durations_ms``: phones, spoken noise
and silences, percentiles) that the limit is chosen from, on mfa-dev.
docs/results/MiniLibriSpeech/timestamps_vs_mfa.json holds the shipped model's on dev-clean-2,
timestamps_vs_mfa_mfa-dev.json on mfa-dev.

    python recipes/MiniLibriSpeech/timestamps_vs_mfa.py ../shared/data [--subset S] [--model DIR] [--limit N] [--show UTT_ID]

``--show`` prints one utterance's CTM above its MFA phones in the same format.
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
from speechbrain.utils.edit_distance import wer_details_for_batch

from surprisal_cc.data.manifest import read_text
from surprisal_cc.data.mfa import (SILENCE_MARKS, TEXTGRID_HINT, parse_textgrid, read_mfa_export,
                                   textgrids_by_utterance)
from surprisal_cc.data.phones import SPOKEN_NOISE, strip_stress
from surprisal_cc.inference import ConditionalASR
from surprisal_cc.decoding.timestamps import MAX_PHONE_S, MAX_SPOKEN_NOISE_S, SILENCE_LABELS


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


def textgrid_segments(path):
    """``(phone, start, end)`` in seconds of a TextGrid's phones tier, stress left out, silences merged."""
    intervals = parse_textgrid(read_text(path, TEXTGRID_HINT))["phones"]
    return merge_silences((label(mark.strip()), start, end) for start, end, mark in intervals)


def label(mark):
    """A TextGrid phone mark as the models' labels read it: stress left out, ``spn`` as is."""
    if mark in SILENCE_MARKS:
        return mark
    return SPOKEN_NOISE if mark.lower() == SPOKEN_NOISE else strip_stress(mark).upper()


def utterances(root: Path, subset: str):
    """``[(utterance id, audio file, MFA segments)]`` of a subset, by audio path."""
    csv = root / "phone_labels" / f"{subset}_mfa.csv"
    if csv.exists():
        rows = read_mfa_export(csv, ("phn", "phn_starts", "phn_ends"), "sample-level phone boundaries")
        return sorted(((r.utt_id, root / "LibriSpeech" / r.path, mfa_segments(r)) for r in rows),
                      key=lambda u: str(u[1]))
    out = []
    for utt, path in textgrids_by_utterance(root / "phone_labels" / subset).items():
        speaker, chapter = utt.split("-")[:2]
        out.append((utt, root / "LibriSpeech" / subset / speaker / chapter / f"{utt}.flac", textgrid_segments(path)))
    return sorted(out, key=lambda u: str(u[1]))


def without_limit(segments, end_s):
    """The segments with each phone lasting until the next starts (the last until ``end_s``)."""
    return [(p, s, e) for (p, s, _), e in zip(segments, [s for _, s, _ in segments[1:]] + [end_s])]


def end_stats(signed) -> dict:
    """Summary of signed end differences (ms, model minus MFA)."""
    d = np.abs(signed)
    return {"median_end_diff_ms": _ms(np.median(d)), "mean_end_diff_ms": _ms(d.mean()),
            "p90_end_diff_ms": _ms(np.percentile(d, 90)), "p99_end_diff_ms": _ms(np.percentile(d, 99)),
            "max_end_diff_ms": _ms(d.max()), "end_within_50ms": round(float((d <= 50).mean()), 4),
            "median_signed_end_diff_ms": _ms(np.median(signed)), "ends_over_500ms": int((d > 500).sum())}


def duration_stats(durations, limit_s=None) -> dict:
    """Count and percentiles (ms) of durations in seconds, and how many last longer than ``limit_s``."""
    d = np.asarray(durations) * 1000
    if not d.size:
        return {"count": 0}
    return {"count": int(d.size), **{f"p{q:g}": _ms(np.percentile(d, q)) for q in (50, 99, 99.9)}, "max": _ms(d.max()),
            **({} if limit_s is None else {"over_limit": int((d > 1000 * limit_s + 1e-6).sum())})}


def _ms(value) -> float:
    """Milliseconds to a tenth."""
    return round(float(value), 1)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="folder holding LibriSpeech/SUBSET and phone_labels/SUBSET_mfa.csv or "
                                     "phone_labels/SUBSET (TextGrids)")
    parser.add_argument("--subset", default="dev-clean-2", help="dev-clean-2 (default) or mfa-dev")
    parser.add_argument("--model", default=None, help="model folder (default: the shipped model)")
    parser.add_argument("--limit", type=int, default=None, help="every k-th utterance, N in all")
    parser.add_argument("--show", default=None, help="print this utterance's CTM and its MFA phones")
    args = parser.parse_args(argv)
    rows = utterances(Path(args.data), args.subset)
    if args.show:
        rows = [r for r in rows if r[0] == args.show]
    elif args.limit:
        rows = rows[::max(1, len(rows) // args.limit)][:args.limit]
    asr = ConditionalASR.from_pretrained(args.model)
    starts, ends, ends_free, start_time = [], [], [], time.time()  # signed, model minus MFA
    moved, moved_early, timed = [], [], 0  # how far the limit moved an end (ms); matched ends it put before MFA's
    durations = {"phones": [], "spoken_noise": [], "silences": []}
    for utt, audio, ref in rows:
        for phone, start, end in ref:
            kind = "silences" if phone == "sil" else "spoken_noise" if phone == SPOKEN_NOISE else "phones"
            durations[kind].append(end - start)
        result = asr.transcribe_file(audio)
        free = without_limit(result.segments, result.num_frames * result.frame_shift_s)
        for (phone, _, end), (_, _, free_end) in zip(result.segments, free):
            if phone not in SILENCE_LABELS:
                timed += 1
                if end < free_end - 1e-9:
                    moved.append((free_end - end) * 1000)
        hyp, hyp_free = merge_silences(result.segments), merge_silences(free)
        alignment = wer_details_for_batch(["u"], [[p for p, _, _ in ref]], [[p for p, _, _ in hyp]],
                                          compute_alignments=True)[0]["alignment"]
        for op, i, j in alignment:
            if op == "=" and i > 0:
                starts.append((hyp[j][1] - ref[i][1]) * 1000)
            if op == "=" and i < len(ref) - 1:
                ends.append((hyp[j][2] - ref[i][2]) * 1000)
                ends_free.append((hyp_free[j][2] - ref[i][2]) * 1000)
                if hyp[j][2] < hyp_free[j][2] - 1e-9 and ends[-1] < 0:
                    moved_early.append(ends[-1])
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
             "median_end_diff_ms": float(np.median(np.abs(ends))), "matched_phone_ends": len(ends),
             "ends": end_stats(np.array(ends)), "ends_without_limit": end_stats(np.array(ends_free)),
             "limit": {"max_phone_s": MAX_PHONE_S, "max_spoken_noise_s": MAX_SPOKEN_NOISE_S, "phones": timed,
                       "ends_moved": len(moved), "share_moved": round(len(moved) / max(timed, 1), 5),
                       "median_moved_ms": _ms(np.median(moved)) if moved else 0.0,
                       "min_moved_ms": _ms(np.min(moved)) if moved else 0.0,
                       "matched_moved_before_mfa_end": len(moved_early),
                       "largest_cut_into_mfa_phone_ms": _ms(-min(moved_early)) if moved_early else 0.0},
             "mfa_durations_ms": {"phones": duration_stats(durations["phones"], MAX_PHONE_S),
                                  "spoken_noise": duration_stats(durations["spoken_noise"], MAX_SPOKEN_NOISE_S),
                                  "silences": duration_stats(durations["silences"])},
             "seconds": round(time.time() - start_time, 1)}
    print(json.dumps(stats))
    return stats


if __name__ == "__main__":
    main()
