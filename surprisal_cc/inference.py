"""Use a trained model: export a recipe run, load it, transcribe audio, evaluate a corpus.

An exported model folder holds

==============  ==============================================================================
``model.json``  format version, encoder arguments, features, labels, decoding, provenance
``encoder.pt``  encoder state dict (the calibrated controller included)
``apc.pt``      the frozen APC model (absent when the model runs without APC)
``README.md``   model card
==============  ==============================================================================

Every tensor file loads with ``torch.load(weights_only=True)``: no pickled code. Decoding is the
recipes' test decoding (CTC prefix beam search, the run's beam width), scoring is theirs too
(corpus-level PER, repeated ``sil`` merged), and FLOPs are counted from what ran, as the Brain
counts them.

Example
-------
>>> import torch
>>> from surprisal_cc.recipe import phone_set
>>> asr = ConditionalASR.untrained(phone_set("librispeech"), controller="random")
>>> results = asr.transcribe_batch(torch.randn(2, 16000).clamp(-1, 1), torch.tensor([1.0, 0.5]))
>>> [r.num_frames for r in results], results[0].flops_per_frame > 0
([49, 24], True)
>>> results[0].segments[0][1], results[0].frame_shift_s   # each phone's (phone, start s, end s)
(0.0, 0.02)
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .apc import APCModel, FrozenAPC, load_apc
from .data.errors import DataPreparationError, DataPreparationWarning
from .decoding import CTCBeamSearch
from .encoders import build_encoder
from .hparams_files import expand_hparams
from .nnet import Encoder, EncoderOutput
from .features import FeatureConfig, FilterbankFrontEnd
from .nnet import lengths_to_mask
from .flops import MacMeter, module_macs
from .errors import ConfigurationError
from .precision import native_bf16
from .threads import DEFAULT_DECODING_THREADS, check_threads, decoding_threads

PathLike = Union[str, os.PathLike]
FORMAT_VERSION = 1
MODEL_FILE, ENCODER_FILE, APC_FILE, CARD_FILE = "model.json", "encoder.pt", "apc.pt", "README.md"
WEIGHT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
MAX_LISTED = 20
AUDIO_SUFFIXES = (".flac", ".wav", ".sph", ".ogg", ".opus", ".mp3", ".aiff", ".aif")

ROUTINGS = ("deterministic", "sampled")

__all__ = ["ConditionalASR", "Transcription", "ModelFormatError", "BadAudioError", "export_run", "average_float_state_dicts",
           "default_model_dir", "FORMAT_VERSION", "ROUTINGS"]


class ModelFormatError(ValueError):
    """A model folder that is missing, incomplete, damaged or of another format version."""


class BadAudioError(DataPreparationError):
    """Audio files that cannot be used; ``problems`` holds one ``"path: reason"`` line per file.

    Arguments
    ---------
    problems : sequence of str
        One ``"path: reason"`` line per unusable file.
    total : int
        Number of files checked.
    hint : str
        What to do about it, appended to the message.
    """

    def __init__(self, problems: Sequence[str], total: int, hint: str = ""):
        self.problems, self.total, self.hint = list(problems), total, hint
        super().__init__("\n".join([*self.problems, *([hint] if hint else [])]))


class BadLabelsError(BadAudioError):
    """Utterances without usable labels (no transcript line, an empty one, no MFA labels);
    ``problems`` holds one ``"path: reason"`` line per utterance."""


def default_model_dir() -> Path:
    """The shipped model, ``surprisal_cc/pretrained`` (package data): where ``--model`` points when it is not given.

    Example
    -------
    >>> default_model_dir().parent.name, default_model_dir().name
    ('surprisal_cc', 'pretrained')
    """
    return Path(__file__).resolve().parent / "pretrained"


# ----------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------
@dataclass
class Transcription:
    """One utterance: phones with their times and, per frame, what the model computed.

    ``str(t)`` (and ``t.text``) is the phones separated by spaces. Per-frame arrays (``surprisal``,
    ``p_big``, ``use_big``, ``steps``, ``fbank``) have one entry per frame of ``frame_shift_s``
    seconds; frame ``t`` starts at ``t * frame_shift_s``.

    Arguments
    ---------
    phones : list of str
        The recognised phones.
    num_frames : int
        Frames of the utterance.
    duration_s : float
        Audio duration in seconds.
    flops_per_frame : float
        MACs per frame that ran, all components together (APC included when it ran).
    flops_components : dict of str to float
        MACs per frame of each component.
    rtf : float
        Real-time factor: compute time of the utterance's batch (features, APC, encoder, beam
        search) divided by the batch's audio duration.
    surprisal : torch.Tensor, optional
        (T,) APC surprisal; None when no APC ran.
    p_big : torch.Tensor, optional
        (T,) probability of the big network; None for ACT and PonderNet.
    use_big : torch.Tensor, optional
        (T,) bool, where the big network ran; None for ACT and PonderNet.
    steps : torch.Tensor, optional
        (T,) steps executed per frame (ACT and PonderNet).
    fbank : torch.Tensor, optional
        (T, n_mels) filterbank features.
    path : str, optional
        The audio file, when transcribed from a file.
    segments : list of (str, float, float), optional
        Each phone with its start and end in seconds (CTC Viterbi alignment,
        :mod:`surprisal_cc.timestamps`).
    frame_shift_s : float
        Seconds between frames of the per-frame arrays.
    routing : str, optional
        ``"deterministic"`` (``p_big > 0.5``) or ``"sampled"``.
    seed : int, optional
        The seed of sampled routing.

    Example
    -------
    >>> import torch
    >>> t = Transcription(["sil", "AH", "sil"], num_frames=4, duration_s=0.08, flops_per_frame=1000.0,
    ...                   flops_components={"encoder": 1000.0}, rtf=0.1,
    ...                   use_big=torch.tensor([True, False, False, True]),
    ...                   segments=[("sil", 0.0, 0.02), ("AH", 0.02, 0.06), ("sil", 0.06, 0.08)])
    >>> t.big_fraction, t.to_dict()["use_big"], str(t)
    (0.5, [True, False, False, True], 'sil AH sil')
    >>> print(t.to_ctm("utt"))
    utt 1 0.00 0.02 sil
    utt 1 0.02 0.04 AH
    utt 1 0.06 0.02 sil
    """

    phones: List[str]
    num_frames: int
    duration_s: float
    flops_per_frame: float
    flops_components: Dict[str, float]
    rtf: float
    surprisal: Optional[Tensor] = field(default=None, repr=False)
    p_big: Optional[Tensor] = field(default=None, repr=False)
    use_big: Optional[Tensor] = field(default=None, repr=False)
    steps: Optional[Tensor] = field(default=None, repr=False)
    fbank: Optional[Tensor] = field(default=None, repr=False)
    path: Optional[str] = None
    segments: Optional[List[Tuple[str, float, float]]] = field(default=None, repr=False)
    frame_shift_s: float = 0.02
    routing: Optional[str] = None
    seed: Optional[int] = None

    @property
    def text(self) -> str:
        """The phones separated by spaces."""
        return " ".join(self.phones)

    def __str__(self) -> str:
        return self.text

    @property
    def big_fraction(self) -> Optional[float]:
        """Fraction of frames that ran the big network (None without a small/big choice)."""
        return None if self.use_big is None else float(self.use_big.double().mean())

    def to_ctm(self, name: Optional[str] = None) -> str:
        """The phones with their times as CTM lines (:func:`~surprisal_cc.timestamps.format_ctm`);
        ``name`` defaults to the file's stem."""
        from .timestamps import format_ctm

        if self.segments is None:
            raise ValueError("this transcription has no phone times (segments)")
        return format_ctm(name or (Path(self.path).stem if self.path else "utterance"), self.segments)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready: per-frame arrays as lists (``fbank`` left out), phone times as
        ``{"phone", "start", "end"}`` objects in seconds."""
        out: Dict[str, Any] = {"path": self.path, "text": self.text, "phones": self.phones,
                               "segments": None if self.segments is None else
                               [{"phone": p, "start": s, "end": e} for p, s, e in self.segments],
                               "num_frames": self.num_frames, "frame_shift_s": self.frame_shift_s,
                               "duration_s": self.duration_s, "flops_per_frame": self.flops_per_frame,
                               "flops_components": self.flops_components, "rtf": self.rtf,
                               "big_fraction": self.big_fraction, "routing": self.routing, "seed": self.seed}
        for name in ("surprisal", "p_big", "use_big", "steps"):
            value = getattr(self, name)
            out[name] = None if value is None else value.tolist()
        return out


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------
PRECISIONS = ("fp32", "bf16", "auto")


def resolve_inference_precision(precision: str, device: torch.device) -> str:
    """``fp32``, or ``bf16`` where the device computes it natively; ``auto``: the faster one.

    ``auto`` is fp32 for inference: in the inference benchmark (benchmarks/README.md) bf16 autocast
    made ``transcribe`` slower on CPUs with native bf16 (RTF 0.052 against 0.037 at batch 1: the
    APC's and encoder's GRUs run small per-step products where the casts cost more than they
    save), and on GPUs (kernel launches, not arithmetic, bound these small networks). Training,
    with its large batched products, keeps bf16 there (:func:`surprisal_cc.recipe.auto_precision`).

    Arguments
    ---------
    precision : str
        ``"fp32"``, ``"bf16"`` or ``"auto"``.
    device : torch.device
        The device the model runs on.

    Returns
    -------
    str
        ``"fp32"`` or ``"bf16"``.

    Raises
    ------
    ConfigurationError
        For an unknown precision, or ``bf16`` on a device without native bf16.

    Example
    -------
    >>> import torch
    >>> resolve_inference_precision("fp32", torch.device("cpu")), resolve_inference_precision("auto", torch.device("cpu"))
    ('fp32', 'fp32')
    """
    if precision not in PRECISIONS:
        raise ConfigurationError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "auto":
        return "fp32"
    if precision == "bf16" and not native_bf16(device):
        raise ConfigurationError(f"precision bf16: this {device.type.upper()} has no native bf16 "
                                 "(CPU: AVX-512-BF16 or AMX; GPU: Ampere or newer); use fp32")
    return precision


def resolve_device(device: Union[str, torch.device]) -> torch.device:
    """``torch.device(device)``; :class:`ConfigurationError` for an invalid name or missing CUDA.

    Example
    -------
    >>> resolve_device("cpu")
    device(type='cpu')
    """
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ConfigurationError(f"device {device!r}: {err}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigurationError(f"device {device}: CUDA is not available on this machine; use cpu")
    return dev


class ConditionalASR:
    """A trained conditional-computation CTC phone recogniser, ready for inference.

    Arguments
    ---------
    config : dict
        The ``model.json`` content (see :func:`export_run`).
    encoder : Encoder
        The encoder with its weights (the controller's calibration included).
    apc : APCModel, optional
        The frozen APC model; required when the model uses APC features or surprisal.
    device : str
        ``"cpu"`` (default) or ``"cuda"``/``"cuda:N"``.
    precision : str
        ``"fp32"`` (default), ``"bf16"`` (torch.autocast; only where the device has native bf16)
        or ``"auto"`` (:func:`resolve_inference_precision`).
    routing : str
        ``"deterministic"`` (default: the big network where ``p_big > 0.5``, PonderNet halting at
        its threshold; the same phones, routing and FLOPs on every run and at every batch size) or
        ``"sampled"`` (routing drawn from ``p_big``, as the recipes test by default), see
        :meth:`set_routing`.
    seed : int, optional
        Seed of sampled routing (a random one, recorded in ``seed``, when None).
    threads : int, optional
        Torch intra-op threads while decoding (default 1, :mod:`surprisal_cc.threads`); None
        leaves torch's setting.

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from surprisal_cc.recipe import phone_set
    >>> asr = ConditionalASR.untrained(phone_set("librispeech"), controller="random")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     folder = asr.save(Path(tmp) / "model")
    ...     files = sorted(p.name for p in folder.iterdir())
    ...     loaded = ConditionalASR.from_hparams(source=folder, savedir=None)
    >>> files, loaded.labels == asr.labels, loaded.routing
    (['README.md', 'encoder.pt', 'model.json'], True, 'deterministic')
    """

    def __init__(self, config: Dict[str, Any], encoder: Encoder, apc: Optional[APCModel] = None,
                 device: Union[str, torch.device] = "cpu", precision: str = "fp32", routing: str = "deterministic",
                 seed: Optional[int] = None, threads: Optional[int] = DEFAULT_DECODING_THREADS):
        self.config = config
        self.device = resolve_device(device)
        self.requested_precision = precision
        self.precision = resolve_inference_precision(precision, self.device)
        self.threads = check_threads(threads)
        self.labels: List[str] = list(config["labels"])
        self.feature_config = FeatureConfig(**config["features"])
        self.front_end = FilterbankFrontEnd(self.feature_config)
        self.encoder = encoder.to(self.device).eval()
        self.use_apc_features = config["input_features"] == "apc"
        self.needs_surprisal = encoder.needs_surprisal(False)
        self.uses_apc = self.use_apc_features or self.needs_surprisal
        if self.uses_apc and apc is None:
            raise ModelFormatError("this model needs an APC model (APC features or a surprisal controller)")
        self.apc = FrozenAPC(apc).to(self.device) if self.uses_apc else None
        self.apc_macs = module_macs(apc) if self.uses_apc else 0
        self.beam_search = CTCBeamSearch(blank=int(config.get("blank_index", 0)),
                                         beam_size=int(config.get("beam_size", 10)),
                                         backend=config.get("beam_backend", "native"))
        self.source: Optional[Path] = None
        self.routing, self.seed = "deterministic", None
        self.set_routing(routing, seed)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(cls, source: Optional[PathLike] = None, device: Union[str, torch.device] = "cpu",
                        precision: str = "fp32", deterministic: Optional[bool] = None, routing: str = "deterministic",
                        seed: Optional[int] = None, threads: Optional[int] = DEFAULT_DECODING_THREADS
                        ) -> "ConditionalASR":
        """Load an exported model folder (default: :func:`default_model_dir`).

        Arguments
        ---------
        source : str or path, optional
            An exported model folder (see :func:`export_run`); None: :func:`default_model_dir`.
        device : str or torch.device
            ``"cpu"`` or ``"cuda"``/``"cuda:N"``.
        precision : str
            ``"fp32"``, ``"bf16"`` or ``"auto"`` (see :func:`resolve_inference_precision`).
        deterministic : bool, optional
            Older spelling of ``routing``: True for ``"deterministic"``, False for ``"sampled"``.
        routing : str
            ``"deterministic"`` (default) or ``"sampled"``, whatever the model was tested with.
        seed : int, optional
            Seed of sampled routing.
        threads : int, optional
            Torch threads while decoding (default 1; None: torch's setting).

        Returns
        -------
        ConditionalASR
            The model, with ``source`` set to the folder.

        Raises
        ------
        ModelFormatError
            When the folder is missing, incomplete, damaged or of another format version.
        """
        if deterministic is not None:
            routing = "deterministic" if deterministic else "sampled"
        folder = Path(source) if source is not None else default_model_dir()
        config, encoder, apc = load_model_folder(folder)
        asr = cls(config, encoder, apc, device=device, precision=precision, routing=routing, seed=seed,
                  threads=threads)
        asr.source = folder
        return asr

    @classmethod
    def from_hparams(cls, source: Optional[PathLike] = None, savedir: Optional[PathLike] = None,
                     run_opts: Optional[Dict[str, Any]] = None, **kwargs) -> "ConditionalASR":
        """SpeechBrain's name for :meth:`from_pretrained`: ``source`` is a local model folder.

        Arguments
        ---------
        source : str or path, optional
            An exported model folder (nothing is downloaded); None: :func:`default_model_dir`.
        savedir : str or path, optional
            Accepted for SpeechBrain compatibility; a local folder needs no copy, so it is unused.
        run_opts : dict, optional
            SpeechBrain's run options; ``device`` and ``precision`` are read from it.
        **kwargs
            Further arguments of :meth:`from_pretrained`.

        Returns
        -------
        ConditionalASR
            The model.
        """
        options = {k: v for k, v in (run_opts or {}).items() if k in ("device", "precision")}
        return cls.from_pretrained(source, **{**options, **kwargs})

    @classmethod
    def untrained(cls, labels: Sequence[str], encoder: str = "conditional", controller: str = "random",
                  input_features: str = "fbank", device: str = "cpu", **encoder_options) -> "ConditionalASR":
        """A randomly initialised model over ``labels`` (blank added at index 0), for tests and examples.

        Arguments
        ---------
        labels : sequence of str
            The phones (without blank).
        encoder : str
            Encoder name, as :func:`~surprisal_cc.encoders.build_encoder` takes it.
        controller : str
            Controller name (conditional encoder).
        input_features : str
            ``"fbank"`` or ``"apc"``; a random APC model is built when needed.
        device : str
            Device of the model.
        **encoder_options
            Further arguments of :func:`~surprisal_cc.encoders.build_encoder`.

        Returns
        -------
        ConditionalASR
            The model.

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
        >>> asr.labels, asr.uses_apc
        (['<blank>', 'AH', 'B', 'sil'], False)
        """
        from .recipe import input_size_for

        kwargs = dict(name=encoder, input_size=input_size_for(input_features), num_outputs=len(labels) + 1,
                      controller=controller, **encoder_options)
        config = {"format_version": FORMAT_VERSION, "encoder": kwargs, "input_features": input_features,
                  "features": FeatureConfig().as_dict(), "labels": ["<blank>", *labels], "blank_index": 0,
                  "beam_size": 10, "merge_sil": True}
        apc = APCModel() if input_features == "apc" or controller == "surprisal" else None
        return cls(config, build_encoder(**kwargs), apc, device=device)

    def save(self, folder: PathLike, dtype: str = "fp32") -> Path:
        """Write this model as a model folder (``from_pretrained`` loads it back).

        Arguments
        ---------
        folder : str or path
            New, empty or existing model folder.
        dtype : str
            ``"fp32"`` or ``"fp16"`` (weight matrices stored in half precision).

        Returns
        -------
        pathlib.Path
            The folder.
        """
        import io

        from .apc import save_apc

        if dtype not in WEIGHT_DTYPES:
            raise ConfigurationError(f"dtype must be one of {sorted(WEIGHT_DTYPES)}, got {dtype!r}")
        blob = None
        if self.apc is not None:
            buffer = io.BytesIO()
            save_apc(self.apc.apc.cpu(), buffer)
            self.apc.to(self.device)
            buffer.seek(0)
            blob = torch.load(buffer, weights_only=True)
        config = {**self.config, "uses_apc": self.uses_apc, "weights_dtype": dtype}
        state = {k: v.cpu() for k, v in self.encoder.state_dict().items()}
        return write_model_folder(Path(folder), config, state, blob)

    def set_bias_shift(self, shift: float) -> None:
        """Add ``shift`` to the controller's logit (paper Appendix B): a negative shift sends fewer
        frames to the big network (fewer FLOPs), a positive one more. Only the surprisal and
        random controllers have a logit to shift; a model without one gets a clear error."""
        if not hasattr(self.encoder, "test_bias_shift"):
            raise ModelFormatError(f"a bias shift needs a conditional encoder; this model's is "
                                   f"{self.config['encoder']['name']!r}")
        controller = self.config["encoder"].get("controller")
        if shift and controller not in ("surprisal", "random"):
            raise ModelFormatError(f"the {controller!r} controller has no bias to shift (surprisal and random do)")
        self.encoder.test_bias_shift = float(shift)

    def budget_big_fraction(self, fraction: float) -> float:
        """The fraction of frames on the big network that spends ``fraction`` x the big-only MACs per
        frame; a clear error for a model without a surprisal controller or a budget out of range."""
        from .brain import budget_big_fraction

        try:
            return budget_big_fraction(self.encoder, self.apc_macs, float(fraction))
        except ValueError as err:
            raise ModelFormatError(f"--flops-fraction {fraction}: {err}") from None

    @torch.no_grad()
    def meet_flops_budget(self, audio: Sequence[PathLike], fraction: float, batch_size: int = 8) -> Dict[str, Any]:
        """Set the bias shift (:meth:`set_bias_shift`) at which the expected MACs per frame over the
        frames of ``audio`` are ``fraction`` x those of big-only, from their APC surprisal alone
        (:func:`~surprisal_cc.controllers.bias_shift_for_big_fraction`; no labels). One extra APC
        pass over the audio; the surprisal controller only.

        Returns ``{"fraction", "big_fraction", "bias_shift", "frames"}``.
        """
        from .controllers import bias_shift_for_big_fraction
        from .data.audio import read_audio

        big_fraction = self.budget_big_fraction(fraction)
        frames = []
        paths = list(audio)
        for start in range(0, len(paths), batch_size):
            signals = [read_audio(path, self.feature_config.sample_rate) for path in paths[start:start + batch_size]]
            samples = torch.tensor([signal.numel() for signal in signals])
            wavs = torch.nn.utils.rnn.pad_sequence(signals, batch_first=True)
            fbank, lengths = self.front_end(wavs.to(torch.float32), samples)
            fbank, lengths = fbank.to(self.device), lengths.to(self.device)
            with decoding_threads(self.threads), self._autocast():
                surprisal = self.apc(fbank, lengths).surprisal.float()
            frames.append(surprisal[lengths_to_mask(lengths, surprisal.shape[1])])
        surprisal = torch.cat(frames)
        shift = bias_shift_for_big_fraction(self.encoder.controller, surprisal, big_fraction,
                                            stochastic=bool(getattr(self.encoder, "test_stochastic", True)))
        self.set_bias_shift(shift)
        return {"fraction": float(fraction), "big_fraction": big_fraction, "bias_shift": shift,
                "frames": int(surprisal.numel())}

    def set_deterministic(self) -> None:
        """Route without sampling: ``p_big > 0.5`` (conditional), threshold halting (PonderNet)."""
        self.set_routing("deterministic")

    def set_routing(self, routing: str, seed: Optional[int] = None) -> None:
        """``"deterministic"``: the big network where ``p_big > 0.5`` (PonderNet: halt at the
        threshold); ``"sampled"``: drawn from ``p_big`` (PonderNet: sampled halting), seeded with
        ``seed`` (a random seed when None) before each :meth:`transcribe_batch` and
        :meth:`evaluate` call, so that every call is reproducible from the recorded ``seed``.

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "sil"], controller="random")
        >>> asr.set_routing("sampled", seed=3)
        >>> asr.routing, asr.seed, asr.encoder.test_stochastic
        ('sampled', 3, True)
        """
        if routing not in ROUTINGS:
            raise ConfigurationError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        sampled = routing == "sampled"
        if hasattr(self.encoder, "test_stochastic"):
            self.encoder.test_stochastic = sampled
        if getattr(self.encoder, "inference", None) in ("sample", "threshold"):
            self.encoder.inference = "sample" if sampled else "threshold"
        if sampled and seed is None:
            seed = int.from_bytes(os.urandom(4), "little") % 2 ** 31
        self.routing, self.seed = routing, (int(seed) if sampled else None)

    def to(self, device: Union[str, torch.device]) -> "ConditionalASR":
        """Move the model to ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``); returns the model."""
        device = resolve_device(device)
        precision = resolve_inference_precision(self.requested_precision, device)
        self.device, self.precision = device, precision
        self.encoder.to(device)
        if self.apc is not None:
            self.apc.to(device)
        return self

    @contextlib.contextmanager
    def seeded_routing(self, seed: Optional[int] = None):
        """Sampled routing: the body draws from the RNG seeded with ``seed`` (default: this model's),
        the global RNG restored after; deterministic routing: nothing."""
        seed = self.seed if seed is None else seed
        if self.routing != "sampled" or seed is None:
            yield
            return
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seed)
            yield

    # ------------------------------------------------------------------ forward
    def _autocast(self):
        """bf16 autocast context when ``precision`` is bf16, else a null context."""
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @torch.no_grad()
    def forward(self, wavs: Tensor, wav_lens: Optional[Tensor] = None
                ) -> Tuple[EncoderOutput, Tensor, Tensor, Optional[Tensor]]:
        """(encoder output, fbank, frame counts, surprisal) of one padded batch, without decoding.

        Arguments
        ---------
        wavs : torch.Tensor
            (B, S) padded 16 kHz audio.
        wav_lens : torch.Tensor, optional
            (B,) lengths: relative in (0, 1] (floating point, SpeechBrain's convention) or sample
            counts (integers); None: every waveform is whole.

        Returns
        -------
        output : EncoderOutput
            Log-probabilities (``log_probs``, (B, T, labels)), ``lengths`` and routing statistics.
        fbank : torch.Tensor
            (B, T, n_mels) log-mel frames.
        frames : torch.Tensor
            (B,) frame count of each utterance.
        surprisal : torch.Tensor or None
            (B, T) APC surprisal when the model uses APC.
        """
        samples = sample_counts(wavs, wav_lens)
        fbank, frames = self.front_end(wavs.detach().to("cpu", torch.float32), samples)  # as the recipes' cache
        fbank, frames = fbank.to(self.device), frames.to(self.device)
        short = [i for i, n in enumerate(frames.tolist()) if n == 0]
        if short:
            raise DataPreparationError(
                f"utterance(s) {short} of the batch are shorter than one {self.feature_config.frame_length_ms:g} ms "
                "frame: nothing to recognise")
        surprisal, feats = None, fbank
        with self._autocast():
            if self.uses_apc:
                apc_out = self.apc(fbank, frames)
                surprisal = apc_out.surprisal.float()
                feats = apc_out.features if self.use_apc_features else fbank
            out = self.encoder(feats, frames, surprisal if self.needs_surprisal else None)
        return out, fbank, frames, surprisal

    @property
    def frame_shift_s(self) -> float:
        """Seconds between the model's frames (the filterbank's shift times its frame skip)."""
        return self.feature_config.frame_shift_ms * self.feature_config.frame_skip / 1000.0

    def _run(self, wavs: Tensor, samples: Tensor) -> Tuple[EncoderOutput, List[List[int]], Tensor, Tensor,
                                                             Optional[Tensor], float]:
        """(encoder output, label ids, fbank, frame counts, surprisal, seconds) of one padded batch,
        on this model's threads."""
        with decoding_threads(self.threads):
            start = time.perf_counter()
            out, fbank, frames, surprisal = self.forward(wavs, samples)
            hyps = self.beam_search(out.log_probs.float(), out.lengths)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            return out, hyps, fbank, frames, surprisal, time.perf_counter() - start

    def phones_of(self, ids: Sequence[int]) -> List[str]:
        """Label names of label ids."""
        return [self.labels[i] for i in ids]

    def frame_results(self, out: EncoderOutput, b: int, n: int, surprisal: Optional[Tensor]) -> Dict[str, Any]:
        """Per-frame arrays of utterance ``b`` (its first ``n`` frames) and its MACs per component
        summed over those frames (``macs``), from one forward pass."""
        stat = (lambda key: out.stats[key][b, :n].detach().float().cpu() if key in out.stats else None)
        return {"surprisal": surprisal[b, :n].cpu() if surprisal is not None else None,
                "p_big": stat("p_big"), "steps": stat("steps"),
                "use_big": out.stats["use_big"][b, :n].cpu() if "use_big" in out.stats else None,
                "macs": {name: float(m[b, :n].double().sum()) for name, m in out.frame_macs.items()}}

    def flops_components(self, macs: Dict[str, float], frames: int) -> Dict[str, float]:
        """MACs per frame of each component (APC first when it ran) from MACs summed over ``frames``."""
        comps = {"apc": float(self.apc_macs)} if self.uses_apc else {}
        comps.update({name: total / frames for name, total in macs.items()})
        return comps

    def transcribe_batch(self, wavs: Tensor, wav_lens: Optional[Tensor] = None, *,
                         num_samples: Optional[Tensor] = None, sample_rate: Optional[int] = None,
                         timestamps: bool = True) -> List[Transcription]:
        """Transcribe a padded batch of waveforms.

        Arguments
        ---------
        wavs : torch.Tensor
            (B, S) or (S,) mono audio in [-1, 1] (int16 tensors are scaled by 1/32768).
        wav_lens : torch.Tensor, optional
            (B,) relative lengths in (0, 1], as in SpeechBrain. Integer tensors are still read as
            sample counts (the earlier form of this argument); prefer ``num_samples``.
        num_samples : torch.Tensor, optional
            (B,) absolute lengths in samples, instead of ``wav_lens``.
        sample_rate : int, optional
            Sample rate of ``wavs``; resampled to the model's when it differs. None: the model's
            (``feature_config.sample_rate``, 16 kHz).
        timestamps : bool
            Align each phone to the frames (``segments``).

        Returns
        -------
        list of Transcription
            One per utterance, in batch order.

        Raises
        ------
        DataPreparationError
            When an utterance is shorter than one analysis window.
        ValueError
            For a malformed batch, lengths out of range, or audio that looks int16-scaled.

        Example
        -------
        >>> import torch
        >>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
        >>> wavs = torch.rand(2, 8000) - 0.5
        >>> result = asr.transcribe_batch(wavs, torch.tensor([1.0, 0.5]))
        >>> [r.num_frames for r in result], [r.big_fraction for r in result]
        ([24, 12], [1.0, 1.0])
        >>> [r.num_frames for r in asr.transcribe_batch(wavs, num_samples=torch.tensor([8000, 4000]))]
        [24, 12]
        >>> asr.transcribe_batch(wavs[:, ::2], sample_rate=8000)[0].num_frames
        24
        """
        wavs = as_waveforms(wavs)
        if num_samples is not None:
            if wav_lens is not None:
                raise ValueError("give wav_lens (relative) or num_samples (absolute), not both")
            wav_lens = torch.as_tensor(num_samples).long()
        samples = sample_counts(wavs, wav_lens)
        rate = self.feature_config.sample_rate
        if sample_rate is not None and int(sample_rate) != rate:
            import torchaudio

            wavs = torchaudio.functional.resample(wavs, int(sample_rate), rate)
            samples = (samples.double() * rate / int(sample_rate)).round().long().clamp(max=wavs.shape[1])
        with self.seeded_routing():
            out, hyps, fbank, frames, surprisal, seconds = self._run(wavs, samples)
        rtf = seconds / max(float(samples.sum()) / rate, 1e-9)
        log_probs = out.log_probs.float().cpu()
        results = []
        for b, n in enumerate(frames.tolist()):
            per_frame = self.frame_results(out, b, n, surprisal)
            comps = self.flops_components(per_frame.pop("macs"), n)
            segments = self.segments(log_probs[b, :n], hyps[b]) if timestamps else None
            results.append(Transcription(
                phones=self.phones_of(hyps[b]), num_frames=n, duration_s=int(samples[b]) / rate,
                flops_per_frame=sum(comps.values()), flops_components=comps, rtf=rtf, fbank=fbank[b, :n].cpu(),
                segments=segments, frame_shift_s=self.frame_shift_s, routing=self.routing, seed=self.seed,
                **per_frame))
        return results

    def segments(self, log_probs: Tensor, ids: Sequence[int], offset_frames: int = 0) -> List[Tuple[str, float, float]]:
        """``(phone, start_s, end_s)`` of the phones ``ids`` decoded from ``log_probs`` ((T, V) of one
        utterance): :func:`surprisal_cc.timestamps.phone_segments`."""
        from .timestamps import phone_segments

        return phone_segments(log_probs, ids, self.labels, self.beam_search.blank, self.frame_shift_s, offset_frames)

    def transcribe_file(self, path: PathLike, long_chunk_s: Optional[float] = None,
                        progress=None) -> Transcription:
        """Transcribe one audio file (resampled to 16 kHz and downmixed to mono, with a warning).

        Files longer than ``long_chunk_s`` plus twice the context are decoded in parts with context
        (:mod:`surprisal_cc.long_audio`): memory stays flat in the file's length.

        Arguments
        ---------
        path : str or path
            Any format libsndfile decodes (FLAC, WAV, Ogg/Opus, ...).
        long_chunk_s : float, optional
            Seconds per part of a long file (default :data:`surprisal_cc.long_audio.CHUNK_S`); 0:
            decode the whole file at once, whatever its length.
        progress : callable, optional
            ``progress(done_s, total_s)`` after each part of a long file.

        Returns
        -------
        Transcription
            With ``path`` set.

        Raises
        ------
        BadAudioError
            When the file cannot be decoded.

        Example
        -------
        >>> import tempfile
        >>> from pathlib import Path
        >>> import numpy as np
        >>> import soundfile
        >>> asr = ConditionalASR.untrained(["AH", "B", "sil"])
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     wav = Path(tmp) / "utt.flac"
        ...     soundfile.write(wav, np.random.default_rng(0).uniform(-0.5, 0.5, 8000), 16000)
        ...     result = asr.transcribe_file(wav)
        >>> result.num_frames, result.duration_s, Path(result.path).name
        (24, 0.5, 'utt.flac')
        """
        check_audio(path, self.feature_config.sample_rate)
        return self.transcribe_checked_file(path, long_chunk_s=long_chunk_s, progress=progress)

    def transcribe_checked_file(self, path: PathLike, long_chunk_s: Optional[float] = None, progress=None,
                                keep_fbank: bool = True) -> Transcription:
        """:meth:`transcribe_file` without the audio check (for files :func:`check_audio_many` passed)."""
        from .data.audio import read_audio
        from .long_audio import CHUNK_S, decode_long, is_long

        chunk_s = CHUNK_S if long_chunk_s is None else float(long_chunk_s)
        if chunk_s > 0 and is_long(path, chunk_s):
            return Transcription(**decode_long(self, path, chunk_s=chunk_s, progress=progress, keep_fbank=keep_fbank))
        result = self.transcribe_batch(read_audio(path, self.feature_config.sample_rate)[None])[0]
        result.path = str(path)
        return result

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, data: PathLike, mfa_labels: Optional[PathLike] = None, skip_bad: bool = False,
                 batch_size: Optional[int] = None, seed: Optional[int] = None, g2p: Optional[str] = None,
                 timit_split: str = "test", progress: bool = False,
                 any_pronunciation: bool = False, flops_fraction: Optional[float] = None,
                 per_utterance: Optional[Callable[[Dict[str, Any]], None]] = None,
                 alignments: Optional[PathLike] = None) -> Dict[str, Any]:
        """Corpus-level PER, S/D/I, FLOPs per frame, p_big and RTF on a labelled corpus.

        Arguments
        ---------
        data : str or path
            A LibriSpeech-format folder (``speaker/chapter/*.flac`` + ``*.trans.txt``; labels from
            CMUdict with the model's training G2P policy, or MFA labels from ``mfa_labels``), a
            TIMIT folder (``timit_split``: the core ``test`` set, the ``valid`` speakers or ``train``)
            or a manifest CSV as the recipes write (``ID``, ``wav``, ``phn`` columns).
        mfa_labels : str or path, optional
            MFA export CSV with the labels of a LibriSpeech-format folder.
        skip_bad : bool
            Score the usable utterances when some are not (unusable audio, a missing or empty
            transcript, no MFA labels; they are listed in ``skipped``); otherwise
            :class:`BadAudioError` lists the bad audio files, and a :class:`DataPreparationError`
            the transcript problems.
        batch_size : int, optional
            Utterances per forward pass (default: the run's batch size). With deterministic
            routing the phones do not depend on it.
        seed : int, optional
            Seed of sampled routing for this call (default: the model's ``seed``); the global RNG
            is restored after. Sampled routing only.
        g2p : str, optional
            G2P policy for out-of-vocabulary words (default: the model's training policy).
        timit_split : str
            ``"test"``, ``"valid"`` or ``"train"`` (TIMIT folders only).
        progress : bool
            Show a progress bar.
        any_pronunciation : bool
            Also score each hypothesis against the reference as the words would read with any
            of their CMUdict pronunciations (or, with MFA labels, the labelled one), the one
            fewest edits away (:func:`pronunciation_references`): how much of the PER is the
            choice of pronunciations. LibriSpeech folders and manifests with a ``wrd`` column.
        flops_fraction : float, optional
            Decode at the bias shift that spends this fraction of the big-only MACs per frame over
            the corpus's audio (:meth:`meet_flops_budget`; its surprisal, not its labels).
        per_utterance : callable, optional
            Called with each utterance's result as its batch finishes: ``id``, ``reference``,
            ``hypothesis`` (phones, as scored), ``substitutions``, ``deletions``, ``insertions``,
            ``num_ref_tokens``, ``num_frames``, ``flops_per_frame``, ``p_big_mean`` and
            ``big_fraction`` (small/big routing) or ``mean_steps`` (ACT, PonderNet).
        alignments : str or path, optional
            Also write every utterance's alignment of hypothesis and reference to this file, in
            SpeechBrain's format (as the recipes write ``per.txt``).

        Returns
        -------
        dict
            ``per``, ``substitutions``, ``deletions``, ``insertions``, ``num_ref_tokens``,
            ``num_utterances``, ``flops_per_frame``, ``flops_components``, ``p_big_mean``,
            ``p_big_var`` and ``big_fraction`` (small/big routing), ``mean_steps`` (ACT, PonderNet), ``rtf``,
            ``compute_s``, ``audio_s`` and what was evaluated (``data``, ``labels``, ``skipped``,
            ``model``, ``device``, ``precision``, ``threads``, ``routing``, ``seed``, ``batch_size``,
            ``beam_size``); with ``any_pronunciation``,
            ``any_pronunciation``: ``per``, ``substitutions``, ``deletions``, ``insertions``,
            ``num_ref_tokens`` against those references and ``fixed`` (utterances whose labels
            are not their words' phones, scored against their labels as they are); with
            ``flops_fraction``, ``budget`` (:meth:`meet_flops_budget`).

        Raises
        ------
        BadAudioError
            When some audio files are unusable and ``skip_bad`` is False.
        DataPreparationError
            When the corpus, its labels or its audio cannot be used.
        """
        from .brain import RoutingStats
        from .data.audio import read_audio
        from .metrics import ErrorRate, closest_path

        if seed is not None and self.routing != "sampled":
            raise ConfigurationError("seed seeds sampled routing, and this model routes deterministically: "
                                     "set_routing('sampled', seed) (--sampled --seed N)")
        seed = self.seed if seed is None else int(seed)
        label_problems: List[str] = []
        items, label_source = corpus_items(data, self, mfa_labels=mfa_labels, g2p=g2p, timit_split=timit_split,
                                           problems=label_problems if skip_bad else None)
        if label_problems:
            warnings.warn(f"skipping {len(label_problems)} utterance(s) without usable labels:\n  "
                          + "\n  ".join(label_problems[:MAX_LISTED]), DataPreparationWarning, stacklevel=2)
        infos, problems = check_audio_many([wav for _, wav, _ in items])
        if problems and not skip_bad:
            raise BadAudioError(problems, len(items), f"{len(problems)} of {len(items)} audio files are unusable; "
                                                     "pass --skip-bad (skip_bad=True) to score the others")
        if problems:
            warnings.warn(f"skipping {len(problems)} unusable audio file(s):\n  " + "\n  ".join(problems),
                          DataPreparationWarning, stacklevel=2)
        items = [item for item in items if str(item[1]) in infos]
        if not items:
            raise DataPreparationError(f"{data}: no usable utterance to score")
        graphs = pronunciation_references(data, items, mfa_labels, g2p or self.config.get("label_policy", {}).get(
            "g2p") or "spn") if any_pronunciation else None
        warn_converted(infos, self.feature_config.sample_rate)
        batch_size = int(batch_size or self.config.get("batch_size", 8))
        budget = self.meet_flops_budget([wav for _, wav, _ in items], flops_fraction, batch_size) \
            if flops_fraction is not None else None
        # against the labels, and against the closest pronunciations (any_pronunciation)
        errors, closest = (ErrorRate(merge_sil=bool(self.config.get("merge_sil", True))) for _ in range(2))
        meter, routing = MacMeter(), RoutingStats()
        steps_total, steps_frames, seconds, audio_s = 0.0, 0, 0.0, 0.0
        starts = range(0, len(items), batch_size)
        if progress:
            from tqdm import tqdm
            starts = tqdm(starts, desc="evaluate", unit="batch")
        with self.seeded_routing(seed):
            for start in starts:
                chunk = items[start:start + batch_size]
                signals = [read_audio(wav, self.feature_config.sample_rate) for _, wav, _ in chunk]
                samples = torch.tensor([s.numel() for s in signals])
                wavs = torch.nn.utils.rnn.pad_sequence(signals, batch_first=True)
                out, hyps, _, frames, surprisal, elapsed = self._run(wavs, samples)
                phones = [self.phones_of(h) for h in hyps]
                seconds += elapsed
                audio_s += float(samples.sum()) / self.feature_config.sample_rate
                errors.append([u for u, _, _ in chunk], phones, [ref for _, _, ref in chunk])
                if per_utterance is not None:
                    for b, (row, n) in enumerate(zip(errors.last(len(chunk)), frames.tolist())):
                        per_utterance(self._utterance_report(row, out, b, n, surprisal))
                if graphs is not None:
                    closest.append([u for u, _, _ in chunk], phones,
                                   [closest_path(hyp, *graphs[u]) if graphs.get(u) else ref
                                    for hyp, (u, _, ref) in zip(phones, chunk)])
                mask = lengths_to_mask(out.lengths, out.log_probs.shape[1])
                meter.update(out.frame_macs, int(out.lengths.sum()),
                             uniform={"apc": self.apc_macs} if self.uses_apc else {})
                routing.update(out.stats, mask)
                if "steps" in out.stats:
                    steps_total += float(out.stats["steps"][mask].sum())
                    steps_frames += int(mask.sum())
        if alignments is not None:
            errors.write_alignments(alignments)
        summary = errors.summarize()
        per_frame = meter.per_frame()
        flops = {k: per_frame[k] for k in sorted(per_frame, key=lambda k: (k != "apc", k == "total"))}
        result: Dict[str, Any] = {
            "per": summary["error_rate"], "substitutions": summary["substitutions"],
            "deletions": summary["deletions"], "insertions": summary["insertions"],
            "num_ref_tokens": summary["num_ref_tokens"], "num_utterances": summary["num_utterances"],
            "flops_per_frame": flops["total"], "flops_components": flops, **routing.summary(),
        }
        if steps_frames:
            result["mean_steps"] = steps_total / steps_frames
        if graphs is not None:
            free = closest.summarize()
            result["any_pronunciation"] = {
                "per": free["error_rate"], **{k: free[k] for k in ("substitutions", "deletions", "insertions",
                                                                   "num_ref_tokens")},
                "fixed": sum(1 for u, _, _ in items if not graphs.get(u))}
        result.update({"rtf": seconds / max(audio_s, 1e-9), "compute_s": seconds, "audio_s": audio_s,
                       "data": str(data), "labels": label_source, "skipped": label_problems + problems,
                       "model": str(self.source) if self.source else None, "device": str(self.device),
                       "precision": self.precision, "threads": self.threads or torch.get_num_threads(),
                       "routing": self.routing, "seed": seed if self.routing == "sampled" else None,
                       "batch_size": batch_size, "beam_size": self.beam_search.beam_size,
                       "blank_penalty": self.beam_search.blank_penalty,
                       "bias_shift": float(getattr(self.encoder, "test_bias_shift", 0.0))})
        if budget is not None:
            result["budget"] = budget
        return result

    def _utterance_report(self, scores: Dict[str, Any], out: EncoderOutput, b: int, n: int,
                          surprisal: Optional[Tensor]) -> Dict[str, Any]:
        """One utterance of :meth:`evaluate`'s ``per_utterance``: its edit counts and what ran."""
        per_frame = self.frame_results(out, b, n, surprisal)
        comps = self.flops_components(per_frame["macs"], n)
        report = {"id": scores["key"], "reference": scores["ref_tokens"], "hypothesis": scores["hyp_tokens"],
                  **{k: int(scores[k]) for k in ("substitutions", "deletions", "insertions", "num_ref_tokens")},
                  "num_frames": n, "flops_per_frame": sum(comps.values())}
        if per_frame["p_big"] is not None:
            report["p_big_mean"] = float(per_frame["p_big"].double().mean())
        if per_frame["use_big"] is not None:
            report["big_fraction"] = float(per_frame["use_big"].double().mean())
        if per_frame["steps"] is not None:
            report["mean_steps"] = float(per_frame["steps"].double().mean())
        return report


