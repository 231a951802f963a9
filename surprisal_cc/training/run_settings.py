"""The settings of a recipe run: its command line and hparams file loaded with clear errors, every
setting checked before any data is read (types and ranges, labels and ``num_outputs``, the APC file,
a ``--test_only`` run's checkpoint, a test budget, a bias sweep), the training precision resolved,
the hparams of a finished run folder read back without side effects, and the experiment folder,
whose resumed training must keep the settings its checkpoints were trained with.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import speechbrain as sb
import torch
from speechbrain.utils.distributed import if_main_process
from torch import nn

from surprisal_cc.training.allocator import reuse_freed_memory
from surprisal_cc.model.apc import APCModel
from surprisal_cc.checks import is_number, resolve_device
from surprisal_cc.model.calibration import CALIBRATION_METHODS, check_calibration_target
from surprisal_cc.data.lexicon import G2P_CHOICES
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.flops import module_macs, static_flop_rows
from surprisal_cc.training.frozen_features import PRETRAIN_OR_GIVE_APC, load_run_apc, run_apc_key
from surprisal_cc.config import (configured_paths, expand_hparams, load_hparams_file, load_yaml_tolerant,
                                 new_empty_folders_removed, parse_yaml_tolerant, resolved_hparams, ruamel_errors)
from surprisal_cc.training.changed_settings import argument_references, changed_training_settings
from surprisal_cc.model.nnet import bias_shift_problem, runs_apc
from surprisal_cc.runtime import TRAINING_PRECISIONS, auto_precision

logger = logging.getLogger(__name__)


#: The last line of a recipe's ``--help``, after SpeechBrain's options.
HELP_EPILOG = ("Every key of the hparams file is an option too, --key=value (docs/recipes.md, Options); "
               "--precision also takes auto.")


def parse_arguments(argv: Sequence[str]) -> Tuple[str, Dict, str]:
    """SpeechBrain's ``parse_arguments``, with stray words refused instead of passed on as overrides.

    Returns ``(hparams_file, run_opts, overrides)``; every override must be ``--key=value`` (or
    ``--key value``) and name a key of the hparams file (checked by :func:`load_hparams`).
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


def load_hparams(hparams_file: str, overrides: str = "", run_opts: Optional[Mapping] = None) -> Dict:
    """Load a hyperpyyaml file with overrides; unknown keys and bad values get a clear error.

    With ``run_opts`` (a recipe run) the training ``precision`` is resolved (:func:`resolve_precision`),
    the settings that must agree are checked (labels and ``num_outputs``, a test budget, a bias
    sweep, a checkpoint to evaluate for ``--test_only``: :func:`check_test_only`), and
    ``malloc_reuse: True`` switches this process's allocator to reuse freed memory
    (:func:`~surprisal_cc.training.allocator.reuse_freed_memory`). A configuration rejected here leaves no new
    empty folder behind (:func:`~surprisal_cc.config.new_empty_folders_removed`: the checkpointer
    creates its ``save/`` while the file is built, before the settings are checked). Note: hparams files
    are code (``!new:``/``!apply:`` run Python); only load files you trust.
    """
    path = Path(hparams_file)
    if not path.is_file():
        raise ConfigurationError(f"hparams file {hparams_file} does not exist")
    with new_empty_folders_removed(configured_paths(path, overrides)):
        return _load_checked_hparams(hparams_file, overrides, run_opts)


