"""The paper's tables built of results rows aggregated over seeds (:mod:`surprisal_cc.experiments.aggregation`),
as Markdown and CSV (:class:`Table`): ``table_summary`` (one row per configuration), ``table_controllers``
(Table 2, plus ACT/PonderNet), ``table_converged`` and ``table_paired`` (the comparison at convergence, and
its seed-paired differences), ``table_precision`` (bf16 against fp32), ``table_ablation`` (Tables 3-7),
``table_stochastic`` (Tables 8/9), ``table_lambda`` (Appendix D), ``table_bias_sweep`` (Appendix B). Bold
rows / ``pareto=True`` are Pareto-optimal in PER and FLOPs, like the paper's grey rows. An aggregated row is
the mean over the n seeds of one configuration, ± the sample standard deviation (ddof=1); a row of one seed
has no ±. Every table shows n. Every ``table_*`` function takes ``rows`` (results rows,
:func:`~surprisal_cc.training.run_folder.collect_results`, or aggregated rows) and, where it has one,
``dataset`` (only that dataset's rows; None: any). The report folder of a grid:
:mod:`surprisal_cc.experiments.report`.
"""
from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from surprisal_cc.experiments.aggregation import (CONTROLLER_ORDER, SORT_ORDER, common_notes, ensure_aggregated,
                                                  matched_flops_difference, paired_difference, pareto_front, select_rows, setup_of, sort_rows,
                                                  without_notes)
from surprisal_cc.training.run_folder import PathLike, Row
from surprisal_cc.experiments.run_labels import CONFIG_KEYS, CONTROLLER_NAMES, budget_name, config_of, model_name, setup_notes

DEFAULT_PENALTY = 0.001

__all__ = ["Table", "table_summary", "table_controllers", "table_converged", "short_label", "reference_profile_rows", "surprisal_sweep", "table_paired", "table_matched_flops",
           "table_precision", "table_ablation", "table_stochastic", "table_lambda", "table_bias_sweep"]


Column = Tuple[str, Callable[[Row], str]]


def _fmt(value: Optional[float], spec: str = ".2f", suffix: str = "") -> str:
    """``value`` formatted with ``spec`` and ``suffix``; a dash for None."""
    return "–" if value is None else f"{value:{spec}}{suffix}"


def _mean_pm(key: str, suffix: str = "") -> Callable[[Row], str]:
    """``mean ± std``, or the mean alone where there is no std (one seed)."""
    def cell(r: Row) -> str:
        if r.get(key) is None:
            return "–"
        std = r.get(f"{key}_std")
        return _fmt(r[key], ".2f", suffix) + ("" if std is None else f" ± {_fmt(std, '.2f', suffix)}")
    return cell


def _flag(key: str) -> Callable[[Row], str]:
    """Cell formatter: a tick where the row's ``key`` is true, else a cross."""
    return lambda r: "✓" if r.get(key) else "✗"


COL_MODEL: Column = ("Model", lambda r: r["model"])
COL_PER: Column = ("PER", _mean_pm("PER", "%"))
COL_FLOPS: Column = ("Avg. FLOPs per input", lambda r: _fmt(r.get("flops_M"), ".2f", "M"))
COL_PBIG: Column = ("p_big", lambda r: _fmt(r.get("p_big_mean"), ".3f"))
COL_BIG: Column = ("Big fraction", lambda r: _fmt(r.get("big_fraction"), ".3f"))
COL_STEPS: Column = ("Mean steps", lambda r: _fmt(r.get("mean_steps"), ".2f"))
COL_SEEDS: Column = ("n (seeds)", lambda r: str(r["n_seeds"]))
COL_EPOCHS: Column = ("Epochs", lambda r: "–" if r.get("epochs") is None else str(r["epochs"]))
def _dev_cell(r: Row) -> str:
    """The development split's PER, with its own n where fewer seeds than the row's have one."""
    cell = _mean_pm("dev_PER", "%")(r)
    n = r.get("dev_n")
    return cell + (f" (n = {n})" if r.get("dev_PER") is not None and n is not None and n < r["n_seeds"] else "")


COL_DEV: Column = ("mfa-dev PER", _dev_cell)


def with_dev(columns: List[Column], rows: Sequence[Row]) -> List[Column]:
    """``columns`` with the development split's PER after the test PER, where a row has one.

    Example
    -------
    >>> [c[0] for c in with_dev([COL_MODEL, COL_PER], [{"dev_PER": 30.0}])], len(with_dev([COL_PER], [{}]))
    (['Model', 'PER', 'mfa-dev PER'], 1)
    """
    if not any(r.get("dev_PER") is not None for r in rows):
        return list(columns)
    at = columns.index(COL_PER) + 1 if COL_PER in columns else len(columns)
    return [*columns[:at], COL_DEV, *columns[at:]]
CSV_KEYS = ("model", "PER", "PER_std", "flops_M", "p_big_mean", "big_fraction", "mean_steps", "n_seeds", "epochs")


