"""Integration tests: the real recipes, run as commands for a few steps on real dev-clean-2 audio.

A stand-in Mini-LibriSpeech folder is built from a few dev-clean-2 speakers (symbolic links);
APC is pretrained once (one short epoch) and shared by every controller and encoder run.
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from data_fixtures import REPO, make_timit_fixture, mini_corpus  # noqa: F401  (a fixture)
from surprisal_cc.model.apc import load_apc
from surprisal_cc.data.manifest import file_sha256
from surprisal_cc.config import parse_yaml_tolerant
from surprisal_cc.model.nnet import weights_fingerprint
from surprisal_cc.experiments.run_labels import config_of, model_name
from surprisal_cc.experiments.tables import short_label

pytestmark = pytest.mark.integration

MLS_HPARAMS = REPO / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml"
MLS_RECIPE = REPO / "recipes" / "MiniLibriSpeech" / "train.py"
# 40 outputs -> post-net 1,203,240 MACs; 42 outputs -> 1,204,266 (Table 1 convention).
APC, PRE, SMALL, BIG, POST42 = 3_054_672, 1_182_720, 262_656, 2_099_712, 1_204_266


def run(args, cwd=REPO, timeout=600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-5000:]}"
    return proc


def common_args(root: Path, **overrides):
    """Command-line overrides shared by the runs; keyword arguments replace or add keys."""
    options = {"data_folder": root / "corpus", "experiment_root": root / "exp", "valid_speakers": 2,
               "number_of_epochs": 1, "batch_size": 4, "apc_epochs": 1, "apc_batch_size": 4, "seed": 3, **overrides}
    return [f"--{key}={value}" for key, value in options.items()]


@pytest.fixture(scope="module")
def pretrained(mini_corpus):
    """Runs the recipe once with the surprisal controller; APC is pretrained on the training split."""
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(mini_corpus)]))
    return mini_corpus


def results_of(root: Path, folder: str) -> dict:
    return json.loads((root / "exp" / folder / "seed3" / "results.json").read_text())


def test_surprisal_recipe_end_to_end(pretrained):
    res = results_of(pretrained, "conditional-surprisal-paper-apc")
    assert (pretrained / "exp" / "apc" / "apc.pt").is_file()
    assert res["calibration"]["mean_p_big"] == pytest.approx(0.65, abs=1e-3)
    assert res["calibration"]["var_p_big"] == pytest.approx(0.04, abs=1e-3)
    assert res["error_rate_details"]["num_utterances"] == 6
    assert res["PER"] > 0
    # the development split (stand-in mfa-dev, TextGrid labels) decoded with the same checkpoint
    dev = res["dev"]
    assert dev["error_rate_details"]["num_utterances"] == 3 and dev["PER"] > 0
    assert dev["flops_per_frame"] == pytest.approx(APC + PRE + POST42 + 2 + SMALL + dev["big_fraction"] * (BIG - SMALL),
                                                   rel=1e-9)
    assert (pretrained / "exp" / "conditional-surprisal-paper-apc" / "seed3" / "dev_alignments.txt").is_file()
    assert res["train_labels"] == "lexicon" and res["precision"] in ("fp32", "bf16")
    # MACs counted from what ran: small on the small frames, big on the big frames, exactly.
    expected = APC + PRE + POST42 + 2 + SMALL + res["big_fraction"] * (BIG - SMALL)
    assert res["flops_per_frame"] == pytest.approx(expected, rel=1e-9)
    history = [json.loads(l) for l in (pretrained / "exp" / "conditional-surprisal-paper-apc" / "seed3"
                                       / "history.jsonl").read_text().splitlines()]
    assert history[-1]["epoch"] == 1 and "PER" in history[-1]
    assert history[-1]["epoch_s"] >= history[-1]["elapsed_s"] > 0  # epoch (train + valid) vs validation time


@pytest.mark.parametrize("controller,expected_flops", [
    ("big_only", APC + PRE + BIG + POST42),
    ("small_only", APC + PRE + SMALL + POST42),
    ("random", None),
    ("learned", None),
])
def test_each_controller_runs(pretrained, controller, expected_flops):
    apc = pretrained / "exp" / "apc" / "apc.pt"
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained), f"--controller={controller}", f"--apc_path={apc}"]))
    res = results_of(pretrained, f"conditional-{controller}-paper-apc")
    assert res["controller"] == controller
    assert res["apc"] == weights_fingerprint(load_apc(apc))  # what report tells runs of other APCs apart by
    if expected_flops is not None:
        assert res["flops_per_frame"] == pytest.approx(expected_flops, rel=1e-9)
    else:
        assert APC + PRE + SMALL + POST42 < res["flops_per_frame"] < APC + PRE + BIG + POST42 + 50_000


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_recipe_trains_on_cuda(pretrained):
    """``--device=cuda:0``: feature cache, calibration, training and test decoding on the GPU (fp32 by ``auto``)."""
    apc = pretrained / "exp" / "apc" / "apc.pt"
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, experiment_root=pretrained / "exp_cuda"),
            "--device=cuda:0", f"--apc_path={apc}"]))
    res = json.loads((pretrained / "exp_cuda" / "conditional-surprisal-paper-apc" / "seed3" / "results.json")
                     .read_text())
    assert res["device"] == "cuda:0" and res["precision"] == "fp32"
    assert res["calibration"]["mean_p_big"] == pytest.approx(0.65, abs=1e-3)
    assert res["PER"] > 0 and 0 < res["big_fraction"] < 1
    expected = APC + PRE + POST42 + 2 + SMALL + res["big_fraction"] * (BIG - SMALL)
    assert res["flops_per_frame"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("encoder", ["act", "pondernet"])
def test_adaptive_encoders_run(pretrained, encoder):
    apc = pretrained / "exp" / "apc" / "apc.pt"
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained), f"--encoder={encoder}", f"--apc_path={apc}"]))
    res = results_of(pretrained, f"{encoder}-surprisal-paper-apc")
    assert 1.0 <= res["mean_steps"] <= 8.0  # act_max_steps, pondernet_max_steps
    step = res["component_macs"]["step_block"]
    assert res["flops_per_frame"] == pytest.approx(APC + PRE + POST42 + res["mean_steps"] * step, rel=1e-9)


def test_augmentation_changes_training(pretrained):
    """--augment=True (masked inputs) and --speed_perturb=[...] change training: same seed, other
    training loss. Every training utterance, and no other, has cache entries at the two speeds."""
    apc = pretrained / "exp" / "apc" / "apc.pt"
    runs = {"none": [], "masks": ["--augment=True"], "speeds": ["--speed_perturb=[0.9,1.1]"]}
    losses, results = {}, {}
    for name, options in runs.items():
        folder = pretrained / "exp" / f"augmentation-{name}"
        ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, seed=5, controller="big_only", apc_path=apc),
                *options, f"--output_folder={folder}"]))
        results[name] = json.loads((folder / "results.json").read_text())
        losses[name] = [json.loads(line)["train_loss"] for line in (folder / "history.jsonl").read_text().splitlines()]
    assert [results[name]["augment"] for name in runs] == [False, True, False]
    assert [results[name]["speed_perturb"] for name in runs] == [[], [], [0.9, 1.1]]
    assert losses["masks"] != losses["none"] and losses["speeds"] != losses["none"]
    train_manifest = Path(results["speeds"]["data"]["train"])  # the one the run trained on
    assert train_manifest.parent.parent == (pretrained / "exp" / "manifests").resolve()
    train_ids = {line.split(",", 1)[0] for line in train_manifest.read_text().splitlines()[1:]}
    cached = {path.stem for path in (pretrained / "exp" / "feature_cache").glob("*/*.pt")}
    for factor in ("0.9", "1.1"):
        assert {f"{utt}@speed{factor}" for utt in train_ids} <= cached
    assert not any("@speed" in name and name.split("@")[0] not in train_ids for name in cached)


def test_surprisal_only_at_test_time(pretrained, tmp_path):
    """Table 4's "surprisal during training?" = no: trained with random p = 0.5 routing, the calibrated
    surprisal controller routes at test time (its p_big statistics, not 0.5)."""
    apc = pretrained / "exp" / "apc" / "apc.pt"
    folder = tmp_path / "random-in-training"
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, apc_path=apc, output_folder=folder),
            "--controller_at_train=False"]))
    res = json.loads((folder / "results.json").read_text())
    assert res["controller"] == "surprisal" and res["controller_at_train"] is False and res["controller_at_test"]
    assert res["calibration"]["mean_p_big"] == pytest.approx(0.65, abs=1e-3)
    assert abs(res["p_big_mean"] - 0.5) > 1e-3  # surprisal's p_big at test, not the training's constant 0.5


def test_random_trained_run_decoded_with_surprisal(pretrained):
    """Table 4's cross "surprisal in training ✗, at test ✓" without another training run:
    ``--test_only --test_controller=surprisal`` decodes a run trained with random routing with a surprisal
    controller calibrated as training calibrates it, here at random's FLOPs (a test budget), in files of
    its own; the run's own results stay. Misuse fails in one line before any feature is computed."""
    apc = pretrained / "exp" / "apc" / "apc.pt"
    folder = pretrained / "exp" / "random_for_swap" / "seed3"
    args = [MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, apc_path=apc, output_folder=folder), "--controller=random"]
    ok(run(args))
    trained = (folder / "results.json").read_text()
    ok(run([*args, "--test_only", "--test_controller=surprisal", "--test_flops_fraction=0.878"]))
    assert (folder / "results.json").read_text() == trained
    res = json.loads((folder / "results_test_only_surprisal_at_test_budget0.878.json").read_text())
    assert res["controller"] == "surprisal" and res["trained_controller"] == "random"
    assert res["controller_at_train"] is False and res["test_flops_fraction"] == 0.878
    assert res["calibration"]["mean_p_big"] == pytest.approx(0.65, abs=1e-3)  # calibrated like a training run
    assert res["budget_solution"]["bias_shift"] < 0 and res["p_big_var"] > 0  # routed by surprisal, not a constant
    assert res["flops_per_frame"] == pytest.approx(APC + PRE + POST42 + 2 + SMALL + res["big_fraction"] * (BIG - SMALL),
                                                   rel=1e-9)
    assert "random in training" in short_label(res)
    surprisal_run = [MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, apc_path=apc)]  # the surprisal-trained run
    for command, expected in (([*args, "--test_controller=surprisal"], "give --test_only"),
                              ([*surprisal_run, "--test_controller=surprisal", "--test_only"],
                               "only a run trained with random routing")):
        proc = run(command)
        assert proc.returncode != 0 and expected in proc.stderr and "Traceback" not in proc.stderr


