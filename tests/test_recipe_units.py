"""SentencePiece units of ``target_unit: sentencepiece``: trained once per training manifest, and two
runs preparing them at the same moment never mix their files (surprisal_cc.training.labels.train_units)."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch

from surprisal_cc.training import labels
from surprisal_cc.training import changed_settings, run_checks, run_settings
from surprisal_cc.errors import ConfigurationError


class FakeUnits:
    """Stands in for SentencePieceLabels: writes a model file naming who trained it."""

    def __init__(self, model_dir, vocab_size, train_manifest):
        (model_dir / f"{vocab_size}_unigram.model").write_text("ours")
        (model_dir / "train.txt").write_text("words")


def test_units_are_trained_once(tmp_path, monkeypatch):
    monkeypatch.setattr(labels, "SentencePieceLabels", FakeUnits)
    sp_dir = labels.train_units(tmp_path / "sentencepiece_40", 40, "train.csv")
    assert sorted(p.name for p in sp_dir.iterdir()) == ["40_unigram.model", "train.txt"]

    def must_not_train(*args):
        raise AssertionError("the units exist: nothing to train")

    monkeypatch.setattr(labels, "SentencePieceLabels", must_not_train)
    assert labels.train_units(sp_dir, 40, "train.csv") == sp_dir
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentencepiece_40"]  # no private folders left


def test_units_placed_first_by_another_run_are_kept_whole(tmp_path, monkeypatch):
    sp_dir = tmp_path / "sentencepiece_40"

    class OtherRunFinishesFirst(FakeUnits):
        def __init__(self, model_dir, vocab_size, train_manifest):
            super().__init__(model_dir, vocab_size, train_manifest)
            sp_dir.mkdir()
            (sp_dir / f"{vocab_size}_unigram.model").write_text("theirs")
            (sp_dir / "train.txt").write_text("their words")

    monkeypatch.setattr(labels, "SentencePieceLabels", OtherRunFinishesFirst)
    assert labels.train_units(sp_dir, 40, "train.csv") == sp_dir
    assert (sp_dir / "40_unigram.model").read_text() == "theirs"
    assert (sp_dir / "train.txt").read_text() == "their words"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentencepiece_40"]


def test_a_units_folder_without_its_model_is_named(tmp_path, monkeypatch):
    sp_dir = tmp_path / "sentencepiece_40"
    sp_dir.mkdir()
    (sp_dir / "train.txt").write_text("half-written")
    monkeypatch.setattr(labels, "SentencePieceLabels", FakeUnits)
    with pytest.raises(ConfigurationError, match="sentencepiece_40 exists without '40_unigram.model'.*delete"):
        labels.train_units(sp_dir, 40, "train.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentencepiece_40"]


def test_test_only_needs_a_checkpoint_of_a_validated_epoch(tmp_path):
    """A checkpoint taken within an epoch records no PER: --test_only would evaluate an untrained model."""
    from speechbrain.utils.checkpoints import Checkpointer

    checkpointer = Checkpointer(tmp_path)
    hparams, test_only = {"checkpointer": checkpointer, "selection_metric": "PER"}, {"test_only": True}
    checkpointer.save_checkpoint(meta={"brain_intra_epoch_ckpt": True}, end_of_epoch=False)
    with pytest.raises(ConfigurationError, match="no checkpoint of a validated epoch \\(PER\\)"):
        run_checks.check_test_only(hparams, test_only)
    run_checks.check_test_only(hparams, {})  # training: nothing to check
    checkpointer.save_checkpoint(meta={"PER": 30.5})
    run_checks.check_test_only(hparams, test_only)


def test_the_apc_a_run_needs_is_checked_before_any_data_is_read(tmp_path):
    from surprisal_cc.model.apc import APCModel, save_apc
    from surprisal_cc.model.architectures import build_encoder
    from surprisal_cc.training.frozen_features import PRETRAIN_OR_GIVE_APC

    encoder = build_encoder("conditional", input_size=512, num_outputs=42, controller="surprisal")
    hparams = {"input_features": "apc", "encoder_module": encoder, "apc_export_path": str(tmp_path / "apc" / "apc.pt")}
    for path, message in ((tmp_path / "nope.pt", "does not exist"), (tmp_path, "is a folder")):
        with pytest.raises(ConfigurationError, match=f"apc_path {path} {message}"):
            run_checks.check_apc_path({**hparams, "apc_path": str(path)}, {})
    (tmp_path / "notes.pt").write_text("not a model")
    with pytest.raises(ConfigurationError) as info:  # one line, the file named once, then what to do
        run_checks.check_apc_path({**hparams, "apc_path": str(tmp_path / "notes.pt")}, {})
    assert str(info.value) == (f"apc_path {tmp_path / 'notes.pt'}: cannot be loaded as a torch file "
                               f"(UnpicklingError): {PRETRAIN_OR_GIVE_APC}")
    test_only = "--test_only needs the APC the run trained with: give --apc_path=FILE"
    for apc_path in (None, str(tmp_path / "nope.pt")):  # --test_only never pretrains: no pretraining advice
        with pytest.raises(ConfigurationError, match=f"does not exist.*: {re.escape(test_only)}"):
            run_checks.check_apc_path({**hparams, "apc_path": apc_path}, {"test_only": True})
    run_checks.check_apc_path({**hparams, "apc_path": None}, {})  # training pretrains one
    save_apc(APCModel(), tmp_path / "good.pt")
    run_checks.check_apc_path({**hparams, "apc_path": str(tmp_path / "good.pt")}, {"test_only": True})
    fbank_only = build_encoder("conditional", input_size=80, num_outputs=42, controller="random")
    run_checks.check_apc_path({"input_features": "fbank", "encoder_module": fbank_only, "apc_path": "/nope.pt"}, {})


def test_a_training_flops_budget_is_checked_before_any_data_is_read():
    """``flops_budget`` lies strictly between small-only and big-only (the APC's MACs included), for a
    controller that calibrates on surprisal: one line naming the key otherwise, not a late traceback."""
    from surprisal_cc.model.apc import APCModel
    from surprisal_cc.model.architectures import build_encoder
    from surprisal_cc.model.flops import module_macs, static_flop_rows

    apc = APCModel()
    encoder = build_encoder("conditional", input_size=512, num_outputs=42, controller="surprisal")
    rows = static_flop_rows(encoder, module_macs(apc))
    middle = (rows["small-only"] + rows["big-only"]) / 2
    run_checks.check_flops_budget({"flops_budget": middle, "encoder_module": encoder}, apc)
    run_checks.check_flops_budget({"flops_budget": None, "encoder_module": encoder}, apc)
    for budget in (rows["small-only"], rows["big-only"], 2 * rows["big-only"]):
        with pytest.raises(ConfigurationError, match=r"flops_budget .* is not between this model's small-only"):
            run_checks.check_flops_budget({"flops_budget": budget, "encoder_module": encoder}, apc)
    with pytest.raises(ConfigurationError, match="flops_budget must be MACs per frame"):
        run_checks.check_flops_budget({"flops_budget": "6.4M", "encoder_module": encoder}, apc)
    learned = build_encoder("conditional", input_size=512, num_outputs=42, controller="learned")
    with pytest.raises(ConfigurationError, match="this model's controller is 'learned'"):
        run_checks.check_flops_budget({"flops_budget": middle, "encoder_module": learned}, apc)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_device_or_precision_this_machine_lacks_is_refused_before_any_data_is_read():
    from pathlib import Path

    hparams_file = str(Path(__file__).parents[1] / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml")
    with pytest.raises(ConfigurationError, match="device cuda: CUDA is not available on this machine; use cpu"):
        run_settings.load_hparams(hparams_file, "", {"device": "cuda"})
    with pytest.raises(ConfigurationError, match="device gpu: only cpu and cuda"):
        run_settings.load_hparams(hparams_file, "", {"device": "gpu"})
    with pytest.raises(ConfigurationError, match="precision fp16 trains on CUDA only"):
        run_settings.load_hparams(hparams_file, "precision: fp16", {"device": "cpu"})


def test_resumed_training_keeps_the_settings_its_checkpoints_were_trained_with(tmp_path):
    """A rerun that changes lr would mix two configurations in one run; the number of epochs may grow."""
    hparams_file = tmp_path / "hparams.yaml"
    hparams_file.write_text(f"seed: 1\nlr: 0.001\nnumber_of_epochs: 2\noutput_folder: {tmp_path / 'run'}\n"
                            "save_folder: !ref <output_folder>/save\n")
    run, save = tmp_path / "run", tmp_path / "run" / "save"
    hparams = {"save_folder": str(save)}
    # nothing trained yet: any settings
    run_settings.create_experiment_directory(str(run), str(hparams_file), "lr: 0.002", hparams=hparams)
    run_settings.create_experiment_directory(str(run), str(hparams_file), "", hparams=hparams)
    (save / "CKPT+2026-01-01+00-00-00+00").mkdir(parents=True)
    with pytest.raises(ConfigurationError, match=r"run holds checkpoints trained with other settings "
                                                 r"\(lr: trained with 0.001, requested 0.002\)"):
        run_settings.create_experiment_directory(str(run), str(hparams_file), "lr: 0.002", hparams=hparams)
    assert "lr: 0.001" in (run / "hyperparams.yaml").read_text()
    run_settings.create_experiment_directory(str(run), str(hparams_file), "number_of_epochs: 4", hparams=hparams)
    assert "number_of_epochs: 4" in (run / "hyperparams.yaml").read_text()


def test_resumed_training_keeps_the_labels_its_checkpoints_were_trained_with(tmp_path):
    """labels, mfa_labels and prepare_options are mappings, compared entry by entry: a resumed run refuses other
    labels than its checkpoints were trained with; unchanged, they compare equal, however the command writes them,
    and the resumable entries (prepare_options' data_folder) and objects' arguments (the epoch counter's limit) may
    change."""
    hparams_file = tmp_path / "hparams.yaml"
    hparams_file.write_text(f"seed: 1\nnumber_of_epochs: 2\noutput_folder: {tmp_path / 'run'}\n"
                            "save_folder: !ref <output_folder>/save\ndata_folder: data\n"
                            "labels: {train: mfa, valid: mfa, test: mfa}\nmfa_labels: {train: null, valid: null, test: null}\n"
                            "prepare_options:\n    data_folder: !ref <data_folder>\n    labels: !ref <labels>\n"
                            "    mfa_labels: !ref <mfa_labels>\n"
                            "epoch_counter: !new:speechbrain.utils.epoch_loop.EpochCounter\n"
                            "    limit: !ref <number_of_epochs>\n")
    run, save = tmp_path / "run", tmp_path / "run" / "save"
    hparams = {"save_folder": str(save)}
    run_settings.create_experiment_directory(str(run), str(hparams_file), "", hparams=hparams)
    (save / "CKPT+2026-01-01+00-00-00+00").mkdir(parents=True)
    for same in ("labels: mfa\nmfa_labels: null",
                 "labels: {train: mfa, valid: mfa, test: mfa}\nnumber_of_epochs: 4\ndata_folder: elsewhere", ""):
        run_settings.create_experiment_directory(str(run), str(hparams_file), same, hparams=hparams)
    for changed, what in (("labels: {train: lexicon, valid: lexicon, test: mfa}", "labels"),
                          ("mfa_labels: {train: realigned.csv, valid: realigned.csv, test: null}", "mfa_labels")):
        with pytest.raises(ConfigurationError, match=rf"run holds checkpoints trained with other settings \({what}: "
                                                     rf"trained with .*; prepare_options: trained with "):
            run_settings.create_experiment_directory(str(run), str(hparams_file), changed, hparams=hparams)
    from surprisal_cc.config import load_yaml_tolerant

    assert load_yaml_tolerant(run / "hyperparams.yaml")["labels"] == {"train": "mfa", "valid": "mfa", "test": "mfa"}


@pytest.mark.parametrize("hparams_file", ["MiniLibriSpeech/conditional_ctc.yaml", "MiniLibriSpeech/cpu_profile.yaml",
                                          "TIMIT/conditional_ctc.yaml"])
def test_a_recipes_saved_settings_compare_equal_when_only_resumable_ones_change(hparams_file):
    """The saved hyperparams.yaml of a run (as SpeechBrain writes it: references resolved, objects tagged) and
    that of the same command with more epochs, another output folder, data folder, manifests folder and cache, and
    other test-time conditions: no changed setting, though prepare_options, the epoch counter, the checkpointer, the
    encoder and the beam searcher hold some of them; other labels are one, and so is an argument written out in an
    object (the APC's width), named by its key path. (Files such as cpu_profile's relabelled_train are compared by
    content where both are there.)"""
    from hyperpyyaml import resolve_references

    from surprisal_cc.config import expand_hparams, parse_yaml_tolerant
    from surprisal_cc.training.changed_settings import argument_references, changed_training_settings

    text = expand_hparams(Path(__file__).resolve().parents[1] / "hparams" / hparams_file)

    def saved(overrides, text=text):
        return parse_yaml_tolerant(resolve_references(io.StringIO(text), {"data_folder": "data", **overrides}).getvalue())

    def changed(first, overrides, text=text):
        return changed_training_settings(first, saved(overrides, text),
                                         argument_references(text, {"data_folder": "data", **overrides}))

    first = saved({})
    assert changed(first, {"number_of_epochs": 80, "output_folder": "elsewhere/run", "data_folder": "/moved/data",
                           "prepared_folder": "/moved/manifests", "cache_folder": "/moved/cache", "num_workers": 3,
                           "controller_at_test": False, "test_stochastic": False, "beam_size": 4}) == []
    if "labels" in first:
        other = {"labels": {"train": "lexicon", "valid": "lexicon", "test": "lexicon"}}
        assert sorted(line.split(":")[0] for line in changed(first, other)) == ["labels", "prepare_options"]
    assert "  hidden_size: 512\n" in text
    assert changed(first, {}, text.replace("  hidden_size: 512\n", "  hidden_size: 256\n")) == [
        "apc_model.hidden_size: trained with 512, requested 256"]


def test_resumed_training_keeps_the_arguments_written_in_its_objects(tmp_path):
    """A literal argument of a !new: object (the APC's width, the features' mel bands, a masking policy) changed in
    the hparams file, or by an override of the object's entries, is refused by its key path; an argument that is a
    reference follows its setting (the epoch counter's limit, the number of epochs), and an argument named like a
    resumable setting, an argument only one side holds and the objects of resumable settings may change."""
    def write(hidden_size=512, n_mels=80, time_masks="[2, 2]", beam_size=10, valid_beam=4, new_argument=""):
        (tmp_path / "hparams.yaml").write_text(
            f"seed: 1\nnumber_of_epochs: 2\noutput_folder: {tmp_path / 'run'}\nsave_folder: !ref <output_folder>/save\n"
            "apc_epochs: 20\n"
            f"feature_config: !new:surprisal_cc.model.feature_config.FeatureConfig\n  n_mels: {n_mels}\n  frame_skip: 2\n"
            "front_end: !new:surprisal_cc.model.features.FilterbankFrontEnd\n  config: !ref <feature_config>\n"
            f"apc_model: !new:surprisal_cc.model.apc.APCModel\n  input_size: 80\n  hidden_size: {hidden_size}\n{new_argument}"
            f"feature_masking: !new:surprisal_cc.training.augment.FeatureMasking\n  time_masks: {time_masks}\n"
            "epoch_counter: !new:speechbrain.utils.epoch_loop.EpochCounter\n  limit: !ref <number_of_epochs>\n"
            f"searcher: !new:speechbrain.decoders.ctc.CTCBeamSearcher\n  blank_index: 0\n  beam_size: {beam_size}\n"
            f"valid_search: !name:surprisal_cc.decoding.search.beam_search\n  beam: {valid_beam}\n")

    write()
    run, save = tmp_path / "run", tmp_path / "run" / "save"
    hparams = {"save_folder": str(save)}
    run_settings.create_experiment_directory(str(run), str(tmp_path / "hparams.yaml"), "", hparams=hparams)
    (save / "CKPT+2026-01-01+00-00-00+00").mkdir(parents=True)
    trained = (run / "hyperparams.yaml").read_text()
    for edit, overrides, what in (
            ({"hidden_size": 256}, "", r"apc_model.hidden_size: trained with 512, requested 256"),
            ({"n_mels": 40}, "", r"feature_config.n_mels: trained with 80, requested 40\)"),  # not again as front_end's
            ({"time_masks": "[2, 3]"}, "", r"feature_masking.time_masks.1: trained with 2, requested 3"),
            ({"time_masks": "[2]"}, "", r"feature_masking.time_masks: trained with \[2, 2\], requested \[2\]"),
            ({}, "apc_model: {hidden_size: 1024}", r"apc_model.hidden_size: trained with 512, requested 1024")):
        write(**edit)
        with pytest.raises(ConfigurationError, match=rf"run holds checkpoints trained with other settings \({what}"
                                                     r".*: give the settings it was trained with, or another "
                                                     r"--output_folder"):
            run_settings.create_experiment_directory(str(run), str(tmp_path / "hparams.yaml"), overrides,
                                                     hparams=hparams)
        assert (run / "hyperparams.yaml").read_text() == trained
    for edit, overrides in (({}, "number_of_epochs: 4"), ({"beam_size": 20, "valid_beam": 8}, ""),
                            ({"new_argument": "  num_layers: 2\n"}, ""), ({}, "")):
        write(**edit)
        run_settings.create_experiment_directory(str(run), str(tmp_path / "hparams.yaml"), overrides, hparams=hparams)
    assert "limit: 2" in (run / "hyperparams.yaml").read_text()


def test_the_published_runs_hold_the_arguments_the_hparams_files_write_out_today():
    """Each published run folder (docs/results/**/hyperparams.yaml) against the hparams file it was made from: the
    arguments its objects write out (sizes, mel bands, masking) are those of today's file, so a resumed published
    run is not refused for them; and each published run compares equal with itself."""
    from surprisal_cc.config import TaggedMapping, expand_hparams, parse_yaml_tolerant
    from surprisal_cc.training.changed_settings import argument_references, changed_training_settings

    repo = Path(__file__).resolve().parents[1]
    published = sorted((repo / "docs" / "results").glob("**/hyperparams.yaml"))
    assert published
    today = {}
    for saved in published:
        made_from = re.search(r"^# ((?:/.*/)?hparams/.*\.yaml)$", saved.read_text(), flags=re.M).group(1)
        hparams_file = repo / "hparams" / Path(made_from).relative_to(Path(made_from).parents[1])
        if hparams_file not in today:
            text = expand_hparams(hparams_file)
            today[hparams_file] = parse_yaml_tolerant(text), argument_references(text)
        written_out, references = today[hparams_file]
        stored = parse_yaml_tolerant(saved.read_bytes())
        objects = [key for key, value in written_out.items() if isinstance(value, TaggedMapping)]
        assert "apc_model" in objects and isinstance(stored["apc_model"], TaggedMapping)
        assert changed_training_settings({key: stored[key] for key in objects if key in stored},
                                         {key: written_out[key] for key in objects}, references) == [], saved
        assert changed_training_settings(stored, stored, references) == [], saved


def test_a_run_folder_loads_with_flow_style_overrides(tmp_path):
    """realign_labels.py --overrides '{cache_folder: DIR}': the side-effect-free lines follow it as YAML."""
    import yaml

    hparams_file = tmp_path / "hyperparams.yaml"
    hparams_file.write_text("data_folder: !PLACEHOLDER\ncache_folder: cache\n"
                            "checkpointer: !new:speechbrain.utils.checkpoints.Checkpointer\n    checkpoints_dir: save\n")
    text = run_settings.inert_override_text(hparams_file, "{cache_folder: /tmp/cache}")
    assert yaml.safe_load(text) == {"cache_folder": "/tmp/cache", "checkpointer": None, "data_folder": "placeholder"}
    tagged = run_settings.inert_override_text(hparams_file, "cache_folder: !ref <x>")
    assert "!ref <x>" in tagged  # tags kept as written


def test_overrides_are_parsed_once(tmp_path, monkeypatch):
    """Plain override text is parsed once (not again after it is rewritten in block style); a mapping is
    written as YAML, never parsed back."""
    import yaml

    hparams_file = tmp_path / "hyperparams.yaml"
    hparams_file.write_text("data_folder: !PLACEHOLDER\ncache_folder: cache\n")
    parsed, load = [], yaml.load
    monkeypatch.setattr(yaml, "load", lambda stream, *args, **kw: parsed.append(stream) or load(stream, *args, **kw))
    text = run_settings.inert_override_text(hparams_file, "{cache_folder: /tmp/cache}")
    assert text == "cache_folder: /tmp/cache\ndata_folder: placeholder"
    assert [s for s in parsed if "/tmp/cache" in str(s)] == ["{cache_folder: /tmp/cache}"]
    assert run_settings.inert_override_text(hparams_file, {"data_folder": "/tmp/data"}) == "data_folder: /tmp/data"
    assert not [s for s in parsed if "/tmp/data" in str(s)]


def test_one_file_by_two_names_is_no_changed_setting(tmp_path, monkeypatch):
    apc = tmp_path / "apc.pt"
    apc.write_bytes(b"weights")
    monkeypatch.chdir(tmp_path)
    assert changed_settings.changed_training_settings({"apc_path": "apc.pt"}, {"apc_path": str(apc)}) == []
    (tmp_path / "other.pt").write_bytes(b"other weights")
    assert changed_settings.changed_training_settings({"apc_path": "apc.pt"}, {"apc_path": "other.pt"}) == [
        "apc_path: trained with 'apc.pt', requested 'other.pt'"]


def test_a_manifest_without_utterances_is_refused_before_training(tmp_path):
    """A header-only manifest (one written by hand, say) would fail only after training, when its empty split
    is evaluated: the datasets refuse it when they are made, naming the split and the file."""
    from surprisal_cc.data.errors import DataPreparationError
    from surprisal_cc.training.datasets import dataio_prep

    (tmp_path / "train.csv").write_text("ID,duration,wav,spk_id,wrd,phn\nu1,1.0,u1.flac,s,A,AH\n")
    (tmp_path / "test.csv").write_text("ID,duration,wav,spk_id,wrd,phn\n")
    with pytest.raises(DataPreparationError, match=r"test.csv: split 'test' has no utterance: prepare the data "
                                                   r"again \(its audio may all have been left out as unusable\)"):
        dataio_prep({"target_unit": "phone"}, {"train": tmp_path / "train.csv", "test": tmp_path / "test.csv"}, None)