# ----------------------------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------------------------
def as_waveforms(wavs) -> Tensor:
    """(B, S) float waveforms in [-1, 1] from a (B, S) or (S,) tensor or array; int16 is scaled by
    1/32768, and float audio far outside [-1, 1] (int16-scaled, say) is refused.

    Example
    -------
    >>> as_waveforms(torch.tensor([0, 16384, -32768], dtype=torch.int16))
    tensor([[ 0.0000,  0.5000, -1.0000]])
    >>> as_waveforms(torch.tensor([0.0, 1200.0]))
    Traceback (most recent call last):
        ...
    ValueError: wavs must be audio in [-1, 1], but its largest magnitude is 1200 (int16-scaled?): divide by 32768
    """
    wavs = torch.as_tensor(wavs)
    if wavs.dtype == torch.int16:
        wavs = wavs.float() / 32768.0
    elif not wavs.is_floating_point():
        raise ValueError(f"wavs must be float audio in [-1, 1] (or int16), got {wavs.dtype}")
    if wavs.ndim == 1:
        wavs = wavs[None]
    if wavs.ndim != 2:
        raise ValueError(f"wavs must be (batch, samples), got shape {tuple(wavs.shape)}")
    peak = float(wavs.abs().max()) if wavs.numel() else 0.0
    if peak > 2.0:  # a little over 1 is clipping or resampling overshoot; int16 scale is thousands
        raise ValueError(f"wavs must be audio in [-1, 1], but its largest magnitude is {peak:g} (int16-scaled?): "
                         "divide by 32768")
    return wavs


