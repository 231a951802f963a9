"""Writing a model folder: a new folder, a replaced one, and an export that is interrupted."""
from __future__ import annotations

import os

import pytest
import torch

from surprisal_cc import model_folder
from surprisal_cc.encoders import build_encoder
from surprisal_cc.model_folder import FORMAT_VERSION, load_model_folder, write_model_folder

ENCODER = {"name": "conditional", "input_size": 6, "num_outputs": 4, "controller": "big_only", "hidden_size": 8}


def _config(seed: int) -> dict:
    return {"format_version": FORMAT_VERSION, "encoder": ENCODER, "input_features": "fbank", "features": {},
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
