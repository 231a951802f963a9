"""Experiment grids: expand a grid YAML into recipe runs, run them (resumably, N at a time), report.

    surprisal-cc grid hparams/MiniLibriSpeech/grid_cpu.yaml [--dry-run] [--jobs N] [--threads N]
        [--only SUBSTRING] [--no-report] [--key=value ...]

Extra ``--key=value`` options are settings of every run (e.g. ``--device=cuda:0``), replacing the grid
file's: a finished run in a run's folder made with another value is a conflict, not a result. They may
not name ``seed``, ``output_folder`` or a key that a group varies (those name the runs' folders).
Every key a grid sets (its ``overrides``, a group's ``set`` and ``vary``, a ``--key=value``) must be
one its recipe takes: a top-level key of the hparams file or one of SpeechBrain's options, such as
``device`` or ``test_only`` (:func:`setting_problem`); a misspelt key is one line naming the grid file,
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
"conflict" where its folder's ``hyperparams.yaml`` shows other settings or more epochs: another grid's
run; one trained for fewer epochs than asked trains on, and a test-only run of its folder whose results
then evaluate another checkpoint than the training chose, by the epoch each results file records, is
evaluated again); any
other run is launched again with the same command (SpeechBrain's checkpointer resumes it); runs
that left a checkpoint go first, so an interrupted grid finishes what it started, and a test-only run
goes as soon as the training run of its folder has finished. While a run
trains, its folder holds a lock file with the grid process's PID: a second grid command on the
same machine leaves that run alone ("elsewhere") and goes on with the others; a lock whose process
has ended (a machine stopped mid-run) is taken over. A run
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
from __future__ import annotations

import argparse
import difflib
import functools
import io
import hashlib
import itertools
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Collection, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import yaml

from .arguments import positive_int
from .errors import UsageError
from .hparams_files import changed_training_settings, load_yaml_tolerant
from .run_folder import evaluation_tag, read_history, results_file_name, test_only_hyperparams_name
from .run_labels import POOLABLE_KEYS

__all__ = ["Run", "GridSpec", "GridError", "PrepareStep", "load_grid", "prepare_inputs", "check_input_files",
           "setting_problem", "refused_settings", "expand", "override_value", "results_files", "execute",
           "publish_run", "acquire_run_lock", "lock_holder", "release_run_lock", "format_summary", "add_arguments",
           "run_grid", "write_grid_report"]


class GridError(ValueError):
    """A malformed grid file or grid command line."""


@dataclass
class PrepareStep:
    """One ``prepare`` entry of a grid file: a command that makes a file every run needs."""

    creates: Path
    command: List[str]
    sha256: Optional[str] = None

    @property
    def argv(self) -> List[str]:
        """The command, with a leading ``python`` replaced by this interpreter."""
        return [sys.executable, *self.command[1:]] if self.command[0] in ("python", "python3") else list(self.command)


@dataclass
class GridSpec:
    """A parsed grid file."""

    recipe: str
    hparams: str
    experiment_root: str
    overrides: Dict[str, Any]
    groups: List[Dict[str, Any]]
    seeds: List[Any] = field(default_factory=lambda: [1])
    publish: Optional[str] = None  # folder that receives each finished run's small result files
    report_pool: List[str] = field(default_factory=list)  # configuration keys the reports pool over
    prepare: List[PrepareStep] = field(default_factory=list)
    path: Optional[str] = None  # the grid file it was read from (its errors name it)


class SavedTraining(NamedTuple):
    """How the training saved in a run's folder stands to the run (:meth:`Run.changed_settings`)."""

    changes: List[str]   # one line per setting it was trained with that the run changes
    trains_on: bool      # no change, and fewer epochs than the run asks: it resumes and trains on