def test_fbank_ablation_skips_apc(pretrained):
    """Raw filterbank inputs with a controller that needs no surprisal: APC is not run, not charged."""
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained), "--input_features=fbank", "--controller=random"]))
    res = results_of(pretrained, "conditional-random-paper-fbank")
    assert res["component_macs"]["apc"] == 0
    assert res["flops_components"].get("apc", 0) == 0
    assert res["apc"] is None


def test_test_only_bias_sweep_and_ablation(pretrained):
    """Appendix B: evaluate the trained surprisal model with shifted controller bias, no retraining.
    The evaluations get their own files; the training run's results.json stays as it was."""
    folder = pretrained / "exp" / "conditional-surprisal-paper-apc" / "seed3"
    trained = (folder / "results.json").read_text()
    trained_hparams = (folder / "hyperparams.yaml").read_text()
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained), "--test_only", "--test_bias_shifts=[0.0,4.0]"]))
    assert (folder / "results.json").read_text() == trained
    assert (folder / "hyperparams.yaml").read_text() == trained_hparams  # the record of the training stays
    assert "test_bias_shifts: [0.0, 4.0]" in (folder / "hyperparams_test_only.yaml").read_text()
    base_text = (folder / "results_test_only.json").read_text()
    base = json.loads(base_text)
    shifted = json.loads((folder / "results_test_only_bias+4.json").read_text())
    assert base["test_only"] and base["train_wallclock_s"] is None
    assert base["calibration"] == json.loads(trained)["calibration"]  # read back from calibration.json
    assert shifted["test_bias_shift"] == 4.0
    assert shifted["big_fraction"] > base["big_fraction"]
    # Table 4, "surprisal at test?": the same model with a random p = 0.5 controller, in files of its own
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained), "--test_only", "--controller_at_test=False"]))
    random_at_test = json.loads((folder / "results_test_only_random_at_test.json").read_text())
    assert random_at_test["controller_at_test"] is False and abs(random_at_test["p_big_mean"] - 0.5) < 1e-6
    assert (folder / "results_test_only.json").read_text() == base_text
    assert "controller_at_test: false" in (folder / "hyperparams_test_only_random_at_test.yaml").read_text().lower()
    assert "test_bias_shifts: [0.0, 4.0]" in (folder / "hyperparams_test_only.yaml").read_text()


