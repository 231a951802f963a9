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
# The CPU profile (30 epochs, annealed Adam, speed perturbation, relabelled training data, every
# pronunciation, the shipped APC): one hparams file, which the grids read too.
PROFILE ?= hparams/MiniLibriSpeech/cpu_profile.yaml
# More --key=value overrides of the profile, e.g. ARGS="--number_of_epochs=14 --precision=bf16".
ARGS ?=
# APC: empty = the profile's (the shipped model's); APC=pretrain pretrains one on the training audio
# first (about 50 min); APC=FILE loads that file.
APC ?=
APC_ARG = $(if $(filter pretrain,$(APC)),--apc_path=null,$(if $(APC),--apc_path=$(APC)))
# Aligner of the training labels (train-clean-5 relabelled with an optional sil at each word boundary
# and a sil wherever the audio pauses: realign_labels.py --pauses, 5-8 min, the same on every machine):
#   a git revision (default 0cb7ec2: the labels of every published run; needs a clone with history),
#   a model folder (e.g. surprisal_cc/pretrained: labels named after its weights' digest), or
#   train: a filterbank big-only model trained here first (ALIGNER_EPOCHS epochs, about 1 h).
ALIGNER ?= 0cb7ec2
ALIGNER_EPOCHS ?= 9
ALIGNER_ARGS ?= --dynamic_batching=True --max_batch_length=400 --lr=0.001 --lr_annealing_factor=0.8
ALIGNER_RUN := $(EXP)/aligner/fbank-big_only/seed$(SEED)
ALIGNER_IS_FOLDER := $(wildcard $(ALIGNER)/model.json $(ALIGNER)/hyperparams.yaml)
ALIGNER_DIGEST = $(shell (sha256sum $(ALIGNER)/encoder.pt 2>/dev/null || shasum -a 256 $(ALIGNER)/encoder.pt) | cut -c1-8)
ifeq ($(ALIGNER),train)
LABELS := $(EXP)/labels/realigned_pauses_seed$(SEED).csv
else ifneq ($(ALIGNER_IS_FOLDER),)
LABELS := $(EXP)/labels/realigned_pauses_$(notdir $(ALIGNER:%/=%))-$(ALIGNER_DIGEST).csv
else ifeq ($(ALIGNER),0cb7ec2)
LABELS := $(EXP)/labels/realigned_pauses_pretrained.csv
else
LABELS := $(EXP)/labels/realigned_pauses_$(ALIGNER).csv
endif
# The Mini-LibriSpeech recipe on this corpus and experiment folder.
TRAIN = $(PY) recipes/MiniLibriSpeech/train.py $(PROFILE) --data_folder="$(DATA)" --download=True \
	--experiment_root=$(EXP) --seed=$(SEED) $(APC_ARG)
REALIGN = $(PY) recipes/MiniLibriSpeech/realign_labels.py

.PHONY: venv test mini_librispeech bench clean-venv

venv: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "make venv: requirements.lock (numpy 2.4, torch 2.11) needs Python >= 3.11; run make PYTHON=python3.11 ..., or pip install . for the unpinned package (Python >= 3.9)" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -rs --doctest-modules surprisal_cc tests

# Resumable: run it again after an interruption (each stage resumes from its checkpoints or is skipped).
mini_librispeech: $(LABELS) | $(STAMP)
	$(TRAIN) --controller=$(CONTROLLER) --relabelled_train=$(LABELS) $(ARGS) \
		--output_folder=$(EXP)/conditional-$(CONTROLLER)-cpu-profile/seed$(SEED)
	$(PY) -m surprisal_cc.cli report $(EXP)

ifeq ($(ALIGNER),train)
$(LABELS): | $(STAMP)
	$(PY) recipes/MiniLibriSpeech/train.py hparams/MiniLibriSpeech/conditional_ctc.yaml --data_folder="$(DATA)" \
		--download=True --experiment_root=$(EXP) --seed=$(SEED) --controller=big_only --input_features=fbank \
		--number_of_epochs=$(ALIGNER_EPOCHS) $(ALIGNER_ARGS) --output_folder=$(ALIGNER_RUN)
	$(REALIGN) $(ALIGNER_RUN) $(LABELS) --pauses
else ifneq ($(ALIGNER_IS_FOLDER),)
$(LABELS): | $(STAMP)
	$(REALIGN) $(ALIGNER) $(LABELS) --pauses --corpus train-clean-5 --data_folder="$(DATA)" --download
else
$(LABELS): | $(STAMP)
	$(PY) recipes/MiniLibriSpeech/shipped_model.py $(ALIGNER) $(EXP)/aligner/$(ALIGNER)
	$(REALIGN) $(EXP)/aligner/$(ALIGNER) $(LABELS) --pauses --corpus train-clean-5 --data_folder="$(DATA)" --download
endif

# make bench [BENCH_THREADS=N] [BENCH_OUTPUT=FILE.json] [BENCH_ARGS="--quick --only training,rnn"]
BENCH_THREADS ?= 1
BENCH_OUTPUT ?=
BENCH_ARGS ?=
bench: $(STAMP)
	$(PY) -m benchmarks.run_all --threads=$(BENCH_THREADS) $(if $(BENCH_OUTPUT),--output=$(BENCH_OUTPUT)) $(BENCH_ARGS)

clean-venv:
	rm -rf $(VENV)
