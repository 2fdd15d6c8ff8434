# Set-up, the main job and the tests. Each target sets the machine up on first use.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
DEMO := runs/demo
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup demo test lint clean

setup:
	@bash scripts/setup.sh

# The main job: a learnable generated dataset, ResNet-50 trained by 2 Horovod processes,
# and the MLPerf log checked by the official compliance checker.
demo: setup
	@test -f $(DEMO)/data/dataset.json || $(PY) -m models.resnet50.data_cli generate $(DEMO)/data \
		--classes 4 --train-per-class 80 --eval-per-class 20 --image-size 64
	@rm -rf $(DEMO)/run
	horovodrun -np 2 -H localhost:2 python -m models.resnet50 --preset tiny_cpu \
		--data-dir $(DEMO)/data --run-dir $(DEMO)/run
	@$(PY) -m mlperf_logging.compliance_checker --usage training --ruleset 2.1.0 \
		--log_output $(DEMO)/run/compliance_2.1.0.txt $(DEMO)/run/result_0.txt | tail -n 1
	@echo "MLPerf log: $(DEMO)/run/result_0.txt"
	@echo "Summary:    $(DEMO)/run/summary.json"

lint: setup
	$(PY) -m flake8 suite models tests

test: setup lint
	$(PY) -m pytest

clean:
	rm -rf runs .pytest_cache