def sample_counts(wavs: Tensor, wav_lens: Optional[Tensor]) -> Tensor:
    """(B,) sample counts: ``wav_lens`` relative in (0, 1] (floating point) or sample counts (integers).

    Example
    -------
    >>> sample_counts(torch.zeros(2, 100), torch.tensor([1.0, 0.5])).tolist()
    [100, 50]
    >>> sample_counts(torch.zeros(2, 100), torch.tensor([100, 20])).tolist()
    [100, 20]
    """
    batch, width = wavs.shape[0], wavs.shape[1]
    if wav_lens is None:
        return torch.full((batch,), width, dtype=torch.long)
    lens = torch.as_tensor(wav_lens).detach().cpu()
    if lens.shape != (batch,):
        raise ValueError(f"wav_lens must have one length per waveform ({batch}), got shape {tuple(lens.shape)}")
    if lens.is_floating_point():
        if bool(((lens <= 0) | (lens > 1 + 1e-6)).any()):
            raise ValueError(f"relative wav_lens must lie in (0, 1] (SpeechBrain's convention), got {lens.tolist()}; "
                             "give sample counts as num_samples=")
        return (lens.double() * width).round().long().clamp(1, width)
    if bool(((lens < 1) | (lens > width)).any()):
        raise ValueError(f"sample counts must lie in [1, {width}] (the padded width), got {lens.tolist()}")
    return lens.long()