@dataclass
class Run:
    """One recipe invocation."""

    group: str
    name: str                    # <group>/<key-value+...>/seed<seed>
    output_folder: Path
    overrides: Dict[str, Any]    # every override passed, output_folder excluded
    command: List[str]
    epochs: Optional[int] = None  # number_of_epochs of a training run (override or hparams default)

    @property
    def test_only(self) -> bool:
        return bool(self.overrides.get("test_only"))

    @property
    def evaluation_tag(self) -> str:
        """What names a test-only run's files apart (:func:`~surprisal_cc.run_folder.evaluation_tag`)."""
        return evaluation_tag(self.overrides) if self.test_only else ""

    def results_files(self) -> List[Path]:
        """The results files this run writes."""
        return results_files(self.output_folder, self.overrides.get("test_bias_shifts"), self.test_only,
                             self.evaluation_tag)

    def complete(self) -> bool:
        """Whether every results file this run writes exists."""
        return all(p.exists() for p in self.results_files())

    def changed_settings(self) -> "SavedTraining":
        """How the training run saved in this run's folder (its ``hyperparams.yaml``, which a test-only
        evaluation keeps) stands to this run (:class:`SavedTraining`):

        * ``changes``: one line per setting it was trained with that this run's overrides change
          (:func:`~surprisal_cc.hparams_files.changed_training_settings`: test-time settings may; files
          are not compared by name, as a grid may move them: a results file records its APC by
          fingerprint; two files that are both still there are compared by content), and one if it
          was trained for more epochs than this run asks;
        * ``trains_on``: with no such change, whether it was trained for fewer epochs than asked (it
          resumes and trains on).

        The epochs are not compared for a test-only run, which evaluates whatever its folder holds.
        Nothing for a folder without ``hyperparams.yaml``."""
        saved = self.output_folder / "hyperparams.yaml"
        if not saved.is_file():
            return SavedTraining([], False)
        stored = load_yaml_tolerant(saved)
        if stored.get("precision") == "auto":  # what it resolved to, as the results file records it
            stored["precision"] = self._recorded("precision") or "auto"
        settings = {k: v for k, v in self.overrides.items()
                    if k != "test_only" and (not _is_path(v) or _both_files(stored.get(k), v))}
        changed = changed_training_settings(stored, settings)
        try:
            trained = None if self.test_only or self.epochs is None else int(stored["number_of_epochs"])
        except (KeyError, TypeError, ValueError):
            trained = None
        if trained is not None and trained > self.epochs:
            changed.append(f"number_of_epochs: trained with {trained}, requested {self.epochs}")
        # a training that went on and was cut off has the new number_of_epochs in its hyperparams.yaml
        # and its earlier results: its history says how far it got
        validated = len(read_history(self.output_folder)) if trained is not None else 0
        return SavedTraining(changed, not changed and trained is not None
                             and (trained < self.epochs or 0 < validated < self.epochs))

    def evaluates_trained_checkpoint(self) -> Optional[bool]:
        """For a complete test-only run: whether its results evaluate the checkpoint its folder's
        training chose, by the epoch each results file records (``epochs``) against the training's
        results; None where a file does not record it (results of older runs)."""
        return self._checkpoint_epochs()[0]

    def stale(self) -> Optional[str]:
        """For a complete test-only run whose results evaluate another checkpoint than its folder's
        training chose (the training trained on since): why, else None."""
        current, trained, evaluated = self._checkpoint_epochs() if self.test_only else (None, None, [])
        if current is not False:
            return None
        others = sorted(set(evaluated) - {trained})
        return (f"its results evaluate the checkpoint of epoch {', '.join(map(str, others))}, "
                f"the training's is epoch {trained}")

    def _checkpoint_epochs(self) -> Tuple[Optional[bool], Any, List[Any]]:
        """``(current, trained, evaluated)``: whether the epochs this run's results files evaluated all
        agree with the one the folder's training chose (None where one is not recorded, or where this
        run chooses its checkpoint by another ``selection_metric`` than the training did), that epoch,
        and those evaluated."""
        trained = self._recorded("epochs")
        evaluated = [self._read(path).get("epochs") for path in self.results_files()]
        if trained is None or None in evaluated or self._own_selection():
            return None, trained, evaluated
        return all(epoch == trained for epoch in evaluated), trained, evaluated

    def _own_selection(self) -> bool:
        """Whether this run chooses its checkpoint by another ``selection_metric`` than its folder's
        training (its saved ``hyperparams.yaml``) did: it evaluates another epoch by design."""
        if "selection_metric" not in self.overrides:
            return False
        saved = self.output_folder / "hyperparams.yaml"
        trained_by = load_yaml_tolerant(saved).get("selection_metric") if saved.is_file() else None
        return trained_by is not None and str(trained_by) != str(self.overrides["selection_metric"])

    @staticmethod
    def _read(path: Path) -> Dict[str, Any]:
        """The JSON object of a results file ({} where it is unreadable)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _recorded(self, key: str) -> Any:
        """``key`` of the training run's results in this run's folder: its ``results.json``, or another of
        its results files (a bias sweep without 0); None where it has none."""
        files = sorted(self.output_folder.glob("results*.json"), key=lambda p: p.name != "results.json")
        for path in (p for p in files if not p.name.startswith("results_test_only")):
            return self._read(path).get(key)
        return None

    def published_folder(self, grid_root: Path, destination: Path) -> Path:
        """Where :func:`publish_run` copies this run's result files."""
        return Path(destination) / self.output_folder.relative_to(grid_root)

    def published(self, grid_root: Path, destination: Path) -> bool:
        """Whether every results file of this run is already under ``destination`` (published by
        :func:`publish_run`, possibly on another machine whose ``grid_root`` is gone)."""
        target = self.published_folder(grid_root, destination)
        return all((target / p.name).exists() for p in self.results_files())

    @property
    def lock_name(self) -> str:
        """The lock file of this run in its folder: one per group, as the test-only runs of several
        groups may share a training run's folder and run side by side."""
        return f"grid-{self.group}.lock"

    def started(self) -> bool:
        """Whether an earlier launch left a checkpoint to resume from."""
        return any((self.output_folder / "save").glob("CKPT+*"))

    def progress(self) -> str:
        """Validated epochs of a training run so far, e.g. ``5/14``, and while it is unfinished the
        hours its remaining epochs take at its median epoch so far (``5/14, ~1.2 h left``; ``–`` for a
        test-only run)."""
        if self.test_only:
            return "–"
        history = read_history(self.output_folder)
        done = f"{len(history)}/{self.epochs if self.epochs is not None else '?'}"
        seconds = [row["epoch_s"] for row in history if isinstance(row.get("epoch_s"), (int, float))]
        if not seconds or self.epochs is None or len(history) >= self.epochs or self.complete():
            return done
        left_h = (self.epochs - len(history)) * statistics.median(seconds) / 3600
        return f"{done}, ~{left_h:.1f} h left"


