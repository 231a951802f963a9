"""Experiment grids: expand a grid YAML into recipe runs, run them (resumably, N at a time), report.

    surprisal-cc grid hparams/MiniLibriSpeech/grid_cpu.yaml [--dry-run] [--jobs N] [--threads N] [--gpus 0,1]
        [--only SUBSTRING] [--no-report] [--key=value ...]
    surprisal-cc grid FILE --launcher slurm [--partition P] [--gpus-per-run N] [--cpus-per-run N] [--mem-per-run GB]
        [--time HH:MM:SS] [--account A] [--qos Q] [--sbatch=--KEY=VALUE ...] [--dry-run] [...]
    surprisal-cc grid FILE --status | --report

``--launcher local`` (the default) runs the runs as processes of this command, ``--jobs`` at a time (with
``--gpus``, one on each listed GPU: ``CUDA_VISIBLE_DEVICES``). ``--launcher slurm`` submits each pending run as
a Slurm job and returns (:mod:`surprisal_cc.experiments.slurm`: the same plan, as job dependencies; a last job
writes the report; the cluster settings also from the grid file's ``slurm:`` section; ``--dry-run`` prints
each job's sbatch script). ``--status`` prints each run's state from its folder and the Slurm queue
(:mod:`surprisal_cc.experiments.grid_status`); ``--report`` only writes the report.

Extra ``--key=value`` options are settings of every run (e.g. ``--device=cuda:0``), replacing the grid
file's: a finished run in a run's folder made with another value is a conflict, not a result. They may
not name ``seed``, ``output_folder`` or a key that a group varies (those name the runs' folders).
Every key a grid sets (its ``overrides``, a group's ``set`` and ``vary``, a ``--key=value``) must be
one its recipe takes: a top-level key of the hparams file or one of SpeechBrain's options, such as
``device`` or ``test_only`` (:func:`~surprisal_cc.experiments.grid_settings.setting_problem`); a misspelt key is one line naming the grid file,
the group and the key (and the closest key there is), before anything is prepared or launched.

Grid file (plain YAML)::

    recipe: recipes/MiniLibriSpeech/train.py
    hparams: hparams/MiniLibriSpeech/conditional_ctc.yaml
    experiment_root: results/MiniLibriSpeech      # also passed to every run
    seeds: [1, 2, 3]                              # unless a group varies ``seed`` itself
    overrides: {data_folder: data/MiniLibriSpeech, number_of_epochs: 50}   # every run
    publish: docs/results/MiniLibriSpeech/runs    # optional: results*.json, history.jsonl, calibration.json,
                                                  # hyperparams.yaml of each finished run are copied here (same sub-folders)
    report_pool: [apc]                            # optional: configuration keys the reports pool over
                                                  # (surprisal-cc report --pool)
    prepare:                                      # optional: inputs every run needs, made once before the first launch
      - creates: results/labels.csv               # skipped when this file exists
        command: [python, make_labels.py, results/labels.csv]   # "python": this interpreter
        sha256: 88e42f6c...                       # optional: the digest the file must have
    slurm: {partition: gpu, gpus: 1, cpus: 4, time: "4:00:00"}   # optional: settings of --launcher slurm
    groups:
      - name: controllers
        vary: {controller: [surprisal, random]}   # cartesian product (x seeds)
        set: {}                                   # fixed overrides of this group
      - name: bias_sweep                          # test-only runs in another group's folders
        folder_of: controllers
        vary: {controller: [surprisal]}
        set: {test_only: True, test_bias_shifts: [0.0, 1.0, 2.0]}

Each run's folder is ``<experiment_root>/grid/<group or folder_of>/<key-value+...>/seed<seed>`` (the varied
keys, sorted), passed as ``--output_folder``. A run whose results files all exist is skipped (a
"conflict" where its folder's ``hyperparams.yaml`` shows more epochs, or other training settings than the
run's now, its hparams file as it is with the grid's settings: another grid's run, or one made before
that file changed; folders, threads, test-time settings and the settings of an encoder, controller or
APC pretraining that the run does not use may differ; one trained for fewer epochs than asked trains
on, and a test-only run of its folder whose results then evaluate another checkpoint than the training
chose, by the epoch each results file records, is evaluated again); any other run is launched again
with the same command (SpeechBrain's checkpointer resumes it); runs that left a checkpoint go first, so
an interrupted grid finishes what it started, and a test-only run goes as soon as the training run of
its folder has finished. While a run trains, its folder holds a lock file naming the grid process (its PID and host):
a second grid command, on this machine or another one of a shared file system, leaves that run alone
("elsewhere") and goes on with the others; a lock whose process has ended on this machine (a machine
stopped mid-run) is taken over, one held on another host never is. A run
whose effective configuration (hparams defaults + overrides, on the keys the grid sets) equals an
earlier run's is dropped as a duplicate; two training runs of different configurations in one folder
(``folder_of`` without a varied key that tells them apart) are an error. Test-only runs wait for the
training run of their folder and publish only their own ``results_test_only*.json`` and ``hyperparams_test_only*.yaml``; with
``controller_at_test: False``, ``test_stochastic: False`` or a ``test_flops_fraction`` their files are
named apart (``results_test_only_random_at_test.json``, ``results_test_only_budget0.9.json``), so such
evaluations and a bias sweep share a folder.
The ``prepare`` steps run, in order, before the first run is launched (not when every selected run is
finished or published): a step whose ``creates`` file exists is skipped. A ``sha256`` pins the file that
the published runs used: a file with another digest (made on another machine kind, or by changed code)
stops the grid with a :class:`GridError` before anything trains, as runs on it would not be seeds of the
same configuration. Output of each step goes to ``<creates>.log``.
Output of each run goes to ``<run folder>/grid.log``; afterwards the tables and figures are written
to ``<experiment_root>/report``. With ``publish``, each finished run's small result files are copied
there at once, and the tables and figures of everything published so far are rewritten to
``<publish>/report``, so that the published results grow run by run.
The command exits 1 when a run failed, 3 when none failed but a selected run was blocked (it needs a
checkpoint that is not on this machine), in conflict or trained elsewhere (by another grid process), else
0 (:func:`exit_status`).
"""
# This docstring is the description of ``surprisal-cc grid --help``. The grid file read, checked and expanded
# into runs is surprisal_cc.experiments.grid_spec; a run's lock file is surprisal_cc.experiments.run_locks.
from __future__ import annotations

