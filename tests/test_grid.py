"""Tests for surprisal_cc.experiments.grid (with its grid files, surprisal_cc.experiments.grid_spec and grid_settings, and run locks, surprisal_cc.experiments.run_locks) and
``surprisal-cc grid`` with a fake recipe script (no training)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from surprisal_cc.experiments import grid
from surprisal_cc.experiments import grid_settings, grid_spec
from surprisal_cc.training import run_folder
from surprisal_cc.experiments import run_locks
from surprisal_cc.cli.commands import main

FAKE_RECIPE = '''
import json, sys
from pathlib import Path
args = dict((a[2:].split("=", 1) + ["True"])[:2] for a in sys.argv[2:])  # bare --flag -> True
out = Path(args["output_folder"])
if args.get("controller") == "fail" or (out / "fail.txt").exists():
    sys.exit("boom")
out.mkdir(parents=True, exist_ok=True)
shifts = json.loads(args.get("test_bias_shifts", "[0.0]"))
tag = ("_random_at_test" if args.get("controller_at_test") == "False" else "") if args.get("test_only") else ""
prefix = ("results_test_only" + tag) if args.get("test_only") else "results"
# "epochs": the epoch of the checkpoint tested, the training's best (--best_epoch, else its last)
if not args.get("test_only"):
    (out / "best_epoch.txt").write_text(args.get("best_epoch", args.get("number_of_epochs", "0")))
best = int((out / "best_epoch.txt").read_text())
for s in shifts:
    name = prefix + (".json" if not s else "_bias%+g.json" % s)
    (out / name).write_text(json.dumps({"PER": 25.0 + s, "flops_per_frame": 6.4e6 + s, "seed": int(args["seed"]),
        "controller": args.get("controller", "surprisal"), "test_bias_shift": s, "dataset": "Fake",
        "precision": args.get("precision"), "epochs": best}))
# as the recipe does: a --test_only evaluation keeps the training's hyperparams.yaml
(out / (f"hyperparams_test_only{tag}.yaml" if args.get("test_only") else "hyperparams.yaml")).write_text(
    "test_only: %s\\n" % bool(args.get("test_only")))
with open(out / "calls.txt", "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
'''


# the keys the tests' grids set (a grid refuses a key its hparams file lacks, as the recipe would)
FAKE_HPARAMS = """controller: surprisal
seed: 1
experiment_root: !ref <x>
output_folder: !ref <experiment_root>/run
number_of_epochs: 1
lr: 0.001
learned_penalty: 0.0
apc_path: null
relabelled_train: null
best_epoch: null
beam_size: 10
selection_metric: PER
controller_at_test: True
test_bias_shifts: [0.0]
"""


@pytest.fixture()
def grid_file(tmp_path: Path) -> Path:
    (tmp_path / "fake_recipe.py").write_text(FAKE_RECIPE)
    (tmp_path / "hparams.yaml").write_text(FAKE_HPARAMS)
    spec = {"recipe": str(tmp_path / "fake_recipe.py"), "hparams": str(tmp_path / "hparams.yaml"),
            "experiment_root": str(tmp_path / "exp"), "seeds": [1, 2], "overrides": {"number_of_epochs": 2},
            "groups": [{"name": "controllers", "vary": {"controller": ["surprisal", "random"]}},
                       {"name": "again", "vary": {"controller": ["random"]}},            # duplicates
                       {"name": "bias", "folder_of": "controllers", "vary": {"controller": ["surprisal"]},
                        "set": {"test_only": True, "test_bias_shifts": [0.0, 1.0]}}]}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_expand_cartesian_product_and_folders(grid_file: Path, tmp_path: Path) -> None:
    runs = grid_spec.expand(grid_spec.load_grid(str(grid_file)))
    assert [r.name for r in runs] == ["controllers/controller-surprisal/seed1", "controllers/controller-random/seed1",
                                      "controllers/controller-surprisal/seed2", "controllers/controller-random/seed2",
                                      "bias/controller-surprisal/seed1", "bias/controller-surprisal/seed2"]
    exp = tmp_path / "exp" / "grid"
    assert runs[0].output_folder == exp / "controllers/controller-surprisal/seed1"
    assert runs[4].output_folder == runs[0].output_folder  # test-only runs reuse the trained folder
    assert runs[0].command[:3] == [sys.executable, str(tmp_path / "fake_recipe.py"), str(tmp_path / "hparams.yaml")]
    assert "--number_of_epochs=2" in runs[0].command and "--seed=1" in runs[0].command
    assert f"--output_folder={runs[0].output_folder}" in runs[0].command
    assert "--test_bias_shifts=[0.0, 1.0]" in runs[4].command
    assert [r.command for r in grid_spec.expand(grid_spec.load_grid(str(grid_file)))] == [r.command for r in runs]


@pytest.mark.parametrize("epochs", [3, "np.int64"])
def test_number_of_epochs_of_a_grid_is_a_whole_number(grid_file: Path, epochs: Any) -> None:
    import numpy as np

    spec = grid_spec.load_grid(str(grid_file))
    spec.overrides["number_of_epochs"] = np.int64(3) if epochs == "np.int64" else epochs
    assert {run.epochs for run in grid_spec.expand(spec, log=io.StringIO())} == {3}


@pytest.mark.parametrize("epochs", [True, 3.0, "3", 0])
def test_number_of_epochs_of_a_grid_that_is_no_whole_number_of_at_least_one_is_refused(grid_file: Path,
                                                                                      epochs: Any) -> None:
    spec = grid_spec.load_grid(str(grid_file))
    spec.overrides["number_of_epochs"] = epochs
    with pytest.raises(grid_spec.GridError) as err:
        grid_spec.expand(spec, log=io.StringIO())
    assert str(err.value) == f"group controllers: number_of_epochs must be a whole number of at least 1, got {epochs!r}"


def test_override_value_and_results_files(tmp_path: Path) -> None:
    assert grid_spec.override_value([0.0, 1]) == "[0.0, 1]" and grid_spec.override_value(True) == "True"
    assert grid_spec.override_value({"a": None}) == "{a: null}"
    assert grid_spec.results_files(tmp_path, [0, 2.0]) == [tmp_path / "results.json", tmp_path / "results_bias+2.json"]
    assert grid_spec.results_files(tmp_path, [0], test_only=True) == [tmp_path / "results_test_only.json"]
    assert grid_spec.results_files(tmp_path, [0, 1.0], test_only=True, tag="_random_at_test") == [
        tmp_path / "results_test_only_random_at_test.json", tmp_path / "results_test_only_random_at_test_bias+1.json"]
    budget = run_folder.evaluation_tag({"test_flops_fraction": 0.9})  # a test-time FLOPs budget has files of its own
    assert grid_spec.results_files(tmp_path, None, test_only=True, tag=budget) == [tmp_path / "results_test_only_budget0.9.json"]
    assert run_folder.RESULTS_PATTERN.match("results_test_only_random_at_test_budget0.9.json")


def test_dry_run_prints_commands_and_runs_nothing(grid_file: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    assert main(["grid", str(grid_file), "--dry-run", "--only", "seed1"]) == 0
    out = capsys.readouterr().out
    assert out.count("fake_recipe.py") == 3 and "OMP_NUM_THREADS=" in out and "dry-run: 3" in out
    assert "| dry-run | 0/2 |" in out and "| dry-run | – |" in out  # epochs validated of training runs
    assert not (tmp_path / "exp" / "grid").exists()


def test_only_with_a_slash_selects_whole_name_parts(grid_file: Path, capsys: pytest.CaptureFixture) -> None:
    """--only is a substring of the run's name, and a leading or trailing '/' anchors it to a whole part."""
    assert main(["grid", str(grid_file), "--dry-run", "--only", "ntrollers/"]) == 0
    assert "dry-run: 4" in capsys.readouterr().out  # controllers/...: two controllers, two seeds
    assert main(["grid", str(grid_file), "--dry-run", "--only", "/controllers/", "--only", "/seed2/"]) == 0
    out = capsys.readouterr().out
    assert "dry-run: 5" in out and "bias/controller-surprisal/seed2" in out and "bias/controller-surprisal/seed1" not in out
    assert main(["grid", str(grid_file), "--dry-run", "--only", "/ntrollers/"]) == 1
    assert "--only /ntrollers/: no run of" in capsys.readouterr().err


