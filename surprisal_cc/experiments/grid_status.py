"""``surprisal-cc grid FILE --status``: the state of each run of a grid, from its folder (results files, lock
file, the Slurm job recorded there, ``grid.log``) and the Slurm queue (``squeue``; no accounting needed), with the
log file of a failed one. It starts nothing.

* finished: every results file of the run is there;
* running: its Slurm job runs, or a grid process (here or on another host) holds its lock;
* pending: its Slurm job waits in the queue (for resources, a dependency, or requeued), or it was never started;
* failed: it was started (a Slurm job that has left the queue, or a local ``grid.log``) and did not finish.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Dict, List, Optional, Sequence, Tuple

from surprisal_cc.experiments.grid_spec import Run
from surprisal_cc.experiments.run_locks import holder_host, lock_holder
from surprisal_cc.experiments.slurm import QUEUED_STATES, RUNNING_STATES, read_job_record

__all__ = ["run_state", "print_status"]


def run_state(run: Run, queue: Optional[Dict[str, str]]) -> Tuple[str, str, Optional[Path]]:
    """``(state, detail, log)`` of a run: state one of finished / running / pending / failed (see the module);
    ``queue``: squeue's ``{job id: state}`` (None without Slurm)."""
    if run.complete():
        return "finished", "", None
    record = read_job_record(run)
    job = str(record.get("job_id", "")) or None
    log = Path(record["log"]) if record.get("log") else None
    queued = (queue or {}).get(job) if job else None
    if queued in RUNNING_STATES:
        return "running", f"job {job}", log
    if queued in QUEUED_STATES:
        return "pending", f"job {job} {queued.lower()}", log
    holder = lock_holder(run.output_folder, run.lock_name)
    if holder is not None:
        return "running", f"PID {holder.split()[0]} on {holder_host(holder)}", (run.output_folder / "grid.log"
                                                                                 if job is None else log)
    if job is not None and queue is not None:
        return "failed", f"job {job}{' ' + queued.lower() if queued else ''}", log if log and log.exists() else None
    local_log = run.output_folder / "grid.log"
    if local_log.exists() and (job is None or not log or local_log.stat().st_mtime > log.stat().st_mtime):
        return "failed", "local run", local_log
    if job is not None:  # no squeue here: the job's state is unknown
        return "pending", f"job {job} (no squeue here)", log
    return "pending", "not started", None


def print_status(runs: Sequence[Run], queue: Optional[Dict[str, str]], out: Optional[IO[str]] = None) -> int:
    """Print each run's state (a Markdown table, then the counts and the logs of the failed runs); the exit
    status: 1 when a run failed, else 0."""
    out = out or sys.stdout
    lines = ["| run | state | epochs | detail | log |", "|---|---|---|---|---|"]
    counts: Dict[str, int] = {}
    failed: List[Tuple[str, Optional[Path]]] = []
    for run in runs:
        state, detail, log = run_state(run, queue)
        counts[state] = counts.get(state, 0) + 1
        lines.append(f"| {run.name} | {state} | {run.progress()} | {detail or '–'} | {log or '–'} |")
        if state == "failed":
            failed.append((run.name, log))
    print("\n".join(lines) + "\n", file=out)
    print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), file=out)
    if queue is None:
        print("(no squeue here: the states of Slurm jobs come from the run folders only)", file=out)
    for name, log in failed:
        print(f"[failed] {name}: {f'log {log}' if log else 'no log (its job never started)'}", file=out)
    return 1 if failed else 0