def load_grid(path: str) -> GridSpec:
    """Read and check a grid file; raises :class:`GridError` when it is missing or malformed."""
    if not Path(path).is_file():
        raise GridError(f"grid file {path} does not exist")
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise GridError(f"grid file {path}: not valid YAML ({' '.join(str(err).split())})") from None
    except UnicodeDecodeError:
        raise GridError(f"grid file {path}: not UTF-8 text; give a YAML grid file") from None
    if not isinstance(data, dict):
        raise GridError(f"grid file {path}: must be a mapping with recipe, hparams and groups")
    missing = [k for k in ("recipe", "hparams", "groups") if k not in data]
    if missing:
        raise GridError(f"grid file {path} lacks {', '.join(missing)}")
    _check_shape(path, data)
    names = [g.get("name") for g in data["groups"]]
    if None in names or len(set(names)) != len(names):
        raise GridError(f"grid file {path}: every group needs a distinct name")
    for key in ("recipe", "hparams"):
        if not Path(str(data[key])).is_file():
            raise GridError(f"grid file {path}: {key} {data[key]} is not a file (paths are relative to the folder "
                            "the grid command runs in)")
    hparams_root = load_yaml_tolerant(data["hparams"]).get("experiment_root", "results")
    return GridSpec(recipe=data["recipe"], hparams=data["hparams"],
                    experiment_root=str(data.get("experiment_root") or hparams_root),
                    overrides=dict(data.get("overrides") or {}), groups=list(data["groups"]),
                    seeds=list(data.get("seeds", [1])), publish=data.get("publish"),
                    report_pool=list(data.get("report_pool") or []),
                    prepare=_prepare_steps(path, data.get("prepare") or []), path=path)


GRID_KEYS = {"recipe", "hparams", "groups", "overrides", "seeds", "publish", "prepare", "experiment_root", "report_pool"}
GROUP_KEYS = {"name", "vary", "set", "folder_of"}


def _check_shape(path: str, data: Dict[str, Any]) -> None:
    """:class:`GridError` unless ``groups`` is a list of mappings whose ``vary`` and ``set`` are mappings,
    ``overrides`` a mapping and ``seeds`` a list."""
    def fail(what: str) -> None:
        raise GridError(f"grid file {path}: {what} (see the grid file format in surprisal-cc grid --help)")

    unknown = sorted(set(data) - GRID_KEYS)
    if unknown:
        fail(f"unknown key(s) {unknown}: a grid file has {sorted(GRID_KEYS)}")
    if not isinstance(data["groups"], list) or not all(isinstance(g, dict) for g in data["groups"]):
        fail("groups must be a list of mappings (name, vary, set, folder_of)")
    for group in data["groups"]:
        unknown = sorted(set(group) - GROUP_KEYS)
        if unknown:
            fail(f"unknown key(s) {unknown} in group {group.get('name')!r}: a group has {sorted(GROUP_KEYS)}")
        for key in ("vary", "set"):
            if not isinstance(group.get(key) or {}, dict):
                fail(f"{key} of group {group.get('name')!r} must be a mapping of keys to values")
    if not isinstance(data.get("overrides") or {}, dict):
        fail("overrides must be a mapping of keys to values")
    seeds = data.get("seeds", [1])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                            for s in seeds):
        fail(f"seeds must be a non-empty list of whole numbers of at least 0, e.g. [1, 2, 3]; got {seeds!r}")
    names = {g.get("name") for g in data["groups"]}
    for group in data["groups"]:
        empty = [key for key, values in (group.get("vary") or {}).items() if isinstance(values, list) and not values]
        if empty:
            fail(f"vary {', '.join(empty)} of group {group.get('name')!r} is an empty list: the group would have no run")
        if "seed" in (group.get("set") or {}):
            fail(f"set: seed in group {group.get('name')!r}: the seeds come from the grid's seeds, or a group's "
                 "vary: {seed: [...]}")
        if group.get("folder_of") is not None and group["folder_of"] not in names:
            fail(f"folder_of {group['folder_of']!r} of group {group.get('name')!r} names no group of this grid")
    pool = data.get("report_pool") or []
    if not isinstance(pool, list) or not all(key in POOLABLE_KEYS for key in pool):
        wrong = sorted(map(str, set(pool) - set(POOLABLE_KEYS))) if isinstance(pool, list) else [repr(pool)]
        fail(f"report_pool {', '.join(wrong)}: it must be a list of keys of {', '.join(POOLABLE_KEYS)}, e.g. [apc]")
    if "debug" in set(data.get("overrides") or {}).union(*(set(g.get(k) or {}) for g in data["groups"]
                                                             for k in ("vary", "set"))):
        fail(f"debug: {DEBUG_REFUSED}")


DEBUG_REFUSED = ("a --debug run writes into <output_folder>-debug, where the grid does not look for its results; "
                 "run the recipe itself with --debug to check it")


def _prepare_steps(path: str, entries: Any) -> List[PrepareStep]:
    """The ``prepare`` list of grid file ``path``, checked."""
    if not isinstance(entries, list):
        raise GridError(f"grid file {path}: prepare must be a list of {{creates, command[, sha256]}}")
    steps = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry.get("creates") or not entry.get("command") \
                or not isinstance(entry["command"], list) or set(entry) - {"creates", "command", "sha256"}:
            raise GridError(f"grid file {path}: prepare[{i}] must be a mapping with creates (a path), command "
                            f"(a list of arguments) and optionally sha256; got {entry!r}")
        steps.append(PrepareStep(Path(str(entry["creates"])), [str(a) for a in entry["command"]],
                                 str(entry["sha256"]).lower() if entry.get("sha256") else None))
    return steps


def file_sha256(path: Path) -> str:
    """The SHA-256 digest of a file, in hexadecimal."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_path(value: Any) -> bool:
    """Whether a setting's value names a file or folder (has a ``/``)."""
    return isinstance(value, str) and "/" in value


def _both_files(stored: Any, requested: Any) -> bool:
    """Whether a run folder's setting and a grid's both name files that are there to be compared.

    Example
    -------
    >>> _both_files("surprisal_cc/__init__.py", "surprisal_cc/grid.py"), _both_files("moved/apc.pt", "surprisal_cc/grid.py")
    (True, False)
    """
    return _is_path(stored) and _is_path(requested) and Path(stored).is_file() and Path(requested).is_file()


