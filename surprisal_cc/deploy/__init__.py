"""Deploying a trained model without PyTorch: its networks exported as ONNX graphs (``export``: writes them
beside a model folder's files, with ``bundle``'s ``onnx.json``) and run by onnxruntime with numpy
(``runtime``: :class:`OnnxASR`, routing each frame to the small or the big network between the graphs;
``frontend``: the filterbanks; ``audio``: reading and resampling; ``parts``: long files; ``command``: the
``transcribe --backend onnx`` entry). ``pip install surprisal_cc[onnx]`` installs the runtime's needs
(numpy, onnxruntime, soundfile) without torch.

May import: the shared modules, ``data``, ``decoding`` and, in ``export`` only, ``model`` (torch); the
runtime modules (``bundle``, ``frontend``, ``audio``, ``runtime``, ``parts``, ``command``) import no torch,
no SpeechBrain and no module that does (``tests/test_deploy.py``).

>>> from surprisal_cc.deploy import OnnxASR
>>> OnnxASR.__name__
'OnnxASR'
"""
import importlib
from typing import Any

_WHERE = {"OnnxASR": "runtime", "export_onnx": "export",
          "write_onnx_graphs": "export", "transcribe_main": "command", "BundleError": "bundle"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:  # imported when first used: the runtime does not load the exporter's torch
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_WHERE)
