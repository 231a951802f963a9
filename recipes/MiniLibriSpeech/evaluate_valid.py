#!/usr/bin/env python3
"""Decode the validation split with a trained run's best checkpoint under several encoder settings.

One trained model, several inference rules: each ``--setting`` is a comma-separated list of
``attribute=value`` assignments on the encoder (e.g. PonderNet's ``inference=truncated,tail_mass=0.05``),
applied before the validation split (held-out train-clean-5 speakers, never the test set) is decoded
with the test-time search. The run's own command line follows ``--``, with ``--test_only`` so that
its training files stay as they are::

    python recipes/MiniLibriSpeech/evaluate_valid.py out.json --setting inference=expected \\
        --setting inference=truncated,tail_mass=0.05 -- hparams/MiniLibriSpeech/conditional_ctc.yaml \\
        --encoder=pondernet --output_folder=results/... --test_only [the run's other overrides]

Writes ``out.json``: one row per setting with PER, FLOPs per frame (from what ran), their
components and the mean steps or big-network fraction.
"""
import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

import torch

from surprisal_cc.training.brain import ConditionalCTCBrain
from surprisal_cc.data import prepare_mini_librispeech
from surprisal_cc.training.datasets import dataio_prep
from surprisal_cc.training.frozen_features import feature_cache, obtain_apc
from surprisal_cc.model.nnet import unwrap
from surprisal_cc.training.recipe import prepare_labels, prepare_manifests, recipe_errors
from surprisal_cc.training.run_settings import create_experiment_directory, load_hparams
from surprisal_cc.training.command_line import parse_arguments


def parse_setting(text: str) -> Dict[str, object]:
    """``"inference=truncated,tail_mass=0.05"`` -> ``{"inference": "truncated", "tail_mass": 0.05}``."""
    setting: Dict[str, object] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --setting {text!r}: write attribute=value pairs separated by commas")
        try:
            setting[key] = json.loads(value)
        except json.JSONDecodeError:
            setting[key] = value
    return setting


def trained_values(encoder: torch.nn.Module, settings: List[Dict[str, object]]) -> Dict[str, object]:
    """The encoder's own value of every attribute the settings change (one error line for a missing one)."""
    keys = sorted({key for setting in settings for key in setting})
    for key in keys:
        if not hasattr(encoder, key):
            raise SystemExit(f"error: --setting: {type(encoder).__name__} has no attribute {key!r}")
    return {key: getattr(encoder, key) for key in keys}


def apply_setting(encoder: torch.nn.Module, trained: Dict[str, object], setting: Dict[str, object]) -> None:
    """Set ``setting`` on the encoder, every other attribute of ``trained`` back to the run's value:
    a row never inherits the row before it. A value the encoder refuses is one error line."""
    for key, value in {**trained, **setting}.items():
        try:
            setattr(encoder, key, value)
        except ValueError as err:
            raise SystemExit(f"error: --setting {key}={value!r}: {err}")


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="JSON file to write")
    parser.add_argument("--setting", action="append", required=True, help="attribute=value[,attribute=value]")
    args, run_argv = parser.parse_known_args(argv)
    run_argv = [a for a in run_argv if a != "--"]
    settings = [parse_setting(s) for s in args.setting]

    with recipe_errors():
        hparams_file, run_opts, overrides = parse_arguments(run_argv)
        hparams = load_hparams(hparams_file, overrides, run_opts)
        create_experiment_directory(hparams["output_folder"], hparams_file, overrides,
                                    test_only=bool(run_opts.get("test_only", False)), hparams=hparams)
        manifests = prepare_manifests(prepare_mini_librispeech, hparams)
        prepare_labels(hparams, manifests)
        apc = obtain_apc(hparams, manifests, run_opts)
        cache = feature_cache(hparams, manifests, apc, device=run_opts.get("device", "cpu"))
        datasets = dataio_prep(hparams, manifests, cache)
        brain = ConditionalCTCBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams,
                                    run_opts=run_opts, checkpointer=hparams["checkpointer"], apc=apc,
                                    manifests=manifests)
        brain.write_results = lambda *a, **k: None  # the rows below are validation, not test, results
        encoder = unwrap(brain.modules.encoder)
        trained = trained_values(encoder, settings)
        rows = []
        for setting in settings:
            apply_setting(encoder, trained, setting)
            torch.manual_seed(hparams["seed"])  # sampled halting: the same draws for every run of this script
            loss = brain.evaluate(datasets["valid"], min_key=hparams["selection_metric"],
                                  test_loader_kwargs=hparams["test_loader_options"])
            summary = brain.stage_summary()
            rows.append({"setting": setting, "loss": float(loss), "epoch": hparams["epoch_counter"].current,
                         **{k: v for k, v in summary.items()}})
            print(json.dumps(rows[-1]), flush=True)
    Path(args.out).write_text(json.dumps({"split": "valid", "rows": rows}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
