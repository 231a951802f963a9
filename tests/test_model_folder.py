"""Writing a model folder: a new folder, a replaced one, and an export that is interrupted; reading one
whose model.json contradicts itself or its weights."""
from __future__ import annotations

import json
import os
import re

import pytest
import torch

from surprisal_cc.model import model_folder
from surprisal_cc.model.apc import APCModel, apc_config
from surprisal_cc.model.architectures import build_encoder
from surprisal_cc.model.model_folder import FORMAT_VERSION, ModelFormatError, load_model_folder, write_model_folder

ENCODER = {"name": "conditional", "input_size": 6, "num_outputs": 4, "controller": "big_only", "hidden_size": 8}


def _config(seed: int) -> dict:
    return {"format_version": FORMAT_VERSION, "encoder": ENCODER, "input_features": "fbank", "features": {"n_mels": 6},
            "labels": ["<blank>", "AH", "B", "sil"], "weights_dtype": "fp32", "seed": seed}


def _state(seed: int) -> dict:
    torch.manual_seed(seed)
    return build_encoder(**ENCODER).state_dict()


def _snapshot(folder) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_new_folder_is_written_whole_and_named_in_its_card(tmp_path):
    out = write_model_folder(tmp_path / "models" / "mine", _config(1), _state(1), None)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "encoder.pt", "model.json"]
    assert [p.name for p in out.parent.iterdir()] == ["mine"]  # nothing left beside it
    assert 'from_pretrained("mine")' in (out / "README.md").read_text()
    config, encoder, _ = load_model_folder(out)
    assert config["seed"] == 1
    assert all(torch.equal(value, _state(1)[key]) for key, value in encoder.state_dict().items())


def test_replacing_a_model_folder_keeps_a_users_files_and_drops_a_stale_apc(tmp_path):
    out = tmp_path / "mine"
    write_model_folder(out, _config(1), _state(1), None)
    (out / "apc.pt").write_bytes(b"from an older export")
    (out / "notes.txt").write_text("my notes")
    write_model_folder(out, _config(2), _state(2), None)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "encoder.pt", "model.json", "notes.txt"]
    assert (out / "notes.txt").read_text() == "my notes"
    assert load_model_folder(out)[0]["seed"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]


def _interrupted_at(src: str = "", dst: str = ""):
    """An ``os.replace`` that stops (as Ctrl-C would) at the rename from ``src`` or to ``dst``."""
    def replace(source, destination):
        if os.path.basename(source) == src or os.path.basename(destination) == dst:
            raise KeyboardInterrupt
        os.rename(source, destination)
    return replace


@pytest.mark.parametrize("failing_step", ["card", "first rename"])
def test_an_interrupted_replacement_leaves_the_previous_model(tmp_path, monkeypatch, failing_step):
    out = tmp_path / "mine"
    write_model_folder(out, _config(1), _state(1), None)
    before = _snapshot(out)
    if failing_step == "card":
        monkeypatch.setattr(model_folder, "model_card", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    else:
        monkeypatch.setattr(model_folder.os, "replace", _interrupted_at(dst=".mine.replaced"))
    with pytest.raises(KeyboardInterrupt):
        write_model_folder(out, _config(2), _state(2), None)
    assert _snapshot(out) == before
    monkeypatch.undo()
    write_model_folder(out, _config(2), _state(2), None)  # the next export cleans up after the interrupted one
    assert load_model_folder(out)[0]["seed"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]


def test_an_export_stopped_between_its_two_renames_is_recovered(tmp_path, monkeypatch):
    out = tmp_path / "mine"
    write_model_folder(out, _config(1), _state(1), None)
    (out / "notes.txt").write_text("my notes")
    monkeypatch.setattr(model_folder.os, "replace", _interrupted_at(src=".mine.partial"))
    with pytest.raises(KeyboardInterrupt):
        write_model_folder(out, _config(2), _state(2), None)
    assert not out.exists()  # the old model waits aside, complete
    monkeypatch.undo()
    write_model_folder(out, _config(3), _state(3), None)
    assert load_model_folder(out)[0]["seed"] == 3
    assert (out / "notes.txt").read_text() == "my notes"
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]


def test_the_working_folder_is_replaced_file_by_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_model_folder(model_folder.Path("."), _config(1), _state(1), None)
    write_model_folder(model_folder.Path("."), _config(2), _state(2), None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "encoder.pt", "model.json"]
    assert load_model_folder(tmp_path)[0]["seed"] == 2
    assert f'from_pretrained("{tmp_path.name}")' in (tmp_path / "README.md").read_text()


def test_a_folder_that_is_not_a_model_is_refused_and_untouched(tmp_path):
    (tmp_path / "data.txt").write_text("keep")
    with pytest.raises(model_folder.ConfigurationError, match="not a model folder"):
        write_model_folder(tmp_path, _config(1), _state(1), None)
    assert [p.name for p in tmp_path.iterdir()] == ["data.txt"]


