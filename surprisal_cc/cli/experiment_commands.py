"""``surprisal-cc`` commands of experiments: run a ``grid`` of recipe runs, ``report`` their results as
tables and figures, draw learning ``curves`` of runs, and ``analyse`` where the APC model is surprised.

    surprisal-cc grid hparams/MiniLibriSpeech/grid_cpu.yaml [--dry-run] [--jobs N] [--threads N] [--only SUBSTRING]
        [--no-report] [--key=value ...]
    surprisal-cc report results/MiniLibriSpeech [more results files or folders] [--json] [--csv FILE] [--pool KEY]
    surprisal-cc report results/MiniLibriSpeech/grid --out docs/results/MiniLibriSpeech   # every table + plot
    surprisal-cc curves RUN_DIR[=LABEL] ... [--key PER] [--plot OUT.png]   # runs in progress too
    surprisal-cc analyse --apc APC.pt --mfa MFA.csv --audio-root DIR [--plot OUT.png] [--json OUT.json]

``grid`` runs every run of a grid file that has not finished yet (``--key=value`` options go to every
run), then writes the tables and figures. The tools themselves (:mod:`surprisal_cc.experiments`) are
imported when their command runs, not for ``--help`` or the other commands.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import List, Optional

from surprisal_cc.checks import check_outputs_apart, positive_int
from surprisal_cc.errors import UsageError

#: each command's one-line help, in the order ``surprisal-cc --help`` lists them
HELP = {
    "grid": "run an experiment grid (resumable, --key=value overrides for every run), then write its tables and "
            "figures",
    "report": "Markdown table from results files or folders",
    "curves": "learning curves of runs, finished or in progress: Markdown table (lr, validation metric, minutes "
              "per epoch) and plot",
    "analyse": "APC surprisal on silence vs speech frames (forced alignments), routing plot",
}


def cmd_analyse(args, unknown: List[str]) -> int:
    from surprisal_cc.experiments.analysis import run_analysis

    return run_analysis(args)


def cmd_grid(args, unknown: List[str]) -> int:
    from surprisal_cc.experiments.grid import run_grid

    return run_grid(args, unknown)


def cmd_report(args, unknown: List[str]) -> int:
    from surprisal_cc.experiments.aggregation import pool_configurations
    from surprisal_cc.experiments.report import format_markdown, write_csv
    from surprisal_cc.training.run_folder import collect_results
    from surprisal_cc.experiments.run_labels import POOLABLE_KEYS

    pool = [key for keys in args.pool for key in keys.split(",") if key]
    wrong = [key for key in pool if key not in POOLABLE_KEYS]
    if wrong:
        raise UsageError(f"--pool {','.join(wrong)}: a report pools over {', '.join(POOLABLE_KEYS)}")
    if args.out and args.json:
        raise UsageError("--json prints the results files' rows, --out writes the tables: give one of them")
    if args.out and len(args.paths) != 1:
        raise UsageError("--out takes one results folder")
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"no such file or folder: {', '.join(missing)}")
    rows = collect_results(args.paths)
    if not rows:
        raise FileNotFoundError(f"no results files (results*.json) found under {', '.join(args.paths)}")
    check_outputs_apart({"--csv": args.csv}, {f"results file {row['path']}": row["path"] for row in rows})
    rows = pool_configurations(rows, pool)
    if args.csv:
        write_csv(rows, args.csv)
    if args.out:
        from surprisal_cc.experiments.plots import make_all_plots
        from surprisal_cc.experiments.report import write_report

        print(write_report(args.paths[0], args.out, pool=pool))
        for path in make_all_plots(args.paths[0], args.out, pool=pool):
            print(f"wrote {path}")
        return 0
    print(json.dumps(rows, indent=2, default=str) if args.json else format_markdown(rows))
    return 0


def cmd_curves(args, unknown: List[str]) -> int:
    from surprisal_cc.experiments.learning_curves import format_learning_curves
    from surprisal_cc.training.run_folder import read_history

    given = []  # (folder, label, history) of each run, in order
    for spec in args.runs:
        folder, _, label = spec.partition("=")
        if not (Path(folder) / "history.jsonl").exists():
            raise FileNotFoundError(f"{folder}: no history.jsonl (give run folders of the recipes)")
        history = read_history(Path(folder))
        if history and not any(row.get(args.key) is not None for row in history):  # a run in progress may have none
            found = sorted({key for row in history for key, value in row.items() if isinstance(value, (int, float))})
            raise ValueError(f"{Path(folder) / 'history.jsonl'}: no {args.key} in any epoch; give --key one of "
                             f"{', '.join(k for k in found if k != 'epoch')}")
        given.append((folder, label or folder, history))
    # the table has a column per run (a label given twice: told apart by the folder's name); the plot
    # draws one curve per label, the mean over its runs
    labels = [label for _, label, _ in given]
    columns = [label if labels.count(label) == 1 else f"{label} ({Path(folder).name})" for folder, label, _ in given]
    if len(set(columns)) < len(columns):
        raise UsageError("curves: two runs have the same label and folder name: give each its own label")
    print(format_learning_curves({c: folder for c, (folder, _, _) in zip(columns, given)}, key=args.key,
                                 histories={c: history for c, (_, _, history) in zip(columns, given)}))
    if args.plot:
        from surprisal_cc.experiments.plots import plot_validation_curves

        written = plot_validation_curves([folder for folder, _, _ in given], args.plot, key=args.key, labels=labels,
                                         histories=[history for _, _, history in given],
                                         title=args.title or f"Validation {args.key} by epoch")
        print(f"wrote {written}")
    return 0



COMMANDS = {"grid": cmd_grid, "report": cmd_report, "curves": cmd_curves, "analyse": cmd_analyse}


# ----------------------------------------------------------------------------------------------
# options
# ----------------------------------------------------------------------------------------------
def add_parsers(subparsers, command: Optional[str] = None) -> None:
    """The parsers of these commands; ``command`` (the one about to run) is the only tool whose module is
    imported for its options (``grid``), so that ``--help`` and the other commands do not import it."""
    _add_grid_parser(subparsers, command)
    _add_report_parser(subparsers)
    _add_curves_parser(subparsers)
    _add_analyse_parser(subparsers)


def _add_grid_parser(subparsers, command: Optional[str]) -> None:
    """The grid's options, which :mod:`surprisal_cc.experiments.grid` declares (with its description), are added only
    where ``command`` is ``grid``: ``surprisal-cc --help`` and ``transcribe`` do not import the tool."""
    p = subparsers.add_parser("grid", help=HELP["grid"],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    if command == "grid":
        from surprisal_cc.experiments import grid

        p.description = grid.__doc__
        grid.add_arguments(p)


def _add_analyse_parser(subparsers) -> None:
    p = subparsers.add_parser("analyse", help=HELP["analyse"],
                              description="Where is the APC model surprised? Its surprisal on silence vs. speech "
                                          "frames of force-aligned audio (MFA's silence marks are silence), and a "
                                          "routing plot of the first utterance (surprisal_cc.experiments.analysis).")
    p.add_argument("--apc", required=True, help="exported APC model file")
    p.add_argument("--mfa", required=True, help="MFA CSV export with sample-level phone boundaries")
    p.add_argument("--audio-root", required=True, help="folder the CSV's paths are relative to")
    p.add_argument("--max-utterances", type=positive_int, default=None)
    p.add_argument("--cache", help="feature cache folder to reuse surprisal from (e.g. results/MiniLibriSpeech/feature_cache)")
    p.add_argument("--calibration", help="calibration.json of a run: draws its routing in the plot")
    p.add_argument("--plot", help="write a routing plot of the first utterance to this PNG")
    p.add_argument("--json", help="also write the numbers to this file")


def _add_report_parser(subparsers) -> None:
    p = subparsers.add_parser("report", help=HELP["report"])
    p.add_argument("paths", nargs="+")
    p.add_argument("--json", action="store_true",
                   help="print the rows the table is made of, one per results file (every field), as JSON")
    p.add_argument("--csv", help="also write the table as CSV to this file")
    p.add_argument("--out", help="write every paper-style table (Markdown + CSV) and every plot into this "
                                 "folder (from one results folder)")
    p.add_argument("--pool", action="append", default=[], metavar="KEY[,KEY]",
                   help="configuration keys that no longer tell rows apart, of apc, precision, train_labels, "
                        "train_targets, dataset (e.g. apc: seeds trained with an APC file and with its fp16 copy "
                        "form one row, labelled with both fingerprints)")



def _add_curves_parser(subparsers) -> None:
    p = subparsers.add_parser("curves", help=HELP["curves"])
    p.add_argument("runs", nargs="+", metavar="RUN_DIR[=LABEL]", help="recipe run folders (label: column name)")
    p.add_argument("--key", default="PER", help="validation metric of history.jsonl (default: PER)")
    p.add_argument("--plot", help="also draw the curves into this PNG file")
    p.add_argument("--title", help="title of the plot")
