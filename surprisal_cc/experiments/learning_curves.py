"""Learning curves: the validation error rate (or any other key) of each run epoch by epoch, as a Markdown
table read from the runs' training histories (``surprisal-cc curves``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from surprisal_cc.training.run_folder import PathLike, Row, as_float, epoch_minutes, read_history

__all__ = ["format_learning_curves"]

# history keys that are percentages (error rates); curves show any other key as a plain number
PERCENT_KEYS = ("PER", "TER", "WER")


def format_learning_curves(runs: Dict[str, PathLike], key: str = "PER",
                           histories: Optional[Dict[str, List[Row]]] = None) -> str:
    """Markdown table of validation curves, finished runs or runs in progress: per epoch and run, the
    learning rate, the validation ``key`` and the epoch's wall-clock minutes
    (:func:`~surprisal_cc.training.run_folder.epoch_minutes`).

    Arguments
    ---------
    runs : dict of str to path
        Column label -> run folder (with ``history.jsonl``).
    key : str
        The validation metric of ``history.jsonl``.
    histories : dict of str to list, optional
        Column label -> the run's rows of :func:`~surprisal_cc.training.run_folder.read_history`, where already read.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "history.jsonl").write_text(
    ...         '{"epoch": 1, "lr": 0.001, "PER": 80.0, "epoch_s": 360}\\n{"epoch": 2, "lr": 0.0008, "PER": 60.25}\\n')
    ...     print(format_learning_curves({"big-only": folder}))
    | epoch | big-only: lr | PER | min |
    |---:|---:|---:|---:|
    | 1 | 0.001 | 80.00 % | 6.0 |
    | 2 | 0.0008 | 60.25 % | – |
    """
    columns = {}
    for label, folder in runs.items():
        rows = read_history(Path(folder)) if histories is None else histories[label]
        history = {int(e["epoch"]): e for e in rows if e.get(key) is not None}
        columns[label] = (history, epoch_minutes(folder, rows))
    last = max((max(h) for h, _ in columns.values() if h), default=0)
    lines = ["| epoch | " + " | ".join(f"{label}: lr | {key} | min" for label in columns) + " |",
             "|---:|" + "---:|---:|---:|" * len(columns)]
    for epoch in range(1, last + 1):
        cells = []
        for history, minutes in columns.values():
            entry = history.get(epoch)
            if entry is None:
                cells += ["", "", ""]
                continue
            lr = entry.get("lr")
            value = as_float(entry[key])
            cells += [f"{lr:.3g}" if lr is not None else "–",
                      "–" if value is None else f"{value:.2f} %" if key in PERCENT_KEYS else f"{value:.4g}",
                      f"{minutes[epoch]:.1f}" if epoch in minutes else "–"]
        lines.append(f"| {epoch} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
