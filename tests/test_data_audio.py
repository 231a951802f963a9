import os

import numpy as np
import pytest
import soundfile as sf
import torch

from data_fixtures import make_bad_audio_fixture, tone
from surprisal_cc.data import DataPreparationError, DataPreparationWarning
from surprisal_cc.data.audio import (check_audio_files, check_audio_many, inspect_audio, iter_audio_paths, read_audio,
                                     refuse_bad_audio)
from surprisal_cc.data.waveforms import as_waveforms
from surprisal_cc.data.errors import BadAudioError, BadLabelsError
from surprisal_cc.inference.long_audio import is_long


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    return make_bad_audio_fixture(tmp_path_factory.mktemp("bad_audio"))


def test_read_audio_resamples_and_downmixes(bad):
    good = read_audio(bad["good"])
    assert good.dtype == torch.float32 and good.shape == (3200,)
    resampled = read_audio(bad["rate_8k"])
    assert resampled.shape == (3200,)  # 0.2 s at 8 kHz -> 16 kHz, the 220 Hz tone kept
    assert int(torch.fft.rfft(resampled).abs().argmax()) * 16000 / 3200 == pytest.approx(220.0, abs=5.0)
    import soundfile

    channels = torch.from_numpy(soundfile.read(bad["stereo"], dtype="float32")[0])
    torch.testing.assert_close(read_audio(bad["stereo"]), channels.mean(1), rtol=0, atol=1e-5)  # the mean
    info = inspect_audio(bad["stereo"])
    assert (info.channels, info.sample_rate, info.num_samples) == (2, 16000, 3200)
    assert info.duration == pytest.approx(0.2)


def test_a_rate_sharing_no_factor_with_16k_is_resampled_in_bounded_memory(tmp_path, monkeypatch):
    """16001 Hz would need torchaudio's kernel of 16000 x 16001 taps (gigabytes, minutes per second of
    audio); the tone comes out at 16 kHz all the same, and 44.1 kHz still goes through torchaudio."""
    import math

    import torchaudio

    real, used = torchaudio.functional.resample, []

    def bounded(wav, orig, new, *args, **kwargs):
        common = math.gcd(int(orig), int(new))
        assert (orig // common) * (new // common) <= 1 << 20, f"a {orig // common} x {new // common} kernel"
        used.append(orig)
        return real(wav, orig, new, *args, **kwargs)

    monkeypatch.setattr(torchaudio.functional, "resample", bounded)
    for rate in (16001, 44100):
        tone_440 = 0.5 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)
        sf.write(tmp_path / f"{rate}.wav", tone_440, rate, subtype="FLOAT")
        wav = read_audio(tmp_path / f"{rate}.wav")
        expected = 0.5 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)
        assert wav.dtype == torch.float32 and wav.shape == (16000,)
        np.testing.assert_allclose(wav[200:-200].numpy(), expected[200:-200], atol=0.01)
    assert used == [44100]


@pytest.mark.parametrize("kind,reason", [
    ("corrupt", "cannot be decoded"), ("empty", "empty file"), ("no_samples", "0 samples"),
    ("too_short", "too short"),
])
def test_bad_file_is_an_error(bad, kind, reason):
    with pytest.raises(DataPreparationError, match=reason) as err:
        check_audio_files([bad["good"], bad[kind]])
    assert str(bad[kind]) in str(err.value) and "skip_bad_audio=True" in str(err.value)


def test_a_folder_or_a_broken_link_given_as_a_file_says_so(tmp_path):
    (tmp_path / "gone.flac").symlink_to(tmp_path / "deleted.flac")
    _, problems = check_audio_many([tmp_path, tmp_path / "gone.flac", tmp_path / "missing.flac"])
    assert problems == [f"{tmp_path}: a folder, not an audio file",
                        f"{tmp_path / 'gone.flac'}: broken link (its target does not exist)",
                        f"{tmp_path / 'missing.flac'}: file does not exist"]


def test_all_problems_in_one_error_and_skip(bad):
    paths = [bad[k] for k in ("good", "corrupt", "empty", "too_short")]
    with pytest.raises(DataPreparationError) as err:
        check_audio_files(paths)
    assert all(str(bad[k]) in str(err.value) for k in ("corrupt", "empty", "too_short"))
    with pytest.warns(DataPreparationWarning, match="leaving out 3"):
        good = check_audio_files(paths, skip_bad_audio=True)
    assert list(good) == [str(bad["good"])]


