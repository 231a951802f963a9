"""Smoke test of the benchmark suite: every benchmark runs at the tiniest sizes and reports numeric ratios.

Speed targets are deliberately not asserted here: they live in the benchmark output (``met?``).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from benchmarks.run_all import BENCHMARKS, main, run_benchmarks
from data_fixtures import make_librispeech_fixture, write_mfa_csv

MACHINE_KEYS = ("date", "git_revision", "cpu", "cpu_model_line", "cores", "torch", "cpu_capability", "threads",
                "thread_environment", "load_average_1_5_15", "load_average_after", "load_warning")


@pytest.fixture
def tiny_corpus(tmp_path, monkeypatch):
    """A two-utterance dev-clean-2 with MFA labels, so the data-prep benchmark runs in the test."""
    root = make_librispeech_fixture(tmp_path / "data", {"dev-clean-2": {"21-5": ["THE CAT", "STOP"]}},
                                    genders={"21": "M"})
    write_mfa_csv(root / "phone_labels" / "dev-clean-2_mfa.csv", "dev-clean-2",
                  {"21-5-0000": "sil DH AH K AE T sil", "21-5-0001": "sil S T AA P sil"})
    monkeypatch.setenv("SURPRISAL_CC_DATA", str(root))
    return root


def _numeric(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.mark.integration
def test_run_benchmarks_smoke_json(tiny_corpus, capsys):
    status = run_benchmarks(as_json=True, quick=True, size="smoke")
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report["errors"]
    assert report["size"] == "smoke"
    for key in MACHINE_KEYS:
        assert key in report["machine"], key
    assert report["machine"]["threads"] == 1  # the default: explicit, not the core count
    assert set(report["benchmarks"]) == set(BENCHMARKS)
    for name, result in report["benchmarks"].items():
        assert result["skipped"] is None, (name, result["skipped"])
        assert result["summary"], name
        assert result["details"], name
        ratios = [row for row in result["summary"] if row["ratio"] is not None]
        assert ratios, f"{name}: no ratio"
        for row in ratios:
            assert _numeric(row["ratio"]) and row["ratio"] > 0, (name, row)
            assert _numeric(row["ours"]) and _numeric(row["baseline"]), (name, row)
            assert isinstance(row["target"], str) and row["met"] in (True, False, None)
    memory = report["benchmarks"]["memory"]
    assert "warm-up" in memory["params"]["method"] and "reuse" in memory["params"]["method"]
    assert {row[-1] for row in memory["details"][0]["rows"]} <= {"yes", "upper bound"}


def test_output_file_has_rows_and_machine(tmp_path, monkeypatch, capsys):
    """``--output`` writes the JSON report: every benchmark's rows and the machine information; the decoding
    benchmark's headline is a ratio against SpeechBrain's CTCBeamSearcher with a target and a met flag. On a
    loaded machine the report's header carries a one-line warning (2 cores here, whatever the machine's)."""
    import os

    from benchmarks import bench_decoding, common, run_all

    def loaded():
        return [9.0, 9.0, 9.0]

    monkeypatch.setattr(common, "load_average", loaded)
    monkeypatch.setattr(run_all, "load_average", loaded)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    out = tmp_path / "bench.json"
    assert main(["--smoke", "--only", "decoding", "--threads", "1", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| benchmark | ours | baseline | ratio | target | met? |" in text
    warning = [line for line in text.splitlines() if line.startswith("WARNING: timings from a loaded machine")]
    assert len(warning) == 1 and "9.00 before the run, 9.00 after it" in warning[0]
    report = json.loads(out.read_text())
    machine = report["machine"]
    assert set(MACHINE_KEYS) <= set(machine) and machine["cores"] == 2
    assert machine["threads"] == 1 and machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert all(k.startswith(("OMP_", "MKL_", "ATEN_")) for k in machine["thread_environment"])
    assert machine["load_average_1_5_15"] == [9.0, 9.0, 9.0] and machine["load_warning"] == warning[0]
    decoding = report["benchmarks"]["decoding"]
    assert decoding["params"]["threads"] == 1 and decoding["params"]["warmup"] >= 1
    (row,) = decoding["summary"]  # smoke: peaky posteriors only
    assert "SpeechBrain CTCBeamSearcher" in row["benchmark"] and row["unit"] == "ms/utt"
    assert _numeric(row["ratio"]) and row["ratio"] == pytest.approx(row["baseline"] / row["ours"])
    assert row["target"] == f">= {bench_decoding.GOAL:g}x" and row["met"] == (row["ratio"] >= bench_decoding.GOAL)
    methods = [r[1] for r in decoding["details"][0]["rows"]]
    assert bench_decoding.OURS in methods and bench_decoding.BASELINE in methods


def test_run_all_passes_threads_and_output(tmp_path, monkeypatch, capsys):
    from benchmarks import run_all

    monkeypatch.setenv("SURPRISAL_CC_DATA", str(tmp_path / "nowhere"))  # dataprep: a quick skip
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # bench runs the checkout it is started in
    out = tmp_path / "bench.json"
    assert run_all.main(["--only", "dataprep", "--threads", "2", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["machine"]["threads"] == 2 and report["benchmarks"]["dataprep"]["params"]["threads"] == 2


def test_unwritable_output_fails_before_the_run(tmp_path, monkeypatch, capsys):
    """An ``--output`` in a folder that does not exist is one error line before any benchmark runs (from
    run_all); a file that fails after the run comes after the printed report."""
    from benchmarks import run_all

    monkeypatch.setenv("SURPRISAL_CC_DATA", str(tmp_path / "nowhere"))  # dataprep: a quick skip
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    out = tmp_path / "missing" / "bench.json"
    for run in (run_all.main,):
        assert run(["--only", "dataprep", "--output", str(out)]) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and "[bench]" not in captured.err
        assert captured.err.strip() == (f"error: --output file {out} cannot be written: No such file or directory")
    monkeypatch.setattr(run_all, "check_writable", lambda what, path: None)  # as if the folder went away meanwhile
    assert run_all.main(["--only", "dataprep", "--output", str(out)]) == 1
    captured = capsys.readouterr()
    assert "## Summary" in captured.out
    assert captured.err.strip().splitlines()[-1] == f"error: --output file {out} cannot be written: No such file or directory"
    assert not out.parent.exists()


def test_load_warning():
    """One line when the 1-minute load exceeds the cores the benchmarks leave free plus 0.5; after the run, the
    benchmarks' own threads are not counted against it."""
    from benchmarks.common import load_warning

    assert load_warning(2, 1, before=1.5) is None
    assert load_warning(2, 1, before=1.6).startswith("WARNING: timings from a loaded machine")
    assert load_warning(2, 2, before=0.6) is not None and load_warning(2, 2, before=0.5) is None
    assert load_warning(2, 1, before=0.2, after=2.4) is None
    warning = load_warning(2, 1, before=1.6, after=2.6)
    assert "\n" not in warning and "1.60 before the run, 2.60 after it" in warning
    assert load_warning(2, 1, before=float("nan"), after=float("nan")) is None


