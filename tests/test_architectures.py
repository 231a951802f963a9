"""Tests for surprisal_cc.model.architectures: the model files, build_encoder and its settings, the names that
select them (old dotted names: test_aliases.py)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from surprisal_cc.model.architectures import MODELS_DIR, architectures, build_encoder, encoder_names, model_file
from surprisal_cc.model.controllers import LearnedController
from surprisal_cc.config import load_hparams_file

D, H, V = 8, 4, 5  # input size, GRU hidden size, CTC outputs
T = 10


def test_build_encoder_unknown_names():
    with pytest.raises(ValueError) as info:
        build_encoder("transformer", D, V)
    for name in ("transformer", "conditional", "act", "pondernet"):
        assert name in str(info.value)
    with pytest.raises(ValueError) as info:
        build_encoder("conditional", D, V, architecture="model9")
    assert architectures("conditional") == ["model1", "model2", "model3", "paper"]
    for name in ("model9", *architectures("conditional")):
        assert name in str(info.value)
    with pytest.raises(ValueError, match="small_only"):
        build_encoder("conditional", D, V, controller="oracle")


def test_build_encoder_options():
    torch.manual_seed(0)
    enc = build_encoder("conditional", D, V, controller="learned", hidden_size=H, dropout=0.0,
                        controller_options={"hidden_size": 12, "weight": 3.0},
                        conditional_options={"execution": "masked", "test_bias_shift": 1.0})
    assert isinstance(enc.controller, LearnedController) and enc.controller.net[0].in_features == D
    assert enc.execution == "masked" and enc.test_bias_shift == 1.0
    out = enc.eval()(torch.randn(2, T, D), torch.tensor([T, 4]))
    assert out.log_probs.shape == (2, T, V)


@pytest.mark.parametrize("architecture", ["model1", "model2", "model3"])
def test_appendix_architectures_run(architecture):
    torch.manual_seed(0)
    enc = build_encoder("conditional", D, V, architecture=architecture, hidden_size=H, dropout=0.0,
                        controller="random").eval()
    out = enc(torch.randn(2, T, D), torch.tensor([T, 3]))
    assert out.log_probs.shape == (2, T, V)
    torch.testing.assert_close(out.log_probs.logsumexp(-1), torch.zeros(2, T), rtol=0, atol=1e-5)
    assert enc.post_net is None
    assert (enc.pre_net is None) == (architecture == "model3")
    if architecture == "model2":
        assert enc.pre_net.dropout.p == 0.0  # dropout=0.0 requested


def test_the_hparams_comment_lists_every_encoder():
    yaml = (Path(__file__).parents[1] / "hparams/common/conditional_ctc.yaml").read_text()
    listed = re.search(r"^encoder: \w+ .*surprisal_cc/models: (.*)$", yaml, flags=re.M).group(1)
    assert set(listed.split(" | ")) == set(encoder_names())


def test_model_files_of_another_folder(tmp_path):
    """``models_dir`` lists and finds the model files of another folder; the package's are package data."""
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "small.yaml").write_text("encoder: 1\n")
    (tmp_path / "empty").mkdir()
    assert encoder_names(tmp_path) == ["tiny"] and architectures("tiny", tmp_path) == ["small"]
    assert model_file("tiny", "small", tmp_path) == tmp_path / "tiny" / "small.yaml"
    with pytest.raises(ValueError, match=r"no architecture 'big' for encoder 'tiny'.*\['small'\]"):
        model_file("tiny", "big", tmp_path)
    assert encoder_names(tmp_path / "missing") == []
    assert MODELS_DIR == Path(__file__).parents[1] / "surprisal_cc" / "model" / "graphs"