# ----------------------------------------------------------------------------------------------
# Audio checks
# ----------------------------------------------------------------------------------------------
def check_audio_many(paths: Sequence[PathLike]) -> Tuple[Dict[str, Any], List[str]]:
    """Decode every file once: ``({path: AudioInfo} of usable files, ["path: problem", ...])``.

    Arguments
    ---------
    paths : sequence of str or path
        Audio files.

    Returns
    -------
    infos : dict of str to AudioInfo
        Duration, sample rate and channels of each usable file, by path.
    problems : list of str
        One ``"path: problem"`` line per unusable file.
    """
    from .data.audio import check_audio_file

    infos, problems = {}, []
    for path in paths:
        name, info, problem = check_audio_file(str(path))
        if info is None:
            problems.append(f"{name}: {problem}")
        else:
            infos[name] = info
    return infos, problems


def check_audio(path: PathLike, sample_rate: int = 16000) -> None:
    """Raise :class:`BadAudioError` unless ``path`` is usable audio; warn when it will be converted.

    The error has one line naming the file; the :class:`DataPreparationWarning` says that the file
    will be resampled to ``sample_rate`` or downmixed to mono.

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     bad = Path(tmp) / "bad.wav"
    ...     _ = bad.write_text("not audio")
    ...     try:
    ...         check_audio(bad)
    ...     except BadAudioError as err:
    ...         print(len(err.problems), err.problems[0].startswith(str(bad)))
    1 True
    """
    infos, problems = check_audio_many([path])
    if problems:
        raise BadAudioError(problems, 1)
    warn_converted(infos, sample_rate)


