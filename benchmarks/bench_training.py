"""Training step time: this project's scheme vs the paper's public code, and each factor apart.

Synthetic batches shaped like Mini-LibriSpeech (B=32, 300-800 frames of 20 ms, variable lengths,
42 CTC outputs). One step = forward + CTC loss + backward + gradient clipping (5) + Adam (3e-4).

* ours: APC features and surprisal read from the feature cache (tensors in memory, APC not run),
  routed small/big networks (gather/scatter), BiGRUs as two unidirectional GRUs with per-sequence
  reversal (no packing).
* paper's scheme: the frozen APC recomputed every step (forward only, on 80-dim filterbanks), both
  networks on every frame (``execution="masked"``), PyTorch packed-sequence bidirectional GRUs.
* factors: ours with exactly one of the three choices switched to the paper's, all in one run.

The controller is a random one with p_big = 0.65 (the calibrated Mini-LibriSpeech mean): the
routing cost depends only on the fraction of big frames. Steps of all configurations are
interleaved (A B C D E A B ...), after one warm-up step each; the median step time is reported.

Usage: ``python -m benchmarks.bench_training [--quick|--smoke] [--json]``
"""
from __future__ import annotations

if __package__ in (None, ""):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from typing import List, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks.common import (
    size_cli,
    BenchResult,
    SummaryRow,
    check_size,
    format_result,
    interleaved_times,
    median,
    seed_everything,
    set_threads,
    synthetic_lengths,
    lengths_mask,
    use_packed_bigrus,
)

NUM_OUTPUTS = 42  # 41 Mini-LibriSpeech labels + CTC blank
P_BIG = 0.65
SIZES = {  # batch, min frames, max frames, timed steps, warm-up steps
    "full": dict(batch=32, t_min=300, t_max=800, steps=2, warmup=1),
    "quick": dict(batch=8, t_min=30, t_max=60, steps=2, warmup=1),
    "smoke": dict(batch=2, t_min=4, t_max=8, steps=1, warmup=0),
}
# name -> (APC recomputed?, execution, packed BiGRU?)
CONFIGS = {
    "ours (cache, routed, reversal BiGRU)": (False, "routed", False),
    "paper (APC recompute, masked, packed BiGRU)": (True, "masked", True),
    "ours + APC recompute": (True, "routed", False),
    "ours + masked execution": (False, "masked", False),
    "ours + packed BiGRU": (False, "routed", True),
}
OURS, PAPER = "ours (cache, routed, reversal BiGRU)", "paper (APC recompute, masked, packed BiGRU)"
FACTORS = {  # factor -> (config with the paper's choice, what it replaces)
    "feature cache vs APC recompute": "ours + APC recompute",
    "routed vs masked": "ours + masked execution",
    "reversal BiGRU vs packed BiGRU": "ours + packed BiGRU",
}


class Batch(NamedTuple):
    fbank: Tensor  # (B, T, 80) input of the APC model
    feats: Tensor  # (B, T, 512) cached APC features
    surprisal: Tensor  # (B, T) cached surprisal
    lengths: Tensor
    targets: Tensor  # (sum of target lengths,) labels 1..41
    target_lengths: Tensor