def test_interleaved_times_fewer_repeats_for_some():
    """A function with fewer repeats runs in the first rounds only, after the same warm-up round."""
    from benchmarks.common import interleaved_times, spread

    calls = []
    times = interleaved_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                              repeats={"a": 3, "b": 1}, warmup=1)
    assert calls == ["a", "b", "a", "b", "a", "a"]
    assert [len(times["a"]), len(times["b"])] == [3, 1]
    assert spread([0.0123, 0.0101, 0.0110], scale=1000) == "10.1–12.3"


def test_headline_repeats():
    """Full and quick sizes time the headline configurations at least 5 times, after a warm-up of the same
    configuration (a fixed setting, not a timing)."""
    from benchmarks import bench_allocator, bench_decoding, bench_rnn, bench_training

    for size in ("full", "quick"):
        assert bench_training.SIZES[size]["steps"] >= 5 and bench_training.SIZES[size]["warmup"] >= 1
        assert bench_rnn.SIZES[size]["repeats"] >= 5 and bench_rnn.SIZES[size]["warmup"] >= 1
        assert bench_decoding.SIZES[size]["repeats"] >= 5 and bench_decoding.SIZES[size]["warmup"] >= 1
        assert bench_allocator.SIZES[size]["steps"] >= 5  # each process warms up on its own configuration