def warn_converted(infos: Dict[str, Any], sample_rate: int = 16000) -> None:
    """One warning per file (up to 20) that is resampled or downmixed on load.

    Arguments
    ---------
    infos : dict of str to AudioInfo
        Usable files, as :func:`check_audio_many` returns them.
    sample_rate : int
        The model's sample rate.
    """
    notes = []
    for path, info in infos.items():
        if info.sample_rate != sample_rate:
            notes.append(f"{path}: {info.sample_rate} Hz audio, resampled to {sample_rate} Hz")
        if info.channels > 1:
            notes.append(f"{path}: {info.channels} channels, downmixed to mono (channel mean)")
    for note in notes[:MAX_LISTED]:
        warnings.warn(note, DataPreparationWarning, stacklevel=3)
    if len(notes) > MAX_LISTED:
        warnings.warn(f"... and {len(notes) - MAX_LISTED} more resampled or downmixed files",
                      DataPreparationWarning, stacklevel=3)


# ----------------------------------------------------------------------------------------------
# Corpora
# ----------------------------------------------------------------------------------------------
Item = Tuple[str, str, List[str]]  # utterance id, audio path, reference phones


def corpus_items(data: PathLike, asr: ConditionalASR, mfa_labels: Optional[PathLike] = None,
                 g2p: Optional[str] = None, timit_split: str = "test",
                 problems: Optional[List[str]] = None) -> Tuple[List[Item], str]:
    """(utterance id, audio path, reference phones) of a corpus, and where the labels came from.

    Arguments
    ---------
    data : str or path
        A LibriSpeech-format folder, a TIMIT folder or a manifest CSV (see
        :meth:`ConditionalASR.evaluate`).
    asr : ConditionalASR
        The model: its label set and its training label policy.
    mfa_labels : str or path, optional
        MFA export CSV with the labels of a LibriSpeech-format folder.
    g2p : str, optional
        G2P policy for out-of-vocabulary words (default: the model's).
    timit_split : str
        ``"test"``, ``"valid"`` or ``"train"`` (TIMIT folders only).
    problems : list, optional
        Given a list, utterances of a LibriSpeech-format folder without a usable transcript or
        MFA labels are left out, with one ``"file: problem"`` line each appended to it, instead
        of failing.

    Returns
    -------
    items : list of (str, str, list of str)
        Utterance id, audio path and reference phones of each utterance.
    source : str
        Where the labels came from, in words.

    Raises
    ------
    DataPreparationError
        When the corpus cannot be read or its labels are not the model's label set.
    """
    path = Path(data)
    if not path.exists():
        raise DataPreparationError(f"{path}: no such file or folder")
    if path.is_file():
        if path.suffix.lower() != ".csv":
            raise DataPreparationError(f"{path}: DATA must be a LibriSpeech-format folder, a TIMIT folder "
                                       "or a manifest CSV (ID, wav, phn columns)")
        items, source = _manifest_items(path, asr, g2p)
    elif _is_timit(path):
        items, source = _timit_items(path, timit_split), f"TIMIT .PHN folded to 39 ({timit_split})"
    else:
        items, source = _librispeech_items(path, asr, mfa_labels, g2p, problems)
    allowed = [label for i, label in enumerate(asr.labels) if i != asr.beam_search.blank]
    from .data.phones import validate_phones

    unknown = sorted({p for _, _, ref in items for p in ref} - set(allowed))
    if unknown:
        bad = next(u for u, _, ref in items if set(ref) & set(unknown))
        try:
            validate_phones(unknown, allowed, f"utterance {bad}")
        except DataPreparationError as err:
            raise DataPreparationError(f"{data}: the labels ({source}) are not the model's label set: {err}") from None
    return items, source


def pronunciation_references(data: PathLike, items: Sequence[Item], mfa_labels: Optional[PathLike] = None,
                             g2p: str = "spn") -> Dict[str, Optional[Tuple[List[str], List[List[int]]]]]:
    """Per utterance of ``items`` (:func:`corpus_items`), its reference as a token graph in which
    each word may take any of its CMUdict pronunciations (and, with MFA labels, the one it was
    labelled with), each ``sil`` staying where it is; None where the labels are not the words' phones.

    Arguments
    ---------
    data : str or path
        The corpus of ``items``: a LibriSpeech-format folder or a manifest CSV with a ``wrd`` column.
    items : sequence of (str, str, list of str)
        Utterance id, audio path and reference phones.
    mfa_labels : str or path, optional
        The MFA labels (CSV export or TextGrid folder) the references came from: their words'
        phones are read from them.
    g2p : str
        OOV policy of the lexicon.

    Returns
    -------
    dict
        Utterance id -> (tokens, predecessor lists) as for :func:`surprisal_cc.ctc.pronunciation_graph`, or None.

    Raises
    ------
    ConfigurationError
        For a TIMIT folder (hand-labelled phones, not words' pronunciations) or a manifest without words.
    """
    from .ctc import lexicon_pronunciations, pronunciation_graph, spoken_pronunciation_graph
    from .data.librispeech import scan_subset
    from .data.mfa import load_mfa_word_phones

    path = Path(data)
    if path.is_file():
        with open(path, newline="", encoding="utf-8") as f:
            rows = {row["ID"]: row for row in csv.DictReader(f)}
        if any("wrd" not in row for row in rows.values()):
            raise ConfigurationError(f"{path}: scoring against any pronunciation needs the words (a wrd column)")
        words = {utt: rows[utt]["wrd"].split() for utt, _, _ in items}
    elif _is_timit(path):
        raise ConfigurationError(f"{path}: TIMIT's labels are hand-labelled phones, not words' pronunciations: "
                                 "scoring against any pronunciation is for LibriSpeech folders and manifests")
    else:
        words = {u.id: list(u.words) for u in scan_subset(path)}
    pronounce = lexicon_pronunciations(g2p, (w for ws in words.values() for w in ws))
    if mfa_labels is not None and not path.is_file():
        spoken = load_mfa_word_phones(mfa_labels)
        return {utt: spoken_pronunciation_graph(ref, spoken[utt], pronounce) if utt in spoken else None
                for utt, _, ref in items}
    return {utt: pronunciation_graph(ref, words[utt], pronounce) for utt, _, ref in items}