def make_batches(n: int, batch: int, t_min: int, t_max: int, seed: int = 0) -> List[Batch]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = synthetic_lengths(batch, t_min, t_max, g)
        T = int(lengths.max())
        mask = lengths_mask(lengths, T).unsqueeze(-1)
        target_lengths = (lengths // 4).clamp(min=1)  # about 12 phones per second at 50 frames per second
        targets = torch.randint(1, NUM_OUTPUTS, (int(target_lengths.sum()),), generator=g)
        out.append(Batch(torch.randn(batch, T, 80, generator=g) * mask, torch.randn(batch, T, 512, generator=g) * mask,
                         torch.rand(batch, T, generator=g) * 40 * mask[..., 0], lengths, targets, target_lengths))
    return out


def build_model(apc: bool, execution: str, packed: bool, seed: int = 0):
    """(encoder, frozen APC or None, Adam optimiser), identically initialised for every configuration."""
    from surprisal_cc.apc import APCModel, FrozenAPC
    from surprisal_cc.controllers import ConstantController
    from surprisal_cc.encoders import ConditionalEncoder

    torch.manual_seed(seed)
    encoder = ConditionalEncoder.paper(input_size=512, num_outputs=NUM_OUTPUTS, controller=ConstantController(P_BIG),
                                       execution=execution)
    if packed:
        use_packed_bigrus(encoder)
    frozen = FrozenAPC(APCModel()) if apc else None
    encoder.train()
    return encoder, frozen, torch.optim.Adam(encoder.parameters(), lr=3e-4)


def training_step(encoder, frozen_apc, optimizer, batch: Batch) -> float:
    optimizer.zero_grad(set_to_none=True)
    if frozen_apc is not None:
        apc_out = frozen_apc(batch.fbank, batch.lengths)  # no_grad inside
        feats, surprisal = apc_out.features, apc_out.surprisal
    else:
        feats, surprisal = batch.feats, batch.surprisal
    out = encoder(feats, batch.lengths, surprisal)
    loss = F.ctc_loss(out.log_probs.transpose(0, 1), batch.targets, batch.lengths, batch.target_lengths,
                      blank=0, zero_infinity=True) + out.aux_loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(encoder.parameters(), 5.0)
    optimizer.step()
    return float(loss.detach())


def run(size: str = "full", seed: int = 0, threads: Optional[int] = None) -> BenchResult:
    cfg = SIZES[check_size(size)]
    threads = set_threads(threads, size)
    seed_everything(seed)
    batches = make_batches(cfg["steps"] + cfg["warmup"], cfg["batch"], cfg["t_min"], cfg["t_max"], seed)
    models = {name: build_model(*spec, seed=seed) for name, spec in CONFIGS.items()}
    fns = {}
    step_index = {"i": 0}
    for name, (encoder, apc, opt) in models.items():
        fns[name] = lambda e=encoder, a=apc, o=opt: training_step(e, a, o, batches[step_index["i"]])

    def before(name: str, i: int) -> None:
        step_index["i"] = i
        torch.manual_seed(seed + i)  # same routing draws for every configuration at step i

    times = interleaved_times(fns, repeats=cfg["steps"], warmup=cfg["warmup"], before_each=before)
    t = {name: median(v) for name, v in times.items()}
    frames = [int(b.lengths.sum()) for b in batches[cfg["warmup"]:]]

    res = BenchResult("training", params=dict(size=size, batch=cfg["batch"], frames=f"{cfg['t_min']}-{cfg['t_max']}",
                                              timed_steps=cfg["steps"], warmup=cfg["warmup"], p_big=P_BIG,
                                              threads=threads, seed=seed))
    speedup = t[PAPER] / t[OURS]
    res.summary.append(SummaryRow("training step: ours vs paper's scheme", t[OURS], t[PAPER], "s/step", speedup,
                                  "baseline/ours", ">= 2.0x", speedup >= 2.0))
    for factor, config in FACTORS.items():
        r = t[config] / t[OURS]
        res.summary.append(SummaryRow(f"training factor: {factor}", t[OURS], t[config], "s/step", r,
                                      "baseline/ours", "info", None))
    rows = []
    for name in CONFIGS:
        rows.append([name, t[name], min(times[name]), max(times[name]), t[name] / t[OURS],
                     sum(frames) / len(frames) / t[name]])
    res.add_detail("Time per training step (median of interleaved steps)",
                   ["configuration", "s/step (median)", "min", "max", "time / ours", "real frames/s"], rows)
    product = 1.0
    for config in FACTORS.values():
        product *= t[config] / t[OURS]
    res.add_detail("Contribution of each factor (slow-down when only that choice is the paper's)",
                   ["factor", "slow-down vs ours"],
                   [[f, t[c] / t[OURS]] for f, c in FACTORS.items()]
                   + [["product of the three factors", product], ["paper's scheme (all three)", speedup]])
    return res


def main(argv=None) -> int:
    return size_cli(run, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
