"""Grid files: a grid YAML read and checked (:func:`load_grid`), expanded into its recipe runs
(:func:`expand`, one :class:`Run` each: its command, folder and results files, and how the training saved
in its folder stands to it), the settings of those runs checked against what their recipe takes
(:func:`~surprisal_cc.experiments.grid_settings.refused_settings`), and the inputs every run needs made before the first launch (:func:`prepare_inputs`,
:func:`check_input_files`). The grid file format and the ``surprisal-cc grid`` command, which launches,
resumes and publishes these runs, are :mod:`surprisal_cc.experiments.grid`; a run's lock file is
:mod:`surprisal_cc.experiments.run_locks`.
"""
from __future__ import annotations

import functools
import io
import itertools
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Collection, Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import yaml

from surprisal_cc.checks import is_number
from surprisal_cc.config import TaggedMapping, expand_hparams, load_yaml_tolerant, parse_yaml_tolerant
from surprisal_cc.data.manifest import file_sha256
from surprisal_cc.training.changed_settings import KeyPath, argument_references, changed_training_settings
from surprisal_cc.training.run_folder import BUILT_IN_CONTROLLERS, BUILT_IN_ENCODERS, evaluation_tag, read_history, results_file_name
from surprisal_cc.experiments.grid_settings import PASSED_KEYS, SPEECHBRAIN_FLAGS, SPEECHBRAIN_OPTIONS, refused_settings
from surprisal_cc.experiments.run_labels import POOLABLE_KEYS

