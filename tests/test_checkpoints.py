"""Checkpoints that appear whole or not at all: a process killed while saving leaves the last complete
checkpoint as the one a run resumes from."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from surprisal_cc.training.checkpoints import PARTIAL_PREFIX, REPLACED_PREFIX, Checkpointer

# A process that saves one complete checkpoint, then dies (os._exit, no clean-up) while writing the
# second one: after the model's file, before the counter's.
DIES_WHILE_SAVING = textwrap.dedent("""
    import os, sys
    import torch
    from torch import nn
    from speechbrain.utils.checkpoints import mark_as_loader, mark_as_saver, register_checkpoint_hooks
    from surprisal_cc.training.checkpoints import Checkpointer

    @register_checkpoint_hooks
    class Counter:
        def __init__(self):
            self.value, self.die = 0, False

        @mark_as_saver
        def save(self, path):
            if self.die:
                os._exit(9)
            with open(path, "w") as out:
                out.write(str(self.value))

        @mark_as_loader
        def load(self, path, end_of_epoch=True):
            self.value = int(open(path).read())

    torch.manual_seed(0)
    model, counter = nn.Linear(4, 4), Counter()
    checkpointer = Checkpointer(sys.argv[1], recoverables={"model": model, "counter": counter})
    counter.value = 1
    checkpointer.save_checkpoint(meta={"step": 1})
    with torch.no_grad():
        model.weight.add_(1.0)
    counter.value, counter.die = 2, True
    checkpointer.save_checkpoint(meta={"step": 2})
""")


def test_a_process_killed_while_saving_resumes_from_the_last_complete_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "save"
    done = subprocess.run([sys.executable, "-c", DIES_WHILE_SAVING, str(folder)], capture_output=True, text=True)
    assert done.returncode == 9, done.stderr
    partial = [p for p in folder.iterdir() if p.name.startswith(PARTIAL_PREFIX)]
    assert len(partial) == 1 and (partial[0] / "model.ckpt").is_file()  # the second save, cut short

    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    expected = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    checkpointer = Checkpointer(folder, recoverables={"model": model})
    assert [c.meta["step"] for c in checkpointer.list_checkpoints()] == [1]
    assert checkpointer.recover_if_possible() is not None
    assert torch.equal(model.weight, expected)  # the first checkpoint's weights, not the half-saved second's

    checkpointer.save_and_keep_only(meta={"step": 3}, num_to_keep=1)  # the next save clears the cut-short folder
    assert [p.name.startswith("CKPT+") for p in folder.iterdir()] == [True]
    assert [c.meta["step"] for c in checkpointer.list_checkpoints()] == [3]


def test_a_save_that_fails_leaves_no_checkpoint(tmp_path: Path) -> None:
    class Broken(nn.Module):
        def state_dict(self, *args, **kwargs):
            raise OSError("disk full")

    checkpointer = Checkpointer(tmp_path, recoverables={"model": nn.Linear(2, 2), "broken": Broken()})
    with pytest.raises(OSError, match="disk full"):
        checkpointer.save_checkpoint()
    assert checkpointer.list_checkpoints() == [] and checkpointer.find_checkpoint() is None


def test_saved_checkpoints_load_as_speechbrains_do(tmp_path: Path) -> None:
    """The paths of the returned checkpoint are the final ones, a custom name saved again replaces its
    folder, and SpeechBrain's own Checkpointer reads what this one wrote."""
    from speechbrain.utils.checkpoints import Checkpointer as SpeechBrainCheckpointer

    model = nn.Linear(3, 2)
    checkpointer = Checkpointer(tmp_path, recoverables={"model": model})
    saved = checkpointer.save_checkpoint(meta={"PER": 40.0}, name="best")
    assert saved.path == tmp_path / "CKPT+best" and saved.paramfiles["model"].is_file()
    with torch.no_grad():
        model.bias.fill_(7.0)
    checkpointer.save_checkpoint(meta={"PER": 35.0}, name="best")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CKPT+best"]

    other = nn.Linear(3, 2)
    found = SpeechBrainCheckpointer(tmp_path, recoverables={"model": other}).recover_if_possible(min_key="PER")
    assert found.meta["PER"] == 35.0 and torch.equal(other.bias, torch.full((2,), 7.0))


