"""The Slurm launcher of ``surprisal-cc grid FILE --launcher slurm``: every pending run of a grid submitted as
one Slurm job through submitit (https://github.com/facebookincubator/submitit), with the grid's plan
(:mod:`surprisal_cc.experiments.grid_plan`) carried over as job dependencies.

* Cluster settings (:class:`SlurmSettings`): partition, GPUs, CPUs and memory per run, time limit, account,
  QoS, extra ``sbatch`` options, the warning before a time limit and how often a run may be requeued: from the
  grid file's ``slurm:`` section, replaced by the command line's options (``--partition`` ...).
* Order: a job for the ``prepare`` steps whose file is missing; every run job depends on it (``afterok``); a
  test-only run depends on the job that trains its folder; a last job writes the report once every run
  job has ended (``afterany``: ``surprisal-cc grid FILE --report``). A dependent job whose dependency failed
  is cancelled (``--kill-on-invalid-dep=yes``).
* Skipped: finished runs, conflicts, runs another grid process trains now (their lock), and runs whose job,
  recorded in their folder (``slurm-<group>.json``), is still in the queue.
* Preemption and time limits: Slurm signals a job ``signal_delay_s`` before it stops it (``--signal=USR2@S``,
  submitit's); the run's recipe checkpoints after its current training batch and exits
  (:mod:`surprisal_cc.training.preemption`), and submitit requeues the job (``scontrol requeue``), whose next
  start resumes from that checkpoint. A job's output is ``<run folder>/slurm/<job id>_0_log.out``.

Every job runs on the cluster's node in the folder the grid command ran in, with this interpreter (a shared
file system and the same environment, as submitit assumes).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from surprisal_cc.experiments import grid_plan
from surprisal_cc.experiments.grid_spec import GridError, PrepareStep, Run, prepare_inputs
from surprisal_cc.experiments.run_locks import acquire_run_lock, holder_host, lock_holder, release_run_lock

__all__ = ["SlurmSettings", "slurm_settings", "parse_time", "sbatch_options", "RunJob", "PrepareJob",
           "submit_grid", "queue_states", "job_record", "sbatch_script", "SUBMITIT_MISSING"]

SUBMITIT_MISSING = "the Slurm launcher needs submitit: pip install 'surprisal-cc[slurm]' (or pip install submitit)"
#: squeue's states of a job that has not ended
QUEUED_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESIZING", "SUSPENDED",
                 "RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD", "SPECIAL_EXIT", "STOPPED"}
RUNNING_STATES = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "CONFIGURING"}


@dataclass
class SlurmSettings:
    """The cluster settings of every run job (the grid file's ``slurm:`` section; command-line options win)."""

    partition: Optional[str] = None
    gpus: int = 0                  # GPUs per run
    cpus: int = 1                  # CPUs per run (also its torch threads)
    mem_gb: Optional[float] = None  # memory per run
    time: Any = "1-00:00:00"       # time limit of one start of a job (Slurm's formats, or minutes)
    account: Optional[str] = None
    qos: Optional[str] = None
    sbatch: List[str] = field(default_factory=list)  # more sbatch options, "--key=value" or "--flag"
    signal_delay_s: int = 180      # the warning before the time limit: the run checkpoints within it
    max_requeues: int = 50         # how often a job may be requeued after its time limit

    def parameters(self, job_name: str, dependency: Optional[str] = None, gpus: Optional[int] = None,
                   cpus: Optional[int] = None) -> Dict[str, Any]:
        """submitit's ``SlurmExecutor.update_parameters`` of one job (``gpus``, ``cpus``: other than a run's)."""
        extra = sbatch_options(self.sbatch)
        if dependency:
            extra = {"kill-on-invalid-dep": "yes", **extra, "dependency": dependency}
        gpus = self.gpus if gpus is None else gpus
        params = {"job_name": job_name, "time": parse_time(self.time), "cpus_per_task": cpus or self.cpus,
                  "gpus_per_node": gpus or None, "mem": f"{self.mem_gb:g}G" if self.mem_gb else None,
                  "partition": self.partition, "account": self.account, "qos": self.qos,
                  "signal_delay_s": int(self.signal_delay_s), "stderr_to_stdout": True,
                  "additional_parameters": {"requeue": True, **extra}}
        return {key: value for key, value in params.items() if value is not None}


SETTING_OPTIONS = {"partition": "--partition", "gpus": "--gpus-per-run", "cpus": "--cpus-per-run",
                   "mem_gb": "--mem-per-run", "time": "--time", "account": "--account", "qos": "--qos",
                   "sbatch": "--sbatch", "signal_delay_s": "--signal-delay", "max_requeues": "--max-requeues"}


def slurm_settings(section: Optional[Mapping[str, Any]], options: Mapping[str, Any], grid_file: str = "the grid file"
                   ) -> SlurmSettings:
    """The settings of a grid's ``slurm:`` ``section``, each replaced by the command line's value in ``options``
    (``{field: value}``, None where not given; ``sbatch`` options are added to the file's). A
    :class:`GridError` for an unknown key or a value of the wrong kind.

    Example
    -------
    >>> s = slurm_settings({"partition": "gpu", "gpus": 1, "sbatch": ["--constraint=a100"]},
    ...                    {"time": "4:00:00", "sbatch": ["--exclude=n3"], "partition": None})
    >>> s.partition, s.gpus, parse_time(s.time), s.sbatch
    ('gpu', 1, 240, ['--constraint=a100', '--exclude=n3'])
    """
    section = dict(section or {})
    known = {f.name for f in fields(SlurmSettings)}
    unknown = sorted(set(section) - known)
    if unknown:
        raise GridError(f"{grid_file}: unknown key(s) {unknown} in slurm: it has {sorted(known)}")
    values = {**section, **{k: v for k, v in options.items() if v is not None and k != "sbatch"}}
    values["sbatch"] = [str(o) for o in (section.get("sbatch") or [])] + list(options.get("sbatch") or [])
    settings = SlurmSettings(**values)
    for name in ("gpus", "cpus", "signal_delay_s", "max_requeues"):
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "cpus" else 0):
            raise GridError(f"{grid_file}: slurm {name} ({SETTING_OPTIONS[name]}) must be a whole number"
                            f"{' of at least 1' if name == 'cpus' else ''}, got {value!r}")
    try:
        parse_time(settings.time)
        sbatch_options(settings.sbatch)
    except ValueError as err:
        raise GridError(f"{grid_file}: slurm {err}") from None
    return settings