__all__ = ["Run", "GridSpec", "GridError", "PrepareStep", "load_grid", "prepare_inputs", "check_input_files",
           "expand", "override_value", "results_files", "recipe_overrides",
           "unused_setting", "compared_settings"]


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
    slurm: Dict[str, Any] = field(default_factory=dict)  # cluster settings of --launcher slurm (experiments.slurm)


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
    hparams: Optional[str] = None  # the hparams file of its recipe
    hparams_overrides: str = ""   # what its recipe applies to that file: "key: value" lines (recipe_overrides)

    @property
    def test_only(self) -> bool:
        return bool(self.overrides.get("test_only"))

    @property
    def evaluation_tag(self) -> str:
        """What names a test-only run's files apart (:func:`~surprisal_cc.training.run_folder.evaluation_tag`)."""
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

        * ``changes``: one line per training setting of its ``hyperparams.yaml`` that differs from this
          run's configuration now (:meth:`current_settings`: the hparams file as it is now, with this run's
          overrides; the overrides alone where that is not known), as :func:`compared_settings` compares
          them (settings a resumed run may change, such as folders, threads and test-time settings, may
          differ, and those of parts of the recipe the run does not use; files are not compared by name,
          as a grid may move them: a results file records its APC by fingerprint; two files that are
          both still there are compared by content; the arguments of objects where the file writes them
          out, as a resumed run compares them), and one if it was trained for more epochs than this run
          asks;
        * ``trains_on``: with no such change, whether it was trained for fewer epochs than asked (it
          resumes and trains on).

        A test-only run evaluates what its folder holds: more epochs than it asks are a change (the
        folder holds another grid's training), fewer are its training still to come. Nothing for a
        folder without ``hyperparams.yaml``."""
        saved = self.output_folder / "hyperparams.yaml"
        if not saved.is_file():
            return SavedTraining([], False)
        stored = load_yaml_tolerant(saved)
        current = self.current_settings()
        references = self._object_references(current) if current else None
        current = current or {k: v for k, v in self.overrides.items() if k != "test_only"}
        if stored.get("precision") == "auto" and str(current.get("precision")).lower() != "auto":
            stored["precision"] = self._recorded("precision") or "auto"  # what it resolved to, as its results record
        changed = changed_training_settings(stored, compared_settings(stored, current), references)
        try:
            trained = None if self.epochs is None else int(stored["number_of_epochs"])
        except (KeyError, TypeError, ValueError):
            trained = None
        if trained is not None and trained > self.epochs:
            changed.append(f"number_of_epochs: trained with {trained}, requested {self.epochs}")
        # a training that went on and was cut off has the new number_of_epochs in its hyperparams.yaml
        # and its earlier results: its history says how far it got
        validated = len(read_history(self.output_folder)) if trained is not None else 0
        return SavedTraining(changed, not changed and not self.test_only and trained is not None
                             and (trained < self.epochs or 0 < validated < self.epochs))

    def current_settings(self) -> Dict[str, Any]:
        """The configuration this run's recipe would save in its folder's ``hyperparams.yaml`` now: its
        hparams file (root-level include written out) with :attr:`hparams_overrides` applied and references
        resolved, nothing built, read as plain data (objects as the mappings of their arguments); {} without
        an hparams file, or where file and overrides do not resolve (the recipe names the problem at launch)."""
        if self.hparams is None:
            return {}
        from hyperpyyaml import resolve_references

        try:
            text = resolve_references(io.StringIO(expand_hparams(self.hparams)), self.hparams_overrides or None)
        except Exception:  # noqa: BLE001 (any error of the file or the overrides: the launch names it)
            return {}
        return parse_yaml_tolerant(text.getvalue())

    def _object_references(self, current: Mapping[str, Any]) -> FrozenSet[KeyPath]:
        """Where this run's hparams file gives the arguments of its objects (``current``'s tagged settings) as
        references (:func:`~surprisal_cc.training.changed_settings.argument_references`), with this run's overrides of
        those objects: the same for each run of a grid that overrides none (worked out once)."""
        objects = {key: value for key, value in self.overrides.items() if isinstance(current.get(key), TaggedMapping)}
        return _argument_references(expand_hparams(self.hparams),
                                    "\n".join(f"{key}: {override_value(value)}" for key, value in objects.items()))

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

    def training_results(self) -> List[Path]:
        """The results files of the training run of this run's folder (``results.json`` first, then those of
        a bias sweep without 0), which it writes once it has trained and tested: none while it trains, or
        where it was cut off."""
        files = sorted(self.output_folder.glob("results*.json"), key=lambda p: (p.name != "results.json", p.name))
        return [p for p in files if not p.name.startswith("results_test_only")]

    def _recorded(self, key: str) -> Any:
        """``key`` of the training run's results in this run's folder (:meth:`training_results`); None where
        it has none."""
        for path in self.training_results():
            return self._read(path).get(key)
        return None

    def published_folder(self, grid_root: Path, destination: Path) -> Path:
        """Where :func:`~surprisal_cc.experiments.grid.publish_run` copies this run's result files."""
        return Path(destination) / self.output_folder.relative_to(grid_root)

    def published(self, grid_root: Path, destination: Path) -> bool:
        """Whether every results file of this run is already under ``destination`` (published by
        :func:`~surprisal_cc.experiments.grid.publish_run`, possibly on another machine whose ``grid_root`` is gone)."""
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

    def training_progress(self) -> str:
        """Validated epochs of the training in this run's folder out of those this run asks for, e.g. ``17/30``."""
        return self._epochs_of(len(read_history(self.output_folder)))

    def _epochs_of(self, validated: int) -> str:
        """``validated`` epochs out of those this run asks for, e.g. ``17/30``."""
        return f"{validated}/{self.epochs if self.epochs is not None else '?'}"

    def progress(self) -> str:
        """Validated epochs of a training run so far, e.g. ``5/14``, and while it is unfinished the
        hours its remaining epochs take at its median epoch so far (``5/14, ~1.2 h left``; ``–`` for a
        test-only run)."""
        if self.test_only:
            return "–"
        history = read_history(self.output_folder)
        done = self._epochs_of(len(history))
        seconds = [row["epoch_s"] for row in history if isinstance(row.get("epoch_s"), (int, float))]
        if not seconds or self.epochs is None or len(history) >= self.epochs or self.complete():
            return done
        left_h = (self.epochs - len(history)) * statistics.median(seconds) / 3600
        return f"{done}, ~{left_h:.1f} h left"


@functools.lru_cache(maxsize=16)
def _argument_references(text: str, overrides: str) -> FrozenSet[KeyPath]:
    """:func:`~surprisal_cc.training.changed_settings.argument_references` of hparams ``text`` with YAML ``overrides``,
    kept for the next run of a grid with the same ones."""
    return argument_references(text, overrides or None)


