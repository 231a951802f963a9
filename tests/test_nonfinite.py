"""A non-finite training loss skips its batch (no NaN reaches the weights) and, past the patience,
stops the run with a message that names the utterances and says what to do."""
from types import SimpleNamespace

import pytest
import speechbrain as sb
import torch

from surprisal_cc.errors import TrainingDivergedError
from surprisal_cc.training.base_brain import FiniteLossBrain


class RegressionBrain(FiniteLossBrain):
    def compute_forward(self, batch, stage):
        return self.modules.linear(batch.x)

    def compute_objectives(self, predictions, batch, stage):
        return ((predictions - batch.y) ** 2).mean()


def make_batches(poisoned=(), n=6):
    g = torch.Generator().manual_seed(0)
    batches = []
    for i in range(n):
        x = torch.randn(4, 3, generator=g)
        if i in poisoned:
            x[1, 2] = float("nan")
        batches.append(SimpleNamespace(id=[f"utt{i}-{j}" for j in range(4)], x=x, y=x.sum(-1, keepdim=True)))
    return batches


def train(batches, patience=3):
    torch.manual_seed(0)
    brain = RegressionBrain(
        modules={"linear": torch.nn.Linear(3, 1)},
        opt_class=lambda params: torch.optim.SGD(params, lr=0.1),
        hparams={"lr": 0.1},
        run_opts={"device": "cpu", "noprogressbar": True, "nonfinite_patience": patience},
    )
    loader = torch.utils.data.DataLoader(batches, batch_size=None, collate_fn=lambda b: b)
    brain.fit(range(1), loader)
    return brain


def test_nonfinite_batch_is_skipped_and_weights_stay_as_without_it():
    batches = make_batches(poisoned=(2,))
    brain = train(batches)
    clean = train([b for i, b in enumerate(batches) if i != 2])
    weights = brain.modules.linear.weight
    assert torch.isfinite(weights).all()
    assert torch.equal(weights, clean.modules.linear.weight)
    assert brain.nonfinite_ids == ["utt2-0", "utt2-1", "utt2-2", "utt2-3"]
    assert torch.isfinite(torch.tensor(brain.avg_train_loss))


def test_speechbrain_default_would_have_poisoned_the_weights():
    """What the guard prevents: sb.Brain steps on the NaN loss of the same data, and from then on every
    loss is NaN (with a patience of 3 this one bad batch ends its run)."""

    class PlainBrain(sb.Brain):
        compute_forward = RegressionBrain.compute_forward
        compute_objectives = RegressionBrain.compute_objectives

    torch.manual_seed(0)
    brain = PlainBrain(modules={"linear": torch.nn.Linear(3, 1)},
                       opt_class=lambda params: torch.optim.SGD(params, lr=0.1),
                       run_opts={"device": "cpu", "noprogressbar": True, "nonfinite_patience": 10})
    loader = torch.utils.data.DataLoader(make_batches(poisoned=(2,)), batch_size=None, collate_fn=lambda b: b)
    brain.fit(range(1), loader)
    assert not torch.isfinite(brain.modules.linear.weight).all()


def test_patience_exhausted_names_utterances_and_remedy():
    with pytest.raises(TrainingDivergedError) as err:
        train(make_batches(poisoned=(1, 3, 4)), patience=2)
    message = str(err.value)
    assert "3 training batches of epoch" in message
    for utt in ("utt1-0", "utt3-2", "utt4-3"):
        assert utt in message
    assert "lr: 0.1" in message and "nonfinite_patience" in message


def test_evaluating_the_best_checkpoint_needs_one(tmp_path):
    """Without a checkpoint that records the key, SpeechBrain would evaluate the untrained model."""
    from speechbrain.utils.checkpoints import Checkpointer

    from surprisal_cc.errors import ConfigurationError

    linear = torch.nn.Linear(3, 1)
    brain = RegressionBrain(modules={"linear": linear}, opt_class=lambda params: torch.optim.SGD(params, lr=0.1),
                            run_opts={"device": "cpu", "noprogressbar": True},
                            checkpointer=Checkpointer(tmp_path, {"linear": linear}))
    loader = torch.utils.data.DataLoader(make_batches(), batch_size=None, collate_fn=lambda b: b)
    brain.checkpointer.save_checkpoint(meta={"end-of-epoch": False})  # taken within an epoch: no loss recorded
    with pytest.raises(ConfigurationError, match="holds no checkpoint of a validated epoch \\(loss\\)"):
        brain.evaluate(loader, min_key="loss")
    brain.checkpointer.save_checkpoint(meta={"loss": 1.0})
    assert brain.evaluate(loader, min_key="loss") >= 0
