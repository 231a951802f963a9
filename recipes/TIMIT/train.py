#!/usr/bin/env python3
"""TIMIT phone recognition (39 folded phones) with surprisal-triggered conditional computation.

Prepares TIMIT (LDC layout; SA sentences removed, 61 -> 39 folding, the 50-speaker dev set, the
192-utterance core test set), loads the LibriSpeech-pretrained APC model (``--apc_path``),
caches features and surprisal, calibrates the controller, trains with CTC (checkpoints selected
by dev PER) and decodes the core test set with CTC beam search.

    python recipes/TIMIT/train.py hparams/TIMIT/conditional_ctc.yaml \
        --data_folder=/path/to/TIMIT --apc_path=results/LibriSpeech/apc/apc.pt

Re-running the same command resumes an interrupted run. Results: README.md beside this file.
"""
import sys

from surprisal_cc import recipe
from surprisal_cc.data import prepare_timit

if __name__ == "__main__":
    with recipe.recipe_errors():  # bad configuration or data: one line "error: ...", no traceback
        hparams, run_opts = recipe.start_experiment(sys.argv[1:])
        # Manifests of train / dev / core test, phones folded and checked (main process first).
        manifests = recipe.prepare_data(prepare_timit, hparams)
        # APC (loaded, or pretrained on TIMIT train), feature cache, controller calibration,
        # CTC training with checkpoint selection, test decoding.
        recipe.train_and_test(hparams, manifests, run_opts)