def test_test_time_flops_budget(pretrained):
    """``--test_flops_fraction=0.9``: the bias shift that spends 0.9 x the big-only MACs per frame is
    solved on the validation split (no test data) and applied to the test set, in files of its own;
    with ``--test_budget_split=test`` on the test audio itself, which then meets the budget."""
    folder = pretrained / "exp" / "conditional-surprisal-paper-apc" / "seed3"
    trained = (folder / "results.json").read_text()
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained), "--test_only", "--test_flops_fraction=0.9"]))
    assert (folder / "results.json").read_text() == trained
    res = json.loads((folder / "results_test_only_budget0.9.json").read_text())
    assert res["test_flops_fraction"] == 0.9 and res["test_bias_shift"] == 0.0
    macs = res["component_macs"]
    shared = macs["apc"] + macs["pre_net"] + macs["post_net"]
    big_only, small_only = shared + macs["big_net"], shared + macs["small_net"]
    solution = res["budget_solution"]
    assert solution["big_fraction"] == pytest.approx((0.9 * big_only - small_only) / (big_only - small_only))
    assert solution["frames"] > 0 and solution["split"] == res["test_budget_split"] == "valid"
    trained_mean = json.loads(trained)["calibration"]["mean_p_big"]  # 0.65 > 0.59: the shift lowers p_big
    assert solution["big_fraction"] < trained_mean and solution["bias_shift"] < 0
    assert "test budget 0.9x big-only" in model_name(config_of(res))
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained), "--test_only", "--test_flops_fraction=0.9",
            "--test_budget_split=test"]))
    on_test = json.loads((folder / "results_test_only_budget0.9_on_test.json").read_text())
    assert on_test["budget_solution"]["split"] == on_test["test_budget_split"] == "test"
    # solved on the frames it decodes: their mean p_big is the budget's, up to the bisection's tolerance
    assert on_test["p_big_mean"] == pytest.approx(on_test["budget_solution"]["big_fraction"], abs=1e-3)
    # a budget that cannot apply fails before anything is trained, naming the key
    for options in (["--test_flops_fraction=1.5"], ["--test_flops_fraction=0.9", "--test_bias_shifts=[0.0,1.0]"],
                    ["--test_flops_fraction=0.9", "--controller=random"]):
        proc = run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, seed=9), *options])
        assert proc.returncode != 0 and "test_flops_fraction" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((pretrained / "exp" / "conditional-random-paper-apc" / "seed9").glob("save/CKPT+*"))
    # --test_only on a folder that holds no checkpoint: an error, not the test PER of an untrained model
    proc = run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, seed=9), "--test_only"])
    assert proc.returncode != 0 and "holds no checkpoint of a validated epoch" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((pretrained / "exp" / "conditional-surprisal-paper-apc" / "seed9").glob("results*.json"))