def _load_checked_hparams(hparams_file: str, overrides: str, run_opts: Optional[Mapping]) -> Dict:
    """:func:`load_hparams` of an existing file: built, then (with ``run_opts``) checked."""
    path = Path(hparams_file)
    try:
        hparams = load_hparams_file(path, overrides)
    except KeyError as err:
        raise ConfigurationError(f"{hparams_file}: {err.args[0].split(' not found')[0]} is not a key of this configuration "
                                 "(check the spelling; every --key=value override must name an existing key)") from None
    except (ValueError, TypeError, ImportError, AttributeError) as err:
        raise ConfigurationError(f"{hparams_file}: {build_error_reason(err)}") from None
    except ruamel_errors() as err:  # e.g. the same --key=value override given twice
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigurationError(f"{hparams_file}: {problem} "
                                 "(give each key once, in the file or as one --key=value option)") from None
    if run_opts is not None:
        device = resolve_device(run_opts.get("device") or "cpu")  # a missing GPU, before any data is read
        if "precision" in hparams:
            run_folder = hparams.get("output_folder") or hparams.get("apc_output_folder")  # APC pretraining's
            hparams["precision"] = resolve_precision(hparams["precision"], run_opts, run_folder)
            if hparams["precision"] == "fp16" and device.type != "cuda":
                raise ConfigurationError(f"precision fp16 trains on CUDA only (device {device}): use fp32, bf16 or "
                                         "auto")
        if hparams.get("malloc_reuse"):
            reuse_freed_memory()
        unit = hparams.get("target_unit", "phone")
        if unit not in ("phone", "sentencepiece"):
            raise ConfigurationError(f"target_unit must be 'phone' or 'sentencepiece', got {unit!r}")
        if unit == "phone" and "label_encoder" in hparams:  # APC pretraining files have no labels
            check_num_outputs(hparams)
        check_settings(hparams, boolean_keys=[key for key, value in load_yaml_tolerant(path).items()
                                              if isinstance(value, bool)])  # types and ranges first
        check_test_budget(hparams)
        check_bias_sweep(hparams)
        check_selection_metric(hparams)
        apc = check_apc_path(hparams, run_opts)
        check_flops_budget(hparams, apc if apc is not None else hparams.get("apc_model"))
        if "checkpointer" in hparams:  # a recognition recipe: --test_only needs its trained run
            check_test_only(hparams, run_opts)
    return hparams


def build_error_reason(err: BaseException) -> str:
    """What went wrong while an hparams file was built, in its own words: the innermost error, through the
    layers that only quote the error they caught (``<model file>: cannot build the encoder with settings
    [...]: ValueError: <reason>``), so that the reason (and the hparams key it names) is not lost among
    them. A ``ValueError`` is its message; another error keeps its type's name (``TypeError: ...``).

    Example
    -------
    >>> try:
    ...     try:
    ...         raise ValueError("unknown controller 'bogus' (hparams key 'controller')")
    ...     except ValueError as inner:
    ...         raise ValueError(f"paper.yaml: cannot build the encoder: ValueError: {inner}") from None
    ... except ValueError as err:
    ...     build_error_reason(err)
    "unknown controller 'bogus' (hparams key 'controller')"
    >>> build_error_reason(TypeError("f() got an unexpected keyword argument 'x'"))
    "TypeError: f() got an unexpected keyword argument 'x'"
    """
    reason = err
    while True:
        inner = reason.__cause__ or reason.__context__
        if inner is None or f"{type(inner).__name__}: {inner}" not in str(reason):
            break  # an error caught while another was handled, not quoted by it, is not the reason
        reason = inner
    return str(reason) if isinstance(reason, ValueError) else f"{type(reason).__name__}: {reason}"


#: Where a run folder records what ``precision: auto`` chose, so that a resumed run keeps it.
PRECISION_RECORD = "precision.json"


