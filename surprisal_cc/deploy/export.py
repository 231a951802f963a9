"""Export a model folder's networks as ONNX graphs (:mod:`surprisal_cc.deploy.bundle` lists them), so that
:class:`~surprisal_cc.deploy.runtime.OnnxASR` runs the model with onnxruntime and numpy, without torch.

A routed model is not one static graph: exported whole, both networks would run on every frame. Each
network is a graph of its own, as sherpa-onnx splits a transducer, and the runtime joins them the way the
PyTorch encoder does: the controller's decision per frame, the small network on the frames it was chosen
for and the big one on the others (gathered, run, scattered back), and for ACT and PonderNet the step block
on the frames that have not halted, step by step. Every encoder the package ships can be deployed: the
conditional encoder with each controller (surprisal and learned through their graph; random, big-only and
small-only need none) and every architecture, ACT, and PonderNet in each inference mode.

The graphs are exported with PyTorch's TorchScript exporter (``dynamo=False``, opset
:data:`~surprisal_cc.deploy.bundle.OPSET`) with dynamic batch and time axes; the dynamo exporter fixed the
time axis to the example's length.

Example
-------
>>> import tempfile
>>> from pathlib import Path
>>> from surprisal_cc.model.architectures import build_encoder
>>> from surprisal_cc.model.model_folder import model_config, write_model_folder
>>> encoder = {"name": "conditional", "input_size": 80, "num_outputs": 4, "controller": "big_only"}
>>> with tempfile.TemporaryDirectory() as tmp:
...     config = model_config(encoder, "fbank", ["<blank>", "AH", "B", "sil"], weights_dtype="fp32")
...     folder = write_model_folder(Path(tmp) / "m", config, build_encoder(**encoder).state_dict(), None)
...     _ = export_onnx(folder)
...     sorted(p.name for p in (folder / "onnx").iterdir())
['big_net.onnx', 'post_net.onnx', 'pre_net.onnx', 'small_net.onnx']
"""
from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor, nn

import surprisal_cc
from surprisal_cc.deploy.bundle import BUNDLE_FILE, BUNDLE_VERSION, GRAPHS_DIR, MODEL_FILES, OPSET, model_fingerprints
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.adaptive import ACTEncoder, AdaptiveEncoder, PonderNetEncoder
from surprisal_cc.model.controllers import ConstantController, LearnedController, SurprisalController
from surprisal_cc.model.encoders import ConditionalEncoder
from surprisal_cc.model.flops import module_macs
from surprisal_cc.model.model_folder import load_model_folder

PathLike = Union[str, os.PathLike]

__all__ = ["export_onnx", "write_onnx_graphs"]


class _WithLengths(nn.Module):
    """``module(x, lengths)`` (pre-net, post-net: BiGRU or Conv1D), then log-softmax where ``log_softmax``."""

    def __init__(self, module: Optional[nn.Module], log_softmax: bool = False):
        super().__init__()
        self.module, self.log_softmax = module, log_softmax

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        y = self.module(x, lengths) if self.module is not None else x
        return torch.log_softmax(y, dim=-1) if self.log_softmax else y


class _APC(nn.Module):
    """APC features and surprisal of a batch whose utterances fill ``lengths``."""

    def __init__(self, apc: nn.Module):
        super().__init__()
        self.apc = apc

    def forward(self, fbank: Tensor, lengths: Tensor):
        out = self.apc(fbank, lengths)
        return out.features, out.surprisal


class _Controller(nn.Module):
    """p_big and the logit of a trained controller (surprisal: ``w * s + b + shift``; learned: its MLP)."""

    def __init__(self, controller: nn.Module):
        super().__init__()
        self.controller = controller

    def forward(self, features: Tensor, surprisal: Tensor, bias_shift: Tensor):
        if isinstance(self.controller, LearnedController):
            logit = self.controller.net(features).squeeze(-1).float() + bias_shift
        else:
            logit = self.controller.weight * surprisal + self.controller.bias + bias_shift
        return torch.sigmoid(logit), logit


class _Step(nn.Module):
    """One pondering step of an adaptive encoder: next states and their halting probabilities."""

    def __init__(self, encoder: AdaptiveEncoder):
        super().__init__()
        self.step, self.halting = encoder.step, encoder.halting

    def forward(self, s: Tensor):
        s = self.step(s).float()
        return s, self.halting(s).float()


