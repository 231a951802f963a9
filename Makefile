# Entry points. Each target creates the virtual environment (.venv) when it is missing.
#   make mini_librispeech   the Mini-LibriSpeech recipe end to end (CPU profile, relabelled training data)
#   make test               the test suite (what CI runs)
#   make bench              the benchmark table
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Folders holding LibriSpeech/train-clean-5 and LibriSpeech/dev-clean-2 (a YAML list).
# Subsets found in none of them are downloaded into the first one (openslr 31, checksummed).
DATA ?= [data/MiniLibriSpeech,../shared/data]
EXP ?= results/MiniLibriSpeech
SEED ?= 1
CONTROLLER ?= surprisal
# CPU profile: the paper's model; bf16 where the CPU has it (precision: auto), length-bucketed batches
# of 400 s of audio, Adam 1e-3 held for the first 40 % of the epochs and then decayed geometrically to
# 5e-5 at the last one (hold_decay), the training CTC summed over every CMUdict pronunciation of each
# word, APC with a residual head. recipes/MiniLibriSpeech/README.md has its learning curves and hours
# (grid_session.yaml, group converged). BATCHES: the
# batching and peak learning rate that the aligner's profile shares.
BATCHES := --dynamic_batching=True --max_batch_length=400 --lr=0.001
CPU_PROFILE ?= $(BATCHES) --lr_schedule=hold_decay \
	--pronunciation_alternatives=True --apc_residual=True --apc_epochs=8 --apc_batch_size=16 --apc_lr=0.001
EPOCHS ?= 30
# Training data perturbation (not in the paper): each utterance heard at a random one of 0.9/1.0/1.1
# speed every epoch. Chosen by validation PER (big-only, seed 1, 30 epochs: 29.52 % against 31.84 %
# without it); SpecAugment-style masks (--augment=True) gained nothing more. PERTURB= switches it off.
PERTURB ?= "--speed_perturb=[0.9,1.1]"
# APC: the shipped model's (surprisal_cc/pretrained/apc.pt, pretrained on train-clean-5 by recipes/LibriSpeech);
# APC= pretrains one on the training audio first (about 50 min).
APC ?= surprisal_cc/pretrained/apc.pt
# Training labels with the pauses of the audio (the MFA test labels mark them): the shipped model
# (surprisal_cc/pretrained/, fp32, deterministic routing) relabels train-clean-5 with an optional sil at each word
# boundary and a sil wherever the audio pauses (realign_labels.py --pauses), in 5-8 min and the same on
# every machine. The labels file is named after the aligner's weights (the first 8 hex digits of
# encoder.pt's SHA-256), so a replaced model relabels instead of reusing another model's labels.
# ALIGNER=train trains the aligner instead: a filterbank big-only model, ALIGNER_EPOCHS on the
# lexicon's labels with NewBob annealing (ALIGNER_PROFILE; about 1 h).
ALIGNER ?= surprisal_cc/pretrained
ALIGNER_EPOCHS ?= 9
ALIGNER_PROFILE ?= $(BATCHES) --lr_annealing_factor=0.8
ALIGNER_RUN := $(EXP)/aligner/fbank-big_only/seed$(SEED)
ALIGNER_DIGEST = $(shell (sha256sum $(ALIGNER)/encoder.pt 2>/dev/null || shasum -a 256 $(ALIGNER)/encoder.pt) | cut -c1-8)
LABELS := $(EXP)/labels/realigned_pauses_$(if $(filter train,$(ALIGNER)),seed$(SEED),$(notdir $(ALIGNER:%/=%))-$(ALIGNER_DIGEST)).csv
# The Mini-LibriSpeech recipe on this corpus and experiment folder, as both stages run it.
TRAIN = $(PY) recipes/MiniLibriSpeech/train.py hparams/MiniLibriSpeech/conditional_ctc.yaml \
	--data_folder="$(DATA)" --download=True --experiment_root=$(EXP) --seed=$(SEED) $(if $(APC),--apc_path=$(APC))
RELABELLED = --labels="{train: mfa, valid: mfa, test: mfa}" \
	--mfa_labels="{train: $(LABELS), valid: $(LABELS), test: null}" --prepared_folder=$(EXP)/manifests_realigned

.PHONY: venv test mini_librispeech bench clean-venv

venv: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q --doctest-modules surprisal_cc tests

# Resumable: run it again after an interruption (each stage resumes from its checkpoints or is skipped).
mini_librispeech: $(LABELS) | $(STAMP)
	$(TRAIN) --controller=$(CONTROLLER) --number_of_epochs=$(EPOCHS) $(CPU_PROFILE) $(PERTURB) $(RELABELLED) \
		--output_folder=$(EXP)/conditional-$(CONTROLLER)-cpu-profile$(if $(PERTURB),-speed-perturbed)/seed$(SEED)
	$(PY) -m surprisal_cc.cli report $(EXP)

ifeq ($(ALIGNER),train)
$(LABELS): | $(STAMP)
	$(TRAIN) --controller=big_only --input_features=fbank --number_of_epochs=$(ALIGNER_EPOCHS) \
		$(ALIGNER_PROFILE) --output_folder=$(ALIGNER_RUN)
	$(PY) recipes/MiniLibriSpeech/realign_labels.py $(ALIGNER_RUN) $(LABELS) --pauses
else
$(LABELS): | $(STAMP)
	$(PY) recipes/MiniLibriSpeech/realign_labels.py $(ALIGNER) $(LABELS) --pauses --corpus train-clean-5 \
		--data_folder="$(DATA)" --download
endif

bench: $(STAMP)
	$(PY) -m surprisal_cc.cli bench

clean-venv:
	rm -rf $(VENV)
