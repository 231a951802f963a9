"""Use a trained model: load a model folder (:mod:`surprisal_cc.model.model_folder`), transcribe audio,
evaluate a corpus (:mod:`surprisal_cc.inference.evaluation`).

Decoding is the recipes' test decoding (CTC prefix beam search, the run's beam width), scoring is
theirs too (corpus-level PER, repeated ``sil`` merged), and FLOPs are counted from what ran, as the
Brain counts them. A recipe run becomes a model folder with :func:`surprisal_cc.training.export.export_run`.

Example
-------
>>> import torch
>>> from surprisal_cc.training.labels import phone_set
>>> asr = ConditionalASR.untrained(phone_set("librispeech"), controller="random")
>>> results = asr.transcribe_batch(torch.randn(2, 16000).clamp(-1, 1), torch.tensor([1.0, 0.5]))
>>> [r.num_frames for r in results], results[0].flops_per_frame > 0
([49, 24], True)
>>> results[0].segments[0][1], results[0].frame_shift_s   # each phone's (phone, start s, end s)
(0.0, 0.02)
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple, Union

import torch
from speechbrain.utils.run_opts import RunOptions
from torch import Tensor

from surprisal_cc.checks import check_batch_size, check_routing_seed, is_number, resolve_device
from surprisal_cc.model.apc import APCModel, FrozenAPC
from surprisal_cc.model.architectures import build_encoder
from surprisal_cc.model.calibration import budget_big_fraction, solve_budget
from surprisal_cc.data.audio import (AudioInfo, check_audio_each, refuse_bad_audio, refuse_short_waveforms,
                                     split_checked, warn_converted)
from surprisal_cc.data.waveforms import batch_waveforms, scaled_to_level
from surprisal_cc.data.errors import BadAudioError
from surprisal_cc.decoding.search import CTCBeamSearch
from surprisal_cc.inference.evaluation import evaluate_corpus
from surprisal_cc.model.forward import DecodedBatch, ForwardResult, run_model
from surprisal_cc.model.features import FeatureConfig, FilterbankFrontEnd
from surprisal_cc.model.nnet import (Encoder, EncoderOutput, bias_shift_problem, input_size_for, lengths_to_mask, routes_by_chance,
                   runs_apc, seeded_draws)
from surprisal_cc.model.flops import module_macs
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.model_folder import (FORMAT_VERSION, ModelFormatError, check_weights_dtype, default_model_dir, load_model_folder,
                           model_config, write_model_folder)
from surprisal_cc.runtime import INFERENCE_PRECISIONS, native_bf16
from surprisal_cc.runtime import DEFAULT_DECODING_THREADS, check_threads, decoding_threads

PathLike = Union[str, os.PathLike]

ROUTINGS = ("deterministic", "sampled")

__all__ = ["ConditionalASR", "Transcription", "ForwardResult", "DecodedBatch", "ModelFormatError", "BadAudioError",
           "default_model_dir", "FORMAT_VERSION", "ROUTINGS"]


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
        :mod:`surprisal_cc.decoding.timestamps`).
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
        """The phones with their times as CTM lines (:func:`~surprisal_cc.decoding.timestamps.format_ctm`);
        ``name`` defaults to the file's stem."""
        from surprisal_cc.decoding.timestamps import format_ctm

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


