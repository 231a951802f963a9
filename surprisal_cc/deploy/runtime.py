"""Run an exported model with onnxruntime and numpy: :class:`OnnxASR`, no torch, no SpeechBrain.

The graphs of ``onnx/`` (:mod:`surprisal_cc.deploy.bundle`) are joined here as the PyTorch encoder joins its
networks (:class:`~surprisal_cc.model.encoders.ConditionalEncoder`, the adaptive encoders of
:mod:`surprisal_cc.model.adaptive`):

* conditional: APC -> pre-net -> controller -> per frame, the small network on the frames routed to it and
  the big one on the others, each run on the rows gathered for it alone (a window of frames where its
  ``context`` is above 1) and scattered back -> post-net. Routing is deterministic (``p_big > 0.5``; the
  learned controller's ``logit > 0``) unless sampled routing is asked for (numpy's generator: the draws are
  not torch's);
* ACT and PonderNet: pre-net -> the step graph on the frames that have not halted, step after step, with
  the encoder's halting rule -> post-net.

What ran is what is charged: the MACs per frame of each graph (``onnx.json``) times the rows it was run
on, as :class:`~surprisal_cc.model.flops.MacMeter` charges the PyTorch model. Decoding is the project's
native CTC prefix beam search (:mod:`surprisal_cc.decoding.search`, the model's beam width) or greedy;
phone times are :func:`surprisal_cc.decoding.timestamps.phone_segments`; files longer than a part and its
context are decoded in parts (:mod:`surprisal_cc.deploy.parts`), as the PyTorch runtime does.

Example
-------
>>> asr = OnnxASR.from_folder("no/such/model")
Traceback (most recent call last):
    ...
surprisal_cc.deploy.bundle.BundleError: no/such/model: no model folder there; export one with ONNX graphs: surprisal-cc export RUN_OR_MODEL OUT_DIR --onnx
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from surprisal_cc.data.errors import BadAudioError
from surprisal_cc.decoding.search import CTCBeamSearch, ctc_greedy_decode
from surprisal_cc.decoding.timestamps import phone_segments
from surprisal_cc.decoding.transcription import Transcription
from surprisal_cc.data.audio_files import check_audio_file
from surprisal_cc.deploy.audio import MAX_RESAMPLE_KERNEL, read_audio
from surprisal_cc.deploy.bundle import BundleError, read_bundle
from surprisal_cc.deploy.frontend import fbank_numpy, numpy_feature_config
from surprisal_cc.errors import ConfigurationError

PathLike = Union[str, os.PathLike]
DECODERS = ("beam", "greedy")
ROUTINGS = ("deterministic", "sampled")
MAX_LEVEL_GAIN_DB = 40.0  # as surprisal_cc.data.audio


def default_model_dir() -> Path:
    """The shipped model folder, ``surprisal_cc/pretrained`` (found without loading the model code)."""
    return Path(__file__).resolve().parents[1] / "pretrained"


@dataclass
class FrameOutput:
    """One waveform through the graphs: (T, V) log-probabilities, the per-frame arrays, and the MACs each
    component ran (summed over the frames, per frame: ``frame_macs[name]`` is (T,))."""

    log_probs: np.ndarray
    fbank: np.ndarray
    frame_macs: Dict[str, np.ndarray]
    surprisal: Optional[np.ndarray] = None
    p_big: Optional[np.ndarray] = None
    use_big: Optional[np.ndarray] = None
    steps: Optional[np.ndarray] = None


def _session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own types for damaged or foreign files
        raise BundleError(f"{path}: not a graph onnxruntime can load ({' '.join(str(err).split())[:200]}); export "
                          f"the graphs again: surprisal-cc export {path.parent.parent} {path.parent.parent} --onnx") from None


class _Graph:
    """One ONNX graph: called with named numpy inputs (those it does not take left out), returns its outputs."""

    def __init__(self, path: Path, threads: int):
        self.session = _session(path, threads)
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, **feeds: np.ndarray) -> List[np.ndarray]:
        return self.session.run(None, {name: feeds[name] for name in self.inputs})


def context_rows(x: np.ndarray, rows: np.ndarray, context: int) -> np.ndarray:
    """Rows ``rows`` of the frames ``x`` (T, D) -> (N, D * context): frames t - k//2 .. t + k//2 (zeros outside
    the utterance) in the layout of :func:`surprisal_cc.model.encoders.gather_frames` (channel-major).

    Example
    -------
    >>> context_rows(np.arange(6, dtype=np.float32).reshape(3, 2), np.array([0]), 3).tolist()
    [[0.0, 0.0, 2.0, 0.0, 1.0, 3.0]]
    """
    if context == 1:
        return x[rows]
    times = rows[:, None] + (np.arange(context) - context // 2)[None, :]
    valid = (times >= 0) & (times < x.shape[0])
    windows = x[np.clip(times, 0, x.shape[0] - 1)] * valid[..., None]  # (N, k, D)
    return np.ascontiguousarray(windows.transpose(0, 2, 1).reshape(len(rows), -1))


class OnnxASR:
    """An exported model folder run by onnxruntime: features, APC, routing, decoding and phone times in
    numpy (``pip install surprisal_cc[onnx]``, no torch).

    Arguments
    ---------
    folder : str or path
        A model folder with ONNX graphs (``surprisal-cc export ... --onnx``).
    threads : int
        onnxruntime's intra-op threads (default 1, as the PyTorch runtime decodes).
    decoder : str
        ``"beam"`` (the model's CTC prefix beam search, default) or ``"greedy"``.
    routing : str, optional
        ``"deterministic"`` (default) or ``"sampled"`` (drawn from p_big with numpy's generator, seeded with
        ``seed``); None: deterministic unless the model routes by chance (a random controller).
    seed : int, optional
        Seed of sampled routing.
    """

    def __init__(self, folder: PathLike, threads: int = 1, decoder: str = "beam", routing: Optional[str] = None,
                 seed: Optional[int] = None):
        self.source = Path(folder)
        self.config, self.bundle = read_bundle(self.source)
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ConfigurationError(f"threads must be a whole number of at least 1, got {threads!r}")
        if decoder not in DECODERS:
            raise ConfigurationError(f"decoder must be one of {DECODERS}, got {decoder!r}")
        self.threads, self.decoder = threads, decoder
        config = self.config
        try:
            self.features = numpy_feature_config(config["features"])
            self.labels: List[str] = list(config["labels"])
        except (KeyError, TypeError, ValueError) as err:
            raise BundleError(f"{self.source / 'model.json'}: {err}") from None
        self.blank = int(config.get("blank_index", 0))
        self.beam_search = CTCBeamSearch(blank=self.blank, beam_size=int(config.get("beam_size", 10)), backend="native",
                                         blank_penalty=float(config.get("blank_penalty", 0.0)))
        self.macs: Dict[str, int] = {k: int(v) for k, v in self.bundle["macs"].items()}
        self.graphs = {name: _Graph(self.source / file, threads) for name, file in self.bundle["graphs"].items()}
        self.routing_info: Optional[Dict[str, Any]] = self.bundle.get("routing")
        self.halting: Optional[Dict[str, Any]] = self.bundle.get("halting")
        self.uses_apc = bool(self.bundle.get("uses_apc"))
        self.bias_shift = float(self.routing_info["test_bias_shift"]) if self.routing_info else 0.0
        self.input_level_dbfs: Optional[float] = None
        self.routing, self.seed, self._rng = "deterministic", None, None
        self.set_routing(routing, seed)

    @classmethod
    def from_folder(cls, folder: Optional[PathLike] = None, **kwargs) -> "OnnxASR":
        """The model folder ``folder`` (default: the shipped model, whose graphs ``export --onnx`` writes)."""
        return cls(folder if folder is not None else default_model_dir(), **kwargs)

    # ------------------------------------------------------------------ settings
    @property
    def frame_shift_s(self) -> float:
        return self.features.frame_shift_s

    @property
    def routes_by_chance(self) -> bool:
        return bool(self.routing_info and self.routing_info["routes_by_chance"])

    @property
    def can_sample(self) -> bool:
        if self.routing_info:
            return bool(self.routing_info["draws"])
        return bool(self.halting and self.halting.get("inference") in ("sample", "threshold"))

    def set_routing(self, routing: Optional[str], seed: Optional[int] = None) -> None:
        """``"deterministic"`` or ``"sampled"`` (seeded with ``seed``, a random one where None), with the checks
        of :meth:`ConditionalASR.set_routing <surprisal_cc.inference.asr.ConditionalASR.set_routing>`."""
        if routing is None:
            routing = "sampled" if self.routes_by_chance or seed is not None else "deterministic"
        if routing not in ROUTINGS:
            raise ConfigurationError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        if routing == "deterministic" and self.routes_by_chance:
            raise ConfigurationError(f"this model routes by chance (its {self.routing_info['controller']!r} controller "
                                     "gives the same p_big on every frame): deterministic routing would run one "
                                     "network on every frame; leave out --deterministic (routing='sampled')")
        if routing == "sampled" and not self.can_sample:
            raise ConfigurationError("this model's routing draws nothing: leave out --sampled and --seed "
                                     "(routing='deterministic')")
        if seed is not None and routing != "sampled":
            raise ConfigurationError("seed seeds sampled routing, and deterministic routing draws nothing")
        if routing == "sampled" and seed is None:
            seed = int.from_bytes(os.urandom(4), "little") % 2 ** 31
        self.routing, self.seed = routing, seed

    def start_draws(self) -> None:
        """Sampled routing: draw from a generator seeded with :attr:`seed` (each file starts afresh, so that its
        routing does not depend on the files before it)."""
        self._rng = np.random.default_rng(self.seed) if self.routing == "sampled" else None

    def set_bias_shift(self, shift: float) -> None:
        """Add ``shift`` to the controller's logit (a trained surprisal or learned controller, or random)."""
        info = self.routing_info
        if info is None or (shift and info["controller"] in ("big_only", "small_only")):
            what = "has no controller whose logit a bias shift moves" if info is None else \
                f"'s {info['controller']!r} controller has no bias to shift"
            raise ConfigurationError(f"bias shift {shift:g}: this model{what}")
        self.bias_shift = float(shift)

    def set_input_level(self, dbfs: Optional[float]) -> None:
        """Scale each file to an RMS level of ``dbfs`` dBFS (at most +40 dB), as ConditionalASR does; None: as it is."""
        if dbfs is not None and not -80.0 <= float(dbfs) <= 0.0:
            raise ConfigurationError(f"input level must be a number of dBFS in [-80, 0] (e.g. -26), got {dbfs!r}")
        self.input_level_dbfs = None if dbfs is None else float(dbfs)

    def level_gain(self, rms: float) -> Optional[float]:
        """The gain that brings audio of RMS ``rms`` to the input level (None: no input level)."""
        if self.input_level_dbfs is None:
            return None
        if rms <= 1e-5:
            return 1.0
        return min(10 ** (self.input_level_dbfs / 20) / max(rms, 1e-5), 10 ** (MAX_LEVEL_GAIN_DB / 20))

    # ------------------------------------------------------------------ the graphs
    def forward(self, wav: np.ndarray, gain: Optional[float] = None) -> FrameOutput:
        """One mono waveform at the model's rate through the front end and the graphs."""
        wav = np.asarray(wav, dtype=np.float32)
        if gain is not None:
            wav = (wav.astype(np.float64) * gain).astype(np.float32)
        fbank = fbank_numpy(wav, self.features)
        T = fbank.shape[0]
        if T == 0:
            raise BadAudioError([f"audio of {wav.size} samples: shorter than one frame "
                                 f"({self.features.min_samples} samples)"], 1)
        lengths = np.array([T], dtype=np.int64)
        ones = np.ones(T, dtype=np.float64)
        frame_macs: Dict[str, np.ndarray] = {}
        surprisal = None
        features = fbank
        if self.uses_apc:
            apc_features, surprisal = self.graphs["apc"](fbank=fbank[None], lengths=lengths)
            surprisal = surprisal[0]
            if self.bundle["input_features"] == "apc":
                features = apc_features[0]
        out = FrameOutput(log_probs=np.empty(0), fbank=fbank, frame_macs=frame_macs, surprisal=surprisal)
        x = features
        if "pre_net" in self.graphs:
            x = self.graphs["pre_net"](x=features[None], lengths=lengths)[0][0]
        frame_macs["pre_net"] = ones * self.macs["pre_net"]  # 0 without a pre-net, as PyTorch charges it
        if self.routing_info is not None:
            y = self._route(x, features, surprisal, out)
        else:
            y = self._ponder(x, out)
        out.log_probs = self.graphs["post_net"](x=y[None], lengths=lengths)[0][0]
        frame_macs["post_net"] = ones * self.macs["post_net"]
        out.frame_macs = {name: frame_macs[name] for name in self.macs if name in frame_macs}  # PyTorch's order
        return out

    def _route(self, x: np.ndarray, features: np.ndarray, surprisal: Optional[np.ndarray],
               out: FrameOutput) -> np.ndarray:
        info, T = self.routing_info, x.shape[0]
        if "controller" in self.graphs:
            p_big, logit = self.graphs["controller"](features=features[None],
                                                     surprisal=(surprisal if surprisal is not None
                                                                else np.zeros(T, np.float32))[None],
                                                     bias_shift=np.array(self.bias_shift, dtype=np.float32))
            p_big, logit = p_big[0].astype(np.float32), logit[0]
            use_big = logit > 0 if info.get("decision") == "logit" else self._decide(p_big)
        else:
            p = float(info["p_big"])
            if self.bias_shift and 0.0 < p < 1.0:
                p = 1.0 / (1.0 + np.exp(-(np.log(p / (1.0 - p)) + self.bias_shift)))
            p_big = np.full(T, p, dtype=np.float32)
            use_big = self._decide(p_big)
        big_rows, small_rows = np.flatnonzero(use_big), np.flatnonzero(~use_big)
        y = None
        for name, rows in (("big_net", big_rows), ("small_net", small_rows)):
            if rows.size:  # the chosen network's frames only
                result = self.graphs[name](x=context_rows(x, rows, info["context"][name]))[0]
                if y is None:
                    y = np.zeros((T, result.shape[1]), dtype=result.dtype)
                y[rows] = result
        out.frame_macs["small_net"] = (~use_big).astype(np.float64) * self.macs["small_net"]
        out.frame_macs["big_net"] = use_big.astype(np.float64) * self.macs["big_net"]
        out.frame_macs["controller"] = np.full(T, float(self.macs["controller"]))
        out.p_big, out.use_big = p_big, use_big
        return y

    def _decide(self, p_big: np.ndarray) -> np.ndarray:
        if self.routing == "sampled":
            return self._rng.random(p_big.shape, dtype=np.float32) < p_big
        return p_big > 0.5

    def _ponder(self, x: np.ndarray, out: FrameOutput) -> np.ndarray:
        """ACT / PonderNet: the step graph on the frames still running (the halting rules of
        :mod:`surprisal_cc.model.adaptive`, in float32)."""
        halting, step = self.halting, self.graphs["step"]
        s = x.astype(np.float32)
        m, n_steps = s.shape[0], int(halting["max_steps"])
        result, steps = np.zeros_like(s), np.zeros(m, dtype=np.float32)
        mode = "act" if halting["kind"] == "act" else halting["inference"]
        if mode == "expected":
            states, lambdas = [], []
            for _ in range(n_steps):
                s, lam = step(s=s)
                states.append(s)
                lambdas.append(lam)
            lam = np.stack(lambdas, axis=1)
            lam[:, -1] = 1.0
            not_halted = np.cumprod(np.concatenate([np.ones_like(lam[:, :1]), 1.0 - lam[:, :-1]], axis=1), axis=1)
            result = np.einsum("mn,mnd->md", lam * not_halted, np.stack(states, axis=1)).astype(np.float32)
            steps[:] = n_steps
        else:
            carry = np.zeros(m, np.float32) if mode == "act" else np.ones(m, np.float32)  # cum h / unassigned mass
            active = np.arange(m)
            for n in range(n_steps):
                s, lam = step(s=s)
                last = n == n_steps - 1
                before = carry[active]
                if mode == "act":
                    halt = np.ones_like(lam, bool) if last else before + lam >= np.float32(1.0 - halting["epsilon"])
                    p = np.where(halt, np.float32(1.0) - before, lam)
                    carry[active] = before + lam
                elif mode == "truncated":
                    after = np.zeros_like(lam) if last else before * (np.float32(1.0) - lam)
                    halt = np.ones_like(lam, bool) if last else after < np.float32(halting["tail_mass"])
                    carry[active] = after
                    p = np.where(halt, before, before - after)
                else:  # threshold, sample
                    if last:
                        halt = np.ones_like(lam, bool)
                    elif mode == "sample" and self.routing == "sampled":
                        halt = self._rng.random(lam.shape, dtype=np.float32) < lam
                    else:
                        remaining = before * (np.float32(1.0) - lam)
                        halt = np.float32(1.0) - remaining >= 0.5
                        carry[active] = remaining
                    p = halt.astype(np.float32)
                result[active] += p[:, None] * s
                steps[active] += 1.0
                active, s = active[~halt], s[~halt]
                if active.size == 0:
                    break
        out.steps = steps
        out.frame_macs["step_block"] = steps.astype(np.float64) * self.macs["step_block"]
        return result

    # ------------------------------------------------------------------ decoding
    def decode(self, log_probs: np.ndarray) -> List[int]:
        """Label ids of (T, V) log-probabilities: the beam search, or greedy."""
        if self.decoder == "greedy":
            lp = log_probs
            if self.beam_search.blank_penalty:
                lp = log_probs.copy()
                lp[:, self.blank] -= self.beam_search.blank_penalty
            return ctc_greedy_decode(lp[None], [lp.shape[0]], self.blank)[0]
        return self.beam_search(log_probs[None], [log_probs.shape[0]])[0]

    def segments(self, log_probs: np.ndarray, ids: Sequence[int], offset_frames: int = 0):
        return phone_segments(log_probs, ids, self.labels, self.blank, self.frame_shift_s, offset_frames)

    def flops_components(self, macs: Dict[str, float], frames: int) -> Dict[str, float]:
        """MACs per frame of each component (APC first where it ran) from MACs summed over ``frames``."""
        comps = {"apc": float(self.macs["apc"])} if self.uses_apc else {}
        comps.update({name: total / frames for name, total in macs.items()})
        return comps

    # ------------------------------------------------------------------ files
    def check_files(self, paths: Sequence[PathLike]) -> List[Tuple[str, Any, Optional[str]]]:
        """``(path, facts, None)`` for usable audio, ``(path, None, problem)`` for the others."""
        return [check_audio_file(p, self.features.min_samples, self.features.sample_rate,
                                 max_resample_kernel=MAX_RESAMPLE_KERNEL) for p in paths]

    def transcribe_waveform(self, wav: np.ndarray, path: Optional[str] = None, timestamps: bool = True,
                            keep_log_probs: bool = False) -> Transcription:
        """One mono float32 waveform at the model's rate."""
        wav = np.asarray(wav, dtype=np.float32)
        self.start_draws()
        gain = self.level_gain(float(np.sqrt(np.mean(wav.astype(np.float64) ** 2)))) if wav.size else None
        began = time.perf_counter()
        out = self.forward(wav, gain)
        ids = self.decode(out.log_probs)
        seconds = time.perf_counter() - began
        n = out.log_probs.shape[0]
        comps = self.flops_components({k: float(v.sum()) for k, v in out.frame_macs.items()}, n)
        duration = wav.size / self.features.sample_rate
        return Transcription(
            phones=[self.labels[i] for i in ids], num_frames=n, duration_s=duration,
            flops_per_frame=sum(comps.values()), flops_components=comps, rtf=seconds / max(duration, 1e-9),
            surprisal=out.surprisal, p_big=out.p_big, use_big=out.use_big, steps=out.steps, fbank=out.fbank,
            path=path, segments=self.segments(out.log_probs, ids) if timestamps else None,
            frame_shift_s=self.frame_shift_s, routing=self.routing if self.routing_info else None,
            seed=self.seed, log_probs=out.log_probs if keep_log_probs else None)

    def transcribe_file(self, path: PathLike, long_chunk_s: Optional[float] = None,
                        progress: Optional[Callable[[float, float], None]] = None,
                        keep_log_probs: bool = False) -> Transcription:
        """One audio file (resampled to the model's rate, downmixed to mono); files longer than
        ``long_chunk_s`` (default 60 s; 0: whole) plus twice the context are decoded in parts.
        A :class:`~surprisal_cc.data.errors.BadAudioError` of one line for an unusable file."""
        from surprisal_cc.deploy.parts import decode_long, is_long, part_seconds

        _, facts, problem = self.check_files([path])[0]
        if problem is not None:
            raise BadAudioError([f"{path}: {problem}"], 1)
        chunk_s = part_seconds(long_chunk_s)
        if is_long(path, chunk_s):
            return Transcription(**decode_long(self, path, chunk_s=chunk_s, progress=progress))
        wav = read_audio(path, self.features.sample_rate, self.features.min_samples)
        return self.transcribe_waveform(wav, path=str(path), keep_log_probs=keep_log_probs)
