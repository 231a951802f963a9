"""``surprisal-cc grid --launcher slurm`` (surprisal_cc.experiments.slurm), ``--status`` (grid_status) and the
local launcher's ``--gpus``.

The tests that submit jobs run a real single-node Slurm on this machine (the fixture ``slurm_cluster`` of
tests/slurm_cluster.py: Debian's slurm-wlm and munge, started for this module and stopped by their PIDs);
they skip, with one reason, only where Slurm can neither be installed nor started. The integration test
runs the real Mini-LibriSpeech recipe on the fixture corpus: a toy grid through Slurm equals the same grid
run by the local launcher, also for a run that Slurm signals mid-training, which checkpoints, is requeued and
resumes.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest
import yaml

from data_fixtures import REPO, mini_corpus  # noqa: F401  (a fixture)
from slurm_cluster import slurm_cluster  # noqa: F401  (a fixture)
from surprisal_cc.cli.commands import main
from surprisal_cc.experiments import grid, grid_spec, grid_status, slurm

FAKE_RECIPE = '''
import json, sys
from pathlib import Path
args = dict((a[2:].split("=", 1) + ["True"])[:2] for a in sys.argv[2:])
out = Path(args["output_folder"])
if args.get("controller") == "fail":
    sys.exit("boom")
out.mkdir(parents=True, exist_ok=True)
shifts = json.loads(args.get("test_bias_shifts", "[0.0]"))
prefix = "results_test_only" if args.get("test_only") else "results"
if args.get("test_only"):
    assert (out / "results.json").exists(), "evaluated before its training finished"
for s in shifts:
    (out / (prefix + (".json" if not s else "_bias%+g.json" % s))).write_text(json.dumps({"PER": 25.0 + s,
        "flops_per_frame": 6.4e6, "seed": int(args["seed"]), "controller": args["controller"], "test_bias_shift": s,
        "dataset": "Fake", "epochs": 1}))
(out / ("hyperparams_test_only.yaml" if args.get("test_only") else "hyperparams.yaml")).write_text("x: 1\\n")
with open(out / "calls.txt", "a") as f:
    f.write(" ".join(sys.argv[1:]) + " CUDA_VISIBLE_DEVICES=" + str(__import__("os").environ.get("CUDA_VISIBLE_DEVICES")) + "\\n")
'''
FAKE_HPARAMS = "controller: surprisal\nseed: 1\nexperiment_root: x\noutput_folder: x\nnumber_of_epochs: 1\n" \
               "test_bias_shifts: [0.0]\n"


def fake_grid(tmp_path: Path, controllers=("surprisal", "random"), **extra) -> Path:
    (tmp_path / "fake_recipe.py").write_text(FAKE_RECIPE)
    (tmp_path / "hparams.yaml").write_text(FAKE_HPARAMS)
    made = tmp_path / "inputs" / "made.txt"
    spec = {"recipe": str(tmp_path / "fake_recipe.py"), "hparams": str(tmp_path / "hparams.yaml"),
            "experiment_root": str(tmp_path / "exp"), "seeds": [1],
            "prepare": [{"creates": str(made), "command": ["python", "-c", f"open({str(made)!r}, 'w').write('x')"]}],
            "groups": [{"name": "controllers", "vary": {"controller": list(controllers)}},
                       {"name": "bias", "folder_of": "controllers", "vary": {"controller": ["surprisal"]},
                        "set": {"test_only": True, "test_bias_shifts": [0.0, 1.0]}}], **extra}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------- without a cluster
def test_the_dry_run_prints_the_sbatch_script_of_each_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Settings from the grid's slurm: section, replaced and extended by the options; the prepare job first,
    runs after it, the test-only run after its training, the report after every run."""
    path = fake_grid(tmp_path, slurm={"partition": "gpu", "gpus": 1, "time": "2:00:00", "sbatch": ["--exclusive"]})
    assert main(["grid", str(path), "--launcher", "slurm", "--dry-run", "--cpus-per-run", "4", "--mem-per-run", "16",
                 "--account", "lab", "--qos", "high", "--time", "1-00:00:00", "--sbatch=--constraint=a100"]) == 0
    out = capsys.readouterr().out
    scripts = out.split("# --- job ")[1:]
    assert [s.splitlines()[0] for s in scripts] == ["prepare", "controllers/controller-surprisal/seed1",
                                                    "controllers/controller-random/seed1", "bias/controller-surprisal/seed1",
                                                    "report"]
    run = scripts[1]
    for line in ("#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=4",
                 "#SBATCH --mem=16G", "#SBATCH --time=1440", "#SBATCH --account=lab", "#SBATCH --qos=high",
                 "#SBATCH --exclusive", "#SBATCH --constraint=a100", "#SBATCH --requeue", "#SBATCH --signal=USR2@180",
                 "#SBATCH --dependency='afterok:<prepare>'", "-m submitit.core._submit"):
        assert line in run, line
    assert "# runs: " in run and "--device=cuda:0" in run  # a run with a GPU of its own sees it as cuda:0
    assert "#SBATCH --dependency='afterok:<prepare>,afterok:<controllers/controller-surprisal/seed1>'" in scripts[3]
    assert "afterany:<controllers/controller-surprisal/seed1>:<controllers/controller-random/seed1>:" in scripts[4]
    assert "--gpus-per-node" not in scripts[4]  # the report needs no GPU
    assert "dry-run: 3" in out and not (tmp_path / "exp" / "grid").exists() and not (tmp_path / "inputs").exists()