def test_many_unusable_files_are_counted_and_the_first_listed(tmp_path):
    """A corpus of 1,000 bad files is not an error of 1,000 lines: the first MAX_LISTED and a count."""
    from surprisal_cc.data.audio import MAX_LISTED

    paths = [tmp_path / f"u{i:02d}.flac" for i in range(MAX_LISTED + 5)]
    for path in paths:
        path.write_bytes(b"")
    for skip in (False, True):
        with pytest.warns(DataPreparationWarning) if skip else pytest.raises(DataPreparationError) as caught:
            check_audio_files(paths, skip_bad_audio=skip)
        text = str(caught[0].message if skip else caught.value)
        assert f"{MAX_LISTED + 5} unusable audio file(s)" in text and "... and 5 more" in text
        assert f"u{MAX_LISTED - 1:02d}.flac" in text and f"u{MAX_LISTED:02d}.flac" not in text
        assert skip or f"to leave them out (the first {MAX_LISTED} will be listed)" in text


def test_8k_and_stereo_warn_with_file_names(bad):
    with pytest.warns(DataPreparationWarning, match="rate_8k.flac \\(8000 Hz\\)"):
        check_audio_files([bad["rate_8k"]])
    with pytest.warns(DataPreparationWarning, match="stereo.flac \\(2 channels\\)"):
        check_audio_files([bad["stereo"]])


def test_only_audio_below_the_model_rate_warns_of_its_missing_band(bad, tmp_path):
    sf.write(tmp_path / "cd.wav", tone(0.2, 44100), 44100)
    with pytest.warns(DataPreparationWarning) as record:
        check_audio_files([bad["rate_8k"], tmp_path / "cd.wav"])
    narrowband = [str(w.message) for w in record if "no content above half their sample rate" in str(w.message)]
    assert len(narrowband) == 1 and "rate_8k.flac (8000 Hz)" in narrowband[0] and "cd.wav" not in narrowband[0]


@pytest.mark.parametrize("kind,reason", [("nan", "NaN or infinite"), ("inf", "NaN or infinite"),
                                         ("int16_scaled", "int16-scaled")])
def test_float_audio_with_unusable_samples_is_an_error_naming_the_file(kind, reason, tmp_path):
    """Float WAVs decode to whatever they hold: NaN, inf or int16-scale samples are refused when the
    files are checked, before any decoding, as the in-memory batches are refused."""
    samples = tone(0.2).astype(np.float32) / 32768
    sf.write(tmp_path / "fine.wav", samples * 1.2, 16000, subtype="FLOAT")  # overshoot, still audio
    bad = samples.copy()
    bad[100] = {"nan": np.nan, "inf": np.inf, "int16_scaled": 1.0}[kind]
    sf.write(tmp_path / f"{kind}.wav", bad * (32768 if kind == "int16_scaled" else 1), 16000, subtype="FLOAT")
    with pytest.raises(DataPreparationError, match=reason) as err:
        check_audio_files([tmp_path / "fine.wav", tmp_path / f"{kind}.wav"])
    assert f"{tmp_path / kind}.wav: " in str(err.value) and "fine.wav" not in str(err.value)
    with pytest.raises(ValueError, match=reason):
        as_waveforms(torch.from_numpy(bad * (32768 if kind == "int16_scaled" else 1)))


def test_folders_give_their_audio_through_links_and_without_hidden_files(tmp_path):
    """A folder stands for its audio files: those under links to folders too (each folder once, a
    link back up the tree included), not hidden ones (macOS's ``._x.flac``, ``.Trash``)."""
    corpus, elsewhere = tmp_path / "corpus", tmp_path / "elsewhere"
    for name in ("a.flac", "notes.txt", ".hidden.flac", "sub/b.wav", "sub/._b.wav", ".Trash/old.flac"):
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_bytes(b"")
    (elsewhere / "speaker").mkdir(parents=True)
    (elsewhere / "speaker" / "c.flac").write_bytes(b"")
    (corpus / "linked").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "sub" / "up").symlink_to(corpus, target_is_directory=True)
    found = [p.relative_to(corpus).as_posix() for p in iter_audio_paths([corpus])]
    assert found == ["a.flac", "linked/speaker/c.flac", "sub/b.wav"]


