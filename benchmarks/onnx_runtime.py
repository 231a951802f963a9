"""The ONNX runtime against the PyTorch one, batch 1, one thread, ratios measured in one run.

* wall time per file, start-up included (a fresh process: ``surprisal-cc transcribe FILE`` against
  ``python -m surprisal_cc.deploy.command FILE``, the ``--backend onnx`` entry) on a 10 s and an 80 s file
  (dev-clean-2 utterances concatenated at run time into a temporary folder; no audio is written elsewhere),
  with the other core idle and with it busy (a spinning process of this benchmark's own);
* the peak resident memory of each process;
* routed against big-only inside onnxruntime (the graphs alone, no decoding; big-only is the shipped model
  with its controller's logit shifted by +1000, so that every frame takes the big network) against the
  ratio of their FLOPs per frame counted from what ran: the whole model, and the per-frame networks alone
  (small and big on their frames against big on every frame; the GRUs of APC, pre-net and post-net, which
  run on every frame either way, take most of the time);
* the installed size of a torch-free environment (``--onnx-python``: a venv with ``pip install
  surprisal_cc[onnx]``) against the full one (this interpreter's).

    python -m benchmarks.onnx_runtime [--data ../shared/data] [--onnx-python /work/onnx-venv/bin/python]
        [--repeats 3] [--out docs/results/benchmarks/onnx_runtime.json]

The machine these figures come from may be shared with other work: the JSON records the load average
before and after, and the table says so.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
# runs a module as ``python -m`` would and prints its peak resident memory (KiB) on stderr's last line: the
# high-water mark of its own address space (VmHWM; getrusage's maxrss would carry the parent's over exec)
MEASURED = ("import runpy, sys\nmodule = sys.argv[1]\nsys.argv = [module, *sys.argv[2:]]\n"
            "try:\n    runpy.run_module(module, run_name='__main__', alter_sys=True)\nexcept SystemExit as end:\n"
            "    status = end.code\nelse:\n    status = 0\n"
            "peak = [line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]\n"
            "print('maxrss_kib', peak, file=sys.stderr)\n"
            "sys.exit(status)")


def concatenate(data: Path, seconds: float, out: Path) -> float:
    """Write the first dev-clean-2 utterances (sorted by name) up to ``seconds`` to ``out``; its length in s."""
    pieces, total = [], 0
    for path in sorted((data / "LibriSpeech" / "dev-clean-2").rglob("*.flac")):
        wav, rate = sf.read(path, dtype="float32")
        pieces.append(wav)
        total += len(wav)
        if total >= seconds * rate:
            break
    wav = np.concatenate(pieces)[:int(seconds * 16000)]
    sf.write(out, wav, 16000)
    return len(wav) / 16000


def run_file(python: str, module: str, args: List[str]) -> Dict[str, float]:
    """Wall seconds and peak memory (MiB) of ``python -m module args`` in a fresh, niced, one-thread process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    proc = subprocess.run(["nice", "-n", "10", python, "-c", MEASURED, module, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=900)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed: {proc.stderr[-2000:]}")
    kib = int(proc.stderr.strip().splitlines()[-1].split()[1])
    return {"wall_s": wall, "peak_mib": kib / 1024}


def spinner() -> subprocess.Popen:
    """A process that keeps one core busy (the benchmark's own; stopped by its pid)."""
    return subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])


def per_file(model: Path, files: Dict[str, Path], onnx_python: str, repeats: int) -> Dict[str, Any]:
    """Median wall time and peak memory per file, runtime and condition (interleaved repeats)."""
    runs: Dict[str, Dict[str, List[Dict[str, float]]]] = {}
    for condition in ("idle", "other core busy"):
        busy = spinner() if condition != "idle" else None
        try:
            for _ in range(repeats):
                for name, path in files.items():
                    for runtime, python, module, extra in (
                            ("pytorch", sys.executable, "surprisal_cc.cli", ["transcribe"]),
                            ("onnx", onnx_python, "surprisal_cc.deploy.command", [])):
                        key = f"{name}, {condition}"
                        runs.setdefault(key, {}).setdefault(runtime, []).append(
                            run_file(python, module, [*extra, str(path), "--model", str(model), "--threads", "1"]))
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    table = {}
    for key, by_runtime in runs.items():
        row = {runtime: {"wall_s": statistics.median(r["wall_s"] for r in values),
                         "peak_mib": max(r["peak_mib"] for r in values)} for runtime, values in by_runtime.items()}
        row["wall_ratio_pytorch_over_onnx"] = row["pytorch"]["wall_s"] / row["onnx"]["wall_s"]
        row["memory_ratio_pytorch_over_onnx"] = row["pytorch"]["peak_mib"] / row["onnx"]["peak_mib"]
        table[key] = row
    return table


