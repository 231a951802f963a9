"""Run the whole benchmark suite and print one combined table plus per-benchmark details.

    python -m benchmarks.run_all [--quick|--smoke] [--json] [--only training,rnn] [--threads N] [--output FILE.json]
        [--device cuda] [--targets]

``python -m`` from the repository root (``make bench`` runs it so).

Every figure is a ratio against a baseline measured in the same run (the memory, allocator and
layout benchmarks use fresh subprocesses). torch runs on ``--threads`` threads (default 1, never
the core count: timings are comparable only at a stated thread count; the layout benchmark lays
runs over all cores by design). The report's header records the load average before and after,
and warns when the 1-minute load average exceeds the cores the benchmarks leave free plus 0.5:
such timings are from a loaded machine. ``--output FILE.json`` also writes every benchmark's rows
with the machine information (git revision, torch, CPU capability and model, threads, the
OMP_*/MKL_*/ATEN_* environment, load averages). ``--targets`` prints the targets table (the one in
benchmarks/README.md) and runs nothing.

Sizes: full (the plan's), quick (the whole suite in a few minutes), smoke
(tiniest shapes, for the tests; timings meaningless). Returns 0 when every benchmark ran (skips for
missing data included), 1 when one raised, the command line names an unknown benchmark or an ``--output``
that cannot be written (one ``error: ...`` line, before anything runs; the report is printed before the file
is written). Unmet targets are shown in the table (``met?`` = NO), not turned into a
failing exit status. ``--device cuda`` runs the GPU-capable benchmarks (``training`` and ``rnn``)
on the GPU and reports the others as skipped (they measure CPU work: decoding, data preparation,
CPU inference and memory).
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch

from benchmarks.common import (
    DEFAULT_THREADS,
    SUMMARY_HEADERS,
    BenchResult,
    SummaryRow,
    check_size,
    format_result,
    load_average,
    load_warning,
    machine_info,
    markdown_table,
    positive_int,
    resolve_device,
    set_threads,
    summary_cells,
)
from surprisal_cc.checks import check_writable


def _runners() -> Dict[str, Callable[..., BenchResult]]:
    from benchmarks import (bench_allocator, bench_dataprep, bench_decoding, bench_inference, bench_layout,
                            bench_memory, bench_rnn, bench_training)

    return {
        "training": bench_training.run,
        "inference": bench_inference.run,
        "rnn": bench_rnn.run,
        "decoding": bench_decoding.run,
        "dataprep": bench_dataprep.run,
        "memory": bench_memory.run,
        "allocator": bench_allocator.run,
        "layout": bench_layout.run,
    }


BENCHMARKS = ("training", "inference", "rnn", "decoding", "dataprep", "memory", "allocator", "layout")
ON_ANY_DEVICE = ("training", "rnn")  # the others measure CPU work
TARGET_HEADERS = ("benchmark", "headline figure", "target")


def targets() -> List[List[str]]:
    """The targets the benchmarks check, from their constants: one row per headline figure."""
    from benchmarks import bench_dataprep, bench_decoding, bench_inference, bench_memory, bench_rnn, bench_training

    return [
        ["training", "the authors' step time / ours (best precision), same batches",
         f">= {bench_training.GOAL:g}x"],
        ["inference", "routed / big-only encoder time against the ratio predicted from the components' times",
         f"abs(measured - predicted) <= {bench_inference.TOLERANCE:g}"],
        ["rnn", "packed nn.GRU / reversal BiGRU time, forward + backward", f">= {bench_rnn.GOAL:g}x"],
        ["rnn", "max abs difference of outputs and input gradients, reversal vs packed",
         f"<= {bench_rnn.TOLERANCE:g}"],
        ["decoding", "SpeechBrain CTCBeamSearcher (defaults) / native time per utterance, each posterior regime",
         f">= {bench_decoding.GOAL:g}x"],
        ["dataprep", "first / repeated (cached) preparation of dev-clean-2", f"> {bench_dataprep.GOAL:g}x"],
        ["memory", "the authors' step / ours, peak memory of a training step",
         f"info (>= {bench_memory.GOAL:g}x shown, not a goal)"],
        ["allocator, layout", "freed memory kept for reuse; runs side by side vs one run on all cores", "info"],
    ]


def targets_table() -> str:
    return markdown_table(TARGET_HEADERS, targets(), align="lll")


def collect(size: str = "full", only: Optional[Sequence[str]] = None, threads: int = DEFAULT_THREADS,
            log: Callable[[str], None] = lambda s: None, device: str = "cpu") -> Dict:
    """Run the benchmarks on ``threads`` torch threads; returns ``{"machine", "size", "benchmarks": {name: result
    dict}, "errors"}``."""
    check_size(size)
    device = str(resolve_device(device))
    on_cpu = device == "cpu"
    names = list(only) if only else list(BENCHMARKS)
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        raise ValueError(f"unknown benchmarks {sorted(unknown)}; choose from {BENCHMARKS}")
    runners = _runners()
    threads_before = torch.get_num_threads()
    threads = set_threads(threads)
    machine = machine_info(device, threads)
    cores = machine["cores"] or 1
    results: Dict[str, BenchResult] = {}
    errors: Dict[str, str] = {}
    for name in names:
        log(f"[bench] {name} ({size}, {threads} thread{'s' if threads != 1 else ''}) ...")
        t0 = time.perf_counter()
        try:
            kwargs = {"threads": threads} if "threads" in inspect.signature(runners[name]).parameters else {}
            if not on_cpu and name in ON_ANY_DEVICE:
                kwargs["device"] = device
            if not on_cpu and name not in ON_ANY_DEVICE:
                result = BenchResult(name, skipped=f"measures CPU work: run it without --device {device}")
            else:
                result = runners[name](size, **kwargs)
        except Exception as err:  # report and go on with the other benchmarks
            errors[name] = "".join(traceback.format_exception_only(type(err), err)).strip()
            log(traceback.format_exc())
            result = BenchResult(name, skipped=f"error: {errors[name]}")
            result.summary.append(SummaryRow(name, None, None, "", None, "-", "-", None, note="ERROR"))
        finally:
            set_threads(threads)
        result.seconds = time.perf_counter() - t0
        results[name] = result
        log(f"[bench] {name} done in {result.seconds:.1f} s")
    machine["load_average_after"] = load_average()
    machine["load_warning"] = load_warning(cores, threads, machine["load_average_1_5_15"][0],
                                           machine["load_average_after"][0])
    torch.set_num_threads(threads_before)  # leave the caller's setting as it was
    return {"machine": machine, "size": size, "benchmarks": {n: r.as_dict() for n, r in results.items()},
            "errors": errors, "_results": results}


def format_report(report: Dict) -> str:
    m = report["machine"]
    results: Dict[str, BenchResult] = report["_results"]
    head = (f"# surprisal_cc benchmarks ({report['size']} sizes)\n\n"
            f"date {m['date']}; revision {m['git_revision'] or 'unknown'}; device {m['device']}; CPU {m['cpu']} "
            f"({m['cpu_capability']}); {m['cores']} cores; torch {m['torch']} with {m['threads']} thread"
            f"{'s' if m['threads'] != 1 else ''}; Python {m['python']}; load average before "
            f"{m['load_average_1_5_15']}, after {m['load_average_after']} (1/5/15 min)")
    if m["load_warning"]:
        head += f"\n\n{m['load_warning']}"
    rows: List[List[str]] = [summary_cells(r) for res in results.values() for r in res.summary]
    table = markdown_table(SUMMARY_HEADERS, rows, align="lrrrll")
    details = "\n\n".join(format_result(r) + f"\n\n(ran in {r.seconds:.1f} s)" for r in results.values())
    return f"{head}\n\n## Summary\n\n{table}\n\n## Details\n\n{details}"


def report_json(report: Dict) -> str:
    return json.dumps({k: v for k, v in report.items() if not k.startswith("_")}, indent=2, default=str)


def run_benchmarks(as_json: bool = False, quick: bool = False, size: Optional[str] = None,
                   only: Optional[Sequence[str]] = None, threads: int = DEFAULT_THREADS, device: str = "cpu",
                   output: Optional[os.PathLike] = None) -> int:
    """Run the suite and print Markdown (or JSON), then write the JSON report to ``output`` when given; the entry
    point of ``make bench``. An ``output`` that cannot be written raises :class:`OSError` before any
    benchmark runs; one that fails after the run (a full disk) is reported on stderr after the report was
    printed, and returns 1."""
    size = size or ("quick" if quick else "full")
    if output is not None:
        check_writable("--output file", output)
    report = collect(size, only, threads, log=lambda s: print(s, file=sys.stderr, flush=True), device=device)
    text = report_json(report)
    print(text if as_json else format_report(report), flush=True)
    status = 1 if report["errors"] else 0
    if output is not None:
        try:
            Path(output).write_text(text + "\n", encoding="utf-8")
        except OSError as err:
            print(f"error: --output file {output} cannot be written: {err.strerror or err}", file=sys.stderr)
            return 1
        print(f"[bench] wrote {output}", file=sys.stderr)
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (seconds instead of minutes)")
    ap.add_argument("--smoke", action="store_true", help="tiniest sizes (tests; timings meaningless)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    ap.add_argument("--threads", type=positive_int, default=DEFAULT_THREADS,
                    help=f"torch threads (default {DEFAULT_THREADS})")
    ap.add_argument("--output", metavar="FILE.json", help="also write the results and machine information there")
    ap.add_argument("--device", default="cpu", help=f"cpu (default) or cuda[:N]: runs {', '.join(ON_ANY_DEVICE)} there")
    ap.add_argument("--targets", action="store_true", help="print the targets table and run nothing")
    a = ap.parse_args(argv)
    if a.targets:
        print(targets_table())
        return 0
    size = "smoke" if a.smoke else "quick" if a.quick else "full"
    only = None if a.only is None else [s.strip() for s in a.only.split(",") if s.strip()]
    if only == []:
        ap.error(f"--only names no benchmark; choose from {','.join(BENCHMARKS)}")
    try:
        if a.output is not None:  # now, not after a run of minutes
            check_writable("--output file", a.output)
        return run_benchmarks(as_json=a.json, size=size, only=only, threads=a.threads, device=a.device,
                              output=a.output)
    except (ValueError, OSError) as err:  # an unknown benchmark name, a missing CUDA device, an --output that
        # cannot be written: raised before any benchmark runs
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