def prepare_inputs(steps: Sequence[PrepareStep], dry_run: bool = False, log: Optional[IO[str]] = None) -> None:
    """Run the ``prepare`` steps whose file is missing, then check every pinned digest.

    Raises :class:`GridError` naming the step when its command fails, does not create its file, or
    the file's SHA-256 is not the pinned one. With ``dry_run`` the commands are printed, not run.

    Example
    -------
    >>> import sys, tempfile
    >>> out = Path(tempfile.mkdtemp()) / "made.txt"
    >>> step = PrepareStep(out, ["python", "-c", f"open({str(out)!r}, 'w').write('x')"],
    ...                    sha256="2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881")
    >>> prepare_inputs([step], log=io.StringIO()); out.read_text()
    'x'
    """
    log = log or sys.stdout
    for step in steps:
        if not step.creates.exists():
            if dry_run:
                print(f"# prepare: {shlex.join(step.argv)}", file=log)
                continue
            print(f"[prepare] {step.creates}: {shlex.join(step.argv)}", file=log, flush=True)
            step.creates.parent.mkdir(parents=True, exist_ok=True)
            step_log = step.creates.with_name(step.creates.name + ".log")
            with open(step_log, "w", encoding="utf-8") as handle:
                code = subprocess.run(step.argv, stdout=handle, stderr=subprocess.STDOUT).returncode
            if code != 0 or not step.creates.exists():
                if step.creates.exists():  # what a failed command left must not pass for its output next time
                    aside = step.creates.with_name(step.creates.name + ".failed")
                    step.creates.replace(aside)
                    detail = f", its partial file moved to {aside}"
                else:
                    detail = ", file not created"
                raise GridError(f"prepare step for {step.creates} failed (exit status {code}{detail}); see {step_log}")
        if step.sha256 is not None and step.creates.exists():
            found = file_sha256(step.creates)
            if found != step.sha256:
                raise GridError(f"{step.creates} has SHA-256 {found}, but the grid file pins {step.sha256}: runs on "
                                f"it would not be seeds of the configuration published so far. Delete the file to "
                                f"make it again, or remove sha256 from the grid file's prepare step to train on it.")


# settings that name a file a run reads before anything else, and the script that makes it; a grid
# checks those its runs are given before launching any (a missing one would fail every run, each after
# its data preparation)
INPUT_FILE_MAKERS = {"apc_path": "recipes/LibriSpeech/pretrain_apc.py",
                     "relabelled_train": "recipes/MiniLibriSpeech/realign_labels.py"}


def check_input_files(runs: Sequence["Run"], steps: Sequence[PrepareStep], grid_file: str) -> List[str]:
    """The input files (:data:`INPUT_FILE_MAKERS`) that ``runs`` are given and that neither exist nor
    are made by one of the ``prepare`` steps, one line each naming the key, the file and what to do.

    Example
    -------
    >>> run = Run("g", "g/seed1", Path("out"), {"apc_path": "missing/apc.pt"}, [])
    >>> check_input_files([run], [], "grid.yaml")[0].split(":")[0]
    'apc_path missing/apc.pt (grid.yaml, 1 run)'
    >>> check_input_files([run], [PrepareStep(Path("missing/apc.pt"), ["true"])], "grid.yaml")
    []
    """
    made = {step.creates for step in steps}
    missing: Dict[Tuple[str, str], int] = {}
    for run in runs:
        for key in INPUT_FILE_MAKERS:
            value = run.overrides.get(key)
            if _is_path(value) and not Path(value).exists() and Path(value) not in made:
                missing[(key, value)] = missing.get((key, value), 0) + 1
    return [f"{key} {value} ({grid_file}, {count} run{'s' if count > 1 else ''}): no such file; make it first "
            f"({INPUT_FILE_MAKERS[key]}) or add a prepare step that creates it" for (key, value), count in missing.items()]


# The options of SpeechBrain's command line (speechbrain.utils.run_opts.RunOptions), which a recipe parses
# (surprisal_cc.run_settings.parse_arguments) before it passes the other --key=value options to its hparams
# file as overrides: a grid key that names one is a run option. The flags take no value.
SPEECHBRAIN_FLAGS = frozenset({
    "auto_mix_prec", "bfloat16_mix_prec", "compile", "compile_using_dynamic_shape_tracing", "compile_using_fullgraph",
    "data_parallel_backend", "debug", "debug_persistently", "find_unused_parameters", "jit", "noprogressbar",
    "profile_training", "remove_vector_weight_decay", "skip_nonfinite_grads", "test_only", "tqdm_colored_bar"})
SPEECHBRAIN_OPTIONS = SPEECHBRAIN_FLAGS | {
    "ckpt_interval_minutes", "ckpt_interval_steps", "compile_mode", "compile_module_keys", "debug_batches",
    "debug_epochs", "device", "distributed_backend", "eval_precision", "grad_accumulation_factor", "jit_module_keys",
    "log_config", "max_grad_norm", "nonfinite_patience", "optimizer_step_limit", "precision", "profile_steps",
    "profile_warmup"}


