"""Learning-rate schedules chosen in the hparams (``lr_schedule``).

``newbob`` is SpeechBrain's :class:`~speechbrain.nnet.schedulers.NewBobScheduler`: it anneals
when the validation loss stalls, so how long a run takes to anneal depends on the run.
``hold_decay`` (:class:`HoldDecayScheduler`) fixes the schedule by the epoch budget instead: the
peak rate for the first part of the run, then a geometric decay that reaches its final value at
the last epoch, so a run of a given length always ends annealed.

Example
-------
>>> schedule = lr_scheduler("hold_decay", initial_value=1e-3, number_of_epochs=5, hold_fraction=0.4,
...                         final_fraction=0.01)
>>> [round(schedule.value(epoch), 6) for epoch in range(1, 6)]
[0.001, 0.001, 0.000215, 4.6e-05, 1e-05]
>>> type(lr_scheduler("newbob", initial_value=1e-3, annealing_factor=0.8)).__name__
'NewBobScheduler'
"""
from __future__ import annotations

import ast
import math
import logging
from pathlib import Path
from typing import Tuple

from speechbrain.nnet.schedulers import NewBobScheduler
from speechbrain.utils.checkpoints import mark_as_loader, mark_as_saver, register_checkpoint_hooks

from surprisal_cc.checks import is_number

__all__ = ["HoldDecayScheduler", "LR_SCHEDULES", "anneal", "lr_scheduler"]

logger = logging.getLogger(__name__)

LR_SCHEDULES = ("newbob", "hold_decay")