def test_debug_flag_runs_a_few_batches(pretrained):
    apc = pretrained / "exp" / "apc" / "apc.pt"
    proc = ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, seed=4, apc_path=apc, controller="random"),
                   "--debug"]))
    assert "results written" in proc.stdout + proc.stderr


def test_debug_run_cuts_the_splits_and_keeps_to_its_own_folder(mini_corpus, tmp_path):
    """``--debug``: each split cut to its first debug_batches x batch_size utterances (2 x 2 = 4), APC
    pretrained (apc_path null), features cached, the controller calibrated, trained and tested on those
    only, every file in ``<output_folder>-debug``: the real run's folder and APC folder stay absent,
    so the same command without ``--debug`` starts from nothing."""
    exp = tmp_path / "exp"
    args = [MLS_RECIPE, MLS_HPARAMS, f"--data_folder={mini_corpus / 'corpus'}", f"--experiment_root={exp}",
            "--valid_speakers=2", "--batch_size=2", "--apc_batch_size=2", "--seed=5", "--debug"]  # N = 2 x 2
    proc = ok(run([*args, "--debug_epochs=1"]))
    real = exp / "conditional-surprisal-paper-apc" / "seed5"
    debug = real.with_name("seed5-debug")
    assert not real.exists() and not (exp / "apc").exists()
    for name in ("hyperparams.yaml", "log.txt", "train_log.txt", "calibration.json", "results.json",
                 "apc/apc.pt"):
        assert (debug / name).is_file(), name
    saved = parse_yaml_tolerant((debug / "hyperparams.yaml").read_text())
    assert saved["output_folder"] == str(debug) and saved["apc_export_path"] == str(debug / "apc" / "apc.pt")
    # the cut manifests: the first 4 rows of each prepared one (mfa-dev has 3), which stay whole
    [prepared] = (exp / "manifests").glob("mini_librispeech_prepare-*")
    for split, whole in (("train", 6), ("valid", 6), ("dev", 3), ("test", 6)):
        with open(prepared / f"{split}.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        with open(debug / "debug_manifests" / f"{split}.csv", newline="") as f:
            cut = list(csv.DictReader(f))
        assert len(rows) == whole and cut == rows[:min(4, whole)], split
    res = json.loads((debug / "results.json").read_text())
    assert res["error_rate_details"]["num_utterances"] == 4 and res["dev"]["error_rate_details"]["num_utterances"] == 3
    assert res["data"]["train"] == str(debug / "debug_manifests" / "train.csv") and res["debug"] is True
    assert res["calibration"]["mean_p_big"] == pytest.approx(0.65, abs=1e-3)  # fitted on the 4 training utterances
    assert "the first 4 utterances" in proc.stdout + proc.stderr
    # the feature cache holds those utterances only: filterbanks of train + valid for the APC's
    # pretraining, then APC features of the 4 + 4 + 3 + 4 the recipe reads
    assert sorted(len(list(key.glob("*.pt"))) for key in (exp / "feature_cache").iterdir()) == [8, 15]


def test_unknown_key_and_controller_give_clear_errors(pretrained):
    proc = run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained), "--controler=random"])
    assert proc.returncode != 0 and "controler" in proc.stderr and "Traceback" not in proc.stderr
    proc = run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained), "--controller=oracle"])
    assert proc.returncode != 0 and "oracle" in proc.stderr and "surprisal" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_data_folder_is_reported(tmp_path):
    proc = run([MLS_RECIPE, MLS_HPARAMS, f"--data_folder={tmp_path / 'nowhere'}",
                f"--experiment_root={tmp_path / 'exp'}"])
    assert proc.returncode != 0 and "nowhere" in proc.stderr and "Traceback" not in proc.stderr


