"""Mixed precision: the precision setting, and routed execution under bf16 autocast."""
from __future__ import annotations

import pytest
import torch
from speechbrain.utils.run_opts import RunOptions

from surprisal_cc.model.architectures import build_encoder, encoder_names
from surprisal_cc.model.controllers import CONTROLLERS, Controller
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.training.precision import resolve_precision


def test_an_explicit_precision_is_taken_as_it_is():
    """fp32 and bf16 are not measured (``auto``'s rule: the test below, with the CPU mocked)."""
    assert resolve_precision("fp32", RunOptions()) == "fp32"
    assert resolve_precision("bf16", RunOptions()) == "bf16"


@pytest.mark.parametrize("native, expected", [(False, "fp32"), (True, "bf16")])
def test_auto_precision_is_a_fixed_rule_of_native_bf16(monkeypatch, native, expected):
    """``auto`` follows the CPU's instruction sets, never a timing: the same command trains with the same
    arithmetic whatever the machine's load (nothing is timed: a timer that ran would fail this test)."""
    import time

    from surprisal_cc import runtime as precision

    def no_timing():
        raise AssertionError("precision auto timed something")

    monkeypatch.setattr(precision, "native_bf16", lambda device="cpu": native)
    monkeypatch.setattr(time, "perf_counter", no_timing)
    assert resolve_precision("auto", RunOptions()) == expected


def test_hparams_files_train_in_fp32_unless_asked():
    """fp32 is every recipe's default (APC pretraining, TIMIT and the paper's schedule read common/apc.yaml)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "hparams"
    for path in [root / "common" / "apc.yaml", root / "MiniLibriSpeech" / "cpu_profile.yaml"]:
        assert "\nprecision: fp32 " in "\n" + path.read_text(), path


def _rank_resolves_auto(rank: int, store: str, natives, chosen: str) -> None:
    """One DDP rank (gloo) whose own CPU has native bf16 or not (``natives[rank]``); writes what it resolved."""
    import torch.distributed as dist

    from surprisal_cc import runtime as precision

    precision.native_bf16 = lambda device="cpu": natives[rank]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=len(natives))
    try:
        resolved = resolve_precision("auto", RunOptions())
    finally:
        dist.destroy_process_group()
    with open(f"{chosen}.{rank}", "w") as out:
        out.write(resolved)


@pytest.mark.parametrize("natives, expected", [((True, False), "bf16"), ((False, True), "fp32")])
def test_ddp_ranks_take_the_main_processs_precision(tmp_path, natives, expected):
    """Ranks on machines of other kinds may differ in native bf16; every rank trains in the main process's choice."""
    import torch.multiprocessing as mp

    chosen = tmp_path / "chosen"
    mp.spawn(_rank_resolves_auto, args=(str(tmp_path / "store"), natives, str(chosen)), nprocs=len(natives))
    assert [(tmp_path / f"chosen.{rank}").read_text() for rank in range(len(natives))] == [expected] * len(natives)


def test_auto_precision_is_fp32_on_cuda():
    """GPUs train these small networks faster in fp32 (launch-bound step); no GPU is needed to check the rule."""
    _, run_opts, _ = RunOptions.from_command_line_args(["x.yaml", "--device=cuda:0"])
    assert resolve_precision("auto", run_opts) == "fp32"
    assert resolve_precision("bf16", run_opts) == "bf16"


def test_command_line_precision_wins_over_the_yaml_key():
    _, run_opts, _ = RunOptions.from_command_line_args(["x.yaml", "--precision=fp32"])
    assert resolve_precision("bf16", run_opts) == "fp32"


def test_unknown_precision_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="precision must be one of"):
        resolve_precision("fp8", RunOptions())


class LinearController(Controller):
    """A new controller with a layer of its own (docs/extending.md): bf16 under autocast unless cast."""
    name = "linear"

    def __init__(self, input_size: int = 16):
        super().__init__()
        self.layer = torch.nn.Linear(input_size, 1)

    def probability(self, features, surprisal, bias_shift=0.0, mask=None):
        return torch.sigmoid(self.layer(features).squeeze(-1) + bias_shift)


@pytest.fixture(params=sorted(CONTROLLERS) + ["linear"])
def controller(request, monkeypatch):
    monkeypatch.setitem(CONTROLLERS, "linear", LinearController)
    return request.param


def test_routed_encoder_runs_under_bf16_autocast(controller):
    torch.manual_seed(0)
    enc = build_encoder("conditional", input_size=16, num_outputs=5, controller=controller)
    x, lengths = torch.randn(3, 7, 16), torch.tensor([7, 4, 1])
    surprisal = torch.rand(3, 7) * 4 if controller == "surprisal" else None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = enc(x, lengths, surprisal)
        loss = out.log_probs.float().sum() + out.aux_loss
    loss.backward()
    assert torch.isfinite(out.log_probs.float()).all()
    assert out.stats["p_big"].dtype == torch.float32 and out.aux_loss.dtype == torch.float32  # the statistics contract
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in enc.parameters())
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in enc.parameters())  # it reached them