def _is_timit(path: Path) -> bool:
    """Whether ``path`` (or ``path/TIMIT``) has a TRAIN or TEST folder, in any letter case."""
    from .data.timit import find_child

    return any(find_child(root, part) is not None for root in (path, path / "TIMIT") for part in ("TRAIN", "TEST"))


def _manifest_items(path: Path, asr: ConditionalASR, g2p: Optional[str]) -> Tuple[List[Item], str]:
    """Items of a manifest CSV (``ID``, ``wav`` and ``phn`` columns, or SpeechBrain's ``wrd``
    labelled by the lexicon as the model's training labels were), and the label source
    (:func:`_manifest_wav` resolves the ``wav`` paths)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = set(reader.fieldnames or [])
        label = "phn" if "phn" in columns else "wrd" if "wrd" in columns else None
        missing = {"ID", "wav"} - columns
        if missing or label is None:
            raise DataPreparationError(f"{path}: manifest lacks the column(s) {sorted(missing | {'phn'})} "
                                       "(expected ID, wav and phn as the recipes write, or wrd as SpeechBrain's "
                                       "LibriSpeech recipes write)")
        rows = list(reader)
    if not rows:
        raise DataPreparationError(f"{path}: the manifest has no rows")
    empty = [r["ID"] for r in rows if not (r[label] or "").split()]
    if empty:
        raise DataPreparationError(f"{path}: empty {label} for utterance(s) {', '.join(empty[:MAX_LISTED])}")
    wavs = [_manifest_wav(path, r["wav"]) for r in rows]
    if label == "phn":
        return [(r["ID"], wav, r["phn"].split()) for r, wav in zip(rows, wavs)], f"manifest {path}"
    lexicon, g2p, boundary = _lexicon(asr, g2p)
    words = [r["wrd"].upper().split() for r in rows]
    lexicon.prefetch(w for ws in words for w in ws)
    items = [(r["ID"], wav, lexicon.words_to_phones(ws, boundary, r["ID"])) for r, wav, ws in zip(rows, wavs, words)]
    lexicon.warn_oov_summary()
    return items, f"manifest {path}, wrd by the lexicon (CMUdict, g2p={g2p}{', boundary sil' if boundary else ''})"


def _manifest_wav(manifest: Path, wav: str) -> str:
    """A manifest's ``wav``: relative paths are relative to the CSV's folder (or, where nothing is
    there but the file is, to the current folder, as recipes run from the repository write them)."""
    path = Path(wav)
    if path.is_absolute():
        return wav
    beside = manifest.parent / path
    return str(path if not beside.exists() and path.exists() else beside)


def _lexicon(asr: ConditionalASR, g2p: Optional[str]):
    """(lexicon, g2p policy, boundary silence) of the model's training label policy (``g2p`` overrides)."""
    from .data.lexicon import Lexicon

    policy = asr.config.get("label_policy", {})
    g2p = g2p or policy.get("g2p") or "spn"
    try:
        return Lexicon(g2p=g2p), g2p, bool(policy.get("add_boundary_silence", True))
    except ValueError as err:
        raise ConfigurationError(str(err)) from None


def _timit_items(path: Path, split: str) -> List[Item]:
    """Items of one TIMIT split, labels folded to 39 phones, sorted by utterance id."""
    from .data.phones import fold_timit
    from .data.timit import TIMIT_CORE_TEST_SPEAKERS, TIMIT_DEV_SPEAKERS, find_sibling, read_phn, scan_timit

    if split not in ("test", "valid", "train"):
        raise ConfigurationError(f"timit_split must be test, valid or train, got {split!r}")

    def split_of(u) -> Optional[str]:
        if u.part == "train":
            return "train"
        return "valid" if u.spk_id in TIMIT_DEV_SPEAKERS else "test" if u.spk_id in TIMIT_CORE_TEST_SPEAKERS else None

    items, problems = [], []
    for u in scan_timit(path):
        if split_of(u) != split:
            continue
        phn = find_sibling(u.wav, ".phn")
        if phn is None:
            problems.append(f"{u.wav}: no .PHN file")
            continue
        items.append((u.id, str(u.wav), fold_timit(read_phn(phn), where=f"{phn} (utterance {u.id})")))
    if problems:
        raise DataPreparationError(f"{len(problems)} TIMIT label problem(s): " + "; ".join(problems[:MAX_LISTED]))
    if not items:
        raise DataPreparationError(f"{path}: no utterance of the TIMIT {split} split")
    return sorted(items)


def _librispeech_items(path: Path, asr: ConditionalASR, mfa_labels: Optional[PathLike],
                       g2p: Optional[str], problems: Optional[List[str]] = None) -> Tuple[List[Item], str]:
    """Items of a LibriSpeech-format folder with MFA or lexicon labels, and the label source
    (``problems``: see :func:`corpus_items`)."""
    from .data.librispeech import scan_subset
    from .data.mfa import load_mfa_labels

    found: List[str] = []
    utts = sorted(scan_subset(path, problems=found), key=lambda u: u.id)
    labels = load_mfa_labels(mfa_labels) if mfa_labels is not None else None
    if labels is not None:
        found += [f"{u.wav}: no labels for {u.id} in {mfa_labels}" for u in utts if u.id not in labels]
        utts = [u for u in utts if u.id in labels]
    if found and problems is None:
        total = len(utts) + len(found)
        hint = "leave out --mfa-labels to use lexicon labels, or " if labels is not None else ""
        raise BadLabelsError(found[:MAX_LISTED] + ([f"... and {len(found) - MAX_LISTED} more"]
                                                   if len(found) > MAX_LISTED else []), total,
                             f"{len(found)} of {total} utterances have no usable labels; {hint}"
                             "pass --skip-bad (skip_bad=True) to score the others")
    if problems is not None:
        problems.extend(found)
    if labels is not None:
        return [(u.id, str(u.wav), list(labels[u.id])) for u in utts], f"MFA {mfa_labels}"
    lexicon, g2p, boundary = _lexicon(asr, g2p)
    lexicon.prefetch(w for u in utts for w in u.words)
    items = [(u.id, str(u.wav), lexicon.words_to_phones(u.words, boundary, u.id)) for u in utts]
    lexicon.warn_oov_summary()
    return items, f"lexicon (CMUdict, g2p={g2p}{', boundary sil' if boundary else ''})"


# ----------------------------------------------------------------------------------------------
# Model folders
# ----------------------------------------------------------------------------------------------
def _export_hint(folder: Path) -> str:
    """How to get a model folder at ``folder``, for error messages."""
    return (f"pass --model DIR (from_pretrained(DIR)) with an exported model, or export a finished recipe run: "
            f"surprisal-cc export RUN_DIR {folder}")


def load_model_folder(folder: Path) -> Tuple[Dict[str, Any], Encoder, Optional[APCModel]]:
    """(config, encoder with weights, APC model or None) of an exported model folder.

    Arguments
    ---------
    folder : pathlib.Path
        A model folder, as :func:`write_model_folder` writes it.

    Returns
    -------
    config : dict
        The content of ``model.json``.
    encoder : Encoder
        The encoder with its weights.
    apc : APCModel or None
        The APC model, when the model uses one.

    Raises
    ------
    ModelFormatError
        When the folder is missing, incomplete, damaged or of another format version.

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     try:
    ...         load_model_folder(Path(tmp))
    ...     except ModelFormatError as err:
    ...         print("no model.json" in str(err))
    True
    """
    if not folder.is_dir():
        raise ModelFormatError(f"{folder}: no model folder there; {_export_hint(folder)}")
    config_path = folder / MODEL_FILE
    if not config_path.is_file():
        raise ModelFormatError(f"{folder}: not a model folder (no {MODEL_FILE}); {_export_hint(folder)}")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelFormatError(f"{config_path}: unreadable ({err})") from None
    version = config.get("format_version") if isinstance(config, dict) else None
    if isinstance(version, int) and version > FORMAT_VERSION:
        import surprisal_cc

        raise ModelFormatError(f"{config_path}: model format version {version} is newer than this surprisal_cc "
                               f"{surprisal_cc.__version__} reads (version {FORMAT_VERSION}): upgrade surprisal_cc "
                               "to load it")
    if version != FORMAT_VERSION:
        raise ModelFormatError(f"{config_path}: model format version {version}, but this surprisal_cc reads "
                               f"version {FORMAT_VERSION}: export the run again with this version "
                               "(surprisal-cc export RUN_DIR OUT_DIR)")
    try:
        encoder = build_encoder(**config["encoder"])
        for key in ("labels", "features", "input_features"):
            config[key]
    except (KeyError, TypeError, ValueError) as err:
        raise ModelFormatError(f"{config_path}: incomplete or invalid model description ({err})") from None
    state = _load_tensors(folder / ENCODER_FILE)
    try:
        encoder.load_state_dict(state)
    except RuntimeError as err:
        raise ModelFormatError(f"{folder / ENCODER_FILE}: weights do not fit {MODEL_FILE} "
                               f"({str(err).splitlines()[0]})") from None
    apc = None
    if config.get("uses_apc", True) and (config["input_features"] == "apc" or encoder.needs_surprisal(False)):
        apc_path = folder / APC_FILE
        if not apc_path.is_file():
            raise ModelFormatError(f"{apc_path}: missing (this model needs its APC model)")
        try:
            apc = load_apc(apc_path)
        except (ValueError, RuntimeError, OSError) as err:
            raise ModelFormatError(f"{apc_path}: {str(err).splitlines()[0]}") from None
    return config, encoder, apc


def _load_tensors(path: Path) -> Dict[str, Tensor]:
    """State dict of a tensor file (``weights_only=True``); :class:`ModelFormatError` if unusable."""
    if not path.is_file():
        raise ModelFormatError(f"{path}: missing")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for damaged or unsafe files
        raise ModelFormatError(f"{path}: cannot be loaded ({type(err).__name__}: "
                               f"{str(err).splitlines()[0] if str(err) else ''})") from None
    if not isinstance(state, dict):
        raise ModelFormatError(f"{path}: not a state dict")
    return state