def setting_problem(key: str, value: Any, hparams_keys: Collection[str], hparams_file: str = "the hparams file"
                    ) -> Optional[str]:
    """Why a recipe run would refuse the setting ``key: value`` at launch, or None where it takes it.

    A run takes one of SpeechBrain's options (:data:`SPEECHBRAIN_OPTIONS`) or a top-level key of its hparams
    file (``hparams_keys``; hyperpyyaml refuses an override of any other key, and applies a mapping value
    to the key's mapping as it is). A key that begins an option's name is taken for that option (an
    abbreviation, to SpeechBrain's parser), even where the file has it; ``precision: auto`` is an override
    of the file's ``precision`` (SpeechBrain's option takes fp32, fp16 or bf16).

    Example
    -------
    >>> keys = {"lr", "controller", "seed"}
    >>> [setting_problem(k, v, keys) for k, v in (("lr", 0.1), ("device", "cuda:0"), ("test_only", True))]
    [None, None, None]
    >>> setting_problem("contoller", "random", keys, "h.yaml")
    'contoller is not a key of h.yaml nor a SpeechBrain option (did you mean controller?)'
    >>> setting_problem("dev", "cpu", keys)
    "dev: SpeechBrain's command line takes --dev for its option --device: write the option's full name"
    >>> setting_problem("precision", "auto", keys, "h.yaml")
    'precision: auto is an override of the key precision, which h.yaml lacks'
    """
    key = str(key)
    if key == "precision" and str(value).lower() == "auto":
        return None if key in hparams_keys else f"precision: auto is an override of the key precision, which " \
                                                f"{hparams_file} lacks"
    if key in SPEECHBRAIN_OPTIONS:
        return None
    taken_for = sorted(option for option in SPEECHBRAIN_OPTIONS if option.startswith(key))
    if taken_for:
        return (f"{key}: SpeechBrain's command line takes --{key} for its option{'s' if len(taken_for) > 1 else ''} "
                f"{' or '.join('--' + o for o in taken_for)}: write the option's full name")
    if key in hparams_keys:
        return None
    close = difflib.get_close_matches(key, sorted(set(hparams_keys) | SPEECHBRAIN_OPTIONS), n=1)
    return (f"{key} is not a key of {hparams_file} nor a SpeechBrain option"
            + (f" (did you mean {close[0]}?)" if close else ""))


# keys the grid passes to every run: its hparams file must have them
PASSED_KEYS = ("experiment_root", "seed", "output_folder")


def refused_settings(spec: GridSpec, extra_settings: Dict[str, Any], hparams_keys: Collection[str]) -> List[str]:
    """One line for each setting of the grid that its recipe would refuse at launch (:func:`setting_problem`),
    naming where it is set: ``overrides``, ``group 'NAME' set`` or ``vary``, or ``command line``
    (``extra_settings``); and one for each key the grid passes to every run (:data:`PASSED_KEYS`) that the
    hparams file lacks.

    Example
    -------
    >>> spec = GridSpec("r.py", "h.yaml", "exp", {"lr": 0.1}, [{"name": "g", "vary": {"contoller": ["random"]}}])
    >>> refused_settings(spec, {"device": "cpu"}, {"lr", "controller", "seed", "experiment_root", "output_folder"})
    ["group 'g' vary: contoller is not a key of h.yaml nor a SpeechBrain option (did you mean controller?)"]
    """
    places = [("overrides", spec.overrides, False)]
    places += [(f"group {group['name']!r} {part}", group.get(part) or {}, part == "vary")
               for group in spec.groups for part in ("set", "vary")]
    places.append(("command line", extra_settings, False))
    lines = []
    for where, settings, varied in places:
        for key, value in settings.items():
            values = value if varied and isinstance(value, (list, tuple)) else [value]
            problem = next(filter(None, (setting_problem(key, v, hparams_keys, spec.hparams) for v in values)), None)
            if problem:
                lines.append(f"{where}: {problem}")
    lines += [f"{key} is not a key of {spec.hparams}, and the grid passes it to every run"
              for key in PASSED_KEYS if key not in hparams_keys]
    return lines


def cli_option(key: str, value: Any) -> str:
    """``--key=value``, or a bare ``--key`` for SpeechBrain's flag options set to True."""
    if key in SPEECHBRAIN_FLAGS:
        if value is not True:
            raise ValueError(f"grid key {key!r} is a SpeechBrain flag: set it to True or leave it out")
        return f"--{key}"
    return f"--{key}={override_value(value)}"


