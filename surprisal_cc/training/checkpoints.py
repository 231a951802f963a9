"""SpeechBrain's :class:`~speechbrain.utils.checkpoints.Checkpointer`, with checkpoints that appear whole or not at all.

SpeechBrain writes a checkpoint's ``CKPT.yaml`` first and its parameter files after it, so a process
killed while saving (the end of a batch job, Ctrl-C, an out-of-memory kill) leaves a folder that
looks like a checkpoint but lacks files or holds a truncated one; the next start resumes from it
and fails. This :class:`Checkpointer` writes each checkpoint into a hidden ``.partial-CKPT+...``
folder and renames it into place once every file is written (a rename within one file system is
atomic), so a resumed run always starts from the last complete checkpoint. The hidden folder of a
save that was cut short holds nothing of value and is removed by the next save. A checkpoint cut
short by a Checkpointer without this guarantee (SpeechBrain's own, or this package before it had
one) lacks the file of a recoverable or holds an empty one; recovery passes over it, with a warning
naming the folder, to the newest complete one.

Example
-------
>>> import tempfile
>>> from torch import nn
>>> with tempfile.TemporaryDirectory() as folder:
...     checkpointer = Checkpointer(folder, recoverables={"model": nn.Linear(2, 2)})
...     saved = checkpointer.save_checkpoint(meta={"PER": 30.0})
...     names = sorted(p.name for p in Path(folder).iterdir())
>>> names == [saved.path.name] and names[0].startswith("CKPT+"), sorted(saved.paramfiles)
(True, ['model'])
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from speechbrain.utils import checkpoints as sb_checkpoints
from speechbrain.utils.distributed import ddp_barrier, if_main_process

logger = logging.getLogger(__name__)

#: Prefix of the hidden folder a checkpoint is written into before it is renamed into place.
PARTIAL_PREFIX = ".partial-"
#: Prefix of a custom-named checkpoint moved aside while a newer one of the same name is renamed in.
REPLACED_PREFIX = ".replaced-"


class Checkpointer(sb_checkpoints.Checkpointer):
    """SpeechBrain's Checkpointer (same arguments) whose checkpoints are written to a hidden folder and
    renamed into place when complete (module docstring)."""

    def _new_checkpoint_dirpath(self) -> Path:
        return _partial(super()._new_checkpoint_dirpath())

    def _custom_checkpoint_dirpath(self, name) -> Path:
        return _partial(super()._custom_checkpoint_dirpath(name))

    def save_checkpoint(self, meta={}, end_of_epoch=True, name=None, verbosity=logging.INFO):  # noqa: B006 (SpeechBrain's signature)
        """SpeechBrain's ``save_checkpoint``; the checkpoint exists under its ``CKPT+...`` name only once
        every file of it is written. Returns the :class:`~speechbrain.utils.checkpoints.Checkpointer`'s
        ``Checkpoint`` on the main process, None on the others."""
        if if_main_process():
            self.remove_partial_checkpoints()
        written = super().save_checkpoint(meta=meta, end_of_epoch=end_of_epoch, name=name, verbosity=logging.DEBUG)
        ddp_barrier()  # every process has written its files before the folder is renamed
        if written is None:
            return None
        final = written.path.with_name(written.path.name[len(PARTIAL_PREFIX):])
        replaced = final.with_name(REPLACED_PREFIX + final.name)
        if final.exists():  # a custom name saved again: moved aside until the newer one is in place
            final.rename(replaced)  # (remove_partial_checkpoints left no such folder)
        written.path.rename(final)
        shutil.rmtree(replaced, ignore_errors=True)
        kind = "end-of-epoch" if end_of_epoch else "intra-epoch"
        logger.log(verbosity, f"Saved an {kind} checkpoint in {final}")
        return sb_checkpoints.Checkpoint(final, written.meta,
                                         {key: final / path.name for key, path in written.paramfiles.items()})

    def recover_if_possible(self, importance_key=None, max_key=None, min_key=None, ckpt_predicate=None):
        """SpeechBrain's ``recover_if_possible``, passing over checkpoints that lack a recoverable's file
        (:meth:`is_complete`)."""
        if if_main_process():
            self.restore_replaced_checkpoints()
        ddp_barrier()

        def complete(ckpt, wanted=ckpt_predicate):
            return (wanted is None or wanted(ckpt)) and self.is_complete(ckpt, warn=True)

        return super().recover_if_possible(importance_key=importance_key, max_key=max_key, min_key=min_key,
                                           ckpt_predicate=complete)

    def is_complete(self, ckpt: sb_checkpoints.Checkpoint, warn: bool = False) -> bool:
        """Whether ``ckpt`` holds a non-empty file for every recoverable that must be loaded (those not
        marked optional; SpeechBrain tolerates a missing dataloader state, and so does this)."""
        if self.allow_partial_load:
            return True
        for name in self.recoverables:
            if self.optional_recoverables.get(name) or "dataloader" in name:
                continue
            path = ckpt.paramfiles.get(name)
            if path is None or not Path(path).is_file() or Path(path).stat().st_size == 0:
                if warn:
                    logger.warning("passing over %s: its save was cut short (no complete file for '%s'); the "
                                   "run resumes from the newest complete checkpoint instead", ckpt.path, name)
                return False
        return True

    def remove_partial_checkpoints(self) -> None:
        """Remove the hidden folders of saves that were cut short (a process killed while saving), and
        put back what :meth:`restore_replaced_checkpoints` puts back."""
        for folder in Path(self.checkpoints_dir).glob(PARTIAL_PREFIX + "*"):
            logger.warning("removing %s: a checkpoint whose save was cut short (the run resumes from the last "
                           "complete one)", folder)
            shutil.rmtree(folder, ignore_errors=True)
        self.restore_replaced_checkpoints()

    def restore_replaced_checkpoints(self) -> None:
        """Put back a custom-named checkpoint moved aside for a newer one that never arrived (a process
        killed between the two renames); drop it where the newer one did arrive."""
        for folder in Path(self.checkpoints_dir).glob(REPLACED_PREFIX + "*"):
            final = folder.with_name(folder.name[len(REPLACED_PREFIX):])
            if final.exists():
                shutil.rmtree(folder, ignore_errors=True)
            else:
                folder.rename(final)


def _partial(path: Path) -> Path:
    return path.with_name(PARTIAL_PREFIX + path.name)
