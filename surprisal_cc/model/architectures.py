"""The encoder architectures the package ships, as model files ``surprisal_cc/model/graphs/<encoder>/<architecture>.yaml``
(untrained networks as object graphs: the paper's model, Appendix A's models 1-3, ACT, PonderNet): which there are
(:func:`encoder_names`, :func:`architectures`), and :func:`build_encoder`, which builds one with a corpus file's
settings. A model folder (:mod:`surprisal_cc.model.model_folder`) is something else: one trained model on disk (weights
and ``model.json``, as ``export`` writes it), whose encoder is rebuilt here from the arguments ``model.json``
records. The model files name their classes (``!name:surprisal_cc.model.encoders.ConditionalEncoder``) instead of this
module importing them, so it sits below :mod:`surprisal_cc.model.encoders`, which imports it.

Example
-------
>>> encoder = build_encoder("act", input_size=80, num_outputs=42)
>>> type(encoder).__name__, "act" in encoder_names(), architectures("act")
('ACTEncoder', True, ['paper'])
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Set

from surprisal_cc.config import load_hparams_file, load_yaml_tolerant
from surprisal_cc.model.nnet import Encoder

__all__ = ["MODELS_DIR", "model_file", "encoder_names", "architectures", "declared_keys", "build_encoder"]

# The model files ship inside the package (package data), so an installed package builds its encoders.
MODELS_DIR = Path(__file__).resolve().parent / "graphs"


def model_file(name: str, architecture: str = "paper", models_dir: Optional[Path] = None) -> Path:
    """The model file ``<models_dir>/<name>/<architecture>.yaml`` (default: :data:`MODELS_DIR`).

    Example
    -------
    >>> model_file("conditional", "model3").relative_to(MODELS_DIR).as_posix()
    'conditional/model3.yaml'
    """
    models_dir = Path(models_dir) if models_dir is not None else MODELS_DIR
    path = models_dir / name / f"{architecture}.yaml"
    if path.is_file():
        return path
    encoders = encoder_names(models_dir)
    if name not in encoders:
        raise ValueError(f"unknown encoder {name!r} (hparams key 'encoder'); choose one of {encoders} "
                         f"(the folders of {models_dir})")
    raise ValueError(f"no architecture {architecture!r} for encoder {name!r} (hparams key 'architecture'); "
                     f"choose one of {architectures(name, models_dir)} (the files of {models_dir / name})")


def encoder_names(models_dir: Optional[Path] = None) -> List[str]:
    """The encoders: the folders of ``models_dir`` (default: :data:`MODELS_DIR`) that hold a model file.

    Example
    -------
    >>> {"act", "conditional", "pondernet"} <= set(encoder_names())  # and any encoder added beside them
    True
    """
    models_dir = Path(models_dir) if models_dir is not None else MODELS_DIR
    if not models_dir.is_dir():
        return []
    return sorted(d.name for d in models_dir.iterdir() if d.is_dir() and any(d.glob("*.yaml")))


def architectures(name: str = "conditional", models_dir: Optional[Path] = None) -> List[str]:
    """The architectures that have a model file for encoder ``name``.

    Example
    -------
    >>> architectures("conditional")
    ['model1', 'model2', 'model3', 'paper']
    """
    return sorted(p.stem for p in ((Path(models_dir) if models_dir else MODELS_DIR) / name).glob("*.yaml"))


def declared_keys(path: Path) -> Set[str]:
    """The top-level keys a model file declares (read from its text, nothing built): :func:`build_encoder`
    passes ``controller``, ``controller_options`` and ``conditional_options`` to a file that declares them.

    Example
    -------
    >>> sorted(declared_keys(model_file("conditional")) & {"controller", "conditional_options", "options"})
    ['conditional_options', 'controller']
    >>> "controller" in declared_keys(model_file("act"))
    False
    """
    return set(load_yaml_tolerant(path))


def build_encoder(name: str, input_size: int, num_outputs: int, controller: str = "surprisal",
                  architecture: str = "paper", controller_options: Optional[Dict] = None,
                  conditional_options: Optional[Dict] = None, adaptive_options: Optional[Dict] = None,
                  hidden_size: int = 256, dropout: float = 0.5, model_options: Optional[Dict] = None) -> Encoder:
    """The encoder that the model file ``surprisal_cc/model/graphs/<name>/<architecture>.yaml`` describes.

    The model files are the object graphs of the networks (pre-net, small and big networks,
    post-net, or the adaptive-depth encoders); this function fills in the corpus file's settings,
    so one hparams file carries the settings of every encoder and a single override switches
    (``--encoder=act``, ``--controller=learned``, ``--architecture=model3``). ``adaptive_options``
    maps an adaptive encoder's name to its options; ``model_options`` sets any other key of the
    model file (e.g. ``{"kernel_size": 5}``). A key the model file does not have is an error.

    Arguments
    ---------
    name : str
        A folder of :data:`MODELS_DIR` (built in: ``conditional``, ``act``, ``pondernet``).
    input_size, num_outputs : int
        Feature width and CTC outputs (labels + blank).
    controller : str
        The controller of an encoder whose model file declares ``controller`` (the conditional
        one), a key of :data:`~surprisal_cc.model.controllers.CONTROLLERS` (``surprisal``, ``random``, ...);
        with ``controller_options`` and ``conditional_options``, passed to such files only.
    architecture : str
        A file of that folder: ``paper`` or, for the conditional encoder, Appendix A's ``model1``-``model3``.

    Example
    -------
    >>> enc = build_encoder("conditional", input_size=80, num_outputs=42, controller="random")
    >>> type(enc).__name__, enc.pre_net.output_size, enc.big_net.output_size
    ('ConditionalEncoder', 512, 512)
    """
    path = model_file(name, architecture)
    declared = declared_keys(path)
    settings: Dict = {"input_size": input_size, "num_outputs": num_outputs, "hidden_size": hidden_size,
                      "dropout": dropout}
    routing = {"controller": controller, "controller_options": dict(controller_options or {}),
               "conditional_options": dict(conditional_options or {})}
    settings.update({key: value for key, value in routing.items() if key in declared})
    if (adaptive_options or {}).get(name):
        settings["options"] = dict(adaptive_options[name])
    settings.update(model_options or {})
    try:
        return load_hparams_file(path, settings)["encoder"]
    except (KeyError, ValueError, TypeError) as err:
        raise ValueError(f"{path}: cannot build the encoder with settings {sorted(settings)}: "
                         f"{type(err).__name__}: {err}") from None