@register_checkpoint_hooks
class HoldDecayScheduler:
    """Hold ``initial_value`` for the first ``hold_epochs`` epochs, then decay it geometrically
    so that the last of ``number_of_epochs`` epochs trains at ``final_value``.

    Called, like SpeechBrain's epoch schedulers, with the epoch that has just ended; returns
    (its rate, the next epoch's rate). It depends on the epoch only, so a run resumed with the same
    settings continues on the same schedule. A run resumed with another ``number_of_epochs`` (a
    finished run asked to train on) follows the new schedule from its next epoch, whose rate may be
    higher again where the new hold is longer; a warning on recovery says so.

    Arguments
    ---------
    initial_value : float
        The peak rate (the optimizer's initial rate).
    number_of_epochs : int
        The run's epochs.
    hold_epochs : int
        Epochs at the peak rate (fewer than ``number_of_epochs``). The first epoch always trains at it
        (the optimizer's initial rate; the schedule sets the rate after each epoch), so 0 holds it
        for that one epoch, as 1 does, and a one-epoch run trains at the peak rate alone.
    final_value : float
        The rate of the last epoch (0 < final_value <= initial_value).
    """

    def __init__(self, initial_value: float, number_of_epochs: int, hold_epochs: int, final_value: float):
        if not 0 <= hold_epochs < number_of_epochs:
            raise ValueError(f"hold_epochs must lie in [0, number_of_epochs = {number_of_epochs}), got {hold_epochs}")
        if not 0 < final_value <= initial_value:
            raise ValueError(f"final_value must lie in (0, initial_value = {initial_value}], got {final_value}")
        self.initial_value, self.final_value = float(initial_value), float(final_value)
        self.number_of_epochs, self.hold_epochs = int(number_of_epochs), int(hold_epochs)
        self.decay_epochs = self.number_of_epochs - max(self.hold_epochs, 1)  # epoch 1 runs at the peak
        self.ratio = (self.final_value / self.initial_value) ** (1.0 / self.decay_epochs) if self.decay_epochs else 1.0

    def value(self, epoch: int) -> float:
        """The rate of ``epoch`` (1-based); past the last epoch it stays at the last epoch's rate."""
        decayed = min(max(epoch - max(self.hold_epochs, 1), 0), self.decay_epochs)
        return self.initial_value * self.ratio ** decayed

    def __call__(self, epoch: int) -> Tuple[float, float]:
        return self.value(epoch), self.value(epoch + 1)

    @mark_as_saver
    def _save(self, path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(repr((self.initial_value, self.number_of_epochs, self.hold_epochs, self.final_value)))

    @mark_as_loader
    def _recover(self, path, end_of_epoch=False) -> None:
        """The schedule is a function of the epoch, which the epoch counter restores; a checkpoint
        saved under another schedule is only warned about."""
        try:
            saved = ast.literal_eval(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError, SyntaxError):
            return
        current = (self.initial_value, self.number_of_epochs, self.hold_epochs, self.final_value)
        if tuple(saved) != current:
            logger.warning("the checkpoint's learning-rate schedule was (peak, epochs, hold epochs, final) = %s; "
                           "this run's is %s: the rate follows this run's from the next epoch", tuple(saved), current)


def lr_scheduler(kind: str, initial_value: float, annealing_factor: float = 1.0, number_of_epochs: int = 1,
                 hold_fraction: float = 0.4, final_fraction: float = 0.05):
    """The learning-rate scheduler ``kind`` (one of ``LR_SCHEDULES``).

    Arguments
    ---------
    kind : str
        ``"newbob"``: :class:`~speechbrain.nnet.schedulers.NewBobScheduler` with
        ``annealing_factor`` (1.0: a constant rate). ``"hold_decay"``: :class:`HoldDecayScheduler`.
    initial_value : float
        The initial (peak) learning rate.
    annealing_factor : float
        NewBob's factor.
    number_of_epochs : int
        The run's epochs (hold_decay).
    hold_fraction : float
        Fraction of the epochs at the peak rate, rounded (hold_decay).
    final_fraction : float
        The last epoch's rate as a fraction of the peak (hold_decay).

    The hparams files build it while they load, before any other check: a bad setting is a
    ``ValueError`` naming its hparams key (``lr``, ``number_of_epochs``, ``lr_hold_fraction``,
    ``lr_final_fraction``, ``lr_annealing_factor``).

    Example
    -------
    >>> lr_scheduler("hold_decay", initial_value=-1.0, number_of_epochs=30)
    Traceback (most recent call last):
    ...
    ValueError: lr must be a positive number, got -1.0
    """
    def number(value, key: str, low: float, high: float, low_open: bool = True) -> float:
        ok = is_number(value) and ((low < value) if low_open else (low <= value)) and value <= high
        if not ok:
            raise ValueError(f"{key} must be a number in {'(' if low_open else '['}{low:g}, {high:g}], got {value!r}"
                             if math.isfinite(high) else f"{key} must be a positive number, got {value!r}")
        return float(value)

    lr = number(initial_value, "lr", 0.0, math.inf)
    if not is_number(number_of_epochs, integer=True) or number_of_epochs < 1:
        raise ValueError(f"number_of_epochs must be a whole number of at least 1, got {number_of_epochs!r}")
    number(hold_fraction, "lr_hold_fraction", 0.0, 1.0, low_open=False)
    number(final_fraction, "lr_final_fraction", 0.0, 1.0)
    if kind == "newbob":
        factor = number(annealing_factor, "lr_annealing_factor", 0.0, 1.0)  # floats: torch.load refuses numpy scalars
        return NewBobScheduler(initial_value=lr, improvement_threshold=0.0025, annealing_factor=factor, patient=0)
    if kind == "hold_decay":
        hold = min(int(round(hold_fraction * number_of_epochs)), number_of_epochs - 1)
        return HoldDecayScheduler(initial_value, number_of_epochs, hold, final_fraction * initial_value)
    raise ValueError(f"lr_schedule must be one of {list(LR_SCHEDULES)}, got {kind!r}")


def anneal(scheduler, epoch: int, valid_loss: float) -> float:
    """The next epoch's rate: NewBob reads the validation loss, epoch schedules the epoch."""
    _, new_value = scheduler(valid_loss) if isinstance(scheduler, NewBobScheduler) else scheduler(epoch)
    return new_value
