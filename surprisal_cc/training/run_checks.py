"""The checks of a recipe run's loaded settings, before any data is read: types and ranges
(:func:`check_settings`), labels and ``num_outputs``, the APC file and whether it fits the model, a FLOPs
budget, a ``--test_only`` run's checkpoint, a test budget, a bias sweep, the selection metric, and the
phones of the prepared manifests. :func:`~surprisal_cc.training.run_settings.load_hparams` runs them; each
refuses a setting with a :class:`~surprisal_cc.errors.ConfigurationError` of one line.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, Mapping, Optional, Sequence

from torch import nn

from surprisal_cc.model.apc import APCModel
from surprisal_cc.checks import is_number
from surprisal_cc.model.calibration import CALIBRATION_METHODS, check_calibration_target
from surprisal_cc.data.lexicon import G2P_CHOICES
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.flops import module_macs, static_flop_rows
from surprisal_cc.training.frozen_features import PRETRAIN_OR_GIVE_APC, load_run_apc, run_apc_key
from surprisal_cc.model.nnet import bias_shift_problem, runs_apc


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
    >>> from surprisal_cc.model.feature_config import FeatureConfig
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


def check_test_controller(hparams: Mapping, test_only: bool) -> None:
    """``test_controller`` decodes a trained run with another controller: it needs ``--test_only``
    (``test_only``), a run trained with random routing (``controller`` random, ``random_p_big`` 0.5), and
    ``controller_at_train`` and ``controller_at_test`` left True; else a ConfigurationError line.

    Example
    -------
    >>> check_test_controller({"test_controller": "surprisal", "controller": "random"}, test_only=True)
    >>> check_test_controller({"test_controller": "surprisal", "controller": "learned"}, test_only=True)
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: test_controller surprisal: only a run trained with random routing (controller random, random_p_big 0.5) can be decoded with another controller; this one is 'learned'
    """
    swapped = hparams.get("test_controller")
    if not swapped:
        return
    controller = hparams.get("controller")
    if not test_only:
        problem = ("it decodes a trained run with another controller; give --test_only (a training run trains its own "
                   "controller), or set test_controller null")
    elif controller != "random" or float(hparams.get("random_p_big", 0.5)) != 0.5:
        problem = ("only a run trained with random routing (controller random, random_p_big 0.5) can be decoded with "
                   f"another controller; this one is {controller!r}"
                   + (f" with random_p_big {hparams.get('random_p_big')}" if controller == "random" else ""))
    elif not (hparams.get("controller_at_train", True) and hparams.get("controller_at_test", True)):
        problem = "leave controller_at_train and controller_at_test True (test_controller replaces the controller)"
    else:
        return
    raise ConfigurationError(f"test_controller {swapped}: {problem}")


def check_test_only(hparams: Mapping, run_opts: Mapping) -> None:
    """``--test_only`` needs a trained run: its ``checkpointer`` must find a checkpoint of a validated
    epoch (one that records ``selection_metric``), not only a checkpoint taken within an epoch; and
    ``test_controller`` must fit (:func:`check_test_controller`)."""
    check_test_controller(hparams, bool(run_opts.get("test_only")))
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
