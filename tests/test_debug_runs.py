"""A ``--debug`` recipe run: its counts checked, its own folder (``<output_folder>-debug``) and its
splits cut to a few batches (the recipe run itself: ``test_debug_run_cuts_the_splits_and_keeps_to_its_own_folder``
in tests/test_recipes.py)."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from surprisal_cc.errors import ConfigurationError
from surprisal_cc.config import load_hparams_file, parse_yaml_tolerant
from surprisal_cc.training.recipe import debug_manifests, debug_utterances, recipe_errors
from surprisal_cc.training.command_line import check_debug_options, debug_folder_overrides, parse_arguments

REPO = Path(__file__).resolve().parents[1]
MLS = REPO / "hparams" / "MiniLibriSpeech"


@pytest.mark.parametrize("options", [{"debug_batches": 0}, {"debug_batches": -3}, {"debug_epochs": 0}])
def test_a_debug_count_below_one_is_refused(options):
    with pytest.raises(ConfigurationError, match=f"--{next(iter(options))}=.*at least 1"):
        check_debug_options({"debug": True, "debug_batches": 2, "debug_epochs": 2, **options})
    with pytest.raises(ConfigurationError):  # given without --debug: still a mistake
        check_debug_options({"debug": False, "debug_batches": 2, "debug_epochs": 2, **options,
                             "overridden_args": set(options)})
    check_debug_options({"debug": False, "debug_batches": 2, "debug_epochs": 2})  # SpeechBrain's defaults


def test_a_bad_debug_count_is_one_line_of_the_recipe():
    with pytest.raises(SystemExit) as exit_info, recipe_errors():
        parse_arguments([str(MLS / "conditional_ctc.yaml"), "--debug", "--debug_batches=0"])
    assert str(exit_info.value) == ("error: --debug_batches=0: give a whole number of at least 1 (the batches of "
                                    "each split, and of each epoch, that a --debug run goes through)")


@pytest.mark.parametrize("hparams_file", ["conditional_ctc.yaml", "cpu_profile.yaml"])
def test_a_debug_run_moves_every_folder_of_the_run_and_only_those(hparams_file, tmp_path):
    apc = tmp_path / "apc" / "apc.pt"  # an APC pretrained in the real run's APC folder: an input, kept
    argv = [str(MLS / hparams_file), f"--experiment_root={tmp_path}", "--data_folder=[/a,/b]", "--controller=random",
            f"--apc_path={apc}"]
    real = parse_yaml_tolerant(parse_arguments(argv)[2])
    overrides = parse_arguments([*argv, "--debug"])[2]
    moved = parse_yaml_tolerant(overrides)
    debug = f"{tmp_path / 'conditional-random-paper-apc' / 'seed1'}-debug"
    assert {key: value for key, value in moved.items() if key not in real} == {
        "output_folder": debug, "apc_output_folder": f"{debug}/apc"}
    assert moved["data_folder"] == ["/a", "/b"] and moved["controller"] == "random" and moved["apc_path"] == str(apc)
    # what the hparams place in those folders follows (checkpoints too); inputs and shared folders stay
    hparams = load_hparams_file(MLS / hparams_file, overrides + "\ncheckpointer: null\napc_checkpointer: null")
    assert (hparams["save_folder"], hparams["train_log"], hparams["results_file"], hparams["error_details_file"],
            hparams["apc_export_path"]) == (f"{debug}/save", f"{debug}/train_log.txt", f"{debug}/results.json",
                                            f"{debug}/test_alignments.txt", f"{debug}/apc/apc.pt")
    assert hparams["apc_path"] == str(apc) and hparams["prepared_folder"] == f"{tmp_path}/manifests"
    assert hparams["cache_folder"] == f"{tmp_path}/feature_cache"


def test_debug_folder_overrides_replace_a_given_output_folder(tmp_path):
    given = "output_folder: !ref <experiment_root>/mine/\nlr: 1e-05\napc_path: null\nprecision: auto"
    moved = parse_yaml_tolerant(debug_folder_overrides(MLS / "conditional_ctc.yaml", given))
    assert moved["output_folder"] == "results/MiniLibriSpeech/mine-debug"
    assert moved["apc_path"] is None and float(moved["lr"]) == 1e-05 and moved["precision"] == "auto"
    # a folder that cannot be worked out is one line, never the real run's folder
    with pytest.raises(ConfigurationError, match="--debug: the run's folder could not be worked out"):
        debug_folder_overrides(MLS / "conditional_ctc.yaml", "lr: 1\nlr: 2")
    (tmp_path / "no_folder.yaml").write_text("lr: 1\n")
    with pytest.raises(ConfigurationError, match="names no output_folder"):
        debug_folder_overrides(tmp_path / "no_folder.yaml", "")
    assert debug_folder_overrides(tmp_path / "missing.yaml", "lr: 1") == "lr: 1"  # load_hparams names the file


def test_debug_with_test_only_needs_the_checkpoints_kept():
    with pytest.raises(ConfigurationError, match="--debug with --test_only: .* --debug_persistently"):
        check_debug_options({"debug": True, "test_only": True, "debug_batches": 2, "debug_epochs": 2})
    check_debug_options({"debug": True, "test_only": True, "debug_persistently": True, "debug_batches": 2,
                         "debug_epochs": 2})


def test_apc_pretraining_debug_run_has_its_own_apc_folder():
    overrides = parse_arguments([str(REPO / "hparams" / "LibriSpeech" / "apc.yaml"), "--data_folder=/x", "--debug"])[2]
    assert parse_yaml_tolerant(overrides)["apc_output_folder"] == "results/LibriSpeech/apc-debug"
    hparams = load_hparams_file(REPO / "hparams" / "LibriSpeech" / "apc.yaml", overrides + "\napc_checkpointer: null")
    assert hparams["apc_export_path"] == "results/LibriSpeech/apc-debug/apc.pt"
    assert hparams["train_log"] == "results/LibriSpeech/apc-debug/train_log.txt"


def test_debug_manifests_cut_each_split_and_leave_the_prepared_ones(tmp_path):
    prepared, counts = {}, {"train": 9, "valid": 3, "test": 5}
    for split, count in counts.items():
        prepared[split] = tmp_path / "manifests" / f"{split}_prepared.csv"
        prepared[split].parent.mkdir(exist_ok=True)
        prepared[split].write_text("ID,duration,wav,wrd\n" + "".join(
            f'{split}{i},1.000,/data/{split}{i}.flac,"A, B"\n' for i in range(count)))
    before = {split: path.read_bytes() for split, path in prepared.items()}
    hparams = {"batch_size": 2, "output_folder": str(tmp_path / "run-debug")}
    assert debug_manifests(hparams, prepared, {"debug": False}) == prepared
    cut = debug_manifests(hparams, prepared, {"debug": True, "debug_batches": 2})
    for split, path in cut.items():
        assert Path(path).parent == tmp_path / "run-debug" / "debug_manifests"
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        assert [row["ID"] for row in rows] == [f"{split}{i}" for i in range(min(4, counts[split]))]
        assert rows[0]["wrd"] == "A, B" and rows[0]["wav"] == f"/data/{split}0.flac"
    assert {split: path.read_bytes() for split, path in prepared.items()} == before


def test_debug_utterances_under_dynamic_batching():
    assert debug_utterances({"batch_size": 32, "dynamic_batching": True, "max_batch_length": 400},
                            {"debug_batches": 3}) == 96
    assert debug_utterances({"apc_batch_size": 8}, {"debug_batches": 2}, "apc_batch_size") == 16  # APC pretraining
