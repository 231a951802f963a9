"""Configuration errors found when the hparams are loaded, before any data is read: one line that
names the key and says what to do."""
from __future__ import annotations

import pytest

from data_fixtures import REPO
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.training.run_settings import load_hparams

MLS_HPARAMS = str(REPO / "hparams" / "MiniLibriSpeech" / "conditional_ctc.yaml")


@pytest.mark.parametrize("overrides,message", [
    ("controler: random", "'controler' is not a key"),
    ("seed: 3\nseed: 9", 'duplicate key "seed"'),
    ("test_flops_fraction: 1.5", "test_flops_fraction must be a number in (0, 1)"),
    ("test_flops_fraction: 'most'", "test_flops_fraction must be a number in (0, 1)"),
    ("test_flops_fraction: 0.9\ntest_bias_shifts: [0.0, 1.0]", "leave test_bias_shifts at [0.0]"),
    ("speed_perturb: [3.0]", "speed_perturb: [3.0] is not a list"),
    ("apc_speed_perturb: [3.0]", "apc_speed_perturb: [3.0] is not a list of distinct speeds in [0.5, 2] other "
                                 "than 1.0 (1.0 is always included); e.g. --apc_speed_perturb="),
    ("controller: random\nrandom_p_big: 2.0", "p_big (hparams key 'random_p_big') must be in [0, 1]"),
    ("encoder: act\nact_max_steps: 0", "max_steps (hparams key 'act_max_steps') must be >= 1"),
    ("encoder: pondernet\npondernet_max_steps: 0", "max_steps (hparams key 'pondernet_max_steps') must be >= 1"),
    ("controller: big_only\ntest_bias_shifts: [0.0, 2.0]", "the 'big_only' controller has no bias to shift"),
    ("encoder: act\ntest_bias_shifts: [-1.0]", "the ACTEncoder has no controller whose logit a bias shift moves: leave test_bias_shifts at [0.0]"),
    ("target_unit: sentencepiece", "selection_metric: PER is not reported for sentencepiece targets"),
    ("selection_metric: WER", "selection_metric: WER is not reported for phone targets"),
    ("controller_at_test: 'no'", "controller_at_test must be True or False, got 'no'"),
    ("download: 1", "download must be True or False, got 1"),  # every boolean of the file, not a list of them
    ("batch_size: abc\nnum_workers: -1", "batch_size must be a whole number of at least 1, got 'abc'\n"
                                          "num_workers must be a whole number of at least 0, got -1"),
    # the learning-rate schedule is built while the file loads: its settings are named there
    ("lr: -1", "lr must be a positive number, got -1"),
    ("number_of_epochs: 0", "number_of_epochs must be a whole number of at least 1, got 0"),
    ("lr_hold_fraction: 2", "lr_hold_fraction must be a number in [0, 1], got 2"),
    ("max_grad_norm: -1", "max_grad_norm must be a positive number, got -1"),
    ("test_bias_shifts: 0.5", "test_bias_shifts must be a list of finite numbers (e.g. [0.0, 1.0]), got 0.5"),
    ("test_bias_shifts: [.nan]", "test_bias_shifts must be a list of finite numbers"),
    ("controller_target_mean: abc", "controller_target_mean must be a number, got 'abc'"),
    ("g2p: foo", "g2p must be one of ('flite', 'spn', 'error'), got 'foo'"),  # before the corpus is read
])
def test_bad_configuration_is_named_at_load_time(overrides, message):
    with pytest.raises(ConfigurationError) as err:
        load_hparams(MLS_HPARAMS, overrides, run_opts={"device": "cpu"})
    assert message in str(err.value)


def test_a_value_the_encoder_refuses_is_one_line_naming_the_file_once_and_the_reason():
    """The model file's and the encoder's wrapping of the error is left out: the hparams file, then the
    innermost reason with the key it names."""
    from surprisal_cc.model.controllers import CONTROLLERS
    from surprisal_cc.training.command_line import parse_arguments

    hparams_file, run_opts, overrides = parse_arguments([MLS_HPARAMS, "--controller=bogus", "--device=cpu"])
    with pytest.raises(ConfigurationError) as err:
        load_hparams(hparams_file, overrides, run_opts)
    assert str(err.value) == (f"{MLS_HPARAMS}: unknown controller 'bogus' (hparams key 'controller'); "
                              f"choose one of {sorted(CONTROLLERS)}")


