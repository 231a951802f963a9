"""The project's BiGRU (two unidirectional GRUs + per-sequence reversal) vs PyTorch's packed BiGRU.

Both are exact on variable-length batches (padding never reaches a real frame); this measures
what each costs on the CPU at the paper's size (B=32, T=600, 512 -> 256 per direction, lengths
uniform in [T/2, T]) and checks that with the same weights they give the same outputs and the
same input gradients (max abs difference over real frames). Forward is timed in eval mode
under ``no_grad``; forward+backward in train mode (dropout 0) with a random upstream gradient.
All four are timed interleaved after a warm-up round of the same calls; the median of the repeats
is reported, with min–max. Targets: forward+backward of the reversal BiGRU at least ``GOAL`` times
as fast as the packed one, and outputs and input gradients equal within ``TOLERANCE``.

On a GPU (``--device cuda``) both run there (PyTorch's packed GRU is cuDNN's), timed until the
GPU has finished.

Usage: ``python -m benchmarks.bench_rnn [--quick|--smoke] [--json] [--threads N] [--device cuda]``
"""
from __future__ import annotations

from typing import Optional

import torch

from benchmarks.common import (
    size_cli,
    BenchResult,
    PackedBiGRU,
    SummaryRow,
    check_size,
    interleaved_times,
    lengths_mask,
    full_fp32,
    median,
    repeats_on,
    resolve_device,
    seed_everything,
    set_threads,
    spread,
    synthetic_lengths,
)

SIZES = {
    "full": dict(batch=32, T=600, input=512, hidden=256, repeats=5, warmup=1),
    "quick": dict(batch=8, T=100, input=512, hidden=256, repeats=5, warmup=1),
    "smoke": dict(batch=2, T=8, input=16, hidden=8, repeats=1, warmup=0),
}
GOAL = 1.0  # packed nn.GRU / reversal BiGRU, forward + backward time
TOLERANCE = 1e-4  # max abs difference of outputs and input gradients, reversal vs packed


def run(size: str = "full", seed: int = 0, threads: Optional[int] = None, device: str = "cpu") -> BenchResult:
    from surprisal_cc.model.nnet import BiGRU

    cfg = SIZES[check_size(size)]
    device = str(resolve_device(device))
    threads = set_threads(threads)
    seed_everything(seed)
    g = torch.Generator().manual_seed(seed)
    B, T = cfg["batch"], cfg["T"]
    lengths = synthetic_lengths(B, T // 2, T, g)
    mask = lengths_mask(lengths, T).unsqueeze(-1)
    x = torch.randn(B, T, cfg["input"], generator=g) * mask
    grad_out = torch.randn(B, T, 2 * cfg["hidden"], generator=g) * mask
    ours = BiGRU(cfg["input"], cfg["hidden"], dropout=0.0)
    packed = PackedBiGRU(cfg["input"], cfg["hidden"], dropout=0.0).load_from(ours)
    ours, packed = ours.to(device), packed.to(device)
    x, grad_out, lengths, mask = (t.to(device) for t in (x, grad_out, lengths, mask))
    models = {"reversal": ours, "packed": packed}

    def forward(model):
        model.eval()
        with torch.no_grad():
            return model(x, lengths)

    def forward_backward(model):
        model.train()
        xi = x.clone().requires_grad_(True)
        model.zero_grad(set_to_none=True)
        model(xi, lengths).backward(grad_out)
        return xi.grad

    fns = {}
    for name, model in models.items():
        fns[f"{name} fwd"] = lambda m=model: forward(m)
        fns[f"{name} fwd+bwd"] = lambda m=model: forward_backward(m)
    # equality check first, in exact fp32 (no TF32 on a GPU); the timing has its own warm-up round, as timed
    with full_fp32():
        out_diff = float(((forward(ours) - forward(packed)) * mask).abs().max())
        grad_diff = float(((forward_backward(ours) - forward_backward(packed)) * mask).abs().max())
        weight_grad_diff = max(
            float((getattr(ours.forward_gru, n).grad - getattr(packed.gru, n).grad).abs().max())
            for n in ("weight_ih_l0", "weight_hh_l0"))
    repeats = repeats_on(device, cfg["repeats"])
    times = interleaved_times(fns, repeats=repeats, warmup=cfg["warmup"], device=device)
    t = {k: median(v) for k, v in times.items()}

    res = BenchResult("rnn", params=dict(size=size, batch=B, T=T, lengths=f"{T // 2}-{T}",
                                         sizes=f"{cfg['input']}->{cfg['hidden']}x2", repeats=repeats,
                                         warmup=cfg["warmup"], device=device, threads=threads, seed=seed))
    for phase in ("fwd", "fwd+bwd"):
        r = t[f"packed {phase}"] / t[f"reversal {phase}"]
        headline = phase == "fwd+bwd"
        res.summary.append(SummaryRow(f"BiGRU {phase}: reversal vs packed", t[f"reversal {phase}"],
                                      t[f"packed {phase}"], "s", r, "baseline/ours",
                                      f">= {GOAL:g}x" if headline else "info", r >= GOAL if headline else None,
                                      note=f"min–max {spread(times[f'reversal {phase}'])} vs "
                                           f"{spread(times[f'packed {phase}'])} s"))
    res.summary.append(SummaryRow("BiGRU outputs: reversal vs packed", out_diff, 0.0, "max abs diff", None, "-",
                                  f"<= {TOLERANCE:g}", out_diff <= TOLERANCE and grad_diff <= TOLERANCE,
                                  note=f"input-grad diff {grad_diff:.1e}"))
    res.add_detail(f"BiGRU B={B}, T={T}, {cfg['input']}->{cfg['hidden']} per direction (median of {repeats} "
                   f"interleaved repeats after {cfg['warmup']} warm-up)",
                   ["implementation", "fwd s", "min–max", "fwd+bwd s", "min–max", "fwd / reversal",
                    "fwd+bwd / reversal"],
                   [[name, t[f"{name} fwd"], spread(times[f"{name} fwd"]), t[f"{name} fwd+bwd"],
                     spread(times[f"{name} fwd+bwd"]), t[f"{name} fwd"] / t["reversal fwd"],
                     t[f"{name} fwd+bwd"] / t["reversal fwd+bwd"]] for name in models])
    res.add_detail("Equality (same weights, real frames)", ["quantity", "max abs diff"],
                   [["output", out_diff], ["input gradient", grad_diff], ["forward-direction weight gradient",
                                                                          weight_grad_diff]])
    return res


def main(argv=None) -> int:
    return size_cli(run, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
