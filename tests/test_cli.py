"""Every ``surprisal-cc`` subcommand: it works, and a configuration or data error is one ``error:`` line
with a non-zero exit status, never a traceback.

transcribe/evaluate run an untrained model saved in the exported format (fast); the model exported
from a real recipe run is tested in test_inference.py.
"""
from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from data_fixtures import (REPO, make_bad_audio_fixture, make_librispeech_fixture, make_timit_fixture,
                           require_dev_clean_2, tone, write_mfa_csv)
from numerics import assert_same_routing_up_to_summation_order
from surprisal_cc.cli import commands as cli
from surprisal_cc.cli import model_commands
from surprisal_cc.cli.commands import main
from surprisal_cc.data.phones import LIBRISPEECH_PHONES, TIMIT_PHONES_39
from surprisal_cc.config import expand_hparams
from surprisal_cc.inference import ConditionalASR

TIMIT_HPARAMS = REPO / "hparams" / "TIMIT" / "conditional_ctc.yaml"
MLS_HPARAMS = REPO / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml"


def error_lines(capsys) -> list:
    """stderr lines of a failed command; each must be an ``error:`` line, none a traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and "Traceback" not in err, err
    assert all(line.startswith("error: ") for line in lines), err
    return lines


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """An untrained surprisal model (APC features + surprisal controller) saved as a model folder."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("model") / "model"
    ConditionalASR.untrained(LIBRISPEECH_PHONES, controller="surprisal", input_features="apc").save(folder)
    return folder


@pytest.fixture(scope="module")
def real_flac() -> Path:
    shared = require_dev_clean_2()
    return sorted((shared / "LibriSpeech" / "dev-clean-2").rglob("*.flac"))[0]


