#!/usr/bin/env python3
"""How the paper's 6.43M FLOPs per frame arises: a model's FLOPs and PER on dev-clean-2 counted as the
authors' public code counts them, beside the honest figures (docs/NOTES items 2, 5, 10 and 11).

One decoding pass of the model (default: the shipped one; ``--model DIR``) over the corpus, routed as
``surprisal-cc evaluate`` routes it (deterministic ``p_big > 0.5``; ``--sampled --seed N``: sampled), through
:func:`surprisal_cc.inference.evaluation.evaluate_corpus` itself, so that the real-frame FLOPs and the
corpus-level PER are evaluate's. Each batch the model decodes is recorded on the way (sample and frame
counts, the per-frame routing the model reports, the raw hypothesis), and from those the script reports:

(a) FLOPs per frame on real frames: evaluate's figure (MACs that ran, APC included).
(b) FLOPs the authors' way: the corpus in shuffled batches of 32 (``torch.randperm`` with a fixed seed per
    shuffle), utterances of >= 500,000 samples dropped from their batch as the authors' collate drops them,
    each batch zero-padded to its longest waveform; each row of routing decisions sliced by the utterance's
    *sample* count (which is longer than any frame count, so every padded frame stays in), the batch mean
    of the decisions mixed as ``(1 - m) * small-only + m * big-only`` (APC included, the controller not, as
    the authors' ``FLOPs_small`` / ``FLOPs_big``), and the per-batch figures averaged weighted by batch
    size. Also the fraction of the averaged frames that are real, the same rule sliced by frames (real
    frames only, batch means weighted by batch size), and the spread over the shuffle seeds.
(c) PER corpus-level (evaluate's) and the authors' way: each hypothesis cut to the reference's length,
    repeated ``sil`` merged in both, a jiwer-style WER (edit distance over the reference's length) per
    utterance, averaged over the utterances, the utterances of >= 500,000 samples left out.

Padded frames: the authors' padding is zeros in the waveform, and their APC and controller ran over it.
This script computes what this model's controller gives there by running the filterbank front end, the
APC and the test-time controller over each utterance zero-padded to the longest kept waveform of the
corpus, once. That is exact for every batch: the features of a 25 ms window depend on its samples only
(no CMVN, no dither) and the APC is a unidirectional GRU, so the decisions on a waveform padded to L
samples are the first frames of those on the same waveform padded further. The script checks it on
one real padded batch (``padded_batch_check``). Deterministic routing thresholds p_big there;
sampled routing draws from it with a generator seeded by the shuffle seed. On the real frames the
decisions are those the model ran with in the decoding pass. Routing is what the model's encoder
reports and the costs are the table of :func:`surprisal_cc.model.flops.static_flop_rows`.

The authors' own code sampled its test routing (``infer`` drops its ``deterministic`` argument); run with
``--sampled --seed 1`` for that reading. Each run writes its entry into ``authors_way.json`` (keyed by
routing) and rewrites ``authors_way.md`` from all the entries there::

    OMP_NUM_THREADS=1 python recipes/MiniLibriSpeech/authors_way.py ../shared/data/LibriSpeech/dev-clean-2 \\
        --mfa-labels ../shared/data/phone_labels/dev-clean-2_mfa.csv
    OMP_NUM_THREADS=1 python recipes/MiniLibriSpeech/authors_way.py ../shared/data/LibriSpeech/dev-clean-2 \\
        --mfa-labels ../shared/data/phone_labels/dev-clean-2_mfa.csv --sampled --seed 1

dev-clean-2 is the test set: this only reports, it chooses nothing.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from speechbrain.utils.edit_distance import count_ops, op_table

from surprisal_cc.data.phones import merge_repeated
from surprisal_cc.inference import ConditionalASR, passes
from surprisal_cc.inference.corpora import corpus_items
from surprisal_cc.inference.evaluation import evaluate_corpus
from surprisal_cc.model.flops import static_flop_rows
from surprisal_cc.model.nnet import weights_fingerprint
from surprisal_cc.training.export import portable_path

#: The authors' collate drops every utterance of at least this many samples (``CollateWavsASR.max_length``).
AUTHORS_MAX_SAMPLES = 500_000
#: The authors' batch size.
AUTHORS_BATCH = 32
#: The paper's surprisal rows (Table 1: Mini-LibriSpeech, TIMIT).
PAPER_FLOPS = {"Mini-LibriSpeech": 6.43e6, "TIMIT": 6.41e6}
OUT_DIR = Path("docs/results/MiniLibriSpeech/apc_tc30")


# ------------------------------------------------------------------ the two counting rules
def authors_batch_flops(use_big: Sequence[Sequence[float]], slice_lengths: Sequence[int], small: float,
                        big: float) -> float:
    """FLOPs per frame of one batch as the authors' ``infer`` and ``test`` count them: each padded row of
    routing decisions sliced to ``slice_lengths`` (their code passes the *sample* counts, so nothing is
    cut; frame counts would keep the real frames only), the mean decision ``m`` over what is kept, and
    ``(1 - m) * small + m * big``.

    Arguments
    ---------
    use_big : sequence of sequences of 0/1
        One row per utterance, each as long as the padded batch's frames.
    slice_lengths : sequence of int
        What each row is sliced to.
    small, big : float
        FLOPs per frame of the small-only and big-only model.

    Returns
    -------
    float

    Example
    -------
    Two utterances of 2 and 1 real frames in a batch padded to 4 frames (padding routed small):

    >>> rows = [[1, 1, 0, 0], [1, 0, 0, 0]]
    >>> authors_batch_flops(rows, [32000, 16000], small=5.0, big=7.0)  # sliced by samples: m = 3/8
    5.75
    >>> authors_batch_flops(rows, [2, 1], small=5.0, big=7.0)  # sliced by frames: m = 3/3
    7.0
    """
    kept = [np.asarray(row, dtype=np.float64)[:int(n)] for row, n in zip(use_big, slice_lengths)]
    frames = sum(len(row) for row in kept)
    if frames == 0:
        raise ValueError("a batch with no frame left after slicing")
    m = sum(float(row.sum()) for row in kept) / frames
    return (1.0 - m) * small + m * big


def batch_size_weighted_mean(per_batch: Sequence[float], sizes: Sequence[int]) -> float:
    """The authors' test figure: each batch's value repeated once per utterance it holds, then averaged
    (``FLOPs += [batch_FLOPs] * batch_size``; ``FLOPs.mean()``).

    Example
    -------
    >>> batch_size_weighted_mean([6.0, 5.0], [3, 1])
    5.75
    """
    if not per_batch or sum(sizes) == 0:
        raise ValueError("no batch to average")
    return sum(value * size for value, size in zip(per_batch, sizes)) / sum(sizes)


def authors_utterance_wer(reference: Sequence[str], hypothesis: Sequence[str]) -> float:
    """One utterance's error rate as the authors' ``test`` computes it: the hypothesis cut to the
    reference's length (in tokens, before merging), repeated ``sil`` merged in both, then a word error
    rate over the phone strings (S + D + I over the merged reference's length, as jiwer's ``wer``).

    Example
    -------
    Cutting caps insertions: the last two inserted phones are never seen.

    >>> authors_utterance_wer(["sil", "AH", "B", "sil"], ["sil", "AH", "B", "sil", "K", "K"])
    0.0
    >>> authors_utterance_wer(["sil", "sil", "AH", "B"], ["sil", "AH", "D", "sil"])  # ref: sil AH B
    0.6666666666666666
    """
    ref = merge_repeated(list(reference))
    hyp = merge_repeated(list(hypothesis)[:len(reference)])
    if not ref:
        raise ValueError("an empty reference")
    ops = count_ops(op_table(ref, hyp))
    return (ops["insertions"] + ops["deletions"] + ops["substitutions"]) / len(ref)


def authors_per(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]]) -> float:
    """The authors' PER (%): the mean of :func:`authors_utterance_wer` over the utterances (their
    per-batch means weighted by batch size are this mean).

    Example
    -------
    >>> authors_per([["AH", "B"], ["sil", "K"]], [["AH", "B", "K"], ["sil"]])  # 0 and 1/2
    25.0
    """
    rates = [authors_utterance_wer(r, h) for r, h in zip(references, hypotheses)]
    return 100.0 * sum(rates) / len(rates)


def corpus_per(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]],
               cut: bool = False) -> float:
    """Corpus-level PER (%) with repeated ``sil`` merged (``cut``: hypotheses cut to the reference's length
    first, the authors' cap on insertions alone).

    Example
    -------
    >>> corpus_per([["AH", "B"], ["sil", "K"]], [["AH", "B", "K"], ["sil"]])  # 1 insertion + 1 deletion over 4
    50.0
    >>> corpus_per([["AH", "B"], ["sil", "K"]], [["AH", "B", "K"], ["sil"]], cut=True)
    25.0
    """
    edits = tokens = 0
    for reference, hypothesis in zip(references, hypotheses):
        ref = merge_repeated(list(reference))
        hyp = merge_repeated(list(hypothesis)[:len(reference)] if cut else list(hypothesis))
        ops = count_ops(op_table(ref, hyp))
        edits += ops["insertions"] + ops["deletions"] + ops["substitutions"]
        tokens += len(ref)
    return 100.0 * edits / tokens


def shuffled_batches(num_items: int, seed: int, batch_size: int = AUTHORS_BATCH) -> List[List[int]]:
    """Indices ``0..num_items-1`` shuffled with a generator seeded by ``seed`` (``torch.randperm``), in
    batches of ``batch_size`` (a DataLoader with ``shuffle=True``; the last batch may be short).

    Example
    -------
    >>> [len(b) for b in shuffled_batches(70, seed=0)]
    [32, 32, 6]
    >>> sorted(sum(shuffled_batches(5, seed=3, batch_size=2), []))
    [0, 1, 2, 3, 4]
    """
    order = torch.randperm(num_items, generator=torch.Generator().manual_seed(seed)).tolist()
    return [order[i:i + batch_size] for i in range(0, num_items, batch_size)]


# ------------------------------------------------------------------ the model's part
@contextlib.contextmanager
def recording_batches(records: List[Dict[str, Any]]) -> Iterator[None]:
    """While open, each batch that :func:`evaluate_corpus` decodes (through
    :func:`surprisal_cc.inference.passes.decode_batch`, which it calls by module attribute) is also recorded,
    per utterance and in decoding order: its sample and frame counts, the per-frame ``use_big`` the encoder
    reports (what ran) and the raw hypothesis. Nothing of the decoding changes."""
    original = passes.decode_batch

    def decode_and_record(asr, wavs: torch.Tensor, samples: torch.Tensor):
        batch = original(asr, wavs, samples)
        stats = batch.output.stats
        for b, (n, s) in enumerate(zip(batch.frames.tolist(), samples.tolist())):
            records.append({"samples": int(s), "frames": int(n),
                            "use_big": stats["use_big"][b, :n].cpu().numpy().astype(bool),
                            "hypothesis": passes.phones_of(asr, batch.hyps[b])})
        return batch

    passes.decode_batch = decode_and_record
    try:
        yield
    finally:
        passes.decode_batch = original


@torch.no_grad()
def padded_p_big(asr: ConditionalASR, signals: Sequence[torch.Tensor], pad_to: int,
                 batch_size: int = 16) -> List[np.ndarray]:
    """p_big of the test-time controller on every frame of each waveform zero-padded to ``pad_to``
    samples: the model's front end, its APC over all the frames (padding treated as audio, as the
    authors' model treated it) and its controller with its test bias shift."""
    controller = asr.encoder.stage_controller(False)
    if controller is None:
        raise SystemExit("this model has no small/big controller: the authors' FLOPs rule routes between two networks")
    rows: List[np.ndarray] = []
    for start in range(0, len(signals), batch_size):
        chunk = signals[start:start + batch_size]
        wavs = torch.zeros(len(chunk), pad_to)
        for i, signal in enumerate(chunk):
            wavs[i, :signal.numel()] = signal
        samples = torch.full((len(chunk),), pad_to, dtype=torch.long)
        fbank, frames = passes.filterbanks(asr, wavs, samples)
        apc_out = asr.apc(fbank, frames)
        features = apc_out.features if asr.use_apc_features else fbank
        p_big = controller.probability(features, apc_out.surprisal, bias_shift=asr.encoder.test_bias_shift)
        rows.extend(p.float().cpu().numpy() for p in p_big)
    return rows


def _cached_padded_p_big(asr: ConditionalASR, records: Sequence[Dict[str, Any]], keep: Sequence[int],
                         signals: Dict[int, torch.Tensor], pad_to: int,
                         args: argparse.Namespace) -> Tuple[Dict[int, np.ndarray], float, bool]:
    """:func:`padded_p_big` of the kept utterances by index, the seconds computing them took and whether
    they were read from ``args.cache`` (used when it holds this model's rows at this padding: p_big does
    not depend on the routing, so both routings share one pass)."""
    key = {"model": str(asr.source), "apc": weights_fingerprint(asr.apc.apc), "pad_to": pad_to,
           "bias_shift": float(asr.encoder.test_bias_shift), "ids": [records[i]["id"] for i in keep]}
    if args.cache is not None and args.cache.exists():
        cached = torch.load(args.cache, weights_only=False)
        if cached["key"] == key:
            return {i: row for i, row in zip(keep, cached["rows"])}, cached["seconds"], True
    started = time.perf_counter()
    rows = padded_p_big(asr, [signals[i] for i in keep], pad_to, batch_size=args.pad_batch)
    seconds = time.perf_counter() - started
    if args.cache is not None:
        args.cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"key": key, "rows": rows, "seconds": seconds}, args.cache)
    return {i: row for i, row in zip(keep, rows)}, seconds, False