@pytest.mark.parametrize("overrides", ["controller: random\ntest_bias_shifts: [0.0, 1.0]",
                                       "controller: learned\ntest_bias_shifts: [-1.0]",
                                       "controller: big_only\ntest_bias_shifts: [0.0]"])
def test_a_bias_sweep_loads_where_there_is_a_logit_to_shift(overrides):
    assert load_hparams(MLS_HPARAMS, overrides, run_opts={"device": "cpu"})["test_bias_shifts"]


def test_test_flops_fraction_loads():
    hparams = load_hparams(MLS_HPARAMS, "test_flops_fraction: 0.9", run_opts={"device": "cpu"})
    assert hparams["test_flops_fraction"] == 0.9 and hparams["test_bias_shifts"] == [0.0]


@pytest.mark.parametrize("name,overrides", [("MiniLibriSpeech/conditional_ctc.yaml", ""),
                                            ("MiniLibriSpeech/cpu_profile.yaml", ""),
                                            ("TIMIT/conditional_ctc.yaml", "data_folder: /TIMIT")])  # licensed: no default
def test_every_recipe_hparams_file_builds_with_its_defaults(name, overrides):
    hparams = load_hparams(str(REPO / "hparams" / name), overrides, run_opts={"device": "cpu"})
    assert hparams["encoder_module"] is not None


def test_a_new_key_holding_a_reference_moves_before_the_included_key_that_refers_to_it(tmp_path):
    """hyperpyyaml cannot resolve a whole-value reference to a later value that is itself a reference."""
    from surprisal_cc.config import expand_hparams, load_hparams_file

    (tmp_path / "base.yaml").write_text("root: /data\nsource: {train: null}\nepochs: 5\n")
    (tmp_path / "run.yaml").write_text("--- !include:base.yaml\nfile: !ref <root>/train.csv\n"
                                       "source: {train: !ref <file>}\nplain: 3\n")
    assert [line.split(":")[0] for line in expand_hparams(tmp_path / "run.yaml").splitlines()] == \
        ["root", "file", "source", "epochs", "plain"]
    assert load_hparams_file(tmp_path / "run.yaml")["source"] == {"train": "/data/train.csv"}


def test_a_new_plain_key_stays_after_the_included_keys_even_where_one_refers_to_it(tmp_path):
    """Only a value that is itself a reference needs to stand above its referrers (expand_hparams)."""
    from surprisal_cc.config import expand_hparams, load_hparams_file

    (tmp_path / "base.yaml").write_text("size: !ref <width>\nepochs: 5\n")
    (tmp_path / "run.yaml").write_text("--- !include:base.yaml\nwidth: 4\n")
    assert [line.split(":")[0] for line in expand_hparams(tmp_path / "run.yaml").splitlines()] == \
        ["size", "epochs", "width"]
    assert load_hparams_file(tmp_path / "run.yaml")["size"] == 4


@pytest.mark.parametrize("text,resolves", [
    ("a: !ref <b>\nb: !ref <c>/x\nc: d\n", False),           # a whole value, to a later reference
    ("a: !ref <m[x]>\nm: {x: !ref <c>}\nc: 3\n", False),      # a whole value, into a later mapping's reference
    ("a: !ref <b>/y\nb: !ref <c>\nc: d\n", True),             # a reference inside text
    ("a: !ref <b>\nb: {x: !ref <c>}\nc: 1\n", True),           # to a later mapping holding a reference
])
def test_the_forward_references_hyperpyyaml_resolves_are_those_expand_hparams_says(text, resolves):
    """What expand_hparams's docstring says of hyperpyyaml, which is why it moves new keys that hold references."""
    from hyperpyyaml import load_hyperpyyaml

    if resolves:
        load_hyperpyyaml(text)
    else:
        with pytest.raises(Exception, match="could not determine a constructor for the tag '!ref'"):
            load_hyperpyyaml(text)


