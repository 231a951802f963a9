"""Tests for surprisal_cc.training.cache: cache key, incremental/resumable build, stored values."""
from __future__ import annotations

from typing import Dict, List

import pytest
import torch

from surprisal_cc.model.apc import APCModel
from surprisal_cc.training.cache import FeatureCache, cache_key
from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.model.features import FilterbankFrontEnd
from numerics import assert_close_up_to_summation_order


def small_apc(seed: int = 0) -> APCModel:
    torch.manual_seed(seed)
    return APCModel(hidden_size=16).eval()


class FakeAudio:
    """read_audio replacement: path -> fixed random waveform; records which paths were read."""

    def __init__(self, lengths: Dict[str, int]):
        g = torch.Generator().manual_seed(1)
        self.signals = {p: torch.randn(n, generator=g) * 0.1 for p, n in lengths.items()}
        self.read: List[str] = []

    def __call__(self, path: str) -> torch.Tensor:
        self.read.append(path)
        return self.signals[path]


AUDIO_LENGTHS = {"a.wav": 3000, "b.wav": 6400, "c.wav": 1234, "d.wav": 4500}
ITEMS = [("utt_" + p[0], p) for p in AUDIO_LENGTHS]


# ----------------------------------------------------------------------------------------------
# cache key
# ----------------------------------------------------------------------------------------------
def test_key_stable_for_identical_inputs():
    a, b = small_apc(0), small_apc(0)
    cfg = FeatureConfig()
    assert cache_key(a, cfg, torch.float32) == cache_key(b, FeatureConfig(), torch.float32)
    assert cache_key(None, cfg, torch.float32) == cache_key(None, FeatureConfig(), torch.float32)
    assert len(cache_key(a, cfg, torch.float32)) == 16


def test_key_changes_with_every_apc_weight():
    apc = small_apc(0)
    cfg = FeatureConfig()
    base = cache_key(apc, cfg, torch.float32)
    names = list(apc.state_dict())
    assert len(names) >= 10
    keys = set()
    for name in names:
        changed = small_apc(0)
        with torch.no_grad():
            changed.state_dict()[name].view(-1)[-1] += 1e-3
        key = cache_key(changed, cfg, torch.float32)
        assert key != base, name
        keys.add(key)
    assert len(keys) == len(names)
    assert cache_key(small_apc(1), cfg, torch.float32) != base


def test_key_changes_with_features_dtype_architecture_and_apc_presence():
    apc = small_apc(0)
    base = cache_key(apc, FeatureConfig(), torch.float32)
    assert cache_key(apc, FeatureConfig(frame_skip=1), torch.float32) != base
    assert cache_key(apc, FeatureConfig(n_mels=40), torch.float32) != base
    assert cache_key(apc, FeatureConfig(window_type="povey"), torch.float32) != base
    assert cache_key(apc, FeatureConfig(), torch.float16) != base
    assert cache_key(None, FeatureConfig(), torch.float32) != base
    # same weights, other hyper-parameter (dropout has no weights but changes the model description)
    other = APCModel(hidden_size=16, dropout=0.1)
    other.load_state_dict(apc.state_dict())
    assert cache_key(other, FeatureConfig(), torch.float32) != base


def test_folder_named_by_key(tmp_path):
    apc = small_apc(0)
    c1 = FeatureCache(tmp_path, apc)
    c2 = FeatureCache(tmp_path, apc, FeatureConfig(frame_skip=1))
    assert c1.folder == tmp_path / c1.key and c1.folder.is_dir()
    assert c1.folder != c2.folder
    assert (c1.folder / "cache.json").exists()


# ----------------------------------------------------------------------------------------------
# build / load
# ----------------------------------------------------------------------------------------------
def test_build_computes_only_missing_and_values_match(tmp_path):
    apc = small_apc(0)
    audio = FakeAudio(AUDIO_LENGTHS)
    cache = FeatureCache(tmp_path, apc)
    assert cache.build(ITEMS, audio, batch_size=3, progress=False) == 4
    assert sorted(audio.read) == sorted(AUDIO_LENGTHS)
    audio.read.clear()
    assert cache.build(ITEMS, audio, batch_size=3, progress=False) == 0
    assert audio.read == []

    front_end = FilterbankFrontEnd(FeatureConfig())
    for utt_id, path in ITEMS:
        wav = audio.signals[path]
        fbank, frames = front_end(wav.unsqueeze(0), torch.tensor([wav.numel()]))
        with torch.no_grad():
            out = apc.eval()(fbank, frames)
        entry = cache.load(utt_id)
        assert set(entry) == {"fbank", "features", "surprisal"}
        n = FeatureConfig().num_frames(wav.numel())
        assert entry["fbank"].shape == (n, 80) and entry["features"].shape == (n, 16)
        assert entry["surprisal"].shape == (n,)
        assert_close_up_to_summation_order(entry["fbank"], fbank[0])
        assert_close_up_to_summation_order(entry["features"], out.features[0])
        assert_close_up_to_summation_order(entry["surprisal"], out.surprisal[0])