def test_timit_recipe_on_fixture(tmp_path):
    make_timit_fixture(tmp_path / "timit")
    ok(run([REPO / "recipes" / "TIMIT" / "train.py", REPO / "hparams" / "TIMIT" / "conditional_ctc.yaml",
            f"--data_folder={tmp_path / 'timit'}", f"--experiment_root={tmp_path / 'exp'}", "--number_of_epochs=1",
            "--batch_size=2", "--apc_epochs=1", "--apc_batch_size=2", "--controller_target_mean=0.5"]))
    res = json.loads((tmp_path / "exp" / "conditional-surprisal-paper-apc" / "seed1" / "results.json").read_text())
    assert res["dataset"] == "TIMIT"
    assert res["component_macs"]["post_net"] == 1_203_240  # 39 phones + blank
    # labels outside phone_set: one line naming the manifest and the phones, before any feature is computed
    proc = run([REPO / "recipes" / "TIMIT" / "train.py", REPO / "hparams" / "TIMIT" / "conditional_ctc.yaml",
                f"--data_folder={tmp_path / 'timit'}", f"--experiment_root={tmp_path / 'exp2'}",
                "--phone_set=librispeech", "--num_outputs=42"])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert ".csv: phone(s) [" in proc.stderr and "hparams key phone_set" in proc.stderr
    assert not list((tmp_path / "exp2").rglob("*.pt"))


def test_apc_pretraining_recipe_exports_and_resumes(mini_corpus, tmp_path):
    args = [REPO / "recipes" / "LibriSpeech" / "pretrain_apc.py", REPO / "hparams" / "LibriSpeech" / "apc.yaml",
            f"--data_folder={mini_corpus / 'corpus'}", "--subsets=[train-clean-5]",
            f"--experiment_root={tmp_path}", "--apc_epochs=1", "--apc_batch_size=4"]
    ok(run(args))
    export = tmp_path / "apc" / "apc.pt"
    assert export.is_file()
    rows = [json.loads(l) for l in (tmp_path / "apc" / "apc_history.jsonl").read_text().splitlines()]
    assert rows[0]["valid_loss"] > 0 and rows[0]["train_frames_per_s"] > 0
    reference = json.loads((tmp_path / "apc" / "reference_surprisal.json").read_text())
    assert 0 < reference["copy_previous_frame"] < reference["mean_frame"]  # speech frames are correlated
    # a second run finds the export and the finished epochs: nothing is retrained
    proc = ok(run(args))
    assert "skipping pretraining" in proc.stdout + proc.stderr