def override_value(value: Any) -> str:
    """A value as hyperpyyaml reads it back from ``--key=value``."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(override_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {override_value(v)}" for k, v in value.items()) + "}"
    return "null" if value is None else str(value)


def _folder_part(key: str, value: Any) -> str:
    """``key-value`` with only characters that survive SpeechBrain's ``--key=value`` parsing ('=' and
    ',' do not: the folder SpeechBrain creates would differ from the one the grid checks)."""
    return f"{key}-{re.sub(r'[^A-Za-z0-9_.-]', '_', override_value(value))}"


def results_files(output_folder: Path, bias_shifts: Optional[Sequence[float]] = None,
                  test_only: bool = False, tag: str = "") -> List[Path]:
    """The results files a run writes: ``results.json`` for shift 0, ``results_bias+2.json`` ...
    (``results_test_only<tag>*.json`` for a ``--test_only`` evaluation; ``tag``: its
    :func:`~surprisal_cc.run_folder.evaluation_tag`)."""
    shifts = bias_shifts if bias_shifts is not None else [0.0]
    return [output_folder / results_file_name(s, test_only, tag=tag) for s in shifts]


def expand(spec: GridSpec, extra: Sequence[str] = (), log: Optional[IO[str]] = None) -> List[Run]:
    """All runs of a grid, duplicates dropped (reported on ``log``); ``extra`` = ``--key=value``
    settings of every run, replacing the grid file's (not part of folder names; a key the grid varies
    is a :class:`GridError`). A setting that the recipe would refuse at launch (:func:`refused_settings`:
    a misspelt key) is a :class:`GridError` naming each one."""
    log = log or sys.stdout
    root = Path(spec.experiment_root)
    extra_settings = _extra_settings(spec, extra)
    grid_keys = set(spec.overrides) | {k for g in spec.groups for k in [*(g.get("vary") or {}), *(g.get("set") or {})]} \
        | set(extra_settings)
    defaults = load_yaml_tolerant(spec.hparams)
    _check_settings(spec, extra_settings, defaults)
    runs: List[Run] = []
    seen: Dict[Tuple, str] = {}
    trained: Dict[Path, Tuple[str, Tuple]] = {}  # folder -> the training run that writes it
    evaluated: Dict[Path, Tuple[str, Tuple]] = {}  # a test-only run's results file -> the run that writes it
    for group in spec.groups:
        vary = {k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in (group.get("vary") or {}).items()}
        vary.setdefault("seed", spec.seeds)
        keys = sorted(k for k in vary if k != "seed")
        # seed-major: every configuration's first seed runs before any second seed
        for seed, *values in itertools.product(vary["seed"], *(vary[k] for k in keys)):
            point = dict(zip(keys, values))
            overrides = {"experiment_root": spec.experiment_root, **spec.overrides, **(group.get("set") or {}),
                         **point, "seed": seed, **extra_settings}
            parts = "+".join(_folder_part(k, point[k]) for k in keys) or "default"
            folder = root / "grid" / group.get("folder_of", group["name"]) / parts / f"seed{seed}"
            name = f"{group['name']}/{parts}/seed{seed}"
            effective = tuple(sorted((k, override_value(overrides.get(k, defaults.get(k)))) for k in grid_keys | {"seed"}))
            if effective in seen:
                print(f"# {name}: same configuration as {seen[effective]}, not run twice", file=log)
                continue
            seen[effective] = name
            if not overrides.get("test_only"):
                if folder in trained and trained[folder][1] != effective:
                    raise GridError(f"grid runs {trained[folder][0]} and {name} train different configurations in "
                                    f"one folder ({folder}): vary the keys that tell them apart, or drop folder_of")
                trained.setdefault(folder, (name, effective))
            try:
                options = [cli_option(k, v) for k, v in overrides.items()]
            except ValueError as err:
                raise GridError(f"group {group['name']}: {err}") from None
            command = [sys.executable, spec.recipe, spec.hparams, *options, f"--output_folder={folder}"]
            epochs = overrides.get("number_of_epochs", defaults.get("number_of_epochs"))
            if epochs is not None and (isinstance(epochs, bool) or not str(epochs).isdigit() or int(epochs) < 1):
                raise GridError(f"group {group['name']}: number_of_epochs must be a whole number of at least 1, "
                                f"got {epochs!r}")
            run = Run(group["name"], name, folder, overrides, command, int(epochs) if epochs is not None else None)
            if run.test_only:  # two evaluations into one results file: the second would be taken for the first
                settings = tuple(item for item in effective if item[0] != "test_bias_shifts")
                for path in run.results_files():
                    first, first_settings = evaluated.setdefault(path, (name, settings))
                    if first_settings != settings:
                        raise GridError(f"grid runs {first} and {name} evaluate with different settings into one "
                                        f"results file ({path}): vary a key that tells their files apart (a test "
                                        "time condition), or drop one")
            runs.append(run)
    return runs


def _check_settings(spec: GridSpec, extra_settings: Dict[str, Any], defaults: Dict[str, Any]) -> None:
    """A :class:`GridError` in one line naming the grid file and each setting its recipe would refuse at
    launch (:func:`refused_settings`; ``defaults``: the hparams file's top-level mapping)."""
    where = f"grid file {spec.path}" if spec.path else f"grid of {spec.hparams}"
    if not defaults:
        raise GridError(f"{where}: hparams {spec.hparams} is not a YAML mapping of settings, so no run would start "
                        "(run its recipe on it to see why)")
    refused = refused_settings(spec, extra_settings, defaults)
    if refused:
        raise GridError(f"{where}: {'; '.join(refused)} (a run given such a setting fails at launch)")


def _extra_settings(spec: GridSpec, extra: Sequence[str]) -> Dict[str, Any]:
    """The command line's ``--key=value`` settings of every run, values read as YAML (as SpeechBrain
    reads them); a :class:`GridError` for a key that names the runs' folders.

    Example
    -------
    >>> spec = GridSpec("r.py", "h.yaml", "exp", {}, [{"name": "g", "vary": {"controller": ["random"]}}])
    >>> _extra_settings(spec, ["--device=cuda:0", "--lr=0.01", "--data_folder=[a, b]"])
    {'device': 'cuda:0', 'lr': 0.01, 'data_folder': ['a', 'b']}
    >>> _extra_settings(spec, ["--controller=surprisal"])
    Traceback (most recent call last):
    ...
    surprisal_cc.grid.GridError: --controller: the grid varies it (it names the runs' folders): change the grid file instead
    """
    settings: Dict[str, Any] = {}
    varied = {"seed", "output_folder"} | {k for g in spec.groups for k in (g.get("vary") or {})}
    for option in extra:
        key, text = option[2:].split("=", 1)
        if key in varied:
            raise GridError(f"--{key}: the grid varies it (it names the runs' folders): change the grid file instead")
        try:
            settings[key] = yaml.safe_load(text) if text else text
        except yaml.YAMLError:
            settings[key] = text
    return settings


def _threads(jobs: int, threads: Optional[int] = None) -> int:
    """Torch threads per run: ``threads``, else the cores divided among the ``jobs``."""
    if threads:
        return threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, jobs))