@pytest.mark.parametrize("shape", [(0,), (0, 100), (2, 0)])
def test_a_batch_without_audio_is_one_clear_error(shape):
    with pytest.raises(ValueError, match=r"wavs hold no audio \(shape"):
        as_waveforms(torch.zeros(shape))


@pytest.mark.skipif(os.name != "posix", reason="file names as bytes are POSIX's")
def test_a_name_not_valid_in_the_locales_encoding_still_opens(tmp_path):
    """Latin-1 bytes in a name on a UTF-8 system reach Python as surrogate escapes, which soundfile
    would refuse to encode."""
    name = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.wav")
    try:
        sf.write(os.fsencode(name), tone(0.3), 16000)
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    (found,) = iter_audio_paths([tmp_path])
    assert str(found) == name and "\udce9" in name
    infos, problems = check_audio_many([found])
    assert not problems and infos[name].num_samples == 4800
    assert read_audio(found).shape == (4800,) and not is_long(found)


def test_refuse_bad_audio_raises_unless_skipping():
    """Nothing bad or skip_bad: no error; otherwise one listing the problems, with the hint for some
    usable inputs or the one for none (counted by bad= where the listing is shortened)."""
    refuse_bad_audio([], 2, skip_bad=False, hint="some")
    refuse_bad_audio(["a: bad"], 2, skip_bad=True, hint="some")
    with pytest.raises(BadAudioError) as raised:
        refuse_bad_audio(["a: bad"], 2, skip_bad=False, hint="some", none_usable_hint="none")
    assert (raised.value.problems, raised.value.total, raised.value.hint) == (["a: bad"], 2, "some")
    with pytest.raises(BadAudioError) as raised:
        refuse_bad_audio(["a: bad", "b: bad"], 2, skip_bad=False, hint="some", none_usable_hint="none")
    assert raised.value.hint == "none" and str(raised.value) == "a: bad\nb: bad\nnone"
    with pytest.raises(BadLabelsError) as raised:
        refuse_bad_audio(["a: bad", "... and 1 more"], 3, skip_bad=False, hint="some", none_usable_hint="none",
                         bad=3, error=BadLabelsError)
    assert raised.value.hint == "none"


def test_a_file_shorter_than_the_models_one_frame_is_refused_naming_it(tmp_path):
    """A 50 ms window: 37.5 ms passes the 25 ms check made where no model is known, and is refused, in one
    line naming the file, its duration and the model's minimum, where the model's minimum is given."""
    from surprisal_cc.data.audio import check_audio, check_audio_each
    from surprisal_cc.model.feature_config import FeatureConfig
    from surprisal_cc.model.features import FilterbankFrontEnd

    config = FeatureConfig(frame_length_ms=50.0)
    least = config.min_samples
    sf.write(tmp_path / "short.wav", tone(0.0375), 16000)
    sf.write(tmp_path / "enough.wav", tone(least / 16000), 16000)
    assert check_audio_many([tmp_path / "short.wav"]) == ({str(tmp_path / "short.wav"): inspect_audio(
        tmp_path / "short.wav")}, [])  # unchanged without a model's minimum
    assert read_audio(tmp_path / "short.wav").shape == (600,)
    line = (f"{tmp_path / 'short.wav'}: too short (37.5 ms; the model's shortest usable audio is 50 ms, "
            f"{least} samples at 16000 Hz: one frame)")
    with pytest.raises(BadAudioError) as err:
        read_audio(tmp_path / "short.wav", 16000, least)
    assert str(err.value) == line
    with pytest.raises(BadAudioError) as err:
        check_audio(tmp_path / "short.wav", 16000, min_samples=least)
    assert str(err.value) == line
    _, problems = check_audio_many([tmp_path / "enough.wav", tmp_path / "short.wav"], min_samples=least)
    assert problems == [line]
    assert [problem for _, _, problem in check_audio_each([tmp_path / "short.wav"] * 70, num_workers=2,
                                                          min_samples=least)] == [line.split(": ", 1)[1]] * 70
    enough = read_audio(tmp_path / "enough.wav", 16000, least)  # exactly the minimum: one frame
    assert FilterbankFrontEnd(config)(enough[None], torch.tensor([least]))[1].tolist() == [1]


