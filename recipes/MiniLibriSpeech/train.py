#!/usr/bin/env python3
"""Mini-LibriSpeech phone recognition with surprisal-triggered conditional computation.

Prepares train-clean-5 (minus held-out validation speakers) and dev-clean-2, loads or pretrains
the APC model, caches features and surprisal, calibrates the controller, trains with CTC
(checkpoints selected by validation PER) and decodes dev-clean-2 with CTC beam search.

    python recipes/MiniLibriSpeech/train.py hparams/MiniLibriSpeech/conditional_ctc.yaml \\
        --data_folder=data/MiniLibriSpeech [--controller=random] [--device=cuda:0]

Re-running the same command resumes an interrupted run. Results: README.md beside this file.
"""
import sys

from surprisal_cc import recipe
from surprisal_cc.data import prepare_mini_librispeech

if __name__ == "__main__":
    with recipe.recipe_errors():  # bad configuration or data: one line "error: ...", no traceback
        hparams, run_opts = recipe.start_experiment(sys.argv[1:])
        # Manifests of the three splits, labels checked (main process first, then read by all).
        manifests = recipe.prepare_data(prepare_mini_librispeech, hparams)
        # APC (loaded, or pretrained on the training split), feature cache, controller calibration,
        # CTC training with checkpoint selection, test decoding.
        recipe.train_and_test(hparams, manifests, run_opts)
