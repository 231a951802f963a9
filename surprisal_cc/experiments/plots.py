"""Figures of the results, as small PNGs (matplotlib, Agg backend).

PER vs FLOPs with the Pareto front, validation curves (paper Fig. 2), bias sweep (Fig. 3),
lambda sweep (Fig. 4) and per-frame routing of one utterance. Typical use::

    make_all_plots("results/MiniLibriSpeech/grid", "results/MiniLibriSpeech/report")
    plot_routing(fbank, surprisal, use_big, "routing.png", sil_mask=sil)   # (T, 80), (T,), (T,), (T,)

Every ``plot_*`` function draws one figure, writes it as a PNG to ``path`` (str or
:class:`pathlib.Path`; parent folders are created) and returns that path as a
:class:`pathlib.Path`. Its ``rows`` are results rows (:func:`~surprisal_cc.training.run_folder.collect_results`)
or aggregated rows (:func:`~surprisal_cc.experiments.aggregation.aggregate`); ``dataset``, where it has one, draws
only that dataset's rows (None: any).
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from surprisal_cc.experiments.aggregation import (aggregate, common_notes, ensure_aggregated, pareto_front, pool_configurations, select_rows,  # noqa: E402
                          setup_groups, setup_of, without_notes)
from surprisal_cc.experiments.tables import (surprisal_sweep, table_bias_sweep, table_controllers,  # noqa: E402
                                             table_converged, table_lambda)
from surprisal_cc.training.run_folder import Row, collect_results, read_history  # noqa: E402
from surprisal_cc.experiments.run_labels import CONTROLLER_NAMES, run_label  # noqa: E402

PathLike = Union[str, Path]
DPI = 100
KEY_LINE_CHARS = 120  # characters per line of a figure key below the axes (8 inches, 6.5 pt)

__all__ = ["plot_per_vs_flops", "point_labels", "plot_validation_curves", "plot_bias_sweep", "plot_lambda_sweep",
           "plot_routing", "make_all_plots"]


def _save(fig: "plt.Figure", path: PathLike) -> Path:
    """Write ``fig`` to ``path`` (``.png`` added to a name without a suffix, as matplotlib does; parent
    folders created), close it and return the path written."""
    path = Path(path)
    if not path.suffix:
        path = path.with_name(path.name + ".png")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(path, dpi=DPI)
    finally:  # closed when saving fails too: a caller that goes on keeps no figure open
        plt.close(fig)
    return path


def _errorbar(ax: "plt.Axes", rows: Sequence[Row], x: str, label: Optional[str] = None) -> Any:
    """PER (± its std over seeds) of aggregated ``rows`` against their key ``x``; returns the line's colour."""
    drawn = ax.errorbar([r[x] for r in rows], [r["PER"] for r in rows], yerr=[r["PER_std"] or 0.0 for r in rows],
                        marker="o", capsize=3, label=label)
    return drawn.lines[0].get_color()