import argparse
import functools
import os
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from surprisal_cc.checks import positive_int
from surprisal_cc.errors import UsageError
from surprisal_cc.experiments import grid_plan
from surprisal_cc.experiments.grid_plan import publish_run
from surprisal_cc.experiments.grid_status import print_status
from surprisal_cc.experiments.slurm import SETTING_OPTIONS, check_gpu_device, queue_states, slurm_settings, submit_grid
from surprisal_cc.experiments.grid_spec import (DEBUG_REFUSED, GridError, GridSpec, PrepareStep, Run, check_input_files, expand, load_grid,
                        prepare_inputs)
from surprisal_cc.experiments.run_locks import acquire_run_lock, holder_host, lock_holder, release_run_lock

__all__ = ["execute", "publish_run", "format_summary", "add_arguments", "run_grid", "write_grid_report"]


def _threads(jobs: int, threads: Optional[int] = None) -> int:
    """Torch threads per run: ``threads``, else the cores divided among the ``jobs``."""
    if threads:
        return threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, jobs))


def _env(jobs: int, threads: Optional[int] = None) -> Dict[str, str]:
    n = str(_threads(jobs, threads))
    return {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}


def execute(runs: Sequence[Run], jobs: int = 1, dry_run: bool = False, poll_s: float = 0.5,
            log: Optional[IO[str]] = None, publish: Optional[Tuple[Path, Path]] = None,
            threads: Optional[int] = None, on_published: Optional[Callable[[], Any]] = None,
            gpus: Optional[Sequence[str]] = None) -> Dict[str, Tuple[str, float]]:
    """Run what is not complete, ``jobs`` at a time (``threads`` torch threads each; default: the
    cores divided among the jobs); returns name -> (status, seconds), status one of done / skipped /
    published / failed / blocked / conflict / elsewhere / dry-run / waits ("conflict": its folder holds a
    finished run with other settings (:meth:`Run.changed_settings`); "elsewhere": another grid process holds the
    run's lock file (:attr:`Run.lock_name`), i.e. is running it now; a dry run says so too). With ``publish = (grid_root, destination)``, each run's
    result files are copied there when it is done (or found complete), and a run whose results are
    there already is not run again ("published": finished on a machine whose ``grid_root`` is gone;
    a test-only run of its folder is "blocked", as it needs the checkpoint that stayed there). With ``gpus``
    (CUDA device ids, e.g. ``["0", "1"]``), as many runs go at once as there are ids, each with its own
    device (``CUDA_VISIBLE_DEVICES`` set to a free one; an id listed twice takes two runs)."""
    log = log or sys.stdout
    if gpus:
        jobs = len(gpus)
    status, pending, waiting = grid_plan.triage(runs, dry_run, publish, log)
    trainers = grid_plan.trainers(runs)
    if dry_run:
        return _print_dry_run(runs, pending, status, waiting, jobs, threads, log)
    running: Dict[str, Tuple[Run, subprocess.Popen, IO[str], float]] = {}
    env = _env(jobs, threads)
    devices: Dict[str, str] = {}  # run name -> its GPU, while it runs
    while pending or running:
        _start_ready(pending, running, status, trainers, jobs, env, publish, log, gpus, devices)
        _reap_finished(running, status, publish, on_published, log, devices)
        if running:
            _wait_for_an_end([proc for _, proc, _, _ in running.values()], poll_s)
    return status


