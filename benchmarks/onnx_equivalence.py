"""The ONNX runtime against the PyTorch one on a labelled corpus: per-frame log-probabilities, routing, phones,
FLOPs and the corpus PER.

Usage: ``python -m benchmarks.onnx_equivalence DATA --mfa-labels CSV [--model DIR] [--limit N] [--out JSON]``
(default model: the shipped one, exported to a temporary folder with its graphs).

Per utterance, the file goes through :class:`~surprisal_cc.deploy.runtime.OnnxASR` and, alone (batch 1), through
:class:`~surprisal_cc.inference.asr.ConditionalASR` (``run_batch``): the largest difference of their per-frame
log-probabilities, whether every frame was routed alike (steps per frame for ACT / PonderNet), whether the
phones are the same, and the FLOPs per frame each counted from what ran. The PyTorch PER is
``ConditionalASR.evaluate`` (what ``surprisal-cc evaluate DATA --mfa-labels CSV --json`` prints: its batches);
the ONNX PER scores the ONNX phones against the same references with the same corpus-level scorer
(:class:`~surprisal_cc.decoding.metrics.ErrorRate`, ``sil`` merged as the model says). One thread each.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from surprisal_cc.decoding.metrics import ErrorRate
from surprisal_cc.deploy.export import export_onnx
from surprisal_cc.deploy.runtime import OnnxASR
from surprisal_cc.inference.asr import ConditionalASR
from surprisal_cc.inference.corpora import corpus_items
from surprisal_cc.model.model_folder import default_model_dir


def compare(model: Path, data: str, mfa_labels: Optional[str], limit: Optional[int] = None,
            progress: bool = False) -> Dict[str, Any]:
    """The comparison's figures (see the module docstring) for the model folder ``model`` (with graphs)."""
    torch.set_num_threads(1)
    pt = ConditionalASR.from_pretrained(model, threads=1)
    onnx = OnnxASR.from_folder(model, threads=1)
    items, label_source = corpus_items(data, pt, mfa_labels=mfa_labels)
    items = items[:limit] if limit else items
    merge_sil = bool(pt.config.get("merge_sil", True))
    errors = ErrorRate(merge_sil=merge_sil)
    rows: List[Dict[str, Any]] = []
    started = time.perf_counter()
    for i, (utt, wav, reference) in enumerate(items):
        a = onnx.transcribe_file(wav, keep_log_probs=True)
        signal = pt.read_file(wav)
        batch = pt.run_batch(signal[None], torch.tensor([signal.numel()]))
        n = int(batch.frames[0])
        lp = batch.output.log_probs[0, :n].float().numpy()
        stats = batch.output.stats
        if "use_big" in stats:
            routed_alike = int((stats["use_big"][0, :n].numpy() == a.use_big).sum())
        else:
            routed_alike = int((stats["steps"][0, :n].numpy() == a.steps).sum())
        pt_flops = sum(pt.flops_components(pt.frame_macs(batch.output, 0, slice(0, n)), n).values())
        rows.append({"id": utt, "frames": n, "max_abs_log_prob_diff": float(np.abs(lp - a.log_probs).max()),
                     "frames_routed_alike": routed_alike, "same_phones": pt.phones_of(batch.hyps[0]) == a.phones,
                     "flops_pytorch": pt_flops, "flops_onnx": a.flops_per_frame})
        errors.append([utt], [a.phones], [reference])
        if progress and (i + 1) % 100 == 0:
            print(f"{i + 1} of {len(items)} utterances, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    frames = sum(r["frames"] for r in rows)
    flops_pt = sum(r["flops_pytorch"] * r["frames"] for r in rows) / frames
    flops_onnx = sum(r["flops_onnx"] * r["frames"] for r in rows) / frames
    evaluated = pt.evaluate(data, mfa_labels=mfa_labels) if not limit else None
    onnx_scores = errors.summarize()
    return {
        "data": data, "labels": label_source, "model": str(model), "utterances": len(rows), "frames": frames,
        "max_abs_log_prob_diff": max(r["max_abs_log_prob_diff"] for r in rows),
        "median_utterance_max_abs_log_prob_diff": float(np.median([r["max_abs_log_prob_diff"] for r in rows])),
        "frames_routed_alike": sum(r["frames_routed_alike"] for r in rows),
        "routing_agreement": sum(r["frames_routed_alike"] for r in rows) / frames,
        "utterances_with_different_phones": [r["id"] for r in rows if not r["same_phones"]],
        "same_phones_fraction": sum(r["same_phones"] for r in rows) / len(rows),
        "flops_per_frame": {"pytorch_batch1": flops_pt, "onnx": flops_onnx,
                            "utterances_differing": sum(r["flops_pytorch"] != r["flops_onnx"] for r in rows)},
        "per": {"onnx": onnx_scores["error_rate"], "onnx_details": onnx_scores,
                "pytorch_evaluate": None if evaluated is None else evaluated["per"],
                "pytorch_evaluate_flops_per_frame": None if evaluated is None else evaluated["flops_per_frame"],
                "pytorch_evaluate_batch_size": None if evaluated is None else evaluated["batch_size"]},
        "seconds": time.perf_counter() - started,
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--mfa-labels")
    parser.add_argument("--model", help="a model folder (its graphs are exported into a temporary copy); default: "
                                        "the shipped model")
    parser.add_argument("--limit", type=int, help="the first N utterances only (no PyTorch evaluate run)")
    parser.add_argument("--out", help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_onnx(args.model or default_model_dir(), Path(tmp) / "model")
        result = compare(folder, args.data, args.mfa_labels, args.limit, progress=True)
    result["model"] = args.model or "surprisal_cc/pretrained (the shipped model)"
    result["command"] = "python -m benchmarks.onnx_equivalence " + " ".join(argv if argv is not None else sys.argv[1:])
    result["pytorch_command"] = (f"python -m surprisal_cc.cli evaluate {args.data}"
                                 + (f" --mfa-labels {args.mfa_labels}" if args.mfa_labels else "") + " --json")
    result["machine"] = f"{platform.machine()}, one thread each; shared with other work (loaded)"
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
