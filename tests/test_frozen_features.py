"""Which file is a run's APC model (frozen_features.run_apc_file), and the callers that rely on it:
obtain_apc (loads apc_path or pretrains), the --test_only check and realignment (load the run's export,
pretrain none)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from surprisal_cc.errors import ConfigurationError
from surprisal_cc.training.frozen_features import obtain_apc, run_apc_file

TODO = "do this"


@pytest.fixture
def files(tmp_path):
    """Where a recipe ran (``tmp_path``), with an APC model in each place a run can name."""
    for name in ("given.pt", "loaded.pt", "exp/apc/apc.pt", "exp/apc_other/apc.pt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "exp" / "run").mkdir()
    return tmp_path


def test_an_explicit_path_wins(files):
    hparams = {"apc_path": str(files / "loaded.pt"), "apc_export_path": str(files / "exp" / "apc" / "apc.pt")}
    assert run_apc_file(hparams, explicit=files / "given.pt", todo=TODO) == files / "given.pt"


def test_apc_path_comes_before_the_export_of_the_runs_pretraining(files):
    hparams = {"apc_path": str(files / "loaded.pt"), "apc_export_path": str(files / "exp" / "apc" / "apc.pt")}
    assert run_apc_file(hparams, todo=TODO) == files / "loaded.pt"


def test_apc_path_null_is_the_export_of_the_runs_pretraining(files):
    export = files / "exp" / "apc_other" / "apc.pt"
    assert run_apc_file({"apc_path": None, "apc_export_path": str(export)}, todo=TODO) == export
    # hparams/common/apc.yaml sets apc_export_path: no second default where it is unset
    with pytest.raises(ConfigurationError) as err:
        run_apc_file({"apc_path": None, "experiment_root": str(files / "exp")}, todo=TODO)
    assert str(err.value) == ("apc_path is null and apc_export_path is unset (hparams/common/apc.yaml sets it): "
                              "do this")


def test_a_relative_path_is_looked_for_where_the_recipe_ran_then_as_given(files, tmp_path_factory, monkeypatch):
    hparams = {"output_folder": "exp/run/", "apc_path": "loaded.pt"}
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(elsewhere)  # the run folder is read from another working directory
    assert run_apc_file(hparams, run=files / "exp" / "run", todo=TODO) == files / "loaded.pt"
    (elsewhere / "loaded.pt").write_bytes(b"")  # found where the recipe ran first
    assert run_apc_file(hparams, run=files / "exp" / "run", todo=TODO) == files / "loaded.pt"
    assert run_apc_file(hparams, run=files / "exp", todo=TODO) == Path("loaded.pt")  # not its output_folder: as given
    assert run_apc_file(hparams, todo=TODO) == Path("loaded.pt")  # no run folder: the working directory
    (elsewhere / "loaded.pt").unlink()
    with pytest.raises(ConfigurationError, match="^--apc loaded.pt does not exist in the working directory"):
        run_apc_file({}, explicit="loaded.pt", run=files / "exp" / "run", todo=TODO)  # a command-line path: as given
    assert run_apc_file(hparams, explicit=files / "given.pt", run=files / "exp" / "run", todo=TODO) == \
        files / "given.pt"


def test_a_run_folder_reached_through_a_linked_results_folder_is_still_where_the_recipe_ran(files, tmp_path_factory,
                                                                                             monkeypatch):
    """results/ a link to another disk: the run folder as named ends with output_folder, its target does not."""
    store = tmp_path_factory.mktemp("store")
    (store / "run").mkdir()
    (files / "results").symlink_to(store, target_is_directory=True)
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    hparams = {"output_folder": "./results//run", "apc_path": "loaded.pt"}
    assert run_apc_file(hparams, run=files / "results" / "run", todo=TODO) == files / "loaded.pt"
    monkeypatch.chdir(files)  # a relative run folder, from where the recipe ran
    assert run_apc_file(hparams, run="results/run", todo=TODO) == files / "loaded.pt"


def test_a_missing_file_is_one_line_naming_the_key_where_it_looked_and_what_to_do(files, monkeypatch):
    monkeypatch.chdir(files)
    cases = [({"apc_path": str(files / "nope.pt")}, None, f"apc_path {files / 'nope.pt'} does not exist: do this"),
             ({"apc_path": str(files / "exp")}, None, f"apc_path {files / 'exp'} is a folder, not an APC model file: "
                                                      "do this"),
             ({"apc_path": None, "apc_export_path": "exp/nope.pt"}, None,
              f"apc_export_path exp/nope.pt does not exist in the working directory {files}: do this"),
             ({"output_folder": "exp/run", "apc_path": "nope.pt"}, files / "exp" / "run",
              f"apc_path nope.pt does not exist in the working directory {files}: do this")]  # the recipe ran here
    for hparams, run, line in cases:
        with pytest.raises(ConfigurationError) as err:
            run_apc_file(hparams, run=run, todo="do this")
        assert str(err.value) == line
    monkeypatch.chdir(files / "exp")
    with pytest.raises(ConfigurationError) as err:
        run_apc_file({"output_folder": "exp/run", "apc_path": "nope.pt"}, run=files / "exp" / "run", todo="do this")
    assert str(err.value) == (f"apc_path nope.pt does not exist in {files} or the working directory "
                              f"{files / 'exp'}: do this")
    with pytest.raises(ConfigurationError, match="^--apc nope.pt does not exist in the working directory"):
        run_apc_file({"apc_path": str(files / "loaded.pt")}, explicit="nope.pt", todo=TODO)  # no fallback from it
    with pytest.raises(TypeError):
        run_apc_file({"apc_path": str(files / "nope.pt")})  # each caller says what to do


def _encoder(controller: str = "surprisal", input_size: int = 512):
    from surprisal_cc.model.architectures import build_encoder

    return build_encoder("conditional", input_size=input_size, num_outputs=42, controller=controller)


def test_obtain_apc_loads_apc_path_and_needs_none_for_filterbanks(tmp_path):
    from surprisal_cc.model.apc import APCModel, save_apc

    hparams = {"input_features": "apc", "encoder_module": _encoder(), "apc_path": str(tmp_path / "apc.pt")}
    with pytest.raises(ConfigurationError, match=f"^apc_path {tmp_path / 'apc.pt'} does not exist: pretrain one"):
        obtain_apc(hparams, {}, {})
    save_apc(APCModel(), tmp_path / "apc.pt")
    assert isinstance(obtain_apc(hparams, {}, {}), APCModel)
    fbank = {"input_features": "fbank", "encoder_module": _encoder("random", 80), "apc_path": "/nope.pt"}
    assert obtain_apc(fbank, {}, {}) is None


def _apc_hparams(**keys):
    """The hparams of a run that pretrained its APC: apc_path null, its export relative to where the recipe
    ran, and the pretraining settings of ``hparams/common/apc.yaml``."""
    import functools

    import torch
    from speechbrain.utils.epoch_loop import EpochCounter

    from surprisal_cc.model.apc import APCModel

    return {"input_features": "apc", "encoder_module": _encoder(), "prepare_options": {}, "apc_path": None,
            "output_folder": "exp/run", "apc_export_path": "exp/apc/apc.pt", "apc_output_folder": "exp/apc",
            "apc_model": APCModel(hidden_size=8), "apc_epoch_counter": EpochCounter(2),
            "apc_opt_class": functools.partial(torch.optim.Adam, lr=3e-4), "apc_loader_options": {"batch_size": 4},
            **keys}


def _refuse_pretraining(monkeypatch):
    from surprisal_cc.training import frozen_features

    def pretrain(*args, **kwargs):
        raise AssertionError("pretrained an APC model")

    monkeypatch.setattr(frozen_features, "pretrain_apc_on", pretrain)


def test_a_test_only_run_loads_the_export_of_its_pretraining(tmp_path, monkeypatch):
    from surprisal_cc.training import run_checks
    from surprisal_cc.model.apc import APCModel, save_apc

    _refuse_pretraining(monkeypatch)
    monkeypatch.chdir(tmp_path)
    hparams = _apc_hparams()
    with pytest.raises(ConfigurationError, match="^apc_export_path exp/apc/apc.pt does not exist in the working "
                                                 "directory .*: --test_only needs the APC the run trained with"):
        run_checks.check_apc_path(hparams, {"test_only": True})
    (tmp_path / "exp" / "apc").mkdir(parents=True)
    save_apc(APCModel(hidden_size=8), tmp_path / "exp" / "apc" / "apc.pt")
    assert run_checks.check_apc_path(hparams, {"test_only": True}).hidden_size == 8
    assert run_checks.check_apc_path(hparams, {}) is None  # training: pretrain_apc_on finds the export itself
    with pytest.raises(ConfigurationError, match="^apc_export_path exp/apc/apc.pt: its features are 8-wide, and the "
                                                 "encoder's input_size is 512"):
        run_checks.check_apc_path({**hparams, "input_size": 512}, {"test_only": True})


class _Loaded(Exception):
    """Raised with the APC model that realignment puts into the Brain (the test stops there)."""


def _realign_until_the_apc_is_loaded(tmp_path, hparams, monkeypatch):
    import types

    from surprisal_cc.alignment import realign

    class Modules(dict):
        def __setitem__(self, key, value):
            raise _Loaded(value.apc)

    brain = types.SimpleNamespace(modules=Modules(), device="cpu")
    monkeypatch.setattr(realign, "load_run", lambda *args, **kwargs: (hparams, brain, None))
    (tmp_path / "train.csv").write_text("ID,duration,wav\nu1,1.0,u1.flac\n")
    prepare = lambda: {"train": str(tmp_path / "train.csv")}  # noqa: E731
    return next(realign.realign_run(tmp_path / "exp" / "run", prepare=prepare))


def test_realignment_loads_the_export_found_where_the_recipe_ran(tmp_path, tmp_path_factory, monkeypatch):
    """Read from another working directory, a run's relative export is the one where the recipe ran."""
    from surprisal_cc.model.apc import APCModel, save_apc
    from surprisal_cc.training.apc_training import pretraining_settings

    _refuse_pretraining(monkeypatch)
    (tmp_path / "exp" / "run").mkdir(parents=True)
    (tmp_path / "exp" / "apc").mkdir()
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "exp" / "apc").mkdir(parents=True)
    save_apc(APCModel(hidden_size=4), elsewhere / "exp" / "apc" / "apc.pt")  # not the run's
    monkeypatch.chdir(elsewhere)
    hparams = _apc_hparams()
    export = tmp_path / "exp" / "apc" / "apc.pt"
    save_apc(APCModel(hidden_size=8), export, training=pretraining_settings(hparams)["training"])
    with pytest.raises(_Loaded) as loaded:
        _realign_until_the_apc_is_loaded(tmp_path, hparams, monkeypatch)
    assert loaded.value.args[0].hidden_size == 8
    # an export pretrained with other settings than the run's is refused, not realigned with
    save_apc(APCModel(hidden_size=8), export, training={"apc_epochs": 9})
    todo = "give the APC model the run trained with: --overrides '{apc_path: FILE}' (realign_run(overrides=...))"
    with pytest.raises(ConfigurationError) as refused:  # realignment pretrains none: no advice to delete the export
        _realign_until_the_apc_is_loaded(tmp_path, hparams, monkeypatch)
    assert str(refused.value) == (f"{export}: APC pretrained with other settings (apc_epochs: stored 9, "
                                  f"requested 2); {todo}")
    # a file that is not an APC model: one line naming it once, then what to do
    export.write_text("not a model")
    with pytest.raises(ConfigurationError) as refused:
        _realign_until_the_apc_is_loaded(tmp_path, hparams, monkeypatch)
    assert str(refused.value) == (f"apc_export_path {export}: cannot be loaded as a torch file (UnpicklingError): "
                                  f"{todo}")