def test_the_models_minimum_counts_the_samples_a_file_resamples_to(tmp_path):
    """Too short is fewer than the model's minimum once resampled to its rate; every reader names the file's
    own duration."""
    from surprisal_cc.data.audio import refuse_short_audio, resampled_length

    least = 800  # 50 ms at 16 kHz
    sf.write(tmp_path / "barely.wav", tone(2204 / 44100, 44100), 44100)  # 49.98 ms: 800 samples at 16 kHz
    sf.write(tmp_path / "short.wav", tone(2200 / 44100, 44100), 44100)  # 799 samples at 16 kHz
    assert read_audio(tmp_path / "barely.wav", 16000, least).numel() == resampled_length(2204, 44100, 16000) == 800
    _, problems = check_audio_many([tmp_path / "barely.wav", tmp_path / "short.wav"], min_samples=least)
    line = (f"{tmp_path / 'short.wav'}: too short (49.89 ms; the model's shortest usable audio is 50 ms, 800 samples "
            "at 16000 Hz: one frame)")  # the file's own duration, not that of the 799 samples it resamples to
    assert problems == [line]
    for read in (lambda: read_audio(tmp_path / "short.wav", 16000, least),
                 lambda: refuse_short_audio(tmp_path / "short.wav", 2200, 44100, least, 16000)):
        with pytest.raises(BadAudioError) as err:
            read()
        assert str(err.value) == line
    refuse_short_audio(tmp_path / "barely.wav", 2204, 44100, least, 16000)


def test_a_batch_with_waveforms_shorter_than_the_models_one_frame_names_them():
    from surprisal_cc.data.audio import refuse_short_waveforms
    from surprisal_cc.data.waveforms import batch_waveforms

    wavs, samples = batch_waveforms([torch.zeros(800), torch.zeros(400)])  # no length check here
    assert samples.tolist() == [800, 400]
    with pytest.raises(DataPreparationError, match=r"^waveform\(s\) 1 of the batch \(400 samples at 16000 Hz\) "
                                                   r"are shorter than the model's shortest usable audio, 30 ms"):
        refuse_short_waveforms(samples, 16000, 480)
    # counted at the model's rate: 960 samples at 32 kHz are 480 at 16 kHz
    _, samples = batch_waveforms(torch.zeros(1, 960), sample_rate=32000)
    refuse_short_waveforms(samples, 16000, 480)
    with pytest.raises(ValueError, match="min_samples must be a whole number of at least 1"):
        refuse_short_waveforms(samples, 16000, 0)


@pytest.mark.parametrize("count", [2200, 2203, 2204, 2205])
def test_a_resampled_batch_counts_the_samples_resampling_makes(count):
    """A waveform at 44.1 kHz counts the samples resampling it alone makes (as of a file of it: ceil, not
    round), in a padded batch too: 2203 samples are 800 at 16 kHz, one frame of a 50 ms window."""
    from surprisal_cc.data.audio import resample, resampled_length
    from surprisal_cc.data.waveforms import batch_waveforms

    made = resample(torch.zeros(count), 44100, 16000).numel()
    assert made == resampled_length(count, 44100, 16000)
    assert batch_waveforms(torch.zeros(1, count), sample_rate=44100)[1].tolist() == [made]
    padded = batch_waveforms(torch.zeros(2, 2205), num_samples=torch.tensor([2205, count]), sample_rate=44100)[1]
    assert padded.tolist() == [800, made]


