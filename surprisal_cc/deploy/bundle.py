"""What an ONNX export adds to a model folder, and how the runtime finds and checks it (no torch).

``export_onnx`` (:mod:`surprisal_cc.deploy.export`) writes, beside ``model.json``, ``encoder.pt`` and
``apc.pt``:

=====================  ==========================================================================
``onnx.json``          this file's format, the model it was exported from (SHA-256 of ``model.json``,
                       ``encoder.pt``, ``apc.pt``), the graphs, how they are joined (routing, halting)
                       and the MACs per frame of each
``onnx/apc.onnx``      fbank (B, T, 80) -> APC features (B, T, 512), surprisal (B, T)
``onnx/pre_net.onnx``  encoder input (B, T, D), lengths (B,) -> pre-net states
``onnx/controller.onnx``  surprisal or features, bias shift -> p_big, logit (trained controllers)
``onnx/small_net.onnx``, ``onnx/big_net.onnx``  (N, width x context) frame rows -> (N, width)
``onnx/step.onnx``     ACT / PonderNet: (M, width) states -> next states, halting probabilities
``onnx/post_net.onnx`` states, lengths -> CTC log-probabilities (log-softmax included)
=====================  ==========================================================================

The runtime needs only ``model.json``, ``onnx.json`` and ``onnx/`` (the ``.pt`` files may be left out
of a deployment); where they are there, their SHA-256 must be the exported ones, so that graphs of
another version of the model are refused.

Example
-------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     try:
...         read_bundle(Path(tmp))
...     except BundleError as err:
...         print(str(err).split(": ", 1)[1])
not a model folder (no model.json); export one with ONNX graphs: surprisal-cc export RUN_OR_MODEL OUT_DIR --onnx
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Tuple

from surprisal_cc.data.manifest import file_sha256

#: Version of ``onnx.json``; the runtime reads this version only.
BUNDLE_VERSION = 1
BUNDLE_FILE = "onnx.json"
GRAPHS_DIR = "onnx"
#: The model folder's files whose SHA-256 ``onnx.json`` records (``model_folder``'s names).
MODEL_FILES = ("model.json", "encoder.pt", "apc.pt")
#: The ONNX opset the graphs are exported with.
OPSET = 17


class BundleError(ValueError):
    """A model folder whose ONNX graphs are missing, damaged or of another model: one line, what to do."""


def model_fingerprints(folder: Path) -> Dict[str, str]:
    """``{file name: SHA-256}`` of the model folder's files of :data:`MODEL_FILES` that exist."""
    return {name: file_sha256(folder / name) for name in MODEL_FILES if (folder / name).is_file()}


def read_bundle(folder: Path) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(model.json, onnx.json)`` of a model folder with ONNX graphs, checked: both readable, ``onnx.json``
    of this version, exported from these ``model.json`` (and ``encoder.pt``, ``apc.pt`` where they are
    there), every graph it names present. A :class:`BundleError` of one line otherwise."""
    folder = Path(folder)
    again = f"surprisal-cc export {folder} {folder} --onnx"
    if not folder.is_dir():
        raise BundleError(f"{folder}: no model folder there; export one with ONNX graphs: "
                          "surprisal-cc export RUN_OR_MODEL OUT_DIR --onnx")
    if not (folder / "model.json").is_file():
        raise BundleError(f"{folder}: not a model folder (no model.json); export one with ONNX graphs: "
                          "surprisal-cc export RUN_OR_MODEL OUT_DIR --onnx")
    bundle_path = folder / BUNDLE_FILE
    if not bundle_path.is_file():
        raise BundleError(f"{folder}: no ONNX graphs ({BUNDLE_FILE} missing); export them: surprisal-cc export "
                          "MODEL_DIR MODEL_DIR --onnx")
    config, bundle = _json(folder / "model.json", again), _json(bundle_path, again)
    if bundle.get("format_version") != BUNDLE_VERSION:
        raise BundleError(f"{bundle_path}: ONNX export format {bundle.get('format_version')!r}, but this surprisal_cc "
                          f"reads format {BUNDLE_VERSION}; export the graphs again: {again}")
    recorded = bundle.get("fingerprints") or {}
    for name, digest in model_fingerprints(folder).items():
        if name == "model.json" or name in recorded:
            if recorded.get(name) != digest:
                raise BundleError(f"{folder / name}: not the file the ONNX graphs were exported from (another "
                                  f"version of the model); export the graphs again: {again}")
    for name, file in sorted((bundle.get("graphs") or {}).items()):
        if not (folder / file).is_file():
            raise BundleError(f"{folder / file}: missing (the {name} graph); export the graphs again: {again}")
    return config, bundle


def _json(path: Path, again: str) -> Dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BundleError(f"{path}: unreadable ({' '.join(str(err).split())}); export the graphs again: {again}") from None
    if not isinstance(data, dict):
        raise BundleError(f"{path}: not a JSON object; export the graphs again: {again}")
    return data