def resolve_inference_precision(precision: str, device: torch.device) -> str:
    """``fp32``, or ``bf16`` where the device computes it natively; ``auto``: the faster one.

    ``auto`` is fp32 for inference: in the inference benchmark (benchmarks/README.md) bf16 autocast
    made ``transcribe`` slower on CPUs with native bf16 (RTF 0.052 against 0.037 at batch 1: the
    APC's and encoder's GRUs run small per-step products where the casts cost more than they
    save), and on GPUs (kernel launches, not arithmetic, bound these small networks). Training,
    with its large batched products, keeps bf16 there (:func:`surprisal_cc.runtime.auto_precision`).

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
    if precision not in INFERENCE_PRECISIONS:
        raise ConfigurationError(f"precision must be one of {INFERENCE_PRECISIONS}, got {precision!r}")
    if precision == "auto":
        return "fp32"
    if precision == "bf16" and not native_bf16(device):
        raise ConfigurationError(f"precision bf16: this {device.type.upper()} has no native bf16 "
                                 "(CPU: AVX-512-BF16 or AMX; GPU: Ampere or newer); use fp32")
    return precision


class ConditionalASR:
    """A trained conditional-computation CTC phone recogniser, ready for inference.

    Unlike SpeechBrain's ``Pretrained``, it is not a ``torch.nn.Module``: its networks are
    ``encoder`` and ``apc`` (always in eval mode), :meth:`to` moves them, and :meth:`forward` returns
    the encoder output with the filterbanks, frame counts and surprisal, a :class:`ForwardResult`
    (:meth:`encode_batch`: the log-probabilities alone).

    Arguments
    ---------
    config : dict
        The ``model.json`` content (see :func:`~surprisal_cc.training.export.export_run`).
    encoder : Encoder
        The encoder with its weights (the controller's calibration included).
    apc : APCModel, optional
        The frozen APC model; required when the model uses APC features or surprisal.
    device : str
        ``"cpu"`` (default) or ``"cuda"``/``"cuda:N"``.
    precision : str
        ``"fp32"`` (default), ``"bf16"`` (torch.autocast; only where the device has native bf16)
        or ``"auto"`` (:func:`resolve_inference_precision`).
    routing : str, optional
        ``"deterministic"`` (the same phones, routing and FLOPs on every run and at every batch size)
        or ``"sampled"`` (drawn, as the recipes test by default), see :meth:`set_routing`; None
        (default): deterministic, unless the model routes by chance (:attr:`routes_by_chance`).
    seed : int, optional
        Seed of sampled routing (a random one, recorded in ``seed``, when None).
    threads : int, optional
        Torch intra-op threads while decoding (default 1, :mod:`surprisal_cc.runtime`); None
        leaves torch's setting.

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from surprisal_cc.training.labels import phone_set
    >>> asr = ConditionalASR.untrained(phone_set("librispeech"), controller="random")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     folder = asr.save(Path(tmp) / "model")
    ...     files = sorted(p.name for p in folder.iterdir())
    ...     loaded = ConditionalASR.from_hparams(source=folder, savedir=None)
    >>> files, loaded.labels == asr.labels, loaded.routing   # a random controller is always sampled
    (['README.md', 'encoder.pt', 'model.json'], True, 'sampled')
    """

    def __init__(self, config: Dict[str, Any], encoder: Encoder, apc: Optional[APCModel] = None,
                 device: Union[str, torch.device] = "cpu", precision: str = "fp32", routing: Optional[str] = None,
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
        self.uses_apc = runs_apc(config["input_features"], encoder, training=False)
        if self.uses_apc and apc is None:
            raise ModelFormatError("this model needs an APC model (APC features or a surprisal controller)")
        self.apc = FrozenAPC(apc).to(self.device) if self.uses_apc else None
        self.apc_macs = module_macs(apc) if self.uses_apc else 0
        self.beam_search = CTCBeamSearch(blank=int(config.get("blank_index", 0)),
                                         beam_size=int(config.get("beam_size", 10)),
                                         backend=config.get("beam_backend", "native"),
                                         blank_penalty=float(config.get("blank_penalty", 0.0)))
        self.source: Optional[Path] = None
        self.routing, self.seed = "deterministic", None
        self.set_routing(routing, seed)
        self.input_level_dbfs: Optional[float] = None  # set_input_level: each utterance scaled to it

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(cls, source: Optional[PathLike] = None, device: Union[str, torch.device] = "cpu",
                        precision: str = "fp32", routing: Optional[str] = None, seed: Optional[int] = None,
                        threads: Optional[int] = DEFAULT_DECODING_THREADS) -> "ConditionalASR":
        """Load an exported model folder (default: :func:`default_model_dir`).

        Arguments
        ---------
        source : str or path, optional
            An exported model folder (see :func:`~surprisal_cc.training.export.export_run`); None: :func:`default_model_dir`.
        device : str or torch.device
            ``"cpu"`` or ``"cuda"``/``"cuda:N"``.
        precision : str
            ``"fp32"``, ``"bf16"`` or ``"auto"`` (see :func:`resolve_inference_precision`).
        routing : str, optional
            ``"deterministic"`` or ``"sampled"``, whatever the model was tested with; None (default):
            deterministic, but sampled where ``seed`` is given or the model routes by chance (a random
            controller) (:meth:`set_routing`).
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
            When the folder is missing, incomplete, damaged or of another format version, or its
            ``apc.pt`` is not the APC it was written with.

        Example
        -------
        >>> asr = ConditionalASR.from_pretrained()   # the shipped model
        >>> asr.source.name, len(asr.labels), asr.uses_apc, asr.device
        ('pretrained', 42, True, device(type='cpu'))
        """
        folder = Path(source) if source is not None else default_model_dir()
        config, encoder, apc = load_model_folder(folder)
        asr = cls(config, encoder, apc, device=device, precision=precision, routing=routing, seed=seed,
                  threads=threads)
        asr.source = folder
        return asr

    @classmethod
    def from_hparams(cls, source: Optional[PathLike] = None, savedir: Optional[PathLike] = None,
                     run_opts: Optional[Union[Dict[str, Any], RunOptions]] = None, **kwargs) -> "ConditionalASR":
        """SpeechBrain's name for :meth:`from_pretrained`: ``source`` is a local model folder, whose
        ``model.json`` takes the place of SpeechBrain's ``hparams_file`` (not an argument here).

        Arguments
        ---------
        source : str or path, optional
            An exported model folder (nothing is downloaded); None: :func:`default_model_dir`.
        savedir : str or path, optional
            Accepted for SpeechBrain compatibility; a local folder needs no copy, so it is unused.
        run_opts : dict or RunOptions, optional
            SpeechBrain's run options (an unknown name is an error, as there). ``device`` and
            ``precision`` are read from them, the rest do not apply; a ``device`` of None is the CPU
            (SpeechBrain would pick CUDA where it can).
        **kwargs
            Further arguments of :meth:`from_pretrained`.

        Returns
        -------
        ConditionalASR
            The model.
        """
        if not isinstance(run_opts, RunOptions):
            run_opts = RunOptions.from_dictionary(run_opts or {})
        options = {k: run_opts[k] for k in ("device", "precision") if run_opts[k] is not None}
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
            Encoder name, as :func:`~surprisal_cc.model.architectures.build_encoder` takes it.
        controller : str
            Controller name (conditional encoder).
        input_features : str
            ``"fbank"`` or ``"apc"``; a random APC model is built when needed.
        device : str
            Device of the model.
        **encoder_options
            Further arguments of :func:`~surprisal_cc.model.architectures.build_encoder`.

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
        kwargs = dict(name=encoder, input_size=input_size_for(input_features), num_outputs=len(labels) + 1,
                      controller=controller, **encoder_options)
        config = model_config(kwargs, input_features, ["<blank>", *labels])
        encoder_module = build_encoder(**kwargs)
        apc = APCModel() if runs_apc(input_features, encoder_module, training=False) else None
        return cls(config, encoder_module, apc, device=device)

    def save(self, folder: PathLike, dtype: str = "fp32") -> Path:
        """Write this model as a model folder (``from_pretrained`` loads it back, its bias shift
        (:meth:`set_bias_shift`, :meth:`meet_flops_budget`), beam size and blank penalty included).

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
        from surprisal_cc.model.apc import apc_blob

        check_weights_dtype(dtype)  # before any work (write_model_folder checks it too)
        blob = apc_blob(self.apc.apc) if self.apc is not None else None
        config = {**self.config, "uses_apc": self.uses_apc, "weights_dtype": dtype,  # decoding as it is set now
                  "beam_size": self.beam_search.beam_size, "blank_penalty": self.beam_search.blank_penalty}
        if self.encoder.stage_controller(False) is not None:  # the operating point travels with the weights
            shift = float(self.encoder.test_bias_shift)  # (a shift set back to 0 replaces a loaded one)
            encoder_config = dict(config["encoder"])
            options = {k: v for k, v in (encoder_config.get("conditional_options") or {}).items()
                       if k != "test_bias_shift"}
            if shift or "conditional_options" in encoder_config:
                encoder_config["conditional_options"] = {**options, **({"test_bias_shift": shift} if shift else {})}
            config["encoder"] = encoder_config
        state = {k: v.cpu() for k, v in self.encoder.state_dict().items()}
        return write_model_folder(Path(folder), config, state, blob)

    def set_bias_shift(self, shift: float) -> None:
        """Add ``shift`` to the controller's logit (paper Appendix B): a negative shift sends fewer
        frames to the big network (fewer FLOPs), a positive one more. Big-only and small-only have
        no logit to shift, nor do the adaptive encoders: a clear error."""
        if not is_number(shift):
            raise ConfigurationError(f"bias shift must be a finite number, got {shift!r}")
        problem = bias_shift_problem(self.encoder)
        if problem and (shift or self.encoder.stage_controller(False) is None):
            raise ConfigurationError(f"bias shift {shift:g}: {problem}")
        self.encoder.test_bias_shift = float(shift)

    def set_input_level(self, dbfs: Optional[float]) -> None:
        """Scale each utterance (a long file decoded in parts as a whole, by one gain) to an RMS level of ``dbfs`` dB
        relative to full scale before its features, by at most 40 dB, e.g. -26 (LibriSpeech's speech);
        None (the default) reads audio as it is. The features are not level-normalised, so a model
        trained on LibriSpeech errs more on much quieter or louder recordings
        (``docs/results/MiniLibriSpeech/level_sensitivity.json``).

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "sil"])
        >>> asr.set_input_level(-26)
        >>> tone = torch.sin(2 * torch.pi * 220 * torch.arange(8000) / 16000)[None]
        >>> quiet = asr.filterbanks(0.001 * tone, torch.tensor([8000]))[0]
        >>> loud = asr.filterbanks(0.1 * tone, torch.tensor([8000]))[0]
        >>> round(float((quiet - loud).abs().max()), 3)
        0.0
        """
        if dbfs is not None and (not is_number(dbfs) or not -80.0 <= dbfs <= 0.0):
            raise ConfigurationError(f"input level must be a number of dBFS in [-80, 0] (e.g. -26), got {dbfs!r}")
        self.input_level_dbfs = None if dbfs is None else float(dbfs)

    def budget_big_fraction(self, fraction: float) -> float:
        """The fraction of frames on the big network that spends ``fraction`` x the big-only MACs per
        frame; a clear error for a model without a surprisal controller or a budget out of range."""
        if not is_number(fraction):
            raise ConfigurationError(f"FLOPs fraction must be a finite number, got {fraction!r}")
        try:
            return budget_big_fraction(self.encoder, self.apc_macs, float(fraction))
        except ValueError as err:
            raise ConfigurationError(f"FLOPs fraction {fraction}: {err}") from None

    @torch.no_grad()
    def meet_flops_budget(self, audio: Sequence[PathLike], fraction: float, batch_size: int = 8,
                          long_chunk_s: Optional[float] = None) -> Dict[str, Any]:
        """Set the bias shift (:meth:`set_bias_shift`) at which the expected MACs per frame over the
        frames of ``audio`` are ``fraction`` x those of big-only, from their APC surprisal alone
        (:func:`~surprisal_cc.model.calibration.solve_budget`; no labels). One extra APC pass over the
        audio (:meth:`frame_surprisal`: long files in parts); the surprisal controller only.

        Returns ``{"fraction", "big_fraction", "bias_shift", "frames"}``.

        Raises
        ------
        ConfigurationError
            For a model without a surprisal controller, a fraction out of range or a batch size
            below 1.
        BadAudioError
            Listing every file of ``audio`` that is not usable audio, before any is decoded.
        """
        if isinstance(audio, (str, os.PathLike)):
            audio = [audio]
        audio = list(audio)
        if not audio:
            raise ConfigurationError("meet_flops_budget needs audio files to solve the bias shift on; got none")
        if not all(isinstance(path, (str, os.PathLike)) for path in audio):
            raise ConfigurationError("meet_flops_budget reads audio files: give their paths")
        check_batch_size(batch_size)
        self.budget_big_fraction(fraction)  # a budget this model cannot meet fails before any audio is read
        hint = "the bias shift of a FLOPs budget is solved on usable audio"
        problems = split_checked(self.check_files(audio))[1]
        refuse_bad_audio(problems, len(audio), False, hint, hint)
        solution = solve_budget(self.encoder, self.apc_macs, float(fraction),
                                self.frame_surprisal(audio, batch_size, long_chunk_s))
        self.set_bias_shift(solution["bias_shift"])
        return solution

    @torch.no_grad()
    def frame_surprisal(self, audio: Sequence[PathLike], batch_size: int = 8,
                        long_chunk_s: Optional[float] = None) -> Iterator[Tensor]:
        """The APC surprisal of the real frames of the files ``audio``, ``batch_size`` files at a time
        (one 1-D tensor per batch); a file longer than ``long_chunk_s`` plus twice the context
        (as :meth:`transcribe_file` decides) alone, in parts with context
        (:func:`~surprisal_cc.inference.long_audio.long_surprisal`), in bounded memory."""
        from surprisal_cc.inference.long_audio import is_long, long_surprisal, part_seconds

        chunk_s = part_seconds(long_chunk_s)
        paths = list(audio)
        long = [is_long(path, chunk_s) for path in paths]  # headers only
        short = [path for path, in_parts in zip(paths, long) if not in_parts]
        for start in range(0, len(short), batch_size):
            signals = [self.read_file(path) for path in short[start:start + batch_size]]
            samples = torch.tensor([signal.numel() for signal in signals])
            fbank, lengths = self.filterbanks(torch.nn.utils.rnn.pad_sequence(signals, batch_first=True), samples)
            surprisal = self.apc_surprisal(fbank, lengths)
            yield surprisal[lengths_to_mask(lengths, surprisal.shape[1])]
        for path in (path for path, in_parts in zip(paths, long) if in_parts):
            yield from long_surprisal(self, path, chunk_s)

    @torch.no_grad()
    def apc_surprisal(self, fbank: Tensor, lengths: Tensor) -> Tensor:
        """(B, T) float32 APC surprisal of a padded batch of filterbank frames (``lengths``: (B,)
        frame counts), on this model's threads and precision; zero on padding."""
        with decoding_threads(self.threads), self._autocast():
            return self.apc(fbank, lengths).surprisal.float()

    @property
    def can_sample(self) -> bool:
        """Whether this model has routing to draw (:meth:`~surprisal_cc.model.nnet.Encoder.routing_draws`):
        a small/big encoder whose controller draws from ``p_big`` (surprisal, random; not learned,
        big-only or small-only) or PonderNet in its ``sample``/``threshold`` inference (ACT, and
        PonderNet's ``expected`` and ``truncated`` inference, compute the same thing on every run)."""
        return self.encoder.routing_draws()

    @property
    def routes_by_chance(self) -> bool:
        """Whether only a draw routes this model's frames (the random controller: the same ``p_big``
        on every frame), so that its routing is always sampled."""
        return routes_by_chance(self.encoder)

    def set_routing(self, routing: Optional[str], seed: Optional[int] = None) -> None:
        """``"deterministic"``: the big network where ``p_big > 0.5`` (PonderNet's ``sample``
        inference: halt at the threshold); ``"sampled"``: drawn from ``p_big`` (PonderNet: sampled
        halting), seeded with ``seed`` (a random seed when None) before each
        :meth:`transcribe_batch` and :meth:`evaluate` call, so that every call is reproducible from
        the recorded ``seed``; None: sampled where a ``seed`` is given or the model routes by chance
        (:attr:`routes_by_chance`, which refuses ``"deterministic"``: every frame would go to one
        network), else deterministic. A model that draws nothing (:attr:`can_sample` False)
        refuses ``"sampled"``.

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "sil"], controller="random")
        >>> asr.set_routing("sampled", seed=3)
        >>> asr.routing, asr.seed, asr.encoder.test_stochastic
        ('sampled', 3, True)
        >>> ConditionalASR.untrained(["AH", "sil"], encoder="act").set_routing("sampled")
        Traceback (most recent call last):
            ...
        surprisal_cc.errors.ConfigurationError: this model's routing draws nothing (ACTEncoder): leave out --sampled and --seed (routing='deterministic')
        """
        if routing is None:  # a seed asks for sampled routing, as --seed implies --sampled
            routing = "sampled" if self.routes_by_chance or seed is not None else "deterministic"
        if routing not in ROUTINGS:
            raise ConfigurationError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        if routing == "deterministic" and self.routes_by_chance:
            controller = self.encoder.stage_controller(False)
            raise ConfigurationError(f"this model routes by chance (its {controller.name!r} controller gives the same "
                                     "p_big on every frame): deterministic routing would run one network on every "
                                     "frame; leave out --deterministic (routing='sampled')")
        sampled = routing == "sampled"
        if sampled and not self.can_sample:
            raise ConfigurationError(f"this model's routing draws nothing ({self.encoder.routing_kind()}): leave out "
                                     "--sampled and --seed (routing='deterministic')")
        if seed is not None and not sampled:
            raise ConfigurationError("seed seeds sampled routing, and deterministic routing draws nothing: "
                                     "set_routing('sampled', seed) (--sampled --seed N)")
        seed = check_routing_seed(seed) if seed is not None else (
            int.from_bytes(os.urandom(4), "little") % 2 ** 31 if sampled else None)
        self.encoder.set_test_sampling(sampled)  # every argument checked: now change the model
        self.routing, self.seed = routing, seed

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
        with seeded_draws(seed if self.routing == "sampled" else None, self.device):
            yield

    # ------------------------------------------------------------------ forward
    def _autocast(self):
        """bf16 autocast context when ``precision`` is bf16, else a null context."""
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @torch.no_grad()
    def forward(self, wavs: Tensor, wav_lens: Optional[Tensor] = None) -> ForwardResult:
        """The encoder output, fbank, frame counts and surprisal of one padded batch, without decoding, on
        this model's threads, sampled routing seeded with its seed as :meth:`encode_batch` does
        (:meth:`forward_pass` without either, for callers that seed once for many batches).

        Unlike SpeechBrain's interfaces, whose ``forward`` returns what ``encode_batch`` does, this
        ``forward`` returns the whole :class:`~surprisal_cc.model.forward.ForwardResult` (the encoder's
        :class:`~surprisal_cc.model.nnet.EncoderOutput` and the stages before it); :meth:`encode_batch` gives
        the log-probabilities alone.

        Arguments
        ---------
        wavs : torch.Tensor
            (B, S) padded 16 kHz audio, or what :meth:`transcribe_batch` takes (int16, a list of
            1-D waveforms, arrays).
        wav_lens : torch.Tensor, optional
            (B,) lengths: relative in (0, 1] (floating point, SpeechBrain's convention) or sample
            counts (integers); None: every waveform is whole.

        Returns
        -------
        ForwardResult
            ``output`` (the :class:`~surprisal_cc.model.nnet.EncoderOutput`: log-probabilities ``log_probs``,
            (B, T, labels), ``lengths`` and routing statistics), ``fbank`` ((B, T, n_mels) log-mel
            frames), ``frames`` ((B,) frame count of each utterance) and ``surprisal`` ((B, T) APC
            surprisal, None when the model runs no APC); it also unpacks as
            ``out, fbank, frames, surprisal``.

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
        >>> result = asr.forward(torch.rand(2, 8000) - 0.5, torch.tensor([1.0, 0.5]))
        >>> tuple(result.output.log_probs.shape), tuple(result.fbank.shape), result.frames.tolist(), result.surprisal
        ((2, 24, 4), (2, 24, 80), [24, 12], None)
        """
        with self.seeded_routing(), decoding_threads(self.threads):
            return self.forward_pass(wavs, wav_lens)

    @torch.no_grad()
    def forward_pass(self, wavs: Tensor, wav_lens: Optional[Tensor] = None, gain: Optional[float] = None) -> ForwardResult:
        """:meth:`forward` on the caller's threads and random state: sampled routing draws from the
        global RNG as it is (the caller seeds it, e.g. once per corpus with :meth:`seeded_routing`);
        ``gain`` as :meth:`filterbanks` takes it."""
        wavs, samples = self.batch_inputs(wavs, wav_lens)
        fbank, frames = self.filterbanks(wavs, samples, gain=gain)
        with self._autocast():
            step = run_model(self.encoder, fbank, frames, apc=self.apc, use_apc_features=self.use_apc_features)
        surprisal = step.surprisal.float() if step.surprisal is not None else None
        return ForwardResult(output=step.output, fbank=fbank, frames=frames, surprisal=surprisal)

    def filterbanks(self, wavs: Tensor, samples: Tensor, gain: Optional[float] = None) -> Tuple[Tensor, Tensor]:
        """(fbank, frame counts) of a padded batch (``samples``: (B,) sample counts) on this model's
        device. The filterbanks are computed on the CPU in float32, as the recipes' feature cache
        computes them, after scaling each utterance to :attr:`input_level_dbfs` where it is set
        (:meth:`set_input_level`), or by ``gain`` where it is given instead (the parts of a long file,
        scaled by the gain of the whole file: :mod:`surprisal_cc.inference.long_audio`); utterances shorter than one frame are a
        :class:`~surprisal_cc.data.errors.DataPreparationError` naming their places in the batch
        (:func:`~surprisal_cc.data.audio.refuse_short_waveforms`).

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "sil"])
        >>> fbank, frames = asr.filterbanks(torch.zeros(2, 16000), torch.tensor([16000, 8000]))
        >>> fbank.shape, frames.tolist()
        (torch.Size([2, 49, 80]), [49, 24])
        """
        refuse_short_waveforms(samples, **self.feature_config.audio_limits)  # the one length check of a batch
        wavs = wavs.detach().to("cpu", torch.float32)
        if gain is not None:
            wavs = (wavs.double() * gain).to(torch.float32)
        elif self.input_level_dbfs is not None:
            wavs = scaled_to_level(wavs, samples, self.input_level_dbfs)
        fbank, frames = self.front_end(wavs, samples)
        return fbank.to(self.device), frames.to(self.device)

    @property
    def frame_shift_s(self) -> float:
        """Seconds between the model's frames (the filterbank's shift times its frame skip)."""
        return self.feature_config.frame_shift_ms * self.feature_config.frame_skip / 1000.0

    def run_batch(self, wavs: Tensor, samples: Tensor) -> DecodedBatch:
        """One padded batch (``samples``: (B,) sample counts) through the model and the beam search, on
        this model's threads: its :class:`ForwardResult` fields with each utterance's label ids
        (``hyps``) and the wall time of both (``seconds``), a :class:`DecodedBatch`.

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
        >>> batch = asr.run_batch(torch.rand(2, 8000) - 0.5, torch.tensor([8000, 4000]))
        >>> batch.frames.tolist(), len(batch.hyps), batch.seconds > 0
        ([24, 12], 2, True)
        """
        with decoding_threads(self.threads):
            start = time.perf_counter()
            forward = self.forward_pass(wavs, samples)
            hyps = self.beam_search(forward.output.log_probs.float(), forward.output.lengths)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            return DecodedBatch(output=forward.output, hyps=hyps, fbank=forward.fbank, frames=forward.frames,
                                surprisal=forward.surprisal, seconds=time.perf_counter() - start)

    def phones_of(self, ids: Sequence[int]) -> List[str]:
        """Label names of label ids."""
        return [self.labels[i] for i in ids]

    def frame_results(self, out: EncoderOutput, b: int, n: int, surprisal: Optional[Tensor]) -> Dict[str, Any]:
        """Per-frame arrays of utterance ``b`` (its first ``n`` frames) from one forward pass:
        ``surprisal``, ``p_big``, ``steps``, ``use_big`` (None where the model has none)."""
        stat = (lambda key: out.stats[key][b, :n].detach().float().cpu() if key in out.stats else None)
        return {"surprisal": surprisal[b, :n].cpu() if surprisal is not None else None,
                "p_big": stat("p_big"), "steps": stat("steps"),
                "use_big": out.stats["use_big"][b, :n].cpu() if "use_big" in out.stats else None}

    def frame_macs(self, out: EncoderOutput, b: int, frames: slice) -> Dict[str, float]:
        """MACs per component that ran on the ``frames`` of utterance ``b`` of one forward pass, summed
        (:meth:`flops_components` makes them per frame, with the APC's)."""
        return {name: float(m[b, frames].double().sum()) for name, m in out.frame_macs.items()}

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
        wavs : torch.Tensor or list of torch.Tensor
            (B, S) or (S,) mono audio in [-1, 1] (int16 tensors are scaled by 1/32768), or a list of
            (S,) waveforms, padded here (their lengths taken as they are).
        wav_lens : torch.Tensor, optional
            (B,) relative lengths in (0, 1], as in SpeechBrain. Integer tensors are still read as
            sample counts (the earlier form of this argument); prefer ``num_samples``.
        num_samples : torch.Tensor, optional
            (B,) absolute lengths in samples, instead of ``wav_lens``.
        sample_rate : int, optional
            Sample rate of ``wavs`` in whole Hz; resampled to the model's when it differs. None: the
            model's (``feature_config.sample_rate``, 16 kHz).
        timestamps : bool
            Align each phone to the frames (``segments``).

        Returns
        -------
        list of Transcription
            One per utterance, in batch order (SpeechBrain's returns ``(predicted_words,
            predicted_tokens)``; here ``str(t)`` is the phones, ``t.phones`` the tokens).

        Raises
        ------
        DataPreparationError
            When an utterance is shorter than one analysis window.
        ValueError
            For a malformed batch, lengths out of range, audio that looks int16-scaled, or a
            ``sample_rate`` that is not a positive whole number of Hz (8000.5, 0).

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
        wavs, samples = self.batch_inputs(wavs, wav_lens, num_samples, sample_rate)
        rate = self.feature_config.sample_rate
        with self.seeded_routing():
            batch = self.run_batch(wavs, samples)
        out, hyps = batch.output, batch.hyps
        rtf = batch.seconds / max(float(samples.sum()) / rate, 1e-9)
        log_probs = out.log_probs.float().cpu()
        results = []
        for b, n in enumerate(batch.frames.tolist()):
            per_frame = self.frame_results(out, b, n, batch.surprisal)
            comps = self.flops_components(self.frame_macs(out, b, slice(0, n)), n)
            segments = self.segments(log_probs[b, :n], hyps[b]) if timestamps else None
            results.append(Transcription(
                phones=self.phones_of(hyps[b]), num_frames=n, duration_s=int(samples[b]) / rate,
                flops_per_frame=sum(comps.values()), flops_components=comps, rtf=rtf, fbank=batch.fbank[b, :n].cpu(),
                segments=segments, frame_shift_s=self.frame_shift_s, routing=self.routing, seed=self.seed,
                **per_frame))
        return results

    def batch_inputs(self, wavs, wav_lens: Optional[Tensor] = None, num_samples: Optional[Tensor] = None,
                     sample_rate: Optional[int] = None) -> Tuple[Tensor, Tensor]:
        """(B, S) float waveforms at the model's sample rate and (B,) sample counts, from the arguments of
        :meth:`transcribe_batch`; a list of 1-D waveforms (what :meth:`load_audio` returns) is padded here
        (:func:`~surprisal_cc.data.waveforms.batch_waveforms` at the model's rate). Their length is checked where
        the filterbanks are computed (:meth:`filterbanks`).

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "sil"])
        >>> wavs, samples = asr.batch_inputs([torch.zeros(800), torch.zeros(400)])
        >>> tuple(wavs.shape), samples.tolist()
        ((2, 800), [800, 400])
        """
        return batch_waveforms(wavs, wav_lens, num_samples, sample_rate, self.feature_config.sample_rate, stacklevel=4)

    def encode_batch(self, wavs: Tensor, wav_lens: Optional[Tensor] = None, *,
                     num_samples: Optional[Tensor] = None, sample_rate: Optional[int] = None) -> Tensor:
        """SpeechBrain's ``encode_batch``: the CTC log-probabilities of a padded batch, not decoded.

        ``wavs``, ``wav_lens``, ``num_samples`` and ``sample_rate`` as in :meth:`transcribe_batch`;
        routing and threads as there too. Returns (B, T, C) log-probabilities over ``labels`` (the
        CTC blank at ``config["blank_index"]``) on the model's device; :meth:`forward` also gives
        each utterance's frame count, its routing and its surprisal.

        Example
        -------
        >>> import torch
        >>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
        >>> log_probs = asr.encode_batch(torch.rand(2, 8000) - 0.5, torch.tensor([1.0, 0.5]))
        >>> tuple(log_probs.shape), bool(torch.allclose(log_probs.exp().sum(-1), torch.ones(2, 24)))
        ((2, 24, 4), True)
        """
        wavs, samples = self.batch_inputs(wavs, wav_lens, num_samples, sample_rate)
        # seeded, on the model's threads, without gradients
        return self.forward(wavs, samples).output.log_probs.float()

    def segments(self, log_probs: Tensor, ids: Sequence[int], offset_frames: int = 0) -> List[Tuple[str, float, float]]:
        """``(phone, start_s, end_s)`` of the phones ``ids`` decoded from ``log_probs`` ((T, V) of one
        utterance): :func:`surprisal_cc.decoding.timestamps.phone_segments`."""
        from surprisal_cc.decoding.timestamps import phone_segments

        return phone_segments(log_probs, ids, self.labels, self.beam_search.blank, self.frame_shift_s, offset_frames)

    def transcribe_file(self, path: PathLike, long_chunk_s: Optional[float] = None,
                        progress=None) -> Transcription:
        """Transcribe one audio file (resampled to 16 kHz and downmixed to mono, with a warning).

        Files longer than ``long_chunk_s`` plus twice the context are decoded in parts with context
        (:mod:`surprisal_cc.inference.long_audio`): memory stays flat in the file's length.

        Arguments
        ---------
        path : str or path
            Any format libsndfile decodes (FLAC, WAV, Ogg/Opus, ...).
        long_chunk_s : float, optional
            Seconds per part of a long file (default :data:`surprisal_cc.inference.long_audio.CHUNK_S`); 0:
            decode the whole file at once, whatever its length.
        progress : callable, optional
            ``progress(done_s, total_s)`` after each part of a long file.

        Returns
        -------
        Transcription
            With ``path`` set (SpeechBrain's returns the text, here ``str(result)``).

        Raises
        ------
        BadAudioError
            When the file cannot be decoded or is too short for one of the model's frames.

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
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"transcribe_file takes the path of an audio file, got a {type(path).__name__}; "
                            "transcribe waveforms with transcribe_batch")
        self._check_audio(path)
        return self.transcribe_checked_file(path, long_chunk_s=long_chunk_s, progress=progress)

    def _check_audio(self, path: PathLike) -> None:
        """:meth:`check_files` of ``path``: a :class:`BadAudioError` naming what is wrong with it (too short
        for one of the model's frames included); else the conversion warning
        (:func:`~surprisal_cc.data.audio.warn_converted`), naming the caller of the public method that
        called this one."""
        infos, problems = split_checked(self.check_files([path]))
        if problems:
            raise BadAudioError(problems, 1)
        warn_converted(infos, self.feature_config.sample_rate, stacklevel=4, input_level=self.input_level_dbfs)

    def check_files(self, paths: Sequence[PathLike]) -> List[Tuple[str, Optional[AudioInfo], Optional[str]]]:
        """Each file of ``paths`` decoded and checked for this model, in order
        (:func:`~surprisal_cc.data.audio.check_audio_each` at its sample rate): ``(path, AudioInfo, None)``
        for usable audio, ``(path, None, what is wrong)`` otherwise, audio too short for one of its frames
        included; no warning (:func:`~surprisal_cc.data.audio.warn_converted` says what will be converted).

        Example
        -------
        >>> ConditionalASR.untrained(["AH", "sil"]).check_files(["missing.flac"])
        [('missing.flac', None, 'file does not exist')]
        """
        return check_audio_each(paths, **self.feature_config.audio_limits)

    def read_file(self, path: PathLike) -> Tensor:
        """The (S,) float32 mono waveform of the file ``path`` at the model's sample rate
        (:meth:`~surprisal_cc.model.features.FeatureConfig.read_audio`), without a check or warning (for files
        :meth:`check_files` passed; :meth:`load_audio` checks first): a :class:`BadAudioError` naming a
        file too short for one of the model's frames."""
        return self.feature_config.read_audio(path)

    def load_audio(self, path: PathLike) -> Tensor:
        """SpeechBrain's ``load_audio``: the (S,) float32 mono waveform of the file ``path`` at the model's
        sample rate, for :meth:`transcribe_batch` (converted with a warning, as :meth:`transcribe_file`
        does). Unlike SpeechBrain's, it stays on the CPU, where the filterbanks are computed.

        Raises
        ------
        BadAudioError
            When the file cannot be decoded or is too short for one of the model's frames.

        Example
        -------
        >>> import tempfile
        >>> from pathlib import Path
        >>> import numpy as np
        >>> import soundfile
        >>> from speechbrain.utils.data_utils import batch_pad_right
        >>> asr = ConditionalASR.untrained(["AH", "B", "sil"])
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     for name, samples in (("a.flac", 8000), ("b.flac", 4000)):
        ...         soundfile.write(Path(tmp) / name, np.random.default_rng(0).uniform(-0.5, 0.5, samples), 16000)
        ...     wavs, wav_lens = batch_pad_right([asr.load_audio(Path(tmp) / n) for n in ("a.flac", "b.flac")])
        >>> wavs.shape, wav_lens.tolist(), [r.num_frames for r in asr.transcribe_batch(wavs, wav_lens)]
        (torch.Size([2, 8000]), [1.0, 0.5], [24, 12])
        """
        self._check_audio(path)
        return self.read_file(path)

    def transcribe_checked_file(self, path: PathLike, long_chunk_s: Optional[float] = None, progress=None,
                                keep_fbank: bool = True) -> Transcription:
        """:meth:`transcribe_file` without the audio check (for files :meth:`check_files` passed);
        ``keep_fbank=False`` leaves the filterbanks out of the result (``fbank`` None), which saves memory
        on long files."""
        from surprisal_cc.inference.long_audio import decode_long, is_long, part_seconds

        chunk_s = part_seconds(long_chunk_s)
        if is_long(path, chunk_s):
            return Transcription(**decode_long(self, path, chunk_s=chunk_s, progress=progress, keep_fbank=keep_fbank))
        result = self.transcribe_batch(self.read_file(path)[None])[0]
        result.path = str(path)
        if not keep_fbank:
            result.fbank = None
        return result

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, data: PathLike, mfa_labels: Optional[PathLike] = None, skip_bad: bool = False,
                 batch_size: Optional[int] = None, seed: Optional[int] = None, g2p: Optional[str] = None,
                 timit_split: Optional[str] = None, progress: bool = False,
                 any_pronunciation: bool = False, flops_fraction: Optional[float] = None,
                 per_utterance: Optional[Callable[[Dict[str, Any]], None]] = None,
                 alignments: Union[PathLike, TextIO, None] = None,
                 long_chunk_s: Optional[float] = None) -> Dict[str, Any]:
        """Corpus-level PER, S/D/I, FLOPs per frame, p_big and RTF of this model on a labelled corpus
        (a LibriSpeech-format folder of one subset, a TIMIT folder, a Kaldi data folder or a manifest CSV):
        :func:`surprisal_cc.inference.evaluation.evaluate_corpus`, which documents the arguments and the result
        (the two signatures are kept the same by ``tests/test_inference.py``)."""
        return evaluate_corpus(self, data, mfa_labels=mfa_labels, skip_bad=skip_bad, batch_size=batch_size, seed=seed,
                               g2p=g2p, timit_split=timit_split, progress=progress,
                               any_pronunciation=any_pronunciation, flops_fraction=flops_fraction,
                               per_utterance=per_utterance, alignments=alignments, long_chunk_s=long_chunk_s)