def test_apc_pretraining_perturbs_the_speed_of_training_utterances_only(mini_corpus, tmp_path):
    """--apc_speed_perturb=[0.8]: the training split is cached at 0.8 too (not the validation split),
    and an epoch reads each training utterance at 1.0 or 0.8: more frames than the clean run's."""
    def pretrain(root: Path, *extra: str) -> dict:
        ok(run([REPO / "recipes" / "LibriSpeech" / "pretrain_apc.py", REPO / "hparams" / "LibriSpeech" / "apc.yaml",
                f"--data_folder={mini_corpus / 'corpus'}", "--subsets=[train-clean-5]", f"--experiment_root={root}",
                "--apc_epochs=1", "--apc_batch_size=4", *extra]))
        return json.loads((root / "apc" / "apc_history.jsonl").read_text().splitlines()[0])

    clean = pretrain(tmp_path / "clean")
    slow = pretrain(tmp_path / "slow", "--apc_speed_perturb=[0.8]")
    [manifest] = (tmp_path / "slow" / "manifests").glob("*/apc_train.csv")  # the one preparation's folder
    with open(manifest, newline="", encoding="utf-8") as f:
        train_ids = {row["ID"] for row in csv.DictReader(f)}
    assert {p.stem for p in (tmp_path / "slow").rglob("*@speed0.8.pt")} == {f"{u}@speed0.8" for u in train_ids}
    assert not list((tmp_path / "clean").rglob("*@speed*.pt"))
    assert slow["train_frames"] > clean["train_frames"]

def _intra_epoch_checkpoint(save_folder: Path) -> bool:
    for meta in save_folder.glob("CKPT+*/CKPT.yaml"):
        if "end-of-epoch: false" in meta.read_text():
            return True
    return False


def test_resume_after_kill_gives_the_same_result(pretrained, tmp_path):
    """kill -9 mid-epoch, restart the same command: same final PER and loss as an uninterrupted run."""
    import signal
    import time

    apc = pretrained / "exp" / "apc" / "apc.pt"
    # fp32 explicitly: precision auto times bf16 in each process and could choose differently in the three runs
    base = [MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, number_of_epochs=2, batch_size=1, apc_path=apc,
                                                 ckpt_interval_minutes=0, precision="fp32"), "--ckpt_interval_steps=2"]
    ok(run([*base, f"--output_folder={tmp_path / 'straight'}"]))
    straight = json.loads((tmp_path / "straight" / "results.json").read_text())

    resumed_args = [*base, f"--output_folder={tmp_path / 'resumed'}"]
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "2"}
    proc = subprocess.Popen([sys.executable, *map(str, resumed_args)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not _intra_epoch_checkpoint(tmp_path / "resumed" / "save") and time.time() < deadline:
        assert proc.poll() is None, "the run finished before it could be interrupted"
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "resumed" / "results.json").exists()
    log = ok(run(resumed_args))
    assert "Loading a checkpoint" in log.stdout + log.stderr
    resumed = json.loads((tmp_path / "resumed" / "results.json").read_text())
    assert resumed["train_resumed"] and not straight["train_resumed"]
    assert resumed["calibration"] == straight["calibration"]  # calibrated before the kill, read back
    assert resumed["PER"] == straight["PER"]
    assert resumed["test_loss"] == pytest.approx(straight["test_loss"], rel=1e-6)
    assert resumed["big_fraction"] == straight["big_fraction"]


@pytest.mark.parametrize("hparams_file", [MLS_HPARAMS, REPO / "hparams" / "TIMIT" / "conditional_ctc.yaml"])
def test_recipes_checkpoint_within_an_epoch_by_default(hparams_file, tmp_path):
    """An epoch cut off by the end of a job resumes from its last intra-epoch checkpoint."""
    from surprisal_cc.training.run_settings import load_hparams

    hparams = load_hparams(str(hparams_file), f"data_folder: x\nexperiment_root: {tmp_path}")
    assert 0 < hparams["ckpt_interval_minutes"] <= 30


def test_torchrun_two_processes(pretrained, tmp_path):
    """DDP with 2 CPU processes (gloo): data preparation and caching on the main process only."""
    apc = pretrained / "exp" / "apc" / "apc.pt"
    ok(run(["-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29533", MLS_RECIPE, MLS_HPARAMS,
            *common_args(pretrained), f"--apc_path={apc}", "--distributed_backend=gloo",
            f"--output_folder={tmp_path / 'ddp'}"]))
    res = json.loads((tmp_path / "ddp" / "results.json").read_text())
    assert res["error_rate_details"]["num_utterances"] == 6 and res["PER"] > 0


@pytest.mark.parametrize("fails", [False, True])
def test_recipe_leaves_its_process_group(tmp_path, fails):
    """The group is destroyed when the script ends, also when it ends with a configuration error."""
    import torch.distributed as dist

    from surprisal_cc.errors import ConfigurationError
    from surprisal_cc.training.recipe import close_process_group, recipe_errors

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    with pytest.raises(SystemExit) if fails else contextlib.nullcontext():
        with recipe_errors():
            if fails:
                raise ConfigurationError("bad key")
    assert not dist.is_initialized()
    close_process_group()  # no group left: nothing to do


def test_recipe_frees_its_ddp_wrappers_before_closing_the_group(tmp_path):
    """A DDP wrapper left in a reference cycle by the script is collected while the group still exists,
    not during the interpreter's shutdown."""
    import gc
    import weakref

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from surprisal_cc.training.recipe import recipe_errors

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    gc.disable()  # only an explicit collection can free the cycle
    try:
        with recipe_errors():
            wrapper = DistributedDataParallel(torch.nn.Linear(2, 2))
            wrapper.cycle = [wrapper]
            alive = weakref.ref(wrapper)
            del wrapper
        assert alive() is None and not dist.is_initialized()
    finally:
        gc.enable()


def test_sentencepiece_targets_report_wer(pretrained):
    apc = pretrained / "exp" / "apc" / "apc.pt"
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, apc_path=apc, target_unit="sentencepiece",
                                                   sp_vocab_size=40, num_outputs=41, selection_metric="TER",
                                                   output_folder=pretrained / "exp" / "sp")]))
    res = json.loads((pretrained / "exp" / "sp" / "results.json").read_text())
    assert res["target_unit"] == "sentencepiece"
    assert res["WER"] > 0 and res["TER"] > 0
    # the units lie beside the training manifest they were trained on
    assert (Path(res["data"]["train"]).parent / "sentencepiece_40" / "40_unigram.model").is_file()


