#!/usr/bin/env python3
"""Pretrain the APC model (features + surprisal) on LibriSpeech audio and export the best model.

    python recipes/LibriSpeech/pretrain_apc.py hparams/LibriSpeech/apc.yaml \\
        --data_folder=/path/to/LibriSpeech --subsets="[train-clean-100]"

Resumable: re-running the same command continues from the last checkpoint. The exported file
(``apc_export_path``) is what the ASR recipes load with ``--apc_path``. Results: README.md here.
"""
import sys

import speechbrain as sb

from surprisal_cc.data import prepare_librispeech
from surprisal_cc.training.frozen_features import pretrain_apc_on
from surprisal_cc.training.recipe import debug_manifests, prepare_manifests, recipe_errors
from surprisal_cc.training.run_settings import create_experiment_directory, load_hparams
from surprisal_cc.training.command_line import parse_arguments


def main(argv):
    # Command line and hparams, the DDP group under torchrun, the experiment folder.
    hparams_file, run_opts, overrides = parse_arguments(argv)
    sb.utils.distributed.ddp_init_group(run_opts)
    hparams = load_hparams(hparams_file, overrides, run_opts)
    create_experiment_directory(hparams["apc_output_folder"], hparams_file, overrides, hparams=hparams)

    # Audio-only manifests: the listed subsets, a held-out fraction for validation.
    manifests = prepare_manifests(prepare_librispeech, hparams)
    # --debug: each split cut to its first debug_batches x apc_batch_size utterances, in the debug
    # run's own folder (<apc_output_folder>-debug)
    manifests = debug_manifests(hparams, manifests, run_opts, "apc_output_folder", "apc_batch_size")

    # Filterbanks cached once, APC trained on them (APCBrain), the best model exported.
    pretrain_apc_on(hparams, {"train": manifests["train"], "valid": manifests["valid"]}, run_opts)


if __name__ == "__main__":
    with recipe_errors():  # bad configuration or data: one line "error: ...", no traceback
        main(sys.argv[1:])