def padded_batch_check(asr: ConditionalASR, signals: Sequence[torch.Tensor], rows: Sequence[np.ndarray]) -> Dict[str, float]:
    """Run ``signals`` as one real padded batch (zeros to its longest) and compare its p_big with the
    first frames of ``rows`` (from :func:`padded_p_big` at a longer padding)."""
    pad_to = max(s.numel() for s in signals)
    batch = padded_p_big(asr, signals, pad_to, batch_size=len(signals))
    diff = max(float(np.abs(b - r[:len(b)]).max()) for b, r in zip(batch, rows))
    flips = sum(int(((b > 0.5) != (r[:len(b)] > 0.5)).sum()) for b, r in zip(batch, rows))
    return {"utterances": len(signals), "frames": sum(len(b) for b in batch), "max_abs_p_big_diff": diff,
            "decision_flips": flips}


def authors_flops(records: Sequence[Dict[str, Any]], padded: Sequence[np.ndarray], keep: Sequence[int],
                  seed: int, rows: Dict[str, float], num_frames, sampled: bool) -> Dict[str, float]:
    """FLOPs the authors' way for one shuffle ``seed``: the utterances ``keep`` of the corpus dropped from
    their batches as the authors' collate drops the rest; decisions on real frames those that ran
    (``records``), on padded frames from ``padded`` (p_big: thresholded, or drawn with a generator seeded
    by ``seed`` when ``sampled``)."""
    draw = torch.Generator().manual_seed(seed)
    kept = set(keep)
    per_batch, per_batch_real, sizes, real, averaged = [], [], [], 0, 0
    for batch in shuffled_batches(len(records), seed):
        batch = [i for i in batch if i in kept]
        if not batch:
            continue
        width = num_frames(max(records[i]["samples"] for i in batch))
        decisions = []
        for i in batch:
            n = records[i]["frames"]
            p = torch.from_numpy(padded[i][n:width])
            pad = (torch.rand(p.shape, generator=draw) < p) if sampled else p > 0.5
            decisions.append(np.concatenate([records[i]["use_big"], pad.numpy()]))
        per_batch.append(authors_batch_flops(decisions, [records[i]["samples"] for i in batch],
                                             rows["small-only"], rows["big-only"]))
        per_batch_real.append(authors_batch_flops(decisions, [records[i]["frames"] for i in batch],
                                                  rows["small-only"], rows["big-only"]))
        sizes.append(len(batch))
        real += sum(records[i]["frames"] for i in batch)
        averaged += len(batch) * width
    return {"seed": seed, "flops_per_frame": batch_size_weighted_mean(per_batch, sizes),
            "real_frames_only": batch_size_weighted_mean(per_batch_real, sizes),
            "real_fraction": real / averaged, "batches": len(sizes)}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    started = time.perf_counter()
    asr = ConditionalASR.from_pretrained(args.model, routing="sampled" if args.sampled else "deterministic",
                                         seed=args.seed if args.sampled else None)
    records: List[Dict[str, Any]] = []
    reports: List[Dict[str, Any]] = []
    with recording_batches(records):
        scores = evaluate_corpus(asr, args.data, mfa_labels=args.mfa_labels, batch_size=args.batch_size,
                                 progress=args.progress, per_utterance=reports.append)
    items = {u: (wav, ref) for u, wav, ref in corpus_items(args.data, asr, mfa_labels=args.mfa_labels)[0]}
    if len(records) != len(reports):
        raise SystemExit(f"{len(records)} utterances recorded, {len(reports)} reported: a long utterance was decoded "
                         "in parts, which this script does not follow")
    for record, report in zip(records, reports):
        record["id"] = report["id"]
        record["reference"] = list(items[report["id"]][1])
        assert merge_repeated(record["hypothesis"]) == list(report["hypothesis"]), report["id"]
        assert int(record["use_big"].sum()) == round(report["big_fraction"] * record["frames"]), report["id"]
    decoded_s = time.perf_counter() - started

    rows = static_flop_rows(asr.encoder, asr.apc_macs)
    keep = [i for i, r in enumerate(records) if r["samples"] < AUTHORS_MAX_SAMPLES]
    dropped = [records[i]["id"] for i in range(len(records)) if i not in set(keep)]
    signals = {i: asr.feature_config.read_audio(items[records[i]["id"]][0]) for i in keep}
    pad_to = max(records[i]["samples"] for i in keep)
    padded, padded_s, from_cache = _cached_padded_p_big(asr, records, keep, signals, pad_to, args)
    num_frames = asr.feature_config.num_frames
    real_vs_run = None if args.sampled else \
        sum(int(((padded[i][:records[i]["frames"]] > 0.5) != records[i]["use_big"]).sum()) for i in keep)
    check_ids = [i for i in shuffled_batches(len(records), args.shuffle_seeds[0])[0] if i in padded]
    check = padded_batch_check(asr, [signals[i] for i in check_ids], [padded[i] for i in check_ids])
    padded_all = [padded.get(i) for i in range(len(records))]
    by_seed = [authors_flops(records, padded_all, keep, seed, rows, num_frames, args.sampled)
               for seed in args.shuffle_seeds]
    figures = [s["flops_per_frame"] for s in by_seed]

    refs = [records[i]["reference"] for i in keep]
    hyps = [records[i]["hypothesis"] for i in keep]
    big_real = sum(int(r["use_big"].sum()) for r in records) / sum(r["frames"] for r in records)
    main = by_seed[0]
    result = {
        "routing": scores["routing"], "seed": scores["seed"], "apc": scores["apc"],
        "model": portable_path(scores["model"]) if scores["model"] else None, "data": scores["data"],
        "labels": scores["labels"], "utterances": len(records), "dropped_by_authors_collate": dropped,
        "flops_table": {k: rows[k] for k in ("apc", "pre_net", "small_net", "big_net", "post_net", "controller",
                                              "small-only", "big-only")},
        "a_real_frames": {"flops_per_frame": scores["flops_per_frame"], "big_fraction": big_real,
                          "evaluate_batch_size": scores["batch_size"],
                          "mix_formula_check": rows["small-only"] + big_real * (rows["big-only"] - rows["small-only"])
                          + rows["controller"]},
        "b_authors_way": {"flops_per_frame": main["flops_per_frame"], "shuffle_seed": main["seed"],
                          "real_fraction": main["real_fraction"], "batches": main["batches"],
                          "real_frames_only_batch_weighted": main["real_frames_only"],
                          "by_seed": by_seed, "seeds_mean": statistics.mean(figures),
                          "seeds_min": min(figures), "seeds_max": max(figures),
                          "seeds_std": statistics.stdev(figures) if len(figures) > 1 else 0.0,
                          "padded_routing": {"pad_to_samples": pad_to,
                                             "real_frame_decisions_differing_from_the_run": real_vs_run,
                                             "one_real_padded_batch": check},
                          "paper": PAPER_FLOPS["Mini-LibriSpeech"]},
        "c_per": {"corpus_level": scores["per"], "authors_way": authors_per(refs, hyps),
                  "authors_utterances": len(keep),
                  "per_utterance_mean_uncut": 100.0 * statistics.mean(
                      count_ops_rate(r, h) for r, h in zip(refs, hyps)),
                  "corpus_level_cut": corpus_per(refs, hyps, cut=True),
                  "corpus_level_recomputed_all": corpus_per([r["reference"] for r in records],
                                                            [r["hypothesis"] for r in records])},
        "seconds": {"decoding": decoded_s, "padded_pass": padded_s, "padded_pass_from_cache": from_cache,
                    "total": time.perf_counter() - started},
    }
    return result