def test_checkpoint_of_another_shape_is_reported(pretrained, tmp_path):
    apc = pretrained / "exp" / "apc" / "apc.pt"
    folder = tmp_path / "shape"
    ok(run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, apc_path=apc, output_folder=folder,
                                                   controller="random")]))
    # training resumed with another size: refused before anything is built, the stored settings kept
    proc = run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, apc_path=apc, output_folder=folder,
                                                       controller="random", hidden_size=128, number_of_epochs=2)])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{folder} holds checkpoints trained with other settings (hidden_size: trained with" in proc.stderr
    assert "requested 128" in proc.stderr and "hidden_size: 128" not in (folder / "hyperparams.yaml").read_text()
    # evaluating it as a model of another size: the checkpoint's shape is named
    proc = run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, apc_path=apc, output_folder=folder,
                                                       controller="random", hidden_size=128), "--test_only"])
    assert proc.returncode != 0 and "another shape" in proc.stderr and str(folder) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_diverging_training_stops_with_a_clear_message(pretrained, tmp_path):
    """A learning rate of 1e30 makes the second batch's loss NaN: the batch is skipped, and with
    --nonfinite_patience=0 the run ends with one message naming the utterances and the remedy."""
    apc = pretrained / "exp" / "apc" / "apc.pt"
    proc = run([MLS_RECIPE, MLS_HPARAMS, *common_args(pretrained, apc_path=apc, output_folder=tmp_path / "nan",
                                                       controller="random", lr=1e30), "--nonfinite_patience=0"])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("error: 1 training batches of epoch 1 had a non-finite loss")
    assert "lr: 1e+30" in message and str(tmp_path / "nan" / "save") in message
    assert (pretrained / "exp" / "apc" / "apc.pt").is_file()


