"""The ONNX runtime against the PyTorch one on a labelled corpus: per-frame log-probabilities, routing, phones,
FLOPs and the corpus PER.

Usage: ``python -m benchmarks.onnx_equivalence DATA --mfa-labels CSV [--model DIR] [--limit N] [--shards N] [--out JSON]``
(default model: the shipped one, exported to a temporary folder with its graphs).

Per utterance, the file goes through :class:`~surprisal_cc.deploy.runtime.OnnxASR` and through
:class:`~surprisal_cc.inference.asr.ConditionalASR`: the largest difference of their per-frame
log-probabilities, whether every frame was routed alike (steps per frame for ACT / PonderNet), whether the
phones are the same, and the FLOPs per frame each counted from what ran. PyTorch decodes in batches of 32
with :func:`surprisal_cc.inference.passes.decode_batch`, as ``surprisal-cc evaluate DATA --mfa-labels CSV --json`` does; both PERs
score the phones against the same references with ``evaluate``'s corpus-level scorer
(:class:`~surprisal_cc.decoding.metrics.ErrorRate`, ``sil`` merged as the model says). One thread each;
``--shards N`` splits the corpus over N processes.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from surprisal_cc.decoding.metrics import ErrorRate
from surprisal_cc.deploy.export import export_onnx
from surprisal_cc.deploy.runtime import OnnxASR
from surprisal_cc.inference import passes
from surprisal_cc.inference.asr import ConditionalASR
from surprisal_cc.inference.corpora import corpus_items
from surprisal_cc.model.model_folder import default_model_dir


def compare_rows(model: Path, data: str, mfa_labels: Optional[str], limit: Optional[int] = None,
                 shard: Tuple[int, int] = (0, 1), batch_size: int = 32, progress: bool = False) -> List[Dict[str, Any]]:
    """One row per utterance of shard ``shard[0]`` of ``shard[1]`` (contiguous parts of the corpus): the
    reference, both runtimes' phones, the largest log-probability difference, the frames routed alike and
    the FLOPs per frame of each. PyTorch runs in batches of ``batch_size`` (as ``evaluate`` does: its
    ``run_batch``), ONNX one file at a time."""
    torch.set_num_threads(1)
    pt = ConditionalASR.from_pretrained(model, threads=1)
    onnx = OnnxASR.from_folder(model, threads=1)
    items, _ = corpus_items(data, pt, mfa_labels=mfa_labels)
    items = items[:limit] if limit else items
    index, count = shard
    per = -(-len(items) // count)
    items = items[index * per:(index + 1) * per]
    rows: List[Dict[str, Any]] = []
    started = time.perf_counter()
    for first in range(0, len(items), batch_size):
        chunk = items[first:first + batch_size]
        signals = [pt.feature_config.read_audio(wav) for _, wav, _ in chunk]
        samples = torch.tensor([s.numel() for s in signals])
        batch = passes.decode_batch(pt, torch.nn.utils.rnn.pad_sequence(signals, batch_first=True), samples)
        out = batch.output
        for b, (utt, wav, reference) in enumerate(chunk):
            n = int(batch.frames[b])
            a = onnx.transcribe_file(wav, keep_log_probs=True)
            lp = out.log_probs[b, :n].float().numpy()
            if "use_big" in out.stats:
                alike = int((out.stats["use_big"][b, :n].numpy() == a.use_big).sum())
            else:
                alike = int((out.stats["steps"][b, :n].numpy() == a.steps).sum())
            flops = sum(passes.flops_components(pt, passes.frame_macs(out, b, slice(0, n)), n).values())
            rows.append({"id": utt, "frames": n, "reference": list(reference), "pytorch": passes.phones_of(pt, batch.hyps[b]),
                         "onnx": a.phones, "max_abs_log_prob_diff": float(np.abs(lp - a.log_probs).max()),
                         "frames_routed_alike": alike, "flops_pytorch": flops, "flops_onnx": a.flops_per_frame,
                         "audio_s": a.duration_s})
        if progress:
            print(f"shard {index}: {len(rows)} of {len(items)} utterances, {time.perf_counter() - started:.0f} s",
                  file=sys.stderr, flush=True)
    return rows


def summary(rows: List[Dict[str, Any]], merge_sil: bool = True) -> Dict[str, Any]:
    """The comparison's figures over ``rows`` (:func:`compare_rows`): both PERs with the corpus-level scorer."""
    scores = {}
    for runtime in ("pytorch", "onnx"):
        errors = ErrorRate(merge_sil=merge_sil)
        errors.append([r["id"] for r in rows], [r[runtime] for r in rows], [r["reference"] for r in rows])
        scores[runtime] = errors.summarize()
    frames = sum(r["frames"] for r in rows)
    differ = [r["id"] for r in rows if r["pytorch"] != r["onnx"]]
    return {
        "utterances": len(rows), "frames": frames, "audio_s": sum(r["audio_s"] for r in rows),
        "max_abs_log_prob_diff": max(r["max_abs_log_prob_diff"] for r in rows),
        "median_utterance_max_abs_log_prob_diff": float(np.median([r["max_abs_log_prob_diff"] for r in rows])),
        "frames_routed_alike": sum(r["frames_routed_alike"] for r in rows),
        "routing_agreement": sum(r["frames_routed_alike"] for r in rows) / frames,
        "utterances_with_different_phones": len(differ), "different_phones_ids": differ,
        "same_phones_fraction": 1 - len(differ) / len(rows),
        "flops_per_frame": {"pytorch": sum(r["flops_pytorch"] * r["frames"] for r in rows) / frames,
                            "onnx": sum(r["flops_onnx"] * r["frames"] for r in rows) / frames,
                            "utterances_differing": sum(r["flops_pytorch"] != r["flops_onnx"] for r in rows)},
        "per": {"pytorch": scores["pytorch"]["error_rate"], "onnx": scores["onnx"]["error_rate"],
                "pytorch_details": scores["pytorch"], "onnx_details": scores["onnx"]},
    }


