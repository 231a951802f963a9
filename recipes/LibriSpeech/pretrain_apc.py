#!/usr/bin/env python3
"""Pretrain the APC model (features + surprisal) on LibriSpeech audio and export the best model.

    python recipes/LibriSpeech/pretrain_apc.py hparams/LibriSpeech/apc.yaml \\
        --data_folder=/path/to/LibriSpeech --subsets="[train-clean-100]"

Resumable: re-running the same command continues from the last checkpoint. The exported file
(``apc_export_path``) is what the ASR recipes load with ``--apc_path``. Results: README.md here.
"""
import sys

from surprisal_cc import recipe
from surprisal_cc.data import prepare_librispeech

if __name__ == "__main__":
    with recipe.recipe_errors():  # bad configuration or data: one line "error: ...", no traceback
        hparams, run_opts = recipe.start_experiment(sys.argv[1:], output_key="apc_output_folder")
        # Audio-only manifests: the listed subsets, a held-out fraction for validation.
        manifests = recipe.prepare_data(prepare_librispeech, hparams)
        # Filterbanks cached once, APC trained on them (APCBrain), the best model exported.
        recipe.pretrain_apc_on(hparams, {"train": manifests["train"], "valid": manifests["valid"]}, run_opts)