def _wait_for_an_end(procs: Sequence[subprocess.Popen], timeout: float) -> None:
    """Return as soon as one of ``procs`` (started, not yet reaped) has ended, or after ``timeout`` seconds;
    the caller's ``poll`` then finds the exit status. On Linux the processes' pidfds are waited on
    together (nothing reaped); elsewhere the first process is waited on with ``Popen.wait``, which
    keeps its exit status for ``poll`` (a second one's end is then noticed within ``timeout``).

    >>> import sys
    >>> quick = subprocess.Popen([sys.executable, "-c", "pass"])
    >>> start = time.monotonic(); _wait_for_an_end([quick], timeout=30.0); time.monotonic() - start < 25
    True
    >>> quick.poll()
    0
    """
    fds: List[int] = []
    try:
        try:
            for proc in procs:
                fds.append(os.pidfd_open(proc.pid))
        except (AttributeError, OSError):  # not Linux (or before 5.3): wait on one of them
            try:
                procs[0].wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            return
        select.select(fds, [], [], timeout)  # a pidfd is readable once its process has ended
    finally:
        for fd in fds:
            os.close(fd)


def _print_dry_run(runs: Sequence[Run], pending: Sequence[Run], status: Dict[str, Tuple[str, float]],
                   waiting: Set[str], jobs: int, threads: Optional[int], log: IO[str]) -> Dict[str, Tuple[str, float]]:
    """Print every run's command (``# done:`` before those with nothing to do, ``# waits:`` before a
    finished test-only run that waits for its folder's training to train on, run again only if that
    training then chooses another checkpoint); the dry run's statuses ("waits" for those)."""
    prefix = f"OMP_NUM_THREADS={_threads(jobs, threads)} "
    for run in runs:
        done = {"conflict": "# conflict: "}.get(status.get(run.name, ("",))[0], "# done: ")
        marker = done if run.name in status else "# waits: " if run.name in waiting else ""
        print(marker + prefix + shlex.join(run.command), file=log)
    # a run that another grid process trains now is shown as such ("elsewhere")
    planned = {**{r.name: ("elsewhere" if lock_holder(r.output_folder, r.lock_name)
                           else "waits" if r.name in waiting else "dry-run", 0.0) for r in pending}, **status}
    trainers = grid_plan.trainers(runs)
    for run in pending:  # the test-only runs that a launch would block, as _start_ready would
        deps = [(d, planned[d][0]) for d in trainers.get(run.name, []) if d in planned]
        if any(state == "elsewhere" for _, state in deps):  # the grid process that trains it evaluates it too
            planned[run.name] = ("elsewhere", 0.0)
            continue
        reason = grid_plan.blocked_reason(run, deps)
        if reason is not None and run.name not in waiting:
            planned[run.name] = ("blocked", 0.0)
            print(f"[blocked] {run.name}: {reason}", file=log, flush=True)
    return planned