@dataclass
class Table:
    """A results table of aggregated rows, written as Markdown and CSV.

    Arguments
    ---------
    name : str
        File stem of the table.
    title : str
        Heading of the table.
    rows : list of dict
        Aggregated rows (:func:`~surprisal_cc.experiments.aggregation.aggregate`).
    columns : list of (str, callable)
        Markdown columns: header and row -> cell text.
    csv_keys : sequence of str
        Row keys written, unformatted, to the CSV file.
    pareto : set of int
        Indices of the rows shown in bold; empty: the Pareto front in PER and FLOPs.

    Example
    -------
    >>> rows = [{"model": "a", "PER": 20.0, "PER_std": None, "flops_per_frame": 1.0},
    ...         {"model": "b", "PER": 25.0, "PER_std": 1.0, "flops_per_frame": 2.0}]
    >>> table = Table("demo", "Demo", rows, [COL_MODEL, COL_PER])
    >>> print(table.markdown(), end="")
    | Model | PER |
    |---|---|
    | **a** | **20.00%** |
    | b | 25.00% ± 1.00% |
    """

    name: str
    title: str
    rows: List[Row]
    columns: List[Column]
    csv_keys: Sequence[str] = CSV_KEYS
    pareto: Set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        """Fill ``pareto`` with the Pareto front when none is given."""
        if not self.pareto:
            self.pareto = pareto_front(self.rows)

    def common_notes(self) -> List[str]:
        """The setup notes every row shares (:func:`~surprisal_cc.experiments.aggregation.common_notes`), which
        :meth:`markdown` says once, under the table, instead of in every label."""
        return common_notes(self.rows)

    def markdown(self) -> str:
        """Pipe table; Pareto-optimal rows in bold; the notes every row shares said once, under it.

        Example
        -------
        >>> rows = [{"model": "a [fp32 training, masked inputs]", "notes": ["fp32 training", "masked inputs"]},
        ...         {"model": "b [fp32 training]", "notes": ["fp32 training"]}]
        >>> print(Table("demo", "Demo", rows, [COL_MODEL], pareto={0}).markdown(), end="")
        | Model |
        |---|
        | **a [masked inputs]** |
        | b |
        <BLANKLINE>
        Every row: fp32 training.
        """
        common = self.common_notes()
        lines = ["| " + " | ".join(h for h, _ in self.columns) + " |", "|" + "---|" * len(self.columns)]
        for i, row in enumerate(self.rows):
            cells = [fmt(without_notes(row, common)) for _, fmt in self.columns]
            if i in self.pareto:
                cells = [f"**{c}**" if c else c for c in cells]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n" + (f"\nEvery row: {', '.join(common)}.\n" if common else "")

    def write_csv(self, path: PathLike) -> None:
        """Raw (unformatted) values of ``csv_keys`` plus a ``pareto`` column."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow([*self.csv_keys, "pareto"])
            for i, row in enumerate(self.rows):
                writer.writerow([*("" if row.get(k) is None else row[k] for k in self.csv_keys), i in self.pareto])


def _budget_rank(row: Row) -> Tuple[bool, float, str]:
    """Sort key: no test-time FLOPs budget first, then larger budgets, the validation split's first."""
    fraction = row.get("test_flops_fraction")
    return fraction is not None, -(fraction or 0.0), str(row.get("test_budget_split") != "valid")


def table_summary(rows: Sequence[Row]) -> Table:
    """Every configuration: model, PER mean ± std, FLOPs/frame, p_big, big fraction, seeds, epochs.

    Table ``all_configurations``, of all the rows (no ``dataset`` selection).
    """
    agg = ensure_aggregated(rows)
    return Table("all_configurations", "All configurations", agg,
                 [COL_MODEL, ("Dataset", lambda r: str(r.get("dataset", ""))), COL_PER, COL_FLOPS, COL_PBIG,
                  COL_BIG, COL_STEPS, COL_SEEDS, COL_EPOCHS], csv_keys=("dataset", *CSV_KEYS))


def _default_penalty(row: Row) -> bool:
    """Whether a row's learned-controller penalty is the paper's (or unset)."""
    return row.get("penalty") is None or math.isclose(row["penalty"], DEFAULT_PENALTY)


