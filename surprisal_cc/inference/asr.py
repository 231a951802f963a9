"""Use a trained model: :class:`ConditionalASR`, shaped like SpeechBrain's ``EncoderASR``.

``ConditionalASR.from_hparams(source, savedir)`` loads a model folder (:mod:`surprisal_cc.model.model_folder`),
local or fetched as SpeechBrain fetches (:func:`fetch_model_folder`); ``transcribe_file``,
``transcribe_batch``, ``encode_batch`` and ``forward`` run it. What is built on it lives beside it, as
functions that take the model: one batch's steps (:mod:`~surprisal_cc.inference.passes`), long files
(:mod:`~surprisal_cc.inference.long_audio`), a FLOPs budget (:mod:`~surprisal_cc.inference.budget`) and
corpus evaluation (:func:`~surprisal_cc.inference.evaluation.evaluate_corpus`).

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

import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
from speechbrain.utils.run_opts import RunOptions
from torch import Tensor

from surprisal_cc.checks import check_routing_seed, is_number, resolve_device
from surprisal_cc.data.audio import check_audio_each, split_checked, warn_converted
from surprisal_cc.data.waveforms import batch_waveforms
from surprisal_cc.data.errors import BadAudioError
from surprisal_cc.decoding.search import CTCBeamSearch
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.inference import long_audio, passes
from surprisal_cc.inference.passes import resolve_inference_precision
from surprisal_cc.decoding.transcription import Transcription
from surprisal_cc.model.apc import APCModel, FrozenAPC
from surprisal_cc.model.architectures import build_encoder
from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.model.features import FilterbankFrontEnd
from surprisal_cc.model.flops import module_macs
from surprisal_cc.model.forward import DecodedBatch, ForwardResult
from surprisal_cc.model.model_folder import (APC_FILE, CARD_FILE, ENCODER_FILE, FORMAT_VERSION, MODEL_FILE,
                                             ModelFormatError, check_weights_dtype, default_model_dir,
                                             load_model_folder, model_config, write_model_folder)
from surprisal_cc.model.nnet import Encoder, bias_shift_problem, input_size_for, routes_by_chance, runs_apc
from surprisal_cc.runtime import DEFAULT_DECODING_THREADS, check_threads, decoding_threads

PathLike = Union[str, os.PathLike]

ROUTINGS = ("deterministic", "sampled")

__all__ = ["ConditionalASR", "Transcription", "ForwardResult", "DecodedBatch", "ModelFormatError", "BadAudioError",
           "default_model_dir", "fetch_model_folder", "transcribe_checked_file", "resolve_inference_precision",
           "FORMAT_VERSION", "ROUTINGS"]




# ----------------------------------------------------------------------------------------------
# Model folders, local or fetched
# ----------------------------------------------------------------------------------------------
def _is_remote(source: str) -> bool:
    """Whether a ``source`` string names a model to fetch, as SpeechBrain's ``guess_source`` reads it: a
    URL, or a HuggingFace id (``owner/name``) where no such local path exists; anything else is a
    local folder (a missing one is a :class:`ModelFormatError` naming it, not a download).

    >>> _is_remote("speechbrain/asr-x"), _is_remote("https://example.org/m"), _is_remote("./no/such/dir")
    (True, True, False)
    """
    if source.startswith(("http://", "https://")):
        return True
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", source) is not None and not Path(source).exists()


def fetch_model_folder(source: Union[PathLike, Any, None] = None, savedir: Optional[PathLike] = None,
                       local_strategy: Any = None, fetch_config: Any = None) -> Path:
    """The local folder to load a model from: ``source`` itself where it is a local folder and no
    ``savedir`` is given; else the model files fetched into ``savedir``
    (:func:`speechbrain.utils.fetching.fetch`: linked or copied from a local folder as ``local_strategy``
    says, downloaded from a URL or the HuggingFace hub), or, without ``savedir``, the HuggingFace cache
    folder that holds them.

    Arguments
    ---------
    source : str, path or speechbrain.utils.fetching.FetchSource, optional
        A model folder, a URL or a HuggingFace id; None: the shipped model (:func:`default_model_dir`).
        A :class:`os.PathLike` is always a local folder.
    savedir : str or path, optional
        Where the files are put (made where missing).
    local_strategy : speechbrain.utils.fetching.LocalStrategy, optional
        SpeechBrain's, default ``SYMLINK``.
    fetch_config : speechbrain.utils.fetching.FetchConfig, optional
        SpeechBrain's (network, token, revision, HuggingFace cache).

    Returns
    -------
    pathlib.Path
        A folder with ``model.json``, ``encoder.pt``, ``apc.pt`` where the model has one, and
        ``README.md`` where the source has one.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     folder = fetch_model_folder(savedir=Path(tmp) / "model")
    ...     sorted((p.name, p.is_symlink()) for p in folder.iterdir())
    [('README.md', True), ('apc.pt', True), ('encoder.pt', True), ('model.json', True)]
    """
    from speechbrain.utils.fetching import FetchConfig, FetchFrom, FetchSource, LocalStrategy, fetch

    source = default_model_dir() if source is None else source
    local: Optional[Path] = None  # the folder of a local source
    if isinstance(source, os.PathLike) or (isinstance(source, str) and not _is_remote(source)):
        local = Path(source)
    elif isinstance(source, tuple) and source[0] == FetchFrom.LOCAL:  # a FetchSource
        local = Path(source[1])
    if local is not None:
        if savedir is None or not (local / MODEL_FILE).is_file():  # a folder that is none: named when loaded
            return local
        source = FetchSource(FetchFrom.LOCAL, str(local))
    options = dict(savedir=savedir, local_strategy=local_strategy or LocalStrategy.SYMLINK,
                   fetch_config=fetch_config or FetchConfig())
    config_path = Path(fetch(MODEL_FILE, source, **options))
    fetch(ENCODER_FILE, source, **options)
    for name in (APC_FILE, CARD_FILE):  # a model without APC has no apc.pt; a card is for readers
        if local is not None and not (local / name).is_file():
            continue
        try:
            fetch(name, source, **options)
        except Exception:  # absent there (each hub and server says so its own way); loading names a missing apc.pt
            if local is not None:
                raise
    return config_path.parent


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------
class ConditionalASR:
    """A trained conditional-computation CTC phone recogniser, ready for inference, with the interface of
    SpeechBrain's ``EncoderASR``: :meth:`from_hparams`, :meth:`transcribe_file`, :meth:`load_audio`,
    :meth:`transcribe_batch`, :meth:`encode_batch`, :meth:`forward` and :meth:`to`.

    Unlike SpeechBrain's ``Pretrained``, it is not a ``torch.nn.Module``: its networks are ``encoder``
    and ``apc`` (always in eval mode), :meth:`to` moves them, and :meth:`forward` returns the encoder
    output with the filterbanks, frame counts and surprisal, a :class:`ForwardResult`
    (:meth:`encode_batch`: the log-probabilities alone). Long files, phone times, a FLOPs budget and
    corpus evaluation are functions beside it (see the module's description).

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
        or ``"auto"`` (:func:`~surprisal_cc.inference.passes.resolve_inference_precision`).
    routing : str, optional
        ``"deterministic"`` (the same phones, routing and FLOPs on every run and at every batch size)
        or ``"sampled"`` (drawn, as the recipes test by default), see :meth:`set_routing`; None
        (default): deterministic, unless the model routes by chance (a random controller).
    seed : int, optional
        Seed of sampled routing (a random one, recorded in ``seed``, when None).
    threads : int, optional
        Torch intra-op threads while decoding (default 1, :mod:`surprisal_cc.runtime`); None
        leaves torch's setting.

    Example
    -------
    >>> import tempfile
    >>> from surprisal_cc.training.labels import phone_set
    >>> asr = ConditionalASR.untrained(phone_set("librispeech"), controller="random")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     folder = asr.save(Path(tmp) / "model")
    ...     files = sorted(p.name for p in folder.iterdir())
    ...     loaded = ConditionalASR.from_hparams(source=folder, savedir=Path(tmp) / "copy")
    ...     linked = sorted(p.name for p in loaded.source.iterdir() if p.is_symlink())
    >>> files, linked, loaded.labels == asr.labels, loaded.routing   # a random controller is always sampled
    (['README.md', 'encoder.pt', 'model.json'], ['README.md', 'encoder.pt', 'model.json'], True, 'sampled')
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
        # seconds between the model's frames (the filterbank's shift times its frame skip)
        self.frame_shift_s = self.feature_config.frame_shift_ms * self.feature_config.frame_skip / 1000.0
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
        self.source: Optional[Path] = None  # the folder the model was loaded from
        self.routing, self.seed = "deterministic", None
        self.set_routing(routing, seed)
        self.input_level_dbfs: Optional[float] = None  # set_input_level: each utterance scaled to it

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_hparams(cls, source: Union[PathLike, Any, None] = None, savedir: Optional[PathLike] = None,
                     run_opts: Optional[Union[Dict[str, Any], RunOptions]] = None, **kwargs) -> "ConditionalASR":
        """Load a model folder, as SpeechBrain's ``Pretrained.from_hparams`` loads a model: ``model.json``
        takes the place of its ``hparams_file``.

        Arguments
        ---------
        source : str, path or FetchSource, optional
            A model folder (see :func:`~surprisal_cc.training.export.export_run`), or anything
            :func:`speechbrain.utils.fetching.fetch` accepts (a URL, a HuggingFace id); None: the
            shipped model (:func:`default_model_dir`). See :func:`fetch_model_folder`.
        savedir : str or path, optional
            Where the model's files are fetched, linked or copied to and loaded from; None: a local
            folder is loaded where it is (a downloaded one from SpeechBrain's cache).
        run_opts : dict or RunOptions, optional
            SpeechBrain's run options (an unknown name is an error, as there). ``device`` and
            ``precision`` are read from them, the rest do not apply; a ``device`` of None is the CPU
            (SpeechBrain would pick CUDA where it can).
        **kwargs
            ``local_strategy`` and ``fetch_config`` as SpeechBrain's fetching takes them; the rest go to
            the constructor, as in SpeechBrain: ``device``, ``precision``, ``routing``, ``seed``, ``threads``.

        Returns
        -------
        ConditionalASR
            The model, with ``source`` set to the folder it was loaded from.

        Raises
        ------
        ModelFormatError
            When the folder is missing, incomplete, damaged or of another format version, or its
            ``apc.pt`` is not the APC it was written with.

        Example
        -------
        >>> asr = ConditionalASR.from_hparams()   # the shipped model
        >>> asr.source.name, len(asr.labels), asr.uses_apc, asr.device
        ('pretrained', 42, True, device(type='cpu'))
        """
        if not isinstance(run_opts, RunOptions):
            run_opts = RunOptions.from_dictionary(run_opts or {})
        options = {k: run_opts[k] for k in ("device", "precision") if run_opts[k] is not None}
        fetching = {k: kwargs.pop(k) for k in ("local_strategy", "fetch_config") if k in kwargs}
        folder = fetch_model_folder(source, savedir, **fetching)
        config, encoder, apc = load_model_folder(folder)
        asr = cls(config, encoder, apc, **{**options, **kwargs})
        asr.source = folder
        return asr

    from_pretrained = from_hparams  # the earlier name, which model cards and recipes use

    @classmethod
    def untrained(cls, labels: Sequence[str], encoder: str = "conditional", controller: str = "random",
                  input_features: str = "fbank", device: str = "cpu", **encoder_options) -> "ConditionalASR":
        """A randomly initialised model over ``labels`` (blank added at index 0), for tests and examples.

        ``encoder`` and ``controller`` name them as :func:`~surprisal_cc.model.architectures.build_encoder`
        takes them (with ``**encoder_options``); ``input_features`` is ``"fbank"`` or ``"apc"`` (a random
        APC model is built where one is needed).

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
        """Write this model as a model folder (:meth:`from_hparams` loads it back, its bias shift
        (:meth:`set_bias_shift`, :func:`~surprisal_cc.inference.budget.meet_flops_budget`), beam size and blank
        penalty included).

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
        >>> quiet = asr.forward(0.001 * tone).fbank
        >>> loud = asr.forward(0.1 * tone).fbank
        >>> round(float((quiet - loud).abs().max()), 3)
        0.0
        """
        if dbfs is not None and (not is_number(dbfs) or not -80.0 <= dbfs <= 0.0):
            raise ConfigurationError(f"input level must be a number of dBFS in [-80, 0] (e.g. -26), got {dbfs!r}")
        self.input_level_dbfs = None if dbfs is None else float(dbfs)


    def set_routing(self, routing: Optional[str], seed: Optional[int] = None) -> None:
        """``"deterministic"``: the big network where ``p_big > 0.5`` (PonderNet's ``sample``
        inference: halt at the threshold); ``"sampled"``: drawn from ``p_big`` (PonderNet: sampled
        halting), seeded with ``seed`` (a random seed when None) before each
        :meth:`transcribe_batch` call and each corpus evaluation, so that every call is reproducible
        from the recorded ``seed``; None: sampled where a ``seed`` is given or the model routes by
        chance (:func:`~surprisal_cc.model.nnet.routes_by_chance`: a random controller, which refuses
        ``"deterministic"``: every frame would go to one network), else deterministic. A model that
        draws nothing (:meth:`~surprisal_cc.model.nnet.Encoder.routing_draws` False: ACT, learned,
        big-only, small-only) refuses ``"sampled"``.

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
            routing = "sampled" if routes_by_chance(self.encoder) or seed is not None else "deterministic"
        if routing not in ROUTINGS:
            raise ConfigurationError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        if routing == "deterministic" and routes_by_chance(self.encoder):
            controller = self.encoder.stage_controller(False)
            raise ConfigurationError(f"this model routes by chance (its {controller.name!r} controller gives the same "
                                     "p_big on every frame): deterministic routing would run one network on every "
                                     "frame; leave out --deterministic (routing='sampled')")
        sampled = routing == "sampled"
        if sampled and not self.encoder.routing_draws():
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

    # ------------------------------------------------------------------ audio
    def transcribe_file(self, path: PathLike, long_chunk_s: Optional[float] = None,
                        progress: Optional[Callable[[float, float], None]] = None) -> Transcription:
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
        chunk_s = long_audio.part_seconds(long_chunk_s)
        return _decode_file(self, path, self._read_audio(path, chunk_s), chunk_s, progress, keep_fbank=True)

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
        return self._read_audio(path)

    def _read_audio(self, path: PathLike, long_chunk_s: float = 0.0) -> Optional[Tensor]:
        """The one path by which the model reads and checks a file: a :class:`BadAudioError` naming what is
        wrong with it (too short for one of the model's frames included,
        :func:`~surprisal_cc.data.audio.check_audio_each`), else the conversion warning
        (:func:`~surprisal_cc.data.audio.warn_converted`, naming the caller of the public method) and the
        (S,) float32 mono waveform at the model's rate; None, unread, for a file longer than
        ``long_chunk_s`` plus twice the context, which is decoded in parts
        (:func:`~surprisal_cc.inference.long_audio.is_long`)."""
        infos, problems = split_checked(check_audio_each([path], **self.feature_config.audio_limits))
        if problems:
            raise BadAudioError(problems, 1)
        warn_converted(infos, self.feature_config.sample_rate, stacklevel=4, input_level=self.input_level_dbfs)
        return None if long_audio.is_long(path, long_chunk_s) else self.feature_config.read_audio(path)

    # ------------------------------------------------------------------ batches
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
        rate = self.feature_config.sample_rate
        wavs, samples = batch_waveforms(wavs, wav_lens, num_samples, sample_rate, rate, stacklevel=3)
        with passes.seeded_routing(self):
            batch = passes.decode_batch(self, wavs, samples)
        out, hyps = batch.output, batch.hyps
        rtf = batch.seconds / max(float(samples.sum()) / rate, 1e-9)
        log_probs = out.log_probs.float().cpu()
        results = []
        for b, n in enumerate(batch.frames.tolist()):
            per_frame = passes.frame_results(out, b, n, batch.surprisal)
            comps = passes.flops_components(self, passes.frame_macs(out, b, slice(0, n)), n)
            segments = passes.segments(self, log_probs[b, :n], hyps[b]) if timestamps else None
            results.append(Transcription(
                phones=passes.phones_of(self, hyps[b]), num_frames=n, duration_s=int(samples[b]) / rate,
                flops_per_frame=sum(comps.values()), flops_components=comps, rtf=rtf, fbank=batch.fbank[b, :n].cpu(),
                segments=segments, frame_shift_s=self.frame_shift_s, routing=self.routing, seed=self.seed,
                **per_frame))
        return results


    def encode_batch(self, wavs: Tensor, wav_lens: Optional[Tensor] = None, *,
                     num_samples: Optional[Tensor] = None, sample_rate: Optional[int] = None) -> Tensor:
        """SpeechBrain's ``encode_batch``: the CTC log-probabilities of a padded batch, not decoded.

        ``wavs``, ``wav_lens``, ``num_samples`` and ``sample_rate`` as in :meth:`transcribe_batch`;
        routing and threads as there too. Returns (B, T, C) log-probabilities over ``labels`` (the
        CTC blank at ``config["blank_index"]``) on the model's device; :meth:`forward` also gives
        each utterance's frame count, its routing and its surprisal.

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
        >>> log_probs = asr.encode_batch(torch.rand(2, 8000) - 0.5, torch.tensor([1.0, 0.5]))
        >>> tuple(log_probs.shape), bool(torch.allclose(log_probs.exp().sum(-1), torch.ones(2, 24)))
        ((2, 24, 4), True)
        """
        wavs, samples = batch_waveforms(wavs, wav_lens, num_samples, sample_rate, self.feature_config.sample_rate,
                                        stacklevel=3)
        return self.forward(wavs, samples).output.log_probs.float()

    @torch.no_grad()
    def forward(self, wavs: Tensor, wav_lens: Optional[Tensor] = None) -> ForwardResult:
        """The encoder output, fbank, frame counts and surprisal of one padded batch, not decoded, on this
        model's threads, sampled routing seeded with its seed as :meth:`encode_batch` does
        (:func:`~surprisal_cc.inference.passes.forward_pass` without either, for callers that seed once
        for many batches).

        Unlike SpeechBrain's interfaces, whose ``forward`` returns what ``encode_batch`` does, this
        ``forward`` returns the whole :class:`~surprisal_cc.model.forward.ForwardResult` (the encoder's
        :class:`~surprisal_cc.model.nnet.EncoderOutput` and the stages before it).

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
            ``output`` (log-probabilities ``log_probs``, (B, T, labels), ``lengths`` and routing
            statistics ``stats``), ``fbank`` ((B, T, n_mels) log-mel frames), ``frames`` ((B,) frame
            count of each utterance) and ``surprisal`` ((B, T) APC surprisal, None when the model runs
            no APC); it also unpacks as ``out, fbank, frames, surprisal``.

        Example
        -------
        >>> asr = ConditionalASR.untrained(["AH", "B", "sil"], controller="big_only")
        >>> result = asr.forward(torch.rand(2, 8000) - 0.5, torch.tensor([1.0, 0.5]))
        >>> tuple(result.output.log_probs.shape), tuple(result.fbank.shape), result.frames.tolist(), result.surprisal
        ((2, 24, 4), (2, 24, 80), [24, 12], None)
        """
        with passes.seeded_routing(self), decoding_threads(self.threads):
            return passes.forward_pass(self, wavs, wav_lens)


def transcribe_checked_file(asr: ConditionalASR, path: PathLike, long_chunk_s: Optional[float] = None,
                            progress: Optional[Callable[[float, float], None]] = None,
                            keep_fbank: bool = True) -> Transcription:
    """:meth:`ConditionalASR.transcribe_file` of a file already checked, without a second check or warning
    (``transcribe`` checks every file before it decodes any: :func:`~surprisal_cc.data.audio.check_audio_each`
    with the model's ``feature_config.audio_limits``); ``keep_fbank=False`` leaves the filterbanks out of
    the result (``fbank`` None), which saves memory on long files."""
    chunk_s = long_audio.part_seconds(long_chunk_s)
    wav = None if long_audio.is_long(path, chunk_s) else asr.feature_config.read_audio(path)
    return _decode_file(asr, path, wav, chunk_s, progress, keep_fbank)


def _decode_file(asr: ConditionalASR, path: PathLike, wav: Optional[Tensor], chunk_s: float,
                 progress: Optional[Callable[[float, float], None]], keep_fbank: bool) -> Transcription:
    """The file ``path`` decoded whole from its waveform ``wav``, or in parts where ``wav`` is None."""
    if wav is None:
        return Transcription(**long_audio.decode_long(asr, path, chunk_s=chunk_s, progress=progress,
                                                      keep_fbank=keep_fbank))
    result = asr.transcribe_batch(wav[None])[0]
    result.path = str(path)
    if not keep_fbank:
        result.fbank = None
    return result
