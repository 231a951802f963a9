"""SpeechBrain ``Brain`` shared by the TIMIT and Mini-LibriSpeech recipes (its base, shared with APC
pretraining: :mod:`surprisal_cc.training.base_brain`).

:class:`ConditionalCTCBrain` trains any :class:`~surprisal_cc.model.nnet.Encoder` with CTC on
frozen APC features (or raw filterbanks), calibrates a surprisal controller before training,
selects checkpoints by the validation error rate (``selection_metric``: PER, TER with sentencepiece
targets), decodes the test set with CTC beam search and writes a
results file: error rates, MACs per frame counted from what ran, routing statistics.
"""
from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import speechbrain as sb
import torch
from speechbrain.utils.distributed import if_main_process, main_process_only
from torch import Tensor

from surprisal_cc.model.apc import APCModel, FrozenAPC
from surprisal_cc.training.augment import activate_in_training
from surprisal_cc.training.base_brain import FiniteLossBrain, RNGState
from surprisal_cc.model.calibration import budget_big_fraction, calibrate_surprisal_controller, solve_budget, target_mean_for_budget
from surprisal_cc.model.controllers import build_controller
from surprisal_cc.model.ctc import utterance_mean_ctc_loss
from surprisal_cc.data.manifest import atomic_write_text
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.flops import MacMeter, RoutingStats, count_batch, module_macs, static_flop_rows
from surprisal_cc.model.forward import CachedInputs, ForwardStep, run_model
from surprisal_cc.decoding.metrics import closest_path
from surprisal_cc.model.nnet import absolute_lengths, lengths_to_mask, unwrap, weights_fingerprint
from surprisal_cc.training.label_record import check_training_labels
from surprisal_cc.training.run_checks import check_test_controller
from surprisal_cc.training.run_folder import evaluation_tag, results_file_name, train_labels_name, train_targets_name
from surprisal_cc.training.schedulers import anneal
from surprisal_cc.runtime import DEFAULT_DECODING_THREADS, decoding_threads

logger = logging.getLogger(__name__)


