"""Which APC a run loaded, for results files written before their APC was recorded.

A results file records the fingerprint of the APC weights it ran with (``"apc"``,
:func:`surprisal_cc.model.nnet.weights_fingerprint`); reports keep runs with different APCs on different
rows. Results written before that field existed lack it, and their runs then stand on rows of their
own beside later seeds of the same configuration. A path cannot stand in for the fingerprint (the
same path may hold another APC today), but a run records the commit it ran at: where its
``apc_path`` was a file tracked by git at that commit, the APC it loaded is that commit's file.
:func:`fill_apc_fingerprints` records that file's fingerprint in the results file, beside where it
came from (``"apc_source": "git:<commit>:<path>"``), and leaves every other results file as it is.

Example
-------
>>> import json, tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     run = Path(folder) / "seed1"
...     run.mkdir()
...     _ = (run / "results.json").write_text(json.dumps({"PER": 30.0, "apc": "7d9e8c79f4db"}))
...     [(Path(f.results).name, f.status) for f in fill_apc_fingerprints(folder)]
[('results.json', 'recorded')]
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from surprisal_cc.model.apc import load_apc
from surprisal_cc.config import load_yaml_tolerant
from surprisal_cc.model.nnet import weights_fingerprint
from surprisal_cc.training.run_folder import evaluation_tag, results_files_under, test_only_hyperparams_name

PathLike = Union[str, Path]

__all__ = ["Filled", "fill_apc_fingerprints", "fingerprint_at_commit"]


@dataclass
class Filled:
    """What :func:`fill_apc_fingerprints` did with one results file: ``status`` is ``recorded`` (it had a
    fingerprint), ``filled`` (one was found, and written unless a dry run), ``no_apc`` (its run loaded no
    APC) or ``unknown`` (``reason`` says why none can be found)."""
    results: str
    status: str
    fingerprint: Optional[str] = None
    source: Optional[str] = None
    reason: str = ""


def fingerprint_at_commit(commit: str, path: str, repository: PathLike = ".") -> Tuple[Optional[str], str]:
    """The weights fingerprint of the APC file ``path`` as git holds it at ``commit`` in ``repository``,
    or None with the reason (not a git repository, the file not tracked there, not an APC file).

    Example
    -------
    >>> fingerprint_at_commit("0" * 40, "pretrained/apc.pt", tempfile.gettempdir())[0] is None
    True
    """
    try:
        blob = subprocess.run(["git", "-C", str(repository), "show", f"{commit}:{path}"], capture_output=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, f"git has no {path} at commit {commit} (a file outside the repository, or not a git checkout)"
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "apc.pt"
        file.write_bytes(blob)
        try:
            return weights_fingerprint(load_apc(file)), ""
        except ValueError as err:
            return None, f"{path} at {commit} is not an APC model file ({err})"


def _apc_path(results: Path, row: Dict) -> Optional[str]:
    """The ``apc_path`` of the configuration the results file was written with: its ``--test_only``
    evaluation's hyperparams file, else the run's ``hyperparams.yaml``."""
    names = ([test_only_hyperparams_name(evaluation_tag(row))] if row.get("test_only") else []) + ["hyperparams.yaml"]
    for name in names:
        file = results.parent / name
        if file.is_file():
            value = load_yaml_tolerant(file).get("apc_path")
            return str(value) if value else None
    return None


def _check_git_checkout(repository: PathLike) -> None:
    """ValueError naming ``repository`` unless it is a git checkout."""
    try:
        subprocess.run(["git", "-C", str(repository), "rev-parse", "--git-dir"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        raise ValueError(f"{repository}: not a git checkout (the commits results files record are looked up in "
                         "it); give the checkout the runs ran from") from None


def fill_apc_fingerprints(folders: Union[PathLike, Sequence[PathLike]], repository: PathLike = ".",
                          write: bool = False) -> List[Filled]:
    """Find the APC fingerprint of every results file under ``folders`` that lacks one, from the file its
    run's ``apc_path`` named at the commit the run recorded (in the git ``repository``), and with
    ``write`` record it (keys ``apc`` and ``apc_source``). A run that loaded no APC (no APC MACs: filterbank
    features and a controller that reads no surprisal) is left as it is, and so is one whose file git does
    not hold at its commit (an APC trained or copied outside the repository).

    Returns one :class:`Filled` per results file, in path order.
    """
    folders = [folders] if isinstance(folders, (str, Path)) else list(folders)
    found: List[Filled] = []
    known: Dict[Tuple[str, str], Tuple[Optional[str], str]] = {}
    files = sorted(f for folder in folders for f in results_files_under(Path(folder)))
    for file in files:
        try:
            row = json.loads(file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"{file}: not valid JSON ({err}); fix or remove it") from None
        if not isinstance(row, dict):
            raise ValueError(f"{file}: not a results file (a JSON object of a run's test results)")
        if row.get("apc"):
            found.append(Filled(str(file), "recorded", row["apc"], row.get("apc_source")))
            continue
        if not (row.get("component_macs") or {}).get("apc"):
            found.append(Filled(str(file), "no_apc", reason="its run loaded no APC (no APC MACs)"))
            continue
        path, commit = _apc_path(file, row), row.get("commit")
        if not path or not commit:
            found.append(Filled(str(file), "unknown", reason="no apc_path in its hyperparams file" if not path
                                else "no commit recorded"))
            continue
        if not known:  # the first file to look up: the repository must be a git checkout
            _check_git_checkout(repository)
        if (commit, path) not in known:
            known[(commit, path)] = fingerprint_at_commit(commit, path, repository)
        fingerprint, reason = known[(commit, path)]
        if fingerprint is None:
            found.append(Filled(str(file), "unknown", reason=reason))
            continue
        source = f"git:{commit}:{path}"
        if write:
            file.write_text(json.dumps({**row, "apc": fingerprint, "apc_source": source}, indent=2), encoding="utf-8")
        found.append(Filled(str(file), "filled", fingerprint, source))
    return found
