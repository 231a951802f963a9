"""Command-line interface: ``surprisal-cc flops|report|bench``.

    surprisal-cc flops hparams/TIMIT/conditional_ctc.yaml [--key=value ...] [--json]
    surprisal-cc report results/MiniLibriSpeech [more results files or folders] [--json]
    surprisal-cc report results/MiniLibriSpeech/grid --out docs/results/MiniLibriSpeech   # every table + plot
    surprisal-cc bench [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional, Sequence


def flops_table(hparams_file: str, overrides: Sequence[str] = ()) -> dict:
    """Static MACs per frame of every component of the model an hparams file describes.

    Builds the modules only (no data is read). APC is counted when the model needs it.
    """
    from .apc import APCModel
    from .brain import static_flop_rows
    from .flops import module_macs
    from .recipe import load_hparams

    override_yaml = "\n".join(_override_to_yaml(o) for o in overrides)
    hparams = load_hparams(hparams_file, override_yaml)
    encoder = hparams["encoder_module"]
    uses_apc = hparams["input_features"] == "apc" or encoder.needs_surprisal(True) or encoder.needs_surprisal(False)
    apc_macs = module_macs(hparams.get("apc_model") or APCModel()) if uses_apc else 0
    rows = static_flop_rows(encoder, apc_macs)
    mean = hparams.get("controller_target_mean")
    if "small-only" in rows and hparams.get("controller") == "surprisal" and mean is not None:
        rows[f"expected at mean p_big={mean:g}"] = (
            rows["small-only"] + mean * (rows["big-only"] - rows["small-only"]) + rows["controller"])
    return {"hparams": hparams_file, "overrides": list(overrides), "macs_per_frame": rows}


def _override_to_yaml(option: str) -> str:
    if not option.startswith("--") or "=" not in option:
        raise SystemExit(f"override {option!r} must look like --key=value")
    key, value = option[2:].split("=", 1)
    return f"{key}: {value}"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="surprisal-cc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_flops = sub.add_parser("flops", help="per-component MACs per frame of an hparams file")
    p_flops.add_argument("hparams")
    p_flops.add_argument("--json", action="store_true")
    p_report = sub.add_parser("report", help="Markdown table from results files or folders")
    p_report.add_argument("paths", nargs="+")
    p_report.add_argument("--json", action="store_true")
    p_report.add_argument("--csv", help="also write the table as CSV to this file")
    p_report.add_argument("--out", help="write every paper-style table (Markdown + CSV) and every plot into this "
                                        "folder (from one results folder)")
    p_bench = sub.add_parser("bench", help="run the benchmarks and print a table")
    p_bench.add_argument("--json", action="store_true")
    p_bench.add_argument("--quick", action="store_true", help="smaller sizes (seconds instead of minutes)")
    args, unknown = parser.parse_known_args(argv)

    if args.command == "flops":
        from .flops import format_flop_table

        table = flops_table(args.hparams, unknown)
        print(json.dumps(table, indent=2) if args.json else format_flop_table(table["macs_per_frame"]))
        return 0
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "report":
        from .report import collect_results, format_markdown, write_csv

        rows = collect_results(args.paths)
        if not rows:
            print(f"no results files found under {args.paths}", file=sys.stderr)
            return 1
        if args.csv:
            write_csv(rows, args.csv)
        if args.out:
            from .plots import make_all_plots
            from .report import write_report

            if len(args.paths) != 1:
                parser.error("--out takes one results folder")
            print(write_report(args.paths[0], args.out))
            for path in make_all_plots(args.paths[0], args.out):
                print(f"wrote {path}")
            return 0
        print(json.dumps(rows, indent=2, default=str) if args.json else format_markdown(rows))
        return 0
    if args.command == "bench":
        from pathlib import Path

        repo = Path(__file__).resolve().parents[1]
        if (repo / "benchmarks" / "run_all.py").is_file() and str(repo) not in sys.path:
            sys.path.insert(0, str(repo))
        try:
            from benchmarks.run_all import run_benchmarks
        except ImportError as err:
            print(f"surprisal-cc bench needs the repository's benchmarks/ folder (an editable install): {err}",
                  file=sys.stderr)
            return 2
        return run_benchmarks(as_json=args.json, quick=args.quick)
    return 2


if __name__ == "__main__":
    sys.exit(main())