def table_controllers(rows: Sequence[Row], dataset: Optional[str] = None) -> Table:
    """Paper Table 2: controllers (learned at lambda=0.001 when present) plus ACT, PonderNet and any
    other encoder; controllers and encoders not in the paper follow its own, by name.

    Table ``controllers``.

    Example
    -------
    >>> rows = [{"controller": "surprisal", "seed": 1, "PER": 20.0, "flops_per_frame": 3e6},
    ...         {"controller": "big_only", "seed": 1, "PER": 19.0, "flops_per_frame": 6e6},
    ...         {"controller": "random", "seed": 1, "PER": 24.0, "flops_per_frame": 4.5e6}]
    >>> table = table_controllers(rows)
    >>> [r["model"] for r in table.rows], sorted(table.pareto)
    (['Random controller', 'Surprisal-based controller', 'Big network only'], [1, 2])
    """
    agg = ensure_aggregated(rows)
    picked = select_rows(agg, dataset, controller=None, test_flops_fraction=None)
    learned = [r for r in picked if r["controller"] == "learned"]
    default_learned = [r for r in learned if _default_penalty(r)]
    picked = [r for r in picked if r["controller"] != "learned" or r in (default_learned or learned)]
    adaptive = [r for r in select_rows(agg, dataset, encoder=None) if r.get("encoder") != "conditional"]
    picked = sorted(picked, key=_budget_rank)  # each model's trained operating point before its budgets
    table_rows = (sort_rows(picked, "controller", order=SORT_ORDER)
                  + sort_rows(adaptive, "encoder", "act_ponder_cost", "pondernet_beta", order=SORT_ORDER))
    return Table("controllers", "Controllers (paper Table 2) and adaptive-depth baselines", table_rows,
                 with_dev([COL_MODEL, COL_PER, COL_FLOPS, COL_PBIG, COL_BIG, COL_STEPS, COL_SEEDS, COL_EPOCHS],
                          table_rows))


# the paper's claims, as pairs (controller, reference): surprisal keeps big-only accuracy at fewer FLOPs
# and beats random routing
PAIRED_COMPARISONS: Tuple[Tuple[str, str], ...] = (("surprisal", "big_only"), ("surprisal", "random"),
                                                   ("random", "big_only"), ("learned", "big_only"),
                                                   ("learned", "surprisal"))


SHORT_NAMES = {"surprisal": "surprisal", "random": "random", "big_only": "big-only", "small_only": "small-only",
               "learned": "learned", "act": "ACT", "pondernet": "PonderNet"}
# what one training profile shares: the rows of table ``converged`` agree on these with the reference
PROFILE_KEYS = ("dataset", "number_of_epochs", "train_labels", "train_targets", "precision", "augment",
                "speed_perturb", "architecture", "apc")


def short_label(config: Row) -> str:
    """Short name of a configuration within one training profile: the model and what departs from its
    default (the profile itself, labels, epochs and precision, is left out).

    Example
    -------
    >>> short_label({"controller": "big_only", "number_of_epochs": 30, "precision": "fp32"})
    'big-only'
    >>> short_label({"encoder": "pondernet", "controller": "surprisal"})
    'PonderNet'
    >>> short_label({"encoder": "early_exit", "controller": "surprisal", "model_options": "k=3"})
    'early_exit (k=3)'
    >>> short_label({"controller": "surprisal", "input_features": "fbank", "controller_at_train": False})
    'surprisal (fbank input, random in training)'
    >>> short_label({"controller": "learned", "penalty": 0.001, "penalty_utterances": None})
    "learned (authors' λ sum)"
    >>> short_label({"controller": "surprisal", "test_flops_fraction": 0.9})
    'surprisal (test budget 0.9x big-only)'
    """
    config = config_of(config)
    encoder = config["encoder"]
    model = encoder if encoder != "conditional" else config["controller"]
    name = SHORT_NAMES.get(model, str(model))
    if config.get("model_options"):  # an encoder or controller added to the toolkit: its settings
        name += f" ({config['model_options']})"
    notes = [text for key, text in (("controller_at_train", "random in training"),
                                    ("controller_at_test", "random at test"),
                                    ("train_stochastic", "deterministic training"),
                                    ("test_stochastic", "deterministic test")) if config[key] is False]
    if config["input_features"] != "apc":
        notes.insert(0, f"{config['input_features']} input")
    if config["controller"] == "learned" and encoder == "conditional":
        if config["penalty"] is not None and not math.isclose(config["penalty"], DEFAULT_PENALTY):
            notes.append(f"λ={config['penalty']:g}")
        if config["penalty"] is not None and config["penalty_utterances"] is None:
            notes.append("authors' λ sum")
        if config["learned_estimator"] == "routed":
            notes.append("routed estimator")
    if config["test_bias_shift"]:
        notes.append(f"bias {config['test_bias_shift']:+g}")
    if config["test_flops_fraction"] is not None:
        notes.append(budget_name(config["test_flops_fraction"], config["test_budget_split"]))
    return name + (f" ({', '.join(notes)})" if notes else "")


def _paired_cell(reference: Optional[Row]) -> Callable[[Row], str]:
    """Cell: PER of the row minus the reference's, paired by seed (mean ± sample std, n)."""
    def cell(row: Row) -> str:
        if reference is None or config_of(row) == config_of(reference):
            return "–"
        diff = paired_difference(row, reference)
        if diff is None:
            return "–"
        std = "" if diff["delta_PER_std"] is None else f" ± {diff['delta_PER_std']:.2f}"
        return f"{diff['delta_PER']:+.2f}{std} (n = {diff['n_seeds']})"
    return cell