# ----------------------------------------------------------------------------------------------
# A model.json that contradicts itself or its weights
# ----------------------------------------------------------------------------------------------
def _apc_folder(tmp_path):
    """A model folder with APC inputs: a tiny APC (6 mel bins in, 8 features out) and an encoder reading 8."""
    encoder = {**ENCODER, "input_size": 8}
    apc = APCModel(input_size=6, hidden_size=8)
    config = {**_config(1), "encoder": encoder, "input_features": "apc", "uses_apc": True}
    return write_model_folder(tmp_path / "apc_model", config, build_encoder(**encoder).state_dict(),
                              {"config": apc_config(apc), "state_dict": apc.state_dict()})


def _edited(folder, **fields):
    """``folder`` with ``fields`` of its model.json replaced (None: removed)."""
    config = json.loads((folder / "model.json").read_text())
    config.update(fields)
    config = {key: value for key, value in config.items() if value is not None}
    (folder / "model.json").write_text(json.dumps(config))
    return folder


def test_a_folder_with_apc_inputs_loads(tmp_path):
    config, _, apc = load_model_folder(_apc_folder(tmp_path))
    assert config["input_features"] == "apc" and apc.hidden_size == 8


@pytest.mark.parametrize("fields, problem", [
    ({"features": {"n_mels": 6, "bogus": 1}}, "features has unknown keys ['bogus'] (known: sample_rate, n_mels,"),
    ({"features": [6]}, "features must be an object of sample_rate, n_mels,"),
    ({"labels": "<blank> AH B sil"}, "labels must be a list of strings"),
    ({"labels": ["<blank>", "AH", "B", 3]}, "labels must be a list of strings"),
    ({"labels": ["<blank>", "AH", "B"]}, "labels lists 3 labels, but encoder.num_outputs is 4"),
    ({"blank_index": 4}, "blank_index 4 is not an index of labels (0 to 3)"),
    ({"blank_index": -1}, "blank_index -1 is not an index of labels"),
    ({"blank_index": "0"}, "blank_index '0' is not an index of labels"),
    ({"input_features": "mfcc"}, "input_features 'mfcc' is unknown (known: 'apc', 'fbank')"),
    ({"features": {"n_mels": 80}}, "encoder.input_size is 6, but input_features 'fbank' gives 80 values per frame "
                                   "(features.n_mels)"),
    ({"features": {}}, "encoder.input_size is 6, but input_features 'fbank' gives 80"),
    ({"features": {"n_mels": 6, "frame_skip": 0}}, "features.frame_skip must be a whole number of at least 1, got 0"),
    ({"features": {"n_mels": 6, "window_type": "hann"}}, "features.window_type must be one of hamming, hanning,"),
    ({"beam_size": "ten"}, "beam_size must be a whole number of at least 1, got 'ten'"),
    ({"beam_size": 0}, "beam_size must be a whole number of at least 1, got 0"),
    ({"beam_backend": "flashlight"}, "beam_backend 'flashlight' is unknown (known: auto, native, torchaudio,"),
    ({"blank_penalty": "1.5"}, "blank_penalty must be a finite number, got '1.5'"),
])
def test_an_inconsistent_model_json_is_refused_naming_the_field(tmp_path, fields, problem):
    folder = _edited(write_model_folder(tmp_path / "model", _config(1), _state(1), None), **fields)
    with pytest.raises(ModelFormatError, match="^" + re.escape(f"{folder / 'model.json'}: {problem}")):
        load_model_folder(folder)


def test_a_beam_backend_this_environment_lacks_is_refused_at_load_naming_the_file(tmp_path, monkeypatch):
    from surprisal_cc.decoding import backends

    folder = _edited(write_model_folder(tmp_path / "model", _config(1), _state(1), None), beam_backend="torchaudio")
    monkeypatch.setattr(backends, "torchaudio_available", lambda: False)
    with pytest.raises(ModelFormatError, match="^" + re.escape(
            f"{folder / 'model.json'}: beam_backend 'torchaudio' cannot run here (torchaudio ctc_decoder "
            "(flashlight-text) is not available): install it, or set beam_backend to \"native\"")):
        load_model_folder(folder)