def test_new_cache_object_sees_existing_entries(tmp_path):
    audio = FakeAudio(AUDIO_LENGTHS)
    FeatureCache(tmp_path, small_apc(0)).build(ITEMS[:2], audio, progress=False)
    reopened = FeatureCache(tmp_path, small_apc(0))
    assert reopened.has(ITEMS[0][0]) and reopened.has(ITEMS[1][0]) and not reopened.has(ITEMS[2][0])
    assert reopened.build(ITEMS, audio, progress=False) == 2
    # another APC -> another folder -> everything is recomputed
    assert FeatureCache(tmp_path, small_apc(5)).build(ITEMS, audio, progress=False) == 4


def test_interrupted_build_resumes(tmp_path):
    audio = FakeAudio(AUDIO_LENGTHS)
    cache = FeatureCache(tmp_path, small_apc(0))
    cache.build(ITEMS, audio, batch_size=2, progress=False)
    before = cache.load("utt_b")
    cache.path("utt_b").unlink()  # as if the build had stopped before writing this entry
    assert not cache.has("utt_b")
    audio.read.clear()
    assert cache.build(ITEMS, audio, batch_size=2, progress=False) == 1
    assert audio.read == ["b.wav"]
    after = cache.load("utt_b")
    for name in before:
        # rebuilt in a batch of another composition: the same sums in another order
        assert_close_up_to_summation_order(after[name], before[name])
    assert not list(cache.folder.glob("*.tmp"))


def test_cache_without_apc_stores_only_fbank(tmp_path):
    audio = FakeAudio(AUDIO_LENGTHS)
    cache = FeatureCache(tmp_path, None, FeatureConfig(frame_skip=1))
    assert cache.build(ITEMS, audio, progress=False) == 4
    entry = cache.load("utt_a")
    assert set(entry) == {"fbank"}
    assert entry["fbank"].shape == (FeatureConfig(frame_skip=1).num_frames(3000), 80)


def test_float16_cache_loads_as_float32(tmp_path):
    audio = FakeAudio(AUDIO_LENGTHS)
    cache = FeatureCache(tmp_path, small_apc(0), dtype=torch.float16)
    cache.build(ITEMS[:1], audio, progress=False)
    stored = torch.load(cache.path("utt_a"), weights_only=True)
    assert stored["features"].dtype == torch.float16
    loaded = cache.load("utt_a")
    assert loaded["features"].dtype == torch.float32
    torch.testing.assert_close(loaded["features"], stored["features"].float(), rtol=0, atol=0)


def test_load_missing_raises_file_not_found(tmp_path):
    cache = FeatureCache(tmp_path, small_apc(0))
    with pytest.raises(FileNotFoundError, match="utt_missing_42"):
        cache.load("utt_missing_42")


def test_compute_batch_padding_invariance(tmp_path):
    """The same utterance computed alone and in a padded batch gives the same entry."""
    torch.manual_seed(0)
    short, long = torch.randn(2000) * 0.1, torch.randn(5000) * 0.1
    c1 = FeatureCache(tmp_path / "1", small_apc(0))
    c2 = FeatureCache(tmp_path / "2", small_apc(0))
    c1.compute_batch(["s"], short.unsqueeze(0), torch.tensor([2000]))
    batch = torch.full((2, 5000), 0.5)
    batch[0, :2000], batch[1] = short, long
    c2.compute_batch(["s", "l"], batch, torch.tensor([2000, 5000]))
    a, b = c1.load("s"), c2.load("s")
    assert a["surprisal"].shape == b["surprisal"].shape == (FeatureConfig().num_frames(2000),)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-5)


