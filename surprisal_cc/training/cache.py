"""On-disk cache of frozen acoustic features: filterbanks, APC features h_t and surprisal s_t.

The APC model is frozen downstream, so its outputs are computed once per utterance and reused
across epochs, controllers and seeds. The cache folder is named by a key that hashes the APC
weights, the APC configuration and the feature settings: change any of them and a new folder is
used, so a stale cache is never read. Entries are written atomically, one file per utterance, so
an interrupted build resumes where it stopped.

Example
-------
>>> import tempfile, torch
>>> from surprisal_cc.model.apc import APCModel
>>> with tempfile.TemporaryDirectory() as root:
...     cache = FeatureCache(root, APCModel(hidden_size=16).eval())
...     cache.compute_batch(["u1"], torch.randn(1, 8000), torch.tensor([8000]))
...     entry = cache.load("u1")
>>> entry["fbank"].shape, entry["features"].shape, entry["surprisal"].shape
(torch.Size([24, 80]), torch.Size([24, 16]), torch.Size([24]))
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from surprisal_cc.model.apc import APCModel
from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.model.features import FilterbankFrontEnd

logger = logging.getLogger(__name__)
CACHE_FORMAT_VERSION = 1


def cache_key(apc: Optional[APCModel], feature_config: FeatureConfig, dtype: torch.dtype) -> str:
    """Hash of everything the cached values depend on.

    Arguments
    ---------
    apc : APCModel or None
        The APC model (architecture and weights), or None for filterbanks only.
    feature_config : FeatureConfig
        Filterbank settings.
    dtype : torch.dtype
        Storage dtype of the entries.

    Returns
    -------
    str
        16 hexadecimal digits.

    Example
    -------
    >>> import torch
    >>> from surprisal_cc.model.feature_config import FeatureConfig
    >>> key = cache_key(None, FeatureConfig(), torch.float32)
    >>> len(key), key == cache_key(None, FeatureConfig(), torch.float16)
    (16, False)
    """
    digest = hashlib.sha256()
    digest.update(json.dumps({"version": CACHE_FORMAT_VERSION, "features": feature_config.as_dict(),
                              "dtype": str(dtype)}, sort_keys=True).encode())
    if apc is not None:
        digest.update(repr(apc).encode())
        for name, tensor in sorted(apc.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


class FeatureCache:
    """Per-utterance cache of ``fbank`` (T, 80), and with an APC model ``features`` (T, H) and ``surprisal`` (T,).

    Entries live in ``root/<key>/<utt_id>.pt`` (see :func:`cache_key`), with the settings in
    ``cache.json``.

    Arguments
    ---------
    root : str or pathlib.Path
        Folder holding one subfolder per cache key.
    apc : APCModel, optional
        Frozen APC model; None caches filterbanks only.
    feature_config : FeatureConfig, optional
        Filterbank settings; None: the defaults.
    dtype : torch.dtype
        Storage dtype of the entries (loaded back as float32).
    device : str
        Device the front end's output and the APC model run on.

    Example
    -------
    >>> import tempfile, torch
    >>> with tempfile.TemporaryDirectory() as root:
    ...     cache = FeatureCache(root)
    ...     computed = cache.build([("a", "a.wav"), ("b", "b.wav")], lambda path: torch.randn(4000),
    ...                            progress=False)
    ...     again = cache.build([("a", "a.wav")], lambda path: torch.randn(4000), progress=False)
    ...     entry = cache.load("b")
    >>> computed, again, sorted(entry), entry["fbank"].shape
    (2, 0, ['fbank'], torch.Size([12, 80]))
    """

    def __init__(self, root, apc: Optional[APCModel] = None, feature_config: Optional[FeatureConfig] = None,
                 dtype: torch.dtype = torch.float32, device: str = "cpu"):
        self.feature_config = feature_config or FeatureConfig()
        self.front_end = FilterbankFrontEnd(self.feature_config)
        self.apc = apc.eval().to(device) if apc is not None else None
        self.dtype, self.device = dtype, device
        self.key = cache_key(apc, self.feature_config, dtype)
        self.folder = Path(root) / self.key
        self.folder.mkdir(parents=True, exist_ok=True)
        info = self.folder / "cache.json"
        if not info.exists():
            info.write_text(json.dumps({"features": self.feature_config.as_dict(), "apc": apc is not None,
                                        "dtype": str(dtype), "version": CACHE_FORMAT_VERSION}, indent=2))

    def path(self, utt_id: str) -> Path:
        """File of the entry of ``utt_id``."""
        return self.folder / f"{utt_id}.pt"

    def has(self, utt_id: str) -> bool:
        """Whether the entry of ``utt_id`` exists."""
        return self.path(utt_id).exists()

    def load(self, utt_id: str) -> Dict[str, Tensor]:
        """Entry of ``utt_id`` as float32 tensors; FileNotFoundError when it is not cached."""
        path = self.path(utt_id)
        try:
            entry = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: utterance {utt_id!r} is not in the feature cache; "
                                    "build it first (FeatureCache.build) or disable the cache") from None
        return {name: value.float() for name, value in entry.items()}

    @torch.no_grad()
    def compute_batch(self, utt_ids: Sequence[str], wavs: Tensor, lengths: Tensor) -> None:
        """Compute and store the entries of one batch of waveforms.

        Arguments
        ---------
        utt_ids : sequence of str
            Utterance ids, one per waveform.
        wavs : torch.Tensor
            (B, S) padded waveforms.
        lengths : torch.Tensor
            (B,) sample counts.
        """
        fbank, frames = self.front_end(wavs, lengths)
        fbank, frames = fbank.to(self.device), frames.to(self.device)
        apc_out = self.apc(fbank, frames) if self.apc is not None else None
        for i, utt_id in enumerate(utt_ids):
            n = int(frames[i])
            entry = {"fbank": fbank[i, :n]}
            if apc_out is not None:
                entry["features"] = apc_out.features[i, :n]
                entry["surprisal"] = apc_out.surprisal[i, :n]
            entry = {k: v.detach().to("cpu", self.dtype).clone() for k, v in entry.items()}
            # a name of this process's own: runs side by side that fill one cache never share a file
            # being written, and each entry appears whole (the same tensors, whichever writer is last)
            tmp = self.path(utt_id).with_suffix(f".{os.getpid()}.tmp")
            torch.save(entry, tmp)
            os.replace(tmp, self.path(utt_id))

    def build(self, items: Iterable[Tuple[str, str]], read_audio: Callable[[str], Tensor], batch_size: int = 16,
              progress: bool = True) -> int:
        """Fill the cache for the ``(utt_id, audio_path)`` items that are missing.

        Arguments
        ---------
        items : iterable of (str, str)
            Utterance ids and audio paths.
        read_audio : callable
            Audio path -> 1-D waveform tensor.
        batch_size : int
            Utterances per batch.
        progress : bool
            Show a progress bar.

        Returns
        -------
        int
            How many entries were computed.
        """
        todo: List[Tuple[str, str]] = [(u, p) for u, p in items if not self.has(u)]
        if not todo:
            return 0
        logger.info("feature cache %s: computing %d utterances", self.folder, len(todo))
        iterator = range(0, len(todo), batch_size)
        if progress:
            from tqdm import tqdm
            iterator = tqdm(iterator, desc=f"feature cache {self.key}", unit="batch")
        for start in iterator:
            chunk = todo[start:start + batch_size]
            signals = [read_audio(path) for _, path in chunk]
            lengths = torch.tensor([s.numel() for s in signals])
            wavs = torch.nn.utils.rnn.pad_sequence(signals, batch_first=True)
            self.compute_batch([u for u, _ in chunk], wavs, lengths)
        return len(todo)