@pytest.mark.parametrize("existing", [None, "run", "run/save"])
def test_a_rejected_configuration_leaves_no_folder_of_its_own(tmp_path, existing):
    """The checkpointers create their save/ folders while the file is built, before the settings are
    checked: a run refused there (parsed and loaded as the recipes do) takes back the folders it made,
    and leaves those that were there before as they were."""
    from surprisal_cc.training.command_line import parse_arguments

    exp = tmp_path / "exp"
    if existing is not None:
        (exp / existing).mkdir(parents=True)
    hparams_file, run_opts, overrides = parse_arguments([MLS_HPARAMS, f"--experiment_root={exp}",
                                                         f"--output_folder={exp / 'run'}", "--g2p=foo", "--device=cpu"])
    with pytest.raises(ConfigurationError, match="g2p must be one of"):
        load_hparams(hparams_file, overrides, run_opts)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == {None: [], "run": ["exp", "exp/run"], "run/save": ["exp", "exp/run", "exp/run/save"]}[existing]


def test_a_speechbrain_option_named_like_a_key_of_the_file_is_checked_and_recorded(tmp_path):
    """``--max_grad_norm`` is SpeechBrain's option, which its Brain prefers to the file's key: the value
    given becomes the file's too, so the settings checks see it and the saved hyperparams show it."""
    from surprisal_cc.training.command_line import parse_arguments

    common = [MLS_HPARAMS, f"--experiment_root={tmp_path}", f"--output_folder={tmp_path / 'run'}", "--device=cpu"]
    hparams_file, run_opts, overrides = parse_arguments([*common, "--max_grad_norm=-1"])
    assert run_opts["max_grad_norm"] == -1.0 and "max_grad_norm: -1.0" in overrides.splitlines()
    with pytest.raises(ConfigurationError, match="max_grad_norm"):
        load_hparams(hparams_file, overrides, run_opts)
    hparams_file, run_opts, overrides = parse_arguments([*common, "--max_grad_norm=2"])
    assert load_hparams(hparams_file, overrides, run_opts)["max_grad_norm"] == 2.0


def test_test_only_on_an_untrained_run_leaves_no_folder(tmp_path):
    """``--test_only`` needs a trained run: refused while the file loads, before the recipe writes its
    experiment folder, and the save/ folder the checkpointer made is taken back."""
    from surprisal_cc.training.command_line import parse_arguments

    hparams_file, run_opts, overrides = parse_arguments([MLS_HPARAMS, f"--experiment_root={tmp_path / 'exp'}",
                                                         f"--output_folder={tmp_path / 'exp' / 'run'}",
                                                         f"--apc_path={REPO / 'surprisal_cc' / 'pretrained' / 'apc.pt'}",
                                                         "--device=cpu", "--test_only"])
    with pytest.raises(ConfigurationError, match="--test_only: .* holds no checkpoint"):
        load_hparams(hparams_file, overrides, run_opts)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["--help"], [MLS_HPARAMS, "-h"]])
def test_recipe_help_ends_with_where_the_hparams_keys_are_and_precision_auto(argv, capsys):
    """SpeechBrain's --help lists its own options only (and --precision without auto): the last line says
    that the hparams keys are options too, where they are listed, and that auto is taken."""
    from surprisal_cc.training.command_line import parse_arguments

    with pytest.raises(SystemExit) as stop:
        parse_arguments(argv)
    out = capsys.readouterr().out
    assert stop.value.code == 0 and out.startswith("usage: ")
    last = out.rstrip("\n").splitlines()[-1]
    assert "docs/recipes.md" in last and "--precision also takes auto" in last
    assert (REPO / "docs" / "recipes.md").is_file()


def test_a_command_line_error_is_not_followed_by_the_help_line(capsys):
    from surprisal_cc.training.command_line import HELP_EPILOG, parse_arguments

    with pytest.raises(SystemExit) as stop:
        parse_arguments([MLS_HPARAMS, "--precision=fp64"])
    assert stop.value.code == 2 and HELP_EPILOG not in capsys.readouterr().out