@pytest.mark.parametrize("section, message", [({"partiton": "gpu"}, "unknown key(s) ['partiton'] in slurm"),
                                              ({"time": "soon"}, "time 'soon' is no Slurm time limit"),
                                              ({"sbatch": ["-C a100"]}, "give sbatch's long form"),
                                              ({"cpus": 0}, "slurm cpus (--cpus-per-run) must be a whole number")])
def test_wrong_cluster_settings_are_one_line(tmp_path: Path, section, message, capsys: pytest.CaptureFixture) -> None:
    path = fake_grid(tmp_path, slurm=section)
    assert main(["grid", str(path), "--launcher", "slurm", "--dry-run"]) == 1
    assert message in capsys.readouterr().err


def test_the_local_launcher_gives_each_concurrent_run_its_own_gpu(tmp_path: Path) -> None:
    """--gpus 0,1: two runs at a time, each with CUDA_VISIBLE_DEVICES of its own (and --device=cuda:0)."""
    runs = grid_spec.expand(grid_spec.load_grid(str(fake_grid(tmp_path, controllers=("surprisal", "random", "learned")))),
                            ["--device=cuda:0"], log=io.StringIO())
    seen: List[Dict[str, str]] = []
    real_popen = subprocess.Popen

    def recording_popen(command, **kwargs):
        seen.append({"run": command[-1], "gpu": kwargs["env"]["CUDA_VISIBLE_DEVICES"]})
        return real_popen([sys.executable, "-c", "import time; time.sleep(0.5)"], **kwargs)

    status = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grid.subprocess, "Popen", recording_popen)
        mp.setattr(grid_spec.Run, "complete", lambda self: any(s["run"].endswith(str(self.output_folder)) for s in seen))
        status = grid.execute([r for r in runs if not r.test_only], gpus=["0", "1"], log=io.StringIO(), poll_s=0.05)
    assert [s["gpu"] for s in seen[:2]] == ["0", "1"]  # the first two side by side, one GPU each
    assert seen[2]["gpu"] in ("0", "1") and {state for state, _ in status.values()} == {"done"}


def test_gpus_visible_takes_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert grid._gpu_ids("visible") == ["2", "3"] and grid._gpu_ids("0,0,1") == ["0", "0", "1"]