def recipe_overrides(settings: Dict[str, Any], hparams_keys: Collection[str], output_folder: Path) -> str:
    """The overrides a recipe run applies to its hparams file, as YAML lines, from the settings a grid
    passes it as ``--key=value`` options: SpeechBrain takes its own options as run options, except those
    that are also keys of the file (``hparams_keys``; ``precision``, ``max_grad_norm``, ...), which it
    passes on as overrides too (:func:`~surprisal_cc.training.command_line.run_option_overrides`), and
    ``output_folder`` comes last.

    Example
    -------
    >>> print(recipe_overrides({"lr": 0.1, "device": "cpu", "test_only": True, "precision": "fp32",
    ...                         "data_folder": ["a", "b"]}, {"lr", "precision", "data_folder"}, Path("exp/run")))
    lr: 0.1
    precision: fp32
    data_folder: [a, b]
    output_folder: exp/run
    """
    lines = [f"{key}: {override_value(value)}" for key, value in settings.items()
             if key not in SPEECHBRAIN_OPTIONS or key in hparams_keys]
    return "\n".join([*lines, f"output_folder: {output_folder}"])


def unused_setting(key: str, settings: Mapping[str, Any]) -> bool:
    """Whether the setting ``key`` configures a part of the recipe that a run with ``settings`` does not
    use: another built-in encoder's or controller's settings (``act_*``, ``pondernet_*``, ``learned_*``,
    ``random_*``: :data:`~surprisal_cc.training.run_folder.BUILT_IN_ENCODERS`, ``BUILT_IN_CONTROLLERS``), or the APC
    pretraining settings (``apc_*``) of a run that reads its APC from a file (``apc_path``).

    Example
    -------
    >>> settings = {"encoder": "conditional", "controller": "surprisal", "apc_path": "apc.pt"}
    >>> [unused_setting(k, settings) for k in ("act_max_steps", "learned_penalty", "apc_epochs", "apc_path", "lr")]
    [True, True, True, False, False]
    >>> unused_setting("learned_penalty", {"controller": "learned"}), unused_setting("apc_epochs", {"apc_path": None})
    (False, False)
    """
    for names, own in ((BUILT_IN_ENCODERS, "encoder"), (BUILT_IN_CONTROLLERS, "controller")):
        if any(key.startswith(f"{name}_") and name != settings.get(own) for name in names):
            return True
    return key.startswith("apc_") and key != "apc_path" and settings.get("apc_path") not in (None, "")


def compared_settings(stored: Mapping[str, Any], current: Mapping[str, Any]) -> Dict[str, Any]:
    """The settings of ``current`` (a run's configuration now) that a grid compares with ``stored`` (those
    the finished run in its folder was made with), for
    :func:`~surprisal_cc.training.changed_settings.changed_training_settings`, which compares the settings both hold,
    leaving out those a resumed run may change (:data:`~surprisal_cc.training.changed_settings.RESUMABLE_KEYS`: folders,
    threads, test-time settings, the number of epochs, ...). Left out besides: the settings of a part of the recipe this run
    does not use (:func:`unused_setting`). Where ``current`` would differ only by what the grid does not
    compare, it takes ``stored``'s value: a file named otherwise where both name one, unless both files are
    there (a grid may move files; the two are then compared by content; a file against null is compared),
    and a mapping's entry that only one of them holds (an option added or dropped since, compared as a
    top-level key is: where both hold it).

    Example
    -------
    >>> stored = {"lr": 0.001, "act_max_steps": 4, "apc_path": "old/apc.pt",
    ...           "prepare_options": {"labels": "mfa", "mfa_labels": "old/labels.csv", "g2p": "spn"}}
    >>> current = {"lr": 0.002, "act_max_steps": 8, "apc_path": "new/apc.pt", "encoder": "conditional",
    ...            "prepare_options": {"labels": "lexicon", "mfa_labels": "new/labels.csv", "skip_bad_audio": False}}
    >>> compared_settings(stored, current)["prepare_options"]
    {'labels': 'lexicon', 'mfa_labels': 'old/labels.csv', 'g2p': 'spn'}
    >>> {key: value for key, value in compared_settings(stored, current).items() if key != "prepare_options"}
    {'lr': 0.002, 'apc_path': 'old/apc.pt', 'encoder': 'conditional'}
    """
    return {key: _as_compared(stored.get(key), value) for key, value in current.items()
            if not unused_setting(str(key), current)}


