"""CTC beam search speed: the native prefix beam search vs SpeechBrain's ``CTCBeamSearcher`` (beam 10, T=300, V=42).

Target: the native search, called once per utterance, at least as fast as SpeechBrain's
``CTCBeamSearcher`` with its default pruning settings, one call per utterance, in the same run:
ratio SpeechBrain / native >= ``GOAL`` on every posterior regime.

Usage: ``python -m benchmarks.bench_decoding [--quick|--smoke] [--json] [--threads N] [--exact-speechbrain]``
(``--exact-speechbrain`` adds SpeechBrain's backends without pruning, 0.4-1.8 s per utterance).

Two posterior regimes: "peaky" (trained-like: log_softmax of 5*N(0,1) logits with +8 on blank,
so blank dominates most frames) and "flat" (log_softmax of 0.5*N(0,1) logits: every label
plausible on every frame, the worst case). Every method is timed interleaved (A B C ... A B C ...)
after one warm-up round; reported: ms/utt (median of the repeats, and min–max), speed ratio to
SpeechBrain ``CTCBeamSearcher`` defaults (>1 = faster), fraction of utterances whose output equals
the native batched search, and mean exact CTC log-likelihood of the returned label sequences
(higher = better search).

Native and SpeechBrain ``CTCPrefixBeamSearcher`` return identical outputs (both keep K distinct
prefixes); flashlight (torchaudio) and SpeechBrain ``CTCBeamSearcher`` keep K (prefix, ending)
states and find less probable sequences on flat posteriors. flashlight's lexicon-free decoder
builds an LM-state trie node per candidate, even with no LM.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from benchmarks.common import (BenchResult, SummaryRow, check_size, interleaved_times, median, print_result,
                               set_threads, size_of, size_parser, spread)
from surprisal_cc.decoding.backends import SpeechBrainDecoder
from surprisal_cc.decoding.search import (
    CTCBeamSearch,
    available_backends,
    ctc_greedy_decode,
    as_array,
)

GOAL = 1.0  # SpeechBrain CTCBeamSearcher (defaults) / native, ms per utterance, one call per utterance
OURS = "native (per utt)"
BASELINE = "SpeechBrain CTCBeamSearcher defaults (per utt)"
SIZES = {  # frames, labels, utterances, beam, timed repeats, warm-up rounds, posterior regimes
    "full": dict(T=300, V=42, n_utts=8, beam=10, repeats=5, warmup=1, kinds=("peaky", "flat")),
    "quick": dict(T=300, V=42, n_utts=4, beam=10, repeats=5, warmup=1, kinds=("peaky",)),
    "smoke": dict(T=20, V=42, n_utts=1, beam=10, repeats=1, warmup=1, kinds=("peaky",)),
}



def ctc_log_likelihood(
    log_probs,
    lengths: Optional[Sequence[int]],
    labels: Sequence[Sequence[int]],
    blank: int = 0,
) -> "Tensor":
    """Exact ``log p(labels | x)`` under CTC for each utterance (float64, ``[B]``): what a decoder's output
    scores, to compare decoders (this benchmark and tests/test_decoding.py).

    ``log_probs``: (B, T, V) log-probabilities (array or tensor); ``lengths``: frames per utterance.

    Arguments
    ---------
    labels : sequence of sequence of int
        Label ids per utterance (no blank).
    blank : int
        Blank label id.

    Returns
    -------
    torch.Tensor
        ``[B]`` float64 log-likelihoods; ``-inf`` where the label sequence cannot be aligned in
        the given frames.

    Example
    -------
    >>> import torch
    >>> lp = torch.full((2, 2, 2), 0.5).log()  # two frames, blank and one label
    >>> ll = ctc_log_likelihood(lp, [2, 2], [[1], [1, 1]])
    >>> [round(v, 4) for v in ll.tolist()]  # log(3/4): paths 1-, -1, 11; [1, 1] needs 3 frames
    [-0.2877, -inf]
    """
    import torch

    lens = [int(n) for n in lengths] if lengths is not None else [log_probs.shape[1]] * log_probs.shape[0]
    lp = torch.as_tensor(as_array(log_probs)).double().transpose(0, 1)  # [T, B, V]
    flat = [int(x) for seq in labels for x in seq]
    targets = torch.tensor(flat if flat else [0], dtype=torch.long)
    tgt_lens = torch.tensor([len(s) for s in labels], dtype=torch.long)
    nll = torch.nn.functional.ctc_loss(
        lp,
        targets if flat else targets[:0],
        torch.tensor(lens, dtype=torch.long),
        tgt_lens,
        blank=blank,
        reduction="none",
        zero_infinity=False,
    )
    return -nll
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


def methods(lp: Tensor, lens: Tensor, beam: int, exact_speechbrain: bool = False
            ) -> Dict[str, Callable[[], List[List[int]]]]:
    """Every decoding method on ``lp``: greedy, each available backend per utterance and batched, and SpeechBrain's
    ``CTCBeamSearcher`` with its defaults (the baseline); the exact SpeechBrain backends only when asked."""
    n_utts, T, V = lp.shape
    out: Dict[str, Callable[[], List[List[int]]]] = {"greedy": lambda: ctc_greedy_decode(lp, lens)}
    for backend in available_backends():
        if backend == "speechbrain" and not exact_speechbrain:
            continue
        dec = CTCBeamSearch(blank=0, beam_size=beam, backend=backend)
        out[f"{backend} (per utt)"] = lambda d=dec: [d(lp[i:i + 1], lens[i:i + 1])[0] for i in range(n_utts)]
        out[f"{backend} (batch {n_utts})"] = lambda d=dec: d(lp, lens)
    if exact_speechbrain and "speechbrain" in available_backends():
        dec = CTCBeamSearch(blank=0, beam_size=beam, backend="speechbrain_prefix")
        out["speechbrain_prefix (per utt)"] = lambda d=dec: d(lp, lens)
    reference = SpeechBrainDecoder(V, 0, beam, speechbrain_defaults=True)
    out[BASELINE] = lambda: reference(lp, [T] * n_utts)
    return out


def run(size: str = "full", seed: int = 0, threads: Optional[int] = None,
        exact_speechbrain: bool = False) -> BenchResult:
    cfg = SIZES[check_size(size)]
    threads = set_threads(threads)
    n_utts, T = cfg["n_utts"], cfg["T"]
    res = BenchResult("decoding", params=dict(size=size, T=T, V=cfg["V"], beam=cfg["beam"], n_utts=n_utts,
                                              repeats=cfg["repeats"], warmup=cfg["warmup"], threads=threads,
                                              seed=seed))
    rows = []
    for kind in cfg["kinds"]:
        lp = make_posteriors(kind, n_utts, T, cfg["V"], seed)
        lens = torch.full((n_utts,), T, dtype=torch.long)
        outputs: Dict[str, List[List[int]]] = {}
        fns = {name: (lambda n=name, f=fn: outputs.__setitem__(n, f()))
               for name, fn in methods(lp, lens, cfg["beam"], exact_speechbrain).items()}
        times = interleaved_times(fns, repeats=cfg["repeats"], warmup=cfg["warmup"])
        ms = {name: 1000 * median(v) / n_utts for name, v in times.items()}
        ratio = ms[BASELINE] / ms[OURS]
        res.summary.append(SummaryRow(
            f"CTC beam search ({kind} posteriors), one call per utterance: native vs SpeechBrain CTCBeamSearcher",
            ms[OURS], ms[BASELINE], "ms/utt", ratio, "baseline/ours", f">= {GOAL:g}x", ratio >= GOAL,
            note=f"min–max {spread(times[OURS], 1000 / n_utts)} vs {spread(times[BASELINE], 1000 / n_utts)} ms/utt"))
        native = outputs[f"native (batch {n_utts})"]
        for name, v in times.items():
            rows.append([kind, name, ms[name], spread(v, 1000 / n_utts), ms[BASELINE] / ms[name],
                         sum(a == b for a, b in zip(outputs[name], native)) / n_utts,
                         float(ctc_log_likelihood(lp, lens, outputs[name]).mean())])
    res.add_detail(f"CTC beam search, T={T}, V={cfg['V']}, beam {cfg['beam']}, {n_utts} utts "
                   f"(median of {cfg['repeats']} interleaved repeats after {cfg['warmup']} warm-up, {threads} thread"
                   f"{'s' if threads != 1 else ''})",
                   ["posteriors", "method", "ms/utt", "min–max", "speed vs SB CTCBeamSearcher", "= native",
                    "mean log p(y|x)"], rows)
    return res


def main(argv=None) -> int:
    ap = size_parser(__doc__)
    ap.add_argument("--exact-speechbrain", action="store_true",
                    help="also SpeechBrain's backends without pruning (0.4-1.8 s per utterance)")
    a = ap.parse_args(argv)
    print_result(run(size_of(a), threads=a.threads, exact_speechbrain=a.exact_speechbrain), a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
