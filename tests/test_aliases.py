"""Old dotted paths keep working through one table (surprisal_cc.aliases): every published hyperparams file
under docs/results and every hparams file names only objects that exist, the shipped model folder loads,
and an old run folder's names build the same objects as the new ones."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from data_fixtures import REPO
from surprisal_cc.aliases import MOVED, MOVED_NAMES, resolve_dotted

TAG = re.compile(r"!(?:new|name|apply):(surprisal_cc\.[\w.]+)")


def dotted_names(paths) -> dict:
    """``{dotted path: first file naming it}`` over the ``!new:`` / ``!name:`` / ``!apply:`` tags of ``paths``."""
    found = {}
    for path in paths:
        for name in TAG.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, path)
    return found


def test_every_published_and_current_hparams_file_names_existing_objects():
    files = [*sorted((REPO / "docs" / "results").rglob("*.yaml")), *sorted((REPO / "hparams").rglob("*.yaml")),
             *sorted((REPO / "surprisal_cc" / "model" / "graphs").rglob("*.yaml"))]
    names = dotted_names(files)
    assert any(name.startswith("surprisal_cc.encoders.") for name in names)  # old paths are among them
    missing = []
    for name, path in sorted(names.items()):
        try:
            assert callable(resolve_dotted(name))
        except (ImportError, AssertionError):
            missing.append(f"{path.relative_to(REPO)}: {name}")
    assert missing == []


def test_current_files_name_the_new_paths():
    """Only published records use the old names: hparams files and model graphs name the new modules."""
    files = [*sorted((REPO / "hparams").rglob("*.yaml")), *sorted((REPO / "surprisal_cc" / "model" / "graphs").rglob("*.yaml"))]
    old = sorted(name for name in dotted_names(files) if name.split(".")[1] in MOVED and
                 importlib.util.find_spec("surprisal_cc." + name.split(".")[1]) is None)
    assert old == []


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_module_name_imports(old):
    module = importlib.import_module(f"surprisal_cc.{old}")
    new = importlib.import_module(f"surprisal_cc.{MOVED[old]}")
    public = [name for name in vars(new) if not name.startswith("_") and callable(getattr(new, name))]
    assert public and all(getattr(module, name) is getattr(new, name) for name in public)


@pytest.mark.parametrize("old, new", sorted(MOVED_NAMES.items()))
def test_names_an_old_module_re_exported_resolve_to_where_they_live(old, new):
    assert resolve_dotted(old) is resolve_dotted(new)


def test_an_old_run_folder_builds_the_same_objects(tmp_path):
    """A run folder saved before the subpackages (the names of docs/results/**/hyperparams.yaml)."""
    from surprisal_cc.config import load_hparams_file
    from surprisal_cc.model.nnet import input_size_for
    from surprisal_cc.training.labels import label_encoder_for, phone_set

    old = tmp_path / "hyperparams.yaml"
    old.write_text("phone_set: &phones !apply:surprisal_cc.recipe.phone_set [librispeech]\n"
                   "label_encoder: !apply:surprisal_cc.recipe.label_encoder_for [*phones]\n"
                   "input_size: !apply:surprisal_cc.recipe.input_size_for [apc]\n"
                   "error_rate: !name:surprisal_cc.metrics.ErrorRate\n"
                   "beam: !new:surprisal_cc.decoding.CTCBeamSearch\n    blank: 0\n"
                   "encoder_module: !apply:surprisal_cc.encoders.build_encoder\n    name: act\n"
                   "    input_size: 8\n    num_outputs: 5\n    hidden_size: 4\n")
    saved = load_hparams_file(old)
    assert saved["phone_set"] == phone_set("librispeech") and saved["input_size"] == input_size_for("apc")
    assert len(saved["label_encoder"]) == len(label_encoder_for(phone_set("librispeech")))
    assert type(saved["encoder_module"]).__name__ == "ACTEncoder"
    assert type(saved["beam"]).__module__ == "surprisal_cc.decoding.search"


def test_the_shipped_model_folder_loads():
    from surprisal_cc.inference import ConditionalASR

    asr = ConditionalASR.from_hparams()
    assert asr.uses_apc and len(asr.labels) == 42