def _as_compared(stored: Any, value: Any) -> Any:
    """``value`` with what :func:`compared_settings` does not compare with ``stored`` taken from ``stored``
    (an object's arguments as they are): a file named otherwise where both name one (null against a file is
    compared)."""
    if _is_path(value) and _is_path(stored) and not _both_files(stored, value):
        return stored
    if isinstance(value, TaggedMapping) or not (isinstance(stored, Mapping) and isinstance(value, Mapping)):
        return value
    return {**stored, **{key: _as_compared(stored[key], entry) for key, entry in value.items() if key in stored}}


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
                    prepare=_prepare_steps(path, data.get("prepare") or []), path=path,
                    slurm=dict(data.get("slurm") or {}))


GRID_KEYS = {"recipe", "hparams", "groups", "overrides", "seeds", "publish", "prepare", "experiment_root", "report_pool",
             "slurm"}
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
    if not data["groups"]:
        fail("groups is empty: the grid would have no run")
    for group in data["groups"]:
        name = group.get("name")
        if not isinstance(name, str) or name != name.strip() or name in ("", ".", "..") or "/" in name \
                or os.sep in name:
            fail(f"group name {name!r} must be a folder name: text without '/', spaces at its ends, '.' or '..'")
        unknown = sorted(set(group) - GROUP_KEYS)
        if unknown:
            fail(f"unknown key(s) {unknown} in group {group.get('name')!r}: a group has {sorted(GROUP_KEYS)}")
        for key in ("vary", "set"):
            if not isinstance(group.get(key) or {}, dict):
                fail(f"{key} of group {group.get('name')!r} must be a mapping of keys to values")
    if not isinstance(data.get("overrides") or {}, dict):
        fail("overrides must be a mapping of keys to values")
    if not isinstance(data.get("slurm") or {}, dict):
        fail("slurm must be a mapping of cluster settings (partition, gpus, cpus, mem_gb, time, ...)")
    seeds = data.get("seeds", [1])
    if not isinstance(seeds, list) or not seeds or not all(is_number(s, integer=True) and s >= 0 for s in seeds):
        fail(f"seeds must be a non-empty list of whole numbers of at least 0, e.g. [1, 2, 3]; got {seeds!r}")
    names = {g.get("name") for g in data["groups"]}
    for group in data["groups"]:
        empty = [key for key, values in (group.get("vary") or {}).items() if isinstance(values, list) and not values]
        if empty:
            fail(f"vary {', '.join(empty)} of group {group.get('name')!r} is an empty list: the group would have no run")
        if "seed" in (group.get("set") or {}):
            fail(f"set: seed in group {group.get('name')!r}: the seeds come from the grid's seeds, or a group's "
                 "vary: {seed: [...]}")
        varied = (group.get("vary") or {}).get("seed", [0])
        varied = varied if isinstance(varied, list) else [varied]
        if not all(is_number(s, integer=True) and s >= 0 for s in varied):
            fail(f"vary: seed of group {group.get('name')!r} must list whole numbers of at least 0; got {varied!r}")
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


def _is_path(value: Any) -> bool:
    """Whether a setting's value names a file or folder (has a ``/``)."""
    return isinstance(value, str) and "/" in value


def _both_files(stored: Any, requested: Any) -> bool:
    """Whether a run folder's setting and a grid's both name files that are there to be compared.

    Example
    -------
    >>> _both_files("surprisal_cc/__init__.py", "surprisal_cc/experiments/grid.py"), _both_files("moved/apc.pt", "surprisal_cc/experiments/grid.py")
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
    :func:`~surprisal_cc.training.run_folder.evaluation_tag`)."""
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
            if epochs is not None and (not is_number(epochs, integer=True) or epochs < 1):
                raise GridError(f"group {group['name']}: number_of_epochs must be a whole number of at least 1, "
                                f"got {epochs!r}")
            run = Run(group["name"], name, folder, overrides, command, int(epochs) if epochs is not None else None,
                      spec.hparams, recipe_overrides(overrides, defaults, folder))
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
    surprisal_cc.experiments.grid_spec.GridError: --controller: the grid varies it (it names the runs' folders): change the grid file instead
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