def _env(jobs: int, threads: Optional[int] = None) -> Dict[str, str]:
    n = str(_threads(jobs, threads))
    return {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}


PUBLISHED_FILES = ("results*.json", "history.jsonl", "calibration.json", "hyperparams.yaml")

def publish_run(run: Run, grid_root: Path, destination: Path) -> List[Path]:
    """Copy a finished run's small result files (never checkpoints) to the same relative folder
    under ``destination``, so that they can be committed the moment the run ends."""
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
            copied.append(target / path.name)
    return copied


def _process_identity(pid: int) -> Optional[str]:
    """``pid`` and its start time (so that a reused PID is told apart), or None when no such process runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    try:  # Linux: field 22 of /proc/PID/stat, after the parenthesised command name
        started = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        started = "?"
    return f"{pid} {started}"


def acquire_run_lock(folder: Path, name: str = "grid.lock") -> Optional[str]:
    """Take the lock file ``folder/name`` for this process; returns None when taken, else the live holder
    (``"PID START"``), another grid process training the same run. A lock whose process has ended
    (a machine stopped mid-run) is taken over.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first = acquire_run_lock(Path(folder))
    ...     again = acquire_run_lock(Path(folder))  # held by this very process: refused
    ...     release_run_lock(Path(folder))
    ...     after = acquire_run_lock(Path(folder))
    >>> first is None, again is not None, after is None
    (True, True, True)
    """
    lock = Path(folder) / name
    identity = _process_identity(os.getpid()) or str(os.getpid())
    # the holder is written beside the lock and linked into place: a lock file is never seen empty
    # (another grid would take an empty one for stale), and linking fails where the lock exists
    fd, written = tempfile.mkstemp(dir=lock.parent, prefix=f".{name}.")
    mine = Path(written)
    os.fchmod(fd, 0o644)  # other users' grids read the holder (mkstemp's file is private)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(identity)
    try:
        for _ in range(2):
            try:
                _place_lock(lock, mine, identity)
                return None
            except FileExistsError:
                holder = lock_holder(lock.parent, name)
                if holder is not None:
                    return holder
                lock.unlink(missing_ok=True)  # stale: its process has ended
        return lock.read_text(encoding="utf-8").strip() if lock.exists() else "?"
    finally:
        mine.unlink(missing_ok=True)


def lock_holder(folder: Path, name: str = "grid.lock") -> Optional[str]:
    """The live grid process (``"PID START"``) that holds the lock file ``folder/name``, without taking
    it; None when there is no lock or its process has ended.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     free = lock_holder(Path(folder))
    ...     _ = acquire_run_lock(Path(folder))
    ...     held = lock_holder(Path(folder))
    >>> free is None, held.split()[0] == str(os.getpid())
    (True, True)
    """
    try:
        holder = (Path(folder) / name).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    pid = holder.split()[0] if holder else ""
    return holder if pid.isdigit() and _process_identity(int(pid)) == holder else None


def _place_lock(lock: Path, written: Path, identity: str) -> None:
    """Link ``written`` (the holder) to ``lock``; on a file system without hard links, create ``lock``
    and write ``identity`` into it. FileExistsError where the lock exists."""
    try:
        os.link(written, lock)
    except FileExistsError:
        raise
    except OSError:  # e.g. vfat, some FUSE and SMB mounts
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(identity)


def release_run_lock(folder: Path, name: str = "grid.lock") -> None:
    """Remove the lock :func:`acquire_run_lock` took."""
    (Path(folder) / name).unlink(missing_ok=True)


def execute(runs: Sequence[Run], jobs: int = 1, dry_run: bool = False, poll_s: float = 0.5,
            log: Optional[IO[str]] = None, publish: Optional[Tuple[Path, Path]] = None,
            threads: Optional[int] = None, on_published: Optional[Callable[[], Any]] = None
            ) -> Dict[str, Tuple[str, float]]:
    """Run what is not complete, ``jobs`` at a time (``threads`` torch threads each; default: the
    cores divided among the jobs); returns name -> (status, seconds), status one of done / skipped /
    published / failed / blocked / conflict / elsewhere / dry-run / waits ("conflict": its folder holds a
    finished run with other settings (:meth:`Run.changed_settings`); "elsewhere": another grid process holds the
    run's lock file (:attr:`Run.lock_name`), i.e. is running it now; a dry run says so too). With ``publish = (grid_root, destination)``, each run's
    result files are copied there when it is done (or found complete), and a run whose results are
    there already is not run again ("published": finished on a machine whose ``grid_root`` is gone;
    a test-only run of its folder is "blocked", as it needs the checkpoint that stayed there)."""
    log = log or sys.stdout
    status, pending, waiting = _triage(runs, dry_run, publish, log)
    trainers = _trainers(runs)
    if dry_run:
        return _print_dry_run(runs, pending, status, waiting, jobs, threads, log)
    running: Dict[str, Tuple[Run, subprocess.Popen, IO[str], float]] = {}
    env = _env(jobs, threads)
    while pending or running:
        _start_ready(pending, running, status, trainers, jobs, env, publish, log)
        _reap_finished(running, status, publish, on_published, log)
        if running:
            time.sleep(poll_s)
    return status


def _triage(runs: Sequence[Run], dry_run: bool, publish: Optional[Tuple[Path, Path]], log: IO[str]
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
        if changed:  # another grid's finished run in this folder: not a result of this one
            status[run.name] = ("conflict", 0.0)
            print(f"[conflict] {run.name}: {run.output_folder} holds a finished run made with other settings "
                  f"({'; '.join(changed)}): move that folder away, or give this grid another experiment_root",
                  file=log, flush=True)
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


def _trainers(runs: Sequence[Run]) -> Dict[str, List[str]]:
    """For each test-only run, the runs of the same grid that train its folder (it waits for them)."""
    return {run.name: [r.name for r in runs if not r.test_only and r.output_folder == run.output_folder]
            for run in runs if run.test_only}


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
    return {**{r.name: ("elsewhere" if lock_holder(r.output_folder, r.lock_name)
                        else "waits" if r.name in waiting else "dry-run", 0.0) for r in pending}, **status}


def _start_ready(pending: List[Run], running: Dict[str, Tuple[Run, subprocess.Popen, IO[str], float]],
                 status: Dict[str, Tuple[str, float]], trainers: Dict[str, List[str]], jobs: int,
                 env: Dict[str, str], publish: Optional[Tuple[Path, Path]], log: IO[str]) -> None:
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
        elif run.test_only and not deps and not run.started():  # its training run is not in this selection
            pending.remove(run)
            status[run.name] = ("blocked", 0.0)
            print(f"[blocked] {run.name}: no checkpoint in {run.output_folder / 'save'} to evaluate "
                  "(train its run first, or select it too)", file=log, flush=True)
        elif any(s in ("failed", "blocked", "published", "elsewhere", "conflict") for s in deps):
            pending.remove(run)
            status[run.name] = ("blocked", 0.0)
        elif len(running) < jobs and all(s in ("done", "skipped") for s in deps):
            pending.remove(run)
            _try_start(run, running, status, env, log)


def _still_current(run: Run, trained_now: bool) -> bool:
    """Whether a complete test-only run's results still evaluate its folder's checkpoint: so recorded, or,
    where the files do not record it, unless its training ran in this grid command (``trained_now``)."""
    current = run.evaluates_trained_checkpoint()
    return current if current is not None else not trained_now


def _try_start(run: Run, running: Dict[str, Tuple[Run, subprocess.Popen, IO[str], float]],
               status: Dict[str, Tuple[str, float]], env: Dict[str, str], log: IO[str]) -> None:
    """Start ``run`` (its output to ``grid.log`` in its folder) under its lock file, or mark it
    "elsewhere" where another grid process holds that lock."""
    run.output_folder.mkdir(parents=True, exist_ok=True)
    holder = acquire_run_lock(run.output_folder, run.lock_name)
    if holder is not None:
        status[run.name] = ("elsewhere", 0.0)
        print(f"[elsewhere] {run.name}: another grid process (PID {holder.split()[0]}) is running it",
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
                   on_published: Optional[Callable[[], Any]], log: IO[str]) -> None:
    """Record the runs whose process has ended ("done" if complete, else "failed"), release their
    locks and publish the done ones (in place)."""
    for name, (run, proc, handle, start) in list(running.items()):
        if proc.poll() is None:
            continue
        handle.close()
        release_run_lock(run.output_folder, run.lock_name)
        del running[name]
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


def run_grid(args: argparse.Namespace, overrides: Sequence[str] = ()) -> int:
    """Run the grid of a command line parsed with :func:`add_arguments`, then write its report.

    Arguments
    ---------
    args : argparse.Namespace
        The parsed options (``grid``, ``dry_run``, ``jobs``, ``only``, ``no_report``).
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
    every = expand(spec, overrides)
    unmatched = [s for s in args.only or [] if not any(selects(s, r.name) for r in every)]
    if unmatched:  # each --only names some run: a misspelt one would leave its runs out unnoticed
        raise GridError(f"--only {' '.join(unmatched)}: no run of {args.grid} has that in its name "
                        "(group/key-value+.../seedN; --dry-run without --only lists them)")
    runs = [r for r in every if not args.only or any(selects(s, r.name) for s in args.only)]
    publish = (Path(spec.experiment_root) / "grid", Path(spec.publish)) if spec.publish else None
    to_run = [r for r in runs if not r.complete() and not (publish is not None and r.published(*publish))]
    if to_run:
        missing = check_input_files(to_run, spec.prepare, args.grid)
        if missing and not args.dry_run:
            raise GridError("; ".join(missing))
        for line in missing:  # a dry run lists them before its commands
            print(f"# missing: {line}")
        prepare_inputs(spec.prepare, dry_run=args.dry_run)
    report_published = (functools.partial(write_grid_report, publish[1], publish[1] / "report", spec.report_pool)
                        if publish is not None and not args.no_report else None)
    status = execute(runs, jobs=max(1, args.jobs), dry_run=args.dry_run, publish=publish,
                     threads=args.threads, on_published=report_published)
    print(format_summary(runs, status))
    if not args.dry_run and not args.no_report:
        out = Path(spec.experiment_root) / "report"
        figures = write_grid_report(Path(spec.experiment_root) / "grid", out, spec.report_pool)
        print(f"report: {out / 'report.md'} ({len(figures)} figures)")
        if report_published is not None:
            report_published()
    return exit_status(status, dry_run=args.dry_run)


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
    not_here = {"blocked", "conflict"} | (set() if dry_run else {"elsewhere"})
    return 1 if "failed" in states else 3 if states & not_here else 0


def write_grid_report(results_root: Path, out: Path, pool: Sequence[str] = ()) -> List[Path]:
    """Tables (``report.md``, Markdown and CSV) and figures of the results under ``results_root``,
    written to ``out``, pooled over the configuration keys ``pool``; returns the figures."""
    from .plots import make_all_plots
    from .report import write_report

    write_report(results_root, out, pool=pool)
    return make_all_plots(results_root, out, pool=pool)
