"""The record of the labels a run trains and selects checkpoints on (:data:`TRAINING_LABELS_RECORD` in its
folder): a resumed run whose training or validation labels changed since it started is refused
(:func:`check_training_labels`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

from speechbrain.utils.distributed import if_main_process

from surprisal_cc.data.manifest import atomic_write_text
from surprisal_cc.errors import ConfigurationError


#: A run folder's record of the labels it trains and selects checkpoints on (:func:`check_training_labels`).
TRAINING_LABELS_RECORD = "training_labels.json"
LABEL_COLUMNS = ("ID", "phn", "wrd")


def labels_digest(manifest: str) -> str:
    """sha256 of a manifest's utterance ids and labels (:data:`LABEL_COLUMNS`; not the audio paths, which
    may move), row by row in file order.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "a.csv").write_text("ID,duration,wav,phn\\nu1,1.0,/x/u1.flac,AH B\\n")
    ...     _ = Path(tmp, "b.csv").write_text("ID,duration,wav,phn\\nu1,1.0,/moved/u1.flac,AH B\\n")
    ...     labels_digest(f"{tmp}/a.csv") == labels_digest(f"{tmp}/b.csv")
    True
    """
    import hashlib

    from surprisal_cc.data.manifest import read_manifest

    digest = hashlib.sha256()
    for row in read_manifest(manifest, required=("ID",), resolve_wav=False)[1]:
        digest.update(json.dumps([row.get(column) for column in LABEL_COLUMNS]).encode() + b"\n")
    return digest.hexdigest()


def check_training_labels(output_folder: str, manifests: Dict[str, str], resumed: bool) -> None:
    """Refuse to resume a run whose training or validation labels changed since it started (a label
    file rewritten in place, e.g. the training split relabelled into the same path): its checkpoints
    were trained on the others. A run starting afresh records its labels' digests in ``output_folder``
    (:data:`TRAINING_LABELS_RECORD`; main process); a resumed run without a record gets one.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "train.csv").write_text("ID,phn\\nu1,AH B\\n")
    ...     check_training_labels(tmp, {"train": f"{tmp}/train.csv"}, resumed=False)
    ...     _ = Path(tmp, "train.csv").write_text("ID,phn\\nu1,AH D\\n")
    ...     check_training_labels(tmp, {"train": f"{tmp}/train.csv"}, resumed=True)
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: ... holds checkpoints trained on other train labels than .../train.csv holds now: ...
    """
    digests = {split: labels_digest(manifests[split]) for split in ("train", "valid") if manifests.get(split)}
    record = Path(output_folder) / TRAINING_LABELS_RECORD
    stored: Dict[str, str] = {}
    if resumed and record.is_file():
        try:
            stored = json.loads(record.read_text())
        except ValueError:
            stored = {}
    changed = [split for split, digest in digests.items() if stored.get(split) not in (None, digest)]
    if changed:
        raise ConfigurationError(
            f"{output_folder} holds checkpoints trained on other {' and '.join(changed)} labels than "
            f"{', '.join(manifests[split] for split in changed)} holds now: restore the labels it was trained "
            "with, or give another --output_folder (or --experiment_root) for a new run")
    if if_main_process() and (not resumed or not stored):
        atomic_write_text(record, json.dumps(digests, indent=2) + "\n")
