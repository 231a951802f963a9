"""Speed of CTC beam search backends (benchmark plan: beam 10, T=300, V=42).

Target: <= 30 ms per utterance on the project's 2 CPU cores, compared with
SpeechBrain's ``CTCBeamSearcher`` (its default pruning settings) in the same run.

Usage::

    python -m benchmarks.bench_decoding                # Markdown table
    python -m benchmarks.bench_decoding --n-utts 16 --skip-slow

Two posterior regimes: "peaky" (trained-like: log_softmax of 5*N(0,1) logits
with +8 on blank, so blank dominates most frames) and "flat" (log_softmax of
0.5*N(0,1) logits: every label plausible on every frame, the worst case).
Columns: ms/utt (wall clock, best of ``repeats``), speed ratio to SpeechBrain
``CTCBeamSearcher`` defaults (>1 = faster), fraction of utterances whose output
equals the native prefix beam search, and mean exact CTC log-likelihood of the
returned label sequences (higher = better search).

Speed note (idle 2-core AMD EPYC, torch 2.11, 1 thread, 8 utts, T=300, V=42, beam 10, full size
of ``benchmarks.run_all``): native prefix beam search 15.1 ms/utt when called per utterance (peaky
and flat) and 4.4 ms/utt in one batched call, so it meets the <= 30 ms/utt target. SpeechBrain
``CTCBeamSearcher`` with its defaults took 38.7 ms/utt (peaky; its token pruning helps) and
410.5 ms/utt (flat). flashlight via torchaudio took 48.6 ms/utt (flat): its lexicon-free
decoder builds an LM-state trie node per candidate, even with no LM. The exact (no pruning)
SpeechBrain backends are 0.4-1.8 s/utt. Native and SpeechBrain
``CTCPrefixBeamSearcher`` return identical outputs (both keep K distinct
prefixes); flashlight and SpeechBrain ``CTCBeamSearcher`` keep K
(prefix, ending) states and found less probable sequences on flat posteriors
(mean log-likelihood -814.5 vs -768.5). Timings vary by up to 2x between runs
when other jobs share the cores.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import torch
from torch import Tensor

from surprisal_cc.decoding import (
    CTCBeamSearch,
    _SpeechBrainDecoder,
    available_backends,
    ctc_greedy_decode,
    ctc_log_likelihood,
)


def make_posteriors(kind: str, n_utts: int, T: int, V: int, seed: int) -> Tensor:
    """Synthetic CTC log posteriors ``[n_utts, T, V]`` (blank = 0)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "peaky":
        logits = torch.randn(n_utts, T, V, generator=g) * 5.0
        logits[..., 0] += 8.0
    elif kind == "flat":
        logits = torch.randn(n_utts, T, V, generator=g) * 0.5
    else:
        raise ValueError(kind)
    return logits.log_softmax(-1)


def _time(fn: Callable[[], list[list[int]]], repeats: int) -> tuple[float, list[list[int]]]:
    best, out = float("inf"), []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def benchmark_beam_search(
    T: int = 300,
    V: int = 42,
    n_utts: int = 8,
    beam: int = 10,
    seed: int = 0,
    repeats: int = 2,
    skip_slow: bool = False,
    kinds: tuple[str, ...] = ("peaky", "flat"),
) -> list[dict]:
    """Time every available backend; one dict per (posterior kind, method)."""
    torch.set_num_threads(1)
    rows: list[dict] = []
    backends = [b for b in available_backends() if b != "speechbrain" or not skip_slow]
    for kind in kinds:
        lp = make_posteriors(kind, n_utts, T, V, seed)
        lens = torch.full((n_utts,), T, dtype=torch.long)
        methods: dict[str, Callable[[], list[list[int]]]] = {}
        methods["greedy"] = lambda: ctc_greedy_decode(lp, lens)
        for b in backends:
            dec = CTCBeamSearch(blank=0, beam_size=beam, backend=b)
            # per-utterance calls (the plan's unit) ...
            methods[f"{b} (per utt)"] = lambda d=dec: [
                d(lp[i : i + 1], lens[i : i + 1])[0] for i in range(n_utts)
            ]
            # ... and one batched call
            methods[f"{b} (batch {n_utts})"] = lambda d=dec: d(lp, lens)
        if not skip_slow and "speechbrain" in backends:
            dec = CTCBeamSearch(blank=0, beam_size=beam, backend="speechbrain_prefix")
            methods["speechbrain_prefix (per utt)"] = lambda d=dec: d(lp, lens)
        sb_ref = _SpeechBrainDecoder(V, 0, beam, speechbrain_defaults=True)
        ref_name = "SpeechBrain CTCBeamSearcher defaults (per utt)"
        methods[ref_name] = lambda: sb_ref(lp, [T] * n_utts)

        results = {name: _time(fn, repeats) for name, fn in methods.items()}
        native_out = results.get("native (batch %d)" % n_utts, (0.0, []))[1]
        ref_ms = 1000 * results[ref_name][0] / n_utts
        for name, (sec, out) in results.items():
            ms = 1000 * sec / n_utts
            rows.append(
                dict(
                    posteriors=kind,
                    method=name,
                    ms_per_utt=ms,
                    speedup_vs_sb=ref_ms / ms if ms > 0 else float("inf"),
                    agree_native=sum(a == b for a, b in zip(out, native_out)) / n_utts,
                    mean_loglik=float(ctc_log_likelihood(lp, lens, out).mean()),
                )
            )
    return rows


def to_markdown(rows: list[dict], T: int, V: int, beam: int, n_utts: int) -> str:
    head = (
        f"CTC beam search, T={T}, V={V}, beam={beam}, {n_utts} utts, "
        f"torch threads=1\n\n"
        "| posteriors | method | ms/utt | speed vs SB CTCBeamSearcher | "
        "= native | mean log p(y|x) |\n|---|---|---:|---:|---:|---:|\n"
    )
    lines = [
        f"| {r['posteriors']} | {r['method']} | {r['ms_per_utt']:.2f} | "
        f"{r['speedup_vs_sb']:.1f}x | {r['agree_native']:.2f} | {r['mean_loglik']:.1f} |"
        for r in rows
    ]
    return head + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, default=300)
    ap.add_argument("--V", type=int, default=42)
    ap.add_argument("--n-utts", type=int, default=8)
    ap.add_argument("--beam", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-slow", action="store_true", help="skip exact SpeechBrain backends")
    a = ap.parse_args()
    rows = benchmark_beam_search(a.T, a.V, a.n_utts, a.beam, a.seed, a.repeats, a.skip_slow)
    print(to_markdown(rows, a.T, a.V, a.beam, a.n_utts))


if __name__ == "__main__":
    main()