def _cast(state: Dict[str, Tensor], dtype: torch.dtype) -> Dict[str, Tensor]:
    """Weight matrices (2-D and up) to ``dtype``; scalars, vectors and integer buffers unchanged.

    Every tensor is copied to the CPU into its own storage: a view (e.g. of the flat weight buffer
    cuDNN keeps for a GRU on a GPU) would otherwise save the whole buffer it belongs to.
    """
    return {k: (v.to(dtype) if v.is_floating_point() and v.ndim >= 2 else v).detach().cpu().clone()
            for k, v in state.items()}


def _atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename it to ``path``."""
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------
def inert_overrides(hparams_file: PathLike) -> Dict[str, str]:
    """Overrides (key -> YAML value) that keep loading an hparams file free of side effects.

    No checkpoint folders are created (``checkpointer`` and ``apc_checkpointer`` become null), and
    top-level ``!PLACEHOLDER`` values get a dummy (building the modules needs no data).

    Arguments
    ---------
    hparams_file : str or path
        An hparams file; a missing file gives no overrides.

    Returns
    -------
    dict of str to str
        Key -> YAML value.

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     hparams = Path(tmp) / "hparams.yaml"
    ...     _ = hparams.write_text("data_folder: !PLACEHOLDER\\nlr: 0.1\\n"
    ...                            "checkpointer: !new:speechbrain.utils.checkpoints.Checkpointer\\n"
    ...                            "    checkpoints_dir: save\\n")
    ...     overrides = inert_overrides(hparams)
    >>> overrides
    {'checkpointer': 'null', 'data_folder': 'placeholder'}
    """
    import re

    from .hparams_files import load_yaml_tolerant

    path = Path(hparams_file)
    if not path.is_file():
        return {}
    keys = load_yaml_tolerant(path)
    overrides = {key: "null" for key in ("checkpointer", "apc_checkpointer") if key in keys}
    try:
        text = expand_hparams(path)
    except ValueError:
        text = path.read_text(encoding="utf-8", errors="replace")
    overrides.update({key: "placeholder" for key in re.findall(r"^(\w+):[ \t]*!PLACEHOLDER", text, flags=re.M)})
    return overrides


def _resolved_plain_yaml(hparams_file: Path, overrides: str) -> Dict[str, Any]:
    """Top-level mapping of an hparams file with ``!ref`` resolved and no tag run (tagged nodes as plain data)."""
    import yaml
    from hyperpyyaml import resolve_references

    from .hparams_files import TolerantLoader

    try:
        text = resolve_references(io.StringIO(expand_hparams(hparams_file)), overrides).getvalue()
        data = yaml.load(text, Loader=TolerantLoader)
    except (ValueError, KeyError, yaml.YAMLError) as err:
        raise ConfigurationError(f"{hparams_file}: {type(err).__name__}: {err}") from None
    return data if isinstance(data, dict) else {}


def _run_file(run: Path, *names: str, what: str) -> Path:
    """The first of ``names`` that is a file in ``run``; else :class:`ConfigurationError` (``what``)."""
    for name in names:
        if (run / name).is_file():
            return run / name
    raise ConfigurationError(f"{run}: no {' or '.join(names)} ({what})")


def _locate_apc(hparams: Dict[str, Any], run: Path, explicit: Optional[PathLike]) -> Path:
    """The run's APC model file: ``explicit``, else the hparams' ``apc_path`` or its default place."""
    if explicit is not None:
        if not Path(explicit).is_file():
            raise ConfigurationError(f"--apc {explicit}: no such file")
        return Path(explicit)
    configured = hparams.get("apc_path") or hparams.get("apc_export_path") \
        or Path(hparams.get("experiment_root", ".")) / "apc" / "apc.pt"
    path = Path(configured)
    candidates = [path]
    if not path.is_absolute():
        # relative paths are relative to where the recipe ran: the run folder minus output_folder
        out = Path(os.path.normpath(str(hparams.get("output_folder", ""))))
        parts = run.resolve().parts
        if out.parts and not out.is_absolute() and parts[-len(out.parts):] == out.parts:
            candidates.insert(0, Path(*parts[:-len(out.parts)]) / path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ConfigurationError(f"the APC model of {run} was not found (looked for {', '.join(map(str, candidates))}); "
                             "pass --apc PATH (export_run(apc_path=...))")


def _checkpoints(run: Path, metric: str, number: int = 1) -> list:
    """The ``number`` checkpoints of ``run/save`` with the lowest ``metric``, best first."""
    from speechbrain.utils.checkpoints import Checkpointer

    save = run / "save"
    if not save.is_dir():
        raise ConfigurationError(f"{run}: no save/ folder with checkpoints")
    checkpoints = Checkpointer(save).find_checkpoints(min_key=metric, max_num_checkpoints=number)
    if not checkpoints:
        raise ConfigurationError(f"{save}: no checkpoint with a validation {metric} (has the run finished an epoch?)")
    if len(checkpoints) < number:
        raise ConfigurationError(f"{save}: {len(checkpoints)} checkpoints with a validation {metric}, not {number} "
                                 "(the recipe keeps checkpoints_to_keep of them): average fewer")
    return checkpoints


def average_float_state_dicts(state_dicts: Iterable[Dict[str, Tensor]]) -> Dict[str, Tensor]:
    """Mean of the floating-point tensors of several state dicts (SpeechBrain's ``average_state_dicts``);
    integer and boolean buffers (counters, flags) are taken from the first one.

    Example
    -------
    >>> first = {"w": torch.tensor([1.0, 2.0]), "calibrated": torch.tensor(True)}
    >>> second = {"w": torch.tensor([3.0, 6.0]), "calibrated": torch.tensor(True)}
    >>> average_float_state_dicts([first, second])
    {'w': tensor([2., 4.]), 'calibrated': tensor(True)}
    """
    from speechbrain.utils.checkpoints import average_state_dicts

    state_dicts = list(state_dicts)
    floating = [k for k, v in state_dicts[0].items() if torch.is_floating_point(v)]
    mean = average_state_dicts([{k: d[k].clone() for k in floating} for d in state_dicts])
    return {k: mean[k] if k in mean else v for k, v in state_dicts[0].items()}


def export_run(run_dir: PathLike, out_dir: PathLike, dtype: str = "fp32",
               apc_path: Optional[PathLike] = None, average: int = 1) -> Path:
    """Turn the best checkpoint (min validation PER) of a finished recipe run, or the average of
    its best ``average`` checkpoints, into a model folder.

    Reads ``RUN_DIR/hyperparams.yaml`` (written by SpeechBrain; hparams files are code, load only
    runs you trust), ``RUN_DIR/results.json`` (or ``results_test_only.json``) and ``RUN_DIR/save``.
    Writes ``model.json``, ``encoder.pt``, ``apc.pt`` (when used) and ``README.md``.

    Arguments
    ---------
    run_dir : str or path
        Output folder of a recipe run.
    out_dir : str or path
        The model folder to write (new, empty, or a model folder to replace).
    dtype : str
        ``"fp32"``, or ``"fp16"``: weight matrices stored in fp16 (half the size; loaded back as
        fp32).
    apc_path : str or path, optional
        The APC model; default: the run's ``apc_path`` (or ``<experiment_root>/apc/apc.pt``).
    average : int
        1: the best checkpoint; N > 1: the weights averaged over the N best checkpoints
        (:func:`average_float_state_dicts`; the run must have kept N, ``checkpoints_to_keep``).

    Returns
    -------
    pathlib.Path
        The model folder.

    Raises
    ------
    ConfigurationError
        When the run folder lacks its hparams, results, checkpoints or APC model, or the
        checkpoint does not fit the hparams.
    """
    from .recipe import load_hparams

    run, out = Path(run_dir), Path(out_dir)
    if dtype not in WEIGHT_DTYPES:
        raise ConfigurationError(f"dtype must be one of {sorted(WEIGHT_DTYPES)}, got {dtype!r}")
    if average < 1:
        raise ConfigurationError(f"average must be at least 1 checkpoint, got {average}")
    if not run.is_dir():
        raise ConfigurationError(f"{run}: no such run folder")
    hp_file = _run_file(run, "hyperparams.yaml", "hparams.yaml", what="the hparams SpeechBrain writes into a recipe "
                        "run folder: is this the output_folder of a recipe run?")
    # results.json of a finished run, else the test-only evaluation of an unfinished run's best checkpoint
    results_file = _run_file(run, "results.json", "results_test_only.json",
                             what="the run has no test decoding yet: finish it, or evaluate its best checkpoint "
                                  "with --test_only, then export")
    try:
        results = json.loads(results_file.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ConfigurationError(f"{results_file}: unreadable ({err})") from None
    if not (run / "save").is_dir():
        raise ConfigurationError(f"{run}: no save/ folder with checkpoints")
    overrides = "\n".join(f"{k}: {v}" for k, v in inert_overrides(hp_file).items())
    raw = _resolved_plain_yaml(hp_file, overrides)
    if raw.get("target_unit", "phone") != "phone":
        raise ConfigurationError(f"{hp_file}: only phone models can be exported (target_unit: {raw['target_unit']})")
    if not isinstance(raw.get("encoder_module"), dict):
        raise ConfigurationError(f"{hp_file}: no encoder_module (build_encoder arguments) to rebuild the model from")
    hparams = load_hparams(str(hp_file), overrides)
    try:
        encoder_kwargs = json.loads(json.dumps({**raw["encoder_module"], "input_size": int(hparams["input_size"])}))
        encoder = build_encoder(**encoder_kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigurationError(f"{hp_file}: cannot rebuild the encoder from encoder_module ({err})") from None
    if repr(encoder) != repr(hparams["encoder_module"]):
        raise ConfigurationError(f"{hp_file}: the encoder_module arguments do not rebuild the run's encoder")
    metric = hparams.get("selection_metric", "PER")
    checkpoints = _checkpoints(run, metric, average)
    checkpoint = checkpoints[0]
    state = average_float_state_dicts(_load_tensors(c.path / "encoder.ckpt") for c in checkpoints)
    try:
        encoder.load_state_dict(state)
    except RuntimeError as err:
        raise ConfigurationError(f"{checkpoint.path}: the checkpoint does not fit {hp_file} "
                                 f"({str(err).splitlines()[0]})") from None
    controller = getattr(encoder, "controller", None)
    if controller is not None and controller.uses_surprisal and not bool(controller.calibrated):
        warnings.warn(f"{checkpoint.path}: the surprisal controller is not calibrated", DataPreparationWarning)
    epoch = None
    counter = checkpoint.path / "counter.ckpt"
    if counter.is_file():
        epoch = int(counter.read_text().strip())

    input_features = hparams["input_features"]
    uses_apc = input_features == "apc" or encoder.needs_surprisal(False)
    apc_file = _locate_apc(hparams, run, apc_path) if uses_apc else None
    if apc_file is not None:
        _check_apc_matches_cache(load_apc(apc_file), hparams)

    labels = hparams["label_encoder"].ind2lab
    prepare = hparams.get("prepare_options") or {}
    beam = hparams["beam_searcher"]
    config: Dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "encoder": encoder_kwargs,
        "input_features": input_features,
        "uses_apc": uses_apc,
        "features": hparams["feature_config"].as_dict(),
        "labels": [labels[i] for i in range(len(labels))],
        "blank_index": int(hparams.get("blank_index", 0)),
        "beam_size": int(beam.beam_size),
        "beam_backend": beam.backend,
        "merge_sil": bool(getattr(hparams["error_rate"], "keywords", {}).get("merge_sil", True)),
        "label_policy": {"labels": hparams.get("labels"), "g2p": hparams.get("g2p"),
                         "add_boundary_silence": prepare.get("add_boundary_silence", True)},
        "batch_size": int(hparams.get("batch_size", 8)),
        "weights_dtype": dtype,
        "dataset": hparams.get("dataset"),
        "seed": hparams.get("seed"),
        "source": {"run_dir": str(run.resolve()), "checkpoint": checkpoint.path.name, "epoch": epoch,
                   f"valid_{metric}": checkpoint.meta.get(metric), "apc": str(apc_file) if apc_file else None,
                   "averaged_checkpoints": [{"checkpoint": c.path.name, f"valid_{metric}": c.meta.get(metric)}
                                            for c in checkpoints] if average > 1 else None,
                   "test": {k: results.get(k) for k in ("PER", "flops_per_frame", "p_big_mean", "big_fraction",
                                                         "mean_steps", "epochs", "commit", "data", "date")
                            if k in results},
                   "epochs_trained": _epochs_trained(run) or results.get("epochs"), "commit": results.get("commit"),
                   "error_rate_details": results.get("error_rate_details"),
                   "calibration": results.get("calibration")},
    }
    blob = torch.load(apc_file, map_location="cpu", weights_only=True) if apc_file is not None else None
    return write_model_folder(out, config, encoder.state_dict(), blob)


def write_model_folder(out: Path, config: Dict[str, Any], encoder_state: Dict[str, Tensor],
                       apc_blob: Optional[Dict[str, Any]]) -> Path:
    """Write ``model.json``, ``encoder.pt``, ``apc.pt`` (with ``apc_blob``) and ``README.md`` into ``out``.

    Arguments
    ---------
    out : pathlib.Path
        New, empty or existing model folder.
    config : dict
        The ``model.json`` content; its ``weights_dtype`` (``"fp32"`` or ``"fp16"``) sets the
        dtype of the stored weight matrices.
    encoder_state : dict of str to torch.Tensor
        The encoder's state dict.
    apc_blob : dict, optional
        The APC model file's content (``state_dict`` and configuration); None: no ``apc.pt``.

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    ConfigurationError
        When ``out`` exists and is neither empty nor a model folder.
    """
    out = Path(out)
    dtype = WEIGHT_DTYPES[config["weights_dtype"]]
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MODEL_FILE).is_file())):
        raise ConfigurationError(f"{out}: exists and is not a model folder; export into a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    _atomic_save(_cast(encoder_state, dtype), out / ENCODER_FILE)
    if apc_blob is not None:
        _atomic_save({**apc_blob, "state_dict": _cast(apc_blob["state_dict"], dtype)}, out / APC_FILE)
    elif (out / APC_FILE).exists():
        (out / APC_FILE).unlink()
    (out / MODEL_FILE).write_text(json.dumps(config, indent=2, default=str) + "\n", encoding="utf-8")
    (out / CARD_FILE).write_text(model_card(config, out), encoding="utf-8")
    return out


def _check_apc_matches_cache(apc: APCModel, hparams: Dict[str, Any]) -> None:
    """Warn when the run's feature cache was built by another APC model than the one exported."""
    from .cache import cache_key

    folder = hparams.get("cache_folder")
    if not folder or not Path(folder).is_dir() or not hparams.get("use_feature_cache", True):
        return
    caches = [p for p in Path(folder).iterdir() if (p / "cache.json").is_file()
              and json.loads((p / "cache.json").read_text()).get("apc")]
    if caches and Path(folder, cache_key(apc, hparams["feature_config"], torch.float32)) not in caches:
        warnings.warn(f"the APC model being exported built none of the feature caches in {folder}: was the run "
                      "trained with another APC model? (pass --apc PATH)", DataPreparationWarning)


def _millions(value: Optional[float]) -> str:
    """``"1.23M"``, or a dash for None."""
    return "–" if value is None else f"{value / 1e6:.2f}M"


def _epochs_trained(run: Path) -> Optional[int]:
    """The last epoch in the run's ``history.jsonl`` (results.json's ``epochs`` is the evaluated
    checkpoint's epoch counter), or None without a history."""
    from .runs import read_history

    return max((int(row["epoch"]) for row in read_history(Path(run)) if row.get("epoch") is not None), default=None)


def model_card(config: Dict[str, Any], out: Path) -> str:
    """The model folder's README.md, from ``model.json`` (its ``source`` part: the run it came from).

    Arguments
    ---------
    config : dict
        The ``model.json`` content.
    out : pathlib.Path
        The model folder (its name and the size of its ``.pt`` files appear in the card).

    Returns
    -------
    str
        Markdown text.
    """
    enc, src = config["encoder"], config.get("source") or {}
    test, details = src.get("test") or {}, src.get("error_rate_details") or {}
    calibration, policy = src.get("calibration") or {}, config.get("label_policy") or {}
    size = sum(f.stat().st_size for f in out.iterdir() if f.suffix == ".pt")
    name = enc.get("name", "conditional")
    model = name if name != "conditional" else f"conditional, {enc.get('controller')} controller"
    rows = [
        ("model", f"{model}, architecture {enc.get('architecture', 'paper')}, inputs {config['input_features']}"
                  f"{' + APC surprisal' if config.get('uses_apc') and config['input_features'] != 'apc' else ''}"),
        ("data", f"{config.get('dataset')}: " + (", ".join(f"{k} `{Path(v).name}`"
                                                           for k, v in sorted((test.get('data') or {}).items()))
                                                 or "–")),
        ("labels", f"{len(config['labels']) - 1} phones + blank; training labels: {_policy(policy)}"),
        ("epochs", f"{src.get('epochs_trained', '–')} trained; best checkpoint: epoch {src.get('epoch', '–')} "
                   f"(validation PER {_fmt(src.get('valid_PER'))} %)"),
    ]
    averaged = src.get("averaged_checkpoints")
    if averaged:
        rows.append(("weights averaged", f"over the {len(averaged)} best checkpoints (validation PER "
                                         + ", ".join(f"{_fmt(c.get('valid_PER'))}" for c in averaged) + " %)"))
    rows += [
        ("seed", str(config.get("seed", "–"))),
        ("test PER" + (" (of the best checkpoint alone)" if averaged else ""), f"{_fmt(test.get('PER'))} % (S {details.get('substitutions', '–')} / D "
                     f"{details.get('deletions', '–')} / I {details.get('insertions', '–')}, "
                     f"{details.get('num_ref_tokens', '–')} reference phones, {details.get('num_utterances', '–')} "
                     f"utterances), CTC beam search width {config.get('beam_size', 10)}"),
        ("FLOPs per frame", f"{_millions(test.get('flops_per_frame'))} on the test set (MACs counted from what "
                            f"ran{', APC included' if config.get('uses_apc') else ''})"),
    ]
    if test.get("p_big_mean") is not None:
        rows.append(("routing", f"p_big {test['p_big_mean']:.3f}, big network on "
                                f"{100 * (test.get('big_fraction') or 0):.1f} % of test frames"))
    if calibration.get("weight") is not None:
        rows.append(("calibration", f"w {calibration['weight']:.5g}, b {calibration['bias']:.5g} (target mean "
                                    f"{calibration.get('target_mean')}, variance {calibration.get('target_var')})"))
    rows += [("commit", str(src.get("commit", "–"))),
             ("weights", f"{config['weights_dtype']}, {size / 2 ** 20:.1f} MiB; format version "
                         f"{config['format_version']}")]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    stochastic = (enc.get("conditional_options") or {}).get("test_stochastic")
    tested = "" if stochastic is None else f" ({'sampled' if stochastic else 'deterministic'} routing)"
    origin = (f", exported from checkpoint `{src['checkpoint']}` of a recipe run with `surprisal-cc export`."
              if src.get("checkpoint") else ".")
    return f"""# surprisal_cc phone recogniser ({config.get('dataset') or 'untrained'}, {model})

Surprisal-triggered conditional computation for CTC phone recognition{origin}

| | |
|---|---|
{table}

## Use

```python
from surprisal_cc.inference import ConditionalASR

asr = ConditionalASR.from_pretrained("{out.name}")   # deterministic routing (p_big > 0.5), one thread
result = asr.transcribe_file("utterance.flac")
print(result.text, result.segments, result.flops_per_frame, result.rtf)
```

```bash
surprisal-cc transcribe utterance.flac --model {out.name} [--json | --format ctm] [--plot routing.png]
surprisal-cc evaluate LibriSpeech/dev-clean-2 --model {out.name} [--mfa-labels dev-clean-2_mfa.csv] [--json]
```

The test PER above is the recipe's decoding{tested}; both commands and `ConditionalASR` route
deterministically (`p_big > 0.5`) unless given `--sampled` (`routing="sampled"`).
"""


def _policy(policy: Dict[str, Any]) -> str:
    """The training label policy in words."""
    labels = policy.get("labels")
    text = ", ".join(f"{k} {v}" for k, v in labels.items()) if isinstance(labels, dict) else str(labels or "–")
    return text + (f" (g2p {policy['g2p']})" if policy.get("g2p") else "")


def _fmt(value: Optional[float]) -> str:
    """Two decimals, or a dash for None."""
    return "–" if value is None else f"{value:.2f}"


def iter_audio_paths(paths: Sequence[PathLike]) -> Iterator[Path]:
    """The given paths; a folder stands for the audio files under it (sorted).

    Audio files are those ending in one of :data:`AUDIO_SUFFIXES` (what libsndfile decodes:
    ``.flac``, ``.wav``, ``.sph``, ``.ogg``, ``.opus``, ``.mp3``, ``.aiff``, ``.aif``).

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     for name in ("b.flac", "a.wav", "c.opus", "notes.txt"):
    ...         _ = Path(tmp, name).write_text("")
    ...     names = [p.name for p in iter_audio_paths([tmp])]
    >>> names
    ['a.wav', 'b.flac', 'c.opus']
    """
    from .data.manifest import list_files

    for path in map(Path, paths):
        if path.is_dir():
            yield from list_files(path, AUDIO_SUFFIXES)
        else:
            yield path
