"""Checkpoint on a scheduler's signal: a training run that a batch scheduler warns before it stops the job
(Slurm's ``--signal``: SIGUSR1 or SIGUSR2 before a time limit, SIGTERM on preemption or ``scancel``) saves an
intra-epoch checkpoint after the batch it is training, then exits with :data:`INTERRUPTED_EXIT`; the same
command run again (a requeued job) resumes from that checkpoint, as it resumes from the periodic ones
(``ckpt_interval_minutes``), and trains on to the same result as an uninterrupted run.

The handlers are installed where a Slurm job runs the recipe (``SLURM_JOB_ID`` set) or where
``SURPRISAL_CC_CHECKPOINT_SIGNALS`` names the signals (``USR1,USR2,TERM``; empty: none). Outside the
training loop (data preparation, feature caching, the final evaluation) a signal only marks the run: it
is honoured at the next training batch, and the job's launcher stops the process at the end of the grace
period otherwise (the run then resumes from its last checkpoint, as after any kill).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import List

#: The exit status of a run that stopped to be resumed (EX_TEMPFAIL: "try again").
INTERRUPTED_EXIT = 75
SIGNALS_ENV = "SURPRISAL_CC_CHECKPOINT_SIGNALS"
SLURM_SIGNALS = "USR1,USR2,TERM"

_requested: List[str] = []  # the names of the signals received (this process)


def checkpoint_signals() -> List[signal.Signals]:
    """The signals that ask this process to checkpoint and stop (``SURPRISAL_CC_CHECKPOINT_SIGNALS``, else
    SIGUSR1, SIGUSR2 and SIGTERM inside a Slurm job, else none).

    >>> import os; os.environ[SIGNALS_ENV] = "USR2, TERM"; [s.name for s in checkpoint_signals()]
    ['SIGUSR2', 'SIGTERM']
    >>> os.environ[SIGNALS_ENV] = ""; checkpoint_signals()
    []
    >>> del os.environ[SIGNALS_ENV]
    """
    names = os.environ.get(SIGNALS_ENV)
    if names is None:
        names = SLURM_SIGNALS if os.environ.get("SLURM_JOB_ID") else ""
    return [getattr(signal, "SIG" + n.strip().upper().removeprefix("SIG")) for n in names.split(",") if n.strip()]


def _on_signal(signum, frame) -> None:
    name = signal.Signals(signum).name
    if not _requested:
        print(f"[preemption] received {name}: saving a checkpoint after the current training batch, then stopping "
              f"(exit status {INTERRUPTED_EXIT}; run the same command again to resume)", file=sys.stderr, flush=True)
    _requested.append(name)


def install_checkpoint_signals() -> List[str]:
    """Install the handlers (:func:`checkpoint_signals`; only from the main thread); their names."""
    if threading.current_thread() is not threading.main_thread():
        return []
    installed = []
    for sig in checkpoint_signals():
        signal.signal(sig, _on_signal)
        installed.append(sig.name)
    return installed


def stop_requested() -> bool:
    """Whether a checkpoint signal has arrived."""
    return bool(_requested)


class CheckpointOnSignal:
    """A ``speechbrain.Brain`` mixin: after a checkpoint signal (:func:`install_checkpoint_signals`) the next
    training batch ends with an intra-epoch checkpoint (SpeechBrain's own, with the data loader's position
    and the random state), and the process exits with :data:`INTERRUPTED_EXIT`."""

    def _should_save_intra_epoch_ckpt(self, last_ckpt_time, steps_since_ckpt):
        return stop_requested() or super()._should_save_intra_epoch_ckpt(last_ckpt_time, steps_since_ckpt)

    def _save_intra_epoch_ckpt(self):
        if self.checkpointer is not None:
            super()._save_intra_epoch_ckpt()
        if stop_requested():
            epoch = getattr(getattr(self.hparams, "epoch_counter", None), "current", "?")
            print(f"[preemption] checkpoint saved after batch {self.step} of epoch {epoch} ({', '.join(sorted(set(_requested)))}): "
                  "stopping to be resumed", file=sys.stderr, flush=True)
            raise SystemExit(INTERRUPTED_EXIT)