SHIPPED_ENCODER = REPO / "surprisal_cc" / "pretrained" / "encoder.pt"
SHIPPED_ENCODER_DIGEST = file_sha256(SHIPPED_ENCODER) if SHIPPED_ENCODER.is_file() else ""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("stages, labels_name", [
    (["ALIGNER=surprisal_cc/pretrained"], f"realigned_pauses_pretrained-{SHIPPED_ENCODER_DIGEST[:8]}"),  # shipped APC
    (["ALIGNER=train", "APC=pretrain"], "realigned_pauses_seed3"),      # aligner run and APC pretraining first
], ids=["shipped-aligner-and-apc", "from-scratch"])
def test_make_mini_librispeech_relabels_then_trains(mini_corpus, tmp_path, stages, labels_name):  # noqa: F811
    """The README's main job, at toy size: realigned labels -> the model trained on them (the CPU
    profile file with toy overrides), with the shipped model as aligner and APC or with both trained here."""
    exp = tmp_path / "exp"
    toy = "--batch_size=4 --valid_speakers=2 --dynamic_batching=False"
    proc = subprocess.run(["make", "-s", "mini_librispeech", f"PY={sys.executable}", "STAMP=",
                           f"DATA={mini_corpus / 'corpus'}", f"EXP={exp}", "SEED=3", "ALIGNER_EPOCHS=1",
                           f"ARGS={toy} --number_of_epochs=1 --apc_epochs=1 --apc_batch_size=4",
                           f"ALIGNER_ARGS={toy}", *stages],
                          cwd=REPO, env={**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "2"},
                          capture_output=True, text=True, timeout=900)
    ok(proc)
    assert (exp / "labels" / f"{labels_name}.csv").is_file()
    assert (exp / "aligner" / "fbank-big_only" / "seed3" / "results.json").is_file() == ("ALIGNER=train" in stages)
    assert (exp / "apc" / "apc.pt").is_file() == ("APC=pretrain" in stages)  # APC pretrained here only from scratch
    res = json.loads((exp / "conditional-surprisal-cpu-profile" / "seed3" / "results.json").read_text())
    assert res["train_labels"] == f"mfa:{labels_name}" and res["train_targets"] == "pronunciation_alternatives"
    assert res["speed_perturb"] == [0.9, 1.1] and res["augment"] is False and res["precision"] == "fp32"  # the profile
    assert res["error_rate_details"]["num_utterances"] == 6  # dev-clean-2 scored against its MFA labels
    name = model_name(config_of(res))
    assert name.startswith(f"Surprisal-based controller [training labels {labels_name}, ")
    assert "every pronunciation, " in name and name.endswith(", speeds 0.9/1/1.1]")
    assert named_in_report(name, proc.stdout)  # the report names the model it trained


def named_in_report(name: str, report: str) -> bool:
    r"""Whether a report's text names the model ``name`` (``Label [note, note, ...]``): on one table line with
    each of its notes, save those the table moves to its "Every row: ..." line because all its rows share
    them (from scratch the aligner's row is there too, and both train in fp32).

    >>> named_in_report("Big [fp32 training, x]", "| Big [x] | 1 |\n\nEvery row: fp32 training.")
    True
    >>> named_in_report("Big [fp32 training, x]", "| Big [x] | 1 |")
    False
    """
    label, _, notes = name.partition(" [")
    notes = [note for note in notes.rstrip("]").split(", ") if note]
    lines = report.splitlines()
    for i, line in enumerate(lines):
        if f"{label} [" not in line and f"| {label} |" not in line:
            continue
        shared = next((rest.split("Every row: ", 1)[1] for rest in lines[i + 1:] if rest.startswith("Every row: ")), "")
        if all(note in line or note in shared for note in notes):
            return True
    return False


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_mini_librispeech_defaults_to_the_published_labels_and_profile(tmp_path):
    """Without options, make relabels with the model shipped at the pinned revision (the labels of
    every published run) and trains the CPU profile file, whose settings the grids read too."""
    proc = subprocess.run(["make", "-n", "mini_librispeech", f"PY={sys.executable}", "STAMP=", f"EXP={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    ok(proc)
    lines = proc.stdout.splitlines()
    assert any("shipped_model.py 0cb7ec2" in line for line in lines)
    assert any(f"realign_labels.py {tmp_path}/aligner/0cb7ec2 {tmp_path}/labels/realigned_pauses_pretrained.csv"
               in line for line in lines)
    train = next(line for line in lines if "recipes/MiniLibriSpeech/train.py hparams/MiniLibriSpeech/cpu_profile.yaml"
                 in line)
    assert f"--relabelled_train={tmp_path}/labels/realigned_pauses_pretrained.csv" in train
    assert "--apc_path" not in train  # the profile's APC
    grid = (REPO / "hparams" / "MiniLibriSpeech" / "grid_apc_tc5.yaml").read_text()
    assert "hparams: hparams/MiniLibriSpeech/cpu_profile.yaml" in grid
