"""Tests for surprisal_cc.experiments.plots: every figure is written as a small PNG."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from surprisal_cc.experiments import plots
from surprisal_cc.training import run_folder
from test_report import fake_results_tree

PNG = b"\x89PNG"


def _is_small_png(path: Path) -> bool:
    return path.exists() and path.read_bytes()[:4] == PNG and path.stat().st_size < 150_000


def test_make_all_plots_writes_every_figure(tmp_path: Path) -> None:
    root = fake_results_tree(tmp_path / "grid")
    rng = np.random.default_rng(0)
    np.savez(root / "controllers/surprisal/seed1/routing_utt1.npz", fbank=rng.random((50, 80)),
             surprisal=rng.random(50), use_big=rng.random(50) > 0.5, sil_mask=np.arange(50) < 10)
    paths = plots.make_all_plots(root, tmp_path / "report")
    names = {p.name for p in paths}
    assert {"MiniLibriSpeech_per_vs_flops.png", "MiniLibriSpeech_validation_curves.png",
            "MiniLibriSpeech_bias_sweep.png", "MiniLibriSpeech_lambda_sweep.png", "MiniLibriSpeech_converged_per_vs_flops.png",
            "controllers_surprisal_seed1_routing_utt1.png"} <= names
    assert all(_is_small_png(p) for p in paths)


def test_individual_plots(tmp_path: Path) -> None:
    root = fake_results_tree(tmp_path / "grid")
    rows = run_folder.collect_results(root)
    assert _is_small_png(plots.plot_per_vs_flops(rows, tmp_path / "a.png"))
    run_dirs = sorted(root.glob("controllers/*/seed*"))
    assert _is_small_png(plots.plot_validation_curves(run_dirs, tmp_path / "b.png"))
    assert _is_small_png(plots.plot_bias_sweep(rows, tmp_path / "c.png"))
    assert _is_small_png(plots.plot_lambda_sweep(rows, tmp_path / "d.png"))


def test_plot_routing_with_and_without_routing(tmp_path: Path) -> None:
    fbank, surprisal = torch.randn(40, 80), torch.rand(40)
    use_big = surprisal > 0.5
    assert _is_small_png(plots.plot_routing(fbank, surprisal, use_big, tmp_path / "r.png", title="utt",
                                            sil_mask=torch.arange(40) > 30))
    assert _is_small_png(plots.plot_routing(fbank.numpy(), surprisal.numpy(), None, tmp_path / "apc.png"))


def test_a_bias_sweep_draws_a_line_per_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweeps of two controllers in one setup are two lines, each named by its controller."""
    drawn = []
    monkeypatch.setattr(plots, "_errorbar", lambda ax, rows, x, label=None: drawn.append(
        (label, [r[x] for r in rows])) or "C0")
    rows = [{"controller": c, "seed": 1, "PER": 20.0 - s, "test_bias_shift": s} for c in ("surprisal", "random")
            for s in (-1.0, 0.0, 1.0)] + [{"controller": "big_only", "seed": 1, "PER": 19.0}]
    plots.plot_bias_sweep(rows, tmp_path / "sweep.png")
    assert sorted(drawn) == [("random controller", [-1.0, 0.0, 1.0]), ("surprisal-based controller", [-1.0, 0.0, 1.0])]


def test_the_profile_plot_draws_surprisal_operating_points_as_a_line(tmp_path: Path, monkeypatch) -> None:
    """The reference profile's PER-FLOPs figure: every configuration a point, and the surprisal model's
    operating points (trained point, bias shifts) one line in order of FLOPs."""
    lines = []
    real_plot = plots.plt.Axes.plot
    monkeypatch.setattr(plots.plt.Axes, "plot", lambda ax, x, y, *a, **k: lines.append((list(x), list(y), k.get("label")))
                        or real_plot(ax, x, y, *a, **k))
    rows = [{"controller": c, "seed": 1, "PER": per, "flops_per_frame": f, "test_bias_shift": b, "number_of_epochs": 30}
            for c, per, f, b in (("big_only", 29.0, 7.5e6, None), ("surprisal", 29.5, 6.9e6, None),
                                 ("surprisal", 30.5, 6.4e6, -1.0), ("surprisal", 29.2, 7.2e6, 1.0),
                                 ("random", 30.0, 6.6e6, None))]
    with tempfile.TemporaryDirectory() as folder:
        for i, row in enumerate(rows):
            (Path(folder) / f"r{i}").mkdir()
            (Path(folder) / f"r{i}" / "results.json").write_text(json.dumps(row))
        names = [p.name for p in plots.make_all_plots(folder, tmp_path)]
    assert "converged_per_vs_flops.png" in names
    sweep = [line for line in lines if line[2] == "surprisal at its bias shifts and test budgets"]
    assert sweep == [([6.4, 6.9, 7.2], [30.5, 29.5, 29.2], "surprisal at its bias shifts and test budgets")]
