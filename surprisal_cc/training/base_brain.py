"""The base of the recipes' SpeechBrain Brains (:class:`~surprisal_cc.training.brain.ConditionalCTCBrain`,
:class:`~surprisal_cc.training.apc_training.APCBrain`): :class:`FiniteLossBrain` never updates the model from
a batch whose loss is not finite (SpeechBrain's options set through :func:`with_run_option`), and
:class:`RNGState` checkpoints every random generator so that a resumed run continues as the uninterrupted
one would have.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from typing import List

import numpy as np
import speechbrain as sb
import torch
from speechbrain.utils.distributed import is_distributed_initialized
from speechbrain.utils.run_opts import RunOptions
from torch import Tensor

from surprisal_cc.errors import ConfigurationError, TrainingDivergedError
from surprisal_cc.training.preemption import CheckpointOnSignal, install_checkpoint_signals


logger = logging.getLogger(__name__)


@sb.utils.checkpoints.register_checkpoint_hooks
class RNGState:
    """Checkpointed random state (torch CPU, CUDA when present, Python, NumPy).

    SpeechBrain's ``SaveableGenerator`` checkpoints torch generators only and restores them when
    the checkpoint is loaded; this recoverable also covers Python's and NumPy's generators and
    restores a mid-epoch state at the first training batch, as explained below.

    Stochastic routing and dropout draw from these generators, so restoring them makes a run
    resumed after an interruption continue exactly as the uninterrupted run would have. Creating a
    DataLoader iterator draws from the torch generator; a run resumed mid-epoch creates one more
    iterator than the uninterrupted run, so a mid-epoch state is applied at the first training batch
    (:meth:`apply_pending`, called by the Brain) rather than when the checkpoint is loaded.
    """

    def __init__(self):
        self.pending = None

    @sb.utils.checkpoints.mark_as_saver
    def save(self, path):
        version, words, gauss = random.getstate()
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state = {"torch": torch.get_rng_state(), "python": [version, torch.tensor(words), gauss],
                 "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached]}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(state, path)

    @sb.utils.checkpoints.mark_as_loader
    def load(self, path, end_of_epoch=False):
        state = torch.load(path, weights_only=True)
        if end_of_epoch:
            self.apply(state)
        else:
            self.pending = state

    def apply_pending(self) -> None:
        if self.pending is not None:
            self.apply(self.pending)
            self.pending = None

    @staticmethod
    def apply(state) -> None:
        torch.set_rng_state(state["torch"])
        version, words, gauss = state["python"]
        random.setstate((version, tuple(words.tolist()), gauss))
        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


def with_run_option(run_opts, **options):
    """``run_opts`` (SpeechBrain's RunOptions, a dict or None) with ``options`` set as if given on
    the command line; every other option keeps its standing (an hparams value still wins over a
    run option that was not given).

    Example
    -------
    >>> opts = with_run_option({"device": "cpu"}, skip_nonfinite_grads=True)
    >>> opts.skip_nonfinite_grads, sorted(opts.overridden_args)
    (True, ['device', 'skip_nonfinite_grads'])
    """
    if run_opts is None or isinstance(run_opts, dict):
        run_opts = RunOptions.from_dictionary(dict(run_opts or {}))
    return dataclasses.replace(run_opts, **options, overridden_args={*run_opts.overridden_args, *options})


class FiniteLossBrain(CheckpointOnSignal, sb.Brain):
    """A Brain that never updates the model from a batch whose loss is not finite.

    SpeechBrain's own ``fit_batch`` back-propagates a NaN/inf loss and steps the optimiser until
    ``nonfinite_patience`` runs out, and one such step makes every parameter NaN. This Brain turns
    on SpeechBrain's ``skip_nonfinite_grads`` (non-finite gradients are dropped before the step, so
    the batch leaves the weights as they were; under DDP the all-reduced gradients are non-finite on
    every rank alike) and overrides the ``check_loss_isfinite`` hook: the utterance ids of such a
    batch are logged, and when more than ``nonfinite_patience`` batches of one epoch had a
    non-finite loss (on any process) the run stops with :class:`TrainingDivergedError`, which names
    the utterances and what to do. Checkpoints already written stay as they are, so the same
    command resumes from the last one once the cause is fixed. With gradient accumulation, the
    other batches accumulated into the same step are dropped with it.

    Two more guards every recipe Brain shares: evaluating needs a checkpoint of a validated epoch
    (:meth:`on_evaluate_start`; SpeechBrain would evaluate the untrained model), and a checkpoint
    written by a model of another shape is one line (:meth:`_checkpoint_of_this_model`, around a
    subclass's checkpoint loading).
    """

    def on_evaluate_start(self, max_key=None, min_key=None):
        """Evaluating the checkpoint chosen by ``max_key``/``min_key`` needs one: without it
        SpeechBrain would evaluate the untrained model (a :class:`ConfigurationError` instead)."""
        key = max_key or min_key
        if self.checkpointer is not None and key and \
                self.checkpointer.find_checkpoint(max_key=max_key, min_key=min_key) is None:
            raise ConfigurationError(f"{self.checkpointer.checkpoints_dir} holds no checkpoint of a validated epoch "
                                     f"({key}) to evaluate: train at least one epoch (number_of_epochs >= 1), or "
                                     "point --output_folder at a trained run")
        super().on_evaluate_start(max_key=max_key, min_key=min_key)

    @contextlib.contextmanager
    def _checkpoint_of_this_model(self):
        """A checkpoint written by a model of another shape (another architecture or size on the
        command line) is one :class:`ConfigurationError` line, not torch's list of keys."""
        try:
            yield
        except RuntimeError as err:
            if not any(s in str(err) for s in ("size mismatch", "Missing key", "Unexpected key")):
                raise
            raise ConfigurationError(
                f"the checkpoint in {self.checkpointer.checkpoints_dir} was written by a model of another shape "
                f"({' '.join(str(err).split())[:300]}): give the settings it was trained with, use another "
                "--output_folder, or delete that folder") from None

    def __init__(self, modules=None, opt_class=None, hparams=None, run_opts=None, checkpointer=None):
        super().__init__(modules=modules, opt_class=opt_class, hparams=hparams,
                         run_opts=with_run_option(run_opts, skip_nonfinite_grads=True), checkpointer=checkpointer)
        install_checkpoint_signals()  # under Slurm: checkpoint and stop on its warning signal (training.preemption)
        self.batch_ids: List[str] = []
        self.nonfinite_ids: List[str] = []

    def on_fit_batch_start(self, batch, should_step):
        self.batch_ids = [str(i) for i in getattr(batch, "id", [])]

    def check_loss_isfinite(self, loss: Tensor) -> None:
        finite = torch.isfinite(loss.detach()).all().float().reshape(1)
        if is_distributed_initialized():
            torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
        if not bool(finite.item()):
            self.record_nonfinite_batch(float(loss.detach()))

    def record_nonfinite_batch(self, loss: float) -> None:
        """Count and log a batch with a non-finite loss; past the patience, stop with the utterance ids."""
        self.nonfinite_count += 1  # SpeechBrain resets it at the start of every epoch
        self.nonfinite_ids = (self.nonfinite_ids if self.nonfinite_count > 1 else []) + self.batch_ids
        logger.warning("non-finite training loss (%s) on batch %d, no update from it; utterances: %s",
                       loss, self.step, ", ".join(self.batch_ids) or "(no ids)")
        if self.nonfinite_count <= self.nonfinite_patience:
            return
        epoch = getattr(getattr(self.hparams, "epoch_counter", None), "current", "?")
        lr = getattr(self.hparams, "lr", None)
        saved = self.checkpointer.checkpoints_dir if self.checkpointer is not None else None
        shown = self.nonfinite_ids[-16:]
        raise TrainingDivergedError(
            f"{self.nonfinite_count} training batches of epoch {epoch} had a non-finite loss (more than "
            f"nonfinite_patience={self.nonfinite_patience}); none of them updated the model. Utterances of those "
            f"batches{' (last 16)' if len(self.nonfinite_ids) > 16 else ''}: {', '.join(map(str, shown))}. "
            f"If the same utterances keep appearing, check their audio and labels; if they differ, training "
            f"diverged: lower the learning rate{f' (lr: {lr})' if lr is not None else ''} or max_grad_norm. "
            f"--nonfinite_patience=N allows more skipped batches per epoch. "
            + (f"Checkpoints in {saved} are untouched; re-running the same command resumes from the last one."
               if saved else "")
        )