def parse_time(value: Any) -> int:
    """A Slurm time limit in whole minutes (seconds rounded up): minutes, ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
    ``D-HH:MM`` or ``D-HH:MM:SS``.

    >>> [parse_time(v) for v in (90, "90", "1:30:00", "2-0", "1-12:30", "0:59")]
    [90, 90, 90, 2880, 2190, 1]
    """
    text = str(value).strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if isinstance(value, bool) or not match:
        raise ValueError(f"time {value!r} is no Slurm time limit (minutes, HH:MM:SS or D-HH:MM:SS)")
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = int(days) * 86400 + int(first) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # HH:MM:SS
        seconds = int(first) * 3600 + int(second) * 60 + int(third)
    elif second is not None:  # MM:SS
        seconds = int(first) * 60 + int(second)
    else:
        seconds = int(first) * 60
    if seconds <= 0:
        raise ValueError(f"time {value!r} must be more than zero")
    return -(-seconds // 60)


def sbatch_options(options: Sequence[str]) -> Dict[str, Any]:
    """``{"key": value}`` (True for a flag) of sbatch options given as ``--key=value`` or ``--flag``.

    >>> sbatch_options(["--constraint=a100", "--exclusive", "--mail-type=END,FAIL"])
    {'constraint': 'a100', 'exclusive': True, 'mail-type': 'END,FAIL'}
    """
    parsed: Dict[str, Any] = {}
    for option in options:
        if not option.startswith("--") or len(option) < 3:
            raise ValueError(f"sbatch option {option!r}: give sbatch's long form, --key=value or --flag")
        key, _, value = option[2:].partition("=")
        parsed[key] = value if value else True
    return parsed


def _environment(threads: int) -> Dict[str, str]:
    n = str(threads)
    # unbuffered: the job's log shows the run's lines as they come, up to the moment it is stopped
    return {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "PYTHONUNBUFFERED": "1"}


class RunJob:
    """What a run's Slurm job does (submitit pickles it): take the run's lock, run its recipe command (output
    to the job's log), release the lock; fail where the run did not finish. A job that another process's
    lock keeps from its run fails without running it.

    submitit calls :meth:`checkpoint` when Slurm signals the job before its time limit (or on preemption):
    the recipe, signalled too, saves a checkpoint after its current training batch and exits; then the job
    is requeued and starts again with this same object, and the recipe resumes from that checkpoint."""

    def __init__(self, run: Run, cwd: str, threads: int, grace_s: float,
                 publish: Optional[Tuple[Path, Path]] = None) -> None:
        self.run, self.cwd, self.threads, self.grace_s, self.publish = run, cwd, threads, grace_s, publish
        self._proc: Optional[subprocess.Popen] = None

    def __getstate__(self) -> Dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_proc"}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state, _proc=None)

    def __call__(self) -> str:
        os.chdir(self.cwd)
        run = self.run
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        if restarts and run.complete() and not run.changed_settings().trains_on:
            print(f"[done] {run.name}: finished before this job was requeued", flush=True)
            return "done"
        run.output_folder.mkdir(parents=True, exist_ok=True)
        holder = acquire_run_lock(run.output_folder, run.lock_name)
        if holder is not None:
            raise RuntimeError(f"{run.name}: another grid process (PID {holder.split()[0]} on {holder_host(holder)}) "
                               f"holds {run.output_folder / run.lock_name}: not run twice")
        try:
            print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} start {restarts} of job {os.environ.get('SLURM_JOB_ID')} "
                  f"on {os.uname().nodename}: {shlex.join(run.command)}", flush=True)
            self._proc = subprocess.Popen(run.command, env=_environment(self.threads))
            code = _wait(self._proc)
        finally:
            release_run_lock(run.output_folder, run.lock_name)
        if code != 0 or not run.complete():
            raise RuntimeError(f"{run.name}: the recipe exited with status {code}"
                               + ("" if code else " without writing every results file"))
        if self.publish is not None:
            grid_plan.publish_run(run, *self.publish)
        return "done"

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on Slurm's warning signal: let the recipe checkpoint and stop (it got the
        signal too; it is sent again here), at most ``grace_s`` minus a margin, then requeue this job."""
        import submitit

        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGUSR2)
            if _wait(proc, timeout=max(5.0, self.grace_s - 30.0)) is None:  # not training now: stopped, it
                proc.kill()                                                  # resumes from its last checkpoint
                _wait(proc)
            print(f"[requeue] {self.run.name}: the recipe stopped with status {proc.returncode}; the job is requeued "
                  "and resumes from the run's last checkpoint", flush=True)
        release_run_lock(self.run.output_folder, self.run.lock_name)
        return submitit.helpers.DelayedSubmission(RunJob(self.run, self.cwd, self.threads, self.grace_s, self.publish))


def _wait(proc: subprocess.Popen, timeout: Optional[float] = None, poll_s: float = 0.2) -> Optional[int]:
    """``proc``'s exit status once it has ended (None after ``timeout`` seconds). It polls, so that a signal
    handler (submitit's, which calls :meth:`RunJob.checkpoint`) can wait for the same process meanwhile:
    ``Popen.wait`` holds a lock that would keep the handler from ever seeing the process end."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while proc.poll() is None:
        if deadline is not None and time.monotonic() > deadline:
            return None
        time.sleep(poll_s)
    return proc.returncode


class PrepareJob:
    """The Slurm job of a grid's ``prepare`` steps (:func:`~surprisal_cc.experiments.grid_spec.prepare_inputs`)."""

    def __init__(self, steps: Sequence[PrepareStep], cwd: str) -> None:
        self.steps, self.cwd = list(steps), cwd

    def __call__(self) -> str:
        os.chdir(self.cwd)
        prepare_inputs(self.steps)
        return "prepared"


class CommandJob:
    """A job that runs one command (the report's), failing with its exit status."""

    def __init__(self, command: Sequence[str], cwd: str) -> None:
        self.command, self.cwd = list(command), cwd

    def __call__(self) -> int:
        code = subprocess.run(self.command, cwd=self.cwd).returncode
        if code != 0:
            raise RuntimeError(f"{shlex.join(self.command)} exited with status {code}")
        return code


def job_record(run: Run) -> Path:
    """The file in a run's folder that records its last Slurm job (id, log, when)."""
    return run.output_folder / f"slurm-{run.group}.json"


def read_job_record(run: Run) -> Dict[str, Any]:
    try:
        data = json.loads(job_record(run).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def queue_states() -> Optional[Dict[str, str]]:
    """``{job id: state}`` of the jobs squeue knows (those ended a while ago are gone); None without squeue."""
    try:
        proc = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i|%T"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    states = {}
    for line in proc.stdout.splitlines():
        job, _, state = line.strip().partition("|")
        if job:
            states[job] = state
    return states


def _executor_folder(run: Run) -> Path:
    return run.output_folder.absolute() / "slurm"


def _submitit_command(folder: Path) -> str:
    """The command of submitit's sbatch script (``SlurmExecutor._submitit_command_str``)."""
    return " ".join([shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(str(folder))])


def sbatch_script(folder: Path, parameters: Mapping[str, Any]) -> str:
    """The sbatch script submitit submits for a job of ``parameters`` whose files go to ``folder`` (without
    Slurm or a submission; submitit 1.5's ``_make_sbatch_string``, which its executor calls)."""
    from submitit.slurm.slurm import _make_sbatch_string  # the one function that writes its scripts

    return _make_sbatch_string(command=_submitit_command(folder), folder=folder, **parameters)


class _Submitter:
    """Submits jobs (or, in a dry run, prints their scripts with placeholders for the ids)."""

    def __init__(self, settings: SlurmSettings, dry_run: bool, log: IO[str]) -> None:
        self.settings, self.dry_run, self.log = settings, dry_run, log
        if not dry_run:
            try:
                import submitit  # noqa: F401
            except ImportError:
                raise GridError(SUBMITIT_MISSING) from None
            missing = [name for name in ("sbatch", "srun", "squeue") if shutil.which(name) is None]
            if missing:
                raise GridError(f"--launcher slurm: {', '.join(missing)} not found here: submit from a node of the "
                                "cluster (--dry-run prints the sbatch scripts anywhere)")

    def submit(self, folder: Path, function: Any, title: str, dependency: Optional[str], **resources: Any
               ) -> Tuple[str, str]:
        """(job id, log file) of a job running ``function`` (a placeholder id in a dry run)."""
        parameters = self.settings.parameters(title[:60], dependency, **resources)
        if self.dry_run:
            what = f"# runs: {shlex.join(function.run.command)}\n" if isinstance(function, RunJob) else ""
            print(f"# --- job {title}\n{what}{sbatch_script(folder, parameters)}", file=self.log)
            placeholder = f"<{title}>"
            return placeholder, str(folder / f"{placeholder}_0_log.out")
        import submitit

        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=self.settings.max_requeues)
        executor.update_parameters(**parameters)
        job = executor.submit(function)
        return str(job.job_id), str(job.paths.stdout)


def submit_grid(runs: Sequence[Run], settings: SlurmSettings, steps: Sequence[PrepareStep], experiment_root: Path,
                report_command: Optional[List[str]], dry_run: bool = False,
                publish: Optional[Tuple[Path, Path]] = None, log: Optional[IO[str]] = None
                ) -> Dict[str, Tuple[str, float]]:
    """Submit every pending run of ``runs`` (:func:`~surprisal_cc.experiments.grid_plan.triage`) as a Slurm job;
    returns name -> (status, 0.0), status one of submitted / queued (its job from an earlier submission is
    still in the queue) / elsewhere (another grid process holds its lock) / blocked / and triage's
    skipped / published / conflict; ``dry-run`` instead of submitted in a dry run, which prints each job's
    sbatch script. ``steps``: the prepare steps whose file is missing (one job before every run);
    ``report_command``: the last job's command (None: no report job)."""
    log = log or sys.stdout
    cwd = os.getcwd()
    status, pending, waiting = grid_plan.triage(runs, dry_run, publish, log)
    submitter = _Submitter(settings, dry_run, log)
    queue = {} if dry_run else (queue_states() or {})
    jobs: Dict[str, str] = {}  # run name -> its job (submitted now, or still queued from before)
    prepare_dependency = None
    to_submit = [r for r in pending if not r.test_only] + [r for r in pending if r.test_only]
    if steps and to_submit:
        job, _ = submitter.submit(experiment_root.absolute() / "slurm", PrepareJob(steps, cwd), "prepare", None)
        prepare_dependency = f"afterok:{job}"
        if not dry_run:
            print(f"[submitted] prepare ({', '.join(str(s.creates) for s in steps)}): job {job}", file=log, flush=True)
    trainers = grid_plan.trainers(runs)
    for run in to_submit:
        record = read_job_record(run)
        holder = lock_holder(run.output_folder, run.lock_name)
        if record.get("job_id") and queue.get(str(record["job_id"])) in QUEUED_STATES:
            status[run.name] = ("queued", 0.0)
            jobs[run.name] = str(record["job_id"])
            print(f"[queued] {run.name}: job {record['job_id']} ({queue[str(record['job_id'])].lower()})",
                  file=log, flush=True)
            continue
        if holder is not None:
            status[run.name] = ("elsewhere", 0.0)
            print(f"[elsewhere] {run.name}: another grid process (PID {holder.split()[0]} on {holder_host(holder)}) "
                  "is running it", file=log, flush=True)
            continue
        deps = [(d, status.get(d, ("pending", 0.0))[0]) for d in trainers.get(run.name, [])]
        reason = grid_plan.blocked_reason(run, deps)  # a training submitted or queued is waited for
        if reason is not None and run.name not in waiting:
            status[run.name] = ("blocked", 0.0)
            print(f"[blocked] {run.name}: {reason}", file=log, flush=True)
            continue
        after = [jobs[d] for d, _ in deps if d in jobs]
        dependency = ",".join(filter(None, [prepare_dependency, *(f"afterok:{j}" for j in after)])) or None
        job, job_log = submitter.submit(_executor_folder(run), RunJob(run, cwd, settings.cpus,
                                                                      settings.signal_delay_s, publish),
                                        run.name, dependency)
        jobs[run.name] = job
        status[run.name] = ("dry-run" if dry_run else "submitted", 0.0)
        if not dry_run:
            job_record(run).write_text(json.dumps({"job_id": job, "log": job_log, "submitted": time.time(),
                                                   "command": run.command}) + "\n", encoding="utf-8")
            print(f"[submitted] {run.name}: job {job}{f' after {dependency}' if dependency else ''}, log {job_log}",
                  file=log, flush=True)
    if report_command is not None and jobs:
        job, job_log = submitter.submit(experiment_root.absolute() / "slurm", CommandJob(report_command, cwd), "report",
                                        "afterany:" + ":".join(jobs.values()), gpus=0, cpus=1)
        if not dry_run:
            print(f"[submitted] report: job {job} when every run job has ended ({shlex.join(report_command)}), "
                  f"log {job_log}", file=log, flush=True)
    return status


def check_gpu_device(overrides: Sequence[str], gpus: int) -> List[str]:
    """The runs' ``--key=value`` overrides with ``--device=cuda:0`` added where runs get GPUs and name no
    device (each sees only its own GPUs, the first as ``cuda:0``); a :class:`GridError` for another device.

    >>> check_gpu_device(["--lr=0.1"], 1), check_gpu_device(["--lr=0.1"], 0)
    (['--lr=0.1', '--device=cuda:0'], ['--lr=0.1'])
    """
    devices = [o.split("=", 1)[1] for o in overrides if o.startswith("--device=")]
    if not gpus:
        return list(overrides)
    if not devices:
        return [*overrides, "--device=cuda:0"]
    if devices[-1] not in ("cuda", "cuda:0"):
        raise GridError(f"--device={devices[-1]}: a run that is given its own GPU sees it as cuda:0; "
                        "leave --device out or give --device=cuda:0")
    return list(overrides)
