"""The plan of a grid command: which runs of a grid have nothing to do (finished, published, in conflict
with a finished run in their folder) and in which order the others go (:func:`triage`), which runs a
test-only run waits for (:func:`trainers`) and why one cannot run (:func:`blocked_reason`), and the copy of a
finished run's small result files to a grid's ``publish`` folder (:func:`publish_run`). Both launchers of
:mod:`surprisal_cc.experiments.grid` (local processes, and Slurm jobs: :mod:`surprisal_cc.experiments.slurm`)
follow it.
"""
from __future__ import annotations

from pathlib import Path
from typing import IO, Dict, List, Optional, Sequence, Set, Tuple

from surprisal_cc.data.errors import first_listed
from surprisal_cc.experiments.grid_spec import Run, SavedTraining
from surprisal_cc.training.run_folder import test_only_hyperparams_name

__all__ = ["publish_run", "triage", "trainers", "blocked_reason", "PUBLISHED_FILES"]


PUBLISHED_FILES = ("results*.json", "history.jsonl", "calibration.json", "hyperparams.yaml")

def publish_run(run: Run, grid_root: Path, destination: Path) -> List[Path]:
    """Copy a finished run's small result files (never checkpoints) to the same relative folder
    under ``destination``, so that they can be committed the moment the run ends; paths below the
    current folder (the repository the grid runs in) are written relative to it (:func:`portable_text`),
    so that no copy names the machine's folders."""
    import os
    import shutil

    target = run.published_folder(grid_root, destination)
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    # a test-only run publishes its own files only: the training run of its folder publishes the rest
    patterns = ([p.name for p in run.results_files()] + [test_only_hyperparams_name(run.evaluation_tag)]
                if run.test_only else PUBLISHED_FILES)
    for pattern in patterns:
        for path in sorted(run.output_folder.glob(pattern)):
            shutil.copy2(path, target / path.name)
            if path.suffix in (".json", ".jsonl", ".yaml"):
                text = path.read_text(encoding="utf-8")
                (target / path.name).write_text(portable_text(text, os.getcwd()), encoding="utf-8")
            copied.append(target / path.name)
    return copied


def portable_text(text: str, root: str) -> str:
    """``text`` with the absolute folder ``root`` (and its subfolders) written relative to it.

    >>> portable_text('"data": "/work/repo/results/x/dev.csv", "other": "/elsewhere/y"', "/work/repo")
    '"data": "results/x/dev.csv", "other": "/elsewhere/y"'
    >>> portable_text("# /work/repo/hparams/a.yaml", "/work/repo/")
    '# hparams/a.yaml'
    """
    prefix = root.rstrip("/") + "/"
    return text.replace(prefix, "") if prefix != "/" else text


CHANGES_LISTED = 3  # the changed settings a conflict's line names, before it counts the rest


def triage(runs: Sequence[Run], dry_run: bool, publish: Optional[Tuple[Path, Path]], log: IO[str]
            ) -> Tuple[Dict[str, Tuple[str, float]], List[Run], Set[str]]:
    """The status of the runs with nothing to do ("skipped": complete, published unless a dry run;
    "published": its results are at the destination; "conflict": its folder holds a finished run
    with other settings, or more epochs, named in ``log``), and the other runs in the order to start
    them (a finished run asked for more epochs than it was trained for among them: it trains on, and
    the finished test-only runs of its folder wait for it; a test-only run whose results evaluate
    another checkpoint than its folder's training chose, :meth:`Run.stale`, is evaluated again), and the
    names of the finished test-only runs among them that wait for their training to train on."""
    status: Dict[str, Tuple[str, float]] = {}
    pending = []
    waiting = set()  # finished test-only runs that wait for their training to train on
    found = {}  # name -> (complete, SavedTraining)
    for run in runs:
        complete = run.complete()
        found[run.name] = (complete, run.changed_settings() if complete else SavedTraining([], False))
    training_on = {run.output_folder for run in runs if not run.test_only and found[run.name][1].trains_on}
    for run in runs:
        complete, (changed, trains_on) = found[run.name]
        stale = run.stale() if complete else None
        if changed:  # another configuration's finished run in this folder: not a result of this one
            status[run.name] = ("conflict", 0.0)
            print(f"[conflict] {run.name}: {run.output_folder} holds a finished run made with other settings "
                  f"({'; '.join(first_listed(changed, CHANGES_LISTED, ' setting(s)'))}): move that folder away, "
                  "or give this grid another experiment_root", file=log, flush=True)
        elif trains_on:  # the same run asked to train longer: it resumes from its last checkpoint
            pending.append(run)
        elif stale:  # its folder's training trained on since: the new checkpoint is evaluated
            print(f"[stale] {run.name}: {stale}: evaluated again", file=log, flush=True)
            pending.append(run)
        elif complete and run.test_only and run.output_folder in training_on:
            pending.append(run)  # waits for its training to train on, then is evaluated again if stale
            waiting.add(run.name)
        elif complete:
            status[run.name] = ("skipped", 0.0)
            if publish is not None and not dry_run:
                publish_run(run, *publish)
        elif publish is not None and run.published(*publish):
            status[run.name] = ("published", 0.0)
        else:
            pending.append(run)
    # a test-only run goes once its folder is trained (its dependencies below), ahead of training runs;
    # interrupted runs resume before new ones start (stable: the grid's order otherwise)
    pending.sort(key=lambda run: (not run.test_only, not run.started()))
    return status, pending, waiting


def trainers(runs: Sequence[Run]) -> Dict[str, List[str]]:
    """For each test-only run, the runs of the same grid that train its folder (it waits for them)."""
    return {run.name: [r.name for r in runs if not r.test_only and r.output_folder == run.output_folder]
            for run in runs if run.test_only}


def blocked_reason(run: Run, deps: Sequence[Tuple[str, str]]) -> Optional[str]:
    """Why a pending test-only run cannot be evaluated given its training runs' ``(name, status)``, or None."""
    if not run.test_only:
        return None
    if not deps:  # its training run is not in this selection: its folder must hold the finished training
        if not run.started():
            return f"no checkpoint in {run.output_folder / 'save'} to evaluate (train its run first, or select it too)"
        if not run.training_results():  # training, or cut off: its checkpoints are not the chosen one yet
            return (f"the training in {run.output_folder} has not finished ({run.training_progress()} epochs "
                    "validated, no results file): finish it first, or select it too")
    for name, state in deps:
        if state == "published":
            return (f"its training {name} is published, and its checkpoint is not in "
                    f"{run.output_folder / 'save'}")
        if state in ("failed", "blocked", "elsewhere", "conflict"):
            return f"its training {name} is {state}"
    return None
