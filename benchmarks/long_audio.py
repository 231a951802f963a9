"""Long files decoded in parts against the whole file at once: peak memory, wall time, phones.

Concatenates dev-clean-2 utterances (sorted by name) into one 16 kHz file of MINUTES minutes in a
temporary folder, decodes it with the shipped model (or ``--model``) whole (``long_chunk_s=0``) and
in parts (the default of ``ConditionalASR.transcribe_file``), each in its own process so that its
peak resident memory is its own, and prints both with the edit distance between their phones and
the fraction of frames routed alike, as JSON.

    python -m benchmarks.long_audio 10 [--data ../shared/data] [--parts-only] [--model DIR] [--threads N]

``--parts-only`` skips the whole-file decoding (at 30 minutes and more it needs several GB).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from surprisal_cc.checks import positive_int

WORKER = """
import json, sys, time
from surprisal_cc.inference import ConditionalASR
path, chunk, out, model, threads = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4] or None, int(sys.argv[5])
asr = ConditionalASR.from_pretrained(model, threads=threads)
t0 = time.time()
r = asr.transcribe_file(path, long_chunk_s=None if chunk < 0 else chunk)
json.dump({"phones": r.phones, "use_big": [bool(b) for b in r.use_big], "wall_s": time.time() - t0,
           "flops_per_frame": r.flops_per_frame}, open(out, "w"))
"""


def concatenate(data: Path, minutes: float, out: Path) -> float:
    """Write ``minutes`` of dev-clean-2 to ``out``; returns its length in seconds."""
    need, parts, total = int(minutes * 60 * 16000), [], 0
    for flac in sorted((data / "LibriSpeech" / "dev-clean-2").rglob("*.flac")):
        audio, _ = sf.read(str(flac), dtype="float32")
        parts.append(audio)
        total += audio.size
        if total >= need:
            break
    audio = np.concatenate(parts)[:need]
    sf.write(str(out), audio, 16000)
    return audio.size / 16000


def decode(path: Path, chunk: float, out: Path, model: str, threads: int = 1) -> dict:
    """One decoding in a child process on ``threads`` torch threads; adds its peak resident memory in GB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run([sys.executable, "-c", WORKER, str(path), str(chunk), str(out), model or "", str(threads)],
                   check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])})
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux, the largest child so far
    result = json.loads(out.read_text())
    result["peak_gb"] = peak * 1024 / 1e9 if peak > before else None  # None: not above an earlier child's
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("minutes", type=float)
    parser.add_argument("--data", default="../shared/data", help="folder holding LibriSpeech/dev-clean-2")
    parser.add_argument("--model", default=None)
    parser.add_argument("--parts-only", action="store_true")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads of each decoding (default 1)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        audio = Path(tmp) / "long.flac"
        seconds = concatenate(Path(args.data), args.minutes, audio)
        # parts first: a child's peak can only be told apart from the earlier ones when it is larger
        parts = decode(audio, -1, Path(tmp) / "parts.json", args.model, args.threads)
        stats = {"audio_s": seconds, "threads": args.threads,
                 "parts": {k: parts[k] for k in ("wall_s", "peak_gb", "flops_per_frame")},
                 "phones": len(parts["phones"])}
        if not args.parts_only:
            from speechbrain.utils.edit_distance import wer_details_for_batch

            whole = decode(audio, 0, Path(tmp) / "whole.json", args.model, args.threads)
            d = wer_details_for_batch(["x"], [whole["phones"]], [parts["phones"]])[0]
            stats["whole"] = {k: whole[k] for k in ("wall_s", "peak_gb", "flops_per_frame")}
            stats["phones_differing"] = {"S": d["substitutions"], "D": d["deletions"], "I": d["insertions"],
                                         "of": len(whole["phones"])}
            stats["routing_agreement"] = float(np.mean([a == b for a, b in zip(whole["use_big"], parts["use_big"])]))
    print(json.dumps(stats))
    return stats


if __name__ == "__main__":
    main()