@pytest.mark.parametrize("name", [n for n in encoder_names() if n != "conditional"])
@pytest.mark.parametrize("training", [True, False])
def test_adaptive_encoders_run_under_bf16_autocast(name, training):
    torch.manual_seed(0)
    enc = build_encoder(name, input_size=16, num_outputs=5, hidden_size=8).train(training)
    x, lengths = torch.randn(3, 7, 16), torch.tensor([7, 4, 1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = enc(x, lengths)
        loss = out.log_probs.float().sum() + out.aux_loss.float()
    if training:
        loss.backward()
    assert torch.isfinite(out.log_probs.float()).all()
    assert all(value.dtype in (torch.float32, torch.bool) for value in out.stats.values())  # statistics in full precision


def test_precision_auto_on_the_command_line_is_the_yaml_key():
    """SpeechBrain's --precision flag takes fp32/fp16/bf16 only; auto (either spelling) becomes the
    override precision: auto, and the other values stay SpeechBrain's run option."""
    from surprisal_cc.training.command_line import parse_arguments

    for argv in (["run.yaml", "--precision=auto"], ["run.yaml", "--precision", "AUTO", "--lr=0.1"]):
        _, run_opts, overrides = parse_arguments(argv)
        assert "precision: auto" in overrides.splitlines() and "precision" not in run_opts.get("overridden_args", ())
    _, run_opts, overrides = parse_arguments(["run.yaml", "--precision=bf16"])
    assert run_opts["precision"] == "bf16" and "precision" not in overrides
    for twice in (["run.yaml", "--precision=bf16", "--precision=auto"], ["run.yaml", "--precision=auto", "--precision=fp32"]):
        with pytest.raises(ConfigurationError, match=r"--precision given twice \(auto and (bf16|fp32)\): give it once"):
            parse_arguments(twice)


@pytest.mark.parametrize("avx512_bf16, amx, expected", [(False, False, False), (True, False, True), (False, True, True)])
def test_native_bf16_asks_for_the_instruction_sets_not_onednns_avx512_check(monkeypatch, avx512_bf16, amx, expected):
    """oneDNN calls bf16 supported on any AVX-512 CPU (emulated there, slowly): only AVX-512-BF16 or AMX count."""
    from surprisal_cc import runtime as precision

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(precision.platform, "machine", lambda: "x86_64")
    assert precision.native_bf16("cpu") is expected
    monkeypatch.setattr(precision.platform, "machine", lambda: "aarch64")  # no x86 instruction sets: oneDNN's check
    assert precision.native_bf16("cpu") is True


def test_a_resumed_run_keeps_the_precision_auto_chose_when_it_started(tmp_path, monkeypatch):
    """``auto`` is chosen once per run: create_experiment_directory records the choice and a run resumed
    in that folder takes it (a run started when ``auto`` was timed, or on another machine kind, keeps it)."""
    from surprisal_cc import runtime as precision
    from surprisal_cc.training.run_settings import create_experiment_directory
    from surprisal_cc.training.precision import PRECISION_RECORD

    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("precision: auto\nlr: 0.1\n")
    run = tmp_path / "run"
    create_experiment_directory(str(run), str(yaml_file), hparams={"precision": "bf16"})
    assert (run / PRECISION_RECORD).is_file()

    monkeypatch.setattr(precision, "native_bf16", lambda device="cpu": False)  # the rule would say fp32
    assert resolve_precision("auto", RunOptions(), str(run)) == "bf16"
    create_experiment_directory(str(run), str(yaml_file), hparams={"precision": "fp32"})  # resumed: kept
    assert resolve_precision("auto", RunOptions(), str(run)) == "bf16"
    assert resolve_precision("fp32", RunOptions(), str(run)) == "fp32"  # an explicit key is taken as it is

    (run / PRECISION_RECORD).write_text("{not json")  # unreadable: the rule, as for a new run
    assert resolve_precision("auto", RunOptions(), str(run)) == "fp32"


@pytest.mark.parametrize("yaml_precision, test_only", [("fp32", False), ("auto", True)])
def test_only_a_training_run_with_precision_auto_records_its_choice(tmp_path, yaml_precision, test_only):
    from surprisal_cc.training.run_settings import create_experiment_directory
    from surprisal_cc.training.precision import PRECISION_RECORD

    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text(f"precision: {yaml_precision}\n")
    create_experiment_directory(str(tmp_path / "run"), str(yaml_file), test_only=test_only,
                                hparams={"precision": "fp32"})
    assert not (tmp_path / "run" / PRECISION_RECORD).exists()


def test_apc_pretraining_reads_its_precision_record_from_its_own_folder(tmp_path, monkeypatch):
    """APC pretraining's run folder is apc_output_folder (it has no output_folder)."""
    from surprisal_cc import runtime as precision
    from surprisal_cc.training.run_settings import load_hparams
    from surprisal_cc.training.precision import PRECISION_RECORD

    from data_fixtures import REPO

    folder = tmp_path / "apc"
    folder.mkdir()
    (folder / PRECISION_RECORD).write_text('{"precision": "bf16"}\n')
    monkeypatch.setattr(precision, "native_bf16", lambda device="cpu": False)  # the rule would say fp32
    overrides = f"data_folder: {tmp_path}\nexperiment_root: {tmp_path}\napc_output_folder: {folder}\nprecision: auto"
    hparams = load_hparams(str(REPO / "hparams" / "LibriSpeech" / "apc.yaml"), overrides, run_opts={"device": "cpu"})
    assert hparams["precision"] == "bf16"