def test_progress_gives_the_hours_left_at_the_median_epoch(tmp_path: Path) -> None:
    """A long run's status says how far it is and how long the rest takes at its pace so far (the median
    epoch: an epoch slowed by a pause or a second job does not throw the estimate)."""
    run = grid_spec.Run(group="g", name="g/seed1", output_folder=tmp_path, overrides={}, command=["python"], epochs=30)
    assert run.progress() == "0/30"
    epochs = [{"epoch": e, "PER": 50.0, "epoch_s": s} for e, s in ((1, 600.0), (2, 6000.0), (3, 720.0), (4, 660.0))]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(row) + "\n" for row in epochs))
    assert run.progress() == "4/30, ~5.0 h left"  # 26 epochs x 690 s
    (tmp_path / "results.json").write_text("{}")  # finished: no estimate
    assert run.progress() == "4/30"


def test_run_skip_and_report(grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["grid", str(grid_file), "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "done: 6" in out
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    assert (folder / "results_test_only_bias+1.json").exists() and "# " in (folder / "grid.log").read_text()
    assert (folder / "results.json").exists()  # the trained run's results are not overwritten
    assert len((folder / "calls.txt").read_text().splitlines()) == 2  # training, then the test-only sweep
    report_dir = tmp_path / "exp" / "report"
    assert (report_dir / "report.md").exists() and (report_dir / "Fake_controllers.csv").exists()
    assert (report_dir / "Fake_per_vs_flops.png").exists()

    assert main(["grid", str(grid_file), "--no-report"]) == 0  # everything complete: nothing relaunched
    assert "skipped: 6" in capsys.readouterr().out
    assert len((folder / "calls.txt").read_text().splitlines()) == 2

    (tmp_path / "exp/grid/controllers/controller-random/seed2/results.json").unlink()
    assert main(["grid", str(grid_file), "--no-report", "--only", "random"]) == 0
    assert "done: 1, skipped: 1" in capsys.readouterr().out


def test_a_finished_run_with_other_settings_is_a_conflict_not_a_result(grid_file: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """Another grid's finished run in a run's folder (another lr, more epochs) is not taken as this
    grid's result: one line names the folder and the settings, and its test-only runs are not run
    on it. Numbers compare by value however YAML wrote them, and files are not compared by name."""
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    capsys.readouterr()
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    (folder / "hyperparams.yaml").write_text("controller: surprisal\nseed: 1\nlr: 0.001\nnumber_of_epochs: 50\n"
                                             "learned_penalty: 1e-05\napc_path: old/apc.pt\n")
    spec = yaml.safe_load(grid_file.read_text())
    spec["overrides"] = {"number_of_epochs": 2, "lr": 0.002, "learned_penalty": 1.0e-5, "apc_path": "new/apc.pt"}
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main(["grid", str(grid_file), "--no-report", "--dry-run"]) == 3
    out = capsys.readouterr().out
    assert (f"[conflict] controllers/controller-surprisal/seed1: {folder} holds a finished run made with other "
            "settings (lr: trained with 0.001, requested 0.002; number_of_epochs: trained with 50, requested 2): "
            "move that folder away, or give this grid another experiment_root") in out
    assert "# conflict: " in out and "[conflict] bias/controller-surprisal/seed1" in out  # the sweep of that run too
    assert "conflict: 2, skipped: 4" in out  # the runs whose folders did not record those settings stay
    assert main(["grid", str(grid_file), "--no-report"]) == 3
    assert len((folder / "calls.txt").read_text().splitlines()) == 2  # nothing was run in that folder


def test_the_evaluations_of_a_folder_trained_for_more_epochs_are_a_conflict_too(grid_file: Path, tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture) -> None:
    """A folder holding another grid's longer training: its bias sweep is not taken as this grid's either."""
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    capsys.readouterr()
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    (folder / "hyperparams.yaml").write_text("controller: surprisal\nseed: 1\nnumber_of_epochs: 50\n")
    assert main(["grid", str(grid_file), "--no-report", "--dry-run"]) == 3
    out = capsys.readouterr().out
    assert "[conflict] controllers/controller-surprisal/seed1" in out and "[conflict] bias/controller-surprisal/seed1" in out


def test_command_line_settings_replace_the_grid_files_and_are_compared_with_finished_runs(
        grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--key=value`` after the grid file is a setting of every run, given once (replacing the grid
    file's), so a finished run made with another value is a conflict, and more epochs train on; a key
    that names the runs' folders is refused."""
    runs = grid_spec.expand(grid_spec.load_grid(str(grid_file)), ["--number_of_epochs=3", "--device=cuda:0"])
    assert all(r.epochs == 3 and r.command.count("--number_of_epochs=3") == 1 and "--device=cuda:0" in r.command
               and "--number_of_epochs=2" not in r.command for r in runs)
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    capsys.readouterr()
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    (folder / "hyperparams.yaml").write_text("controller: surprisal\nseed: 1\nlr: 0.001\nnumber_of_epochs: 2\n")
    assert main(["grid", str(grid_file), "--no-report", "--dry-run", "--lr=0.002"]) == 3
    assert "lr: trained with 0.001, requested 0.002" in capsys.readouterr().out
    assert main(["grid", str(grid_file), "--no-report", "--dry-run", "--lr=0.001"]) == 0
    for key in ("controller", "seed"):
        assert main(["grid", str(grid_file), "--dry-run", f"--{key}=random"]) == 1
        assert f"--{key}: the grid varies it" in capsys.readouterr().err


def test_two_evaluations_into_one_results_file_are_refused(grid_file: Path) -> None:
    """Two test-only groups that would write one results file with different settings (here a beam
    width) are a grid error naming both; a sweep that shares only its shift-0 file with another
    evaluation alike is not."""
    spec = yaml.safe_load(grid_file.read_text())
    narrow = {"name": "narrow", "folder_of": "controllers", "vary": {"controller": ["surprisal"]},
              "set": {"test_only": True, "test_bias_shifts": [0.0], "beam_size": 1}}
    grid_file.write_text(yaml.safe_dump({**spec, "groups": [*spec["groups"], narrow]}, sort_keys=False))
    with pytest.raises(grid_spec.GridError, match=r"grid runs bias/controller-surprisal/seed1 and "
                                             r"narrow/controller-surprisal/seed1 evaluate with different settings "
                                             r"into one results file \(.*results_test_only.json\)"):
        grid_spec.expand(grid_spec.load_grid(str(grid_file)))
    alike = {**narrow, "set": {"test_only": True, "test_bias_shifts": [0.0]}}
    grid_file.write_text(yaml.safe_dump({**spec, "groups": [*spec["groups"], alike]}, sort_keys=False))
    assert len(grid_spec.expand(grid_spec.load_grid(str(grid_file)))) == 6 + 2


@pytest.mark.parametrize("same_content", [True, False])
def test_a_labels_file_is_compared_by_content_where_both_files_are_there(grid_file: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture,
                                                                        same_content: bool) -> None:
    """A run folder trained on one labels file, and a grid that names another: the same labels under
    another name are the same run, other labels are a conflict (files that moved are not compared)."""
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    capsys.readouterr()
    trained, requested = tmp_path / "labels_a.csv", tmp_path / "labels_b.csv"
    trained.write_text("ID,phn\nu1,sil AH sil\n")
    requested.write_text(trained.read_text() if same_content else "ID,phn\nu1,sil AH B sil\n")
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    (folder / "hyperparams.yaml").write_text(f"controller: surprisal\nseed: 1\nnumber_of_epochs: 2\n"
                                             f"relabelled_train: {trained}\n")
    spec = yaml.safe_load(grid_file.read_text())
    spec["overrides"] = {"number_of_epochs": 2, "relabelled_train": str(requested)}
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    status = main(["grid", str(grid_file), "--no-report", "--dry-run"])
    out = capsys.readouterr().out
    conflict = f"relabelled_train: trained with '{trained}', requested '{requested}'"
    assert (status, conflict in out) == ((0, False) if same_content else (3, True))


def test_a_finished_run_made_before_the_hparams_file_changed_is_a_conflict(grid_file: Path, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    """A setting that the grid file does not set, changed in the hparams file since a run finished, makes
    that run another configuration's: a conflict, not a result, whose one line names the first settings
    that changed and counts the rest (its test-only runs are conflicts too)."""
    hparams = tmp_path / "hparams.yaml"
    objects = ("masking: !new:surprisal_cc.training.augment.FeatureMasking\n  time_masks: [{}, 2]\n"
               "counter: !new:speechbrain.utils.epoch_loop.EpochCounter\n  limit: !ref <number_of_epochs>\n")
    hparams.write_text(FAKE_HPARAMS + "dropout: 0.5\nhidden_size: 256\nbatch_size: 32\n" + objects.format(2))
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    capsys.readouterr()
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    saved = ("controller: surprisal\nseed: 1\nnumber_of_epochs: 2\nlr: 0.001\ndropout: 0.5\nhidden_size: 256\n"
             "batch_size: 32\nmasking: !new:surprisal_cc.training.augment.FeatureMasking\n  time_masks: [2, 2]\n"
             "counter: !new:speechbrain.utils.epoch_loop.EpochCounter\n  limit: 2\n")
    (folder / "hyperparams.yaml").write_text(saved)
    assert main(["grid", str(grid_file), "--no-report", "--dry-run"]) == 0  # the file as it was: its result
    assert "skipped: 6" in capsys.readouterr().out
    hparams.write_text(FAKE_HPARAMS + "dropout: 0.5\nhidden_size: 256\nbatch_size: 32\n" + objects.format(1))
    assert main(["grid", str(grid_file), "--no-report", "--dry-run"]) == 3  # an object's argument written out
    assert "(masking.time_masks.0: trained with 2, requested 1)" in capsys.readouterr().out
    (folder / "hyperparams.yaml").write_text(saved.replace("limit: 2", "limit: 5").replace("[2, 2]", "[1, 2]"))
    assert main(["grid", str(grid_file), "--no-report", "--dry-run"]) == 0  # a reference: compared where it leads
    capsys.readouterr()
    hparams.write_text(FAKE_HPARAMS.replace("lr: 0.001", "lr: 0.002") + "dropout: 0.1\nhidden_size: 512\n"
                       "batch_size: 16\n" + objects.format(1))
    assert main(["grid", str(grid_file), "--no-report", "--dry-run"]) == 3
    out = capsys.readouterr().out
    assert (f"[conflict] controllers/controller-surprisal/seed1: {folder} holds a finished run made with other "
            "settings (lr: trained with 0.001, requested 0.002; dropout: trained with 0.5, requested 0.1; hidden_size: "
            "trained with 256, requested 512; ... and 1 more setting(s)): move that folder away, or give this grid "
            "another experiment_root") in out
    assert "[conflict] bias/controller-surprisal/seed1" in out and "conflict: 2, skipped: 4" in out
    assert main(["grid", str(grid_file), "--no-report"]) == 3
    assert len((folder / "calls.txt").read_text().splitlines()) == 2  # nothing was run in that folder

def test_a_file_named_where_the_finished_run_named_none_is_a_conflict(grid_file: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """A file is left out of the comparison only where both sides name one (a grid may move files): a run that
    pretrained its own APC (apc_path null) or read the corpus's own training labels (mfa_labels' train null) is not
    the result of a configuration that names a file there, whichever way round."""
    hparams = tmp_path / "hparams.yaml"
    hparams.write_text(FAKE_HPARAMS.replace("apc_path: null", "apc_path: apcs/new.pt")
                       + "mfa_labels: {train: labels/relabelled.csv, test: null}\n")
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    capsys.readouterr()
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    saved = ("controller: surprisal\nseed: 1\nnumber_of_epochs: 2\nlr: 0.001\napc_path: {}\n"
             "mfa_labels: {{train: {}, test: null}}\n")
    for apc, train, changed in (("moved/apc.pt", "moved/relabelled.csv", None),
                                ("null", "moved/relabelled.csv", "apc_path: trained with None, requested 'apcs/new.pt'"),
                                ("moved/apc.pt", "null", "mfa_labels: trained with {'train': None, 'test': None}, "
                                                         "requested {'train': 'labels/relabelled.csv', 'test': None}")):
        (folder / "hyperparams.yaml").write_text(saved.format(apc, train))
        status = main(["grid", str(grid_file), "--no-report", "--dry-run"])
        out = capsys.readouterr().out
        assert (status, "[conflict]" in out) == ((0, False) if changed is None else (3, True)), out
        assert changed is None or f"({changed})" in out
    assert grid_spec.compared_settings({"apc_path": None}, {"apc_path": "apcs/new.pt"}) == {"apc_path": "apcs/new.pt"}



def test_settings_that_do_not_change_a_finished_run_make_no_conflict(grid_file: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """Compared with its hparams file now, a finished run stays this grid's result where only what does not
    change its training differs: folders and threads (the settings a resumed run may change), files named
    otherwise that are not both there, precision auto, the settings of an encoder, a controller or an APC
    pretraining the run does not use, and an option that the run's settings predate; a training setting
    nested in a mapping is compared."""
    hparams = tmp_path / "hparams.yaml"
    now = FAKE_HPARAMS.replace("apc_path: null", "apc_path: apcs/new.pt") + (
        "encoder: conditional\nact_max_steps: 8\napc_epochs: 8\nrandom_p_big: 0.3\nnum_workers: 0\ntest_threads: 1\n"
        "cache_folder: !ref <experiment_root>/cache\nprecision: auto\n"
        "prepare_options: {labels: mfa, skip_bad_audio: False, save_folder: !ref <experiment_root>/manifests}\n")
    hparams.write_text(now)
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    capsys.readouterr()
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    (folder / "hyperparams.yaml").write_text(
        "controller: surprisal\nseed: 1\nnumber_of_epochs: 2\nlr: 0.001\nencoder: conditional\nact_max_steps: 4\n"
        "apc_path: moved/apc.pt\napc_epochs: 20\nrandom_p_big: 0.5\nnum_workers: 4\ntest_threads: 2\n"
        "cache_folder: /elsewhere/cache\nprecision: auto\noutput_folder: /elsewhere/run\n"
        "prepare_options: {labels: mfa, save_folder: /elsewhere/manifests}\n")
    results = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps({**results, "precision": "bf16"}))  # what auto resolved to
    assert main(["grid", str(grid_file), "--no-report", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "skipped: 6" in out and "[conflict]" not in out
    hparams.write_text(now.replace("{labels: mfa,", "{labels: lexicon,"))
    assert main(["grid", str(grid_file), "--no-report", "--dry-run"]) == 3
    assert "(prepare_options: trained with {'labels': 'mfa', 'save_folder': '/elsewhere/manifests'}, requested " \
           "{'labels': 'lexicon', 'save_folder': '/elsewhere/manifests'})" in capsys.readouterr().out


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "hparams").glob("*/grid_*.yaml")),
                         ids=lambda p: p.name)
def test_a_runs_current_settings_are_what_its_recipe_saves(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a finished run is compared with, for the first run of each group of a shipped grid, is the
    configuration its command saves: its hparams file resolved with the overrides the recipe parses."""
    from hyperpyyaml import resolve_references

    from surprisal_cc.config import expand_hparams, parse_yaml_tolerant
    from surprisal_cc.training.command_line import parse_arguments

    monkeypatch.chdir(path.parents[2])
    runs = grid_spec.expand(grid_spec.load_grid(str(path)), log=io.StringIO())
    for run in {run.group: run for run in reversed(runs)}.values():
        hparams_file, _, overrides = parse_arguments(run.command[2:])
        saved = parse_yaml_tolerant(resolve_references(io.StringIO(expand_hparams(hparams_file)), overrides).getvalue())
        assert run.current_settings() == saved, run.name


@pytest.mark.parametrize("best_epoch, calls, summary", [(None, 4, "done: 2"), (2, 3, "done: 1, skipped: 1")])
def test_a_finished_run_asked_for_more_epochs_trains_on(grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                         best_epoch: Optional[int], calls: int, summary: str) -> None:
    """A finished run of the same settings and fewer epochs than the grid asks is launched again
    (the recipe resumes it from its checkpoint); its test-only runs wait for it and are evaluated
    again if the training chose another checkpoint (here its new last epoch), else they are kept."""
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    capsys.readouterr()
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    (folder / "hyperparams.yaml").write_text("controller: surprisal\nseed: 1\nnumber_of_epochs: 2\n")
    spec = yaml.safe_load(grid_file.read_text())
    spec["overrides"] = {"number_of_epochs": 3, **({"best_epoch": best_epoch} if best_epoch else {})}
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    only = ["--only", "/controllers/controller-surprisal/seed1/", "--only", "/bias/controller-surprisal/seed1/"]
    assert main(["grid", str(grid_file), "--no-report", "--dry-run", *only]) == 0
    out = capsys.readouterr().out  # the sweep waits for the training; it is run again only if stale then
    assert "dry-run: 1, waits: 1" in out and out.count("# waits: ") == 1 and "--test_only" in out.split("# waits: ")[1]
    assert main(["grid", str(grid_file), "--no-report", *only]) == 0
    out = capsys.readouterr().out
    assert summary in out and "[stale]" not in out  # nothing was stale before the training went on
    assert len((folder / "calls.txt").read_text().splitlines()) == calls  # trained on (and evaluated) once more
    tested = {json.loads((folder / name).read_text())["epochs"] for name in ("results.json", "results_test_only_bias+1.json")}
    assert tested == {best_epoch or 3}


def test_test_only_runs_that_waited_for_a_training_that_failed_keep_their_results(grid_file: Path, tmp_path: Path,
                                                                                    capsys: pytest.CaptureFixture) -> None:
    """A training asked to train on fails: the finished test-only runs of its folder, which waited for
    it, still evaluate its checkpoint and are kept (and published), not blocked."""
    spec = yaml.safe_load(grid_file.read_text())
    spec["publish"] = str(tmp_path / "published")
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    only = ["--only", "/controllers/controller-surprisal/seed1/", "--only", "/bias/controller-surprisal/seed1/"]
    assert main(["grid", str(grid_file), "--no-report", *only]) == 0
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    (folder / "hyperparams.yaml").write_text("controller: surprisal\nseed: 1\nnumber_of_epochs: 2\n")
    (folder / "fail.txt").write_text("")
    spec["overrides"] = {"number_of_epochs": 3}
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    published = tmp_path / "published/controllers/controller-surprisal/seed1/results_test_only_bias+1.json"
    published.unlink()  # to see it published again
    capsys.readouterr()
    assert main(["grid", str(grid_file), "--no-report", *only]) == 1
    assert "failed: 1, skipped: 1" in capsys.readouterr().out
    assert published.is_file()


def test_a_training_cut_off_while_it_trained_on_trains_on_again(grid_file: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    """A training that went on to more epochs and was cut off has the new number_of_epochs in its
    hyperparams.yaml but the earlier results: its history (2 of 3 epochs) says it is not finished."""
    assert main(["grid", str(grid_file), "--no-report", "--only", "/controllers/controller-surprisal/seed1/"]) == 0
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    (folder / "hyperparams.yaml").write_text("controller: surprisal\nseed: 1\nnumber_of_epochs: 3\n")
    (folder / "history.jsonl").write_text('{"epoch": 1, "PER": 40.0}\n{"epoch": 2, "PER": 35.0}\n')
    spec = yaml.safe_load(grid_file.read_text())
    spec["overrides"] = {"number_of_epochs": 3}
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    capsys.readouterr()
    assert main(["grid", str(grid_file), "--no-report", "--only", "/controllers/controller-surprisal/seed1/"]) == 0
    assert "done: 1" in capsys.readouterr().out
    (folder / "history.jsonl").write_text("".join(f'{{"epoch": {e}, "PER": 30.0}}\n' for e in (1, 2, 3)))
    assert main(["grid", str(grid_file), "--no-report", "--only", "/controllers/controller-surprisal/seed1/"]) == 0
    assert "skipped: 1" in capsys.readouterr().out


def test_test_only_results_of_an_earlier_checkpoint_are_evaluated_again(grid_file: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """A test-only run whose results record another checkpoint's epoch than its folder's training run
    (trained on by another grid command) is run again, with one line saying why; then it is complete."""
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    capsys.readouterr()
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    results = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps({**results, "epochs": 5}))
    (folder / "best_epoch.txt").write_text("5")
    (folder / "save" / "CKPT+2026-01-01+00-00-00+00").mkdir(parents=True)  # the checkpoint to evaluate
    only = ["--only", "/bias/controller-surprisal/seed1/"]
    assert main(["grid", str(grid_file), "--no-report", "--dry-run", *only]) == 0
    assert ("[stale] bias/controller-surprisal/seed1: its results evaluate the checkpoint of epoch 2, "
            "the training's is epoch 5: evaluated again") in capsys.readouterr().out
    assert main(["grid", str(grid_file), "--no-report", *only]) == 0
    assert "done: 1" in capsys.readouterr().out
    assert json.loads((folder / "results_test_only_bias+1.json").read_text())["epochs"] == 5
    assert main(["grid", str(grid_file), "--no-report", *only]) == 0
    assert "skipped: 1" in capsys.readouterr().out
    # an evaluation that chooses its checkpoint by another metric than the training did is not stale
    (folder / "results.json").write_text(json.dumps({**results, "epochs": 7}))
    (folder / "hyperparams.yaml").write_text("test_only: False\nselection_metric: PER\n")
    spec = yaml.safe_load(grid_file.read_text())
    spec["groups"][2]["set"]["selection_metric"] = "loss"
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main(["grid", str(grid_file), "--no-report", "--dry-run", *only]) == 0
    out = capsys.readouterr().out
    assert "[stale]" not in out and "skipped: 1" in out


def test_failed_run_blocks_its_test_only_runs(grid_file: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    spec = yaml.safe_load(grid_file.read_text())
    spec["seeds"] = [1]
    spec["groups"] = [{"name": "c", "vary": {"controller": ["fail"]}},
                      {"name": "b", "folder_of": "c", "vary": {"controller": ["fail"]},
                       "set": {"test_only": True, "test_bias_shifts": [1.0]}}]
    grid_file.write_text(yaml.safe_dump(spec))
    assert main(["grid", str(grid_file), "--no-report"]) == 1
    assert "blocked: 1, failed: 1" in capsys.readouterr().out
    assert "boom" in (tmp_path / "exp/grid/c/controller-fail/seed1/grid.log").read_text()
    assert json.loads(json.dumps(grid_spec.override_value(1e-05))) == "1e-05"


def test_finished_runs_are_published(grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = yaml.safe_load(grid_file.read_text())
    spec["publish"] = str(tmp_path / "published")
    grid_file.write_text(yaml.safe_dump(spec))
    assert main(["grid", str(grid_file), "--no-report", "--only", "controllers/controller-random/seed1"]) == 0
    published = tmp_path / "published" / "controllers" / "controller-random" / "seed1"
    assert json.loads((published / "results.json").read_text())["controller"] == "random"
    assert not (published / "calls.txt").exists()  # only results, history, calibration and hyperparams files
    assert not (tmp_path / "published" / "controllers" / "controller-surprisal").exists()  # not run yet


def test_published_runs_are_not_run_again_on_a_fresh_machine(grid_file: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    """A run published from a machine whose experiment folder is gone counts as finished; the
    test-only runs of its folder are blocked (the checkpoint they need stayed on that machine)."""
    import shutil

    spec = yaml.safe_load(grid_file.read_text())
    spec["publish"] = str(tmp_path / "published")
    grid_file.write_text(yaml.safe_dump(spec))
    assert main(["grid", str(grid_file), "--no-report", "--only", "controllers/controller-surprisal/seed1"]) == 0
    shutil.rmtree(tmp_path / "exp")  # another machine, which has only the published files
    capsys.readouterr()
    for dry_run in (["--dry-run"], []):  # the dry run says what the launch does
        assert main(["grid", str(grid_file), "--no-report", "--only", "controller-surprisal/seed1", *dry_run]) == 3
        out = capsys.readouterr().out
        assert "| controllers/controller-surprisal/seed1 | published |" in out
        assert "| bias/controller-surprisal/seed1 | blocked |" in out
        assert ("[blocked] bias/controller-surprisal/seed1: its training controllers/controller-surprisal/seed1 is "
                "published, and its checkpoint is not in") in out
    assert not (tmp_path / "exp/grid/controllers/controller-surprisal/seed1").exists()  # not trained again
    # selected alone, the test-only run finds no checkpoint to evaluate: blocked, not run on an untrained model
    assert main(["grid", str(grid_file), "--no-report", "--only", "bias/controller-surprisal/seed1"]) == 3
    out = capsys.readouterr().out
    assert "[blocked] bias/controller-surprisal/seed1: no checkpoint in" in out
    assert not (tmp_path / "exp/grid/controllers/controller-surprisal/seed1").exists()


def test_a_test_only_run_waits_for_an_unfinished_training_it_was_not_selected_with(
        grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Selected alone, a test-only run whose folder's training is under way (or was cut off) is blocked:
    the checkpoints there are not yet the one its training will choose. It runs once the training has
    written its results."""
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    (folder / "save/CKPT+2026-12-07+20-20-14+00").mkdir(parents=True)
    (folder / "history.jsonl").write_text(json.dumps({"epoch": 1, "valid_PER": 30.0}) + "\n")
    only = ["--only", "bias/controller-surprisal/seed1"]
    for dry_run in (["--dry-run"], []):
        assert main(["grid", str(grid_file), "--no-report", *only, *dry_run]) == 3
        out = capsys.readouterr().out
        assert (f"[blocked] bias/controller-surprisal/seed1: the training in {folder} has not finished "
                "(1/2 epochs validated, no results file): finish it first, or select it too") in out
        assert "| bias/controller-surprisal/seed1 | blocked |" in out
    assert not (folder / "calls.txt").exists()  # nothing evaluated
    assert main(["grid", str(grid_file), "--no-report", "--only", "controllers/controller-surprisal/seed1"]) == 0
    assert main(["grid", str(grid_file), "--no-report", *only]) == 0  # trained and tested: evaluated now
    assert (folder / "results_test_only_bias+1.json").exists()


def test_test_only_runs_publish_only_their_own_files(grid_file: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    spec = yaml.safe_load(grid_file.read_text())
    spec["publish"] = str(tmp_path / "published")
    grid_file.write_text(yaml.safe_dump(spec))
    assert main(["grid", str(grid_file), "--no-report", "--only", "controllers/controller-surprisal/seed1",
                 "--only", "bias/controller-surprisal/seed1"]) == 0
    for folder in (tmp_path / "exp/grid", tmp_path / "published"):
        run = folder / "controllers/controller-surprisal/seed1"
        assert (run / "hyperparams.yaml").read_text() == "test_only: False\n"
        assert (run / "hyperparams_test_only.yaml").read_text() == "test_only: True\n"
        assert (run / "results_test_only_bias+1.json").is_file()


def test_published_report_grows_run_by_run(grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = yaml.safe_load(grid_file.read_text())
    spec["publish"] = str(tmp_path / "published")
    grid_file.write_text(yaml.safe_dump(spec))
    assert main(["grid", str(grid_file), "--only", "controllers/controller-random/seed1"]) == 0
    report = (tmp_path / "published" / "report" / "report.md").read_text()
    assert "Random controller" in report and "Surprisal-based controller" not in report
    assert main(["grid", str(grid_file), "--only", "controllers/controller-surprisal/seed1"]) == 0
    report = (tmp_path / "published" / "report" / "report.md").read_text()
    assert "Random controller" in report and "Surprisal-based controller" in report
    assert (tmp_path / "exp" / "report" / "report.md").is_file()


def test_report_pool_pools_the_reports_of_a_grid(grid_file: Path, tmp_path: Path) -> None:
    """``report_pool``: the published and the experiment's reports pool over those keys (here the
    precision: seed 1 in fp32 and seed 2 in bf16 form one row)."""
    spec = yaml.safe_load(grid_file.read_text())
    spec.update(publish=str(tmp_path / "published"), report_pool=["precision"], groups=[
        {"name": name, "vary": {"seed": [seed]}, "set": {"precision": name}} for name, seed in (("fp32", 1), ("bf16", 2))])
    grid_file.write_text(yaml.safe_dump(spec))
    assert main(["grid", str(grid_file)]) == 0
    for report in (tmp_path / "published" / "report" / "report.md", tmp_path / "exp" / "report" / "report.md"):
        rows = [line for line in report.read_text().splitlines() if "bf16+fp32 training" in line]
        assert rows and all("| **2** |" in row for row in rows), report


def test_a_failing_report_does_not_stop_the_grid(grid_file: Path, tmp_path: Path) -> None:
    import io

    runs = grid_spec.expand(grid_spec.load_grid(str(grid_file)))[:2]
    calls = []

    def broken_report() -> None:
        calls.append(1)
        raise ValueError("no figure today")

    log = io.StringIO()
    status = grid.execute(runs, log=log, publish=(tmp_path / "exp" / "grid", tmp_path / "published"),
                          on_published=broken_report)
    assert [s for s, _ in status.values()] == ["done", "done"] and len(calls) == 2
    assert "the published report was not updated: ValueError('no figure today')" in log.getvalue()


def test_interrupted_runs_resume_before_new_ones(grid_file: Path, tmp_path: Path) -> None:
    import io

    runs = grid_spec.expand(grid_spec.load_grid(str(grid_file)))[:4]
    checkpoint = runs[3].output_folder / "save" / "CKPT+2026-01-01+00-00-00+00"
    checkpoint.mkdir(parents=True)  # controller-random/seed2 was cut off mid-training
    assert [r.started() for r in runs] == [False, False, False, True]
    log = io.StringIO()
    grid.execute(runs, jobs=1, log=log)
    starts = [line.split()[1] for line in log.getvalue().splitlines() if line.startswith("[start]")]
    assert starts == [runs[3].name, runs[0].name, runs[1].name, runs[2].name]


def test_test_only_runs_go_as_soon_as_their_training_run_has_finished(grid_file: Path) -> None:
    runs = grid_spec.expand(grid_spec.load_grid(str(grid_file)))
    log = io.StringIO()
    grid.execute(runs, jobs=1, log=log)
    starts = [line.split()[1] for line in log.getvalue().splitlines() if line.startswith("[start]")]
    evaluations = [r for r in runs if r.test_only]
    assert evaluations and sorted(starts) == sorted(r.name for r in runs)
    for run in evaluations:
        trainer = next(r for r in runs if not r.test_only and r.output_folder == run.output_folder)
        assert starts.index(run.name) == starts.index(trainer.name) + 1


def test_malformed_grid_files_are_grid_errors(tmp_path: Path) -> None:
    path = tmp_path / "grid.yaml"
    with pytest.raises(grid_spec.GridError, match="does not exist"):
        grid_spec.load_grid(str(path))
    path.write_text("recipe: r.py\nhparams: h.yaml\n")
    with pytest.raises(grid_spec.GridError, match="lacks groups"):
        grid_spec.load_grid(str(path))
    path.write_text(yaml.safe_dump({"recipe": "r.py", "hparams": "h.yaml", "groups": [{"name": "a"}, {"name": "a"}]}))
    with pytest.raises(grid_spec.GridError, match="distinct name"):
        grid_spec.load_grid(str(path))


@pytest.mark.parametrize("change, message", [
    (lambda spec: "recipe: [\n", "not valid YAML"),
    (lambda spec: "- a\n- b\n", "must be a mapping"),
    (lambda spec: {**spec, "groups": {"a": 1}}, "groups must be a list"),
    (lambda spec: {**spec, "groups": ["a"]}, "groups must be a list"),
    (lambda spec: {**spec, "groups": [{"name": "a", "vary": [1]}]}, "vary of group 'a'"),
    (lambda spec: {**spec, "overrides": [1]}, "overrides must be a mapping"),
    (lambda spec: {**spec, "seeds": 3}, "seeds must be a non-empty list"),
    (lambda spec: {**spec, "report_pool": ["apcs"]}, "report_pool apcs: it must be a list of keys of apc, precision"),
    (lambda spec: {**spec, "overides": {"lr": 1}}, "unknown key(s) ['overides']: a grid file has"),
    (lambda spec: {**spec, "groups": [{**spec["groups"][0], "sets": {"encoder": "act"}}]},
     "unknown key(s) ['sets'] in group"),
    (lambda spec: {**spec, "recipe": "no_such_recipe.py"}, "recipe no_such_recipe.py is not a file"),
    (lambda spec: {**spec, "hparams": "no_such.yaml"}, "hparams no_such.yaml is not a file"),
    (lambda spec: {**spec, "overrides": {"debug": True}}, "debug: a --debug run writes into <output_folder>-debug"),
    (lambda spec: {**spec, "seeds": []}, "seeds must be a non-empty list of whole numbers"),
    (lambda spec: {**spec, "seeds": [1, "abc"]}, "seeds must be a non-empty list of whole numbers"),
    (lambda spec: {**spec, "groups": [{"name": "a", "vary": {"controller": []}}]},
     "vary controller of group 'a' is an empty list: the group would have no run"),
    (lambda spec: {**spec, "groups": [{"name": "a", "set": {"seed": 5}}]}, "set: seed in group 'a'"),
    (lambda spec: {**spec, "groups": [{"name": "a", "folder_of": "b"}]}, "folder_of 'b' of group 'a' names no group"),
    (lambda spec: {**spec, "groups": []}, "groups is empty: the grid would have no run"),
    (lambda spec: {**spec, "groups": [{"name": 1}]}, "group name 1 must be a folder name"),
    (lambda spec: {**spec, "groups": [{"name": "a/b"}]}, "group name 'a/b' must be a folder name"),
    (lambda spec: {**spec, "groups": [{"name": ".."}]}, "group name '..' must be a folder name"),
    (lambda spec: {**spec, "groups": [{"name": "a "}]}, "group name 'a ' must be a folder name"),
    (lambda spec: {**spec, "groups": [{"name": "a", "vary": {"seed": ["x", 2.5]}}]},
     "vary: seed of group 'a' must list whole numbers of at least 0; got ['x', 2.5]"),
])
def test_grid_files_of_the_wrong_shape_are_one_line_naming_the_file(grid_file: Path, change: Any, message: str,
                                                                     capsys: pytest.CaptureFixture) -> None:
    changed = change(yaml.safe_load(grid_file.read_text()))
    grid_file.write_text(changed if isinstance(changed, str) else yaml.safe_dump(changed))
    assert main(["grid", str(grid_file), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: grid file {grid_file}") and message in err and len(err.splitlines()) == 1


def test_a_grid_refuses_debug_runs(grid_file: Path, capsys: pytest.CaptureFixture) -> None:
    """A --debug run writes where the grid does not look: refused in one line, as an option too."""
    for option in ("--debug", "--debug=True"):
        assert main(["grid", str(grid_file), "--dry-run", option]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --debug: a --debug run writes into <output_folder>-debug") and len(err.splitlines()) == 1


@pytest.mark.parametrize("change, extra, where, key, match", [
    (lambda spec: spec["overrides"].update(number_of_epoch=3), [], "overrides", "number_of_epoch", "number_of_epochs"),
    (lambda spec: spec["groups"][2]["set"].update(test_bias_shift=[1.0]), [], "group 'bias' set", "test_bias_shift",
     "test_bias_shifts"),
    (lambda spec: spec["groups"][0]["vary"].update(contoller=["random"]), [], "group 'controllers' vary", "contoller",
     "controller"),
    (lambda spec: None, ["--lrr=0.01"], "command line", "lrr", "lr"),
], ids=["overrides", "set", "vary", "command_line"])
def test_a_misspelt_key_stops_the_grid_before_anything_is_prepared_or_launched(
        grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture, change: Any, extra: list, where: str, key: str,
        match: str) -> None:
    """A key that the recipe would refuse would fail every run at launch: the grid, dry or not, names the
    grid file, where the key is set, and the closest key there is, in one line, before its prepare steps."""
    labels = _with_prepare_step(grid_file, tmp_path)
    spec = yaml.safe_load(grid_file.read_text())
    change(spec)
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    for dry_run in (["--dry-run"], []):
        assert main(["grid", str(grid_file), "--no-report", *dry_run, *extra]) == 1
        assert capsys.readouterr().err == (
            f"error: grid file {grid_file}: {where}: {key} is not a key of {tmp_path / 'hparams.yaml'} nor a "
            f"SpeechBrain option (did you mean {match}?) (a run given such a setting fails at launch)\n")
    assert not labels.exists() and not (tmp_path / "prepare_calls.txt").exists() and not (tmp_path / "exp").exists()


def test_a_key_the_grid_passes_to_every_run_must_be_in_the_hparams_file(grid_file: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    hparams = tmp_path / "hparams.yaml"
    hparams.write_text(hparams.read_text().replace("output_folder:", "output_dir:"))
    assert main(["grid", str(grid_file), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert f"output_folder is not a key of {hparams}, and the grid passes it to every run" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("key, value", [
    ("lr", 0.5), ("lrr", 0.5), ("model", {"width": 3}), ("model.width", 3), ("device", "cpu"), ("test_only", True),
    ("data_parallel_backend", True), ("find_unused_parameters", True), ("max_grad_norm", 2.0), ("precision", "bf16"),
    ("precision", "auto"), ("data", "x")])
def test_the_grid_refuses_a_setting_where_the_recipe_would(tmp_path: Path, key: str, value: Any) -> None:
    """The grid takes a setting exactly where the recipe does: its command option parsed as the recipe parses
    it (SpeechBrain's options; --precision=auto an override), the rest built as overrides of the hparams
    file, which hyperpyyaml refuses for a key the file lacks (a mapping is merged into the key's as it is)."""
    from surprisal_cc.errors import ConfigurationError
    from surprisal_cc.config import load_hparams_file, load_yaml_tolerant
    from surprisal_cc.training.command_line import parse_arguments

    hparams = tmp_path / "hparams.yaml"
    hparams.write_text("lr: 0.1\nfind_unused_parameters: False\nmodel: {width: 2}\n")
    try:
        _, _, overrides = parse_arguments([str(hparams), grid_spec.cli_option(key, value)])
        load_hparams_file(hparams, overrides)
        recipe_takes = True
    except (SystemExit, KeyError, ConfigurationError):  # SpeechBrain's parser, hyperpyyaml, parse_arguments
        recipe_takes = False
    assert (grid_settings.setting_problem(key, value, set(load_yaml_tolerant(hparams))) is None) == recipe_takes


def test_an_abbreviation_of_a_speechbrain_option_is_refused() -> None:
    """SpeechBrain's parser takes a key that begins one of its options' names for that option, even where
    the hparams file has that key: the grid asks for the full name."""
    import speechbrain as sb

    assert sb.parse_arguments(["h.yaml", "--dev=cpu"])[1]["device"] == "cpu"
    assert grid_settings.setting_problem("dev", "cpu", {"dev"}) == (
        "dev: SpeechBrain's command line takes --dev for its option --device: write the option's full name")
    assert "its options --compile_mode or --compile_module_keys" in grid_settings.setting_problem("compile_mo", "x", set())


def test_the_grid_knows_speechbrains_options() -> None:
    """:data:`grid_settings.SPEECHBRAIN_OPTIONS` are the options of SpeechBrain's command line, and its flags those
    that take no value (passed bare)."""
    from speechbrain.utils.run_opts import RunOptions

    actions = [a for a in RunOptions._create_parser()._actions if a.option_strings and a.dest != "help"]
    assert {a.dest for a in actions} == grid_settings.SPEECHBRAIN_OPTIONS
    assert {a.dest for a in actions if a.nargs == 0} == grid_settings.SPEECHBRAIN_FLAGS
    assert grid_spec.cli_option("data_parallel_backend", True) == "--data_parallel_backend"


def test_grid_options_that_select_nothing_or_no_cores_are_errors(grid_file: Path, capsys: pytest.CaptureFixture) -> None:
    for option in (["--jobs", "0"], ["--threads", "-1"], ["--threads", "0"]):
        with pytest.raises(SystemExit) as stop:
            main(["grid", str(grid_file), "--dry-run", *option])
        assert stop.value.code == 2 and "must be a positive integer" in capsys.readouterr().err
    assert main(["grid", str(grid_file), "--dry-run", "--only", "contoller"]) == 1
    assert capsys.readouterr().err.startswith("error: --only contoller: no run of ")
    first = grid_spec.expand(grid_spec.load_grid(str(grid_file)), [])[0].name
    assert main(["grid", str(grid_file), "--dry-run", "--only", first, "--only", "seed9"]) == 1  # each one is checked
    assert capsys.readouterr().err.startswith("error: --only seed9: no run of ")


def _with_prepare_step(grid_file: Path, tmp_path: Path, sha256: Optional[str] = None, fail: bool = False) -> Path:
    """Give the grid file a prepare step that makes ``labels.csv`` and counts its own calls."""
    labels, calls = tmp_path / "inputs" / "labels.csv", tmp_path / "prepare_calls.txt"
    script = (f"open({str(calls)!r}, 'a').write('x\\n'); "
              + ("raise SystemExit('no labels today')" if fail else f"open({str(labels)!r}, 'w').write('a,b\\n')"))
    step = {"creates": str(labels), "command": ["python", "-c", script]}
    if sha256:
        step["sha256"] = sha256
    spec = yaml.safe_load(grid_file.read_text())
    spec["prepare"] = [step]
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    return labels


LABELS_SHA256 = hashlib.sha256(b"a,b\n").hexdigest()


def test_prepare_steps_run_once_before_the_first_launch(grid_file: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    labels = _with_prepare_step(grid_file, tmp_path, sha256=LABELS_SHA256)
    assert main(["grid", str(grid_file), "--dry-run", "--only", "seed1"]) == 0
    assert "# prepare: " in capsys.readouterr().out and not labels.exists()  # a dry run makes nothing
    assert main(["grid", str(grid_file), "--no-report", "--only", "seed1"]) == 0
    assert "[prepare] " in capsys.readouterr().out and labels.read_text() == "a,b\n"
    assert (tmp_path / "inputs" / "labels.csv.log").exists()
    assert main(["grid", str(grid_file), "--no-report"]) == 0  # the file exists: not made again
    assert (tmp_path / "prepare_calls.txt").read_text().count("x") == 1
    labels.unlink()
    assert main(["grid", str(grid_file), "--no-report"]) == 0  # every run finished: nothing to prepare for
    assert not labels.exists()


def test_a_prepared_file_with_another_digest_stops_the_grid_before_any_run(grid_file: Path, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    labels = _with_prepare_step(grid_file, tmp_path, sha256="0" * 64)
    assert main(["grid", str(grid_file), "--no-report"]) == 1
    err = capsys.readouterr().err
    assert str(labels) in err and "0" * 64 in err and LABELS_SHA256 in err and "seeds" in err
    assert not (tmp_path / "exp" / "grid").exists()


def test_a_failing_prepare_step_names_its_log(grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    labels = _with_prepare_step(grid_file, tmp_path, fail=True)
    assert main(["grid", str(grid_file), "--no-report"]) == 1
    err = capsys.readouterr().err
    assert f"prepare step for {labels} failed (exit status 1, file not created)" in err and "labels.csv.log" in err
    assert "no labels today" in (tmp_path / "inputs" / "labels.csv.log").read_text()
    assert not (tmp_path / "exp" / "grid").exists()


def test_a_prepare_step_that_fails_after_writing_leaves_no_file_to_be_taken_for_its_output(
        grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    labels = tmp_path / "inputs" / "labels.csv"
    spec = yaml.safe_load(grid_file.read_text())
    spec["prepare"] = [{"creates": str(labels), "command": [
        "python", "-c", f"open({str(labels)!r}, 'w').write('half'); raise SystemExit(3)"]}]
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main(["grid", str(grid_file), "--no-report"]) == 1
    assert "failed (exit status 3, its partial file moved to" in capsys.readouterr().err
    assert not labels.exists() and (tmp_path / "inputs" / "labels.csv.failed").read_text() == "half"
    assert not (tmp_path / "exp" / "grid").exists()


@pytest.mark.parametrize("prepare", [{"creates": "x"}, [{"command": ["true"]}], [{"creates": "x", "command": "true"}],
                                     [{"creates": "x", "command": ["true"], "md5": "0"}]])
def test_malformed_prepare_steps_are_grid_errors(grid_file: Path, prepare: Any) -> None:
    spec = yaml.safe_load(grid_file.read_text())
    spec["prepare"] = prepare
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(grid_spec.GridError, match="prepare"):
        grid_spec.load_grid(str(grid_file))


def test_training_runs_of_different_configurations_never_share_a_folder(grid_file: Path) -> None:
    spec = yaml.safe_load(grid_file.read_text())
    spec["groups"].append({"name": "longer", "folder_of": "controllers", "vary": {"controller": ["random"]},
                           "set": {"number_of_epochs": 4}})  # would land in controllers/controller-random/
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(grid_spec.GridError, match="different configurations in one folder"):
        grid_spec.expand(grid_spec.load_grid(str(grid_file)), log=io.StringIO())


REPOSITORY = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((REPOSITORY / "hparams").glob("*/grid_*.yaml")), ids=lambda p: p.name)
def test_shipped_grid_files_set_only_keys_their_recipe_reads(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command of a shipped grid, parsed as the recipe parses it, overrides only keys of its hparams
    file (a misspelt key fails here, not hours into a grid)."""
    from surprisal_cc.config import load_yaml_tolerant
    from surprisal_cc.training.command_line import parse_arguments

    monkeypatch.chdir(REPOSITORY)
    spec = grid_spec.load_grid(str(path))
    assert Path(spec.recipe).is_file() and Path(spec.hparams).is_file()
    keys = set(load_yaml_tolerant(spec.hparams))
    runs = grid_spec.expand(spec, log=io.StringIO())
    assert runs
    for step in spec.prepare:  # each prepare step runs a script of the repository
        assert step.command[0] == "python" and Path(step.command[1]).is_file(), step.command
    for run in runs:
        _, _, overrides = parse_arguments(run.command[2:])  # as the recipe does (--precision=auto included)
        assert set(yaml.safe_load(overrides)) <= keys, (run.name, set(yaml.safe_load(overrides)) - keys)


# records of published runs whose APC was pretrained by hand (their headers give the commands)
RECORD_GRIDS = {"grid_cpu.yaml", "grid_converged.yaml"}
SELF_CONTAINED_GRIDS = [p for p in sorted((REPOSITORY / "hparams").glob("*/grid_*.yaml")) if p.name not in RECORD_GRIDS]


@pytest.mark.parametrize("path", SELF_CONTAINED_GRIDS, ids=lambda p: p.name)
def test_grids_run_on_a_fresh_clone(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid for users (every grid but the records) needs no file that lives only on the machine that made it: each
    run's APC and training labels are in git or made by a prepare step (the step's file, or a file
    written beside it)."""
    import subprocess

    import speechbrain as sb

    monkeypatch.chdir(REPOSITORY)
    spec = grid_spec.load_grid(str(path))
    made = {Path(step.creates) for step in spec.prepare}
    made_folders = {m.parent for m in made}
    tracked = set(subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split())
    for run in grid_spec.expand(spec, log=io.StringIO()):
        _, _, overrides = sb.parse_arguments(run.command[2:])
        values = yaml.safe_load(overrides)
        for key in ("apc_path", "relabelled_train"):
            value = values.get(key)
            if value:
                assert (value in tracked or Path(value) in made or Path(value).parent in made_folders), \
                    f"{path.name}: {run.name}: {key} {value} is neither in git nor made by a prepare step"


def test_test_time_ablation_and_bias_sweep_share_a_folder(grid_file: Path, tmp_path: Path) -> None:
    """Table 4's "surprisal at test?" as a test-only run beside the bias sweep: its files are named
    apart, so neither evaluation makes the other look complete or overwrites it."""
    spec = yaml.safe_load(grid_file.read_text())
    spec["groups"].append({"name": "random_at_test", "folder_of": "controllers", "vary": {"controller": ["surprisal"]},
                           "set": {"test_only": True, "controller_at_test": False}})
    spec["publish"] = str(tmp_path / "published")
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    runs = grid_spec.expand(grid_spec.load_grid(str(grid_file)), log=io.StringIO())
    ablation = [r for r in runs if r.group == "random_at_test"]
    assert [r.evaluation_tag for r in ablation] == ["_random_at_test"] * 2
    assert main(["grid", str(grid_file), "--no-report"]) == 0
    folder = tmp_path / "exp" / "grid" / "controllers" / "controller-surprisal" / "seed1"
    assert {"results_test_only.json", "results_test_only_bias+1.json", "results_test_only_random_at_test.json",
            "hyperparams_test_only.yaml", "hyperparams_test_only_random_at_test.yaml"} <= {p.name for p in folder.iterdir()}
    published = tmp_path / "published" / "controllers" / "controller-surprisal" / "seed1"
    assert (published / "results_test_only_random_at_test.json").is_file()
    assert (published / "hyperparams_test_only_random_at_test.yaml").is_file()
    assert all(r.complete() for r in runs)


def test_a_run_locked_by_a_live_grid_is_left_to_it_and_a_stale_lock_is_taken_over(
        grid_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two grid commands on one machine never train the same run (a dry run shows it as trained
    elsewhere); the lock of a process that has ended (a machine stopped mid-run) does not stop the
    next command."""
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    folder.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / "grid-controllers.lock").write_text(run_locks._process_identity(holder.pid))
        assert main(["grid", str(grid_file), "--dry-run", "--only", "seed1"]) == 0
        out = capsys.readouterr().out
        assert "| controllers/controller-surprisal/seed1 | elsewhere |" in out
        assert "| controllers/controller-random/seed1 | dry-run |" in out
        assert "| bias/controller-surprisal/seed1 | elsewhere |" in out  # evaluated by the grid that trains it
        assert main(["grid", str(grid_file), "--no-report", "--only", "controller-surprisal/seed1"]) == 3
        out = capsys.readouterr().out
        assert "| controllers/controller-surprisal/seed1 | elsewhere |" in out
        assert "| bias/controller-surprisal/seed1 | blocked |" in out
        assert not (folder / "results.json").exists()
    finally:
        holder.kill()
        holder.wait()
    assert main(["grid", str(grid_file), "--no-report", "--only", "controller-surprisal/seed1"]) == 0
    assert "done: 2" in capsys.readouterr().out  # the dead holder's lock was taken over
    assert (folder / "results.json").exists() and not list(folder.glob("grid-*.lock"))  # released when done


def test_two_grids_taking_one_lock_at_once_never_both_get_it(tmp_path, monkeypatch):
    """The lock file holds its holder from the moment it exists: a grid that looks while another one is
    taking it sees a live holder, never an empty file it would take for stale."""
    import threading

    identity = run_locks._process_identity
    started = threading.Event()

    def slow_identity(pid):  # the first taker is slow to name itself; the second looks meanwhile
        if threading.current_thread().name == "first":
            started.set()
            time.sleep(0.3)
        return identity(pid)

    monkeypatch.setattr(run_locks, "_process_identity", slow_identity)
    taken = {}
    first = threading.Thread(target=lambda: taken.update(first=run_locks.acquire_run_lock(tmp_path)), name="first")
    first.start()
    started.wait(5)
    taken["second"] = run_locks.acquire_run_lock(tmp_path)
    first.join(5)
    assert sorted(map(str, taken.values())).count("None") == 1  # exactly one of them holds it
    assert [p.name for p in tmp_path.iterdir()] == ["grid.lock"]


def test_the_run_lock_is_readable_by_others_and_works_without_hard_links(tmp_path, monkeypatch):
    """Another user's grid can read who holds a run (mode 0644); on a file system without hard
    links the lock is created in place, and a live holder is still reported."""
    import os
    import stat

    assert run_locks.acquire_run_lock(tmp_path) is None
    assert stat.S_IMODE((tmp_path / "grid.lock").stat().st_mode) == 0o644
    run_locks.release_run_lock(tmp_path)

    def no_hard_links(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_hard_links)
    assert run_locks.acquire_run_lock(tmp_path) is None
    assert (tmp_path / "grid.lock").read_text().split()[0] == str(os.getpid())
    assert run_locks.acquire_run_lock(tmp_path) is not None  # held (by this very process): refused
    assert [p.name for p in tmp_path.iterdir()] == ["grid.lock"]


def test_a_missing_input_file_stops_the_grid_before_any_run(grid_file: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    """An apc_path that is neither there nor made by a prepare step would fail every run, each after its
    data preparation: one line names it first; a dry run lists it; a finished grid does not need it."""
    spec = yaml.safe_load(grid_file.read_text())
    spec["overrides"]["apc_path"] = str(tmp_path / "apc" / "apc.pt")
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main(["grid", str(grid_file), "--no-report"]) == 1
    err = capsys.readouterr().err
    assert f"apc_path {tmp_path / 'apc' / 'apc.pt'} ({grid_file}, 6 runs): no such file" in err and "pretrain_apc.py" in err
    assert not (tmp_path / "exp" / "grid").exists()
    assert main(["grid", str(grid_file), "--dry-run"]) == 0
    assert "# missing: apc_path" in capsys.readouterr().out
    spec["prepare"] = [{"creates": str(tmp_path / "apc" / "apc.pt"),
                        "command": [sys.executable, "-c", f"open({str(tmp_path / 'apc' / 'apc.pt')!r}, 'w').write('x')"]}]
    grid_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main(["grid", str(grid_file), "--no-report"]) == 0  # made by a prepare step: no error
    (tmp_path / "apc" / "apc.pt").unlink()
    assert main(["grid", str(grid_file), "--no-report"]) == 0  # every run finished: nothing needs it


@pytest.mark.parametrize("name", ["grid_apc_tc5.yaml", "grid_apc.yaml"])
def test_the_published_grids_make_every_input_file_they_need(name, tmp_path, monkeypatch):
    """On a fresh clone (nothing under results/), the prepare steps make every input file the runs read:
    nothing stops the launch as missing."""
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    spec = grid_spec.load_grid(str(repo / "hparams" / "MiniLibriSpeech" / name))
    runs = grid_spec.expand(spec)
    for tracked in ("surprisal_cc", "hparams", "recipes"):  # a clone without results/
        (tmp_path / tracked).symlink_to(repo / tracked, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    assert grid_spec.check_input_files(runs, spec.prepare, name) == []


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_grid_notices_at_once_that_a_run_has_ended(pidfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between polls the grid waits for its runs' processes to end, not a fixed time: a run that ends is
    noticed at once (without pidfds, as on macOS, the first run's end), a run still going is not reaped."""
    import os

    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("pidfds are Linux's")
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        quick = subprocess.Popen([sys.executable, "-c", "pass"])
        start = time.monotonic()
        grid._wait_for_an_end([slow, quick] if pidfd else [quick, slow], timeout=60.0)
        assert time.monotonic() - start < 30 and quick.poll() == 0 and slow.poll() is None
        start = time.monotonic()
        grid._wait_for_an_end([slow], timeout=0.2)  # nothing ends: back after the timeout
        assert 0.15 < time.monotonic() - start < 30 and slow.poll() is None
    finally:
        slow.kill()
        slow.wait()


def test_a_lock_held_on_another_host_is_never_taken_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a shared file system two hosts (faked names) never both hold one run: a lock names its host, and a
    lock of another host is live whatever its PID is here; on its own host, a lock whose process has ended
    is taken over. A requeued Slurm job takes over the lock its earlier start left (same job, fewer restarts)."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # a PID that runs nowhere now
    host = {"name": "node-a"}
    monkeypatch.setattr(run_locks, "this_host", lambda: host["name"])
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert run_locks.acquire_run_lock(tmp_path) is None
    assert (tmp_path / "grid.lock").read_text().split()[2] == "node-a"
    left = f"{ended.pid} 123 node-a"
    (tmp_path / "grid.lock").write_text(left)  # node-a's process ended without releasing it
    host["name"] = "node-b"
    assert run_locks.acquire_run_lock(tmp_path) == left and run_locks.lock_holder(tmp_path) == left
    assert (tmp_path / "grid.lock").read_text() == left  # not taken over
    host["name"] = "node-a"
    assert run_locks.lock_holder(tmp_path) is None and run_locks.acquire_run_lock(tmp_path) is None
    run_locks.release_run_lock(tmp_path)

    (tmp_path / "grid.lock").write_text(f"{ended.pid} 123 node-a job 7 0")  # a Slurm job's run on node-a
    host["name"] = "node-b"
    monkeypatch.setenv("SLURM_JOB_ID", "8")
    assert run_locks.acquire_run_lock(tmp_path) is not None  # another job's
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert run_locks.acquire_run_lock(tmp_path) is None  # this job's earlier start, requeued since
    assert (tmp_path / "grid.lock").read_text().split()[2:] == ["node-b", "job", "7", "1"]


def test_two_hosts_taking_one_lock_at_once_never_both_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two grid processes on two hosts (faked: threads that name different hosts) that take one run's lock
    at the same moment: exactly one of them holds it, the other sees it as held on the first host."""
    import threading

    identity = run_locks._process_identity
    started = threading.Event()

    def slow_identity(pid):  # node-a is slow to name itself; node-b looks meanwhile
        if threading.current_thread().name == "node-a":
            started.set()
            time.sleep(0.3)
        return identity(pid)

    monkeypatch.setattr(run_locks, "_process_identity", slow_identity)
    monkeypatch.setattr(run_locks, "this_host", lambda: "node-a" if threading.current_thread().name == "node-a"
                        else "node-b")
    taken = {}
    first = threading.Thread(target=lambda: taken.update(a=run_locks.acquire_run_lock(tmp_path)), name="node-a")
    first.start()
    started.wait(5)
    taken["b"] = run_locks.acquire_run_lock(tmp_path)
    first.join(5)
    assert sorted(map(str, taken.values())).count("None") == 1
    holder = (tmp_path / "grid.lock").read_text()
    loser = taken["a"] if taken["b"] is None else taken["b"]
    assert loser == holder and run_locks.holder_host(holder) in ("node-a", "node-b")
    assert [p.name for p in tmp_path.iterdir()] == ["grid.lock"]
