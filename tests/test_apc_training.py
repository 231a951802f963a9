"""Tests for surprisal_cc.training.apc_training: an existing export or checkpoints are reused only under the same settings."""
from __future__ import annotations

import functools
import json

import pytest
import torch
from speechbrain.dataio.dataset import DynamicItemDataset
from speechbrain.utils.checkpoints import Checkpointer
from speechbrain.utils.epoch_loop import EpochCounter
from speechbrain.utils.train_logger import FileTrainLogger

from surprisal_cc.model.apc import APCModel, load_apc, save_apc
from surprisal_cc.training.apc_training import SETTINGS_FILE, data_digest, pretrain_apc
from surprisal_cc.training.augment import SpeedPerturbation
from surprisal_cc.errors import ConfigurationError


def apc_hparams(folder, residual=False, epochs=1, lr=0.001, batch_size=2) -> dict:
    """The hparams pretrain_apc reads, as hparams/common/apc.yaml builds them (a small model)."""
    model = APCModel(input_size=4, hidden_size=8, residual=residual)
    counter = EpochCounter(epochs)
    return {"apc_model": model, "apc_epoch_counter": counter, "apc_opt_class": functools.partial(torch.optim.Adam, lr=lr),
            "apc_checkpointer": Checkpointer(folder / "save", recoverables={"apc": model, "counter": counter}),
            "apc_output_folder": str(folder), "apc_export_path": str(folder / "apc.pt"),
            "apc_loader_options": {"batch_size": batch_size, "shuffle": True}, "apc_max_grad_norm": 5.0,
            "apc_speed_perturbation": SpeedPerturbation([]), "precision": "fp32",
            "train_logger": FileTrainLogger(str(folder / "train_log.txt"))}


def tiny_datasets():
    torch.manual_seed(0)
    data = {}
    for split, n in (("train", 4), ("valid", 2)):
        data[split] = DynamicItemDataset({f"{split}{i}": {"fbank": torch.randn(3 + i, 4)} for i in range(n)})
        data[split].set_output_keys(["id", "fbank"])
    return data


def test_pretraining_stores_its_settings_and_reuses_the_export_under_the_same_settings(tmp_path):
    export = pretrain_apc(tiny_datasets(), apc_hparams(tmp_path), {"device": "cpu"})
    blob = torch.load(export, weights_only=True)
    assert blob["training"] == {"apc_epochs": 1, "apc_lr": 0.001, "apc_batch_size": 2, "apc_max_grad_norm": 5.0,
                                "apc_speed_perturb": [], "apc_data": data_digest({"train": [f"train{i}" for i in range(4)],
                                                                                  "valid": ["valid0", "valid1"]})}
    assert json.loads((tmp_path / "save" / SETTINGS_FILE).read_text())["config"]["residual"] is False
    mtime = export.stat().st_mtime_ns
    assert pretrain_apc({}, apc_hparams(tmp_path), {"device": "cpu"}) == export  # nothing retrained
    assert export.stat().st_mtime_ns == mtime


def test_an_export_made_on_other_data_is_refused(tmp_path):
    """The same settings on other utterances are another model: its export is not taken for this one."""
    export = pretrain_apc(tiny_datasets(), apc_hparams(tmp_path), {"device": "cpu"})
    other = tiny_datasets()
    other["train"] = DynamicItemDataset({f"other{i}": {"fbank": torch.randn(4, 4)} for i in range(4)})
    with pytest.raises(ConfigurationError, match=r"apc_data \(the training and validation utterances\): stored"):
        pretrain_apc(other, apc_hparams(tmp_path), {"device": "cpu"})
    assert pretrain_apc(tiny_datasets(), apc_hparams(tmp_path), {"device": "cpu"}) == export


@pytest.mark.parametrize("changed, named", [({"residual": True}, "apc_residual: stored False, requested True"),
                                            ({"epochs": 3}, "apc_epochs: stored 1, requested 3"),
                                            ({"lr": 0.01}, "apc_lr: stored 0.001, requested 0.01"),
                                            ({"batch_size": 4}, "apc_batch_size: stored 2, requested 4")])