def test_readme_targets_table_is_the_codes():
    from benchmarks.run_all import targets_table

    readme = (Path(__file__).resolve().parents[1] / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert targets_table() in readme, "benchmarks/README.md: paste `python -m benchmarks.run_all --targets`"


def test_markdown_table_and_skip(tmp_path, monkeypatch, capsys):
    """Markdown output has the combined table; a missing corpus is a skip with a message, not an error."""
    monkeypatch.setenv("SURPRISAL_CC_DATA", str(tmp_path / "nowhere"))
    assert run_benchmarks(as_json=False, size="smoke", only=["dataprep"]) == 0
    out = capsys.readouterr().out
    assert "| benchmark | ours | baseline | ratio | target | met? |" in out
    assert "SKIPPED: dev-clean-2 not found" in out


@pytest.mark.integration
def test_training_benchmark_rows_smoke():
    """The training benchmark has the authors' step as baseline, ours in fp32 and bf16, bucketed, factors, packed,
    and the matrix-product floor."""
    from benchmarks import bench_training as bt

    res = bt.run("smoke")
    table = res.details[0]
    assert "real frames/s" in table["headers"] and "s/step (median)" in table["headers"]
    rows = {row[0]: row for row in table["rows"]}
    for name in (bt.OURS, bt.OURS_BF16, bt.OURS_BUCKETED, bt.AUTHORS, bt.AUTHORS_BF16, bt.PACKED, *bt.FACTORS.values()):
        assert name in rows, name
    fps = table["headers"].index("real frames/s")
    bf16_rows = (bt.OURS_BF16, bt.AUTHORS_BF16)
    measured = [row for name, row in rows.items() if not (name in bf16_rows and not bt.bf16_supported())]
    assert all(_numeric(row[fps]) and row[fps] > 0 for row in measured)
    names = [row.benchmark for row in res.summary]
    goal = res.summary[0]
    assert "authors' step" in goal.benchmark and goal.target == ">= 5x" and goal.met == (goal.ratio >= 5.0)
    assert "real frames/s" in goal.note
    assert any("length-bucketed" in n for n in names)
    assert any("both in bf16 autocast" in n for n in names) == bt.bf16_supported()
    assert any("packed nn.GRU, which the authors' code did not use" in n for n in names)
    for factor in bt.FACTORS:
        assert f"training factor: {factor}" in names
    # the matrix-product floor of the bucketed configuration, and the ceiling it sets against the authors' step
    rows = {row.benchmark.split(":")[0]: row for row in res.summary}
    floor, ceiling = rows["training step floor"], rows["training speed-up ceiling of this arithmetic"]
    assert floor.ours > 0 and floor.ratio == pytest.approx(floor.ours / floor.baseline)
    assert ceiling.ratio == pytest.approx(ceiling.ours / ceiling.baseline) and "goal" in ceiling.note
    products = next(d for d in res.details if d["title"].startswith("Matrix products"))
    assert [row[0] for row in products["rows"]] == [bt.RECURRENT, bt.DENSE]
    assert sum(row[-1] for row in products["rows"]) == pytest.approx(1.0)


def test_training_benchmark_configs():
    """The baseline is the authors' step: filterbank + APC from the waveform, masked, unpacked nn.GRU."""
    from benchmarks import bench_training as bt
    from benchmarks.common import PackedBiGRU, UnpackedBiGRU
    from surprisal_cc.model.feature_config import FeatureConfig

    specs = bt.configs()
    assert specs[bt.AUTHORS] == bt.StepConfig(features="recompute", execution="masked", rnn="unpacked")
    assert specs[bt.OURS] == bt.StepConfig()
    authors = bt.build_model(specs[bt.AUTHORS])
    assert isinstance(authors.encoder.pre_net, UnpackedBiGRU)
    assert isinstance(authors.encoder.post_net.rnn, UnpackedBiGRU)
    assert authors.apc.training and not any(p.requires_grad for p in authors.apc.parameters())
    assert isinstance(bt.build_model(specs[bt.PACKED]).encoder.pre_net, PackedBiGRU)
    # synthetic waveforms give exactly the batch's frame counts through the filterbank
    frames = torch.arange(1, 900)
    assert [FeatureConfig().num_frames(int(s)) for s in bt.samples_for_frames(frames)] == frames.tolist()
    batch = bt.make_batches(1, 3, 4, 8, waveforms=True)[0]
    _, lengths = authors.front_end(batch.waveforms, batch.samples)
    assert lengths.tolist() == batch.lengths.tolist()
    # a bucketed batch pads much less than a random one
    random_batch = bt.make_batches(1, 32, 300, 800)[0]
    bucketed = bt.make_batches(1, 32, 300, 800, bucketed=True)[0]
    assert bucketed.padded_frames - bucketed.real_frames < (random_batch.padded_frames - random_batch.real_frames) / 4


def test_training_benchmark_without_bf16(monkeypatch):
    """Where the CPU has no native bf16 the bf16 row says skipped and the goal uses fp32."""
    from benchmarks import bench_training as bt

    monkeypatch.setattr(bt, "bf16_supported", lambda device="cpu": False)
    res = bt.run("smoke")
    assert bt.OURS_BF16 not in bt.configs()
    assert "ours (fp32)" in res.summary[0].benchmark
    skipped = [row for row in res.summary if "bf16" in row.benchmark]
    assert skipped and skipped[0].ours is None and "skipped" in skipped[0].note
    rows = {row[0]: row for row in res.details[0]["rows"]}
    assert any("skipped" in str(cell) for cell in rows[bt.OURS_BF16])


def test_inference_predicted_ratio():
    """Each frame pays for the network it ran: p = 1 is big-only, p = 0 small-only; README's component times."""
    from benchmarks.bench_inference import predicted_ratio

    assert predicted_ratio(1.0, 1.0, 1.0, 0.1, 1.0) == pytest.approx(1.0)
    assert predicted_ratio(1.0, 1.0, 1.0, 0.1, 0.0) == pytest.approx(2.1 / 3.0)
    assert predicted_ratio(0.99, 1.05, 1.00, 0.12, 0.65) == pytest.approx(0.899, abs=5e-4)


@pytest.mark.integration
def test_inference_benchmark_rows_smoke():
    """Measured vs predicted (from the components of the same run) routed/big-only ratio, FLOP ratio, RTF rows."""
    from benchmarks import bench_inference as bi

    res = bi.run("smoke")
    goal = res.summary[0]
    assert goal.ratio == pytest.approx(goal.ours / goal.baseline)
    components = {row[0]: row[1] for row in res.details[1]["rows"]}
    assert set(components) == set(bi.COMPONENTS)
    compare = res.details[2]
    rows = {row[0]: row for row in compare["rows"]}
    p = rows["fraction of real frames on the big network (p)"][1]
    assert 0.0 <= p <= 1.0
    measured, predicted, diff, flop_ratio = rows["encoder (pre + small/big + post)"][1:5]
    assert predicted == pytest.approx(bi.predicted_ratio(*(components[c] for c in bi.COMPONENTS), p))
    assert measured == pytest.approx(goal.ratio) and diff == pytest.approx(measured - predicted)
    assert f"predicted {predicted:.3f}" in goal.target and f"<= {bi.TOLERANCE}" in goal.target
    assert goal.met == (abs(diff) <= bi.TOLERANCE)
    assert f"FLOP ratio {flop_ratio:.3f}" in goal.note and _numeric(flop_ratio)
    rtf = [row for row in res.summary if "RTF" in row.benchmark]
    assert [("fp32" in r.benchmark, "bf16" in r.benchmark) for r in rtf] == [(True, False), (False, True)]
    fp32 = rtf[0]
    assert fp32.ratio == pytest.approx(fp32.ours / fp32.baseline) and fp32.baseline == bi.SIZES["smoke"]["audio_s"]
    assert all(stage in fp32.note for stage in bi.STAGES)
    table = res.details[3]
    shares = [table["headers"].index(f"{stage} %") for stage in bi.STAGES]
    for row in table["rows"]:
        if row[0] == "fp32" or bi.bf16_supported():
            assert sum(row[i] for i in shares) == pytest.approx(100.0)
    # threads: busy / idle per thread setting and default / one thread when busy, from one run
    threads = [row for row in res.summary if row.benchmark.startswith("threads,")]
    assert len(threads) == 3 and all(_numeric(r.ratio) and r.ratio > 0 for r in threads)
    busy_vs_idle, one_vs_default = threads[:2], threads[2]
    assert all(r.ratio == pytest.approx(r.ours / r.baseline) for r in busy_vs_idle)
    assert one_vs_default.ratio == pytest.approx(one_vs_default.baseline / one_vs_default.ours)
    assert [row[0] for row in res.details[-1]["rows"]][1] == "--threads 1"


def test_inference_benchmark_without_bf16(monkeypatch):
    from benchmarks import bench_inference as bi

    monkeypatch.setattr(bi, "bf16_supported", lambda: False)
    res = bi.run("smoke")
    bf16 = [row for row in res.summary if "RTF" in row.benchmark and "bf16" in row.benchmark]
    assert len(bf16) == 1 and bf16[0].ratio is None and "skipped" in bf16[0].note


def test_device_option(capsys):
    """``--device cuda`` runs training and rnn on the GPU and skips the CPU benchmarks; without CUDA it is
    one clear error before anything runs."""
    status = main(["--smoke", "--only", "rnn,decoding", "--device", "cuda", "--json"])
    captured = capsys.readouterr()
    if not torch.cuda.is_available():
        assert status == 1 and "CUDA is not available" in captured.err
        return
    report = json.loads(captured.out)
    assert status == 0, report["errors"]
    assert report["benchmarks"]["rnn"]["params"]["device"] == "cuda" and "cuda" in report["machine"]["device"]
    assert "measures CPU work" in report["benchmarks"]["decoding"]["skipped"]


def test_step_products_count_every_multiply_of_the_step():
    """The matrix-product floor counts, for a big-only step without padding, three products per weight and
    frame (output, weight gradient, input gradient) except the input gradient of the first layer, whose input
    (the features) needs none; the small network, which no frame was routed to, counts nothing."""
    from benchmarks import bench_training as bt
    from benchmarks.common import paper_encoder
    from surprisal_cc.model.flops import weight_only_macs

    torch.manual_seed(0)
    encoder = paper_encoder(1.0, bt.NUM_OUTPUTS)
    model = bt.StepModel(bt.StepConfig(), encoder, None, None, torch.optim.Adam(encoder.parameters()))
    batch = bt.make_batch(torch.tensor([6, 6, 6]), torch.Generator().manual_seed(0))
    products = bt.step_products(model, batch)
    frames = batch.real_frames
    ran = weight_only_macs(encoder) - weight_only_macs(encoder.small_net)
    first_input = sum(g.weight_ih_l0.numel() for g in (encoder.pre_net.forward_gru, encoder.pre_net.backward_gru))
    assert sum(p.macs for p in products) == frames * (3 * ran - first_input)
    recurrent = [p for p in products if p.recurrent]
    assert len(recurrent) == 8 and all(p.count == 6 and p.m == 3 for p in recurrent)  # 4 GRUs x 2, per step
    with pytest.raises(TypeError, match="no count for LSTM"):
        bt.layer_products(torch.nn.LSTM(4, 4), torch.zeros(1, 2, 4))
    seconds = bt.time_products(products, torch.float32, repeats=1)
    assert set(seconds) == {(p.m, p.k, p.n) for p in products} and all(s > 0 for s in seconds.values())



@pytest.mark.parametrize("only", ["", " , "])
def test_an_empty_only_is_a_usage_error_not_every_benchmark(only, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--smoke", "--only", only])
    assert stopped.value.code == 2
    assert "--only names no benchmark; choose from training," in capsys.readouterr().err