def test_fill_cache_adds_training_utterances_at_each_speed(tmp_path):
    """fill_cache with a speed perturbation: every utterance clean, the training split also at each
    speed (frames scaled by 1/speed); the training pipeline reads the speed it draws."""
    import csv
    import random

    import numpy as np
    import soundfile as sf
    import speechbrain as sb

    from surprisal_cc.training.augment import SpeedPerturbation
    from surprisal_cc.training.frozen_features import cached_features, fill_cache

    manifests = {}
    for split, utts in {"train": ["t1", "t2"], "valid": ["v1"]}.items():
        manifests[split] = tmp_path / f"{split}.csv"
        with open(manifests[split], "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["ID", "duration", "wav"])
            for i, utt in enumerate(utts):
                wav = tmp_path / f"{utt}.wav"
                sf.write(wav, np.random.default_rng(i).standard_normal(16000 + 4000 * i).astype("float32") * 0.1, 16000)
                writer.writerow([utt, 1.0 + 0.25 * i, wav])
    cache = FeatureCache(tmp_path / "cache", small_apc())
    perturbation = SpeedPerturbation([0.8, 1.25])
    fill_cache(cache, manifests, batch_size=2, speed_perturbation=perturbation)
    stored = {path.stem for path in cache.folder.glob("*.pt")}
    assert stored == {"t1", "t2", "v1", "t1@speed0.8", "t2@speed0.8", "t1@speed1.25", "t2@speed1.25"}
    frames = {utt: cache.load(utt)["fbank"].shape[0] for utt in stored}
    assert frames["t1@speed0.8"] == pytest.approx(frames["t1"] / 0.8, abs=2)
    assert frames["t2@speed1.25"] == pytest.approx(frames["t2"] / 1.25, abs=2)

    train = sb.dataio.dataset.DynamicItemDataset.from_csv(str(manifests["train"]))
    sb.dataio.dataset.add_dynamic_item([train], cached_features(cache, perturbation))
    sb.dataio.dataset.set_output_keys([train], ["id", "fbank"])
    assert train[0]["fbank"].shape[0] == frames["t1"]  # inactive: clean
    perturbation.active = True
    random.seed(0)
    seen = {train[0]["fbank"].shape[0] for _ in range(30)}
    assert seen == {frames["t1"], frames["t1@speed0.8"], frames["t1@speed1.25"]}


def test_two_processes_writing_one_entry_do_not_collide(tmp_path, monkeypatch):
    """Runs side by side fill one cache: another process writes the same entry between this one's
    save and its rename. Each writer's temporary file is its own, so both renames succeed."""
    import os

    import surprisal_cc.training.cache as cache_module

    apc, audio = small_apc(0), FakeAudio(AUDIO_LENGTHS)
    first, other = FeatureCache(tmp_path, apc), FeatureCache(tmp_path, apc)
    real_save, real_getpid, interleaved = torch.save, os.getpid, []

    def save(obj, path):
        real_save(obj, path)
        if not interleaved:  # the other process, with its own pid, writes the entry now
            interleaved.append(path)
            monkeypatch.setattr(os, "getpid", lambda: real_getpid() + 1)
            try:
                assert other.build(ITEMS[:1], audio, progress=False) == 1
            finally:
                monkeypatch.setattr(os, "getpid", real_getpid)

    monkeypatch.setattr(cache_module.torch, "save", save)
    assert first.build(ITEMS[:1], audio, progress=False) == 1
    assert interleaved and set(first.load(ITEMS[0][0])) == {"fbank", "features", "surprisal"}
    assert not list(first.folder.glob("*.tmp"))


def test_one_id_naming_two_audio_files_is_refused_before_any_feature_is_computed(tmp_path):
    """The cache is keyed on utterance ids: an id that names one file in train and another in test would
    score test on train's features, and an id twice in one split is ambiguous; both are one line naming
    the manifests, before any audio is read."""
    from surprisal_cc.data.errors import DataPreparationError
    from surprisal_cc.training.frozen_features import fill_cache

    def manifest(name: str, rows: List[tuple]) -> str:
        path = tmp_path / f"{name}.csv"
        path.write_text("ID,duration,wav\n" + "".join(f"{i},1.0,{w}\n" for i, w in rows))
        return str(path)

    class Untouched:
        def build(self, *args, **kwargs):
            raise AssertionError("no feature may be computed")

    train, test = manifest("train", [("0001", "a/0001.flac")]), manifest("test", [("0001", "b/0001.flac")])
    with pytest.raises(DataPreparationError, match=r"'0001' is a/0001.flac in .*train.csv and b/0001.flac in .*test.csv"):
        fill_cache(Untouched(), {"train": train, "test": test}, batch_size=2)
    twice = manifest("twice", [("0001", "a/0001.flac"), ("0001", "a/0002.flac")])
    with pytest.raises(DataPreparationError, match=r"twice.csv: utterance id '0001' occurs twice"):
        fill_cache(Untouched(), {"train": twice}, batch_size=2)