def _start_ready(pending: List[Run], running: Dict[str, Tuple[Run, subprocess.Popen, IO[str], float]],
                 status: Dict[str, Tuple[str, float]], trainers: Dict[str, List[str]], jobs: int,
                 env: Dict[str, str], publish: Optional[Tuple[Path, Path]], log: IO[str],
                 gpus: Optional[Sequence[str]] = None, devices: Optional[Dict[str, str]] = None) -> None:
    """One pass over the pending runs: block those that cannot run, start those whose dependencies are
    done while fewer than ``jobs`` run (in place). A complete test-only run that waited for its training
    to go on is skipped once the training has ended if its results still evaluate the checkpoint
    (:func:`_still_current`), and published with ``publish``."""
    for run in list(pending):
        deps = [status.get(d, ("pending", 0.0))[0] for d in trainers.get(run.name, [])]
        if run.test_only and "pending" not in deps and run.complete() and _still_current(run, "done" in deps):
            pending.remove(run)  # it waited for a training that went on and kept its checkpoint, or failed
            status[run.name] = ("skipped", 0.0)
            if publish is not None:
                publish_run(run, *publish)
        elif (reason := grid_plan.blocked_reason(run, list(zip(trainers.get(run.name, []), deps)))) is not None:
            pending.remove(run)
            status[run.name] = ("blocked", 0.0)
            if "is failed" not in reason:  # a failed training was reported when it failed
                print(f"[blocked] {run.name}: {reason}", file=log, flush=True)
        elif len(running) < jobs and all(s in ("done", "skipped") for s in deps):
            pending.remove(run)
            _try_start(run, running, status, _gpu_env(env, gpus, devices, run.name), log)
            if devices is not None and run.name not in running:  # not started ("elsewhere"): its GPU is free
                devices.pop(run.name, None)


def _still_current(run: Run, trained_now: bool) -> bool:
    """Whether a complete test-only run's results still evaluate its folder's checkpoint: so recorded, or,
    where the files do not record it, unless its training ran in this grid command (``trained_now``)."""
    current = run.evaluates_trained_checkpoint()
    return current if current is not None else not trained_now


def _gpu_env(env: Dict[str, str], gpus: Optional[Sequence[str]], devices: Optional[Dict[str, str]],
             name: str) -> Dict[str, str]:
    """``env`` with ``CUDA_VISIBLE_DEVICES`` set to a GPU of ``gpus`` that no running run has (``devices``:
    run name -> GPU, which records it for ``name``); ``env`` itself without ``gpus``.

    >>> devices = {"a": "0"}
    >>> _gpu_env({}, ["0", "1"], devices, "b"), devices
    ({'CUDA_VISIBLE_DEVICES': '1'}, {'a': '0', 'b': '1'})
    """
    if not gpus or devices is None:
        return env
    used = list(devices.values())
    free = next(g for g in gpus if used.count(g) < list(gpus).count(g))  # jobs = len(gpus): one is free
    devices[name] = free
    return {**env, "CUDA_VISIBLE_DEVICES": free}


