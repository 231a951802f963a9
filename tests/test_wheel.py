"""The package on its own: its wheel, installed into an empty folder, transcribes real speech from
another folder with the shipped model and with a model folder of its own, and loads no experiment tool."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from data_fixtures import REPO, require_dev_clean_2

pytestmark = pytest.mark.integration

# what the wheel is built from: a copy, so that it cannot reach anything else of the checkout
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "surprisal_cc")
EXPERIMENT_TOOLS = ("surprisal_cc.experiments.grid", "surprisal_cc.experiments.grid_spec", "surprisal_cc.experiments.run_locks", "surprisal_cc.experiments.report",
                    "surprisal_cc.experiments.plots", "surprisal_cc.experiments.analysis", "surprisal_cc.training.brain")
# transcribe, then list the package's modules that ran (the console script's body plus that list)
LIST_MODULES = ("import json, sys\nfrom surprisal_cc.cli.commands import main\nstatus = main(sys.argv[1:])\n"
                "print(json.dumps(sorted(m for m in sys.modules if m.startswith('surprisal_cc'))), file=sys.stderr)\n"
                "sys.exit(status)")


def _offline_backend() -> bool:
    """Whether this environment's setuptools builds wheels itself (so pip needs no package index)."""
    try:
        major = int(metadata.version("setuptools").split(".")[0])
    except metadata.PackageNotFoundError:
        return False
    return major >= 77  # pyproject.toml's SPDX license string needs setuptools 77


def _run(command, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, command))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder that holds the installed wheel and nothing else."""
    root = tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / "source" / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (root / "source").mkdir(exist_ok=True)
            shutil.copy2(source, root / "source" / name)
    isolation = ["--no-build-isolation"] if _offline_backend() else []
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", *isolation, "--wheel-dir", root / "dist",
          root / "source"])
    wheels = sorted((root / "dist").glob("surprisal_cc-*.whl"))
    assert len(wheels) == 1, wheels
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", root / "site", wheels[0]])
    return root / "site"


def test_the_wheel_carries_the_model_graphs_and_the_shipped_model(site):
    package = site / "surprisal_cc"
    graphs = REPO / "surprisal_cc" / "model" / "graphs"
    assert sorted(p.relative_to(package / "model" / "graphs").as_posix()
                  for p in (package / "model" / "graphs").rglob("*.yaml")) == \
        sorted(p.relative_to(graphs).as_posix() for p in graphs.rglob("*.yaml")) != []
    for name in ("model.json", "encoder.pt", "apc.pt", "README.md"):
        assert (package / "pretrained" / name).read_bytes() == (REPO / "surprisal_cc" / "pretrained" / name).read_bytes()


def test_the_installed_wheel_transcribes_from_another_folder(site, tmp_path):
    flac = sorted((require_dev_clean_2() / "LibriSpeech" / "dev-clean-2").rglob("*.flac"))[0]
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    default = json.loads(_run([site / "bin" / "surprisal-cc", "transcribe", flac, "--json", "--deterministic"],
                              cwd=tmp_path, env=env).stdout)
    assert default["model"] == str(site / "surprisal_cc" / "pretrained")  # the installed package's model
    phones = default["phones"]  # one JSON line per file
    assert len(phones) > 10 and set(phones) - {"sil"}

    model = tmp_path / "my_model"  # a model folder outside the package
    shutil.copytree(site / "surprisal_cc" / "pretrained", model)
    proc = _run([sys.executable, "-c", LIST_MODULES, "transcribe", flac, "--json", "--deterministic",
                 "--model", model], cwd=tmp_path, env=env)
    own = json.loads(proc.stdout)
    assert own["model"] == str(model) and own["phones"] == phones
    loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    assert "surprisal_cc.inference.asr" in loaded and not set(EXPERIMENT_TOOLS) & set(loaded), loaded
    print(f"wheel transcribed {flac.name} with {default['model']} and {model}: {len(phones)} phones; "
          f"{len(loaded)} surprisal_cc modules loaded: {' '.join(loaded)}")


def test_the_wheel_needs_torch_only_with_its_torch_extra(site):
    """The wheel's metadata: torch, torchaudio and SpeechBrain under the ``torch`` extra, onnxruntime under
    ``onnx``, neither in the base requirements (``pip install surprisal_cc[onnx]`` installs no torch)."""
    from email.parser import Parser

    info = next(site.glob("surprisal_cc-*.dist-info"))
    requires = Parser().parsestr((info / "METADATA").read_text(encoding="utf-8")).get_all("Requires-Dist")
    base = [r for r in requires if "extra ==" not in r]
    assert not [r for r in base if r.split()[0].split(">")[0].split("=")[0].lower() in ("torch", "torchaudio",
                                                                                         "speechbrain")]
    assert any(r.startswith("torch") and 'extra == "torch"' in r for r in requires)
    assert any(r.startswith("onnxruntime") and 'extra == "onnx"' in r for r in requires)