def test_an_export_records_the_runs_blank_penalty_and_a_folder_without_one_loads(tmp_path):
    from types import SimpleNamespace

    from surprisal_cc.decoding.search import CTCBeamSearch
    from surprisal_cc.training.export import _model_config
    from surprisal_cc.model.feature_config import FeatureConfig

    hparams = {"label_encoder": SimpleNamespace(ind2lab={0: "<blank>", 1: "AH", 2: "B", 3: "sil"}),
               "feature_config": FeatureConfig(n_mels=6), "input_features": "fbank",
               "beam_searcher": CTCBeamSearch(blank=0, beam_size=4, blank_penalty=1.5), "error_rate": None}
    config = _model_config(hparams, ENCODER, False, "fp32")
    assert (config["beam_size"], config["blank_penalty"]) == (4, 1.5)
    folder = write_model_folder(tmp_path / "model", config, _state(1), None)
    assert load_model_folder(folder)[0]["blank_penalty"] == 1.5
    assert "blank_penalty" not in load_model_folder(_edited(folder, blank_penalty=None))[0]


@pytest.mark.parametrize("fields, problem", [
    ({"features": {"n_mels": 40}}, "features.n_mels is 40, but the APC model (apc.pt) reads 6 mel bins per frame"),
    ({"input_features": "fbank"}, "encoder.input_size is 8, but input_features 'fbank' gives 6 values per frame"),
    ({"uses_apc": False}, "uses_apc is false, but this model runs the APC (input_features 'apc'"),
])
def test_a_model_json_that_does_not_fit_its_apc_is_refused(tmp_path, fields, problem):
    folder = _edited(_apc_folder(tmp_path), **fields)
    with pytest.raises(ModelFormatError, match="^" + re.escape(f"{folder / 'model.json'}: {problem}")):
        load_model_folder(folder)


def test_an_apc_of_another_width_is_refused(tmp_path):
    folder = _apc_folder(tmp_path)
    apc = APCModel(input_size=6, hidden_size=16)
    torch.save({"config": apc_config(apc), "state_dict": apc.state_dict()}, folder / "apc.pt")
    with pytest.raises(ModelFormatError, match=re.escape("encoder.input_size is 8, but input_features 'apc' gives 16 "
                                                         "values per frame (the APC model's hidden size)")):
        load_model_folder(folder)


def test_weights_that_do_not_fit_are_refused_saying_what_does_not_fit(tmp_path):
    folder = write_model_folder(tmp_path / "model", _config(1), _state(1), None)
    state = torch.load(folder / "encoder.pt", weights_only=True)
    state["extra"] = state.pop("pre_net.forward_gru.weight_ih_l0")
    torch.save(state, folder / "encoder.pt")
    _edited(folder, encoder={**ENCODER, "hidden_size": 4})
    with pytest.raises(ModelFormatError) as raised:
        load_model_folder(folder)
    message = str(raised.value)
    assert message.startswith(f"{folder / 'encoder.pt'}: weights do not fit model.json (Error(s) in loading")
    assert 'Missing key(s) in state_dict: "pre_net.forward_gru.weight_ih_l0"' in message
    assert 'Unexpected key(s) in state_dict: "extra"' in message and "size mismatch for " in message
    assert re.search(r"; and \d+ more\)$", message) and len(message) < 1000


@pytest.mark.parametrize("controller,options,drawn", [
    ("random", {}, True), ("big_only", {}, False), ("coin", {}, True), ("surprisal", {"controller_at_test": False}, True),
    ("surprisal", {}, False)])
def test_the_card_says_how_a_model_is_routed(tmp_path, monkeypatch, controller, options, drawn):
    """A model whose test-time controller routes by chance (a new one too) is always sampled; others are
    deterministic unless asked."""
    from surprisal_cc.model.controllers import CONTROLLERS, ConstantController

    class CoinController(ConstantController):  # routed by chance, registered from outside the package
        name = "coin"

    monkeypatch.setitem(CONTROLLERS, "coin", CoinController)
    enc = {**ENCODER, "controller": controller, "conditional_options": options}
    card = model_folder.model_card({**_config(1), "encoder": enc}, tmp_path)
    assert ("draw its routing (it routes by chance alone)" in card) == drawn
    assert ("route deterministically (`p_big > 0.5`) unless given `--sampled`" in card) == (not drawn)


# ----------------------------------------------------------------------------------------------
# apc.pt is the APC the folder was written with
# ----------------------------------------------------------------------------------------------
def _apc_model(tmp_path, seed: int, dtype: str = "fp16"):
    """An untrained surprisal model (it runs the APC) with its APC drawn from ``seed``, saved with ``dtype`` weights."""
    from surprisal_cc.inference import ConditionalASR

    torch.manual_seed(seed)
    asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="surprisal")
    return asr, asr.save(tmp_path / f"model{seed}_{dtype}", dtype=dtype)