def count_ops_rate(reference: Sequence[str], hypothesis: Sequence[str]) -> float:
    """One utterance's error rate with repeated ``sil`` merged and the hypothesis whole (not cut)."""
    ref, hyp = merge_repeated(list(reference)), merge_repeated(list(hypothesis))
    ops = count_ops(op_table(ref, hyp))
    return (ops["insertions"] + ops["deletions"] + ops["substitutions"]) / len(ref)


# ------------------------------------------------------------------ report
def markdown(entries: Dict[str, Dict[str, Any]], command: str) -> str:
    """authors_way.md: one column per routing entry."""
    keys = list(entries)
    m = lambda v: f"{v / 1e6:.2f}M"  # noqa: E731
    first = entries[keys[0]]
    lines = ["# The paper's 6.43M and its scoring, counted on dev-clean-2", "",
             f"Model: `{first['model']}`. Written by `recipes/MiniLibriSpeech/authors_way.py` (its docstring says how "
             "each figure is counted); the numbers are in [authors_way.json](authors_way.json). One column per "
             "routing of the decoding pass: deterministic (`p_big > 0.5`, evaluate's default) and sampled (the "
             "authors' test routing). dev-clean-2 is the test set: this only reports, it chooses nothing.", "",
             "| | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    def row(name, get):
        lines.append(f"| {name} | " + " | ".join(get(entries[k]) for k in keys) + " |")
    row("(a) FLOPs per frame, real frames (evaluate)", lambda e: m(e["a_real_frames"]["flops_per_frame"]))
    row("big network on real frames", lambda e: f"{100 * e['a_real_frames']['big_fraction']:.1f} %")
    row("(b) FLOPs per frame, the authors' way (shuffle seed "
        f"{entries[keys[0]]['b_authors_way']['shuffle_seed']})", lambda e: m(e["b_authors_way"]["flops_per_frame"]))
    row("  real frames among those averaged", lambda e: f"{100 * e['b_authors_way']['real_fraction']:.1f} %")
    row("  over shuffle seeds: mean [min, max]", lambda e: (f"{m(e['b_authors_way']['seeds_mean'])} "
        f"[{m(e['b_authors_way']['seeds_min'])}, {m(e['b_authors_way']['seeds_max'])}] "
        f"({len(e['b_authors_way']['by_seed'])} seeds)"))
    row("  batch means weighted by batch size, real frames only",
        lambda e: m(e["b_authors_way"]["real_frames_only_batch_weighted"]))
    row("paper, surprisal row (Table 1)", lambda e: m(e["b_authors_way"]["paper"]))
    row("big-only / small-only", lambda e: f"{m(e['flops_table']['big-only'])} / {m(e['flops_table']['small-only'])}")
    row("(c) PER, corpus-level (evaluate)", lambda e: f"{e['c_per']['corpus_level']:.2f} %")
    row("PER, the authors' way", lambda e: f"{e['c_per']['authors_way']:.2f} %")
    row("  per-utterance mean, hypotheses not cut", lambda e: f"{e['c_per']['per_utterance_mean_uncut']:.2f} %")
    row("  corpus-level, hypotheses cut", lambda e: f"{e['c_per']['corpus_level_cut']:.2f} %")
    check = first["b_authors_way"]["padded_routing"]["one_real_padded_batch"]
    lines += ["", f"The authors' way leaves out {', '.join(first['dropped_by_authors_collate']) or 'nothing'} "
              f"(>= {AUTHORS_MAX_SAMPLES:,} samples: their collate drops it) and averages padded frames, routed as "
              "this model's controller routes zeros in the waveform (computed, not assumed: one pass of the "
              "APC and controller over each utterance padded to the longest). Checked on one real padded batch of "
              f"{check['utterances']} utterances: largest p_big difference {check['max_abs_p_big_diff']:.1e}, "
              f"{check['decision_flips']} decisions changed.", "",
              "Run time on 2 shared CPU cores, one thread, beside other jobs: decoding "
              + ", ".join(f"{entries[k]['seconds']['decoding'] / 60:.0f} min ({k})" for k in keys)
              + f"; the padded pass {first['seconds']['padded_pass'] / 60:.0f} min, once (`--cache` keeps it for "
              "the other routing).", "", "Commands:", "", "```bash", command, "```", ""]
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="a LibriSpeech-format subset (dev-clean-2)")
    parser.add_argument("--mfa-labels", help="its MFA labels CSV (the paper authors')")
    parser.add_argument("--model", default=None, help="an exported model folder (default: the shipped model)")
    parser.add_argument("--sampled", action="store_true", help="sampled routing (the authors' test routing)")
    parser.add_argument("--seed", type=int, default=1, help="seed of sampled routing (default 1)")
    parser.add_argument("--batch-size", type=int, default=32, help="decoding batch (evaluate's; default 32)")
    parser.add_argument("--shuffle-seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="seeds of the authors' shuffled batches; the first is the reported one")
    parser.add_argument("--pad-batch", type=int, default=16, help="utterances per batch of the padded pass")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--cache", type=Path, default=None,
                        help="file keeping the padded pass's p_big, shared by a second run with the other routing")
    parser.add_argument("--progress", action="store_true")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    args = parse_args(argv)
    result = run(args)
    key = f"sampled, seed {args.seed}" if args.sampled else "deterministic"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / "authors_way.json"
    entries = json.loads(path.read_text()) if path.exists() else {}
    entries[key] = result
    entries = {k: entries[k] for k in sorted(entries, key=lambda k: k != "deterministic")}
    path.write_text(json.dumps(entries, indent=1) + "\n")
    base = ("OMP_NUM_THREADS=1 python recipes/MiniLibriSpeech/authors_way.py ../shared/data/LibriSpeech/dev-clean-2 "
            "--mfa-labels ../shared/data/phone_labels/dev-clean-2_mfa.csv --cache /tmp/authors_way_padded.pt")
    command = f"{base}\n{base} --sampled --seed 1"
    (args.out_dir / "authors_way.md").write_text(markdown(entries, command))
    print(markdown({key: result}, command))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
