# Set-up, the main job and the tests. Each target sets the machine up on first use.
SHELL := /bin/bash
# A failing command in a pipe (the compliance checker piped to tail) fails its target.
.SHELLFLAGS := -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
DEMO := runs/demo
BERT_DEMO := runs/demo-bert
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# horovodrun's own process loads TensorFlow to see which controllers Horovod was built with, and
# TensorFlow prints its info lines there; the ranks set the same default themselves (suite/__init__.py).
# A user's own value wins.
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: setup setup-tf2.15 demo demo-bert test test-phase1 test-phase2 test-phase3 test-fast test-tf2.15 \
	image-test image-gpu-test lint clean

# An image whose Dockerfile built the environment (container/Dockerfile.gpu-pypi) says where it is in
# SUITE_PREPARED_ENV, and .venv points there already: nothing to set up.
setup:
	@test -n "$$SUITE_PREPARED_ENV" || bash scripts/setup.sh

# The main job: a learnable generated dataset, ResNet-50 trained by 2 Horovod processes,
# and the MLPerf log checked by the official compliance checker. DEMO_FLAGS go to the model after
# the preset, e.g. DEMO_FLAGS="--set epochs=1": make image-test's shorter run of the same job.
DEMO_FLAGS =
demo: setup
	@test -f $(DEMO)/data/dataset.json || $(PY) -m models.resnet50.data_cli generate $(DEMO)/data \
		--classes 4 --train-per-class 80 --eval-per-class 20 --image-size 64
	@rm -rf $(DEMO)/run
	horovodrun -np 2 -H localhost:2 python -m models.resnet50 --preset tiny_cpu \
		--data-dir $(DEMO)/data --run-dir $(DEMO)/run $(DEMO_FLAGS)
	@$(PY) -m mlperf_logging.compliance_checker --usage training --ruleset 2.1.0 \
		--log_output $(DEMO)/run/compliance_2.1.0.txt $(DEMO)/run/result_0.txt | tail -n 1
	@echo "MLPerf log: $(DEMO)/run/result_0.txt"
	@echo "Summary:    $(DEMO)/run/summary.json"

# BERT on its learnable generated dataset (64 tokens, a 2-layer model), 2 Horovod processes.
demo-bert: setup
	@test -f $(BERT_DEMO)/data/dataset.json || $(PY) -m models.bert.data_cli generate $(BERT_DEMO)/data \
		--seq-length 64 --max-predictions 10 --train-records 2048 --eval-records 512
	@rm -rf $(BERT_DEMO)/run
	horovodrun -np 2 -H localhost:2 python -m models.bert --preset tiny_cpu \
		--data-dir $(BERT_DEMO)/data --run-dir $(BERT_DEMO)/run
	@$(PY) -m mlperf_logging.compliance_checker --usage training --ruleset 2.1.0 \
		--log_output $(BERT_DEMO)/run/compliance_2.1.0.txt $(BERT_DEMO)/run/result_0.txt | tail -n 1
	@echo "MLPerf log: $(BERT_DEMO)/run/result_0.txt"
	@echo "Summary:    $(BERT_DEMO)/run/summary.json"

lint: setup
	$(PY) -m flake8 suite models tests

# pytest-xdist workers: one per core of the 2-core development machine. Most tests start TensorFlow
# processes (two ranks in many), so more workers than cores only share the same cores, and a fixed
# count keeps the memory bounded (about 3 GB a worker at most in the first phase, two 8-rank runs of
# about 5 GB in the second) where -n auto would start one per core. --dist loadfile hands a worker
# whole modules: a module's fixtures (one run asserted many ways, a namespace cluster) are made once.
# (Not --dist loadgroup: under pytest 9 a test's node id no longer takes xdist 3.8's group suffix,
# so its xdist_group marks group nothing.) Two workers that build the same kind of cluster get
# namespaces of their own (tests/twohosts.py, worker_prefix).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

# The whole suite on the pinned TensorFlow 2.18 in three phases, then the TensorFlow 2.15 compatibility
# subset: every test not marked serial on $(TEST_WORKERS) workers; then the serial ones (namespace
# clusters, 8 ranks, timing bounds), whole modules on $(TEST_WORKERS) workers, so at most two heavy
# tests share the cores; then the ones marked alone (over 10 GB), one after another; docs/testing.md.
test: setup lint
	@$(MAKE) --no-print-directory test-phase1
	@$(MAKE) --no-print-directory test-phase2
	@$(MAKE) --no-print-directory test-phase3
	@$(MAKE) --no-print-directory test-tf2.15

# make test's three phases as targets of their own, so that .ci/run can time each (scripts/ci_steps.sh).
test-phase1: setup
	$(PY) -m pytest -m "not serial" $(XDIST) --durations=60

test-phase2: setup
	$(PY) -m pytest -m "serial and not alone" $(XDIST) --durations=60

test-phase3: setup
	$(PY) -m pytest -m alone --durations=20

# The inner loop: lint, unit tests and single-process runs (every test not marked slow, i.e. not
# starting several processes), on $(TEST_WORKERS) workers; docs/testing.md.
test-fast: setup lint
	$(PY) -m pytest -m "not slow" $(XDIST) -q

# TensorFlow 2.15 (NGC-era Keras 2, no tf-keras): unit tests and the launchers, in a second
# cached environment with its own Horovod build.
setup-tf2.15:
	@SUITE_REQUIREMENTS=requirements-tf2.15.txt SUITE_ENV_LINK=.venv-tf2.15 bash scripts/setup.sh

test-tf2.15: setup-tf2.15
	.venv-tf2.15/bin/python -m pytest $(XDIST) tests/test_resnet_model.py tests/test_resnet_optim.py \
		tests/test_resnet_data.py tests/test_config.py tests/test_loop.py tests/test_session.py \
		tests/test_bert_model.py tests/test_bert_checkpoint.py tests/test_bert_optim.py \
		tests/test_bert_data.py tests/test_bert_workload.py
	.venv-tf2.15/bin/python -m pytest tests/test_launch.py -k "gloo or single"

# The container images built for real with Debian's buildah (installed on first use): the CPU image
# on a debootstrapped Debian base, the image's own command (make demo) run in it and its run checked,
# and the GPU image's suite-check stage. CI's step after `make test`; it needs no `make setup`.
image-test:
	@bash scripts/image-test.sh

# The GPU image from PyPI (container/Dockerfile.gpu-pypi) built with buildah at the lowest priority and
# checked without a GPU: NCCL in Horovod, a CUDA TensorFlow, make demo on the CPU. Not in .ci/run: a
# cold build downloads 2.5 GB and compiles Horovod's CUDA kernels (docs/testing.md has its times).
image-gpu-test:
	@bash scripts/image-gpu-test.sh

clean:
	rm -rf runs .pytest_cache