def resolve_precision(precision: str, run_opts, output_folder: Optional[str] = None) -> str:
    """The training precision: ``auto`` becomes :func:`~surprisal_cc.runtime.auto_precision` of the
    run's device (a fixed rule), chosen once per run: a run resumed in ``output_folder`` takes what its
    start chose (:data:`PRECISION_RECORD`, written by :func:`create_experiment_directory`; runs started
    before ``auto`` became a fixed rule recorded a timed choice), so that its epochs never split between
    bf16 and fp32.

    ``--precision`` on the command line (SpeechBrain's flag) wins over the YAML key.
    """
    if "precision" in getattr(run_opts, "overridden_args", ()):
        return run_opts["precision"]
    if precision not in TRAINING_PRECISIONS:
        raise ConfigurationError(f"precision must be one of {TRAINING_PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    device = (run_opts.get("device") if run_opts is not None else None) or "cpu"

    def chosen(on: str) -> str:  # under DDP the main process alone reads the record or applies the rule
        return (recorded_precision(output_folder, on) if output_folder else None) or auto_precision(on)

    return _agreed_by_every_rank(chosen, device)


def recorded_precision(output_folder: str, device: str = "cpu") -> Optional[str]:
    """What ``precision: auto`` chose when the run in ``output_folder`` started (None where nothing
    readable is recorded, or bf16 is recorded and ``device`` is a GPU without bf16)."""
    record = Path(output_folder) / PRECISION_RECORD
    try:
        chosen = json.loads(record.read_text()).get("precision")
    except (OSError, ValueError, AttributeError):
        return None
    if chosen not in TRAINING_PRECISIONS[:-1]:
        return None
    if chosen == "bf16" and torch.device(device).type == "cuda" and not torch.cuda.is_bf16_supported():
        logger.warning("precision auto: %s records bf16, which %s does not run; choosing again", record, device)
        return None
    logger.info("precision auto: %s, as chosen when this run started (%s)", chosen, record)
    return chosen


def _agreed_by_every_rank(choose: Callable[[str], str], device: str) -> str:
    """``choose(device)`` as the main process makes it, for every DDP rank: ranks on machines of other
    kinds (or one resuming from a record the others cannot read) could choose differently. Only the main
    process chooses; the others take its choice (a no-op outside DDP and on CUDA, where the rule is fp32).
    """
    from speechbrain.utils.distributed import is_distributed_initialized

    if not is_distributed_initialized() or torch.device(device).type == "cuda":
        return choose(device)
    main = torch.distributed.get_rank() == 0
    choice = torch.tensor([TRAINING_PRECISIONS.index(choose(device)) if main else -1])
    torch.distributed.broadcast(choice, src=0)
    return TRAINING_PRECISIONS[int(choice)]


# Settings checked before any data is read (check_settings): a misread one would otherwise fail, or
# silently change the run, after data preparation and the feature cache.
POSITIVE_INT_KEYS = ("batch_size", "number_of_epochs", "apc_batch_size", "apc_epochs", "checkpoints_to_keep")
POSITIVE_FLOAT_KEYS = ("lr", "apc_lr", "max_grad_norm", "apc_max_grad_norm", "max_batch_length")
NONNEGATIVE_INT_KEYS = ("num_workers", "seed")
CHOICE_KEYS = {"valid_search": ("greedy", "beam"), "sorting": ("random", "ascending", "descending"),
               "calibration_method": CALIBRATION_METHODS, "g2p": G2P_CHOICES}


def check_settings(hparams: Mapping, boolean_keys: Iterable[str] = ()) -> None:
    """The ``boolean_keys`` (:func:`load_hparams` passes those whose value in the hparams file is True
    or False) are still booleans, every setting of the lists above that is present has its type and
    range, and the controller's calibration targets are reachable; one :class:`ConfigurationError`
    line per problem otherwise.

    Example
    -------
    >>> check_settings({"augment": "no", "lr": -1, "valid_search": "beams"}, boolean_keys=["augment"])
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: augment must be True or False, got 'no'
    lr must be a positive number, got -1
    valid_search must be one of ('greedy', 'beam'), got 'beams'
    """
    problems = [f"{key} must be True or False, got {hparams[key]!r}" for key in boolean_keys
                if key in hparams and not isinstance(hparams[key], bool)]
    problems += [f"{key} must be a whole number of at least 1, got {hparams[key]!r}" for key in POSITIVE_INT_KEYS
                 if key in hparams and (not is_number(hparams[key], integer=True) or hparams[key] < 1)]
    problems += [f"{key} must be a positive number, got {hparams[key]!r}" for key in POSITIVE_FLOAT_KEYS
                 if key in hparams and (not is_number(hparams[key]) or hparams[key] <= 0)]
    problems += [f"{key} must be a whole number of at least 0, got {hparams[key]!r}" for key in NONNEGATIVE_INT_KEYS
                 if key in hparams and (not is_number(hparams[key], integer=True) or hparams[key] < 0)]
    problems += [f"{key} must be one of {choices}, got {hparams[key]!r}" for key, choices in CHOICE_KEYS.items()
                 if key in hparams and hparams[key] not in choices]
    shifts = hparams.get("test_bias_shifts", [0.0])
    if not isinstance(shifts, (list, tuple)) or not shifts or not all(is_number(s) for s in shifts):
        problems.append(f"test_bias_shifts must be a list of finite numbers (e.g. [0.0, 1.0]), got {shifts!r}")
    mean, var = hparams.get("controller_target_mean"), hparams.get("controller_target_var")
    problems += [f"{key} must be a number, got {value!r}" for key, value in (("controller_target_mean", mean),
                                                                            ("controller_target_var", var))
                 if value is not None and not is_number(value)]
    if is_number(mean):
        try:
            check_calibration_target(mean, var if is_number(var) else None)
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise ConfigurationError("\n".join(problems))


def check_apc_path(hparams: Mapping, run_opts: Mapping) -> Optional[APCModel]:
    """Where the run needs APC: ``apc_path`` is a loadable APC model file that fits the run (loaded here,
    before any data is read, and again by :func:`~surprisal_cc.training.frozen_features.obtain_apc`: a few MB, not
    worth a cache kept between them; returned); with ``apc_path`` null, a ``--test_only`` run loads the APC
    its training exported (it never pretrains one), and training returns None (it pretrains one). Which
    file that is: :func:`~surprisal_cc.training.frozen_features.run_apc_file`."""
    if "encoder_module" not in hparams or not runs_apc(hparams.get("input_features", "apc"),
                                                       hparams["encoder_module"]):
        return None  # APC pretraining (its own recipe), or a model without APC
    if not hparams.get("apc_path") and not run_opts.get("test_only"):
        return None  # training pretrains one, or uses the export it finds
    todo = (("--test_only needs the APC the run trained with: give --apc_path=FILE (the APC the run loaded; its "
             "results.json names its fingerprint)") if run_opts.get("test_only") else PRETRAIN_OR_GIVE_APC)
    apc = load_run_apc(hparams, todo=todo)
    check_apc_fits(apc, hparams)
    return apc


def check_apc_fits(apc: APCModel, hparams: Mapping) -> None:
    """The loaded APC reads the run's filterbanks (``feature_config``'s ``n_mels``) and, where the
    encoder reads APC features, gives them at the encoder's ``input_size``; one
    :class:`ConfigurationError` line naming ``apc_path`` (or, null, ``apc_export_path``) otherwise (not a shape
    error after the cache).

    Example
    -------
    >>> from surprisal_cc.model.features import FeatureConfig
    >>> check_apc_fits(APCModel(hidden_size=256), {"apc_path": "small.pt", "feature_config": FeatureConfig(),
    ...                                            "input_features": "apc", "input_size": 512})
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: apc_path small.pt: its features are 256-wide, and the encoder's input_size is 512: ...
    """
    problems = []
    n_mels = getattr(hparams.get("feature_config"), "n_mels", None)
    if n_mels is not None and apc.input_size != n_mels:
        problems.append(f"it reads {apc.input_size} mel bands, and feature_config has n_mels {n_mels}")
    if hparams.get("input_features") == "apc" and hparams.get("input_size") not in (None, apc.hidden_size):
        problems.append(f"its features are {apc.hidden_size}-wide, and the encoder's input_size is "
                        f"{hparams['input_size']}")
    if problems:
        key = run_apc_key(hparams)
        raise ConfigurationError(f"{key} {hparams.get(key)}: {'; '.join(problems)}: give an APC model made for "
                                 "these settings, or settings that match it")


def check_flops_budget(hparams: Mapping, apc: Optional[nn.Module]) -> None:
    """A training ``flops_budget`` (expected MACs per frame, the APC's included, that the surprisal
    controller's calibration aims at instead of ``controller_target_mean``) is a number strictly between
    the model's small-only and big-only costs, for a controller that calibrates on surprisal; one
    :class:`ConfigurationError` line otherwise, before any data is read (``apc``: the run's APC model).

    Example
    -------
    >>> from surprisal_cc.model.architectures import build_encoder
    >>> encoder = build_encoder("conditional", input_size=80, num_outputs=42, controller="random")
    >>> check_flops_budget({"flops_budget": 6.4e6, "encoder_module": encoder}, apc=None)
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: flops_budget calibrates the surprisal controller, and this model's controller is 'random' (it has no calibration): set flops_budget: null
    """
    budget = hparams.get("flops_budget")
    if budget is None:
        return
    if not is_number(budget):
        raise ConfigurationError(f"flops_budget must be MACs per frame (a number) or null, got {budget!r}")
    encoder = hparams.get("encoder_module")
    controller = getattr(encoder, "controller", None)
    if not getattr(controller, "calibrates_on_surprisal", False):
        name = getattr(controller, "name", None) or getattr(encoder, "name", None) or type(encoder).__name__
        raise ConfigurationError(f"flops_budget calibrates the surprisal controller, and this model's controller is "
                                 f"{name!r} (it has no calibration): set flops_budget: null")
    rows = static_flop_rows(encoder, module_macs(apc))
    small, big = rows["small-only"], rows["big-only"]
    if not small < budget < big:
        raise ConfigurationError(f"flops_budget {budget:.4g} MACs per frame is not between this model's small-only "
                                 f"{small:.4g} and big-only {big:.4g} (APC included; `surprisal-cc flops HPARAMS` "
                                 "lists them): choose a budget strictly between the two")


def check_test_only(hparams: Mapping, run_opts: Mapping) -> None:
    """``--test_only`` needs a trained run: its ``checkpointer`` must find a checkpoint of a validated
    epoch (one that records ``selection_metric``), not only a checkpoint taken within an epoch."""
    if not run_opts.get("test_only"):
        return
    metric = hparams.get("selection_metric", "PER")
    checkpointer = hparams["checkpointer"]
    if checkpointer.find_checkpoint(min_key=metric) is None:
        raise ConfigurationError(f"--test_only: {checkpointer.checkpoints_dir} holds no checkpoint of a validated "
                                 f"epoch ({metric}) to evaluate: train this run first, or point --output_folder at "
                                 "a trained run")


def check_manifest_phones(manifests: Mapping[str, str], labels: Sequence[str]) -> None:
    """Every phone of the manifests' ``phn`` columns is one of ``labels``: a clear error naming the
    manifest, the phones and an utterance, before any feature is computed.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "test.csv").write_text("ID,phn\\nu1,sil HH AY sil\\n")
    ...     check_manifest_phones({"test": f"{tmp}/test.csv"}, ["sil", "AY"])
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: .../test.csv: phone(s) ['HH'] (utterance u1) are not in the label set (2 labels, hparams key phone_set): set phone_set to the corpus's phones, or map them in its prepare function
    """
    from surprisal_cc.data.manifest import read_manifest

    for manifest in manifests.values():
        columns, rows = read_manifest(manifest, (), resolve_wav=False)
        if "phn" not in columns:
            continue
        for row in rows:
            unknown = sorted(set((row["phn"] or "").split()) - set(labels))
            if unknown:
                raise ConfigurationError(
                    f"{manifest}: phone(s) {unknown} (utterance {row.get('ID')}) are not in the label set "
                    f"({len(labels)} labels, hparams key phone_set): set phone_set to the corpus's phones, "
                    "or map them in its prepare function")


def check_selection_metric(hparams: Mapping) -> None:
    """``selection_metric`` (the validation metric the checkpoints are kept and chosen by) is one that
    validation reports for the run's targets: PER for phones; TER or WER for sentencepiece units.

    Example
    -------
    >>> check_selection_metric({"target_unit": "sentencepiece", "selection_metric": "PER"})
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.ConfigurationError: selection_metric: PER is not reported for sentencepiece targets: choose one of ['TER', 'WER'] (--selection_metric=TER)
    """
    unit = hparams.get("target_unit", "phone")
    choices = ["PER"] if unit == "phone" else ["TER", "WER"]
    metric = hparams.get("selection_metric", choices[0])
    if metric not in choices:
        raise ConfigurationError(f"selection_metric: {metric} is not reported for {unit} targets: choose one of "
                                 f"{choices} (--selection_metric={choices[0]})")


def check_num_outputs(hparams: Dict) -> None:
    """``num_outputs`` is the label set's size plus the blank, found before any data is touched."""
    expected = len(hparams["label_encoder"].ind2lab)
    if hparams["num_outputs"] != expected:
        raise ConfigurationError(f"num_outputs is {hparams['num_outputs']} but the label set has {expected - 1} "
                                 f"labels + blank = {expected}: set --num_outputs={expected}")


def check_test_budget(hparams: Mapping) -> None:
    """``test_flops_fraction`` (a test-time FLOPs budget) is a fraction, and replaces a bias sweep."""
    fraction = hparams.get("test_flops_fraction")
    if fraction is None:
        return
    if not is_number(fraction) or not 0.0 < fraction < 1.0:
        raise ConfigurationError(f"test_flops_fraction must be a number in (0, 1) (a fraction of the big-only MACs "
                                 f"per frame) or null, got {fraction!r}")
    if hparams.get("test_budget_split", "valid") not in ("valid", "test"):
        raise ConfigurationError(f"test_budget_split must be 'valid' or 'test' (the audio whose surprisal the "
                                 f"budget's bias shift is solved on), got {hparams['test_budget_split']!r}")
    if [float(s) for s in hparams.get("test_bias_shifts", [0.0])] != [0.0]:
        raise ConfigurationError(f"test_flops_fraction: {fraction} solves the test-time bias shift itself: leave "
                                 f"test_bias_shifts at [0.0] (it is {hparams['test_bias_shifts']})")


def check_bias_sweep(hparams: Mapping) -> None:
    """A test-time bias sweep (``test_bias_shifts`` other than 0) needs a controller with a logit to
    shift: not big-only, small-only, nor an adaptive-depth encoder (their results would repeat the
    unshifted one under another name)."""
    shifts = [float(s) for s in hparams.get("test_bias_shifts", [0.0])]
    if not any(shifts):
        return
    problem = bias_shift_problem(hparams["encoder_module"])
    if problem:
        raise ConfigurationError(f"test_bias_shifts: {shifts} shifts a controller's logit; {problem}: leave "
                                 "test_bias_shifts at [0.0]")


# ----------------------------------------------------------------------------------------------
# Reading a configuration without running it: the hparams of a finished run (export, realign) or
# of an hparams file whose model is only built (surprisal-cc flops)
# ----------------------------------------------------------------------------------------------
RUN_HPARAMS_FILES = ("hyperparams.yaml", "hparams.yaml")


def run_hparams_file(run_dir: Union[str, os.PathLike]) -> Path:
    """The hparams file SpeechBrain writes into a recipe run folder (``hyperparams.yaml``, or
    ``hparams.yaml``); :class:`ConfigurationError` when ``run_dir`` holds neither.

    Example
    -------
    >>> run_hparams_file("no/such/run")
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: no/such/run: no hyperparams.yaml or hparams.yaml (the hparams SpeechBrain \
writes into a recipe run folder: is this the output_folder of a recipe run?)
    """
    run = Path(run_dir)
    for name in RUN_HPARAMS_FILES:
        if (run / name).is_file():
            return run / name
    raise ConfigurationError(f"{run}: no {' or '.join(RUN_HPARAMS_FILES)} (the hparams SpeechBrain writes into a "
                             "recipe run folder: is this the output_folder of a recipe run?)")


def inert_override_text(hparams_file: Union[str, os.PathLike], overrides: Union[str, Mapping, None] = None) -> str:
    """Overrides for :func:`load_hparams` that load ``hparams_file`` free of side effects: ``overrides``
    (YAML text, or a mapping of plain values) and, for every key they do not set,
    :func:`~surprisal_cc.config.inert_overrides` (no checkpoint folder, a dummy for each
    ``!PLACEHOLDER``). YAML text is kept as written, tags (``!ref``) included.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     hparams = Path(tmp) / "hparams.yaml"
    ...     _ = hparams.write_text("data_folder: !PLACEHOLDER\\nlr: 0.1\\n")
    ...     print(inert_override_text(hparams, {"lr": 0.5}))
    ...     print(inert_override_text(hparams, "data_folder: data"))
    lr: 0.5
    data_folder: placeholder
    data_folder: data
    """
    import yaml

    from surprisal_cc.config import TolerantLoader, inert_overrides

    if isinstance(overrides, Mapping):
        given = dict(overrides)
        text = yaml.safe_dump(given, sort_keys=False).strip() if given else ""
    else:
        text = (overrides or "").strip()
        try:  # plain YAML (a flow mapping such as "{lr: 0.5}" too) in block style, so lines can follow it
            given = yaml.safe_load(text) if text else {}
            if isinstance(given, dict) and given:
                text = yaml.safe_dump(given, sort_keys=False).strip()
        except yaml.YAMLError:  # tags (!ref), kept as written, read as plain data; or not YAML: named
            try:
                given = yaml.load(text, Loader=TolerantLoader)
            except yaml.YAMLError as err:
                raise ConfigurationError(f"{hparams_file}: the overrides are not YAML "
                                         f"({' '.join(str(err).split())})") from None
    given = given if isinstance(given, dict) else {}
    inert = [f"{key}: {value}" for key, value in inert_overrides(hparams_file).items() if key not in given]
    return "\n".join(([text] if text else []) + inert)


def load_inert_hparams(hparams_file: Union[str, os.PathLike], overrides: Union[str, Mapping, None] = None) -> Dict:
    """:func:`load_hparams` of ``hparams_file`` with ``overrides`` (YAML text or a mapping), building the
    modules without side effects (:func:`inert_override_text`): no data is read, no checkpoint folder is
    created, ``!PLACEHOLDER`` values need no override."""
    return load_hparams(str(hparams_file), inert_override_text(hparams_file, overrides))


def load_run_hparams(run_dir: Union[str, os.PathLike], overrides: Union[str, Mapping, None] = None,
                     phones_for: Optional[str] = None) -> Tuple[Path, Dict]:
    """The hparams file of a recipe run folder (:func:`run_hparams_file`) and its hparams, loaded
    without side effects (:func:`load_inert_hparams`) with ``overrides`` on top.

    Arguments
    ---------
    run_dir : str or path
        Output folder of a recipe run.
    overrides : str or mapping, optional
        Hparams overrides (YAML text or a mapping).
    phones_for : str, optional
        What needs a phone model (e.g. ``"realignment"``): :class:`ConfigurationError` unless the
        run's ``target_unit`` is ``phone``.

    Returns
    -------
    hparams_file : pathlib.Path
    hparams : dict

    Example
    -------
    >>> load_run_hparams("no/such/run")[1]
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: no/such/run: no hyperparams.yaml or hparams.yaml (the hparams SpeechBrain \
writes into a recipe run folder: is this the output_folder of a recipe run?)
    """
    hparams_file = run_hparams_file(run_dir)
    hparams = load_inert_hparams(hparams_file, overrides)
    unit = hparams.get("target_unit", "phone")
    if phones_for is not None and unit != "phone":
        raise ConfigurationError(f"{hparams_file}: {phones_for} needs phone targets (target_unit: {unit})")
    return hparams_file, hparams


# ----------------------------------------------------------------------------------------------
# The experiment folder, and the settings its checkpoints were trained with
# ----------------------------------------------------------------------------------------------
def create_experiment_directory(experiment_directory: str, hparams_file: str, overrides: str = "",
                                test_only: bool = False, hparams: Optional[Dict[str, Any]] = None) -> None:
    """SpeechBrain's ``create_experiment_directory`` (folder, log, environment, resolved
    ``hyperparams.yaml``) for an hparams file that may start from another one: the saved
    ``hyperparams.yaml`` holds the whole configuration (:func:`~surprisal_cc.config.expand_hparams`).
    A ``test_only`` evaluation of a trained folder leaves the training's ``hyperparams.yaml`` as it
    was and saves its own as ``hyperparams_test_only.yaml`` (``hyperparams_test_only_random_at_test.yaml``
    and so on where the loaded ``hparams`` change the test-time conditions: :func:`~surprisal_cc.training.run_folder.evaluation_tag`).
    Training resumed from the checkpoints in ``hparams["save_folder"]`` must keep the settings they
    were trained with (:func:`changed_training_settings`, the arguments written out in the file's objects
    included: :func:`argument_references`); a :class:`ConfigurationError` otherwise, and the stored
    ``hyperparams.yaml`` is kept."""
    saved = Path(experiment_directory) / "hyperparams.yaml"
    stored = saved.read_bytes() if if_main_process() and saved.is_file() else None
    resumed = not test_only and stored is not None and hparams is not None and "save_folder" in hparams \
        and any(Path(hparams["save_folder"]).glob("CKPT+*"))
    text = expand_hparams(hparams_file)
    with tempfile.TemporaryDirectory() as folder:
        expanded = Path(folder) / Path(hparams_file).name
        expanded.write_text(text, encoding="utf-8")
        sb.create_experiment_directory(experiment_directory=experiment_directory,
                                       hyperparams_to_save=str(expanded), overrides=overrides)
        if if_main_process() and saved.is_file():  # name the file the configuration came from
            saved.write_text(saved.read_text(encoding="utf-8").replace(
                os.path.abspath(expanded), os.path.abspath(hparams_file), 1), encoding="utf-8")
    if resumed:
        changed = changed_training_settings(parse_yaml_tolerant(stored), parse_yaml_tolerant(saved.read_bytes()),
                                            argument_references(text, overrides))
        if changed:
            saved.write_bytes(stored)  # the configuration of the checkpoints stays beside them
            raise ConfigurationError(f"{experiment_directory} holds checkpoints trained with other settings "
                                     f"({'; '.join(changed)}): give the settings it was trained with, or another "
                                     "--output_folder (or --experiment_root) for a new run")
    record = Path(experiment_directory) / PRECISION_RECORD
    if (not test_only and hparams is not None and if_main_process() and not record.exists()
            and parse_yaml_tolerant(saved.read_bytes()).get("precision") == "auto"):
        from surprisal_cc.data.manifest import atomic_write_text

        atomic_write_text(record, json.dumps({"precision": hparams["precision"]}) + "\n")  # read by resolve_precision
    if test_only and stored is not None:
        from surprisal_cc.training.run_folder import evaluation_tag, test_only_hyperparams_name

        saved.replace(saved.with_name(test_only_hyperparams_name(evaluation_tag(hparams or {}))))
        saved.write_bytes(stored)
