#!/usr/bin/env python3
"""Relabel training data with a trained CTC model: lexicon phones + the pauses the model hears.

Every utterance is aligned with an optional ``sil`` at each word boundary (surprisal_cc.alignment.realign),
either with the best checkpoint of a finished run (the splits of its data) or with an exported
model such as the shipped ``surprisal_cc/pretrained/`` (the LibriSpeech-format folders given with
``--corpus``; fp32 and deterministic routing, so no aligner has to be trained and every machine gets
the same labels). The labels are written in the MFA export format, which the data preparation reads with
``labels: mfa``:

    python recipes/MiniLibriSpeech/realign_labels.py RUN_DIR realigned.csv
    python recipes/MiniLibriSpeech/realign_labels.py surprisal_cc/pretrained realigned.csv --pauses \\
        --corpus data/MiniLibriSpeech/LibriSpeech/train-clean-5
    python recipes/MiniLibriSpeech/train.py hparams/MiniLibriSpeech/conditional_ctc.yaml \\
        --labels="{train: mfa, valid: mfa, test: mfa}" \\
        --mfa_labels="{train: realigned.csv, valid: realigned.csv}" \\
        --output_folder=...

A model trained on lexicon labels (``sil`` only at the two ends) hears no pause between words;
``--pauses`` adds a ``sil`` where the audio itself is silent for at least ``--min_pause_frames``
frames at a word boundary (surprisal_cc.alignment.realign.insert_pauses). ``--all_pronunciations`` lets
the alignment pick each word's pronunciation among all of CMUdict's (e.g. "and" as AE N D or
AH N D), as MFA does, instead of always the first. ``--split test`` realigns
dev-clean-2 instead and scores the inserted ``sil`` against its MFA labels.
Run from the repository root (the run's hparams hold paths relative to it).
"""
import argparse
import hashlib
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from surprisal_cc.data import DataPreparationError, Lexicon, load_mfa_labels, load_mfa_word_phones
from surprisal_cc.data.librispeech import locate_subsets
from surprisal_cc.data.mfa import read_word_phones, write_alignment_csv
from surprisal_cc.alignment.label_eval import (
    find_mfa_reference,
    label_error_rate,
    pronunciation_agreement,
    read_boundary_silences,
    silence_precision_recall,
)
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.alignment.realign import realign_corpus, realign_run, silence_statistics


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="output folder of a finished recipe run (hyperparams.yaml, save/CKPT+*), "
                                       "or an exported model folder (model.json) with --corpus")
    parser.add_argument("out_csv", help="where to write the labels (MFA export format)")
    parser.add_argument("--split", nargs="+", default=["train", "valid"], choices=["train", "valid", "test"],
                        help="splits of a run's data to realign (default: train valid)")
    parser.add_argument("--corpus", nargs="+", default=None,
                        help="LibriSpeech-format folders, or subset names found in --data_folder, to realign "
                             "with an exported model (e.g. train-clean-5); dev-clean-2 alone is scored against "
                             "its MFA labels")
    parser.add_argument("--data_folder", default="[data/MiniLibriSpeech,../shared/data]",
                        help="YAML list of folders holding LibriSpeech/<subset>, searched in order, for subset "
                             "names in --corpus (default: the Makefile's DATA, "
                             "[data/MiniLibriSpeech,../shared/data])")
    parser.add_argument("--download", action="store_true",
                        help="download Mini-LibriSpeech subsets that --data_folder lacks into its first folder")
    parser.add_argument("--reference", default=None,
                        help="MFA export CSV or TextGrid folder to score the inserted sil against (default: "
                             "phone_labels/<subset>_mfa.csv or phone_labels/<subset>/ next to the corpus)")
    parser.add_argument("--overrides", default="", help="YAML overrides of the run's hparams, e.g. "
                                                        "'{cache_folder: /tmp/cache}'")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--limit", type=int, default=None, help="only the N shortest utterances of each split")
    parser.add_argument("--pauses", action="store_true",
                        help="also add sil where the audio pauses between words (a model trained on lexicon "
                             "labels emits none there): a run of silent frames of at least --min_pause_frames")
    parser.add_argument("--pause_threshold", type=float, default=0.25,
                        help="silent: below the utterance's silence level + this fraction of its dynamic range")
    parser.add_argument("--min_pause_frames", type=int, default=5, help="shortest pause in frames (5: 100 ms)")
    parser.add_argument("--all_pronunciations", action="store_true",
                        help="choose each word's pronunciation among all of CMUdict's, the one the audio fits "
                             "best (as MFA does), instead of always the first")
    args = parser.parse_args(argv)
    pauses = {"threshold": args.pause_threshold, "min_frames": args.min_pause_frames} if args.pauses else None

    if not Path(args.source).is_dir():
        parser.error(f"{args.source}: no such folder (an exported model folder with model.json, or a run folder "
                     "with hyperparams.yaml)")
    exported = (Path(args.source) / "model.json").is_file()
    if exported != (args.corpus is not None):
        parser.error(f"{args.source}: an exported model folder (model.json) realigns the folders given with "
                     "--corpus; a run folder realigns the --split of its data")
    if exported:
        args.corpus = [str(c) if Path(c).is_dir() else str(locate_subsets(yaml.safe_load(args.data_folder), [c],
                                                                          args.download)[c])
                       for c in args.corpus]
    start = time.time()
    utterances, info = [], {}
    for part in args.corpus or args.split:
        options = dict(device=args.device, batch_size=args.batch_size, limit=args.limit, pauses=pauses,
                       all_pronunciations=args.all_pronunciations, info=info)
        if exported:
            utterances += list(realign_corpus(args.source, part, **options))
        else:
            utterances += list(realign_run(args.source, part, overrides=args.overrides, **options))
    write_alignment_csv(args.out_csv, utterances, samples_per_frame=info["samples_per_frame"])
    wall = time.time() - start

    stats = silence_statistics(utterances)
    n = max(len(utterances), 1)
    frames = np.array([u.num_frames for u in utterances])
    stats.update({
        "checkpoint": info["checkpoint"], "splits": args.corpus or args.split, "out_csv": args.out_csv,
        "pauses": pauses, "all_pronunciations": args.all_pronunciations,
        "forward_s": info["forward_s"], "align_s": info["align_s"], "wall_s": wall,
        "align_ms_per_utterance": 1e3 * info["align_s"] / n,
        "mean_frames": float(frames.mean()) if len(frames) else 0.0,
        "sha256": hashlib.sha256(Path(args.out_csv).read_bytes()).hexdigest(),  # the same labels on every machine?
    })
    reference = args.reference
    if reference is None and utterances and (args.split == ["test"] if args.corpus is None else len(args.corpus) == 1):
        reference = find_mfa_reference(utterances[0].wav)
    if reference:
        hyp = {u.id: (len(u.words), set(u.silences)) for u in utterances}
        ref = read_boundary_silences(reference)
        stats["sil_vs_reference_interior"] = silence_precision_recall(hyp, ref, interior_only=True)
        stats["sil_vs_reference_all"] = silence_precision_recall(hyp, ref, interior_only=False)
        ref_phones = load_mfa_labels(reference)
        stats["per_vs_reference_realigned"] = label_error_rate({u.id: u.phones for u in utterances}, ref_phones)["per"]
        # without the pauses: with the first pronunciations that is the lexicon's labels
        unpaused = "per_vs_reference_without_pauses" if args.all_pronunciations else "per_vs_reference_lexicon"
        stats[unpaused] = label_error_rate(
            {u.id: ["sil"] + [p for p in u.phones if p != "sil"] + ["sil"] for u in utterances}, ref_phones)["per"]
        stats["pronunciations_vs_reference"] = pronunciation_agreement(
            read_word_phones(args.out_csv), load_mfa_word_phones(reference), Lexicon(g2p="spn").pronunciations)
        stats["reference"] = str(reference)

    print(f"utterances: {stats['utterances']} ({stats['fallbacks']} kept lexicon labels: no alignment fitted)")
    print(f"sil inserted per utterance between words: {stats['interior_sil_per_utterance']:.2f}; "
          f"word boundaries with sil: {100 * stats['interior_boundaries_with_sil']:.1f} %; "
          f"sil at start / end: {100 * stats['start_with_sil']:.1f} % / {100 * stats['end_with_sil']:.1f} %")
    if args.all_pronunciations:
        print(f"words aligned with another pronunciation than CMUdict's first: "
              f"{100 * stats['other_pronunciations']:.1f} %")
    print(f"time: {wall:.1f} s in all, model {info['forward_s']:.1f} s, alignment {info['align_s']:.1f} s "
          f"({stats['align_ms_per_utterance']:.1f} ms per utterance of {stats['mean_frames']:.0f} frames on average)")
    if reference:
        for key in ("interior", "all"):
            r = stats[f"sil_vs_reference_{key}"]
            print(f"sil vs {reference} ({key} boundaries, {r['utterances']} utterances): precision "
                  f"{100 * r['precision']:.1f} %, recall {100 * r['recall']:.1f} %, F1 {100 * r['f1']:.1f} %")
        agree = stats["pronunciations_vs_reference"]
        print(f"words with several CMUdict pronunciations ({agree['words']}): the reference's is not the first "
              f"for {100 * agree['reference_other']:.1f} %; the realigned labels have the reference's for "
              f"{100 * agree['agreement']:.1f} % (the first pronunciation: {100 * agree['agreement_first']:.1f} %)")
        print(f"label PER vs reference: realigned {stats['per_vs_reference_realigned']:.2f} %, "
              f"{unpaused[len('per_vs_reference_'):].replace('_', ' ')} {stats[unpaused]:.2f} %")
    print(json.dumps(stats, default=float))
    return stats


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    try:
        main()
    except (ConfigurationError, DataPreparationError) as err:
        sys.exit(f"error: {err}")
