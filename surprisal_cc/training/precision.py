"""The training precision of a recipe run: ``precision: auto`` resolved once, by the same rule on every
process of a run (:func:`resolve_precision`), and recorded in the run folder (:data:`PRECISION_RECORD`) so
that a resumed run keeps what it chose. What ``auto`` means on a device is :mod:`surprisal_cc.runtime`'s.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable, Optional

import torch

from surprisal_cc.errors import ConfigurationError
from surprisal_cc.runtime import TRAINING_PRECISIONS, auto_precision

logger = logging.getLogger(__name__)

#: Where a run folder records what ``precision: auto`` chose, so that a resumed run keeps it.
PRECISION_RECORD = "precision.json"


def resolve_precision(precision: str, run_opts, output_folder: Optional[str] = None) -> str:
    """The training precision: ``auto`` becomes :func:`~surprisal_cc.runtime.auto_precision` of the
    run's device (a fixed rule), chosen once per run: a run resumed in ``output_folder`` takes what its
    start chose (:data:`PRECISION_RECORD`, written by :func:`~surprisal_cc.training.run_settings.create_experiment_directory`; runs started
    before ``auto`` became a fixed rule recorded a timed choice), so that its epochs never split between
    bf16 and fp32.

    ``--precision`` on the command line (SpeechBrain's flag) wins over the YAML key.
    """
    if "precision" in getattr(run_opts, "overridden_args", ()):
        return run_opts["precision"]
    if precision not in TRAINING_PRECISIONS:
        raise ConfigurationError(f"precision must be one of {TRAINING_PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    device = (run_opts.get("device") if run_opts is not None else None) or "cpu"

    def chosen(on: str) -> str:  # under DDP the main process alone reads the record or applies the rule
        return (recorded_precision(output_folder, on) if output_folder else None) or auto_precision(on)

    return _agreed_by_every_rank(chosen, device)


def recorded_precision(output_folder: str, device: str = "cpu") -> Optional[str]:
    """What ``precision: auto`` chose when the run in ``output_folder`` started (None where nothing
    readable is recorded, or bf16 is recorded and ``device`` is a GPU without bf16)."""
    record = Path(output_folder) / PRECISION_RECORD
    try:
        chosen = json.loads(record.read_text()).get("precision")
    except (OSError, ValueError, AttributeError):
        return None
    if chosen not in TRAINING_PRECISIONS[:-1]:
        return None
    if chosen == "bf16" and torch.device(device).type == "cuda" and not torch.cuda.is_bf16_supported():
        logger.warning("precision auto: %s records bf16, which %s does not run; choosing again", record, device)
        return None
    logger.info("precision auto: %s, as chosen when this run started (%s)", chosen, record)
    return chosen


def _agreed_by_every_rank(choose: Callable[[str], str], device: str) -> str:
    """``choose(device)`` as the main process makes it, for every DDP rank: ranks on machines of other
    kinds (or one resuming from a record the others cannot read) could choose differently. Only the main
    process chooses; the others take its choice (a no-op outside DDP and on CUDA, where the rule is fp32).
    """
    from speechbrain.utils.distributed import is_distributed_initialized

    if not is_distributed_initialized() or torch.device(device).type == "cuda":
        return choose(device)
    main = torch.distributed.get_rank() == 0
    choice = torch.tensor([TRAINING_PRECISIONS.index(choose(device)) if main else -1])
    torch.distributed.broadcast(choice, src=0)
    return TRAINING_PRECISIONS[int(choice)]
