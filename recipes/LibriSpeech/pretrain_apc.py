#!/usr/bin/env python3
"""Pretrain the APC model (features + surprisal) on LibriSpeech audio and export the best model.

    python recipes/LibriSpeech/pretrain_apc.py hparams/LibriSpeech/apc.yaml \
        --data_folder=/path/to/LibriSpeech --subsets="[train-clean-100]"

Resumable: re-running the same command continues from the last checkpoint.
"""
from surprisal_cc.recipe import main_entry

if __name__ == "__main__":
    main_entry()