def routed_vs_big_only(model: Path, path: Path, repeats: int) -> Dict[str, Any]:
    """The graphs' time (no decoding) routed and big-only in onnxruntime, against their FLOPs ratio."""
    from surprisal_cc.deploy.audio import read_audio
    from surprisal_cc.deploy.frontend import fbank_numpy
    from surprisal_cc.deploy.runtime import OnnxASR

    routed, big = OnnxASR.from_folder(model, threads=1), OnnxASR.from_folder(model, threads=1)
    big.set_bias_shift(1000.0)
    wav = read_audio(path, 16000, 400)
    times: Dict[str, List[float]] = {"routed": [], "big_only": []}
    flops = {}
    for _ in range(repeats + 1):  # the first round warms up
        for name, asr in (("routed", routed), ("big_only", big)):
            started = time.perf_counter()
            out = asr.forward(wav)
            times[name].append(time.perf_counter() - started)
            flops[name] = {k: float(v.sum()) for k, v in out.frame_macs.items()}
            flops[name]["apc"] = float(asr.macs.get("apc", 0)) * out.log_probs.shape[0]
            flops[name]["big_fraction"] = float(out.use_big.mean())
            flops[name]["frames"] = out.log_probs.shape[0]
    # the per-frame networks alone, on the pre-net states: the big one on its frames and the small one on the
    # others, against the big one on every frame
    features = routed.graphs["apc"](fbank=fbank_numpy(wav, routed.features)[None],
                                    lengths=np.array([flops["routed"]["frames"]]))[0]
    x = routed.graphs["pre_net"](x=features, lengths=np.array([features.shape[1]]))[0][0]
    use_big = routed.forward(wav).use_big
    big_rows, small_rows = np.flatnonzero(use_big), np.flatnonzero(~use_big)
    for _ in range(3 * repeats + 1):
        started = time.perf_counter()
        routed.graphs["big_net"](x=x[big_rows])
        routed.graphs["small_net"](x=x[small_rows])
        times.setdefault("frame_nets_routed", []).append(time.perf_counter() - started)
        started = time.perf_counter()
        routed.graphs["big_net"](x=x)
        times.setdefault("frame_nets_big_only", []).append(time.perf_counter() - started)
    macs = routed.macs
    nets_ratio = (len(big_rows) * macs["big_net"] + len(small_rows) * macs["small_net"]) / (len(use_big) * macs["big_net"])
    median = {name: statistics.median(values[1:]) for name, values in times.items()}
    total = {name: sum(v for k, v in f.items() if k not in ("big_fraction", "frames")) for name, f in flops.items()}
    encoder = {name: sum(v for k, v in f.items() if k not in ("big_fraction", "frames", "apc")) for name, f in flops.items()}
    return {"audio_s": len(wav) / 16000, "seconds": median,
            "big_fraction": {name: f["big_fraction"] for name, f in flops.items()},
            "time_ratio_routed_over_big_only": median["routed"] / median["big_only"],
            "flops_ratio_routed_over_big_only": total["routed"] / total["big_only"],
            "encoder_flops_ratio_routed_over_big_only": encoder["routed"] / encoder["big_only"],
            "frame_nets_time_ratio_routed_over_big_only": median["frame_nets_routed"] / median["frame_nets_big_only"],
            "frame_nets_flops_ratio_routed_over_big_only": nets_ratio}


def installed_mib(python: str) -> float:
    """MiB of the files under the environment of ``python`` (its ``sys.prefix``)."""
    prefix = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                            check=True).stdout.strip()
    total = 0
    for root, _, names in os.walk(prefix):
        for name in names:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total / 2 ** 20


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--model", help="a model folder (default: the shipped one, its graphs exported to a temporary copy)")
    parser.add_argument("--onnx-python", default=sys.executable,
                        help="the interpreter of a torch-free environment (pip install surprisal_cc[onnx])")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    from surprisal_cc.deploy.export import export_onnx
    from surprisal_cc.model.model_folder import default_model_dir

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        model = export_onnx(args.model or default_model_dir(), Path(tmp) / "model")
        files = {f"{s} s file": Path(tmp) / f"{s}s.flac" for s in (10, 80)}
        for name, path in files.items():
            concatenate(Path(args.data), float(name.split()[0]), path)
        result: Dict[str, Any] = {"per_file": per_file(model, files, args.onnx_python, args.repeats),
                                  "routed_vs_big_only": routed_vs_big_only(model, files["80 s file"], args.repeats)}
    result["installed_mib"] = {"full (this interpreter's venv)": installed_mib(sys.executable),
                               "torch-free (--onnx-python)": installed_mib(args.onnx_python)}
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    result["command"] = "python -m benchmarks.onnx_runtime " + " ".join(argv if argv is not None else sys.argv[1:])
    result["note"] = ("one thread, batch 1, processes niced; the machine (2 cores) was shared with a training run and "
                      "other work while this ran: absolute times are inflated, ratios come from interleaved runs")
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    for key, row in result["per_file"].items():
        print(f"| {key} | {row['pytorch']['wall_s']:.2f} s | {row['onnx']['wall_s']:.2f} s | "
              f"{row['wall_ratio_pytorch_over_onnx']:.2f} | {row['pytorch']['peak_mib']:.0f} MiB | "
              f"{row['onnx']['peak_mib']:.0f} MiB |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
