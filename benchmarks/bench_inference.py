"""Inference wall clock of the routed conditional encoder vs big-only vs masked, and the FLOP ratio.

Eval mode, ``torch.no_grad()``, one padded batch of utterances (Mini-LibriSpeech shapes). The
controller is a random one with p_big = 0.65 (the calibrated mean; routing cost depends only on
the fraction of big frames). Configurations, timed interleaved (A B C D A B C D ...) after a
warm-up round, median of >= 5 repeats:

* routed   : the project's encoder, small/big networks on their own frames only;
* big-only : the same weights, every frame to the big network;
* masked   : both networks on every frame (the paper's code), p_big = 0.65;
* APC      : the frozen APC forward pass alone (added to both sides for the "with APC" ratios).

The FLOP ratio is computed from the ``frame_macs`` the encoder returned in the timed calls
(pre-net + post-net + small + big over real frames). Target: |time ratio - FLOP ratio| <= 0.03,
i.e. routing turns saved FLOPs into saved time.

Usage: ``python -m benchmarks.bench_inference [--quick|--smoke] [--json]``
"""
from __future__ import annotations

if __package__ in (None, ""):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import copy
from typing import Dict, Optional

import torch

from benchmarks.common import (
    size_cli,
    BenchResult,
    SummaryRow,
    check_size,
    format_result,
    interleaved_times,
    lengths_mask,
    median,
    seed_everything,
    set_threads,
    synthetic_lengths,
)

P_BIG = 0.65
NUM_OUTPUTS = 42
TOLERANCE = 0.03
ENCODER_PARTS = ("pre_net", "small_net", "big_net", "post_net")
SIZES = {
    "full": dict(batch=32, t_min=300, t_max=800, repeats=5, warmup=1),
    "quick": dict(batch=8, t_min=100, t_max=200, repeats=5, warmup=1),
    "smoke": dict(batch=2, t_min=4, t_max=8, repeats=1, warmup=0),
}


def run(size: str = "full", seed: int = 0, threads: Optional[int] = None, p_big: float = P_BIG) -> BenchResult:
    from surprisal_cc.apc import APCModel, FrozenAPC
    from surprisal_cc.controllers import ConstantController
    from surprisal_cc.encoders import ConditionalEncoder
    from surprisal_cc.flops import module_macs

    cfg = SIZES[check_size(size)]
    threads = set_threads(threads, size)
    seed_everything(seed)
    g = torch.Generator().manual_seed(seed)
    lengths = synthetic_lengths(cfg["batch"], cfg["t_min"], cfg["t_max"], g)
    T = int(lengths.max())
    mask = lengths_mask(lengths, T)
    feats = torch.randn(cfg["batch"], T, 512, generator=g) * mask.unsqueeze(-1)
    fbank = torch.randn(cfg["batch"], T, 80, generator=g) * mask.unsqueeze(-1)
    real_frames = int(lengths.sum())

    routed = ConditionalEncoder.paper(512, NUM_OUTPUTS, controller=ConstantController(p_big)).eval()
    big_only = copy.deepcopy(routed)
    big_only.controller = ConstantController(1.0)
    masked = copy.deepcopy(routed)
    masked.execution = "masked"
    apc = FrozenAPC(APCModel())
    encoders = {"routed": routed, "big-only": big_only, "masked": masked}
    macs: Dict[str, list] = {name: [] for name in encoders}

    def call(name):
        with torch.no_grad():
            out = encoders[name](feats, lengths)
        macs[name].append(sum(float(out.frame_macs[p].sum()) for p in ENCODER_PARTS))

    fns = {name: (lambda n=name: call(n)) for name in encoders}
    fns["APC"] = lambda: apc(fbank, lengths)
    times = interleaved_times(fns, repeats=cfg["repeats"], warmup=cfg["warmup"],
                              before_each=lambda name, i: torch.manual_seed(seed + i))
    t = {name: median(v) for name, v in times.items()}
    m = {name: sum(v) / len(v) for name, v in macs.items()}
    apc_macs = module_macs(apc.apc) * real_frames

    time_ratio, flop_ratio = t["routed"] / t["big-only"], m["routed"] / m["big-only"]
    time_ratio_apc = (t["APC"] + t["routed"]) / (t["APC"] + t["big-only"])
    flop_ratio_apc = (apc_macs + m["routed"]) / (apc_macs + m["big-only"])
    diff = time_ratio - flop_ratio
    small_macs, big_macs = module_macs(routed.small_net), module_macs(routed.big_net)
    per_frame_fixed = (m["big-only"] / real_frames) - big_macs  # pre + post
    big_fraction = ((m["routed"] / real_frames) - per_frame_fixed - small_macs) / (big_macs - small_macs)

    res = BenchResult("inference", params=dict(size=size, batch=cfg["batch"], frames=f"{cfg['t_min']}-{cfg['t_max']}",
                                               real_frames=real_frames, p_big=p_big, repeats=cfg["repeats"],
                                               warmup=cfg["warmup"], threads=threads, seed=seed))
    res.summary.append(SummaryRow("inference: routed vs big-only (encoder)", t["routed"], t["big-only"], "s/batch",
                                  time_ratio, "ours/baseline",
                                  f"abs(ratio - FLOP ratio {flop_ratio:.3f}) <= {TOLERANCE}", abs(diff) <= TOLERANCE,
                                  note=f"diff {diff:+.3f}"))
    res.summary.append(SummaryRow("inference: routed vs big-only, APC included", t["routed"] + t["APC"],
                                  t["big-only"] + t["APC"], "s/batch", time_ratio_apc, "ours/baseline",
                                  f"info (FLOP ratio {flop_ratio_apc:.3f})", None,
                                  note=f"diff {time_ratio_apc - flop_ratio_apc:+.3f}"))
    res.summary.append(SummaryRow("inference: routed vs masked (paper)", t["routed"], t["masked"], "s/batch",
                                  t["masked"] / t["routed"], "baseline/ours", "info", None))
    rows = []
    for name in ("routed", "big-only", "masked", "APC"):
        flops = apc_macs if name == "APC" else m[name]
        rows.append([name, t[name], min(times[name]), max(times[name]), 1000 * t[name] / cfg["batch"],
                     t[name] / t["big-only"], flops / real_frames / 1e6, flops / m["big-only"]])
    res.add_detail(f"Inference, batch of {cfg['batch']} utterances (median of {cfg['repeats']} interleaved repeats)",
                   ["configuration", "s/batch", "min", "max", "ms/utt", "time / big-only", "MMACs/frame",
                    "MACs / big-only"], rows)
    res.add_detail("Time ratio vs FLOP ratio (routed / big-only)",
                   ["scope", "time ratio", "FLOP ratio", "difference", "target"],
                   [["encoder (pre + small/big + post)", time_ratio, flop_ratio, diff, f"abs(diff) <= {TOLERANCE}"],
                    ["APC + encoder", time_ratio_apc, flop_ratio_apc, time_ratio_apc - flop_ratio_apc, "info"],
                    ["measured fraction of big frames", big_fraction, p_big, big_fraction - p_big, "info"]])
    return res


def main(argv=None) -> int:
    return size_cli(run, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