def table_converged(rows: Sequence[Row], dataset: Optional[str] = None) -> Table:
    """Every row of the reference training profile, with short labels and paired differences.

    The reference profile is that of the big-only model with the most epochs (labels, training
    targets, precision, augmentation, speeds, epochs, architecture, APC), then the most seeds, then
    the most configurations trained in its profile; every configuration trained in
    it (controllers, ACT, PonderNet, other inputs or test conditions) is a row, labelled by
    :func:`short_label`, with PER mean ± sample std over seeds, FLOPs per frame, mean steps or big
    fraction, and its PER minus surprisal's and minus big-only's, paired by seed. Table ``converged``.

    Example
    -------
    >>> rows = [{"controller": c, "encoder": e, "seed": s, "PER": per, "flops_per_frame": f,
    ...          "number_of_epochs": n} for c, e, f, n, pers in
    ...         [("surprisal", "conditional", 6.9e6, 30, (29.5, 29.2, 29.6)),
    ...          ("big_only", "conditional", 7.5e6, 30, (29.3, 29.2, 29.4)),
    ...          ("surprisal", "act", 6.5e6, 30, (30.0, 29.9, 30.4)),
    ...          ("big_only", "conditional", 7.5e6, 14, (33.0,))] for s, per in zip((1, 2, 3), pers)]
    >>> print(table_converged(rows).markdown(), end="")
    | Model | PER | FLOPs per frame | Mean steps | Big fraction | n (seeds) | ΔPER vs surprisal | ΔPER vs big-only |
    |---|---|---|---|---|---|---|---|
    | **big-only** | **29.30% ± 0.10%** | **7.50M** | **–** | **–** | **3** | **-0.13 ± 0.12 (n = 3)** | **–** |
    | **surprisal** | **29.43% ± 0.21%** | **6.90M** | **–** | **–** | **3** | **–** | **+0.13 ± 0.12 (n = 3)** |
    | **ACT** | **30.10% ± 0.26%** | **6.50M** | **–** | **–** | **3** | **+0.67 ± 0.15 (n = 3)** | **+0.80 ± 0.17 (n = 3)** |
    """
    mine = reference_profile_rows(rows, dataset)
    if not mine:
        return Table("converged", "Converged profile", [], [])
    picked = [r for r in mine if not r.get("test_bias_shift")]
    base = select_rows(picked, None)
    reference = {c: next((r for r in base if r["controller"] == c), None) for c in ("surprisal", "big_only")}
    table_rows = [{**r, "model": short_label(r)} for r in
                  sorted(picked, key=lambda r: (-(r.get("flops_per_frame") or 0.0), short_label(r)))]
    epochs = _profile_epochs(mine)
    title = "Every configuration of the reference training profile" + (f" ({epochs} epochs)" if epochs else "")
    return Table("converged", title, table_rows,
                 with_dev([COL_MODEL, COL_PER, ("FLOPs per frame", COL_FLOPS[1]), COL_STEPS, COL_BIG, COL_SEEDS,
                           ("ΔPER vs surprisal", _paired_cell(reference["surprisal"])),
                           ("ΔPER vs big-only", _paired_cell(reference["big_only"]))], table_rows))


def reference_profile_rows(rows: Sequence[Row], dataset: Optional[str] = None) -> List[Row]:
    """The aggregated rows of the reference training profile (``PROFILE_KEYS``): that of the big-only model
    with the most epochs, then the most seeds, then the profile the most configurations were trained in;
    a tie left after that goes to the first profile in sorted order, so the input's order never decides.
    Empty without a big-only row."""
    mine = [r for r in ensure_aggregated(rows) if dataset is None or r.get("dataset") == dataset]

    def profile_of(row: Row) -> Dict[str, Any]:
        return {key: row.get(key) for key in PROFILE_KEYS}

    def configurations(row: Row) -> int:
        return sum(profile_of(r) == profile_of(row) for r in mine)

    references = select_rows(mine, None, controller="big_only")
    if not references:
        return []
    best = max(sorted(references, key=lambda r: repr(sorted(profile_of(r).items()))),
               key=lambda r: (r.get("number_of_epochs") or r.get("epochs") or 0, r["n_seeds"], configurations(r)))
    return [r for r in mine if profile_of(r) == profile_of(best)]


def _profile_epochs(profile_rows: Sequence[Row]) -> Optional[int]:
    """The epochs of a profile (:func:`reference_profile_rows`): its ``number_of_epochs``, else the most
    ``epochs`` its big-only row reached (the row that chose the profile)."""
    big_only = [r.get("epochs") or 0 for r in select_rows(profile_rows, None, controller="big_only")]
    return profile_rows[0].get("number_of_epochs") or max(big_only, default=0) or None


# the test-time settings that move one trained model along its FLOPs axis
OPERATING_POINT_KEYS = ("test_bias_shift", "test_flops_fraction", "test_budget_split")


