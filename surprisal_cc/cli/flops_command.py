"""``surprisal-cc flops HPARAMS [--key=value ...] [--json]``: a model's MACs per frame, component by
component, from its hparams file (nothing is trained or read).
"""
from __future__ import annotations

import json
from typing import List, Sequence

from surprisal_cc.errors import UsageError


def flops_table(hparams_file: str, overrides: Sequence[str] = ()) -> dict:
    """Static MACs per frame of every component of the model an hparams file describes.

    Builds the modules only: no data is read, ``!PLACEHOLDER`` values (e.g. TIMIT's
    ``data_folder``) need no override, and no checkpoint folder is created. APC is counted when
    the model needs it. A surprisal model also gets its expected cost at the mean p_big its
    calibration aims at: ``flops_budget``'s where one is set, else ``controller_target_mean``.
    """
    from surprisal_cc.model.apc import APCModel
    from surprisal_cc.model.calibration import check_calibration_target, target_mean_for_budget
    from surprisal_cc.errors import ConfigurationError
    from surprisal_cc.model.flops import expected_macs_at_mean_p_big, module_macs, static_flop_rows
    from surprisal_cc.model.nnet import runs_apc
    from surprisal_cc.training.run_settings import check_flops_budget, load_inert_hparams

    given = dict(_split_override(o) for o in overrides)
    hparams = load_inert_hparams(hparams_file, "\n".join(f"{key}: {value}" for key, value in given.items()))
    if not isinstance(hparams, dict):
        raise ConfigurationError(f"{hparams_file}: not an hparams file (a YAML mapping of settings)")
    if "encoder_module" not in hparams:  # e.g. APC pretraining: the APC model is the whole model
        if "apc_model" not in hparams:
            raise ConfigurationError(f"{hparams_file} describes no model (neither encoder_module nor apc_model)")
        return {"hparams": hparams_file, "overrides": list(overrides),
                "macs_per_frame": {"apc": module_macs(hparams["apc_model"])}}
    encoder = hparams["encoder_module"]
    apc = (hparams.get("apc_model") or APCModel()) if runs_apc(hparams["input_features"], encoder) else None
    apc_macs = module_macs(apc) if apc is not None else 0
    rows = static_flop_rows(encoder, apc_macs)
    mean = hparams.get("controller_target_mean")
    budget = hparams.get("flops_budget")
    calibrated = getattr(getattr(encoder, "controller", None), "calibrates_on_surprisal", False)
    if budget is not None:  # the calibration aims at the budget's mean p_big, not controller_target_mean
        check_flops_budget(hparams, apc)
        mean = target_mean_for_budget(budget, rows["small-only"], rows["big-only"])
        rows[f"expected at flops_budget={budget:.4g} (mean p_big={mean:.3f})"] = expected_macs_at_mean_p_big(rows, mean)
    elif "small-only" in rows and calibrated and mean is not None:  # its mean p_big is the calibration's target
        try:
            check_calibration_target(mean)
        except ValueError as err:
            raise ConfigurationError(str(err)) from None
        rows[f"expected at mean p_big={mean:g}"] = expected_macs_at_mean_p_big(rows, mean)
    return {"hparams": hparams_file, "overrides": list(overrides), "macs_per_frame": rows}


def _split_override(option: str):
    if not option.startswith("--") or "=" not in option:
        raise UsageError(f"override {option!r} must look like --key=value")
    key, value = option[2:].split("=", 1)
    return key, value


def cmd_flops(args, unknown: List[str]) -> int:
    from surprisal_cc.model.flops import format_flop_table

    table = flops_table(args.hparams, unknown)
    print(json.dumps(table, indent=2) if args.json else format_flop_table(table["macs_per_frame"]))
    return 0


def add_parser(subparsers, help: str) -> None:
    p = subparsers.add_parser("flops", help=help)
    p.add_argument("hparams")
    p.add_argument("--json", action="store_true")