# ---------------------------------------------------------------------------------------------- flops
def test_help_of_every_command_is_printed_without_importing_torch() -> None:
    """``surprisal-cc COMMAND --help`` answers at once: no command imports torch for its options."""
    from surprisal_cc.cli.commands import COMMANDS

    script = ("import contextlib, io, sys\nfrom surprisal_cc.cli.commands import main\n"
              "for command in sys.argv[1:]:\n"
              "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
              "        main([command, '--help'])\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'speechbrain', 'torchaudio')))")
    out = subprocess.run([sys.executable, "-c", script, *COMMANDS], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout
    assert out.strip() == "[]"


def test_flops_on_hparams_as_written(tmp_path, monkeypatch, capsys):
    """TIMIT's data_folder is a !PLACEHOLDER: counting MACs needs no data; nothing is written to disk."""
    monkeypatch.chdir(tmp_path)
    assert main(["flops", str(TIMIT_HPARAMS), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["macs_per_frame"]
    assert rows["apc"] == 3_054_672 and rows["post_net"] == 1_203_240 and rows["big-only"] == 7_540_344
    assert main(["flops", str(MLS_HPARAMS), "--controller=big_only"]) == 0
    assert "| big-only | 7.54M |" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_flops_expected_cost_follows_the_flops_budget(tmp_path, monkeypatch, capsys):
    """With ``flops_budget`` set, the calibration aims at the budget's mean p_big, and so does the table."""
    monkeypatch.chdir(tmp_path)
    assert main(["flops", str(MLS_HPARAMS), "--json", "--flops_budget=6500000"]) == 0
    rows = json.loads(capsys.readouterr().out)["macs_per_frame"]
    mean = (6.5e6 - rows["small-only"]) / (rows["big-only"] - rows["small-only"])
    assert rows[f"expected at flops_budget=6.5e+06 (mean p_big={mean:.3f})"] == pytest.approx(6.5e6 + rows["controller"])
    assert not any(key.startswith("expected at mean p_big") for key in rows)


@pytest.mark.parametrize("args,expected,status", [
    (["nowhere.yaml"], "nowhere.yaml does not exist", 1),
    ([str(MLS_HPARAMS), "--flops_budget=9500000"], "flops_budget 9.5e+06 MACs per frame is not between", 1),
    ([str(MLS_HPARAMS), "--flops_budget=6500000", "--controller=random"], "flops_budget calibrates the surprisal", 1),
    ([str(TIMIT_HPARAMS), "--controler=random"], "controler", 1),
    ([str(TIMIT_HPARAMS), "--controller=oracle"], "oracle", 1),
    ([str(TIMIT_HPARAMS), "controller=random"], "must look like --key=value", 2),  # a usage error
    ([str(TIMIT_HPARAMS), "--controller_target_mean=5"], "controller_target_mean must be a number in (0, 1), got 5", 1),
    ([str(TIMIT_HPARAMS), "--controller_target_mean=abc"], "controller_target_mean must be a number in (0, 1)", 1),
])
def test_flops_errors(args, expected, status, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["flops", *args]) == status
    assert expected in error_lines(capsys)[0]


# ---------------------------------------------------------------------------------------------- grid
def write_grid(path: Path, experiment_root: Path) -> Path:
    """A grid of two Mini-LibriSpeech runs (surprisal and random controller, seed 1)."""
    spec = {"recipe": "recipes/MiniLibriSpeech/train.py", "hparams": str(MLS_HPARAMS),
            "experiment_root": str(experiment_root), "seeds": [1],
            "groups": [{"name": "controllers", "vary": {"controller": ["surprisal", "random"]}}]}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_grid_dry_run_prints_the_planned_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # the grid's recipe path is relative to the folder grid runs in
    grid_file = write_grid(tmp_path / "grid.yaml", tmp_path / "exp")
    assert main(["grid", str(grid_file), "--dry-run", "--device=cuda:0"]) == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if "recipes/MiniLibriSpeech/train.py" in line]
    assert len(commands) == 2 and all("--device=cuda:0" in c and "--seed=1" in c for c in commands)
    assert "--controller=surprisal" in commands[0] and "--controller=random" in commands[1]
    assert "| controllers/controller-random/seed1 | dry-run |" in out and "dry-run: 2" in out
    assert not (tmp_path / "exp").exists()
    assert main(["grid", str(grid_file), "--dry-run", "--jobs", "2", "--threads", "3"]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if "train.py" in line]
    assert len(commands) == 2 and all(line.startswith("OMP_NUM_THREADS=3 ") for line in commands)


def test_grid_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["grid", "nowhere.yaml"]) == 1
    assert error_lines(capsys) == ["error: grid file nowhere.yaml does not exist"]
    grid_file = str(write_grid(tmp_path / "grid.yaml", tmp_path / "exp"))
    assert main(["grid", grid_file, "--dry-run", "controller=random"]) == 2
    lines = error_lines(capsys)
    assert len(lines) == 1 and "extra overrides must look like --key=value" in lines[0]
    with pytest.raises(SystemExit) as exit_info:
        main(["grid", grid_file, "--jobs", "two"])
    assert exit_info.value.code == 2
    assert error_lines(capsys)[0].startswith("error: argument --jobs: must be a positive integer, got two")
    assert not (tmp_path / "exp").exists()


def test_file_system_errors_name_the_path_and_what_is_wrong(tmp_path, monkeypatch, capsys):
    """An output path blocked by a file is one line saying so, not Python's "[Errno 17] File exists"."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.jsonl").write_text('{"epoch": 1, "PER": 50.0}\n')
    Path("afile").write_text("")
    assert main(["curves", str(run), "--plot", "afile/curves.png"]) == 1
    assert error_lines(capsys) == ["error: afile: a file is in the way where a folder is needed; move it or "
                                   "choose another output path"]


# ---------------------------------------------------------------------------------------------- report, help
def test_report(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nowhere")]) == 1
    assert "nowhere" in error_lines(capsys)[0]
    assert main(["report", str(tmp_path)]) == 1
    assert "no results files" in error_lines(capsys)[0]
    run = tmp_path / "conditional-random-paper-apc" / "seed1"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"PER": 30.0, "flops_per_frame": 6.6e6, "controller": "random",
                                                  "dataset": "MiniLibriSpeech", "seed": 1}))
    assert main(["report", str(tmp_path)]) == 0
    assert "Random controller" in capsys.readouterr().out
    assert main(["report", str(tmp_path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["PER"], row["controller"], row["seed"]) == (30.0, "random", 1)
    (run / "results.json").write_text("{not json")
    assert main(["report", str(tmp_path)]) == 1
    (line,) = error_lines(capsys)
    assert str(run / "results.json") in line and "not valid JSON" in line
    (run / "results.json").write_text("[30.0]")  # JSON, but not a run's results
    assert main(["report", str(tmp_path)]) == 1
    assert error_lines(capsys) == [f"error: {run / 'results.json'}: not a results file (a JSON object of a run's "
                                   "test results); remove it or re-run that run's test (--test_only)"]


def test_curves_of_runs_in_progress(tmp_path, monkeypatch, capsys):
    """The table and the plot of runs in progress, each run's history.jsonl read once."""
    reads = []
    read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *args, **kwargs: (
        reads.append(self.parent.name) if self.name == "history.jsonl" else None) or read_text(self, *args, **kwargs))
    assert main(["curves", str(tmp_path)]) == 1
    assert "no history.jsonl" in error_lines(capsys)[0]
    for name, pers in (("a", [90.0, 70.5]), ("b", [95.0])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "history.jsonl").write_text("".join(
            json.dumps({"epoch": e + 1, "lr": 1e-3, "PER": per, "epoch_s": 120}) + "\n" for e, per in enumerate(pers)))
    plot = tmp_path / "curves.png"
    assert main(["curves", f"{tmp_path / 'a'}=big-only", str(tmp_path / "b"), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"| epoch | big-only: lr | PER | min | {tmp_path / 'b'}: lr | PER | min |"
    assert out[2:4] == ["| 1 | 0.001 | 90.00 % | 2.0 | 0.001 | 95.00 % | 2.0 |", "| 2 | 0.001 | 70.50 % | 2.0 |  |  |  |"]
    assert plot.stat().st_size > 0 and reads == ["a", "b"]
    # two seeds of one label: a column each (named by folder), one curve over both in the plot
    assert main(["curves", f"{tmp_path / 'a'}=big-only", f"{tmp_path / 'b'}=big-only", "--plot", str(plot)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "| epoch | big-only (a): lr | PER | min | big-only (b): lr | PER | min |"


def test_curves_of_a_metric_no_run_has_and_of_a_plot_name_without_suffix(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.jsonl").write_text(json.dumps({"epoch": 1, "lr": 1e-3, "PER": 90.0, "valid_loss": 3.0}) + "\n")
    assert main(["curves", str(run), "--key", "WER", "--plot", str(tmp_path / "c.png")]) == 1
    assert error_lines(capsys) == [f"error: {run / 'history.jsonl'}: no WER in any epoch; give --key one of "
                                   "PER, lr, valid_loss"]
    assert not (tmp_path / "c.png").exists()
    (tmp_path / "in_progress").mkdir()
    (tmp_path / "in_progress" / "history.jsonl").write_text("")  # no epoch validated yet: not an error
    assert main(["curves", str(run), str(tmp_path / "in_progress"), "--plot", str(tmp_path / "curves")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {tmp_path / 'curves.png'}"
    assert (tmp_path / "curves.png").stat().st_size > 0
    (run / "history.jsonl").write_text('[1, 2]\n{"epoch": 1, "PER": 90.0}\n')
    assert main(["curves", str(run)]) == 1
    assert error_lines(capsys) == [f"error: {run / 'history.jsonl'}, line 1: not a JSON object; repair or remove "
                                   "that line"]


def test_help_lists_the_commands_by_family_and_bench_is_no_command(capsys):
    """``surprisal-cc --help`` lists the commands using a model and those of experiments apart; the benchmarks
    are not a command (``python -m benchmarks.run_all``, ``make bench``)."""
    from surprisal_cc.cli import experiment_commands, model_commands

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    using, experiments = text.index("\nusing a model:\n"), text.index("\nexperiments:\n")
    assert using < experiments
    for name in model_commands.COMMANDS:
        assert using < text.index(f"\n  {name} ") < experiments, name
    for name in experiment_commands.COMMANDS:
        assert text.index(f"\n  {name} ") > experiments, name
    assert set(cli.COMMANDS) == {*model_commands.COMMANDS, *experiment_commands.COMMANDS}
    assert "bench" not in cli.COMMANDS and "backfill-apc" not in cli.COMMANDS
    with pytest.raises(SystemExit) as exit_info:
        main(["bench"])
    assert exit_info.value.code == 2 and "invalid choice: 'bench'" in error_lines(capsys)[0]
    bench = (REPO / "Makefile").read_text().split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert "-m benchmarks.run_all --threads=$(BENCH_THREADS)" in bench


# ---------------------------------------------------------------------------------------------- export
def test_export_errors(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 1
    assert "nowhere: no such run folder" in error_lines(capsys)[0]
    assert main(["export", str(tmp_path), str(tmp_path / "out")]) == 1
    assert "no hyperparams.yaml" in error_lines(capsys)[0]
    (tmp_path / "hyperparams.yaml").write_text(expand_hparams(MLS_HPARAMS))  # as a run folder holds it
    assert main(["export", str(tmp_path), str(tmp_path / "out")]) == 1
    assert "no test decoding yet" in error_lines(capsys)[0]
    (tmp_path / "results.json").write_text("[30.0]")
    assert main(["export", str(tmp_path), str(tmp_path / "out")]) == 1
    assert error_lines(capsys) == [f"error: {tmp_path / 'results.json'}: not a JSON object of test results; re-run "
                                   "the run's test (--test_only)"]
    (tmp_path / "results.json").write_text("{}")
    assert main(["export", str(tmp_path), str(tmp_path / "out")]) == 1
    assert "no save/ folder" in error_lines(capsys)[0]
    (tmp_path / "save").mkdir()
    assert main(["export", str(tmp_path), str(tmp_path / "out")]) == 1
    assert "no checkpoint with a validation PER" in error_lines(capsys)[0]
    hparams = (tmp_path / "hyperparams.yaml").read_text()
    (tmp_path / "hyperparams.yaml").write_text("lr: [0.1\n")  # damaged by hand: one line naming the file
    assert main(["export", str(tmp_path), str(tmp_path / "out")]) == 1
    (line,) = error_lines(capsys)
    assert line.startswith(f"error: {tmp_path / 'hyperparams.yaml'}: ParserError: ")
    (tmp_path / "hyperparams.yaml").write_text(hparams)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hyperparams.yaml", "results.json", "save"]
    for average in ("0", "-2"):  # a command-line error, found before the run is read
        with pytest.raises(SystemExit) as stop:
            main(["export", str(tmp_path), str(tmp_path / "out"), "--average", average])
        assert stop.value.code == 2
        assert error_lines(capsys) == [f"error: argument --average: must be a positive integer, got {average} "
                                       "(see surprisal-cc export --help)"]


# ---------------------------------------------------------------------------------------------- transcribe
@pytest.mark.integration
def test_transcribe_text_json_and_plot(model, real_flac, tmp_path, capsys):
    assert main(["transcribe", str(real_flac), "--model", str(model)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(real_flac) and "FLOPs per frame" in out[2] and "RTF" in out[2]
    plot = tmp_path / "routing.png"
    assert main(["transcribe", str(real_flac), "--model", str(model), "--json", "--plot", str(plot)]) == 0
    (result,) = _json_lines(capsys.readouterr().out)
    assert result["phones"] and len(result["surprisal"]) == len(result["p_big"]) == result["num_frames"]
    assert result["flops_per_frame"] > 3e6 and result["rtf"] > 0
    assert plot.read_bytes()[:4] == b"\x89PNG"
    # a FLOPs budget met on the file's own frames: their mean p_big is the budget's
    assert main(["transcribe", str(real_flac), "--model", str(model), "--json", "--flops-fraction", "0.9",
                 "--sampled"]) == 0
    (result,) = _json_lines(capsys.readouterr().out)
    assert sum(result["p_big"]) / len(result["p_big"]) == pytest.approx(result["budget"]["big_fraction"], abs=1e-3)


@pytest.mark.parametrize("kind,reason", [("corrupt", "cannot be decoded"), ("empty", "empty file"),
                                         ("too_short", "too short"), ("no_samples", "contains 0 samples"),
                                         ("text", "cannot be decoded"), ("missing", "file does not exist")])
def test_transcribe_bad_audio_is_one_line_naming_the_file(kind, reason, model, tmp_path, capsys):
    paths = make_bad_audio_fixture(tmp_path)
    paths["text"] = tmp_path / "notes.txt"
    paths["text"].write_text("not audio\n")
    paths["missing"] = tmp_path / "missing.flac"
    assert main(["transcribe", str(paths[kind]), "--model", str(model)]) == 1
    (line,) = error_lines(capsys)
    assert line.startswith(f"error: {paths[kind]}: {reason}")


def test_transcribe_refuses_audio_too_short_for_the_models_window_and_skips_it_with_skip_bad(tmp_path, capsys):
    """A model with a 50 ms window: a 37.5 ms file (which the 25 ms check made where no model is known
    passes) is one line naming it before any decoding; --skip-bad transcribes the others."""
    torch.manual_seed(0)
    plain = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
    ConditionalASR({**plain.config, "features": {**plain.config["features"], "frame_length_ms": 50.0}},
                   plain.encoder).save(tmp_path / "model")
    short, ok = tmp_path / "short.wav", tmp_path / "ok.wav"
    sf.write(short, tone(0.0375), 16000)
    sf.write(ok, tone(0.5), 16000)
    args = ["transcribe", str(short), str(ok), "--model", str(tmp_path / "model"), "--json"]
    assert main(args) == 1
    lines = error_lines(capsys)
    assert lines[0] == (f"error: {short}: too short (37.5 ms; the model's shortest usable audio is 50 ms, 800 samples "
                        "at 16000 Hz: one frame)") and "--skip-bad" in lines[-1]
    assert main([*args, "--skip-bad"]) == 0
    skipped, result = _json_lines(capsys.readouterr().out)
    assert skipped["path"] == str(short) and skipped["skipped"].startswith("too short (37.5 ms")
    assert result["path"] == str(ok)


def test_transcribe_checks_the_plot_folder_before_decoding_and_prints_before_plotting(model, tmp_path, monkeypatch, capsys):
    sf.write(tmp_path / "a.flac", np.zeros(1600, dtype=np.float32), 16000)
    decoded = []
    monkeypatch.setattr("surprisal_cc.inference.asr.transcribe_checked_file",
                        lambda asr, path, **kwargs: decoded.append(path))
    plot = tmp_path / "a.flac" / "routing.png"
    assert main(["transcribe", str(tmp_path / "a.flac"), "--model", str(model), "--plot", str(plot)]) == 1
    (line,) = error_lines(capsys)
    assert line == f"error: --plot {plot}: its folder {plot.parent} cannot be created (File exists)" and not decoded
    assert main(["transcribe", str(tmp_path / "a.flac"), "--model", str(model), "--plot", ""]) == 2  # not ignored
    assert error_lines(capsys) == ["error: --plot needs a PNG file or a folder to write the routing plots to"]
    # a plot that fails all the same comes after its file's result, which stays printed
    monkeypatch.undo()
    monkeypatch.setattr("surprisal_cc.experiments.plots.plot_routing", lambda *args, **kwargs: (_ for _ in ()).throw(
        OSError("No space left on device")))
    assert main(["transcribe", str(tmp_path / "a.flac"), "--model", str(model), "--plot",
                 str(tmp_path / "routing.png")]) == 1
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'a.flac'}\n")


def test_transcribe_goes_on_after_a_plot_it_cannot_save(model, tmp_path, capsys):
    """A plot that cannot be written is one error line naming it; the next file is still transcribed
    and plotted, and the exit status says that something failed."""
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        sf.write(tmp_path / f"{name}.flac", rng.uniform(-0.3, 0.3, 8000).astype(np.float32), 16000)
    plot = tmp_path / "plots" / "routing.png"
    (tmp_path / "plots" / "routing_a.png").mkdir(parents=True)  # a folder where a's plot should go
    assert main(["transcribe", str(tmp_path / "a.flac"), str(tmp_path / "b.flac"), "--model", str(model), "--json",
                 "--plot", str(plot)]) == 1
    out = capsys.readouterr()
    assert [r["path"] for r in _json_lines(out.out)] == [str(tmp_path / "a.flac"), str(tmp_path / "b.flac")]
    assert out.err == f"error: {tmp_path / 'plots' / 'routing_a.png'}: routing plot not saved (Is a directory)\n"
    assert (tmp_path / "plots" / "routing_b.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.integration
def test_transcribe_several_files_with_bad_ones(model, real_flac, tmp_path, capsys):
    paths = make_bad_audio_fixture(tmp_path)
    args = ["transcribe", str(real_flac), str(paths["empty"]), str(paths["corrupt"]), "--model", str(model)]
    assert main(args) == 1
    lines = error_lines(capsys)
    assert str(paths["empty"]) in lines[0] and str(paths["corrupt"]) in lines[1] and "--skip-bad" in lines[2]
    assert main([*args, "--skip-bad"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(str(real_flac)) and captured.err.count("warning: skipped") == 2


def test_a_folder_without_audio_beside_other_audio_is_named_in_a_warning(model, tmp_path, capsys):
    rng = np.random.default_rng(0)
    sf.write(tmp_path / "a.flac", rng.uniform(-0.3, 0.3, 8000).astype(np.float32), 16000)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no audio here")
    assert main(["transcribe", str(tmp_path / "a.flac"), str(tmp_path / "notes"), "--model", str(model)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{tmp_path / 'a.flac'}\n")
    assert f"no audio files in {tmp_path / 'notes'}" in captured.err


@pytest.mark.integration
def test_8khz_and_stereo_audio_are_converted_with_a_warning(model, real_flac, tmp_path, capsys):
    audio, rate = sf.read(str(real_flac), dtype="float32")
    sf.write(tmp_path / "stereo.flac", np.stack([audio, audio], axis=1), rate)
    sf.write(tmp_path / "rate8k.wav", audio[::2], rate // 2)
    assert main(["transcribe", str(real_flac), str(tmp_path / "stereo.flac"), str(tmp_path / "rate8k.wav"),
                 "--model", str(model), "--json", "--deterministic"]) == 0
    captured = capsys.readouterr()
    assert "warning: " in captured.err and "Traceback" not in captured.err
    assert f"more than one channel; downmixed to mono (channel mean) on load:\n  {tmp_path / 'stereo.flac'} (2 channels)" in captured.err
    assert f"not 16000 Hz; resampled to 16000 Hz on load:\n  {tmp_path / 'rate8k.wav'} (8000 Hz)" in captured.err
    mono, stereo, low = _json_lines(captured.out)
    assert stereo["phones"] == mono["phones"]  # two identical channels average to the original
    assert abs(low["num_frames"] - mono["num_frames"]) <= 1


@pytest.mark.integration
def test_missing_model_and_other_format_version(model, real_flac, tmp_path, monkeypatch, capsys):
    assert main(["transcribe", str(real_flac), "--model", str(tmp_path / "nowhere")]) == 1
    (line,) = error_lines(capsys)
    assert str(tmp_path / "nowhere") in line and "surprisal-cc export" in line
    monkeypatch.setattr("surprisal_cc.inference.asr.default_model_dir", lambda: tmp_path / "pretrained")
    assert main(["transcribe", str(real_flac)]) == 1
    assert str(tmp_path / "pretrained") in error_lines(capsys)[0]
    old = tmp_path / "old"
    shutil.copytree(model, old)
    config = json.loads((old / "model.json").read_text())
    (old / "model.json").write_text(json.dumps({**config, "format_version": 0}))
    assert main(["evaluate", str(tmp_path), "--model", str(old)]) == 1
    (line,) = error_lines(capsys)
    assert "model.json: model format version 0" in line and "export" in line


@pytest.mark.integration
def test_weights_with_pickled_objects_are_refused(model, real_flac, tmp_path, capsys):
    import argparse

    unsafe = tmp_path / "unsafe"
    shutil.copytree(model, unsafe)
    torch.save({"weight": argparse.Namespace(x=1)}, unsafe / "encoder.pt")
    assert main(["transcribe", str(real_flac), "--model", str(unsafe)]) == 1
    (line,) = error_lines(capsys)
    assert line.startswith(f"error: {unsafe / 'encoder.pt'}: cannot be loaded")


@pytest.mark.integration
def test_device_and_precision_errors(model, real_flac, capsys):
    if not torch.cuda.is_available():
        assert main(["transcribe", str(real_flac), "--model", str(model), "--device", "cuda"]) == 1
        assert "CUDA is not available" in error_lines(capsys)[0]
    assert main(["transcribe", str(real_flac), "--model", str(model), "--device", "tpu9"]) == 1
    assert error_lines(capsys) == ["error: device tpu9: only cpu and cuda[:N] are supported; use cpu "
                                   "(or cuda on a machine with an NVIDIA GPU)"]
    code = main(["transcribe", str(real_flac), "--model", str(model), "--precision", "bf16"])
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert code == 0 and "FLOPs per frame" in capsys.readouterr().out
    else:
        assert code == 1 and "bf16" in error_lines(capsys)[0]


@pytest.mark.parametrize("device", ["mps", "meta"])
def test_a_device_other_than_cpu_and_cuda_is_one_error_line_before_decoding(device, model, tmp_path, capsys):
    sf.write(tmp_path / "a.flac", tone(0.5), 16000)
    assert main(["transcribe", str(tmp_path / "a.flac"), "--model", str(model), "--device", device]) == 1
    assert error_lines(capsys) == [f"error: device {device}: only cpu and cuda[:N] are supported; use cpu "
                                   "(or cuda on a machine with an NVIDIA GPU)"]


def _json_lines(text: str) -> list:
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.integration
def test_transcribe_is_deterministic_unless_sampled(model, real_flac, capsys):
    """The same phones and routing on every run, whatever the RNG's state; sampled routing is
    reproducible from the seed it reports."""
    torch.manual_seed(0)
    asr = ConditionalASR.untrained(LIBRISPEECH_PHONES, controller="surprisal", input_features="apc")
    asr.encoder.controller.set_parameters(weight=0.0, bias=0.0)  # p_big 0.5: sampling draws both networks
    even = asr.save(model.parent / "even")

    def run(*extra, rng_state=0):
        torch.manual_seed(rng_state)  # another global RNG state on each run
        assert main(["transcribe", str(real_flac), "--model", str(even), "--json", *extra]) == 0
        (result,) = _json_lines(capsys.readouterr().out)
        return result

    first, second = run(), run(rng_state=1)
    assert first["routing"] == "deterministic" and first["seed"] is None and first["threads"] == 1
    assert (first["phones"], first["use_big"], first["flops_per_frame"]) == \
        (second["phones"], second["use_big"], second["flops_per_frame"])
    assert first["use_big"] == [p > 0.5 for p in first["p_big"]]
    seeded = [run("--seed", "7", rng_state=state) for state in (0, 1)]
    assert seeded[0]["routing"] == "sampled" and seeded[0]["seed"] == 7
    assert seeded[0]["use_big"] == seeded[1]["use_big"] and seeded[0]["phones"] == seeded[1]["phones"]
    assert not any(first["use_big"]) and 0 < sum(seeded[0]["use_big"]) < len(seeded[0]["use_big"])  # drawn
    assert isinstance(run("--sampled")["seed"], int)  # a random seed, reported
    assert main(["transcribe", str(real_flac), "--model", str(model), "--deterministic", "--sampled"]) == 2  # usage
    assert "give one" in capsys.readouterr().err
    for shift in ("1", "0"):  # an explicit 0 is a shift too (it replaces a saved one)
        assert main(["transcribe", str(real_flac), "--model", str(model), "--bias-shift", shift,
                     "--flops-fraction", "0.9"]) == 2
        assert "both set the controller's bias: give one" in capsys.readouterr().err


def test_transcribe_skipping_every_input_says_none_is_usable_before_solving_a_budget(model, tmp_path, capsys):
    """--skip-bad with no usable input: the skipped records, then one line saying so (not the FLOPs
    budget's complaint that it was given no audio)."""
    paths = make_bad_audio_fixture(tmp_path)
    assert main(["transcribe", str(paths["empty"]), str(paths["corrupt"]), "--model", str(model), "--json",
                 "--skip-bad", "--flops-fraction", "0.9"]) == 1
    out = capsys.readouterr()
    assert [record["path"] for record in _json_lines(out.out)] == [str(paths["empty"]), str(paths["corrupt"])]
    lines = out.err.splitlines()
    assert [line.startswith("warning: skipped") for line in lines] == [True, True, False]
    assert lines[-1] == "error: none of the given files is usable audio (2 left out, listed above)"


def test_decoding_help_gives_the_long_audio_and_thread_defaults_the_code_uses(model, tmp_path, monkeypatch, capsys):
    from surprisal_cc.runtime import DEFAULT_DECODING_THREADS

    monkeypatch.setattr(model_commands, "CHUNK_S", 45.0)
    monkeypatch.setattr(model_commands, "CONTEXT_S", 2.5)
    for command, what in (("transcribe", "files"), ("evaluate", "utterances")):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert f"{what} longer than S + 5 s are decoded" in text and "with 2.5 s of context" in text
        assert "(default 45; 0: every" in text and f"(default {DEFAULT_DECODING_THREADS}: decoding" in text
    sf.write(tmp_path / "a.wav", tone(0.5), 16000)
    assert main(["transcribe", str(tmp_path / "a.wav"), "--model", str(model), "--json"]) == 0
    assert _json_lines(capsys.readouterr().out)[0]["threads"] == DEFAULT_DECODING_THREADS


@pytest.mark.integration
def test_transcribe_json_lines_with_phone_times_and_ctm(model, real_flac, tmp_path, capsys):
    from surprisal_cc.decoding.timestamps import phone_limit_s

    bad = tmp_path / "take: 2.flac"  # ": " in a path is kept whole in its record
    bad.write_bytes(b"")
    assert main(["transcribe", str(bad), str(real_flac), "--model", str(model), "--json", "--skip-bad"]) == 0
    skipped, result = _json_lines(capsys.readouterr().out)
    assert skipped == {"path": str(bad), "skipped": "empty file (0 bytes)"}
    segments, shift = result["segments"], result["frame_shift_s"]
    assert shift == 0.02 and [s["phone"] for s in segments] == result["phones"] and result["text"] == " ".join(
        result["phones"])
    assert segments[0]["start"] == 0 and segments[-1]["end"] == pytest.approx(result["num_frames"] * shift)
    for a, b in zip(segments, segments[1:]):  # each phone until the next, or for its longest
        limit = phone_limit_s(a["phone"])
        assert a["end"] == b["start"] or (a["end"] < b["start"] and limit is not None
                                          and a["end"] - a["start"] >= limit - 1e-5), (a, b)
    assert all(s["end"] > s["start"] for s in segments)
    assert main(["transcribe", str(real_flac), "--model", str(model), "--format", "ctm"]) == 0
    ctm = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [row[4] for row in ctm] == result["phones"] and {row[0] for row in ctm} == {real_flac.stem}
    assert [float(row[2]) for row in ctm] == pytest.approx([s["start"] for s in segments], abs=0.006)


def test_transcribe_ctm_of_a_file_without_phones_is_no_line(model, tmp_path, capsys):
    """A file in which nothing is recognised adds no line to the CTM (an empty line is no CTM record)."""
    for name in ("a", "b"):
        sf.write(tmp_path / f"{name}.wav", tone(0.2), 16000)
    files = [str(tmp_path / "a.wav"), str(tmp_path / "b.wav")]
    assert main(["transcribe", *files, "--model", str(model), "--format", "ctm", "--blank-penalty", "-1000"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["transcribe", *files, "--model", str(model), "--format", "ctm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(len(line.split()) == 5 for line in lines)


@pytest.mark.integration
def test_transcribe_kaldi_data_folder_names_each_utterance_by_its_id(model, real_flac, tmp_path, capsys):
    """A Kaldi data folder stands for its wav.scp's utterances (no text needed): CTM, JSON, text and
    plots name them by id; an entry Kaldi would run as a command is an error, --skip-bad skips it."""
    folder = tmp_path / "data" / "test"
    folder.mkdir(parents=True)
    (folder / "wav.scp").write_text(f"spk1-u2 {real_flac}\nspk1-u1 {real_flac}\nu3 flac -c -d -s {real_flac} |\n")
    missing = tmp_path / "missing.wav"
    assert main(["transcribe", str(folder), str(missing), "--model", str(model), "--format", "ctm"]) == 1
    errors = error_lines(capsys)  # every problem at once: the command and the missing file
    assert errors[0] == (f"error: {folder / 'wav.scp'}: u3: a command (flac -c -d -s {real_flac} |), not an audio "
                         "file: write its output to a file and list that, e.g. with Kaldi's wav-copy")
    assert errors[1].startswith(f"error: {missing}: ") and "2 of 4 files are unusable; pass --skip-bad" in errors[-1]
    assert main(["transcribe", str(folder), str(real_flac), "--model", str(model), "--format", "ctm",
                 "--skip-bad"]) == 0
    captured = capsys.readouterr()
    ctm = [line.split() for line in captured.out.splitlines()]
    ids = list(dict.fromkeys(row[0] for row in ctm))
    assert ids == ["spk1-u1", "spk1-u2", real_flac.stem]  # wav.scp sorted by id, then the file
    assert [row[1:] for row in ctm if row[0] == "spk1-u1"] == [row[1:] for row in ctm if row[0] == real_flac.stem]
    assert "skipped" in captured.err and "u3: a command" in captured.err
    assert main(["transcribe", str(folder), "--model", str(model), "--json", "--skip-bad",
                 "--plot", str(tmp_path / "plots" / "r.png")]) == 0
    skipped, *results = _json_lines(capsys.readouterr().out)
    assert skipped["path"] == str(folder / "wav.scp") and skipped["utterance"] == "u3"
    assert skipped["skipped"].startswith("a command")
    assert [(r["utterance"], r["path"]) for r in results] == [("spk1-u1", str(real_flac)), ("spk1-u2", str(real_flac))]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["r_spk1-u1.png", "r_spk1-u2.png"]
    assert main(["transcribe", str(folder), "--model", str(model), "--skip-bad",
                 "--plot", str(tmp_path / "by_id") + "/"]) == 0  # a folder: one plot per utterance in it
    capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "by_id").iterdir()) == ["spk1-u1.png", "spk1-u2.png"]
    assert main(["transcribe", str(folder), "--model", str(model), "--skip-bad"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"spk1-u1 ({real_flac})"
    (folder / "wav.scp").write_text(f"u3 flac -c -d -s {real_flac} |\n")  # nothing usable: the entry, no hint
    assert main(["transcribe", str(folder), "--model", str(model)]) == 1
    assert error_lines(capsys) == [errors[0]]


class _Piped:
    """A stand-in for sys.stdin: ``data`` piped in, or a terminal (``tty=True``)."""

    def __init__(self, data: bytes = b"", tty: bool = False):
        self.buffer, self.tty = io.BytesIO(data), tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.integration
def test_transcribe_reads_audio_piped_to_standard_input(model, real_flac, tmp_path, monkeypatch, capsys):
    """``-`` is the audio piped in (what ffmpeg or sox write to a pipe), decoded like the same file and
    named ``-`` (CTM: ``stdin``); a terminal, a second ``-`` and undecodable bytes are one line each."""
    assert main(["transcribe", str(real_flac), "--model", str(model), "--json"]) == 0
    from_file = _json_lines(capsys.readouterr().out)[0]
    monkeypatch.setattr(sys, "stdin", _Piped(real_flac.read_bytes()))
    assert main(["transcribe", "-", "--model", str(model), "--json"]) == 0
    piped = _json_lines(capsys.readouterr().out)[0]
    assert piped["path"] == "-" and piped["phones"] == from_file["phones"]
    monkeypatch.setattr(sys, "stdin", _Piped(real_flac.read_bytes()))
    assert main(["transcribe", "-", "--model", str(model), "--format", "ctm"]) == 0
    assert {line.split()[0] for line in capsys.readouterr().out.splitlines()} == {"stdin"}
    named_stdin = tmp_path / "st" / "stdin.flac"  # a file whose stem is stdin too: neither takes a folder's name
    named_stdin.parent.mkdir()
    named_stdin.write_bytes(real_flac.read_bytes())
    monkeypatch.setattr(sys, "stdin", _Piped(real_flac.read_bytes()))
    assert main(["transcribe", "-", str(named_stdin), "--model", str(model), "--format", "ctm"]) == 0
    assert {line.split()[0] for line in capsys.readouterr().out.splitlines()} == {"stdin", "st_stdin"}
    monkeypatch.setattr(sys, "stdin", _Piped(b"not audio at all"))
    assert main(["transcribe", "-", "--model", str(model)]) == 1
    assert error_lines(capsys)[0].startswith("error: standard input (-): cannot be decoded")
    monkeypatch.setattr(sys, "stdin", _Piped(tty=True))
    assert main(["transcribe", "-", "--model", str(model)]) == 2
    assert "nothing is piped to it" in capsys.readouterr().err
    assert main(["transcribe", "-", "-", "--model", str(model)]) == 2
    assert "can be given once" in capsys.readouterr().err


@pytest.mark.integration
def test_transcribe_long_file_in_parts_with_progress_and_blank_penalty(model, real_flac, tmp_path, capsys):
    """--chunk-seconds decodes a 70 s file in parts (progress on stderr) into as many frames as whole-file
    decoding; --blank-penalty lengthens the phone sequence."""
    audio, rate = sf.read(str(real_flac), dtype="float32")
    long = np.tile(audio, int(np.ceil(70 * rate / len(audio))))[: 70 * rate]
    sf.write(tmp_path / "long.flac", long, rate)
    assert main(["transcribe", str(tmp_path / "long.flac"), "--model", str(model), "--json",
                 "--chunk-seconds", "20"]) == 0
    captured = capsys.readouterr()
    (parts,) = _json_lines(captured.out)
    assert f"{tmp_path / 'long.flac'}: " in captured.err and "of 70 s" in captured.err
    assert main(["transcribe", str(tmp_path / "long.flac"), "--model", str(model), "--json",
                 "--chunk-seconds", "0"]) == 0
    captured = capsys.readouterr()
    (whole,) = _json_lines(captured.out)
    assert "of 70 s" not in captured.err  # decoded whole: nothing to report
    assert parts["num_frames"] == whole["num_frames"] == 3499  # 20 ms frames of 25 ms windows
    assert parts["duration_s"] == whole["duration_s"] == 70
    assert main(["transcribe", str(real_flac), "--model", str(model), "--json", "--blank-penalty", "20"]) == 0
    (penalised,) = _json_lines(capsys.readouterr().out)
    assert main(["transcribe", str(real_flac), "--model", str(model), "--json"]) == 0
    (plain,) = _json_lines(capsys.readouterr().out)
    assert len(penalised["phones"]) > len(plain["phones"])


@pytest.mark.integration
def test_transcribe_keeps_finished_results_when_interrupted(model, real_flac, monkeypatch, capsys):
    calls = []
    from surprisal_cc.inference import asr

    original = asr.transcribe_checked_file

    def second_is_interrupted(model, path, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(model, path, **kwargs)

    monkeypatch.setattr(asr, "transcribe_checked_file", second_is_interrupted)
    assert main(["transcribe", str(real_flac), str(real_flac), "--model", str(model), "--json"]) == 130
    captured = capsys.readouterr()
    (done,) = _json_lines(captured.out)
    assert done["path"] == str(real_flac) and captured.err == "error: interrupted\n"


@pytest.mark.integration
def test_transcribe_output_to_a_closed_pipe_ends_quietly(model, real_flac, monkeypatch, capsys):
    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["transcribe", str(real_flac), "--model", str(model)]) == 141
    assert capsys.readouterr().err == ""


@pytest.mark.skipif(os.name != "posix", reason="file names as bytes are POSIX's")
def test_transcribe_prints_a_name_not_valid_in_a_strict_locale(model, tmp_path, monkeypatch, capsys):
    """A Latin-1 name on a UTF-8 system decodes, and a strict standard output prints it escaped."""
    name = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.wav")
    try:
        sf.write(os.fsencode(name), tone(0.5), 16000)
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    raw = io.BytesIO()
    strict = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", strict)
    assert main(["transcribe", str(tmp_path), "--model", str(model)]) == 0
    assert raw.getvalue().decode("ascii", "replace").startswith(f"{tmp_path}/caf\\udce9.wav\n")
    assert capsys.readouterr().err == ""


@pytest.mark.integration
def test_plots_of_files_with_the_same_name_and_opus_in_folders(model, real_flac, tmp_path, capsys):
    audio, rate = sf.read(str(real_flac), dtype="float32")
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        sf.write(tmp_path / folder / "x.opus", audio[: rate * 2], rate, format="OGG", subtype="OPUS")
    assert main(["transcribe", str(tmp_path / "a"), str(tmp_path / "b"), "--model", str(model), "--json",
                 "--plot", str(tmp_path / "routing.png")]) == 0
    assert [Path(r["path"]).name for r in _json_lines(capsys.readouterr().out)] == ["x.opus", "x.opus"]
    assert sorted(p.name for p in tmp_path.glob("routing*.png")) == ["routing_a_x.png", "routing_b_x.png"]
    # CTM file ids tell them apart the same way
    assert main(["transcribe", str(tmp_path / "a"), str(tmp_path / "b"), "--model", str(model), "--format", "ctm"]) == 0
    assert {line.split()[0] for line in capsys.readouterr().out.splitlines()} == {"a_x", "b_x"}


@pytest.mark.parametrize("command,option", [
    (command, option) for command in ("transcribe", "evaluate")
    for option in (["--bias-shift", "nan"], ["--blank-penalty", "inf"], ["--flops-fraction", "nan"])
] + [(command, ["--chunk-seconds", value]) for command in ("transcribe", "evaluate") for value in ("-5", "inf", "0.001")]
  + [(command, ["--seed", "-5"]) for command in ("transcribe", "evaluate")])
def test_number_options_refuse_non_finite_and_negative_values(command, option, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, str(tmp_path / "a.flac"), *option])
    assert exit_info.value.code == 2
    line = error_lines(capsys)[0]
    assert line.startswith(f"error: argument {option[0]}: must be") and option[1] in line


def test_version(capsys):
    from surprisal_cc import __version__

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"surprisal-cc {__version__}\n"


@pytest.mark.integration
def test_newer_model_format_says_to_upgrade(model, real_flac, tmp_path, capsys):
    newer = tmp_path / "newer"
    shutil.copytree(model, newer)
    config = json.loads((newer / "model.json").read_text())
    (newer / "model.json").write_text(json.dumps({**config, "format_version": 2}))
    assert main(["transcribe", str(real_flac), "--model", str(newer)]) == 1
    (line,) = error_lines(capsys)
    assert "model format version 2 is newer" in line and "upgrade surprisal_cc" in line


# ---------------------------------------------------------------------------------------------- evaluate
@pytest.fixture
def librispeech_folder(tmp_path) -> Path:
    """LibriSpeech layout: 3 real dev-clean-2 utterances (symbolic links) + an empty and a corrupt file."""
    shared = require_dev_clean_2()
    chapter = sorted((shared / "LibriSpeech" / "dev-clean-2").glob("*/*"))[0]
    folder = tmp_path / "corpus" / chapter.parent.name / chapter.name
    folder.mkdir(parents=True)
    trans = next(chapter.glob("*.trans.txt"))
    lines = trans.read_text().splitlines()[:3]
    for line in lines:
        utt = line.split()[0]
        os.symlink(chapter / f"{utt}.flac", folder / f"{utt}.flac")
    prefix = f"{chapter.parent.name}-{chapter.name}"
    (folder / f"{prefix}-9998.flac").write_bytes(b"")
    (folder / f"{prefix}-9999.flac").write_bytes(b"fLaC" + bytes(range(256)))
    lines += [f"{prefix}-9998 HELLO", f"{prefix}-9999 WORLD"]
    (folder / trans.name).write_text("\n".join(lines) + "\n")
    return tmp_path / "corpus"


@pytest.mark.integration
def test_evaluate_reports_every_bad_file_and_scores_the_rest_with_skip_bad(model, librispeech_folder, capsys):
    args = ["evaluate", str(librispeech_folder), "--model", str(model)]
    assert main(args) == 1
    lines = error_lines(capsys)
    assert len(lines) == 3 and "-9998.flac: empty file" in lines[0] and "-9999.flac: cannot be decoded" in lines[1]
    assert "2 of 5 utterances have no usable audio" in lines[2] and "--skip-bad" in lines[2]
    assert main([*args, "--skip-bad", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["num_utterances"] == 3 and len(report["skipped"]) == 2 and report["per"] > 0
    assert report["flops_per_frame"] > 3e6 and "warning: skipping 2 unusable" in captured.err
    assert main([*args, "--skip-bad"]) == 0
    assert capsys.readouterr().out.startswith("PER ")


@pytest.mark.integration
def test_evaluate_reports_each_utterance_and_what_ran(model, librispeech_folder, tmp_path, capsys):
    rows = {}
    for batch in (1, 3):
        per_utt = tmp_path / f"utts{batch}.jsonl"
        torch.manual_seed(batch)
        assert main(["evaluate", str(librispeech_folder), "--model", str(model), "--skip-bad", "--json",
                     "--batch-size", str(batch), "--per-utterance", str(per_utt),
                     "--alignments", str(tmp_path / "per.txt")]) == 0
        report = json.loads(capsys.readouterr().out)
        rows[batch] = _json_lines(per_utt.read_text())
        assert {k: report[k] for k in ("routing", "seed", "batch_size", "threads", "precision")} == \
            {"routing": "deterministic", "seed": None, "batch_size": batch, "threads": 1, "precision": "fp32"}
        assert len(rows[batch]) == report["num_utterances"] == 3
        for key in ("substitutions", "deletions", "insertions", "num_ref_tokens"):
            assert sum(row[key] for row in rows[batch]) == report[key]
        row = rows[batch][0]
        assert row["reference"][0] == "sil" and row["hypothesis"] and row["flops_per_frame"] > 3e6
        assert all(f"{r['id']}, %WER" in (tmp_path / "per.txt").read_text() for r in rows[batch])
        assert 0 <= row["big_fraction"] <= 1 and 0 <= row["p_big_mean"] <= 1
    # deterministic routing: the batch size changes the padding, not which network ran (but for a frame
    # whose p_big is within float32 rounding of 0.5, which the other batch's summation order can move)
    assert [(r["id"], r["num_frames"]) for r in rows[1]] == [(r["id"], r["num_frames"]) for r in rows[3]]
    assert_same_routing_up_to_summation_order([r["big_fraction"] for r in rows[3]],
                                              [r["big_fraction"] for r in rows[1]],
                                              [r["num_frames"] for r in rows[1]])
    assert main(["evaluate", str(librispeech_folder), "--model", str(model), "--skip-bad", "--json",
                 "--seed", "5"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["routing"], report["seed"]) == ("sampled", 5)


@pytest.mark.integration
def test_evaluate_skip_bad_covers_missing_transcripts(model, librispeech_folder, capsys):
    trans = next(librispeech_folder.rglob("*.trans.txt"))
    lines = trans.read_text().splitlines()
    dropped = lines[1].split()[0]
    trans.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    args = ["evaluate", str(librispeech_folder), "--model", str(model)]
    assert main(args) == 1
    errors = error_lines(capsys)  # every problem at once: the missing transcript and the unusable audio
    assert f"{dropped}.flac: no transcript line for {dropped}" in errors[0]
    assert "-9998.flac: empty file" in errors[1] and "-9999.flac: cannot be decoded" in errors[2]
    assert "3 of 5 utterances have no usable labels or audio" in errors[-1] and "--skip-bad" in errors[-1]
    assert main([*args, "--skip-bad", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_utterances"] == 2 and len(report["skipped"]) == 3
    assert any(dropped in line and "no transcript line" in line for line in report["skipped"])


@pytest.mark.integration
def test_evaluate_speechbrain_manifest_with_words_and_relative_paths(model, real_flac, tmp_path, monkeypatch,
                                                                      capsys):
    """A SpeechBrain LibriSpeech manifest (wrd, no phn) is labelled by the lexicon; wav paths are
    relative to the CSV's folder, wherever the command runs."""
    (tmp_path / "data" / "audio").mkdir(parents=True)
    shutil.copy(real_flac, tmp_path / "data" / "audio" / real_flac.name)
    manifest = tmp_path / "data" / "test.csv"
    manifest.write_text(f"ID,duration,wav,spk_id,wrd\nu1,10.0,audio/{real_flac.name},s1,HELLO WORLD\n")
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", str(manifest), "--model", str(model), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_ref_tokens"] == 10  # sil HH AH0 L OW1 W ER1 L D sil: CMUdict, sil at both ends
    assert "wrd by the lexicon" in report["labels"]


@pytest.mark.integration
def test_evaluate_kaldi_data_folder(model, real_flac, tmp_path, monkeypatch, capsys):
    """A Kaldi data folder (wav.scp, text) is labelled by the lexicon; an entry Kaldi would run as a
    command is one error line, and --skip-bad scores the rest."""
    folder = tmp_path / "data" / "test"
    folder.mkdir(parents=True)
    (folder / "wav.scp").write_text(f"u1 {real_flac}\nu2 flac -c -d -s {real_flac} |\n")
    (folder / "text").write_text("u1 hello world\nu2 hello world\n")
    assert main(["evaluate", str(folder), "--model", str(model)]) == 1
    errors = error_lines(capsys)
    assert errors[0].startswith(f"error: {folder / 'wav.scp'}: u2: a command (flac -c -d -s") and "--skip-bad" in errors[-1]
    assert main(["evaluate", str(folder), "--model", str(model), "--skip-bad", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_utterances"] == 1 and report["num_ref_tokens"] == 10  # sil HH AH L OW W ER L D sil
    assert report["labels"].startswith("Kaldi text") and len(report["skipped"]) == 1


@pytest.mark.integration
def test_evaluate_bias_shift_trades_flops(model, librispeech_folder, capsys):
    """--bias-shift S moves the controller's logit: fewer frames on the big network (and fewer FLOPs
    counted) below 0, more above; --flops-fraction F solves the shift that meets a budget on the
    audio given; a model whose controller has no bias says so in one line."""
    torch.manual_seed(0)
    asr = ConditionalASR.untrained(LIBRISPEECH_PHONES, controller="surprisal", input_features="apc")
    asr.encoder.controller.set_parameters(weight=0.0, bias=0.0)  # p_big 0.5 before the shift
    shifted = asr.save(model.parent / "calibrated")
    args = ["evaluate", str(librispeech_folder), "--model", str(shifted), "--skip-bad", "--json", "--seed", "1"]
    # --seed: sampled routing, whose expected cost (the mean p_big) --flops-fraction meets
    reports = {}
    for shift in (-4.0, 4.0):
        assert main([*args, "--bias-shift", str(shift)]) == 0
        reports[shift] = json.loads(capsys.readouterr().out)
    assert [reports[s]["bias_shift"] for s in reports] == [-4.0, 4.0]
    assert reports[-4.0]["p_big_mean"] == pytest.approx(1 / (1 + math.exp(4.0)), abs=1e-6)  # p_big 0.5 shifted
    assert reports[4.0]["p_big_mean"] == pytest.approx(1 / (1 + math.exp(-4.0)), abs=1e-6)
    assert reports[-4.0]["flops_per_frame"] < reports[4.0]["flops_per_frame"]
    # --flops-fraction: the shift that spends 0.9 x big-only over this audio (stochastic routing:
    # its expected cost, the mean p_big, meets the budget up to the bisection's tolerance)
    assert main([*args, "--flops-fraction", "0.9"]) == 0
    budgeted = json.loads(capsys.readouterr().out)
    expected_big = budgeted["budget"]["big_fraction"]
    assert budgeted["p_big_mean"] == pytest.approx(expected_big, abs=1e-3)
    # weight 0: every frame's p_big is sigmoid(shift), so the shift is the budget's logit
    assert budgeted["bias_shift"] == budgeted["budget"]["bias_shift"] == pytest.approx(
        math.log(expected_big / (1 - expected_big)), abs=1e-3)
    assert main([*args, "--flops-fraction", "0.9", "--bias-shift", "1"]) == 2  # a usage error
    assert "give one" in error_lines(capsys)[0]
    big_only = model.parent / "big_only"
    ConditionalASR.untrained(LIBRISPEECH_PHONES, controller="big_only", input_features="apc").save(big_only)
    assert main(["evaluate", str(librispeech_folder), "--model", str(big_only), "--skip-bad", "--bias-shift", "-1"]) == 1
    assert "'big_only' controller has no bias to shift" in error_lines(capsys)[0]
    assert main(["evaluate", str(librispeech_folder), "--model", str(big_only), "--skip-bad",
                 "--flops-fraction", "0.9"]) == 1
    assert "needs the surprisal controller; this model's is 'big_only'" in error_lines(capsys)[0]


def test_evaluate_timit_folder_and_manifest(tmp_path, capsys):
    timit_model = tmp_path / "timit_model"
    ConditionalASR.untrained(TIMIT_PHONES_39, controller="random").save(timit_model)
    make_timit_fixture(tmp_path / "timit")
    assert main(["evaluate", str(tmp_path / "timit"), "--model", str(timit_model), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_utterances"] == 2 and "per" in report and report["labels"].startswith("TIMIT")
    assert main(["evaluate", str(tmp_path / "timit"), "--model", str(timit_model), "--timit-split", "valid",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_utterances"] == 2
    wav = next((tmp_path / "timit").rglob("SX127.WAV"))
    manifest = tmp_path / "test.csv"
    manifest.write_text(f"ID,duration,wav,spk_id,wrd,phn\nu1,0.3,{wav},s1,SHE,sil sh iy sil\n")
    assert main(["evaluate", str(manifest), "--model", str(timit_model), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_ref_tokens"] == 4
    manifest.write_text(f"ID,wav\nu1,{wav}\n")
    assert main(["evaluate", str(manifest), "--model", str(timit_model)]) == 1
    assert "lacks the column(s) ['phn or wrd']" in error_lines(capsys)[0]


def test_evaluate_refuses_mfa_labels_for_a_manifest_or_a_timit_folder(model, tmp_path, capsys):
    """MFA labels label LibriSpeech-format folders: with a manifest or a TIMIT folder, which carry their
    own labels, they are one error line instead of being ignored."""
    make_timit_fixture(tmp_path / "timit")
    manifest = tmp_path / "test.csv"
    manifest.write_text(f"ID,wav,phn\nu1,{next((tmp_path / 'timit').rglob('SX127.WAV'))},sil AH sil\n")
    for data, labelled_by in ((manifest, "a manifest is labelled by its phn (or wrd) column"),
                              (tmp_path / "timit", "a TIMIT folder is labelled by its .PHN files")):
        assert main(["evaluate", str(data), "--model", str(model), "--mfa-labels", str(tmp_path / "mfa.csv")]) == 1
        assert error_lines(capsys) == [f"error: {data}: MFA labels are read for LibriSpeech-format folders; "
                                       f"{labelled_by}, so leave out --mfa-labels"]


def test_evaluate_any_pronunciation_scores_what_skip_bad_kept(model, tmp_path, capsys):
    """--any-pronunciation takes the words of the utterances --skip-bad kept: an utterance without a
    transcript line is skipped, not an error when the words are looked up."""
    make_librispeech_fixture(tmp_path, {"dev": {"1-2": ["HELLO WORLD", "GOOD MORNING", "AND"]}})
    trans = tmp_path / "LibriSpeech" / "dev" / "1" / "2" / "1-2.trans.txt"
    trans.write_text("".join(trans.read_text().splitlines(keepends=True)[:2]))  # none for 1-2-0002
    assert main(["evaluate", str(tmp_path / "LibriSpeech" / "dev"), "--model", str(model), "--any-pronunciation",
                 "--skip-bad", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_utterances"] == 2 and report["any_pronunciation"]["fixed"] == 0
    assert [line for line in report["skipped"] if "1-2-0002" in line]


def test_evaluate_of_audio_without_transcripts_points_to_transcribe(model, tmp_path, capsys):
    """A folder of audio with no transcripts cannot be scored: the last line says transcribe decodes it."""
    make_librispeech_fixture(tmp_path, {"dev": {"1-2": ["HELLO WORLD"]}})
    (tmp_path / "LibriSpeech" / "dev" / "1" / "2" / "1-2.trans.txt").unlink()
    subset = tmp_path / "LibriSpeech" / "dev"
    for extra in ([], ["--skip-bad"]):
        assert main(["evaluate", str(subset), "--model", str(model), *extra]) == 1
        last = capsys.readouterr().err.splitlines()[-1]
        assert last.startswith("error: ") and last.endswith("surprisal-cc transcribe (ConditionalASR.transcribe_file) "
                                                            "decodes audio without labels"), last
    assert main(["evaluate", str(subset), "--model", str(model)]) == 1
    assert error_lines(capsys)[-1].startswith("error: the one utterance has no usable labels; ")


def test_an_interrupted_evaluate_keeps_and_names_what_it_scored(model, tmp_path, monkeypatch, capsys):
    """Ctrl-C during the second batch: exit status 130, the first batch's utterances in --per-utterance and
    their alignments written, and one error line saying how many were scored and where they are."""
    make_librispeech_fixture(tmp_path, {"dev": {"1-2": ["HELLO WORLD", "GOOD MORNING", "AND", "HELLO"]}})
    batches = []
    from surprisal_cc.inference import passes

    original = passes.decode_batch

    def second_is_interrupted(asr, wavs, samples):
        batches.append(len(samples))
        if len(batches) == 2:
            raise KeyboardInterrupt
        return original(asr, wavs, samples)

    monkeypatch.setattr(passes, "decode_batch", second_is_interrupted)
    utts, alignments = tmp_path / "utts.jsonl", tmp_path / "alignments.txt"
    assert main(["evaluate", str(tmp_path / "LibriSpeech" / "dev"), "--model", str(model), "--batch-size", "2",
                 "--per-utterance", str(utts), "--alignments", str(alignments)]) == 130
    (line,) = error_lines(capsys)
    assert line.startswith("error: interrupted after 2 of 4 utterances (PER ")
    assert line.endswith(f"their results are in {utts} (--per-utterance) and {alignments} (--alignments)")
    assert [row["id"] for row in _json_lines(utts.read_text())] == ["1-2-0000", "1-2-0001"]
    written = alignments.read_text()
    assert "1-2-0001" in written and "1-2-0002" not in written


def test_evaluate_per_utterance_on_stdout_stays_json_lines(tmp_path, capsys):
    """With --per-utterance -, standard output holds only the utterances' JSON Lines; the totals go to stderr."""
    timit_model = tmp_path / "timit_model"
    ConditionalASR.untrained(TIMIT_PHONES_39, controller="random").save(timit_model)
    make_timit_fixture(tmp_path / "timit")
    for extra in ([], ["--json"]):
        assert main(["evaluate", str(tmp_path / "timit"), "--model", str(timit_model), "--per-utterance", "-",
                     *extra]) == 0
        captured = capsys.readouterr()
        rows = _json_lines(captured.out)
        assert len(rows) == 2 and all("hypothesis" in row for row in rows)
        assert ("\"per\"" if extra else "PER ") in captured.err


def test_evaluate_alignments_on_stdout_leave_no_file_named_dash(tmp_path, monkeypatch, capsys):
    """With --alignments -, the alignments go to standard output and the totals to stderr."""
    timit_model = tmp_path / "timit_model"
    ConditionalASR.untrained(TIMIT_PHONES_39, controller="random").save(timit_model)
    make_timit_fixture(tmp_path / "timit")
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", str(tmp_path / "timit"), "--model", str(timit_model), "--alignments", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("%WER") and captured.out.count(", %WER") == 2
    assert captured.err.startswith("PER ") and not (tmp_path / "-").exists()
    assert main(["evaluate", str(tmp_path / "timit"), "--model", str(timit_model), "--alignments", "-",
                 "--per-utterance", "-"]) == 2
    assert "both write to standard output" in error_lines(capsys)[0]


def test_evaluate_refuses_an_alignments_file_it_cannot_write_before_decoding(tmp_path, monkeypatch, capsys):
    timit_model = tmp_path / "timit_model"
    ConditionalASR.untrained(TIMIT_PHONES_39, controller="random").save(timit_model)
    make_timit_fixture(tmp_path / "timit")
    decoded = []
    monkeypatch.setattr("surprisal_cc.inference.passes.decode_batch", lambda asr, *args: decoded.append(args))
    under_a_file = tmp_path / "timit_model" / "model.json" / "alignments.txt"
    assert main(["evaluate", str(tmp_path / "timit"), "--model", str(timit_model),
                 "--alignments", str(under_a_file)]) == 1
    (line,) = error_lines(capsys)
    assert line == f"error: alignments file {under_a_file} cannot be written: Not a directory" and not decoded
    # the check itself leaves no file behind: a run that stops (here, at decoding) writes none
    assert main(["evaluate", str(tmp_path / "timit"), "--model", str(timit_model),
                 "--alignments", str(tmp_path / "alignments.txt")]) == 1
    assert not (tmp_path / "alignments.txt").exists()


def test_evaluate_per_utterance_file_is_replaced_only_when_results_come(model, tmp_path, capsys):
    """--per-utterance FILE is checked before the corpus is read and emptied when the first result is
    written: a run that fails on its data leaves the results of an earlier run as they were."""
    timit_model = tmp_path / "timit_model"
    ConditionalASR.untrained(TIMIT_PHONES_39, controller="random").save(timit_model)
    make_timit_fixture(tmp_path / "timit")
    per_utt = tmp_path / "utts.jsonl"
    per_utt.write_text('{"id": "earlier run"}\n')
    # no such corpus; TIMIT's labels are not this model's label set
    for data, model_folder in ((tmp_path / "nowhere", timit_model), (tmp_path / "timit", model)):
        assert main(["evaluate", str(data), "--model", str(model_folder), "--per-utterance", str(per_utt)]) == 1
        error_lines(capsys)
        assert per_utt.read_text() == '{"id": "earlier run"}\n'
    under_a_file = per_utt / "utts.jsonl"
    assert main(["evaluate", str(tmp_path / "timit"), "--model", str(timit_model),
                 "--per-utterance", str(under_a_file)]) == 1
    assert error_lines(capsys) == [f"error: per-utterance file {under_a_file} cannot be written: Not a directory"]
    assert main(["evaluate", str(tmp_path / "timit"), "--model", str(timit_model),
                 "--per-utterance", str(per_utt)]) == 0
    rows = _json_lines(per_utt.read_text())
    assert len(rows) == 2 and all("hypothesis" in row for row in rows)


def test_command_line_usage_errors_exit_with_2(tmp_path, capsys):
    assert main(["transcribe", str(tmp_path / "x.flac"), "--json", "--format", "ctm"]) == 2
    assert "choose different outputs" in error_lines(capsys)[0]
    for option in (["--batch-size", "0"], ["--threads", "-1"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["evaluate", str(tmp_path), *option])
        assert exit_info.value.code == 2 and "must be a positive integer" in capsys.readouterr().err


def test_evaluate_data_errors(model, tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nowhere"), "--model", str(model)]) == 1
    assert "nowhere: no such file or folder" in error_lines(capsys)[0]
    (tmp_path / "wavs").mkdir()
    (tmp_path / "wavs" / "u1.wav").write_bytes(b"")  # a layout evaluate does not read: the ones it does are named
    assert main(["evaluate", str(tmp_path / "wavs"), "--model", str(model)]) == 1
    line = error_lines(capsys)[0]
    assert "no .flac file, wav.scp or TIMIT TRAIN/TEST folder" in line and "Kaldi data folder" in line
    assert "write a manifest CSV" in line
    (tmp_path / "a.txt").write_text("x")
    assert main(["evaluate", str(tmp_path / "a.txt"), "--model", str(model)]) == 1
    assert "manifest CSV" in error_lines(capsys)[0]
    make_timit_fixture(tmp_path / "timit")  # TIMIT labels are not the model's (LibriSpeech) label set
    assert main(["evaluate", str(tmp_path / "timit"), "--model", str(model)]) == 1
    assert "not the model's label set" in error_lines(capsys)[0]


def test_evaluate_refuses_a_folder_of_several_librispeech_subsets(model, tmp_path, capsys):
    """A LibriSpeech root holding a test and a training subset is not scored as one corpus: one error line
    names the subsets and the folder of one to give instead, which is scored."""
    make_librispeech_fixture(tmp_path, {"dev-clean-2": {"1-2": ["HELLO WORLD"]}, "train-clean-5": {"3-4": ["AND"]}})
    assert main(["evaluate", str(tmp_path), "--model", str(model)]) == 1
    assert error_lines(capsys) == [
        f"error: {tmp_path}: holds 2 LibriSpeech subsets (LibriSpeech/dev-clean-2, LibriSpeech/train-clean-5), which "
        f"would be read as one corpus: give one subset's folder, such as {tmp_path / 'LibriSpeech' / 'dev-clean-2'}"]
    assert main(["evaluate", str(tmp_path / "LibriSpeech" / "dev-clean-2"), "--model", str(model), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_utterances"] == 1


@pytest.mark.parametrize("layout", ["export", "textgrids"])
def test_evaluate_names_mfa_labels_beside_the_corpus_and_keeps_lexicon_labels(model, tmp_path, capsys, layout):
    """MFA labels where the recipes would find them (phone_labels/ beside LibriSpeech/): the evaluation
    still scores against lexicon labels, and one note line names them and the option that uses them."""
    make_librispeech_fixture(tmp_path, {"dev-clean-2": {"1-2": ["HELLO WORLD"]}})
    subset = tmp_path / "LibriSpeech" / "dev-clean-2"
    assert main(["evaluate", str(subset), "--model", str(model), "--json"]) == 0  # none there: no note
    captured = capsys.readouterr()
    assert "note:" not in captured.err and json.loads(captured.out)["labels"].startswith("lexicon")
    if layout == "export":
        labels = write_mfa_csv(tmp_path / "phone_labels" / "dev-clean-2_mfa.csv", "dev-clean-2",
                               {"1-2-0000": "sil HH AH L OW W ER L D sil"})
    else:
        labels = tmp_path / "phone_labels" / "dev-clean-2"
        labels.mkdir(parents=True)
    assert main(["evaluate", str(subset), "--model", str(model), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["labels"].startswith("lexicon")
    assert captured.err.splitlines() == [f"note: MFA labels for dev-clean-2 found at {labels}; pass --mfa-labels "
                                         f"{labels} to score against them (now: lexicon)"]
    if layout == "export":  # given, they are used, and there is nothing to note
        assert main(["evaluate", str(subset), "--model", str(model), "--json", "--mfa-labels", str(labels)]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["labels"] == f"MFA {labels}" and "note:" not in captured.err


def test_evaluate_reads_csv_as_spreadsheets_save_it_and_names_a_file_that_is_not_text(model, tmp_path, capsys):
    """A manifest with the byte order mark spreadsheets write is read; a manifest or MFA labels file
    that is not UTF-8 is one line naming it."""
    chapter = tmp_path / "corpus" / "1" / "2"
    chapter.mkdir(parents=True)
    sf.write(chapter / "1-2-0001.flac", np.random.default_rng(0).uniform(-0.1, 0.1, 3200), 16000)
    (chapter / "1-2.trans.txt").write_text("1-2-0001 A\n")
    manifest = tmp_path / "test.csv"
    manifest.write_text(f"ID,wav,phn\nu1,{chapter / '1-2-0001.flac'},sil AH sil\n", encoding="utf-8-sig")
    assert main(["evaluate", str(manifest), "--model", str(model), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_utterances"] == 1
    manifest.write_text(f"ID,wav,wrd\nu1,{chapter / '1-2-0001.flac'},CAF\xc9\n", encoding="cp1252")
    assert main(["evaluate", str(manifest), "--model", str(model)]) == 1
    assert error_lines(capsys) == [f"error: {manifest}: not UTF-8 text: save the manifest as UTF-8"]
    labels = chapter / "1-2-0001.flac"  # the audio given for the labels
    assert main(["evaluate", str(tmp_path / "corpus"), "--model", str(model), "--mfa-labels", str(labels)]) == 1
    assert error_lines(capsys) == [f"error: {labels}: not UTF-8 text: give MFA's CSV export or a folder of TextGrids"]


def test_evaluate_refuses_an_utterance_id_given_twice(model, tmp_path, capsys):
    """Scores are kept by utterance id: a repeated id would score one utterance against the other's
    reference, or drop one."""
    for name in ("a", "b"):
        sf.write(tmp_path / f"{name}.wav", np.random.default_rng(0).uniform(-0.1, 0.1, 3200), 16000)
    manifest = tmp_path / "test.csv"
    manifest.write_text("ID,wav,phn\nu1,a.wav,sil AH sil\nu1,b.wav,sil B sil\nu2,b.wav,sil B sil\n")
    assert main(["evaluate", str(manifest), "--model", str(model)]) == 1
    assert error_lines(capsys) == [f"error: {manifest}: utterance id(s) u1 occur more than once: "
                                   "give each utterance its own id"]


def test_evaluate_skip_bad_leaves_out_manifest_rows_without_labels(model, tmp_path, capsys):
    """An empty phn (or wrd) is a missing transcript: named, with --skip-bad to score the others, and
    left out (listed in skipped) with it, as in LibriSpeech and Kaldi folders."""
    sf.write(tmp_path / "a.wav", tone(0.2), 16000)
    manifest = tmp_path / "test.csv"
    manifest.write_text("ID,wav,phn\nu1,a.wav,sil AH sil\nu2,a.wav,\n")
    assert main(["evaluate", str(manifest), "--model", str(model)]) == 1
    lines = error_lines(capsys)
    assert lines[0] == f"error: {manifest}: u2: empty phn" and "pass --skip-bad" in lines[-1]
    assert main(["evaluate", str(manifest), "--model", str(model), "--skip-bad", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_utterances"] == 1 and result["skipped"] == [f"{manifest}: u2: empty phn"]


def test_evaluate_and_flops_fraction_read_long_files_in_parts(model, tmp_path, monkeypatch, capsys):
    """--chunk-seconds S: evaluate decodes an utterance longer than S + twice the context in parts, and
    --flops-fraction (evaluate and transcribe) reads its surprisal in parts; 0: everything whole. (The
    context is cut to 0.5 s here, so that 5 s of audio is long for 1 s parts.)"""
    import functools

    from surprisal_cc.inference import long_audio

    ran = []
    decode_long, long_surprisal = long_audio.decode_long, long_audio.long_surprisal
    monkeypatch.setattr(long_audio, "is_long", functools.partial(long_audio.is_long, context_s=0.5))
    monkeypatch.setattr(long_audio, "decode_long", lambda asr, path, **kw: ran.append(("decode", Path(path).name))
                        or decode_long(asr, path, **{**kw, "context_s": 0.5}))
    monkeypatch.setattr(long_audio, "long_surprisal", lambda asr, path, chunk_s: ran.append(
        ("surprisal", Path(path).name)) or long_surprisal(asr, path, chunk_s, context_s=0.5))
    for name, seconds in (("short.wav", 0.5), ("long.wav", 5.0)):
        sf.write(tmp_path / name, tone(seconds), 16000)
    manifest = tmp_path / "test.csv"
    manifest.write_text("ID,wav,phn\nu1,short.wav,sil AH sil\nu2,long.wav,sil AH B sil\n")
    for chunk, expected in (("1", [("surprisal", "long.wav"), ("decode", "long.wav")]), ("0", [])):
        ran.clear()
        assert main(["evaluate", str(manifest), "--model", str(model), "--chunk-seconds", chunk,
                     "--flops-fraction", "0.9", "--per-utterance", str(tmp_path / "utts.jsonl"), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        rows = {row["id"]: row for row in _json_lines((tmp_path / "utts.jsonl").read_text())}
        assert ran == expected and report["num_utterances"] == 2 and report["num_ref_tokens"] == 7
        assert rows["u2"]["num_frames"] == report["budget"]["frames"] - rows["u1"]["num_frames"] == 249
    ran.clear()
    assert main(["transcribe", str(tmp_path / "long.wav"), "--model", str(model), "--chunk-seconds", "1",
                 "--flops-fraction", "0.9", "--json"]) == 0
    assert ran == [("surprisal", "long.wav"), ("decode", "long.wav")]
    assert _json_lines(capsys.readouterr().out)[0]["budget"]["frames"] == 249


@pytest.mark.parametrize("args", [["flops", str(TIMIT_HPARAMS), "--controller=oracle"], ["grid", "nowhere.yaml"]])
def test_console_script_prints_one_line_and_no_traceback(args, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "surprisal_cc.cli", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# ---------------------------------------------------------------------------------------------- analyse
@pytest.mark.integration
def test_analyse_surprisal_by_class(tmp_path, capsys):
    """The shipped model's APC on two real utterances: silence frames are less surprising than speech."""
    shared = require_dev_clean_2()
    out = tmp_path / "analysis.json"
    assert main(["analyse", "--apc", str(REPO / "surprisal_cc" / "pretrained" / "apc.pt"),
                 "--mfa", str(shared / "phone_labels" / "dev-clean-2_mfa.csv"),
                 "--audio-root", str(shared / "LibriSpeech"), "--max-utterances", "2", "--json", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text()) and printed["frames_silence"] > 0
    assert printed["mean_surprisal_silence"] < printed["mean_surprisal_speech"]


def test_analyse_refuses_a_textgrid_folder_in_one_line(tmp_path, capsys):
    assert main(["analyse", "--apc", str(REPO / "surprisal_cc" / "pretrained" / "apc.pt"), "--mfa", str(tmp_path),
                 "--audio-root", str(tmp_path)]) == 1
    assert error_lines(capsys) == [f"error: --mfa {tmp_path}: a folder; analyse reads MFA's export CSV, whose phones "
                                   "have sample-level times"]


def test_transcribe_text_says_when_no_phone_was_recognised():
    from types import SimpleNamespace

    from surprisal_cc.decoding.transcription import format_text as _format_transcription

    result = SimpleNamespace(p_big=None, steps=None, path="quiet.wav", text="", duration_s=0.05, num_frames=5,
                             flops_per_frame=7.5e6, rtf=0.01)
    assert _format_transcription(result).splitlines()[1] == "  (no phones recognised)"
    assert _format_transcription(SimpleNamespace(**{**vars(result), "text": "sil AH"})).splitlines()[1] == "  sil AH"


def test_an_output_that_names_an_input_or_another_output_is_refused_before_any_work(tmp_path, capsys):
    """What was read or written is never destroyed: evaluate's --per-utterance on its manifest or on its
    --alignments file, and report's --csv on one of its results files, are usage errors (exit 2), and
    the files stay as they were."""
    manifest = tmp_path / "test.csv"
    manifest.write_text("ID,duration,wav,phn\nu1,1.0,u1.wav,sil AH sil\n")
    assert main(["evaluate", str(manifest), "--per-utterance", str(manifest)]) == 2
    assert "DATA and --per-utterance name one file" in capsys.readouterr().err
    assert main(["evaluate", str(manifest), "--per-utterance", str(tmp_path / "o.jsonl"),
                 "--alignments", str(tmp_path / "o.jsonl")]) == 2
    assert "--per-utterance and --alignments name one file" in capsys.readouterr().err
    assert manifest.read_text().startswith("ID,duration") and not (tmp_path / "o.jsonl").exists()
    kaldi = tmp_path / "kaldi"  # a corpus folder's files: wav.scp, text
    kaldi.mkdir()
    (kaldi / "text").write_text("u1 A\n")
    for option, name in (("--per-utterance", "wav.scp"), ("--alignments", "text")):
        assert main(["evaluate", str(kaldi), option, str(kaldi / name)]) == 2
        assert f"{option} ({kaldi / name}) is inside the folder DATA reads" in capsys.readouterr().err
    assert (kaldi / "text").read_text() == "u1 A\n" and not (kaldi / "wav.scp").exists()
    run = tmp_path / "runs" / "seed1"
    run.mkdir(parents=True)
    results = run / "results.json"
    results.write_text(json.dumps({"controller": "surprisal", "seed": 1, "PER": 20.0}))
    assert main(["report", str(tmp_path / "runs"), "--csv", str(results)]) == 2
    assert f"results file {results} and --csv name one file" in capsys.readouterr().err
    assert json.loads(results.read_text())["PER"] == 20.0


def test_input_level_reads_a_quiet_file_as_its_louder_copy(model, tmp_path, capsys):
    """--input-level scales each file to one RMS level first: a copy 40 dB quieter decodes alike; a level
    outside [-80, 0] dBFS is one error line."""
    audio = np.random.default_rng(0).uniform(-0.3, 0.3, 16000).astype(np.float32)
    sf.write(tmp_path / "loud.wav", audio, 16000)
    sf.write(tmp_path / "quiet.wav", audio * 0.01, 16000)
    assert main(["transcribe", str(tmp_path / "loud.wav"), str(tmp_path / "quiet.wav"), "--model", str(model),
                 "--json", "--input-level", "-26"]) == 0
    out, err = capsys.readouterr()
    loud, quiet = _json_lines(out)
    assert loud["phones"] == quiet["phones"] and loud["p_big"] == pytest.approx(quiet["p_big"], abs=1e-4)
    assert "RMS level below" not in err  # scaled to -26 dBFS: no quiet-audio warning
    assert main(["transcribe", str(tmp_path / "loud.wav"), "--model", str(model), "--input-level", "6"]) == 1
    assert error_lines(capsys) == ["error: input level must be a number of dBFS in [-80, 0] (e.g. -26), got 6.0"]


def test_an_unexpected_error_is_one_line_unless_the_traceback_is_asked_for(monkeypatch, capsys):
    """A library's multi-line message (torch's load_state_dict lists every key) still ends in one line."""
    def broken(args, unknown):
        raise RuntimeError("Error(s) in loading state_dict for X:\n\tMissing key(s): " + "'a', " * 200)

    monkeypatch.setitem(cli.COMMANDS, "transcribe", broken)
    monkeypatch.delenv("SURPRISAL_CC_TRACEBACK", raising=False)
    assert main(["transcribe", "a.flac"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: RuntimeError: Error(s) in loading state_dict for X: Missing")
    assert "SURPRISAL_CC_TRACEBACK=1" in lines[0] and len(lines[0]) < 400
    monkeypatch.setenv("SURPRISAL_CC_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="Missing key"):
        main(["transcribe", "a.flac"])