def surprisal_sweep(rows: Sequence[Row], dataset: Optional[str] = None) -> List[Row]:
    """The operating points of the surprisal model of the reference training profile
    (:func:`reference_profile_rows`): its trained point, bias shifts and test budgets (the rows that
    differ from it only by ``OPERATING_POINT_KEYS``), in order of FLOPs; empty without one."""
    mine = reference_profile_rows(rows, dataset)
    trained = [r for r in select_rows(mine, None, controller="surprisal")
               if not any(r.get(k) is not None and r.get(k) != 0.0 for k in OPERATING_POINT_KEYS)]
    if not trained:
        return []

    def model_of(row: Row) -> Dict[str, Any]:
        return {k: v for k, v in config_of(row).items() if k not in OPERATING_POINT_KEYS}

    return sorted((r for r in mine if model_of(r) == model_of(trained[0])),
                  key=lambda r: r.get("flops_per_frame") or 0.0)


def table_matched_flops(rows: Sequence[Row], dataset: Optional[str] = None) -> Table:
    """Every configuration of the reference training profile against the surprisal model at the same
    FLOPs, paired by seed: the surprisal runs' PER at the row's FLOPs, interpolated along each seed's
    operating points (its trained point, bias shifts and test budgets; never extrapolated;
    :func:`~surprisal_cc.experiments.aggregation.matched_flops_difference`). A row outside the sweep's
    FLOPs says so. Table ``matched_flops``; ΔPER is the row's PER minus surprisal's, in points.

    Example
    -------
    >>> rows = [{"controller": c, "encoder": e, "seed": s, "PER": per, "flops_per_frame": f, "test_bias_shift": b,
    ...          "number_of_epochs": 30} for c, e, b, f, pers in
    ...         [("surprisal", "conditional", -1.0, 6.4e6, (30.5, 30.3)), ("surprisal", "conditional", 0.0, 6.9e6,
    ...          (29.5, 29.4)), ("big_only", "conditional", 0.0, 7.5e6, (29.3, 29.2)),
    ...          ("surprisal", "act", 0.0, 6.6e6, (30.0, 30.2))] for s, per in zip((1, 2), pers)]
    >>> print(table_matched_flops(rows).markdown(), end="")
    | Comparison | ΔPER (points) | 95 % CI | n (seeds) | FLOPs | Verdict |
    |---|---|---|---|---|---|
    | big-only − surprisal at its FLOPs | outside surprisal's sweep (6.40M–6.90M) | – | 0 | 7.50M | – |
    | ACT − surprisal at its FLOPs | +0.08 ± 0.25 | [-2.21, +2.37] | 2 | 6.60M | within noise |
    """
    mine = reference_profile_rows(rows, dataset)
    sweep = surprisal_sweep(mine)
    title = "At matched FLOPs: each configuration minus the surprisal model along its sweep, paired by seed"
    if not sweep:
        return Table("matched_flops", title, [], [])
    span = [f for r in sweep for f in (r.get("flops_by_seed") or {}).values()]
    table_rows = []
    for row in sorted((r for r in mine if r not in sweep), key=lambda r: (-(r.get("flops_per_frame") or 0.0),
                                                                          short_label(r))):
        diff = matched_flops_difference(row, sweep)
        name = f"{short_label(row)} − surprisal at its FLOPs"
        if diff is None:
            outside = f"outside surprisal's sweep ({min(span) / 1e6:.2f}M–{max(span) / 1e6:.2f}M)" if span else "no sweep"
            diff = {"delta_PER": None, "delta_PER_std": None, "ci95": None, "n_seeds": 0, "verdict": "–",
                    "seeds_outside": sorted(row.get("PER_by_seed") or {}, key=str), "note": outside}
        table_rows.append({"model": name, "flops_per_frame": row.get("flops_per_frame"), **diff})
    return Table("matched_flops", title, table_rows,
                 [("Comparison", lambda r: r["model"]), *_matched_columns()],
                 csv_keys=("model", "delta_PER", "delta_PER_std", "ci95", "n_seeds", "flops_per_frame", "verdict",
                           "seeds_outside"))


def _matched_columns() -> List[Column]:
    """The columns of table ``matched_flops`` after its first: :func:`_paired_columns` with the row's
    FLOPs in place of the FLOPs change (the FLOPs are matched), and the reason where none was matched."""
    paired = dict(_paired_columns("ΔPER (points)"))
    return [("ΔPER (points)", lambda r: r["note"] if r["delta_PER"] is None else paired["ΔPER (points)"](r)),
            ("95 % CI", paired["95 % CI"]), ("n (seeds)", paired["n (seeds)"]),
            ("FLOPs", lambda r: _fmt(None if r["flops_per_frame"] is None else r["flops_per_frame"] / 1e6, ".2f", "M")),
            ("Verdict", paired["Verdict"])]


