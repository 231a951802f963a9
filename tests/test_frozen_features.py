"""Which file is a run's APC model (frozen_features.run_apc_file), and the callers that rely on it:
obtain_apc (loads apc_path or pretrains) and realignment (refuses to pretrain)."""
from __future__ import annotations

from pathlib import Path

import pytest

from surprisal_cc.errors import ConfigurationError
from surprisal_cc.frozen_features import obtain_apc, run_apc_file


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
    assert run_apc_file(hparams, explicit=files / "given.pt") == files / "given.pt"


def test_apc_path_comes_before_the_export_of_the_runs_pretraining(files):
    hparams = {"apc_path": str(files / "loaded.pt"), "apc_export_path": str(files / "exp" / "apc" / "apc.pt")}
    assert run_apc_file(hparams) == files / "loaded.pt"


def test_apc_path_null_is_the_export_of_the_runs_pretraining(files):
    export = files / "exp" / "apc_other" / "apc.pt"
    assert run_apc_file({"apc_path": None, "apc_export_path": str(export)}) == export
    # a run folder whose hparams predate apc_export_path: its default place
    assert run_apc_file({"apc_path": None, "experiment_root": str(files / "exp")}) == files / "exp" / "apc" / "apc.pt"


def test_a_relative_path_is_looked_for_where_the_recipe_ran_then_as_given(files, tmp_path_factory, monkeypatch):
    hparams = {"output_folder": "exp/run/", "apc_path": "loaded.pt"}
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(elsewhere)  # the run folder is read from another working directory
    assert run_apc_file(hparams, run=files / "exp" / "run") == files.resolve() / "loaded.pt"
    (elsewhere / "loaded.pt").write_bytes(b"")  # found where the recipe ran first
    assert run_apc_file(hparams, run=files / "exp" / "run") == files.resolve() / "loaded.pt"
    assert run_apc_file(hparams, run=files / "exp") == Path("loaded.pt")  # not its output_folder: as given
    assert run_apc_file(hparams) == Path("loaded.pt")  # no run folder: the working directory
    (elsewhere / "loaded.pt").unlink()
    with pytest.raises(ConfigurationError, match="^--apc loaded.pt does not exist in the working directory"):
        run_apc_file({}, explicit="loaded.pt", run=files / "exp" / "run")  # a command-line path: as given
    assert run_apc_file(hparams, explicit=files / "given.pt", run=files / "exp" / "run") == files / "given.pt"


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
    assert str(err.value) == (f"apc_path nope.pt does not exist in {files.resolve()} or the working directory "
                              f"{files / 'exp'}: do this")
    with pytest.raises(ConfigurationError, match="^--apc nope.pt does not exist in the working directory"):
        run_apc_file({"apc_path": str(files / "loaded.pt")}, explicit="nope.pt")  # no fallback from a given path
    with pytest.raises(ConfigurationError, match="pretrain one with recipes/LibriSpeech/pretrain_apc.py"):
        run_apc_file({"apc_path": str(files / "nope.pt")})  # what to do, by default


def _encoder(controller: str = "surprisal", input_size: int = 512):
    from surprisal_cc.architectures import build_encoder

    return build_encoder("conditional", input_size=input_size, num_outputs=42, controller=controller)


def test_obtain_apc_loads_apc_path_and_needs_none_for_filterbanks(tmp_path):
    from surprisal_cc.apc import APCModel, save_apc

    hparams = {"input_features": "apc", "encoder_module": _encoder(), "apc_path": str(tmp_path / "apc.pt")}
    with pytest.raises(ConfigurationError, match=f"^apc_path {tmp_path / 'apc.pt'} does not exist: pretrain one"):
        obtain_apc(hparams, {}, {})
    save_apc(APCModel(), tmp_path / "apc.pt")
    assert isinstance(obtain_apc(hparams, {}, {}), APCModel)
    fbank = {"input_features": "fbank", "encoder_module": _encoder("random", 80), "apc_path": "/nope.pt"}
    assert obtain_apc(fbank, {}, {}) is None


def test_realignment_loads_the_apc_the_run_trained_with_and_pretrains_none(tmp_path, monkeypatch):
    from surprisal_cc import realign

    hparams = {"input_features": "apc", "encoder_module": _encoder(), "prepare_options": {}, "apc_path": None,
               "apc_export_path": str(tmp_path / "apc" / "apc.pt")}
    monkeypatch.setattr(realign, "load_run", lambda *args, **kwargs: (hparams, None, None))
    prepare = lambda: {"train": str(tmp_path / "train.csv")}  # noqa: E731
    for apc_path, key in ((None, "apc_export_path"), (str(tmp_path / "nope.pt"), "apc_path")):
        hparams["apc_path"] = apc_path
        with pytest.raises(ConfigurationError, match=f"^{key} .* does not exist.*: give apc_path the APC model the "
                                                     "run trained with$"):
            next(realign.realign_run(tmp_path, prepare=prepare))