def _export(module: nn.Module, args: tuple, path: Path, inputs: list, outputs: list, axes: Dict[str, Dict[int, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values and RNN batch sizes
        torch.onnx.export(module.eval(), args, str(path), dynamo=False, opset_version=OPSET, input_names=inputs,
                          output_names=outputs, dynamic_axes=axes)


def _sequence_graph(module: nn.Module, width: int, path: Path, output: str = "y") -> None:
    x, lengths = torch.randn(1, 23, width), torch.tensor([23])
    _export(module, (x, lengths), path, ["x", "lengths"], [output],
            {"x": {0: "B", 1: "T"}, "lengths": {0: "B"}, output: {0: "B", 1: "T"}})


def _frame_graph(module: nn.Module, width: int, path: Path, inputs=("x",), outputs=("y",)) -> None:
    _export(module, (torch.randn(5, width),), path, list(inputs), list(outputs),
            {**{name: {0: "N"} for name in inputs}, **{name: {0: "N"} for name in outputs}})


def _conditional(encoder: ConditionalEncoder, input_size: int, out: Path, graphs: Dict[str, str]) -> Dict[str, Any]:
    """The graphs of a small/big encoder and how the runtime joins them."""
    width = encoder.pre_net.output_size if encoder.pre_net is not None else input_size
    if encoder.pre_net is not None:
        _sequence_graph(_WithLengths(encoder.pre_net), input_size, out / graphs.setdefault("pre_net", f"{GRAPHS_DIR}/pre_net.onnx"))
    for name in ("small_net", "big_net"):
        net = getattr(encoder, name)
        _frame_graph(net, width * net.context, out / graphs.setdefault(name, f"{GRAPHS_DIR}/{name}.onnx"))
    _sequence_graph(_WithLengths(encoder.post_net, log_softmax=True), encoder.big_net.output_size,
                    out / graphs.setdefault("post_net", f"{GRAPHS_DIR}/post_net.onnx"), output="log_probs")
    controller = encoder.stage_controller(False)
    routing: Dict[str, Any] = {"controller": controller.name, "uses_surprisal": bool(controller.uses_surprisal),
                               "routes_by_chance": bool(controller.routes_by_chance),
                               "draws": bool(controller.draws), "test_bias_shift": float(encoder.test_bias_shift),
                               "context": {"small_net": encoder.small_net.context, "big_net": encoder.big_net.context}}
    if isinstance(controller, ConstantController):
        routing["p_big"] = controller.p_big
    elif isinstance(controller, (SurprisalController, LearnedController)):
        routing["decision"] = "logit" if isinstance(controller, LearnedController) else "p_big"
        _export(_Controller(controller), (torch.randn(1, 9, input_size), torch.rand(1, 9), torch.tensor(0.0)),
                out / graphs.setdefault("controller", f"{GRAPHS_DIR}/controller.onnx"),
                ["features", "surprisal", "bias_shift"], ["p_big", "logit"],
                {"features": {0: "B", 1: "T"}, "surprisal": {0: "B", 1: "T"}, "p_big": {0: "B", 1: "T"},
                 "logit": {0: "B", 1: "T"}})
    else:
        raise ConfigurationError(f"the {controller.name!r} controller ({type(controller).__name__}) has no ONNX export: "
                                 "give it a graph in surprisal_cc/deploy/export.py")
    return routing


def _adaptive(encoder: AdaptiveEncoder, input_size: int, out: Path, graphs: Dict[str, str]) -> Dict[str, Any]:
    """The graphs of ACT or PonderNet: pre-net, one step (block and halting unit), post-net."""
    width = encoder.pre_net.output_size
    _sequence_graph(_WithLengths(encoder.pre_net), input_size, out / graphs.setdefault("pre_net", f"{GRAPHS_DIR}/pre_net.onnx"))
    _frame_graph(_Step(encoder), width, out / graphs.setdefault("step", f"{GRAPHS_DIR}/step.onnx"), ("s",), ("next", "halting"))
    _sequence_graph(_WithLengths(encoder.post_net, log_softmax=True), width,
                    out / graphs.setdefault("post_net", f"{GRAPHS_DIR}/post_net.onnx"), output="log_probs")
    halting: Dict[str, Any] = {"kind": "act" if isinstance(encoder, ACTEncoder) else "pondernet",
                               "max_steps": int(encoder.max_steps)}
    if isinstance(encoder, ACTEncoder):
        halting["epsilon"] = float(encoder.epsilon)
    elif isinstance(encoder, PonderNetEncoder):
        halting.update(inference=encoder.inference, tail_mass=float(encoder.tail_mass))
    else:
        raise ConfigurationError(f"the adaptive encoder {type(encoder).__name__} has no ONNX export: give its halting "
                                 "rule to surprisal_cc/deploy/runtime.py")
    return halting


def write_onnx_graphs(folder: PathLike) -> Path:
    """Write the ONNX graphs of the model folder ``folder`` into it (``onnx/`` and ``onnx.json``, replacing
    earlier ones): the step :func:`surprisal_cc.training.export.export_run` runs after writing a folder when
    given it (``surprisal-cc export RUN OUT --onnx``). Returns ``folder``."""
    folder = Path(folder)
    config, encoder, apc = load_model_folder(folder)
    encoder.eval()
    staging = folder / f".{GRAPHS_DIR}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    graphs: Dict[str, str] = {}
    input_size = int(config["encoder"]["input_size"])
    macs = {name: int(value) for name, value in encoder.component_macs().items()}
    if apc is not None:
        apc.eval()
        _export(_APC(apc), (torch.randn(1, 11, apc.input_size), torch.tensor([11])), staging / "apc.onnx",
                ["fbank", "lengths"], ["features", "surprisal"],
                {"fbank": {0: "B", 1: "T"}, "lengths": {0: "B"}, "features": {0: "B", 1: "T"},
                 "surprisal": {0: "B", 1: "T"}})
        graphs["apc"] = f"{GRAPHS_DIR}/apc.onnx"
        macs = {"apc": module_macs(apc), **macs}
    bundle: Dict[str, Any] = {"format_version": BUNDLE_VERSION, "surprisal_cc": surprisal_cc.__version__,
                              "opset": OPSET, "encoder": type(encoder).__name__,
                              "input_features": config["input_features"], "uses_apc": apc is not None}
    partial = {}  # graph name -> its file in the staging folder
    if isinstance(encoder, ConditionalEncoder):
        bundle["routing"] = _conditional(encoder, input_size, staging, partial)
        controller = encoder.stage_controller(False)
        macs["controller"] = int(controller.macs_per_frame())
    elif isinstance(encoder, AdaptiveEncoder):
        bundle["halting"] = _adaptive(encoder, input_size, staging, partial)
    else:
        raise ConfigurationError(f"{folder}: the encoder {type(encoder).__name__} has no ONNX export")
    # the graphs were written to staging/onnx/NAME: moved to folder/onnx/NAME in one rename
    for name, file in partial.items():
        graphs[name] = file
    nested = staging / GRAPHS_DIR
    for path in nested.iterdir() if nested.is_dir() else []:
        os.replace(path, staging / path.name)
    if nested.is_dir():
        nested.rmdir()
    bundle.update(graphs=dict(sorted(graphs.items())), macs=macs, fingerprints=model_fingerprints(folder))
    target = folder / GRAPHS_DIR
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    (folder / BUNDLE_FILE).write_text(json.dumps(bundle, indent=2) + "\n", encoding="utf-8")
    return folder


def export_onnx(model_folder: PathLike, out_dir: Optional[PathLike] = None) -> Path:
    """The model folder ``model_folder`` with ONNX graphs, in ``out_dir`` (a copy of the folder's files
    with the graphs beside them) or in the folder itself (``out_dir`` None or the same folder): what
    ``surprisal-cc export MODEL_DIR OUT_DIR --onnx`` does with a model folder (a recipe run goes through
    :func:`surprisal_cc.training.export.export_run` with :func:`write_onnx_graphs` as its step).

    Raises
    ------
    ModelFormatError
        When ``model_folder`` is not a loadable model folder (a recipe run: export it first).
    ConfigurationError
        When ``out_dir`` exists and is neither empty nor a model folder.
    """
    source = Path(model_folder)
    load_model_folder(source)  # a clear error for anything but a model folder, before anything is written
    out = Path(out_dir) if out_dir is not None else source
    if out.resolve() != source.resolve():
        if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "model.json").is_file())):
            raise ConfigurationError(f"{out}: exists and is not a model folder; export into a new or empty folder")
        out.mkdir(parents=True, exist_ok=True)
        for name in (*MODEL_FILES, "README.md"):
            if (source / name).is_file():
                shutil.copy2(source / name, out / name)
            elif (out / name).exists():
                (out / name).unlink()
    return write_onnx_graphs(out)