def test_a_file_far_quieter_than_the_training_speech_is_named_in_one_warning(tmp_path):
    """RMS below QUIET_DBFS (of the mono mix): one warning listing each such file and its level."""
    import warnings

    import soundfile

    from surprisal_cc.data import DataPreparationWarning
    from surprisal_cc.data.audio import QUIET_DBFS, warn_converted

    t = np.arange(16000) / 16000
    for name, rms_db in (("quiet.wav", QUIET_DBFS - 10), ("speechlike.wav", -26.0)):
        amplitude = 10 ** (rms_db / 20) * np.sqrt(2)  # a sine's RMS is its amplitude / sqrt(2)
        soundfile.write(tmp_path / name, (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000)
    infos, problems = check_audio_many([tmp_path / "quiet.wav", tmp_path / "speechlike.wav"])
    assert problems == [] and infos[str(tmp_path / "quiet.wav")].rms_dbfs == pytest.approx(QUIET_DBFS - 10, abs=0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_converted(infos)
    messages = [str(w.message) for w in caught if issubclass(w.category, DataPreparationWarning)]
    assert len(messages) == 1 and messages[0].startswith("1 file(s) have an RMS level below -45 dBFS")
    assert f"{tmp_path / 'quiet.wav'} (-55.0 dBFS)" in messages[0] and "speechlike" not in messages[0]
    soundfile.write(tmp_path / "silent.wav", np.zeros(16000, dtype=np.float32), 16000)
    silent = check_audio_many([tmp_path / "silent.wav"])[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_converted(infos, input_level=-26.0)  # the model scales its input: nothing to warn about
        warn_converted(silent)  # digital silence is not quiet speech
    assert [str(w.message) for w in caught if issubclass(w.category, DataPreparationWarning)] == []


def test_scaling_to_a_level_raises_by_at_most_40_db():
    from surprisal_cc.data.waveforms import MAX_LEVEL_GAIN_DB, scaled_to_level

    wavs = torch.tensor([[0.1, -0.1], [1e-4, -1e-4]])  # -20 dBFS and -80 dBFS
    out = scaled_to_level(wavs, torch.tensor([2, 2]), -26.0)
    torch.testing.assert_close(out[0].abs(), torch.full((2,), 10 ** (-26 / 20)))
    torch.testing.assert_close(out[1].abs(), torch.full((2,), 1e-4 * 10 ** (MAX_LEVEL_GAIN_DB / 20)))


def test_silent_files_are_counted_apart_from_the_level_statistics(tmp_path):
    """A silent file's RMS level is -inf dBFS: the median and range of a corpus's levels leave it out and count
    it, so they stay valid JSON (recipes/MiniLibriSpeech/level_sensitivity.py prints them)."""
    import json

    from surprisal_cc.data.audio import level_summary

    sf.write(tmp_path / "silent.flac", np.zeros(16000, dtype="float32"), 16000)
    sf.write(tmp_path / "tone.flac", tone(1.0), 16000)
    levels = [inspect_audio(tmp_path / name).rms_dbfs for name in ("silent.flac", "tone.flac")]
    assert levels[0] == -np.inf
    summary = level_summary(levels)
    assert summary == {"rms_dbfs_median": round(levels[1], 1), "rms_dbfs_range": [round(levels[1], 1)] * 2,
                       "silent_files": 1}
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary
    assert level_summary(levels[:1]) == {"rms_dbfs_median": None, "rms_dbfs_range": None, "silent_files": 1}


def test_a_clipped_file_is_named_in_one_warning_whatever_the_input_level(tmp_path):
    """A sine driven 4x past full scale and cut there: about half its samples at full scale, named with
    their share; the same sine unclipped, and one peak at full scale, are not."""
    import warnings

    import soundfile

    from surprisal_cc.data import DataPreparationWarning
    from surprisal_cc.data.audio import warn_converted

    sine = np.sin(2 * np.pi * 220 * np.arange(16000) / 16000).astype(np.float32)
    one_peak = 0.3 * sine
    one_peak[100] = 1.0
    for name, wav in (("clipped.wav", np.clip(4 * sine, -1, 1)), ("clean.wav", 0.5 * sine), ("peak.wav", one_peak)):
        soundfile.write(tmp_path / name, wav, 16000, subtype="FLOAT")
    infos, problems = check_audio_many(sorted(tmp_path.glob("*.wav")))
    assert problems == [] and 0.8 < infos[str(tmp_path / "clipped.wav")].clipped_share < 0.9
    for level in (None, -26.0):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warn_converted(infos, input_level=level)
        messages = [str(w.message) for w in caught if issubclass(w.category, DataPreparationWarning)]
        assert len(messages) == 1 and messages[0].startswith("1 file(s) are clipped, 1% or more of their samples")
        assert f"{tmp_path / 'clipped.wav'} (84." in messages[0] and "clean" not in messages[0]