def plot_per_vs_flops(rows: Sequence[Row], path: PathLike, title: str = "Test PER vs FLOPs",
                      sweep: Sequence[Row] = (), sweep_label: str = "surprisal, its operating points") -> Path:
    """Test PER against FLOPs per frame, one point per configuration, with the Pareto front.

    Error bars are the std over seeds; the Pareto front is a dashed step line. Rows without PER
    or FLOPs are left out. ``rows``, ``path`` and the return value: see the module docstring.

    Arguments
    ---------
    title : str
        Figure title.
    sweep : sequence of dict
        One model's operating points (bias shifts, test budgets; aggregated rows), drawn as a line
        through their mean PER, in order of FLOPs, labelled ``sweep_label``.

    Example
    -------
    >>> import tempfile
    >>> rows = [{"controller": "surprisal", "seed": 1, "PER": 20.0, "flops_per_frame": 3e6},
    ...         {"controller": "surprisal", "seed": 2, "PER": 21.0, "flops_per_frame": 3e6},
    ...         {"controller": "big_only", "seed": 1, "PER": 19.0, "flops_per_frame": 6e6}]
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     png = plot_per_vs_flops(rows, Path(folder) / "per_vs_flops.png")
    ...     written = png.stat().st_size > 0
    >>> png.name, written
    ('per_vs_flops.png', True)
    """
    agg = [r for r in ensure_aggregated(rows) if r.get("flops_M") is not None and r.get("PER") is not None]
    # points are numbered; the key below the axes names them (long names beside the points overlap),
    # each name wrapped to the figure's width
    common = common_notes(agg)  # said once, as the key's title
    labels = [textwrap.fill(label, KEY_LINE_CHARS, subsequent_indent="    ")
              for label in point_labels([without_notes(r, common) for r in agg])]
    key_title = textwrap.fill(f"Every point: {', '.join(common)}", KEY_LINE_CHARS) if common else None
    key_lines = sum(label.count("\n") + 1 for label in labels) + 1 + (key_title.count("\n") + 1 if key_title else 0)
    fig, ax = plt.subplots(figsize=(8, 4.5 + 0.11 * key_lines + 0.03 * len(labels)))
    front = pareto_front(agg, x="flops_M")
    for i, (row, label) in enumerate(zip(agg, labels)):
        ax.errorbar(row["flops_M"], row["PER"], yerr=row["PER_std"] or 0.0, marker="o" if i in front else "s",
                    color="C3" if i in front else "C0", capsize=3, ls="none", label=label)
        ax.annotate(str(i + 1), (row["flops_M"], row["PER"]), fontsize=7, xytext=(4, 2), textcoords="offset points")
    line = sorted((r["flops_M"], r["PER"]) for r in ensure_aggregated(sweep)
                  if r.get("flops_M") is not None and r.get("PER") is not None)
    if len(line) > 1:
        ax.plot([p[0] for p in line], [p[1] for p in line], marker=".", color="C2", lw=1, label=sweep_label)
    if front:
        pts = sorted((agg[i]["flops_M"], agg[i]["PER"]) for i in front)
        ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", ls="--", color="C3", label="Pareto front")
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(0.0, -0.13), frameon=False, title=key_title,
              title_fontsize=6.5, alignment="left")
    ax.set(xlabel="Avg. FLOPs per input frame (M)", ylabel="PER (%)", title=title)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def point_labels(agg: Sequence[dict]) -> List[str]:
    """Key entries of numbered points: the model, its number of seeds, and its epochs wherever the points
    do not all share one number of epochs.

    Example
    -------
    >>> point_labels([{"model": "Big network only", "n_seeds": 3, "epochs": 30},
    ...               {"model": "Random controller", "n_seeds": 1, "epochs": 14}])
    ['1: Big network only (n = 3, 30 epochs)', '2: Random controller (14 epochs)']
    >>> point_labels([{"model": "Big network only", "epochs": 30}])
    ['1: Big network only']
    """
    mixed_epochs = len({row.get("epochs") for row in agg}) > 1
    labels = []
    for i, row in enumerate(agg):
        notes = ([f"n = {row['n_seeds']}"] if row.get("n_seeds", 1) > 1 else []) + \
            ([f"{row['epochs']} epochs"] if mixed_epochs and row.get("epochs") is not None else [])
        labels.append(f"{i + 1}: {row['model']}" + (f" ({', '.join(notes)})" if notes else ""))
    return labels


