"""Tests for surprisal_cc.training.schedulers: the learning-rate schedules chosen with ``lr_schedule``."""
from __future__ import annotations

import pytest
import torch
from speechbrain.nnet.schedulers import NewBobScheduler
from speechbrain.utils.checkpoints import Checkpointer

from data_fixtures import REPO
from surprisal_cc.training.run_settings import load_hparams
from surprisal_cc.training.schedulers import HoldDecayScheduler, anneal, lr_scheduler


def test_hold_decay_holds_then_reaches_the_final_rate_at_the_last_epoch():
    schedule = HoldDecayScheduler(1e-3, number_of_epochs=10, hold_epochs=4, final_value=1e-5)
    rates = [schedule.value(epoch) for epoch in range(1, 11)]
    assert rates[:4] == [1e-3] * 4
    assert rates[-1] == pytest.approx(1e-5)
    ratios = [b / a for a, b in zip(rates[4:], rates[5:])]
    assert ratios == pytest.approx([ratios[0]] * len(ratios)) and ratios[0] < 1  # geometric
    assert schedule.value(11) == pytest.approx(1e-5)  # past the budget it stays at the final rate
    assert schedule(4) == (1e-3, pytest.approx(rates[4]))  # after epoch 4: (its rate, epoch 5's)


def test_anneal_gives_newbob_the_loss_and_epoch_schedules_the_epoch():
    newbob = lr_scheduler("newbob", initial_value=1.0, annealing_factor=0.5)
    assert isinstance(newbob, NewBobScheduler)
    assert anneal(newbob, epoch=1, valid_loss=10.0) == 1.0
    assert anneal(newbob, epoch=2, valid_loss=10.0) == 0.5  # the loss stalled
    decay = lr_scheduler("hold_decay", initial_value=1.0, number_of_epochs=4, hold_fraction=0.5, final_fraction=0.25)
    assert [anneal(decay, epoch, valid_loss=10.0) for epoch in (1, 2, 3)] == pytest.approx([1.0, 0.5, 0.25])


@pytest.mark.parametrize("kwargs, match", [
    (dict(number_of_epochs=5, hold_epochs=5, final_value=0.1), "hold_epochs"),
    (dict(number_of_epochs=5, hold_epochs=2, final_value=2.0), "final_value"),
])
def test_hold_decay_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HoldDecayScheduler(1.0, **kwargs)
    with pytest.raises(ValueError, match="lr_schedule"):
        lr_scheduler("cosine", initial_value=1.0)


def test_the_first_epoch_trains_at_the_peak_rate_whatever_the_hold():
    """The optimizer starts at the peak rate and the schedule sets the rate after each epoch: the rate
    it reports for epoch 1 is the one epoch 1 trained at, and the last epoch still ends at the final rate."""
    schedule = lr_scheduler("hold_decay", initial_value=1.0, number_of_epochs=1, hold_fraction=0.9)
    assert schedule.hold_epochs == 0 and schedule(1) == (1.0, 1.0)
    schedule = HoldDecayScheduler(1.0, number_of_epochs=5, hold_epochs=0, final_value=0.0625)
    assert [schedule.value(e) for e in range(1, 7)] == pytest.approx([1.0, 0.5, 0.25, 0.125, 0.0625, 0.0625])
    assert [schedule.value(e) for e in range(1, 6)] == [HoldDecayScheduler(1.0, 5, 1, 0.0625).value(e) for e in range(1, 6)]


def test_hparams_choose_the_schedule_and_it_checkpoints(tmp_path):
    overrides = f"data_folder: x\nexperiment_root: {tmp_path}\nnumber_of_epochs: 10\nlr: 0.002\n"
    hparams = load_hparams(str(REPO / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml"),
                           overrides + "lr_schedule: hold_decay")
    schedule = hparams["lr_annealing"]
    assert isinstance(schedule, HoldDecayScheduler) and schedule.hold_epochs == 4
    assert schedule.value(10) == pytest.approx(0.002 * 0.05)
    checkpointer = Checkpointer(tmp_path / "ckpt", {"lr_annealing": schedule, "model": torch.nn.Linear(1, 1)})
    checkpointer.save_checkpoint()
    assert checkpointer.recover_if_possible() is not None
    default = load_hparams(str(REPO / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml"), overrides)
    assert isinstance(default["lr_annealing"], NewBobScheduler)


def test_a_checkpoint_of_another_schedule_is_warned_about(tmp_path, caplog):
    """A run resumed with another number_of_epochs follows its own schedule from the next epoch (the
    rate may rise again); the recovery says so, and a checkpoint of the same schedule is quiet."""
    import logging

    from surprisal_cc.training.schedulers import lr_scheduler

    saved = lr_scheduler("hold_decay", initial_value=1e-3, number_of_epochs=30)
    saved._save(tmp_path / "scheduler.ckpt")
    with caplog.at_level(logging.WARNING, logger="surprisal_cc.training.schedulers"):
        lr_scheduler("hold_decay", initial_value=1e-3, number_of_epochs=30)._recover(tmp_path / "scheduler.ckpt")
        assert not caplog.records
        lr_scheduler("hold_decay", initial_value=1e-3, number_of_epochs=40)._recover(tmp_path / "scheduler.ckpt")
    assert "(0.001, 30, 12, 5e-05); this run's is (0.001, 40, 16, 5e-05)" in caplog.text


def test_a_schedule_of_numpy_numbers_checkpoints_python_floats(tmp_path):
    """numpy numbers pass the checks as their Python twins do, and the schedulers keep Python floats: a
    NewBob checkpoint holding a numpy scalar would not load (torch.load refuses it by default)."""
    import numpy as np

    newbob = lr_scheduler("newbob", initial_value=np.float32(0.5), annealing_factor=np.float64(0.5))
    assert type(newbob.hyperparam_value) is float and type(newbob.annealing_factor) is float
    newbob.save(tmp_path / "newbob.ckpt")
    recovered = lr_scheduler("newbob", initial_value=1.0)
    recovered.load(tmp_path / "newbob.ckpt")
    assert recovered.hyperparam_value == 0.5
    decay = lr_scheduler("hold_decay", initial_value=np.float32(0.5), number_of_epochs=np.int64(4))
    assert (type(decay.initial_value), type(decay.number_of_epochs)) == (float, int)