class ConditionalCTCBrain(FiniteLossBrain):
    """CTC training of a conditional (or adaptive-depth) encoder.

    Arguments
    ---------
    modules : dict
        ``encoder``: an :class:`~surprisal_cc.model.nnet.Encoder`.
    apc : APCModel, optional
        The pretrained APC model, when the inputs are APC features or the controller needs
        surprisal: charged in the MACs per frame, and run (frozen, as ``modules.apc``) on batches
        that come without cached features.
    manifests : dict, optional
        Split name -> manifest file, recorded in the results.
    opt_class, hparams, run_opts, checkpointer
        As for ``speechbrain.Brain``. Hparams used: ``front_end``, ``input_features`` ("apc" |
        "fbank"), ``label_encoder``, ``blank_index``, ``beam_searcher``, ``greedy_searcher``,
        ``valid_search`` ("greedy" | "beam"), ``error_rate`` (a callable returning a fresh
        ErrorRate), ``results_file`` and the controller calibration keys; :meth:`write_results`
        reads more, to record the run (seed, dataset, schedule, feature masking, test threads).

    The random state (:class:`RNGState`) is one of the checkpointed recoverables. Call
    :meth:`calibrate_controller` before :meth:`fit` when the controller is the surprisal one.
    """

    def __init__(self, modules, opt_class=None, hparams=None, run_opts=None, checkpointer=None,
                 apc: Optional[APCModel] = None, manifests: Optional[Dict[str, str]] = None):
        modules = dict(modules)
        if apc is not None:
            modules["apc"] = FrozenAPC(apc)
        super().__init__(modules=modules, opt_class=opt_class, hparams=hparams, run_opts=run_opts,
                         checkpointer=checkpointer)
        self.apc_model = apc
        self.manifests = dict(manifests or {})
        self.rng_state = RNGState()
        self.train_batch_sampler = None
        # set as the run goes: the controller's calibration, the test-time FLOPs budget, the evaluated
        # split and the development split's results, the training's wall-clock and whether it resumed
        self.calibration: Optional[Dict] = None
        # --test_only with test_controller: (the trained controller, the one that routes at test)
        self.controller_swap: Optional[tuple] = None
        self.test_budget: Optional[Dict] = None
        self.eval_split = "test"
        self.split_results: Dict[str, Dict] = {}
        self.train_wallclock: Optional[float] = None
        self.train_resumed: Optional[bool] = None
        self.epoch_start_time: Optional[float] = None
        if self.checkpointer is not None:
            self.checkpointer.add_recoverable("rng", self.rng_state)

    # ------------------------------------------------------------------ forward / loss
    def on_fit_batch_start(self, batch, should_step):
        super().on_fit_batch_start(batch, should_step)
        self.rng_state.apply_pending()

    def compute_forward(self, batch, stage) -> ForwardStep:
        """The model's forward pass (:func:`~surprisal_cc.model.forward.run_model`) on cached features, or
        on the batch's audio through the front end and the frozen APC model."""
        batch = batch.to(self.device)
        training = stage == sb.Stage.TRAIN
        if hasattr(batch, "fbank"):  # features from the cache
            cached = CachedInputs(batch.fbank.data, batch.features.data if hasattr(batch, "features") else None,
                                  batch.surprisal.data if hasattr(batch, "surprisal") else None)
            key = "features" if self.hparams.input_features == "apc" else "fbank"
            fbank, lengths = None, absolute_lengths(getattr(batch, key))
        else:
            cached = None
            fbank, lengths = self.hparams.front_end(batch.sig.data, absolute_lengths(batch.sig))
        transform = self.hparams.feature_masking if training and getattr(self.hparams, "augment", False) else None
        step = run_model(self.modules.encoder, fbank, lengths.to(self.device), apc=getattr(self.modules, "apc", None),
                      use_apc_features=self.hparams.input_features == "apc", cached=cached,
                      transform=transform)
        return step

    def compute_objectives(self, step: ForwardStep, batch, stage) -> Tensor:
        out = step.output
        # every pronunciation of every word (training and validation), or optional silences (training)
        predecessors = batch.predecessors.data if hasattr(batch, "predecessors") else None
        optional = batch.optional.data if stage == sb.Stage.TRAIN and hasattr(batch, "optional") else None
        ctc = utterance_mean_ctc_loss(out.log_probs, out.lengths, batch.tokens.data, absolute_lengths(batch.tokens),
                                      blank=self.hparams.blank_index, predecessors=predecessors, optional=optional)
        loss = ctc + out.aux_loss
        if stage != sb.Stage.TRAIN:
            self.record_evaluation(step, batch, stage)
            if not torch.isfinite(loss):  # SpeechBrain leaves these out of the average loss
                self.nonfinite_eval_ids += list(batch.id)
        return loss

    def record_evaluation(self, step: ForwardStep, batch, stage) -> None:
        out = step.output
        search = self.hparams.beam_searcher if stage == sb.Stage.TEST or self.hparams.valid_search == "beam" \
            else self.hparams.greedy_searcher
        hyp_ids = search(out.log_probs.detach(), out.lengths)
        decode = self.hparams.label_encoder.decode_ndim
        token_lens = absolute_lengths(batch.tokens)
        hyps = [decode(h) for h in hyp_ids]
        refs = [decode(t[:n].tolist()) for t, n in zip(batch.tokens.data, token_lens)]
        if hasattr(batch, "predecessors"):  # scored against the graph's path closest to each hypothesis
            refs = [closest_path(hyp, ref, preds[:len(ref) + 1].tolist())
                    for hyp, ref, preds in zip(hyps, refs, batch.predecessors.data)]
        self.error_metrics.append(batch.id, hyps, refs)
        if self.hparams.target_unit == "sentencepiece":
            words = self.hparams.label_encoder.decode_words
            self.word_metrics.append(batch.id, [words(h) for h in hyp_ids], [w.split() for w in batch.wrd])
        count_batch(self.mac_meter, self.routing_stats, out, self.apc_macs if step.uses_apc else None)

    # ------------------------------------------------------------------ stages
    @property
    def apc_macs(self) -> int:
        return module_macs(self.apc_model) if self.apc_model is not None else 0

    def make_dataloader(self, dataset, stage, ckpt_prefix="dataloader-", **loader_kwargs):
        if stage == sb.Stage.TRAIN:  # a length-bucketing batch sampler needs set_epoch every epoch
            self.train_batch_sampler = loader_kwargs.get("batch_sampler")
        return super().make_dataloader(dataset, stage, ckpt_prefix, **loader_kwargs)

    def on_stage_start(self, stage, epoch=None):
        activate_in_training(getattr(self.hparams, "speed_perturbation", None), stage)
        sampler = self.train_batch_sampler
        if stage == sb.Stage.TRAIN and sampler is not None and self.train_sampler is None:
            sampler.set_epoch(epoch)  # SpeechBrain does this only for samplers it made itself
        if stage != sb.Stage.TRAIN:
            self.error_metrics = self.hparams.error_rate()
            self.word_metrics = self.hparams.error_rate(merge_sil=False)
            self.mac_meter = MacMeter()
            self.routing_stats = RoutingStats()
            self.nonfinite_eval_ids = []
        else:
            self.epoch_start_time = time.time()
        self.stage_start_time = time.time()

    @property
    def error_rate_key(self) -> str:
        """The error rate's name: PER with phone targets, TER (token error rate) with sentencepiece ones."""
        return "PER" if self.hparams.target_unit == "phone" else "TER"

    def stage_summary(self) -> Dict[str, object]:
        summary = {self.error_rate_key: self.error_metrics.summarize()["error_rate"]}
        if self.hparams.target_unit == "sentencepiece":
            summary["WER"] = self.word_metrics.summarize()["error_rate"]
        flops = self.mac_meter.per_frame()
        summary["flops_per_frame"] = flops["total"]
        summary["flops_components"] = flops
        summary.update(self.routing_stats.summary())
        if self.nonfinite_eval_ids:
            summary["nonfinite_loss_utterances"] = len(self.nonfinite_eval_ids)
            logger.warning("%d evaluation utterances were in batches whose loss was not finite (left out of the "
                           "average loss, not of the error rate), e.g. %s",
                           len(self.nonfinite_eval_ids), self.nonfinite_eval_ids[:8])
        return summary

    def on_stage_end(self, stage, stage_loss, epoch=None):
        if stage == sb.Stage.TRAIN:
            self.train_loss = stage_loss
            return
        summary = self.stage_summary()
        metric_key = self.error_rate_key
        stats = {"loss": stage_loss, metric_key: summary[metric_key], "flops_per_frame_M": summary["flops_per_frame"] / 1e6}
        for key in ("p_big_mean", "big_fraction", "mean_steps"):
            if key in summary:
                stats[key] = summary[key]
        if stage == sb.Stage.VALID:
            lr = self.optimizer.param_groups[0]["lr"]
            self.hparams.train_logger.log_stats(
                stats_meta={"epoch": epoch, "lr": lr}, train_stats={"loss": self.train_loss}, valid_stats=stats)
            annealing = getattr(self.hparams, "lr_annealing", None)
            if annealing is not None:  # NewBob reads the loss: it moves on the blank plateau, where PER stays 100 %
                sb.nnet.schedulers.update_learning_rate(self.optimizer, anneal(annealing, epoch, stage_loss))
            self.append_history({"epoch": epoch, "lr": lr, "train_loss": self.train_loss, "valid_loss": stage_loss,
                                 **{k: v for k, v in summary.items() if k != "flops_components"},
                                 "elapsed_s": time.time() - self.stage_start_time,  # validation
                                 "epoch_s": time.time() - (self.epoch_start_time or self.stage_start_time)})
            selection = getattr(self.hparams, "selection_metric", metric_key)  # what evaluate(min_key=...) reads
            self.checkpointer.save_and_keep_only(meta={selection: summary[selection]}, min_keys=[selection],
                                                 num_to_keep=self.hparams.checkpoints_to_keep)
        else:
            split = self.eval_split
            self.hparams.train_logger.log_stats(
                stats_meta={"Epoch loaded": self.hparams.epoch_counter.current,
                            **({"split": split} if split != "test" else {})}, test_stats=stats)
            if split == "test":
                self.write_results(summary, stage_loss)
            else:
                self.record_split_results(split, summary, stage_loss)

    def evaluate_split(self, dataset, split: str, **kwargs):
        """:meth:`evaluate` on another labelled split than the test set (``dev``: mfa-dev): its
        results go into the next test results file under ``split`` and its alignments into
        ``<split>_alignments*.txt``, never into the test set's."""
        self.eval_split = split
        devices = [self.device] if str(self.device).startswith("cuda") else []
        try:
            with torch.random.fork_rng(devices=devices):  # the test set's sampled routing stays as without it
                return self.evaluate(dataset, **kwargs)
        finally:
            self.eval_split = "test"

    def asked_bias_shift(self) -> float:
        """The controller's test-time bias shift that was asked for (0 under a FLOPs budget, whose
        solved shift is recorded apart)."""
        return 0.0 if self.test_budget else unwrap(self.modules.encoder).test_bias_shift

    def write_alignments(self, stem: Optional[str] = None) -> None:
        """This evaluation's per-utterance alignments, in a file named like its results file
        (``error_details_file``'s name, or ``stem``, with the shift and test-only tags)."""
        details = Path(self.hparams.error_details_file)
        self.error_metrics.write_alignments(details.with_name(results_file_name(
            self.asked_bias_shift(), bool(getattr(self, "test_only", False)), stem or details.stem, details.suffix,
            evaluation_tag(vars(self.hparams)))))

    @main_process_only
    def record_split_results(self, split: str, summary: Dict[str, object], loss: float) -> None:
        self.write_alignments(f"{split}_alignments")
        self.split_results = {**self.split_results,
                              split: {**summary, "error_rate_details": self.error_metrics.summarize(), "loss": loss,
                                      "data": str(self.manifests.get(split, ""))}}

    @main_process_only
    def append_history(self, row: Dict[str, object]) -> None:
        with open(Path(self.hparams.output_folder) / "history.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    @main_process_only
    def write_results(self, summary: Dict[str, object], test_loss: float) -> None:
        """Write one test evaluation (:meth:`results_record`) to its own results and alignments files
        (:func:`~surprisal_cc.training.run_folder.results_file_name`). A ``--test_only`` evaluation never replaces
        the training run's ``results.json``."""
        results = self.results_record(summary, test_loss)
        self.write_alignments()
        path = Path(self.hparams.results_file)
        path = path.with_name(results_file_name(results["test_bias_shift"], results["test_only"], path.stem,
                                                path.suffix, evaluation_tag(vars(self.hparams))))
        atomic_write_text(path, json.dumps(results, indent=2, default=float))
        self.split_results = {}
        logger.info("results written to %s", path)

    def results_record(self, summary: Dict[str, object], test_loss: float) -> Dict[str, object]:
        """What a results file holds: the test ``summary`` (:meth:`stage_summary`) and loss, the
        development split's (``dev``), and the run's settings and provenance. A new column goes here;
        :mod:`surprisal_cc.experiments.run_labels` gives older results files its default, and :mod:`surprisal_cc.experiments.report`
        shows it. Under a test-time FLOPs budget (:meth:`set_test_flops_budget`) ``test_bias_shift``
        stays 0 (no shift was asked for) and ``budget_solution`` holds the shift that was solved and
        applied."""
        encoder = unwrap(self.modules.encoder)
        controller = getattr(encoder, "controller", None)
        budget = self.test_budget
        solution = {k: v for k, v in budget["solution"].items() if k != "fraction"} if budget else None
        return {
            **summary,
            "error_rate_details": self.error_metrics.summarize(),
            "test_loss": test_loss,
            **self.split_results,  # "dev": the same evaluation on the development split
            "encoder": self.hparams.encoder,
            "controller": self.controller_swap[1].name if self.controller_swap else self.hparams.controller,
            "trained_controller": self.hparams.controller if self.controller_swap else None,
            "architecture": self.hparams.architecture,
            "input_features": self.hparams.input_features,
            "controller_at_train": False if self.controller_swap else self.hparams.controller_at_train,
            "controller_at_test": self.hparams.controller_at_test,
            "train_stochastic": self.hparams.train_stochastic,
            "test_stochastic": self.hparams.test_stochastic,
            "test_bias_shift": self.asked_bias_shift(),
            "test_flops_fraction": budget["fraction"] if budget else None,
            "test_budget_split": budget["split"] if budget else None,
            "budget_solution": solution,  # the bias shift that met the budget on that split's frames
            "learned_estimator": getattr(controller, "estimator", None),
            "test_only": bool(getattr(self, "test_only", False)),
            "debug": bool(getattr(self, "debug", False)),  # a --debug check: reports leave it out
            "precision": self.precision,
            "augment": bool(getattr(self.hparams, "augment", False)),
            "speed_perturb": list(getattr(getattr(self.hparams, "speed_perturbation", None), "factors", ())),
            "train_labels": train_labels_name(getattr(self.hparams, "labels", None),
                                              getattr(self.hparams, "mfa_labels", None)),
            "train_targets": train_targets_name(getattr(self.hparams, "optional_silence", False),
                                                getattr(self.hparams, "pronunciation_alternatives", False)),
            "apc": weights_fingerprint(self.apc_model) if self.apc_model is not None else None,
            "component_macs": {"apc": self.apc_macs, **encoder.component_macs()},
            "calibration": self.recorded_calibration(),
            "seed": self.hparams.seed,
            "dataset": self.hparams.dataset,
            "data": {split: str(path) for split, path in self.manifests.items()},
            "epochs": self.hparams.epoch_counter.current,
            "target_unit": self.hparams.target_unit,
            "commit": git_commit(),
            "device": str(self.device),
            "train_wallclock_s": self.train_wallclock,  # this process's, when resumed
            "train_resumed": self.train_resumed,
            "test_wallclock_s": time.time() - self.stage_start_time,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }

    def recorded_calibration(self) -> Optional[Dict[str, object]]:
        """The surprisal controller's calibration as this process made it, or, for a run that was
        resumed or evaluated with ``--test_only``, read back from ``calibration.json`` where it matches
        the controller loaded from the checkpoint (else that controller's w and b); None without one."""
        if self.calibration is not None:
            return self.calibration
        controller = getattr(unwrap(self.modules.encoder), "controller", None)
        if not (getattr(controller, "calibrates_on_surprisal", False) and bool(controller.calibrated)):
            return None
        weight, bias = float(controller.weight), float(controller.bias)
        saved = _read_json_object(Path(self.hparams.output_folder, "calibration.json"))
        if saved is not None and all(_close(saved.get(k), v) for k, v in (("weight", weight), ("bias", bias))):
            return saved
        return {"weight": weight, "bias": bias, "source": "checkpoint"}

    # ------------------------------------------------------------------ controller calibration
    def calibrate_controller(self, train_set) -> Optional[Dict[str, float]]:
        """Fit the surprisal controller's w, b to the target p_big statistics (paper Eq. 4): any controller
        that ``calibrates_on_surprisal``.

        One pass over ``train_set`` with the frozen APC (or the cached surprisal). Nothing to do for
        other controllers, with ``--test_only``, or when a checkpoint exists: the calibrated
        controller is part of it. Writes ``calibration.json``; returns the calibration or None.
        """
        if getattr(self.hparams, "test_controller", None):
            return self.install_test_controller(train_set)
        controller = getattr(unwrap(self.modules.encoder), "controller", None)
        if not getattr(controller, "calibrates_on_surprisal", False) or self.test_only:
            return None
        if self.checkpointer is not None and self.checkpointer.find_checkpoint() is not None:
            logger.info("a checkpoint exists: the controller's calibration is restored from it")
            return None
        self.calibration = self.fit_surprisal_controller(controller, train_set)
        if if_main_process():
            atomic_write_text(Path(self.hparams.output_folder, "calibration.json"),
                              json.dumps(self.calibration, indent=2))
        return self.calibration

    def fit_surprisal_controller(self, controller, train_set) -> Dict[str, float]:
        """Calibrate ``controller`` (one that ``calibrates_on_surprisal``) on the surprisal of ``train_set``'s
        frames to the hparams' target mean (or the mean that meets ``flops_budget``) and variance of p_big,
        with the run's calibration method and seed; returns the calibration record."""
        target_mean = self.hparams.controller_target_mean
        budget = getattr(self.hparams, "flops_budget", None)
        if budget:
            table = self.encoder_flop_rows()
            target_mean = target_mean_for_budget(budget, table["small-only"], table["big-only"])
        return calibrate_surprisal_controller(
            controller, self.frame_surprisal(train_set), target_mean, self.hparams.controller_target_var,
            method=self.hparams.calibration_method, seed=self.hparams.seed)

    def install_test_controller(self, train_set) -> Optional[Dict[str, float]]:
        """``--test_only`` with ``test_controller``: decode a model trained with random routing
        (``controller: random``, p_big 0.5) with another controller, the paper's Table 4 cross "surprisal
        in training ✗, at test ✓". The new controller has nothing trained: a surprisal controller is
        calibrated on ``train_set`` exactly as a training run calibrates it (target mean and variance of
        p_big, or ``flops_budget``; the seed), before any test budget is solved with it. Its results
        record ``controller`` = the new one and ``controller_at_train`` False, like a model trained
        with ``controller_at_train: False``; ``trained_controller`` names the checkpoint's.
        A ConfigurationError line names what does not fit (the settings: :func:`check_test_controller`,
        which the recipes also run before any feature is computed)."""
        name = self.hparams.test_controller
        check_test_controller(vars(self.hparams), self.test_only)
        encoder = unwrap(self.modules.encoder)
        trained = getattr(encoder, "controller", None)
        problem = None
        if trained is None:
            problem = f"this encoder ({type(encoder).__name__}) routes with no controller"
        else:
            try:
                test = build_controller(name)
            except ValueError as err:
                problem = str(err)
        if problem is None and any(True for _ in test.parameters()):
            problem = f"the {name!r} controller has trained parameters, which a random-routing run never trained"
        if problem is not None:
            raise ConfigurationError(f"test_controller {name}: {problem}")
        calibration = self.fit_surprisal_controller(test, train_set) if test.calibrates_on_surprisal else None
        test.to(self.device)
        self.controller_swap = (trained, test)
        encoder.controller = test  # also while a test budget is checked; the checkpoint loads with `trained`
        self.calibration = calibration
        return calibration

    def on_fit_start(self):
        # a checkpoint present before recovery means this process resumes an interrupted run
        self.train_resumed = self.checkpointer is not None and self.checkpointer.find_checkpoint() is not None
        check_training_labels(self.hparams.output_folder, self.manifests, self.train_resumed)
        with self._checkpoint_of_this_model():
            super().on_fit_start()
        controller = getattr(unwrap(self.modules.encoder), "controller", None)
        if getattr(controller, "calibrates_on_surprisal", False) and not bool(controller.calibrated):
            raise ConfigurationError("the surprisal controller is not calibrated: call "
                                     "brain.calibrate_controller(train_set) before brain.fit")

    def frame_surprisal(self, dataset) -> Iterator[Tensor]:
        """Surprisal of the real frames of every utterance of ``dataset``, one batch at a time."""
        # Every process reads the whole set (no distributed sampler), so what is computed from it
        # (the calibration, a test-time budget's bias shift) is identical on all ranks.
        options = {k: v for k, v in self.hparams.train_loader_options.items() if k != "shuffle"}
        loader = sb.dataio.dataloader.make_dataloader(dataset, shuffle=False, **options)
        with torch.no_grad():
            for batch in loader:
                batch = batch.to(self.device)
                if hasattr(batch, "surprisal"):
                    surprisal, lengths = batch.surprisal.data, absolute_lengths(batch.surprisal)
                else:
                    fbank, lengths = self.hparams.front_end(batch.sig.data, absolute_lengths(batch.sig))
                    surprisal = self.modules.apc(fbank, lengths.to(fbank.device)).surprisal
                mask = lengths_to_mask(lengths.to(surprisal.device), surprisal.shape[1])
                yield surprisal[mask]

    def set_test_bias_shift(self, shift: float) -> None:
        """Shift the controller's logit at test time (Appendix B) for the evaluations that follow."""
        unwrap(self.modules.encoder).test_bias_shift = float(shift)

    def set_test_flops_budget(self, fraction: Optional[float], budget_set=None, split: str = "valid") -> None:
        """Spend ``fraction`` of the big-only MACs per frame in the evaluations that follow (None: the
        trained operating point). The bias shift that meets the budget is solved on the surprisal of
        the frames of ``budget_set`` (named ``split``: the validation split, or the test set itself,
        whose labels are not read) once the evaluated checkpoint is loaded
        (:meth:`on_evaluate_start`), and recorded in the results' ``budget_solution``. Replacing a budget
        that was applied puts back the bias shift the encoder had before it."""
        if fraction is not None:
            self.test_budget_big_fraction(float(fraction))  # a budget no model of this shape can meet fails now
        if self.test_budget is not None and "shift_before" in self.test_budget:
            self.set_test_bias_shift(self.test_budget["shift_before"])
        self.test_budget = None if fraction is None else {"fraction": float(fraction), "dataset": budget_set,
                                                          "split": split}

    def evaluate(self, *args, **kwargs):
        """The test decoding, on ``test_threads`` torch threads (hparams; default 1, which never
        competes for busy cores: :mod:`surprisal_cc.runtime`; null keeps the training's setting)."""
        with decoding_threads(getattr(self.hparams, "test_threads", DEFAULT_DECODING_THREADS)):
            return super().evaluate(*args, **kwargs)

    def on_evaluate_start(self, max_key=None, min_key=None):
        encoder = unwrap(self.modules.encoder)
        if self.controller_swap is not None:  # the checkpoint holds the trained controller's state
            encoder.controller = self.controller_swap[0]
        with self._checkpoint_of_this_model():
            super().on_evaluate_start(max_key=max_key, min_key=min_key)
        if self.controller_swap is not None:
            encoder.controller = self.controller_swap[1]
        budget = self.test_budget
        if budget is not None:
            budget.setdefault("shift_before", unwrap(self.modules.encoder).test_bias_shift)
            if budget.get("solved_for") != (max_key, min_key):  # once per checkpoint: dev and test share it
                budget["solution"] = {"split": budget["split"],
                                      **self.solve_budget_bias_shift(budget["fraction"], budget["dataset"])}
                budget["solved_for"] = (max_key, min_key)
            self.set_test_bias_shift(budget["solution"]["bias_shift"])

    def test_budget_big_fraction(self, fraction: float) -> float:
        """:func:`~surprisal_cc.model.calibration.budget_big_fraction` of this brain's encoder, errors naming
        ``test_flops_fraction``."""
        try:
            return budget_big_fraction(unwrap(self.modules.encoder), self.apc_macs, fraction)
        except ValueError as err:
            raise ConfigurationError(f"test_flops_fraction: {err}; or set it to null") from None

    def solve_budget_bias_shift(self, fraction: float, budget_set) -> Dict[str, float]:
        """The test-time bias shift at which the surprisal controller's expected MACs per frame on
        the frames of ``budget_set`` are ``fraction`` x those of big-only
        (:func:`~surprisal_cc.model.calibration.solve_budget`)."""
        self.test_budget_big_fraction(fraction)  # the error names test_flops_fraction
        solution = solve_budget(unwrap(self.modules.encoder), self.apc_macs, fraction, self.frame_surprisal(budget_set))
        logger.info("test budget %.3g x big-only MACs per frame: %.1f%% of frames on the big network, "
                    "bias shift %+.3f (solved on %d frames)", fraction, 100 * solution["big_fraction"],
                    solution["bias_shift"], solution["frames"])
        return solution

    def encoder_flop_rows(self) -> Dict[str, float]:
        """:func:`~surprisal_cc.model.flops.static_flop_rows` of this brain's encoder and APC."""
        return static_flop_rows(unwrap(self.modules.encoder), self.apc_macs)

    def fit(self, *args, **kwargs):
        start = time.time()
        super().fit(*args, **kwargs)
        if not self.test_only:  # --test_only: no training happened, report none
            self.train_wallclock = time.time() - start


def _read_json_object(path: Path) -> Optional[Dict[str, Any]]:
    """The JSON object in ``path``, or None where it is missing, unreadable or not an object (logged:
    a damaged file of a run's folder is not worth losing an evaluation over).

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     whole, cut = Path(folder, "whole.json"), Path(folder, "cut.json")
    ...     _ = whole.write_text('{"weight": 1.5}'); _ = cut.write_text('{"weight": 1.')
    ...     _read_json_object(whole), _read_json_object(cut), _read_json_object(Path(folder, "none.json"))
    ({'weight': 1.5}, None, None)
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        logger.warning("%s is unreadable (%s): not used", path, err)
        return None
    if not isinstance(data, dict):
        logger.warning("%s holds no JSON object: not used", path)
        return None
    return data


def _close(recorded: Any, value: float) -> bool:
    """Whether ``recorded`` is a number within float32 rounding of ``value``.

    Example
    -------
    >>> _close(0.5000001, 0.5), _close("x", 0.5), _close(None, 0.5)
    (True, False, False)
    """
    try:
        return abs(float(recorded) - value) <= 1e-5 * max(1.0, abs(value))
    except (TypeError, ValueError):
        return False


def git_commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