@pytest.mark.parametrize("cut", ["missing", "empty"])
def test_recovery_passes_over_a_checkpoint_cut_short_by_a_checkpointer_without_the_guarantee(
        tmp_path: Path, cut: str, caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint SpeechBrain's own Checkpointer left half-written (a file missing, or empty) is
    passed over with a warning naming it; the run resumes from the newest complete one."""
    from speechbrain.utils.checkpoints import Checkpointer as SpeechBrainCheckpointer

    model, other = nn.Linear(3, 2), nn.Linear(3, 2)
    writer = SpeechBrainCheckpointer(tmp_path, recoverables={"model": model, "other": other})
    writer.save_checkpoint(meta={"step": 1})
    expected = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    newest = writer.save_checkpoint(meta={"step": 2})
    if cut == "missing":
        newest.paramfiles["other"].unlink()
    else:
        newest.paramfiles["other"].write_bytes(b"")

    with torch.no_grad():
        model.weight.zero_()
    reader = Checkpointer(tmp_path, recoverables={"model": model, "other": other})
    with caplog.at_level("WARNING", logger="surprisal_cc.training.checkpoints"):
        found = reader.recover_if_possible()
    assert found.meta["step"] == 1 and torch.equal(model.weight, expected)
    assert any(newest.path.name in r.getMessage() and "'other'" in r.getMessage() for r in caplog.records)


def test_a_custom_named_checkpoint_moved_aside_by_a_save_cut_short_is_put_back(tmp_path: Path) -> None:
    """Saving a custom name again moves the old folder aside before the new one is renamed in; a process
    killed between the two renames leaves the old one aside, and the next start puts it back."""
    model = nn.Linear(3, 2)
    checkpointer = Checkpointer(tmp_path, recoverables={"model": model})
    saved = checkpointer.save_checkpoint(meta={"PER": 40.0}, name="best")
    saved.path.rename(saved.path.with_name(REPLACED_PREFIX + saved.path.name))  # killed between the renames
    assert checkpointer.find_checkpoint() is None
    assert checkpointer.recover_if_possible().meta["PER"] == 40.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CKPT+best"]


def test_a_run_resumes_only_on_the_labels_it_started_with(tmp_path):
    """Labels rewritten in place (same manifest path) are refused on resume; moved audio, a new run in
    the folder and a resumed run without a record are not."""
    from surprisal_cc.training.label_record import TRAINING_LABELS_RECORD, check_training_labels
    from surprisal_cc.errors import ConfigurationError

    train, valid = tmp_path / "train.csv", tmp_path / "valid.csv"
    manifests = {"train": str(train), "valid": str(valid), "test": str(tmp_path / "absent.csv")}
    train.write_text("ID,duration,wav,phn\nu1,1.0,/a/u1.flac,AH B\n")
    valid.write_text("ID,duration,wav,phn\nv1,1.0,/a/v1.flac,B\n")
    run = tmp_path / "run"
    run.mkdir()
    check_training_labels(str(run), manifests, resumed=True)  # no record yet (an older run): recorded, not refused
    assert (run / TRAINING_LABELS_RECORD).is_file()
    train.write_text("ID,duration,wav,phn\nu1,1.0,/moved/u1.flac,AH B\n")
    check_training_labels(str(run), manifests, resumed=True)  # the audio moved, the labels did not
    valid.write_text("ID,duration,wav,phn\nv1,1.0,/a/v1.flac,D\n")
    with pytest.raises(ConfigurationError, match="trained on other valid labels than .*valid.csv holds now"):
        check_training_labels(str(run), manifests, resumed=True)
    check_training_labels(str(run), manifests, resumed=False)  # a new run in the folder records its own
    check_training_labels(str(run), manifests, resumed=True)