def compare(model: Path, data: str, mfa_labels: Optional[str], limit: Optional[int] = None) -> Dict[str, Any]:
    """:func:`summary` of :func:`compare_rows` over the whole corpus (or its first ``limit`` utterances)."""
    pt_config = json.loads((Path(model) / "model.json").read_text(encoding="utf-8"))
    return summary(compare_rows(model, data, mfa_labels, limit), bool(pt_config.get("merge_sil", True)))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--mfa-labels")
    parser.add_argument("--model", help="a model folder (its graphs are exported into a temporary copy); default: "
                                        "the shipped model")
    parser.add_argument("--limit", type=int, help="the first N utterances only")
    parser.add_argument("--shards", type=int, default=1, help="run N processes, each on a part of the corpus")
    parser.add_argument("--out", help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_onnx(args.model or default_model_dir(), Path(tmp) / "model")
        merge_sil = bool(json.loads((folder / "model.json").read_text(encoding="utf-8")).get("merge_sil", True))
        if args.shards > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(args.shards) as pool:
                parts = pool.map(compare_rows, *zip(*[(folder, args.data, args.mfa_labels, args.limit,
                                                       (i, args.shards), 32, True) for i in range(args.shards)]))
                rows = [row for part in parts for row in part]
        else:
            rows = compare_rows(folder, args.data, args.mfa_labels, args.limit, progress=True)
    result = {"data": args.data, "labels": args.mfa_labels, **summary(rows, merge_sil)}
    result["model"] = args.model or "surprisal_cc/pretrained (the shipped model)"
    result["command"] = "python -m benchmarks.onnx_equivalence " + " ".join(argv if argv is not None else sys.argv[1:])
    result["pytorch_command"] = (f"python -m surprisal_cc.cli evaluate {args.data}"
                                 + (f" --mfa-labels {args.mfa_labels}" if args.mfa_labels else "") + " --json")
    result["note"] = ("PyTorch decodes in batches of 32 (ConditionalASR.run_batch, as evaluate does), ONNX one file "
                      "at a time; both PERs are the corpus-level scorer of evaluate (ErrorRate, sil merged) over the "
                      "same MFA references; one thread each, on a machine loaded by other work")
    result["seconds"] = time.perf_counter() - started
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