def test_the_folder_records_the_fingerprint_of_its_apc_file_as_stored(tmp_path):
    """fp32: the model's own APC; fp16: its rounded copy, a fingerprint of its own, the same on every export."""
    from surprisal_cc.model.apc import load_apc
    from surprisal_cc.model.nnet import weights_fingerprint

    asr, fp32 = _apc_model(tmp_path, 1, "fp32")
    recorded = json.loads((fp32 / "model.json").read_text())["apc_file_fingerprint"]
    assert recorded == weights_fingerprint(asr.apc.apc)
    fp16 = asr.save(tmp_path / "fp16", dtype="fp16")
    again = asr.save(tmp_path / "fp16_again", dtype="fp16")
    stored = json.loads((fp16 / "model.json").read_text())["apc_file_fingerprint"]
    assert stored != recorded and stored == weights_fingerprint(load_apc(fp16 / "apc.pt"))
    assert json.loads((again / "model.json").read_text())["apc_file_fingerprint"] == stored
    assert "`apc.pt` weights fingerprint " + stored in (fp16 / "README.md").read_text()


def test_an_apc_file_swapped_for_another_is_refused_and_loads_when_restored(tmp_path):
    from surprisal_cc.inference import ConditionalASR

    _, folder = _apc_model(tmp_path, 1)
    _, other = _apc_model(tmp_path, 2)
    exported = (folder / "apc.pt").read_bytes()
    (folder / "apc.pt").write_bytes((other / "apc.pt").read_bytes())
    recorded = json.loads((folder / "model.json").read_text())["apc_file_fingerprint"]
    found = json.loads((other / "model.json").read_text())["apc_file_fingerprint"]
    expected = (f"{folder / 'apc.pt'}: APC weights fingerprint {found}, but {folder / 'model.json'} records "
                f"{recorded} (apc_file_fingerprint): this is not the APC the model was exported with, and its "
                f"features would not be those the model was trained on; put back the apc.pt exported with it, or "
                f"export the run again (surprisal-cc export RUN_DIR {folder})")
    with pytest.raises(ModelFormatError, match="^" + re.escape(expected) + "$"):
        ConditionalASR.from_pretrained(folder)
    (folder / "apc.pt").write_bytes(exported)
    assert ConditionalASR.from_pretrained(folder).uses_apc


def test_a_folder_without_the_apc_file_fingerprint_loads_as_before(tmp_path):
    _, folder = _apc_model(tmp_path, 1)
    _, other = _apc_model(tmp_path, 2)
    (folder / "apc.pt").write_bytes((other / "apc.pt").read_bytes())
    _edited(folder, apc_file_fingerprint=None)  # written before the key was recorded: not checked
    assert load_model_folder(folder)[2] is not None
    _edited(folder, apc_file_fingerprint="75DA3C37")
    with pytest.raises(ModelFormatError, match=re.escape("apc_file_fingerprint must be 8 to 64 lower-case hex "
                                                         "digits (the weights fingerprint of apc.pt), got '75DA3C37'")):
        load_model_folder(folder)


def test_the_shipped_model_is_checked_against_its_apc_file():
    from surprisal_cc.model.nnet import weights_fingerprint

    config, _, apc = load_model_folder(model_folder.default_model_dir())
    assert config["apc_file_fingerprint"] == weights_fingerprint(apc)
    assert config["apc_file_fingerprint"] != config["source"]["apc_fingerprint"]  # its fp16 copy of the trained APC


def test_an_export_gives_the_runs_test_results_only_to_the_checkpoint_they_tested(tmp_path):
    """A run that trained on after its test: its results are epoch 25's, the best checkpoint is epoch 28's; the
    model card then names no test PER and says which epoch the results were."""
    from types import SimpleNamespace

    from surprisal_cc.training.export import _source

    ckpt = tmp_path / "CKPT+28"
    ckpt.mkdir()
    (ckpt / "counter.ckpt").write_text("28")
    checkpoint = SimpleNamespace(path=ckpt, meta={"PER": 27.0})
    results = {"PER": 27.22, "epochs": 25, "flops_per_frame": 6.9e6, "error_rate_details": {"substitutions": 1}}
    source = _source(tmp_path, "PER", [checkpoint], 1, None, results)
    assert source["epoch"] == 28 and source["results_epoch"] == 25
    assert source["test"] == {} and source["error_rate_details"] is None
    source = _source(tmp_path, "PER", [checkpoint], 1, None, {**results, "epochs": 28})
    assert source["results_epoch"] is None and source["test"]["PER"] == 27.22


def test_loading_a_recipe_run_or_a_file_as_a_model_says_what_to_do(tmp_path):
    run = tmp_path / "seed1"
    (run / "save").mkdir(parents=True)
    (run / "hyperparams.yaml").write_text("seed: 1\n")
    with pytest.raises(ModelFormatError, match=re.escape(f"it is a recipe run: export it first, e.g. surprisal-cc "
                                                         f"export {run} seed1_model")):
        load_model_folder(run)
    audio = tmp_path / "a.wav"
    audio.write_bytes(b"RIFF")
    with pytest.raises(ModelFormatError, match="a file, not a model folder; a model is a folder"):
        load_model_folder(audio)