def test_an_export_made_with_other_settings_is_refused(tmp_path, changed, named):
    save_apc(APCModel(input_size=4, hidden_size=8), tmp_path / "apc.pt",
             training={"apc_epochs": 1, "apc_lr": 0.001, "apc_batch_size": 2})
    with pytest.raises(ConfigurationError) as info:
        pretrain_apc({}, apc_hparams(tmp_path, **changed), {"device": "cpu"})
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "apc.pt") in message and named in message
    assert "apc_output_folder" in message


def test_an_old_export_without_training_settings_is_compared_by_its_model_configuration(tmp_path):
    old = APCModel(input_size=4, hidden_size=8)
    torch.save({"config": {"input_size": 4, "hidden_size": 8, "num_layers": 2, "dropout": 0.5, "leaky_slope": 0.125,
                           "input_scale": True, "residual": False}, "state_dict": old.state_dict()}, tmp_path / "apc.pt")
    assert pretrain_apc({}, apc_hparams(tmp_path, epochs=5, lr=0.1), {"device": "cpu"}) == tmp_path / "apc.pt"
    with pytest.raises(ConfigurationError, match="apc_residual: stored False, requested True"):
        pretrain_apc({}, apc_hparams(tmp_path, residual=True), {"device": "cpu"})
    assert load_apc(tmp_path / "apc.pt").residual is False


def test_checkpoints_made_with_other_settings_are_refused(tmp_path):
    hparams = apc_hparams(tmp_path)
    hparams["apc_epoch_counter"].limit = 0  # "interrupted" before any training: settings and a checkpoint
    with pytest.raises(ConfigurationError, match="holds no APC checkpoint to export"):  # untrained: not exported
        pretrain_apc(tiny_datasets(), hparams, {"device": "cpu"})
    assert not (tmp_path / "apc.pt").exists()
    hparams["apc_checkpointer"].save_checkpoint()
    with pytest.raises(ConfigurationError) as info:
        pretrain_apc({}, apc_hparams(tmp_path, residual=True), {"device": "cpu"})
    assert str(tmp_path / "save") in str(info.value) and "apc_residual: stored False, requested True" in str(info.value)
    # checkpoints without a settings file (an older run) are resumed as before
    (tmp_path / "save" / SETTINGS_FILE).unlink()
    assert pretrain_apc(tiny_datasets(), apc_hparams(tmp_path, residual=True), {"device": "cpu"}).is_file()


def test_an_export_is_checked_and_reused_without_a_checkpointer(tmp_path):
    """A run loaded without side effects (apc_checkpointer null, as realignment loads one) reuses its
    export after the same check."""
    export = pretrain_apc(tiny_datasets(), apc_hparams(tmp_path), {"device": "cpu"})
    inert = {**apc_hparams(tmp_path), "apc_checkpointer": None}
    assert pretrain_apc({}, inert, {"device": "cpu"}) == export
    with pytest.raises(ConfigurationError, match="apc_residual: stored False, requested True"):
        pretrain_apc({}, {**apc_hparams(tmp_path, residual=True), "apc_checkpointer": None}, {"device": "cpu"})


def test_a_broken_settings_file_is_one_line_naming_it(tmp_path):
    hparams = apc_hparams(tmp_path)
    hparams["apc_epoch_counter"].limit = 0
    with pytest.raises(ConfigurationError, match="holds no APC checkpoint to export"):  # untrained: not exported
        pretrain_apc(tiny_datasets(), hparams, {"device": "cpu"})
    assert not (tmp_path / "apc.pt").exists()
    hparams["apc_checkpointer"].save_checkpoint()
    (tmp_path / "save" / SETTINGS_FILE).write_text('{"config": {"resid')  # cut short
    with pytest.raises(ConfigurationError, match=f"{SETTINGS_FILE} is not the JSON"):
        pretrain_apc({}, apc_hparams(tmp_path), {"device": "cpu"})
