"""Data preparation time for Mini-LibriSpeech dev-clean-2: first run vs the second (cached) run.

``prepare_mini_librispeech(<data>, <tmp>, splits=["test"], labels="mfa")`` with ``<data>`` =
``$SURPRISAL_CC_DATA`` or ``<repo>/../shared/data``; the second call with the same options and
unchanged inputs must return at once (target: first / second > ``GOAL``). Skipped, with a
message, when dev-clean-2 is absent. One run each: the first run is a one-off by nature.

Usage: ``python -m benchmarks.bench_dataprep [--json] [--threads N] [--data DIR]``
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Optional

from benchmarks.common import DEFAULT_THREADS, REPO, BenchResult, SummaryRow, check_size, positive_int, print_result, \
    set_threads

GOAL = 1.0  # first / second (cached) run: the second must be faster


def data_root() -> Path:
    return Path(os.environ.get("SURPRISAL_CC_DATA", REPO.parent / "shared" / "data"))


def find_dev_clean_2(root: Path) -> Optional[Path]:
    for candidate in (root / "LibriSpeech" / "dev-clean-2", root / "dev-clean-2"):
        if candidate.is_dir():
            return candidate
    return None


def run(size: str = "full", data: Optional[Path] = None, threads: Optional[int] = None) -> BenchResult:
    from surprisal_cc.data import prepare_mini_librispeech

    check_size(size)
    threads = set_threads(threads)
    root = Path(data) if data is not None else data_root()
    res = BenchResult("dataprep", params=dict(size=size, data=str(root), split="test (dev-clean-2)", labels="mfa",
                                              threads=threads))
    if find_dev_clean_2(root) is None:
        res.skipped = f"dev-clean-2 not found under {root} (set SURPRISAL_CC_DATA)"
        res.summary.append(SummaryRow("data prep dev-clean-2: first vs cached run", None, None, "s", None,
                                      "baseline/ours", f"> {GOAL:g}x", None, note="skipped: no data"))
        return res
    with tempfile.TemporaryDirectory(prefix="bench_dataprep_") as tmp:
        t0 = time.perf_counter()
        manifests = prepare_mini_librispeech(root, tmp, splits=["test"], labels="mfa")
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        prepare_mini_librispeech(root, tmp, splits=["test"], labels="mfa")
        second = time.perf_counter() - t0
        n_utts = sum(1 for _ in open(manifests["test"], encoding="utf-8")) - 1
    ratio = first / second if second > 0 else float("inf")
    res.params["utterances"] = n_utts
    res.summary.append(SummaryRow("data prep dev-clean-2: first vs cached run", second, first, "s", ratio,
                                  "baseline/ours", f"> {GOAL:g}x", ratio > GOAL))
    res.add_detail("prepare_mini_librispeech(splits=['test'], labels='mfa')", ["run", "seconds", "ms/utt"],
                   [["first", first, 1000 * first / max(n_utts, 1)],
                    ["second (cached)", second, 1000 * second / max(n_utts, 1)]])
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--threads", type=positive_int, default=DEFAULT_THREADS,
                    help=f"torch threads (default {DEFAULT_THREADS})")
    a = ap.parse_args(argv)
    print_result(run("full", a.data, threads=a.threads), a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