def table_paired(rows: Sequence[Row], dataset: Optional[str] = None) -> Table:
    """The paper's claims tested seed by seed: each pair of ``PAIRED_COMPARISONS`` whose two controllers were
    trained in the same configuration (the same labels, precision, epochs, augmentation...).

    Table ``paired``. PER differences are in points, ``a − b`` over the seeds both have.

    Example
    -------
    >>> rows = [{"controller": c, "seed": s, "PER": per, "flops_per_frame": f, "epochs": 30} for c, f, pers in
    ...         [("surprisal", 6.9e6, (33.5, 33.0, 34.1)), ("big_only", 7.5e6, (32.6, 33.2, 33.0)),
    ...          ("random", 6.6e6, (33.6, 34.0, 34.4))] for s, per in zip((1, 2, 3), pers)]
    >>> print(table_paired(rows).markdown(), end="")
    | Comparison | ΔPER (points) | 95 % CI | n (seeds) | FLOPs | Verdict | Epochs |
    |---|---|---|---|---|---|---|
    | Surprisal-based controller − Big network only | +0.60 ± 0.70 | [-1.14, +2.34] | 3 | -8.0% | within noise | 30 |
    | Surprisal-based controller − Random controller | -0.47 ± 0.47 | [-1.64, +0.71] | 3 | +4.5% | within noise | 30 |
    | Random controller − Big network only | +1.07 ± 0.31 | [+0.31, +1.83] | 3 | -12.0% | higher PER | 30 |

    A model tested under a FLOPs budget (``test_flops_fraction``) is compared with the references
    at their trained operating points:

    >>> rows += [{"controller": "surprisal", "test_flops_fraction": 0.9, "test_budget_split": "valid", "seed": s,
    ...           "PER": per, "flops_per_frame": 6.75e6} for s, per in zip((1, 2, 3), (33.7, 33.4, 34.2))]
    >>> [r["model"] for r in table_paired(rows).rows][:2]
    ['Surprisal-based controller − Big network only', 'Surprisal-based controller (test budget 0.9x big-only) − Big network only']
    """
    agg = ensure_aggregated(rows)
    # the learned controller's own settings (its penalty's normalisation, its estimator) tell its
    # variants apart within a group, not the group: each variant is compared with the same references
    learned_keys = ("penalty", "penalty_utterances", "learned_estimator")
    groups: Dict[Tuple, Dict[Tuple[str, Tuple, Tuple], Row]] = {}  # group -> (controller, variant, budget) -> row
    for row in select_rows(agg, dataset, controller=CONTROLLER_ORDER, test_flops_fraction=None):
        if row["controller"] == "learned" and not _default_penalty(row):
            continue
        key = tuple(row.get(k) for k in CONFIG_KEYS if k not in ("controller", *learned_keys,
                                                               "test_flops_fraction", "test_budget_split"))
        variant = tuple(str(row.get(k)) for k in learned_keys)
        budget = (row.get("test_flops_fraction"), row.get("test_budget_split"))
        groups.setdefault(key, {})[(row["controller"], variant, budget)] = row
    table_rows = []
    for by_model in groups.values():
        budgets = sorted({budget for _, _, budget in by_model},
                         key=lambda b: _budget_rank({"test_flops_fraction": b[0], "test_budget_split": b[1]}))
        for (first, second), budget in itertools.product(PAIRED_COMPARISONS, budgets):
            # a model tested under a FLOPs budget against the reference at its trained operating point
            pairs = [(a, b) for (c, _, at), a in sorted(by_model.items(), key=lambda item: item[0][1])
                     if c == first and at == budget
                     for (d, _, reference_at), b in by_model.items() if d == second and reference_at == (None, None)]
            for a, b in pairs:
                table_rows += _paired_row(a, b, second, budget)
    return Table("paired", "Paired by seed: the paper's claims (PER difference a − b in points, 95 % t interval)",
                 table_rows, [("Comparison", lambda r: r["model"]), *_paired_columns("ΔPER (points)"), COL_EPOCHS],
                 csv_keys=(*PAIRED_CSV_KEYS, "epochs"))


def _paired_row(a: Row, b: Row, second: str, budget: Tuple) -> List[Row]:
    """The row of table ``paired`` for ``a`` − ``b`` (``b`` the ``second`` controller at its trained
    operating point, ``a`` tested under ``budget``), or none without a common seed."""
    diff = paired_difference(a, b)
    if diff is None:
        return []
    config = {**config_of(a), "test_flops_fraction": None, "test_budget_split": None}
    notes = model_name({**config, "controller": "big_only"})[len(CONTROLLER_NAMES["big_only"]):]
    name = model_name(config)[:-len(notes) or None]
    name += f" ({budget_name(*budget)})" if budget[0] is not None else ""
    return [{"model": name + " − " + CONTROLLER_NAMES[second] + notes, "notes": setup_notes(config),
             "epochs": a.get("epochs"), **diff}]


PAIRED_CSV_KEYS = ("model", "delta_PER", "delta_PER_std", "ci95", "n_seeds", "flops_change", "verdict")


