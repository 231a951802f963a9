#!/usr/bin/env python3
"""Mini-LibriSpeech phone recognition with surprisal-triggered conditional computation.

Prepares train-clean-5 / held-out validation speakers / dev-clean-2, pretrains or loads the APC
model, calibrates the controller, trains with CTC and decodes dev-clean-2 with beam search.

    python recipes/MiniLibriSpeech/train.py hparams/MiniLibriSpeech/conditional_ctc.yaml \
        --data_folder=data/MiniLibriSpeech [--controller=random] [--device=cuda:0]
"""
from surprisal_cc.data import prepare_mini_librispeech
from surprisal_cc.recipe import main_entry

if __name__ == "__main__":
    main_entry(prepare_mini_librispeech)