def test_realignment_loads_the_apc_the_run_trained_with_and_pretrains_none(tmp_path, monkeypatch):
    from surprisal_cc.alignment import realign

    hparams = {"input_features": "apc", "encoder_module": _encoder(), "prepare_options": {}, "apc_path": None,
               "apc_export_path": str(tmp_path / "apc" / "apc.pt")}
    monkeypatch.setattr(realign, "load_run", lambda *args, **kwargs: (hparams, None, None))
    prepare = lambda: {"train": str(tmp_path / "train.csv")}  # noqa: E731
    for apc_path, key in ((None, "apc_export_path"), (str(tmp_path / "nope.pt"), "apc_path")):
        hparams["apc_path"] = apc_path
        todo = "give the APC model the run trained with: --overrides '{apc_path: FILE}' (realign_run(overrides=...))"
        with pytest.raises(ConfigurationError, match=f"^{key} .* does not exist.*: {re.escape(todo)}$"):
            next(realign.realign_run(tmp_path, prepare=prepare))


def test_training_reads_audio_at_the_features_sample_rate(tmp_path):
    """The feature cache and, without one, the datasets read each file at feature_config's sample rate, as
    inference does (not at 16 kHz whatever the model's rate), and refuse one too short for a frame."""
    import csv

    import numpy as np
    import soundfile as sf

    from surprisal_cc.training.cache import FeatureCache
    from surprisal_cc.data.errors import BadAudioError
    from surprisal_cc.training.datasets import dataio_prep
    from surprisal_cc.model.feature_config import FeatureConfig
    from surprisal_cc.training.frozen_features import fill_cache
    from surprisal_cc.training.labels import label_encoder_for, phone_set

    config = FeatureConfig(sample_rate=8000, n_mels=40)
    manifest = tmp_path / "test.csv"
    sf.write(tmp_path / "u1.flac", np.random.default_rng(0).standard_normal(16000).astype("float32") * 0.1, 16000)
    with open(manifest, "w", newline="") as f:
        csv.writer(f).writerows([["ID", "duration", "wav", "spk_id", "wrd", "phn"],
                                 ["u1", "1.0", tmp_path / "u1.flac", "s", "A", "AH"]])
    cache = FeatureCache(tmp_path / "cache", None, config)
    fill_cache(cache, {"test": str(manifest)}, batch_size=1)
    assert cache.load("u1")["fbank"].shape[0] == config.num_frames(8000)  # 1 s at 8 kHz, not 16,000 samples
    hparams = {"label_encoder": label_encoder_for(phone_set("librispeech")), "target_unit": "phone",
               "feature_config": config}
    test = dataio_prep(hparams, {"test": str(manifest)}, cache=None)["test"]
    assert test[0]["sig"].shape == (8000,)
    sf.write(tmp_path / "u1.flac", np.zeros(config.min_samples * 2 - 2, dtype="float32"), 16000)  # one sample short
    with pytest.raises(BadAudioError, match=r"u1.flac: too short .* samples at 8000 Hz: one frame"):
        dataio_prep(hparams, {"test": str(manifest)}, cache=None)["test"][0]
