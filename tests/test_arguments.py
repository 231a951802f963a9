"""What each check of a setting counts as a number (:func:`surprisal_cc.checks.is_number` and the checks
built on it): one table, so that a change of what any of them accepts shows here."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, NamedTuple, Type

import numpy as np
import pytest
import torch

from surprisal_cc.experiments import grid_spec
from surprisal_cc.model import model_folder
from surprisal_cc.checks import check_batch_size, check_chunk_seconds, check_routing_seed, is_number
from surprisal_cc.model.calibration import check_calibration_target
from surprisal_cc.data.audio import refuse_short_waveforms, short_audio_problem
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.training.run_checks import check_flops_budget, check_settings, check_test_budget
from surprisal_cc.training.command_line import check_debug_options
from surprisal_cc.training.schedulers import lr_scheduler
from surprisal_cc.runtime import check_threads

NUMBER = frozenset({"int", "float", "np.int64", "np.float32", "np.float64"})
WHOLE = frozenset({"int", "np.int64"})
FRACTION = frozenset({"float", "np.float32", "np.float64"})  # (0, 1) holds no whole number


def kinds(whole: int, real: float) -> Dict[str, Any]:
    """One value of each kind a setting may come as; ``whole`` and ``real`` in the setting's range."""
    return {"bool": True, "int": whole, "float": real, "nan": float("nan"), "inf": float("inf"),
            "np.int64": np.int64(whole), "np.float32": np.float32(real), "np.float64": np.float64(real),
            "str": str(real)}


def refusal(call: Callable[[Any], Any], error: Type[Exception], message: str) -> Callable[[Any], bool]:
    """value -> whether ``call(value)`` passes the check that raises ``error`` with ``message`` in its text
    (an ``error`` of a later check of the same call passes it; any other exception fails the test)."""
    def accepts(value: Any) -> bool:
        try:
            call(value)
        except error as err:
            return message not in str(err)
        return True
    return accepts


def predicate(**options: bool) -> Callable[[Any], bool]:
    return lambda value: is_number(value, **options)


@functools.lru_cache(maxsize=None)
def _model():
    from surprisal_cc.inference import ConditionalASR
    return ConditionalASR.untrained(["AH", "sil"], controller="surprisal")


def _budget_big_fraction(asr, fraction):
    from surprisal_cc.inference.budget import budget_big_fraction
    return budget_big_fraction(asr, fraction)


@functools.lru_cache(maxsize=None)
def _encoder():
    from surprisal_cc.model.architectures import build_encoder
    return build_encoder("conditional", input_size=80, num_outputs=3, controller="big_only")


def _model_config(blank_index: Any) -> None:
    config = {"encoder": {"name": "conditional", "input_size": 80, "num_outputs": 3, "controller": "big_only"},
              "input_features": "fbank", "features": {}, "labels": ["<blank>", "AH", "B"], "blank_index": blank_index}
    model_folder._check_config(config, Path("model.json"), _encoder(), None)


def _settings(key: str, **others: Any) -> Callable[[Any], None]:
    return lambda value: check_settings({key: value, **others})


class Site(NamedTuple):
    name: str
    accepts: Callable[[Any], bool]
    whole: int
    real: float
    accepted: FrozenSet[str]


