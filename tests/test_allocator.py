"""surprisal_cc.training.allocator.reuse_freed_memory: glibc keeps freed memory, so a second step faults in no new pages."""
from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from surprisal_cc.training import allocator
from surprisal_cc.training import run_settings

GLIBC = platform.libc_ver()[0] == "glibc"

# allocate, touch and free blocks of 64, 60, 56 MiB in turn (each smaller block fits in the freed
# one, whatever glibc's alignment padding); minor page faults of each
PROBE = """
import json, resource, sys
import torch
from surprisal_cc.training.allocator import reuse_freed_memory
applied = reuse_freed_memory() if sys.argv[1] == "reuse" else None
faults = []
for mib in (64, 60, 56):  # above glibc's largest mmap threshold (32 MiB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.empty(mib * 1024 * 256)
    block.fill_(1.0)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": faults}))
"""


def probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_freed_blocks_are_reused_without_new_page_faults() -> None:
    result = probe("reuse")
    assert result["applied"] is True
    first, *later = result["faults"]
    assert first > 0 and all(n * 10 < first for n in later), result  # later blocks land on pages already mapped


def test_reuse_freed_memory_reports_whether_it_applied() -> None:
    assert allocator.reuse_freed_memory() is GLIBC


def test_recipe_hparams_turn_it_on(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    calls = []
    monkeypatch.setattr(run_settings, "reuse_freed_memory", lambda: calls.append(1) or True)
    hparams_file = tmp_path / "h.yaml"
    hparams_file.write_text("malloc_reuse: True\nprecision: fp32\n")
    run_settings.load_hparams(str(hparams_file))  # not a recipe run (no run_opts): the process is left alone
    assert calls == []
    run_settings.load_hparams(str(hparams_file), "", run_opts={"device": "cpu"})
    assert calls == [1]
    run_settings.load_hparams(str(hparams_file), "malloc_reuse: False", run_opts={"device": "cpu"})
    assert calls == [1]
