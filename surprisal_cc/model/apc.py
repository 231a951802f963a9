"""Autoregressive predictive coding (APC) model: features h_t and per-frame surprisal.

Architecture (paper, Sec. 4.2 and Table 1): 2 x [unidirectional GRU 512 -> dropout 0.5 ->
Linear 512 -> LeakyReLU(0.125)], then a linear head 512 -> 80 that predicts frame x_t from
the state after x_{t-1}. A causal zero frame is put in front of the sequence, so one pass over
``[0, x_1, ..., x_T]`` yields both the prediction ``xhat_t`` (from the state after x_{t-1}) and
the feature ``h_t`` (the state after x_t). An optional learnable affine input scale
(weight 0.1, bias 0, as in the authors' code) is applied to the encoder input only: targets
are the raw filterbank frames, so the scale cannot shrink the loss.

Surprisal(x_t) = 0.5 * ||x_t - xhat_t||^2 (negative log-likelihood of a unit-variance Gaussian,
up to a constant).

With ``residual=True`` the head predicts the change from the previous frame,
``xhat_t = x_{t-1} + head(state after x_{t-1})`` (x_0 = 0). The untrained model is then the
copy-previous-frame predictor, a strong baseline on 20 ms log-mel frames that the paper's head
(``xhat_t = head(...)``) must first learn to match. Features, surprisal and MACs (+80 adds per
frame) are otherwise the same.

Example
-------
>>> import torch
>>> apc = APCModel().eval()
>>> out = apc(torch.randn(2, 7, 80), torch.tensor([7, 4]))
>>> out.features.shape, out.surprisal.shape
(torch.Size([2, 7, 512]), torch.Size([2, 7]))
>>> sum(p.numel() for p in apc.parameters())
3054674
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Mapping, NamedTuple, Optional

import torch
from torch import Tensor, nn

from surprisal_cc.model.nnet import LEAKY_SLOPE, lengths_to_mask


class APCOutput(NamedTuple):
    """Output of :class:`APCModel`: features h_t, predictions xhat_t and surprisal per frame."""

    features: Tensor  # (B, T, H): h_t, has seen x_1..x_t
    prediction: Tensor  # (B, T, D): xhat_t, from the state after x_{t-1}
    surprisal: Tensor  # (B, T): 0.5 * ||x_t - xhat_t||^2, zero on padding


class AffineScale(nn.Module):
    """y = weight * x + bias with scalar learnable weight and bias.

    Arguments
    ---------
    weight : float
        Initial weight (0.1, as in the authors' code).
    bias : float
        Initial bias.

    Example
    -------
    >>> import torch
    >>> AffineScale(weight=0.5, bias=1.0)(torch.tensor([2.0, 4.0])).tolist()
    [2.0, 3.0]
    """

    def __init__(self, weight: float = 0.1, bias: float = 0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(float(weight)))
        self.bias = nn.Parameter(torch.tensor(float(bias)))

    def forward(self, x: Tensor) -> Tensor:
        """``weight * x + bias``, elementwise."""
        return self.weight * x + self.bias


class APCModel(nn.Module):
    """Causal GRU predictor of the next filterbank frame.

    Arguments
    ---------
    input_size : int
        Filterbank channels D (80).
    hidden_size : int
        Width H of the GRUs, the projections and the features h_t (512).
    num_layers : int
        Number of [GRU -> dropout -> Linear -> LeakyReLU] blocks (2).
    dropout : float
        Dropout before each projection.
    leaky_slope : float
        Negative slope of the LeakyReLU (0.125).
    input_scale : bool
        Apply a learnable :class:`AffineScale` to the encoder input.
    residual : bool
        Predict the change from the previous frame (see the module docstring).

    Example
    -------
    >>> import torch
    >>> apc = APCModel(hidden_size=16).eval()
    >>> out = apc(torch.randn(2, 5, 80), torch.tensor([5, 3]))
    >>> out.features.shape, out.prediction.shape
    (torch.Size([2, 5, 16]), torch.Size([2, 5, 80]))
    >>> out.surprisal[1, 3:].tolist()  # padding
    [0.0, 0.0]
    >>> APCModel().macs_per_frame(), APCModel(residual=True).macs_per_frame()
    (3054672, 3054752)
    """

    def __init__(
        self,
        input_size: int = 80,
        hidden_size: int = 512,
        num_layers: int = 2,
        dropout: float = 0.5,
        leaky_slope: float = LEAKY_SLOPE,
        input_scale: bool = True,
        residual: bool = False,
    ):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.residual = residual
        self.input_scale = AffineScale() if input_scale else nn.Identity()
        self.grus = nn.ModuleList()
        self.projections = nn.ModuleList()
        for layer in range(num_layers):
            self.grus.append(nn.GRU(input_size if layer == 0 else hidden_size, hidden_size, batch_first=True))
            self.projections.append(
                nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden_size, hidden_size), nn.LeakyReLU(leaky_slope))
            )
        self.head = nn.Linear(hidden_size, input_size)

    def encode(self, x: Tensor) -> Tensor:
        """Causal encoder states (B, T, H): state t has seen inputs 0..t only.

        The GRUs are unidirectional, so padding at the end of a sequence never reaches its real
        frames; no packing is needed.

        Arguments
        ---------
        x : torch.Tensor
            (B, T, input_size) input frames.

        Returns
        -------
        torch.Tensor
            (B, T, hidden_size) states.
        """
        h = self.input_scale(x)
        for gru, projection in zip(self.grus, self.projections):
            h = projection(gru(h)[0])
        return h

    def forward(self, x: Tensor, lengths: Tensor) -> APCOutput:
        """Features, predictions and surprisal of a batch of filterbank sequences.

        Arguments
        ---------
        x : torch.Tensor
            (B, T, input_size) filterbank frames.
        lengths : torch.Tensor
            (B,) number of real frames of each sequence.

        Returns
        -------
        APCOutput
            ``features`` (B, T, H) and ``surprisal`` (B, T), zero on padding, and
            ``prediction`` (B, T, input_size).
        """
        shifted = torch.cat([x.new_zeros(x.shape[0], 1, x.shape[2]), x], dim=1)
        states = self.encode(shifted)
        prediction = self.head(states[:, :-1])
        if self.residual:
            prediction = prediction + shifted[:, :-1]
        mask = lengths_to_mask(lengths, x.shape[1])
        surprisal = 0.5 * (x - prediction).pow(2).sum(-1) * mask
        return APCOutput(features=states[:, 1:] * mask.unsqueeze(-1), prediction=prediction, surprisal=surprisal)

    @torch.no_grad()
    def init_output_bias(self, frames: Tensor) -> None:
        """Start the prediction head at the mean frame of ``frames`` (N, input_size).

        Log-mel values sit far from zero (around -16 to 8), and a head starting at zero needs
        thousands of small optimiser steps just to learn that offset. Starting from the data mean
        makes the untrained model a global-mean predictor. A residual head predicts changes, whose
        mean is about zero: its bias starts at zero (the copy-previous-frame predictor).

        Arguments
        ---------
        frames : torch.Tensor
            Filterbank frames, any shape ending in ``input_size``.

        Example
        -------
        >>> import torch
        >>> apc = APCModel(hidden_size=8)
        >>> apc.init_output_bias(torch.full((4, 80), -3.0))
        >>> apc.head.bias[:3].tolist()
        [-3.0, -3.0, -3.0]
        """
        if self.residual:
            self.head.bias.zero_()
        else:
            self.head.bias.copy_(frames.reshape(-1, self.input_size).mean(0))

    def macs_per_frame(self) -> int:
        """Parameters used per frame (GRUs, projections, head), plus the residual add."""
        from surprisal_cc.model.flops import module_macs

        layers = [*self.grus, *self.projections, self.head]
        return sum(module_macs(layer) for layer in layers) + (self.input_size if self.residual else 0)

    def loss(self, x: Tensor, lengths: Tensor) -> Tensor:
        """Mean surprisal over real frames (Gaussian maximum likelihood): the objective that
        :class:`~surprisal_cc.training.apc_training.APCBrain` minimises, keeping its sum and frame count apart.

        Arguments as in :meth:`forward`.

        Returns
        -------
        torch.Tensor
            Scalar loss.
        """
        return self(x, lengths).surprisal.sum() / lengths.sum().clamp(min=1)


class FrozenAPC(nn.Module):
    """An APC model used downstream: parameters frozen and always in eval mode (no dropout).

    ``train()`` is a no-op for the wrapped model, so a Brain switching stages can never put the
    APC back into train mode (a bug of the paper's public code).

    Arguments
    ---------
    apc : APCModel
        The pretrained model; its parameters stop requiring gradients.

    Example
    -------
    >>> import torch
    >>> frozen = FrozenAPC(APCModel(hidden_size=8)).train()
    >>> frozen.apc.training, any(p.requires_grad for p in frozen.parameters())
    (False, False)
    >>> frozen(torch.randn(1, 4, 80), torch.tensor([4])).surprisal.requires_grad
    False
    """

    def __init__(self, apc: APCModel):
        super().__init__()
        self.apc = apc.eval()
        for p in self.apc.parameters():
            p.requires_grad_(False)

    def train(self, mode: bool = True) -> "FrozenAPC":
        """Set this wrapper's mode; the wrapped APC model stays in eval mode."""
        super().train(mode)
        self.apc.eval()
        return self

    @torch.no_grad()
    def forward(self, x: Tensor, lengths: Tensor) -> APCOutput:
        """:meth:`APCModel.forward` without gradients."""
        return self.apc(x, lengths)


class APCFileError(ValueError):
    """A file that is not a loadable APC model: its ``path``, what is wrong (``problem``) and what to do
    (``todo``), read as ``"path: problem; todo"``.

    Example
    -------
    >>> err = APCFileError("apc.pt", "not an APC model file")
    >>> err.problem, str(err).startswith("apc.pt: not an APC model file; give an APC model file written by")
    ('not an APC model file', True)
    """

    def __init__(self, path, problem: str,
                 todo: str = "give an APC model file written by recipes/LibriSpeech/pretrain_apc.py"):
        self.path, self.problem, self.todo = path, problem, todo
        super().__init__(f"{path}: {problem}; {todo}")

    def __reduce__(self):  # pickled (by a worker process) with its parts, not its message
        return type(self), (self.path, self.problem, self.todo)


def load_apc(path, map_location="cpu", **model_kwargs) -> APCModel:
    """Load an exported APC model file (``{"config": ..., "state_dict": ...}``) safely.

    Uses ``torch.load(weights_only=True)``: no code from the file is executed.

    Arguments
    ---------
    path : str or pathlib.Path
        File written by :func:`save_apc`.
    map_location : str or torch.device
        Where to load the tensors.
    **model_kwargs
        Override entries of the stored configuration.

    Returns
    -------
    APCModel
        The model, in train mode.

    Example
    -------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     save_apc(APCModel(hidden_size=8, residual=True), os.path.join(folder, "apc.pt"))
    ...     model = load_apc(os.path.join(folder, "apc.pt"))
    >>> model.hidden_size, model.residual
    (8, True)
    """
    return apc_from_blob(load_apc_blob(path, map_location), path, **model_kwargs)


def load_apc_blob(path, map_location="cpu") -> dict:
    """The contents of an APC model file, loaded with ``torch.load(weights_only=True)`` (no code runs);
    :func:`apc_from_blob` builds the model from them."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except OSError:
        raise
    except Exception as err:  # torch raises several types for a file that is not a torch.save file
        raise APCFileError(path, f"cannot be loaded as a torch file ({type(err).__name__})") from None


def apc_from_blob(blob: Mapping, source="the APC blob", **model_kwargs) -> APCModel:
    """The model of a loaded APC file's contents (``{"config": ..., "state_dict": ...}``, as
    :func:`save_apc` writes them); ``source`` names the file in errors.

    Example
    -------
    >>> blob = {"config": {"hidden_size": 8}, "state_dict": APCModel(hidden_size=8).state_dict()}
    >>> apc_from_blob(blob).hidden_size
    8
    """
    if not isinstance(blob, Mapping) or "state_dict" not in blob:
        raise APCFileError(source, "not an APC model file (expected keys 'config' and 'state_dict')")
    config = {**blob.get("config", {}), **model_kwargs}
    model = APCModel(**config)
    try:
        model.load_state_dict(blob["state_dict"])
    except RuntimeError as err:
        raise APCFileError(source, f"APC weights do not match the configuration {config}: {err}") from None
    return model


def apc_config(model: APCModel) -> dict:
    """The constructor arguments of ``model``, as :func:`save_apc` stores them.

    Example
    -------
    >>> apc_config(APCModel(hidden_size=8, residual=True))["residual"]
    True
    """
    return dict(
        input_size=model.input_size,
        hidden_size=model.hidden_size,
        num_layers=len(model.grus),
        dropout=model.projections[0][0].p,
        leaky_slope=model.projections[0][2].negative_slope,
        input_scale=isinstance(model.input_scale, AffineScale),
        residual=model.residual,
    )


def apc_blob(model: APCModel, training: Optional[Mapping] = None) -> Dict[str, Any]:
    """What an APC file holds: ``config`` (:func:`apc_config`), ``state_dict`` (CPU copies of the weights,
    wherever the model is) and, given ``training``, the pretraining settings.

    Example
    -------
    >>> blob = apc_blob(APCModel(input_size=4, hidden_size=6))
    >>> sorted(blob), all(t.device.type == "cpu" for t in blob["state_dict"].values())
    (['config', 'state_dict'], True)
    """
    blob: Dict[str, Any] = {"config": apc_config(model),
                            "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}
    if training is not None:
        blob["training"] = dict(training)
    return blob


def save_apc(model: APCModel, path, training: Optional[Mapping] = None) -> None:
    """Export an APC model to one file that the ASR recipes load by path.

    Arguments
    ---------
    model : APCModel
        The model; its configuration is stored with the weights.
    path : str or pathlib.Path
        Output file (read back with :func:`load_apc`).
    training : mapping, optional
        The pretraining settings, stored as ``training`` (plain numbers and lists).
    """
    blob = apc_blob(model, training)
    if not isinstance(path, (str, os.PathLike)):  # a file object: written as it is
        torch.save(blob, path)
        return
    partial = Path(path).with_name(Path(path).name + ".partial")  # renamed into place when whole: a process
    torch.save(blob, partial)                                      # killed while exporting leaves no half file
    os.replace(partial, path)
