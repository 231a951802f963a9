"""The report of a grid: every table of :mod:`surprisal_cc.experiments.tables` for each dataset of the
results, written as Markdown and CSV into a report folder (:func:`write_report`), and the summary table
that ``surprisal-cc report`` prints (:func:`format_markdown`, :func:`write_csv`).

Typical use::

    rows = collect_results(["results/MiniLibriSpeech/grid"])   # surprisal_cc.training.run_folder: one row per results file
    print(format_markdown(rows))                                # one row per configuration
    text = write_report("results/MiniLibriSpeech/grid", "results/MiniLibriSpeech/report")

:func:`format_markdown`, :func:`write_csv` and :func:`report_tables` take results rows
(:func:`~surprisal_cc.training.run_folder.collect_results`, or aggregated rows).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence, Set, Union

from surprisal_cc.experiments.aggregation import aggregate, ensure_aggregated, pool_configurations
from surprisal_cc.experiments.tables import (Table, table_ablation, table_bias_sweep, table_controllers, table_converged,
                                             table_lambda, table_matched_flops, table_paired, table_precision,
                                             table_stochastic, table_summary)
from surprisal_cc.training.run_folder import PathLike, Row, collect_results

__all__ = ["format_markdown", "write_csv", "report_tables", "write_report", "apc_legend"]


def format_markdown(rows: Sequence[Row]) -> str:
    """Markdown of :func:`table_summary`, one row per configuration (``surprisal-cc report``).

    Returns
    -------
    str
        The table and a note on bold rows and ±.

    Example
    -------
    >>> rows = [{"controller": "surprisal", "seed": 1, "PER": 20.0},
    ...         {"controller": "surprisal", "seed": 2, "PER": 22.0}]
    >>> format_markdown(rows).splitlines()[2]
    '| Surprisal-based controller |  | 21.00% ± 1.41% | – | – | – | – | 2 | – |'
    """
    table = table_summary(rows)
    legend = apc_legend(rows)
    return table.markdown() + ("\nBold rows are Pareto-optimal (no other row has lower PER and FLOPs); ± is the "
                               "sample standard deviation (ddof=1) over the n seeds of a row (none for one seed).\n"
                               + (f"\n{legend}" if legend else ""))


def apc_legend(rows: Sequence[Row]) -> str:
    """What the ``APC <fingerprint>`` of the tables' labels stands for: one line per APC fingerprint
    in ``rows``, with the ``apc_path`` its runs loaded; empty when no run recorded one.

    Example
    -------
    >>> print(apc_legend([{"apc": "27d287a179a6", "apc_path": "apc/big.pt"}, {"apc": None}]), end="")
    APC 27d287a1: weights fingerprint 27d287a179a6, loaded from apc/big.pt
    """
    paths: Dict[str, Set[str]] = {}
    for row in (r for r in rows if r.get("apc")):
        files = paths.setdefault(str(row.get("unpooled", {}).get("apc", row["apc"])), set())  # pool_configurations
        if row.get("apc_path"):
            files.add(str(row["apc_path"]))
    return "".join(f"APC {fingerprint[:8]}: weights fingerprint {fingerprint}"
                   + (f", loaded from {', '.join(sorted(files))}" if files else "") + "\n"
                   for fingerprint, files in sorted(paths.items()))


def write_csv(rows: Sequence[Row], path: PathLike) -> None:
    """CSV of the table ``format_markdown`` prints (raw numbers, one row per configuration).

    Arguments
    ---------
    path : str or pathlib.Path
        Output file (parent folders are created).
    """
    table_summary(rows).write_csv(path)


def report_tables(rows: Sequence[Row]) -> Dict[str, List[Table]]:
    """All non-empty tables of each dataset found in ``rows``.

    Returns
    -------
    dict
        Dataset -> its tables (controllers, paired claims, at matched FLOPs, bf16 against fp32, ablations, stochastic, lambda, bias sweep).

    Example
    -------
    >>> rows = [{"dataset": "Mini", "controller": "surprisal", "seed": 1, "PER": 20.0},
    ...         {"dataset": "Mini", "controller": "big_only", "seed": 1, "PER": 19.0}]
    >>> {dataset: [t.name for t in tables] for dataset, tables in report_tables(rows).items()}
    {'Mini': ['controllers', 'converged', 'paired', 'matched_flops', 'ablation', 'stochastic', 'bias_sweep']}
    """
    agg = ensure_aggregated(rows)
    out = {}
    for dataset in sorted({str(r.get("dataset", "")) for r in agg}):
        tables = [table_controllers(agg, dataset), table_converged(agg, dataset), table_paired(agg, dataset),
                  table_matched_flops(agg, dataset), table_precision(agg, dataset), table_ablation(agg, dataset)]
        tables += [table_ablation(agg, dataset, arch) for arch in
                   sorted({r["architecture"] for r in agg if r.get("dataset") == dataset} - {"paper"})]
        tables += [table_stochastic(agg, dataset), table_lambda(agg, dataset), table_bias_sweep(agg, dataset)]
        out[dataset] = [t for t in tables if t.rows]
    return out


def write_report(results_root: Union[PathLike, Sequence[PathLike]], out_dir: PathLike,
                 pool: Sequence[str] = ()) -> str:
    """Write every table as ``<dataset>_<table>.md`` and ``.csv``, plus ``report.md``, into ``out_dir``.

    The tables of each dataset are those of :func:`report_tables` and ``all_configurations``.

    Arguments
    ---------
    results_root : str or pathlib.Path, or a sequence of them
        Results files, or folders searched recursively.
    out_dir : str or pathlib.Path
        Output folder (created).
    pool : sequence of str
        Configuration keys pooled over (:func:`~surprisal_cc.experiments.aggregation.pool_configurations`).

    Returns
    -------
    str
        The Markdown of all tables with headings (``report.md``), or ``"No results yet.\\n"``.

    Example
    -------
    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     run = Path(folder) / "grid" / "surprisal_seed1"
    ...     run.mkdir(parents=True)
    ...     _ = (run / "results.json").write_text(json.dumps({"dataset": "Mini", "controller": "surprisal",
    ...                                                       "seed": 1, "PER": 20.0}))
    ...     text = write_report(Path(folder) / "grid", Path(folder) / "report")
    ...     written = sorted(p.name for p in (Path(folder) / "report").glob("*.md"))
    >>> text.splitlines()[0], written[:2]
    ('## Mini', ['Mini_ablation.md', 'Mini_all_configurations.md'])
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = collect_results(results_root)
    if not rows:
        return "No results yet.\n"
    agg = aggregate(pool_configurations(rows, pool))
    sections = []
    for dataset, tables in report_tables(agg).items():
        sections.append(f"## {dataset or 'Results'}\n")
        for table in [*tables, table_summary([r for r in agg if r.get("dataset") == dataset])]:
            stem = f"{dataset}_{table.name}" if dataset else table.name
            (out / f"{stem}.md").write_text(f"### {table.title}\n\n{table.markdown()}", encoding="utf-8")
            table.write_csv(out / f"{stem}.csv")
            sections.append(f"### {table.title}\n\n{table.markdown()}")
    text = "\n".join(sections) + ("\nBold rows are Pareto-optimal in PER and average FLOPs per input frame "
                                  "(the paper's grey rows); ± is the sample standard deviation (ddof=1) over the "
                                  "n seeds of a row (none for one seed).\n")
    legend = apc_legend(rows)
    text += f"\n{legend}" if legend else ""
    (out / "report.md").write_text(text, encoding="utf-8")
    return text
