"""A recipe's command line: SpeechBrain's arguments with stray words refused (:func:`parse_arguments`;
``--precision=auto`` taken, SpeechBrain options that are also keys of the hparams file passed on as
overrides: :func:`run_option_overrides`), and a ``--debug`` run's options checked and its folders moved
aside (:func:`debug_folder_overrides`). The hparams file itself is loaded by
:func:`~surprisal_cc.training.run_settings.load_hparams`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import speechbrain as sb

from surprisal_cc.checks import is_number
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.config import load_yaml_tolerant, parse_yaml_tolerant, resolved_hparams


#: The last line of a recipe's ``--help``, after SpeechBrain's options.
HELP_EPILOG = ("Every key of the hparams file is an option too, --key=value (docs/recipes.md, Options); "
               "--precision also takes auto.")


def parse_arguments(argv: Sequence[str]) -> Tuple[str, Dict, str]:
    """SpeechBrain's ``parse_arguments``, with stray words refused instead of passed on as overrides.

    Returns ``(hparams_file, run_opts, overrides)``; every override must be ``--key=value`` (or
    ``--key value``) and name a key of the hparams file (checked by :func:`~surprisal_cc.training.run_settings.load_hparams`).
    ``--precision=auto``, which SpeechBrain's flag does not take, becomes the override ``precision: auto``;
    SpeechBrain options given that are also keys of the file are added as overrides too
    (:func:`run_option_overrides`). ``--help`` prints SpeechBrain's options, then :data:`HELP_EPILOG`.

    Example
    -------
    >>> parse_arguments(["run.yaml", "--precision=auto", "--lr=0.1"])[2].splitlines()
    ['lr: 0.1', 'precision: auto']
    """
    argv, auto = _without_precision_auto(list(argv))
    try:
        hparams_file, run_opts, overrides = sb.parse_arguments(argv)
    except SystemExit as stop:  # argparse exits with 0 only once it has printed --help
        if stop.code in (0, None):
            print(HELP_EPILOG, flush=True)
        raise
    if auto and "precision" in getattr(run_opts, "overridden_args", ()):
        raise ConfigurationError(f"--precision given twice (auto and {run_opts['precision']}): give it once")
    if auto:
        overrides = "\n".join(line for line in (overrides, "precision: auto") if line)
    stray = [line for line in overrides.splitlines() if line.strip() and ":" not in line]
    if stray:
        raise ConfigurationError(f"unexpected argument {stray[0]!r}: after the hparams file, give overrides as "
                                 "--key=value (keys of that file) or SpeechBrain's options (--device, --test_only, ...)")
    check_debug_options(run_opts)
    overrides = "\n".join(line for line in (overrides, run_option_overrides(hparams_file, run_opts)) if line)
    if run_opts.get("debug"):  # a --debug run writes into a folder of its own
        overrides = debug_folder_overrides(hparams_file, overrides)
    return hparams_file, run_opts, overrides


def run_option_overrides(hparams_file: str, run_opts: Mapping) -> str:
    """Overrides (YAML lines) that give the hparams file's keys the values of SpeechBrain options set on
    the command line under the same name (``--max_grad_norm=1``, ``--ckpt_interval_minutes=5``):
    SpeechBrain takes them as run options, which its Brain prefers to the file's values, so without
    them the settings checks and the run's saved ``hyperparams.yaml`` would show the file's value
    instead of the one that ran. '' where the file cannot be read (loading it names the problem).

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "run.yaml"
    ...     _ = path.write_text("lr: 0.1\\nmax_grad_norm: 5.0\\n")
    ...     run_opts = sb.parse_arguments([str(path), "--max_grad_norm=1", "--device=cpu"])[1]
    ...     run_option_overrides(str(path), run_opts)
    'max_grad_norm: 1.0'
    """
    given = sorted(getattr(run_opts, "overridden_args", ()))
    keys = load_yaml_tolerant(hparams_file) if given else {}
    return "\n".join(f"{key}: {json.dumps(run_opts[key])}" for key in given if key in keys)


def _without_precision_auto(argv: List[str]) -> Tuple[List[str], bool]:
    """``argv`` without ``--precision=auto`` / ``--precision auto`` (any case), and whether it had one."""
    kept, auto, i = [], False, 0
    while i < len(argv):
        if argv[i].lower() == "--precision=auto" or (argv[i] == "--precision" and
                                                     [a.lower() for a in argv[i + 1:i + 2]] == ["auto"]):
            auto, i = True, i + (1 if "=" in argv[i] else 2)
            continue
        kept.append(argv[i])
        i += 1
    return kept, auto


#: A ``--debug`` run's folder: the run's ``output_folder`` with this suffix (:func:`debug_folder_overrides`).
DEBUG_FOLDER_SUFFIX = "-debug"


def check_debug_options(run_opts: Mapping) -> None:
    """``--debug_batches`` and ``--debug_epochs`` (SpeechBrain's) are whole numbers of at least 1: with 0,
    a ``--debug`` run would keep no utterance of any split, and SpeechBrain's loop, which stops when the
    epoch equals ``debug_epochs``, would train every epoch. Checked with ``--debug``, or when either is given.

    Example
    -------
    >>> check_debug_options({"debug": True, "debug_batches": 0, "debug_epochs": 2})
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: --debug_batches=0: give a whole number of at least 1 (the batches of each split, and of each epoch, that a --debug run goes through)
    """
    given = set(run_opts.get("overridden_args") or ())
    if not run_opts.get("debug") and not given & {"debug_batches", "debug_epochs"}:
        return
    if run_opts.get("debug") and run_opts.get("test_only") and not run_opts.get("debug_persistently"):
        raise ConfigurationError("--debug with --test_only: a --debug run keeps its checkpoints in a temporary "
                                 "folder, so none is left to evaluate; train with --debug --debug_persistently "
                                 "(checkpoints in <output_folder>-debug/save), then evaluate with those and --test_only")
    for key, what in (("debug_batches", "the batches of each split, and of each epoch,"),
                      ("debug_epochs", "the epochs")):
        value = run_opts.get(key)
        if value is not None and (not is_number(value, integer=True) or value < 1):
            raise ConfigurationError(f"--{key}={value}: give a whole number of at least 1 ({what} that a --debug "
                                     "run goes through)")


def debug_folder_overrides(hparams_file: Union[str, os.PathLike], overrides: str = "") -> str:
    """``overrides`` for a ``--debug`` run: the run's ``output_folder`` moved to ``<output_folder>-debug``
    and the APC folder (``apc_output_folder``, where ``apc_path: null`` pretrains and exports an APC) to
    ``<output_folder>-debug/apc``; a file without an ``output_folder`` (APC pretraining) has its
    ``apc_output_folder`` moved to ``<apc_output_folder>-debug``. What the hparams file places in them
    (``save_folder``, ``train_log``, ``results_file``, ``apc_export_path`` ...: ``!ref <output_folder>/...``)
    follows; an input named by its path (``apc_path``) stays. So a debug run never writes into, resumes
    from or is refused by the run that the same command without ``--debug`` makes (nor leaves it an APC
    trained on a few batches), and the other way round. The shared folders stay: ``prepared_folder``
    (the whole corpus's manifests, as a real run makes them) and ``cache_folder`` (features keyed by the
    APC's fingerprint: a debug run's own APC adds entries no other run reads). A
    :class:`ConfigurationError` where the folder cannot be worked out.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "run.yaml").write_text("root: exp\\noutput_folder: !ref <root>/run\\n"
    ...                                          "save_folder: !ref <output_folder>/save\\n")
    ...     print(debug_folder_overrides(Path(tmp, "run.yaml"), "root: out"))
    root: out
    output_folder: out/run-debug
    """
    import io

    import ruamel.yaml

    if not Path(hparams_file).is_file():
        return overrides  # load_hparams names the missing file
    try:
        resolved = parse_yaml_tolerant(resolved_hparams(hparams_file, overrides))
        yaml = ruamel.yaml.YAML()
        yaml.width = 1 << 16  # one line a setting, as given
        yaml.representer.add_representer(  # null as written, not an empty value
            type(None), lambda dumper, _: dumper.represent_scalar("tag:yaml.org,2002:null", "null"))
        merged = yaml.load(overrides) if overrides.strip() else None
    except Exception as err:  # noqa: BLE001 (any error of the hparams or overrides)
        raise ConfigurationError(f"--debug: the run's folder could not be worked out from {hparams_file} and the "
                                 f"overrides ({type(err).__name__}: {err}); run without --debug to see what is "
                                 "wrong, or give --output_folder=DIR") from None
    merged = ruamel.yaml.comments.CommentedMap() if merged is None else merged

    def folder(key: str) -> Optional[str]:
        value = resolved.get(key)
        return os.path.normpath(value) if isinstance(value, str) and value.strip() else None

    output, apc = folder("output_folder"), folder("apc_output_folder")
    if not isinstance(merged, dict) or (output is None and apc is None):
        raise ConfigurationError(f"--debug: {hparams_file} names no output_folder (or apc_output_folder) for the "
                                 "debug run to move to <folder>-debug: give --output_folder=DIR")
    if output is not None:
        merged["output_folder"] = output + DEBUG_FOLDER_SUFFIX
        if apc is not None:
            merged["apc_output_folder"] = os.path.join(output + DEBUG_FOLDER_SUFFIX, "apc")
    elif apc is not None:
        merged["apc_output_folder"] = apc + DEBUG_FOLDER_SUFFIX
    out = io.StringIO()
    yaml.dump(merged, out)
    return out.getvalue().strip()