def _paired_columns(delta_title: str) -> List[Tuple[str, Callable[[Row], str]]]:
    """The columns of a table of :func:`paired_difference` rows after its first."""
    def ci(r: Row) -> str:
        if r["ci95"] is None:
            return "–"
        return f"[{r['delta_PER'] - r['ci95']:+.2f}, {r['delta_PER'] + r['ci95']:+.2f}]"

    def delta(r: Row) -> str:
        return f"{r['delta_PER']:+.2f}" + ("" if r["delta_PER_std"] is None else f" ± {r['delta_PER_std']:.2f}")

    return [(delta_title, delta), ("95 % CI", ci), ("n (seeds)", lambda r: str(r["n_seeds"])),
            ("FLOPs", lambda r: _fmt(None if r["flops_change"] is None else 100 * r["flops_change"], "+.1f", "%")),
            ("Verdict", lambda r: r["verdict"])]


def table_precision(rows: Sequence[Row], dataset: Optional[str] = None) -> Table:
    """bf16 autocast against fp32 training: each configuration trained in both precisions, the test PER of
    the bf16 runs minus that of the fp32 runs, paired by seed.

    Table ``precision``.

    Example
    -------
    >>> rows = [{"controller": "surprisal", "seed": 1, "precision": p, "PER": per, "flops_per_frame": 6.9e6}
    ...         for p, per in (("fp32", 29.2), ("bf16", 29.5))]
    >>> print(table_precision(rows).markdown(), end="")
    | Model | ΔPER bf16 − fp32 (points) | 95 % CI | n (seeds) | FLOPs | Verdict |
    |---|---|---|---|---|---|
    | Surprisal-based controller | +0.30 | – | 1 | +0.0% | one seed |
    """
    groups: Dict[Tuple, Dict[Any, Row]] = {}
    for row in select_rows(ensure_aggregated(rows), dataset):
        groups.setdefault(tuple(row.get(k) for k in CONFIG_KEYS if k != "precision"), {})[row.get("precision")] = row
    table_rows = []
    for by_precision in groups.values():
        diff = (paired_difference(by_precision["bf16"], by_precision["fp32"])
                if "bf16" in by_precision and "fp32" in by_precision else None)
        if diff is not None:
            config = {**config_of(by_precision["fp32"]), "precision": None}
            table_rows.append({"model": model_name(config), "notes": setup_notes(config), **diff})
    return Table("precision", "bf16 autocast against fp32 training (test PER difference bf16 − fp32 in points, "
                 "paired by seed)", table_rows,
                 [("Model", lambda r: r["model"]), *_paired_columns("ΔPER bf16 − fp32 (points)")],
                 csv_keys=PAIRED_CSV_KEYS)


def table_ablation(rows: Sequence[Row], dataset: Optional[str] = None, architecture: str = "paper") -> Table:
    """Paper Tables 3/4 (Appendix A Tables 5-7 for other architectures): the surprisal ablation.

    Table ``ablation`` (``ablation_<architecture>`` for the others). Rows: AR features x
    surprisal during training x surprisal during testing, then the small-only and big-only rows.
    The random controller's runs are rows without surprisal in training or testing (the paper's
    ✗/✗ rows are its random baseline), their Setup cell saying so.

    Arguments
    ---------
    architecture : str
        ``paper``, ``model1``, ``model2`` or ``model3``.

    Example
    -------
    >>> rows = [{"controller": c, "seed": 1, "PER": p, "flops_per_frame": f, "epochs": 30}
    ...         for c, p, f in (("surprisal", 29.4, 6.9e6), ("random", 29.7, 6.6e6), ("big_only", 29.3, 7.5e6))]
    >>> print(table_ablation(rows).markdown(), end="")  # doctest: +NORMALIZE_WHITESPACE
    | AR features? | Surprisal during training? | Surprisal during testing? | Setup | PER | Avg. FLOPs per input | n (seeds) | Epochs |
    |---|---|---|---|---|---|---|---|
    | **✓** | **✗** | **✗** | **random controller** | **29.70%** | **6.60M** | **1** | **30** |
    | **✓** | **✓** | **✓** |  | **29.40%** | **6.90M** | **1** | **30** |
    | **Big network only** |  |  |  | **29.30%** | **7.50M** | **1** | **30** |
    """
    agg = ensure_aggregated(rows)
    flags = ("input_features", "controller_at_train", "controller_at_test")
    ablated = select_rows(agg, dataset, architecture=architecture, controller="surprisal",
                          input_features=None, controller_at_train=None, controller_at_test=None)
    random = [{**r, "controller_at_train": False, "controller_at_test": False}
              for r in select_rows(agg, dataset, architecture=architecture, controller="random", input_features=None)]
    baselines = select_rows(agg, dataset, architecture=architecture, controller=("small_only", "big_only"))
    routed = ("surprisal", "random")
    table_rows = (sort_rows(ablated + random, *flags, "controller", "epochs",
                          order={"input_features": ("fbank", "apc"), "controller_at_train": (False, True),
                                 "controller_at_test": (False, True), "controller": ("random", "surprisal")})
                  + sort_rows(baselines, "controller", "epochs", order={"controller": ("small_only", "big_only")}))

    def flag(key: str) -> Callable[[Row], str]:
        return lambda r: "" if r["controller"] not in routed else _flag(key)(r)

    def setup(r: Row) -> str:
        if r["controller"] not in routed:
            return ""
        return ", ".join([*(["random controller"] if r["controller"] == "random" else []),
                          *setup_notes(r, omit=flags)])
    name = "ablation" if architecture == "paper" else f"ablation_{architecture}"
    title = "Ablation (paper Tables 3/4)" if architecture == "paper" else f"Ablation, {architecture} (Appendix A)"
    return Table(name, title, table_rows,
                 [("AR features?", lambda r: (r["model"] if r["controller"] not in routed
                                              else "✓" if r["input_features"] == "apc" else "✗")),
                  ("Surprisal during training?", flag("controller_at_train")),
                  ("Surprisal during testing?", flag("controller_at_test")),
                  ("Setup", setup), COL_PER, COL_FLOPS, COL_SEEDS, COL_EPOCHS],
                 csv_keys=("model", *flags, *CSV_KEYS[1:]))


