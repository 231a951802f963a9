"""SpeechBrain's :class:`~speechbrain.utils.checkpoints.Checkpointer`, with checkpoints that appear whole or not at all.

SpeechBrain writes a checkpoint's ``CKPT.yaml`` first and its parameter files after it, so a process
killed while saving (the end of a batch job, Ctrl-C, an out-of-memory kill) leaves a folder that
looks like a checkpoint but lacks files or holds a truncated one; the next start resumes from it
and fails. This :class:`Checkpointer` writes each checkpoint into a hidden ``.partial-CKPT+...``
folder and renames it into place once every file is written (a rename within one file system is
atomic), so a resumed run always starts from the last complete checkpoint. The hidden folder of a
save that was cut short holds nothing of value and is removed by the next save.

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
        if final.exists():  # a custom name saved again: the newer checkpoint replaces it
            shutil.rmtree(final)
        written.path.rename(final)
        kind = "end-of-epoch" if end_of_epoch else "intra-epoch"
        logger.log(verbosity, f"Saved an {kind} checkpoint in {final}")
        return sb_checkpoints.Checkpoint(final, written.meta,
                                         {key: final / path.name for key, path in written.paramfiles.items()})

    def remove_partial_checkpoints(self) -> None:
        """Remove the hidden folders of saves that were cut short (a process killed while saving)."""
        for folder in Path(self.checkpoints_dir).glob(PARTIAL_PREFIX + "*"):
            logger.warning("removing %s: a checkpoint whose save was cut short (the run resumes from the last "
                           "complete one)", folder)
            shutil.rmtree(folder, ignore_errors=True)


def _partial(path: Path) -> Path:
    return path.with_name(PARTIAL_PREFIX + path.name)