SITES = [
    Site("is_number", predicate(), 2, 0.5, NUMBER),
    Site("is_number integer", predicate(integer=True), 2, 2.0, WHOLE),
    # arguments: the Python API's own arguments
    Site("check_chunk_seconds", refusal(check_chunk_seconds, ConfigurationError, "long_chunk_s must be"), 20, 20.0,
         NUMBER),
    Site("check_batch_size", refusal(check_batch_size, ConfigurationError, "batch_size must be"), 8, 8.0, WHOLE),
    Site("check_routing_seed", refusal(check_routing_seed, ConfigurationError, "routing seed is"), 3, 3.0, WHOLE),
    # features
    Site("FeatureConfig.sample_rate", refusal(lambda v: FeatureConfig(sample_rate=v), ValueError, "sample_rate must"),
         16000, 16000.0, WHOLE),
    Site("FeatureConfig.frame_length_ms",
         refusal(lambda v: FeatureConfig(frame_length_ms=v), ValueError, "frame_length_ms must"), 25, 25.0, NUMBER),
    Site("FeatureConfig.dither", refusal(lambda v: FeatureConfig(dither=v), ValueError, "dither must"), 1, 0.5, NUMBER),
    # threads: a whole value of any number type
    Site("check_threads", refusal(check_threads, ValueError, "threads must be"), 2, 2.0, NUMBER),
    # data.audio: a model's shortest usable audio (FeatureConfig.min_samples)
    Site("short_audio_problem min_samples", refusal(lambda v: short_audio_problem(800, 16000, v), ValueError,
                                                    "min_samples must"), 400, 400.0, WHOLE),
    Site("refuse_short_waveforms min_samples", refusal(lambda v: refuse_short_waveforms(torch.tensor([800]), 16000, v),
                                                       ValueError, "min_samples must"), 400, 400.0, WHOLE),
    # inference: a loaded model's bias shift and FLOPs budget
    Site("ConditionalASR.set_bias_shift", refusal(lambda v: _model().set_bias_shift(v), ConfigurationError,
                                                  "bias shift must be"), 1, 0.5, NUMBER),
    Site("budget.budget_big_fraction", refusal(lambda v: _budget_big_fraction(_model(), v), ConfigurationError,
                                                       "FLOPs fraction must be"), 1, 0.9, NUMBER),
    # calibration
    Site("check_calibration_target", refusal(check_calibration_target, ValueError, "controller_target_mean must be"),
         0, 0.3, FRACTION),
    # run_settings
    Site("check_debug_options debug_batches",
         refusal(lambda v: check_debug_options({"debug": True, "debug_batches": v}), ConfigurationError,
                 "--debug_batches="), 2, 2.0, WHOLE),
    Site("check_settings batch_size", refusal(_settings("batch_size"), ConfigurationError, "batch_size must"), 8, 8.0,
         WHOLE),
    Site("check_settings lr", refusal(_settings("lr"), ConfigurationError, "lr must"), 1, 1e-3, NUMBER),
    Site("check_settings seed", refusal(_settings("seed"), ConfigurationError, "seed must"), 3, 3.0, WHOLE),
    Site("check_settings test_bias_shifts",
         refusal(lambda v: check_settings({"test_bias_shifts": [0.0, v]}), ConfigurationError, "test_bias_shifts must"),
         1, 0.5, NUMBER),
    Site("check_settings controller_target_mean",
         refusal(_settings("controller_target_mean"), ConfigurationError, "controller_target_mean must"), 0, 0.3,
         FRACTION),
    Site("check_settings controller_target_var",
         refusal(_settings("controller_target_var", controller_target_mean=0.3), ConfigurationError,
                 "controller_target_var must"), 0, 0.02, NUMBER),
    Site("check_flops_budget", refusal(lambda v: check_flops_budget({"flops_budget": v}, apc=None),
                                       ConfigurationError, "flops_budget must be"), 6_400_000, 6.4e6, NUMBER),
    Site("check_test_budget", refusal(lambda v: check_test_budget({"test_flops_fraction": v}), ConfigurationError,
                                      "test_flops_fraction must be"), 0, 0.5, FRACTION),
    # model_folder: model.json
    Site("model.json blank_index", refusal(_model_config, model_folder.ModelFormatError, "blank_index"), 0, 0.0,
         WHOLE),
    Site("model.json beam_size", refusal(lambda v: model_folder._check_decoding({"beam_size": v}, Path("model.json")),
                                         model_folder.ModelFormatError, "beam_size must"), 4, 4.0, WHOLE),
    Site("model.json blank_penalty",
         refusal(lambda v: model_folder._check_decoding({"blank_penalty": v}, Path("model.json")),
                 model_folder.ModelFormatError, "blank_penalty must"), 1, 0.5, NUMBER),
    # schedulers
    Site("lr_scheduler lr", refusal(lambda v: lr_scheduler("hold_decay", initial_value=v), ValueError, "lr must"),
         1, 1e-3, NUMBER),
    Site("lr_scheduler number_of_epochs",
         refusal(lambda v: lr_scheduler("hold_decay", 1e-3, number_of_epochs=v), ValueError, "number_of_epochs must"),
         5, 5.0, WHOLE),
    Site("lr_scheduler lr_hold_fraction",
         refusal(lambda v: lr_scheduler("hold_decay", 1e-3, hold_fraction=v), ValueError, "lr_hold_fraction must"),
         0, 0.4, NUMBER),
    Site("lr_scheduler lr_final_fraction",
         refusal(lambda v: lr_scheduler("hold_decay", 1e-3, final_fraction=v), ValueError, "lr_final_fraction must"),
         1, 0.05, NUMBER),
    Site("lr_scheduler lr_annealing_factor",
         refusal(lambda v: lr_scheduler("newbob", 1e-3, annealing_factor=v), ValueError, "lr_annealing_factor must"),
         1, 0.8, NUMBER),
    # grid_spec: a grid file's seeds
    Site("grid seeds", refusal(lambda v: grid_spec._check_shape("grid.yaml", {"groups": [{"name": "a"}], "seeds": [v]}),
                               grid_spec.GridError, "seeds must be"), 1, 1.0, WHOLE),
    Site("grid group's vary seed",
         refusal(lambda v: grid_spec._check_shape("grid.yaml", {"groups": [{"name": "a", "vary": {"seed": [v]}}]}),
                 grid_spec.GridError, "vary: seed of group 'a' must"), 1, 1.0, WHOLE),
]


@pytest.mark.parametrize("site", SITES, ids=[site.name for site in SITES])
def test_what_each_check_counts_as_a_number(site: Site) -> None:
    """bool, int, float, nan, inf, numpy scalars and a string, each in the setting's range: the kinds accepted."""
    accepted = {kind for kind, value in kinds(site.whole, site.real).items() if site.accepts(value)}
    assert accepted == site.accepted


def test_messages_name_the_setting_and_the_value() -> None:
    """The checks' one-line messages, as they were before they shared is_number."""
    with pytest.raises(ConfigurationError, match=r"^lr must be a positive number, got True\n"
                                                 r"seed must be a whole number of at least 0, got 1.5$"):
        check_settings({"lr": True, "seed": 1.5})
    with pytest.raises(ValueError, match=r"^lr must be a positive number, got inf$"):
        lr_scheduler("hold_decay", initial_value=float("inf"))
    with pytest.raises(ValueError, match=r"^threads must be a positive number of threads \(or None: torch's "
                                         r"setting\), got nan$"):
        check_threads(float("nan"))
    with pytest.raises(model_folder.ModelFormatError, match=r"^model.json: blank_penalty must be a finite number, "
                                                            r"got inf$"):
        model_folder._check_decoding({"blank_penalty": float("inf")}, Path("model.json"))
    with pytest.raises(ConfigurationError, match=r"^bias shift must be a finite number, got '1.5'$"):
        _model().set_bias_shift("1.5")
    with pytest.raises(ConfigurationError, match=r"^FLOPs fraction must be a finite number, got True$"):
        _budget_big_fraction(_model(), True)
    with pytest.raises(ValueError, match=r"^min_samples must be a whole number of at least 1 "
                                         r"\(FeatureConfig.min_samples\), got 400.0$"):
        refuse_short_waveforms(torch.tensor([800]), 16000, 400.0)