def table_stochastic(rows: Sequence[Row], dataset: Optional[str] = None) -> Table:
    """Paper Tables 8/9: stochastic vs deterministic execution at training and test time.

    Table ``stochastic``.
    """
    agg = ensure_aggregated(rows)
    flags = ("train_stochastic", "test_stochastic")
    table_rows = sort_rows(select_rows(agg, dataset, controller="surprisal", train_stochastic=None, test_stochastic=None),
                         *flags, "epochs", order={k: (False, True) for k in flags})
    return Table("stochastic", "Deterministic vs stochastic execution (paper Tables 8/9)", table_rows,
                 [("Stochastic during training?", _flag("train_stochastic")),
                  ("Stochastic during testing?", _flag("test_stochastic")),
                  ("Setup", lambda r: ", ".join(setup_notes(r, omit=flags))),
                  ("Train loss", _mean_pm("train_loss")), ("Test loss", _mean_pm("test_loss")),
                  ("Test PER", COL_PER[1]), COL_FLOPS, COL_SEEDS, COL_EPOCHS],
                 csv_keys=(*flags, "train_loss", "train_loss_std", "test_loss", "test_loss_std", *CSV_KEYS[1:]))


def table_lambda(rows: Sequence[Row], dataset: Optional[str] = None) -> Table:
    """Appendix D: learned controller, PER and FLOPs against the penalty weight lambda.

    Table ``lambda``, largest lambda first.
    """
    agg = ensure_aggregated(rows)
    table_rows = sorted(select_rows(agg, dataset, controller="learned"),
                        key=lambda r: -(r["penalty"] if r.get("penalty") is not None else math.inf))
    return Table("lambda", "Learned controller: penalty weight λ (Appendix D)", table_rows,
                 [("λ", lambda r: _fmt(r.get("penalty"), "g")), ("Penalty", _penalty_form), COL_PER, COL_FLOPS,
                  COL_PBIG, COL_BIG, COL_SEEDS],
                 csv_keys=("penalty", "penalty_utterances", *CSV_KEYS[1:]))


def _penalty_form(row: Row) -> str:
    """How the learned controller's penalty is normalised: averaged over utterances (λ × that many
    utterances per batch) or summed over a batch's frames (the authors' form)."""
    utterances = row.get("penalty_utterances")
    return "summed over a batch's frames" if utterances is None else f"mean over utterances × {utterances}"


def table_bias_sweep(rows: Sequence[Row], dataset: Optional[str] = None) -> Table:
    """Appendix B: a controller's bias shifted at test time; the surprisal controller's rows, then
    those of any other controller evaluated at a shift (its name leads the setup).

    Table ``bias_sweep``: the rows of one model (controller, setup and epochs) together, by increasing shift.
    """
    agg = ensure_aggregated(rows)
    candidates = [r for r in select_rows(agg, dataset, controller=None, test_bias_shift=None)
                  if r.get("controller") not in ("big_only", "small_only")]
    swept = {r.get("controller") for r in candidates if float(r.get("test_bias_shift") or 0.0) != 0.0}
    def order(row: Row) -> Tuple:
        notes, epochs = setup_of(row, "test_bias_shift")
        return row.get("controller") != "surprisal", str(row.get("controller")), notes, epochs or 0, \
            row["test_bias_shift"]
    def setup(row: Row) -> str:
        name = [] if row.get("controller") == "surprisal" else [CONTROLLER_NAMES.get(row.get("controller"),
                                                                                     str(row.get("controller")))]
        return ", ".join(name + list(setup_of(row, "test_bias_shift")[0]))
    table_rows = sorted((r for r in candidates if r.get("controller") == "surprisal" or r.get("controller") in swept),
                        key=order)
    return Table("bias_sweep", "Controller bias shift at test time (Appendix B)", table_rows,
                 [("Setup", setup), COL_EPOCHS, ("Bias shift", lambda r: f"{r['test_bias_shift']:+g}"), COL_PER,
                  COL_FLOPS, COL_PBIG, COL_BIG, COL_SEEDS], csv_keys=("model", "test_bias_shift", *CSV_KEYS[1:]))
