"""The training batches that surprisal_cc.training.datasets's loader options give a SpeechBrain Brain: ``sorting``."""
from __future__ import annotations

import csv

import pytest
import speechbrain as sb
import torch

from surprisal_cc.training.datasets import dataio_prep, training_loader_options
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.training.labels import label_encoder_for, phone_set

DURATIONS = [3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.0, 6.0, 2.5, 7.0]


def training_batches(tmp_path, sorting, dynamic=False):
    """Utterance ids of each training batch of one epoch, as the recipes' Brain makes them."""
    manifest = tmp_path / "train.csv"
    with open(manifest, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["ID", "duration", "wav", "wrd", "phn"])
        writer.writerows([f"u{i}", d, "none.flac", "A", "AH"] for i, d in enumerate(DURATIONS))
    hparams = {"label_encoder": label_encoder_for(phone_set("librispeech")), "target_unit": "phone",
               "sorting": sorting, "dynamic_batching": dynamic, "max_batch_length": 10.0, "num_buckets": 2, "seed": 1,
               "train_loader_options": {"batch_size": 3, "shuffle": True, "num_workers": 0}}
    train = dataio_prep(hparams, {"train": str(manifest)}, cache=None)["train"]
    train.set_output_keys(["id"])
    brain = sb.Brain(modules={"m": torch.nn.Linear(1, 1)}, hparams={"sorting": sorting}, run_opts={"device": "cpu"})
    loader = brain.make_dataloader(train, sb.Stage.TRAIN, **training_loader_options(hparams, train))
    return [list(batch.id) for batch in loader]


def by_duration(ids):
    return [DURATIONS[int(i[1:])] for i in ids]


@pytest.mark.parametrize("sorting", ["ascending", "descending"])
def test_sorted_training_batches_keep_the_sorted_order(tmp_path, sorting):
    ids = [i for batch in training_batches(tmp_path, sorting) for i in batch]
    assert by_duration(ids) == sorted(DURATIONS, reverse=sorting == "descending")


def test_random_sorting_shuffles(tmp_path):
    ids = [i for batch in training_batches(tmp_path, "random") for i in batch]
    assert sorted(ids) == sorted(f"u{i}" for i in range(len(DURATIONS)))
    assert by_duration(ids) != sorted(DURATIONS) and ids != [f"u{i}" for i in range(len(DURATIONS))]


def test_dynamic_batches_follow_the_sorting(tmp_path):
    longest = [max(by_duration(batch)) for batch in training_batches(tmp_path, "ascending", dynamic=True)]
    assert len(longest) > 1 and longest == sorted(longest)
    batches = training_batches(tmp_path, "random", dynamic=True)
    assert sorted(i for batch in batches for i in batch) == sorted(f"u{i}" for i in range(len(DURATIONS)))


def test_unknown_sorting_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="sorting must be"):
        training_loader_options({"sorting": "shortest", "train_loader_options": {"batch_size": 2}}, None)