def test_status_without_slurm_reads_the_run_folders(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = fake_grid(tmp_path)
    assert main(["grid", str(path), "--no-report", "--only", "controller-surprisal"]) == 0
    capsys.readouterr()
    random_folder = tmp_path / "exp/grid/controllers/controller-random/seed1"
    random_folder.mkdir(parents=True)
    (random_folder / "grid.log").write_text("boom\n")  # started here, did not finish
    assert main(["grid", str(path), "--status"]) == 1
    out = capsys.readouterr().out
    assert "| controllers/controller-surprisal/seed1 | finished |" in out
    assert f"| controllers/controller-random/seed1 | failed | 0/1 | local run | {random_folder / 'grid.log'} |" in out
    assert "| bias/controller-surprisal/seed1 | finished |" in out
    assert f"[failed] controllers/controller-random/seed1: log {random_folder / 'grid.log'}" in out


def test_a_job_record_in_the_queue_is_pending_or_running(tmp_path: Path) -> None:
    run = grid_spec.expand(grid_spec.load_grid(str(fake_grid(tmp_path))), log=io.StringIO())[0]
    run.output_folder.mkdir(parents=True)
    slurm.job_record(run).write_text(json.dumps({"job_id": "42", "log": str(tmp_path / "42_0_log.out")}))
    assert grid_status.run_state(run, {"42": "PENDING"})[:2] == ("pending", "job 42 pending")
    assert grid_status.run_state(run, {"42": "RUNNING"})[:2] == ("running", "job 42")
    assert grid_status.run_state(run, {})[:2] == ("failed", "job 42")
    assert grid_status.run_state(run, {"42": "CANCELLED"})[:2] == ("failed", "job 42 cancelled")


# ---------------------------------------------------------------------------------------------- on Slurm
def squeue(cluster) -> Dict[str, str]:
    proc = subprocess.run(["squeue", "-h", "-o", "%i|%T"], env=cluster.env, capture_output=True, text=True)
    return dict(line.split("|", 1) for line in proc.stdout.split())


def wait_for_the_queue(cluster, timeout_s: float = 600.0) -> None:
    deadline = time.time() + timeout_s
    while squeue(cluster):
        assert time.time() < deadline, f"jobs still queued: {squeue(cluster)}\n{cluster.logs()}"
        time.sleep(1.0)


def test_a_grid_on_slurm_keeps_the_grids_order_and_skips_what_is_done(
        slurm_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Fake recipe (seconds): the prepare job, the runs after it, the test-only run after its training, a failing
    run's log in --status, the report job; a second submission submits nothing."""
    monkeypatch.chdir(tmp_path)
    path = fake_grid(tmp_path, controllers=("surprisal", "random", "fail"))
    assert main(["grid", str(path), "--launcher", "slurm", "--time", "5", "--signal-delay", "60"]) == 0
    out = capsys.readouterr().out
    assert out.count("[submitted]") == 6 and "submitted: 4" in out  # prepare, 4 runs, report
    wait_for_the_queue(slurm_cluster)
    folder = tmp_path / "exp/grid/controllers/controller-surprisal/seed1"
    assert (tmp_path / "inputs/made.txt").exists() and (folder / "results_test_only_bias+1.json").exists()
    assert (tmp_path / "exp/report/report.md").exists()
    assert main(["grid", str(path), "--status"]) == 1
    out = capsys.readouterr().out
    failed = tmp_path / "exp/grid/controllers/controller-fail/seed1"
    assert "failed: 1, finished: 3" in out
    [log] = (failed / "slurm").glob("*_0_log.out")
    assert f"[failed] controllers/controller-fail/seed1: log {log}" in out and "boom" in log.read_text()
    assert main(["grid", str(path), "--launcher", "slurm", "--only", "controller-surprisal"]) == 0
    out = capsys.readouterr().out
    assert "[submitted]" not in out and "skipped: 2" in out


def _results(root: Path) -> Dict[str, dict]:
    """Every results file under a grid's root, keyed by its path there, without what differs between two
    equal runs (dates, wall-clock seconds, the paths of its manifests, whether it resumed)."""
    def same_in_equal_runs(value):
        if isinstance(value, dict):
            return {k: same_in_equal_runs(v) for k, v in value.items()
                    if k not in ("date", "data", "train_resumed") and not k.endswith("_s")}
        return value

    return {str(path.relative_to(root)): same_in_equal_runs(json.loads(path.read_text()))
            for path in sorted((root / "grid").rglob("results*.json"))}


def _toy_grid(root: Path, corpus: Path, name: str) -> Path:
    spec = {"recipe": str(REPO / "recipes/MiniLibriSpeech/train.py"),
            "hparams": str(REPO / "hparams/MiniLibriSpeech/conditional_ctc.yaml"),
            "experiment_root": str(root / name), "seeds": [1, 2],
            "overrides": {"data_folder": str(corpus), "valid_speakers": 2, "number_of_epochs": 1, "batch_size": 1,
                          "input_features": "fbank", "precision": "fp32", "ckpt_interval_minutes": 0},
            "slurm": {"cpus": 1, "time": "10:00", "signal_delay_s": 90},
            "groups": [{"name": "controllers", "vary": {"controller": ["random", "big_only"]}}]}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.integration
def test_a_toy_grid_on_slurm_equals_the_local_one_also_when_a_run_is_requeued(
        slurm_cluster, mini_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture) -> None:
    """The real recipe on the fixture corpus (two controllers x two seeds, one epoch, one CPU each): the grid
    submitted to Slurm writes the same results and report as the local launcher. One run is signalled
    (``scancel --signal=USR2``, Slurm's warning before a time limit) once it trains: it checkpoints after its
    batch, submitit requeues the job, and the next start resumes from that checkpoint to the same result."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    local = _toy_grid(tmp_path, mini_corpus / "corpus", "local")
    on_slurm = _toy_grid(tmp_path, mini_corpus / "corpus", "slurm")
    assert main(["grid", str(on_slurm), "--launcher", "slurm"]) == 0
    out = capsys.readouterr().out
    assert "submitted: 4" in out
    interrupted = tmp_path / "slurm/grid/controllers/controller-random/seed1"
    [record] = [json.loads((interrupted / "slurm-controllers.json").read_text())]
    job, log = record["job_id"], Path(record["log"])
    # the local grid meanwhile, one run at a time on one thread
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    local_grid = subprocess.Popen([sys.executable, "-m", "surprisal_cc.cli", "grid", str(local), "--jobs", "1",
                                   "--threads", "1"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 300
        while not (log.exists() and "Going into epoch 1" in log.read_text(errors="replace")):
            assert time.time() < deadline and not (interrupted / "results.json").exists(), "the run never trained"
            time.sleep(0.2)
        subprocess.run(["scancel", "--signal=USR2", job], env=slurm_cluster.env, check=True)
        local_out, _ = local_grid.communicate(timeout=900)
    finally:
        if local_grid.poll() is None:
            local_grid.kill()
            local_grid.wait()
    assert local_grid.returncode == 0, local_out[-3000:]
    wait_for_the_queue(slurm_cluster)
    text = log.read_text(errors="replace")
    assert "[preemption] received SIGUSR2" in text and "[preemption] checkpoint saved after batch" in text
    assert "[requeue] controllers/controller-random/seed1: the recipe stopped with status 75" in text
    assert "start 1 of job" in text and "Loading a checkpoint" in text.split("start 1 of job", 1)[1]
    assert json.loads((interrupted / "results.json").read_text())["train_resumed"] is True
    assert _results(tmp_path / "slurm") == _results(tmp_path / "local") and len(_results(tmp_path / "local")) == 4
    report_local = (tmp_path / "local/report/report.md").read_text().replace(str(tmp_path / "local"), "ROOT")
    report_slurm = (tmp_path / "slurm/report/report.md").read_text().replace(str(tmp_path / "slurm"), "ROOT")
    assert report_slurm == report_local
    assert main(["grid", str(on_slurm), "--status"]) == 0
    assert "finished: 4" in capsys.readouterr().out


def test_a_checkpoint_signal_ends_training_after_the_current_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """training.preemption: after the signal, the next batch's end saves an intra-epoch checkpoint and the
    process exits with status 75; no signal, no change (SpeechBrain's own interval decides)."""
    import signal

    from surprisal_cc.training import preemption

    class Base:
        checkpointer = object()
        step = 3
        saved: List[str] = []

        def _should_save_intra_epoch_ckpt(self, last_ckpt_time, steps_since_ckpt):
            return False

        def _save_intra_epoch_ckpt(self):
            self.saved.append("ckpt")

    class Brain(preemption.CheckpointOnSignal, Base):
        hparams = None

    monkeypatch.setenv(preemption.SIGNALS_ENV, "USR1")
    before = signal.getsignal(signal.SIGUSR1)
    try:
        assert preemption.install_checkpoint_signals() == ["SIGUSR1"]
        brain = Brain()
        assert not brain._should_save_intra_epoch_ckpt(0.0, 1)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert preemption.stop_requested() and brain._should_save_intra_epoch_ckpt(0.0, 1)
        with pytest.raises(SystemExit) as stopped:
            brain._save_intra_epoch_ckpt()
        assert stopped.value.code == preemption.INTERRUPTED_EXIT and brain.saved == ["ckpt"]
    finally:
        signal.signal(signal.SIGUSR1, before)
        preemption._requested.clear()