def plot_validation_curves(run_dirs: Sequence[PathLike], path: PathLike, key: str = "PER",
                           title: str = "Validation PER over training",
                           labels: Optional[Sequence[str]] = None,
                           histories: Optional[Sequence[List[Row]]] = None) -> Path:
    """Validation ``key`` per epoch, mean over the seeds of each configuration with a ±std band (paper Fig. 2).

    ``path`` and the return value: see the module docstring.

    Arguments
    ---------
    run_dirs : sequence of str or pathlib.Path
        Run folders with a ``history.jsonl``; runs of one configuration (named from
        ``results.json`` or ``hyperparams.yaml``, else the folder name) share a curve.
    key : str
        The metric of ``history.jsonl`` to draw.
    title : str
        Figure title.
    labels : sequence of str, optional
        The curve of each run folder (same label: one curve over seeds); default: named as above.
    histories : sequence of lists, optional
        Each run folder's rows of :func:`~surprisal_cc.training.run_folder.read_history`, where already read.

    Example
    -------
    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as run:
    ...     _ = (Path(run) / "history.jsonl").write_text(
    ...         "\\n".join(json.dumps({"epoch": e, "PER": 40.0 - e}) for e in (1, 2, 3)))
    ...     written = plot_validation_curves([run], Path(run) / "curves.png").exists()
    >>> written
    True
    """
    curves: Dict[str, Dict[int, List[float]]] = {}
    if labels is not None and len(labels) != len(run_dirs):
        raise ValueError(f"{len(labels)} labels for {len(run_dirs)} run folders")
    for i, run_dir in enumerate(map(Path, run_dirs)):
        label = labels[i] if labels is not None else run_label(run_dir)
        for entry in read_history(run_dir) if histories is None else histories[i]:
            if entry.get(key) is not None:
                curves.setdefault(label, {}).setdefault(int(entry["epoch"]), []).append(float(entry[key]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, by_epoch in sorted(curves.items()):
        epochs = sorted(by_epoch)
        mean = np.array([np.mean(by_epoch[e]) for e in epochs])
        std = np.array([np.std(by_epoch[e], ddof=1) if len(by_epoch[e]) > 1 else 0.0 for e in epochs])  # sample std
        ax.plot(epochs, mean, label=label, marker="o", markersize=2.5)
        ax.fill_between(epochs, mean - std, mean + std, alpha=0.2)
    ax.set(xlabel="Epoch", ylabel=f"Validation {key} (%)", title=title)
    if curves:
        ax.legend(fontsize=6)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_bias_sweep(rows: Sequence[Row], path: PathLike, dataset: Optional[str] = None) -> Path:
    """Test PER against the controller bias shift (Appendix B, Fig. 3); big-only PER for reference.

    Draws the rows of :func:`~surprisal_cc.experiments.tables.table_bias_sweep`. ``rows``, ``path``,
    ``dataset`` and the return value: see the module docstring.

    Example
    -------
    >>> import tempfile
    >>> rows = [{"controller": "surprisal", "seed": 1, "PER": 20.0 - s, "test_bias_shift": s}
    ...         for s in (-1.0, 0.0, 1.0)]
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     written = plot_bias_sweep(rows, Path(folder) / "bias_sweep.png").exists()
    >>> written
    True
    """
    agg = ensure_aggregated(rows)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    swept = table_bias_sweep(agg, dataset).rows
    big_only = select_rows(agg, dataset, controller="big_only")
    referenced = set()  # setups whose big-only line is drawn
    for controller in dict.fromkeys(r["controller"] for r in swept):  # a line per controller and setup
        name_of = CONTROLLER_NAMES.get(controller, f"{controller} controller")
        for name, sweep in setup_groups([r for r in swept if r["controller"] == controller], "test_bias_shift").items():
            suffix = f" ({name})" if name else ""
            color = _errorbar(ax, sweep, "test_bias_shift", name_of[0].lower() + name_of[1:] + suffix)
            setup = setup_of(sweep[0], "test_bias_shift")
            for big in big_only:  # the big-only model of the same setup, for reference
                if setup_of(big, "test_bias_shift") == setup and setup not in referenced:
                    referenced.add(setup)
                    ax.axhline(big["PER"], ls="--", color=color, label="big network only" + suffix)
    ax.set(xlabel="Controller bias shift at test", ylabel="Test PER (%)", title="Controller bias sweep")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_lambda_sweep(rows: Sequence[Row], path: PathLike, dataset: Optional[str] = None) -> Path:
    """Test PER (and FLOPs, right axis) of the learned controller against lambda (Appendix D, Fig. 4).

    Draws the rows of :func:`~surprisal_cc.experiments.tables.table_lambda` that have a penalty. ``rows``,
    ``path``, ``dataset`` and the return value: see the module docstring.

    Example
    -------
    >>> import tempfile
    >>> rows = [{"controller": "learned", "seed": 1, "PER": 20.0, "penalty": 1e-3, "flops_per_frame": 5e6},
    ...         {"controller": "learned", "seed": 1, "PER": 22.0, "penalty": 1e-2, "flops_per_frame": 4e6}]
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     written = plot_lambda_sweep(rows, Path(folder) / "lambda_sweep.png").exists()
    >>> written
    True
    """
    table = [r for r in table_lambda(rows, dataset).rows if r.get("penalty")]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    _errorbar(ax, table, "penalty", "PER")
    ax.set_xscale("log")
    ax.set(xlabel="λ", ylabel="Test PER (%)", title="Learned controller: penalty weight")
    if any(r.get("flops_M") is not None for r in table):
        twin = ax.twinx()
        twin.plot([r["penalty"] for r in table], [r["flops_M"] for r in table], "s:", color="C1", label="FLOPs")
        twin.set_ylabel("Avg. FLOPs per input (M)")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _numpy(x: Any) -> np.ndarray:
    """Float numpy array of a tensor, array or sequence."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().float().numpy()
    return np.asarray(x, dtype=float)


def plot_routing(fbank: Any, surprisal: Any, use_big: Any, path: PathLike, title: Optional[str] = None,
                 frame_shift_s: float = 0.02, sil_mask: Any = None) -> Path:
    """Spectrogram, surprisal and routing of one utterance, stacked on one time axis.

    ``path`` and the return value: see the module docstring.

    Arguments
    ---------
    fbank : array-like
        (T, n_mels) log-mel spectrogram (tensor or array).
    surprisal : array-like
        (T,) APC surprisal.
    use_big : array-like or None
        (T,) which network ran on each frame (1 = big); None draws the first two panels only.
    title : str, optional
        Title above the spectrogram.
    frame_shift_s : float
        Seconds per frame.
    sil_mask : array-like, optional
        (T,) True on silence: shaded on the surprisal and routing panels.

    Example
    -------
    >>> import tempfile
    >>> frames = np.arange(50)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     png = plot_routing(np.zeros((50, 80)), frames * 0.1, frames % 2, Path(folder) / "routing.png",
    ...                        sil_mask=frames < 10)
    ...     written = png.exists()
    >>> written
    True
    """
    spec, surp = _numpy(fbank), _numpy(surprisal)
    n_frames = spec.shape[0]
    times = np.arange(n_frames) * frame_shift_s
    fig, axes = plt.subplots(3 if use_big is not None else 2, 1, sharex=True, figsize=(8, 5 if use_big is not None else 3.8),
                             gridspec_kw={"height_ratios": [2, 1, 0.6][: 3 if use_big is not None else 2]})
    axes[0].imshow(spec.T, origin="lower", aspect="auto", extent=(0, n_frames * frame_shift_s, 0, spec.shape[1]),
                   cmap="magma", interpolation="nearest")
    axes[0].set_ylabel("Mel bin")
    axes[1].plot(times, surp, lw=0.8, color="C0")
    axes[1].set_ylabel("Surprisal")
    if use_big is not None:
        big = _numpy(use_big)
        axes[2].step(times, big, where="post", color="C3", lw=0.8)
        axes[2].fill_between(times, 0, big, step="post", color="C3", alpha=0.4)
        axes[2].set(ylim=(-0.1, 1.1), yticks=[0, 1], yticklabels=["small", "big"])
    if sil_mask is not None:
        sil = _numpy(sil_mask).astype(bool)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], sil.astype(int), [0]])))
        for start, end in zip(edges[::2], edges[1::2]):
            for ax in axes[1:]:
                ax.axvspan(start * frame_shift_s, end * frame_shift_s, color="gray", alpha=0.25, lw=0)
    axes[-1].set_xlabel("Time (s)")
    if title:
        axes[0].set_title(title)
    return _save(fig, path)


def _curve_labels(rows: Sequence[Row]) -> Dict[str, str]:
    """Run folder (with a history) -> its configuration's name in the validation curves: the
    aggregated row's, which knows the settings a results file lacks (the learned controller's
    penalty, ...), with its epochs where the rows differ in them; a folder's trained configuration
    names it (not a test-only evaluation of it, such as random routing at test time).

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
    ...     for folder in (a, b):
    ...         _ = (Path(folder) / "history.jsonl").write_text("{}")
    ...     rows = [{"model": "Big network only", "epochs": 30, "run_dirs": [a]},
    ...             {"model": "Big network only", "epochs": 14, "run_dirs": [b]}]
    ...     labels = _curve_labels(rows)
    >>> sorted(labels.values())
    ['Big network only, 14 epochs', 'Big network only, 30 epochs']
    """
    several_epochs = len({r.get("epochs") for r in rows}) > 1
    labels: Dict[str, str] = {}
    for row in sorted(rows, key=lambda r: r.get("controller_at_test") is False):
        label = row["model"] + (f", {row['epochs']} epochs" if several_epochs and row.get("epochs") else "")
        for folder in row["run_dirs"]:
            if (Path(folder) / "history.jsonl").exists():
                labels.setdefault(str(folder), label)
    return labels


def make_all_plots(results_root: PathLike, out_dir: PathLike, pool: Sequence[str] = ()) -> List[Path]:
    """Every figure the results under ``results_root`` allow.

    Per dataset, ``<dataset>_<figure>.png``: PER vs FLOPs of the Table 2 rows and of every row of the
    reference training profile (``converged_per_vs_flops``, :func:`~surprisal_cc.experiments.tables.table_converged`), validation curves,
    bias and lambda sweeps (each where there are results for it); also one figure per
    ``routing*.npz`` file found there (arrays fbank, surprisal[, use_big, sil_mask]).

    Arguments
    ---------
    results_root : str or pathlib.Path
        Folder searched recursively for results files.
    out_dir : str or pathlib.Path
        Folder of the figures.
    pool : sequence of str
        Configuration keys pooled over (:func:`~surprisal_cc.experiments.aggregation.pool_configurations`).

    Returns
    -------
    list of pathlib.Path
        The written figures.

    Example
    -------
    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "results.json").write_text(json.dumps(
    ...         {"dataset": "Mini", "controller": "surprisal", "seed": 1, "PER": 20.0, "flops_per_frame": 3e6}))
    ...     names = [p.name for p in make_all_plots(folder, Path(folder) / "figures")]
    >>> names
    ['Mini_per_vs_flops.png']
    """
    out, root = Path(out_dir), Path(results_root)
    rows = collect_results(root)
    agg = aggregate(pool_configurations(rows, pool)) if rows else []
    paths = []
    for dataset in sorted({str(r.get("dataset", "")) for r in agg}):
        mine = [r for r in agg if r.get("dataset") == dataset]
        stem = f"{dataset}_" if dataset else ""
        paths.append(plot_per_vs_flops(table_controllers(mine, dataset).rows, out / f"{stem}per_vs_flops.png",
                                       title=f"{dataset} test PER vs FLOPs"))
        converged = table_converged(mine, dataset)
        if converged.rows:  # one profile: short labels; its title names the epochs; surprisal's sweep as a line
            paths.append(plot_per_vs_flops(converged.rows, out / f"{stem}converged_per_vs_flops.png",
                                           title=f"{dataset}: {converged.title[0].lower()}{converged.title[1:]}",
                                           sweep=surprisal_sweep(mine, dataset),
                                           sweep_label="surprisal at its bias shifts and test budgets"))
        curve_labels = _curve_labels(select_rows(mine, dataset, controller=None, input_features=None,
                                                 controller_at_train=None, controller_at_test=None))
        if curve_labels:
            curve_dirs = sorted(curve_labels)
            paths.append(plot_validation_curves(curve_dirs, out / f"{stem}validation_curves.png",
                                                labels=[curve_labels[d] for d in curve_dirs]))
        if len(table_bias_sweep(mine, dataset).rows) > 1:
            paths.append(plot_bias_sweep(mine, out / f"{stem}bias_sweep.png", dataset))
        if len([r for r in table_lambda(mine, dataset).rows if r.get("penalty")]) > 1:
            paths.append(plot_lambda_sweep(mine, out / f"{stem}lambda_sweep.png", dataset))
    for npz in sorted(root.rglob("routing*.npz")):
        with np.load(npz) as arrays:
            name = "_".join(npz.relative_to(root).with_suffix("").parts)
            paths.append(plot_routing(arrays["fbank"], arrays["surprisal"], arrays.get("use_big"),
                                      out / f"{name}.png", title=name, sil_mask=arrays.get("sil_mask")))
    return paths