def _try_start(run: Run, running: Dict[str, Tuple[Run, subprocess.Popen, IO[str], float]],
               status: Dict[str, Tuple[str, float]], env: Dict[str, str], log: IO[str]) -> None:
    """Start ``run`` (its output to ``grid.log`` in its folder) under its lock file, or mark it
    "elsewhere" where another grid process holds that lock."""
    run.output_folder.mkdir(parents=True, exist_ok=True)
    holder = acquire_run_lock(run.output_folder, run.lock_name)
    if holder is not None:
        status[run.name] = ("elsewhere", 0.0)
        print(f"[elsewhere] {run.name}: another grid process (PID {holder.split()[0]} on {holder_host(holder)}) "
              "is running it",
              file=log, flush=True)
        return
    handle = open(run.output_folder / "grid.log", "a", encoding="utf-8")
    handle.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(run.command)}\n")
    handle.flush()
    proc = subprocess.Popen(run.command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    running[run.name] = (run, proc, handle, time.time())
    print(f"[start] {run.name}", file=log, flush=True)


def _reap_finished(running: Dict[str, Tuple[Run, subprocess.Popen, IO[str], float]],
                   status: Dict[str, Tuple[str, float]], publish: Optional[Tuple[Path, Path]],
                   on_published: Optional[Callable[[], Any]], log: IO[str],
                   devices: Optional[Dict[str, str]] = None) -> None:
    """Record the runs whose process has ended ("done" if complete, else "failed"), release their
    locks and publish the done ones (in place)."""
    for name, (run, proc, handle, start) in list(running.items()):
        if proc.poll() is None:
            continue
        handle.close()
        release_run_lock(run.output_folder, run.lock_name)
        del running[name]
        if devices is not None:
            devices.pop(name, None)
        ok = proc.returncode == 0 and run.complete()
        status[name] = ("done" if ok else "failed", time.time() - start)
        if ok and publish is not None:
            _publish_done(run, publish, on_published, log)
        print(f"[{status[name][0]}] {name} ({status[name][1]:.0f} s, log {run.output_folder / 'grid.log'})",
              file=log, flush=True)


def _publish_done(run: Run, publish: Tuple[Path, Path], on_published: Optional[Callable[[], Any]],
                  log: IO[str]) -> None:
    """Copy a done run's results to the destination, then call ``on_published`` (its error only warned)."""
    publish_run(run, *publish)
    if on_published is not None:
        try:
            on_published()
        except Exception as err:  # a table or figure problem must not stop the grid's runs
            print(f"[warning] the published report was not updated: {err!r}", file=log, flush=True)


def format_summary(runs: Sequence[Run], status: Dict[str, Tuple[str, float]]) -> str:
    """Markdown table of every run's status and epochs, then the counts."""
    lines = ["| run | status | epochs | seconds | folder |", "|---|---|---|---|---|"]
    lines += [f"| {r.name} | {status[r.name][0]} | {'–' if status[r.name][0] == 'published' else r.progress()} "
              f"| {status[r.name][1]:.0f} | {r.output_folder} |" for r in runs]
    counts: Dict[str, int] = {}
    for state, _ in status.values():
        counts[state] = counts.get(state, 0) + 1
    return "\n".join(lines) + "\n\n" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + "\n"


def selects(selector: str, run_name: str) -> bool:
    """Whether ``--only selector`` takes the run ``run_name``: the selector is part of the name, where a
    leading or trailing ``/`` stands for the name's start or end as well as a separator.

    Example
    -------
    >>> selects("bias_sweep/", "converged_bias_sweep/controller-surprisal/seed1")
    True
    >>> selects("/bias_sweep/", "converged_bias_sweep/controller-surprisal/seed1")
    False
    >>> selects("/seed1/", "bias_sweep/controller-surprisal/seed10"), selects("fbank", "g/input_features-fbank/seed2")
    (False, True)
    """
    return selector in f"/{run_name}/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``surprisal-cc grid``: ``GRID [--dry-run] [--jobs N] [--threads N] [--only S] [--no-report]``.

    The ``--key=value`` overrides for every run are what ``parser.parse_known_args`` leaves over.

    Example
    -------
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> args, overrides = parser.parse_known_args(["grid.yaml", "--jobs", "2", "--device=cuda:0"])
    >>> args.grid, args.jobs, args.dry_run, overrides
    ('grid.yaml', 2, False, ['--device=cuda:0'])
    """
    parser.add_argument("grid", help="grid YAML file")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--jobs", type=positive_int, default=1, help="runs in parallel")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch threads per run (default: cores // jobs)")
    parser.add_argument("--only", action="append", default=[],
                        help="only runs whose name (group/key-value+.../seedN) contains this (repeatable); "
                             "a leading or trailing '/' ends a name part: /bias/ is group bias only, /seed1/ not seed10")
    parser.add_argument("--no-report", action="store_true", help="skip tables and figures at the end")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local",
                        help="local: runs as processes of this command (default); slurm: each pending run submitted "
                             "as a Slurm job (submitit), the report as a last job")
    parser.add_argument("--gpus", default=None, metavar="IDS",
                        help="local launcher: CUDA devices, e.g. 0,1,2,3: one run at a time on each (an id listed "
                             "twice takes two runs), as CUDA_VISIBLE_DEVICES; 'visible' takes CUDA_VISIBLE_DEVICES'")
    parser.add_argument("--status", action="store_true",
                        help="print each run's state (pending, running, finished, failed, with the log of a failed "
                             "one) from its folder and the Slurm queue; start nothing")
    parser.add_argument("--report", action="store_true", help="only write the report of what has finished")
    cluster = parser.add_argument_group("Slurm (--launcher slurm; they replace the grid file's slurm: section)")
    cluster.add_argument("--partition", default=None)
    cluster.add_argument("--gpus-per-run", dest="slurm_gpus", type=int, default=None, metavar="N")
    cluster.add_argument("--cpus-per-run", dest="slurm_cpus", type=positive_int, default=None, metavar="N",
                         help="also the run's torch threads")
    cluster.add_argument("--mem-per-run", dest="slurm_mem_gb", type=float, default=None, metavar="GB")
    cluster.add_argument("--time", default=None, help="time limit of one start of a run's job (HH:MM:SS, D-HH:MM:SS "
                                                     "or minutes); a job that reaches it checkpoints and is requeued")
    cluster.add_argument("--account", default=None)
    cluster.add_argument("--qos", default=None)
    cluster.add_argument("--sbatch", action="append", default=[], metavar="--KEY=VALUE",
                         help="another sbatch option (repeatable), written --sbatch=--constraint=a100")
    cluster.add_argument("--signal-delay", dest="slurm_signal_delay_s", type=int, default=None, metavar="S",
                         help="seconds between Slurm's warning signal and the time limit (default 180)")
    cluster.add_argument("--max-requeues", dest="slurm_max_requeues", type=int, default=None, metavar="N")


def run_grid(args: argparse.Namespace, overrides: Sequence[str] = ()) -> int:
    """Run the grid of a command line parsed with :func:`add_arguments`, then write its report.

    Arguments
    ---------
    args : argparse.Namespace
        The parsed options (``grid``, ``dry_run``, ``jobs``, ``only``, ``no_report``, ``launcher``, ``gpus``,
        ``status``, ``report`` and the Slurm settings).
    overrides : sequence of str
        ``--key=value`` options appended to every run's command; anything else raises :class:`UsageError`.

    Returns
    -------
    int
        The exit status (:func:`exit_status`): 1 when a run failed, 3 when none failed but a run
        could not run here (blocked, in conflict with a finished run in its folder, or trained by
        another grid process), else 0.
    """
    if any(o.split("=", 1)[0] == "--debug" for o in overrides):
        raise UsageError(f"--debug: {DEBUG_REFUSED}")
    bad = [o for o in overrides if not (o.startswith("--") and "=" in o)]
    if bad:
        raise UsageError(f"unrecognized arguments: {' '.join(bad)} (extra overrides must look like --key=value)")
    spec = load_grid(args.grid)
    launcher = getattr(args, "launcher", "local")
    gpus = _gpu_ids(getattr(args, "gpus", None))
    settings = slurm_settings(spec.slurm, {name: getattr(args, "slurm_" + name, getattr(args, name, None))
                                           for name in SETTING_OPTIONS}, args.grid) if launcher == "slurm" else None
    if gpus and launcher == "slurm":
        raise UsageError("--gpus gives local runs their devices; a Slurm job gets --gpus-per-run GPUs of its own")
    overrides = check_gpu_device(overrides, len(gpus) if gpus else settings.gpus if settings else 0)
    every = expand(spec, overrides)
    unmatched = [s for s in args.only or [] if not any(selects(s, r.name) for r in every)]
    if unmatched:  # each --only names some run: a misspelt one would leave its runs out unnoticed
        raise GridError(f"--only {' '.join(unmatched)}: no run of {args.grid} has that in its name "
                        "(group/key-value+.../seedN; --dry-run without --only lists them)")
    runs = [r for r in every if not args.only or any(selects(s, r.name) for s in args.only)]
    publish = (Path(spec.experiment_root) / "grid", Path(spec.publish)) if spec.publish else None
    if getattr(args, "status", False):
        return print_status(runs, queue_states())
    report_published = (functools.partial(write_grid_report, publish[1], publish[1] / "report", spec.report_pool)
                        if publish is not None and not args.no_report else None)
    if getattr(args, "report", False):
        return _write_reports(spec, report_published)
    to_run = [r for r in runs if not r.complete() and not (publish is not None and r.published(*publish))]
    missing_steps: List[PrepareStep] = []
    if to_run:
        missing = check_input_files(to_run, spec.prepare, args.grid)
        if missing and not args.dry_run:
            raise GridError("; ".join(missing))
        for line in missing:  # a dry run lists them before its commands
            print(f"# missing: {line}")
        if settings is None:
            prepare_inputs(spec.prepare, dry_run=args.dry_run)
        else:  # the files there are checked here; those missing are made by a job before the runs
            prepare_inputs([step for step in spec.prepare if step.creates.exists()])
            missing_steps = [step for step in spec.prepare if not step.creates.exists()]
    if settings is not None:
        report = None if args.no_report else [sys.executable, "-m", "surprisal_cc.cli", "grid", args.grid, "--report"]
        status = submit_grid(runs, settings, missing_steps, Path(spec.experiment_root), report,
                             dry_run=args.dry_run, publish=publish)
        print(format_summary(runs, status))
        if not args.dry_run:
            print(f"follow them: surprisal-cc grid {args.grid} --status")
        return exit_status(status, dry_run=args.dry_run)
    status = execute(runs, jobs=max(1, args.jobs), dry_run=args.dry_run, publish=publish,
                     threads=args.threads, on_published=report_published, gpus=gpus)
    print(format_summary(runs, status))
    if not args.dry_run and not args.no_report:
        _write_reports(spec, report_published)
    return exit_status(status, dry_run=args.dry_run)


def _write_reports(spec: GridSpec, report_published: Optional[Callable[[], Any]]) -> int:
    """The report of a grid's runs (and of its published runs); 0."""
    out = Path(spec.experiment_root) / "report"
    figures = write_grid_report(Path(spec.experiment_root) / "grid", out, spec.report_pool)
    print(f"report: {out / 'report.md'} ({len(figures)} figures)")
    if report_published is not None:
        report_published()
    return 0


def _gpu_ids(text: Optional[str]) -> Optional[List[str]]:
    """The device ids of ``--gpus``: a comma-separated list, or ``visible`` for ``CUDA_VISIBLE_DEVICES``'.

    >>> _gpu_ids("0,1, 3"), _gpu_ids(None)
    (['0', '1', '3'], None)
    """
    if text is None:
        return None
    if text.strip() == "visible":
        text = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if not text.strip():
            raise UsageError("--gpus visible: CUDA_VISIBLE_DEVICES is not set")
    ids = [part.strip() for part in text.split(",")]
    if not all(ids):
        raise UsageError(f"--gpus {text}: give device ids separated by commas, e.g. --gpus 0,1")
    return ids


def exit_status(status: Dict[str, Tuple[str, float]], dry_run: bool = False) -> int:
    """The grid command's exit status: 1 when a run failed; 3 when none failed but a run is not
    finished and could not run here: blocked (its training run failed, runs elsewhere or was published
    from another machine, so its checkpoint is not here), in conflict (its folder holds another
    configuration's finished run) or elsewhere (another grid process is training it now, which a dry
    run, that runs nothing itself, does not count); else 0, so that a script can tell "every selected
    run is finished" apart.

    Example
    -------
    >>> exit_status({"a": ("done", 5.0), "b": ("published", 0.0)}), exit_status({"a": ("blocked", 0.0)})
    (0, 3)
    >>> exit_status({"a": ("failed", 5.0), "b": ("blocked", 0.0)}), exit_status({"a": ("elsewhere", 0.0)})
    (1, 3)
    """
    states = {state for state, _ in status.values()}
    not_here = {"blocked", "conflict"} | (set() if dry_run else {"elsewhere"})  # submitted, queued: on their way
    return 1 if "failed" in states else 3 if states & not_here else 0


def write_grid_report(results_root: Path, out: Path, pool: Sequence[str] = ()) -> List[Path]:
    """Tables (``report.md``, Markdown and CSV) and figures of the results under ``results_root``,
    written to ``out``, pooled over the configuration keys ``pool``; returns the figures."""
    from surprisal_cc.experiments.plots import make_all_plots
    from surprisal_cc.experiments.report import write_report

    write_report(results_root, out, pool=pool)
    return make_all_plots(results_root, out, pool=pool)
