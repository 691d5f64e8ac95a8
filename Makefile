# Thin entry points; the work lives in workflows/ (running, profiling) and analysis/ (reports).
PY ?= $(shell test -x .venv/bin/python && echo .venv/bin/python || echo python3)
WORKLOAD ?= gelu
KERNEL ?= $(WORKLOAD)
SIZE ?= default
ITERS ?= 20
RUNS ?= runs
TORCH_SPEC ?= torch==2.13.0
SCRIPT ?=
NVTX_INCLUDE ?=
SAMPLE ?= none
# the run and report folder: NAME=..., else the workload's name (a workload file's stem)
spec_name = $(if $(filter %.py,$(1)),$(basename $(notdir $(1))),$(1))
NAME ?= $(if $(SCRIPT),,$(call spec_name,$(WORKLOAD)))
KNAME = $(if $(SCRIPT),$(NAME),$(if $(filter command line,$(origin NAME)),$(NAME),$(call spec_name,$(KERNEL))))
RUN = $(RUNS)/$(NAME)/latest
NCU_RUN = $(RUNS)/$(KNAME)/latest-ncu
need_name = $(if $(SCRIPT),$(if $(NAME),,$(error SCRIPT needs NAME=..., the run and report folder)))
# A script with none of the workload-only variables runs through the one command
# (nsight-workflows profile|systems -- CMD), as a pip user runs it.
ONE_COMMAND = $(if $(SCRIPT),$(if $(filter-out 1,$(NPROC))$(STRAGGLER)$(NVTX_INCLUDE)$(LAUNCH_COUNT)$(NCU_INSTANCES)$(NCU_RUNS),,1))
CLI_ARGS = --name $(NAME) --runs $(RUNS) $(if $(filter-out none,$(SAMPLE)),--sample $(SAMPLE)) -- $(SCRIPT)
TARGET = $(if $(SCRIPT),--name $(NAME) --runs $(RUNS) -- $(SCRIPT),$(WORKLOAD) --name $(NAME) --runs $(RUNS))
NCU_ITERS ?= 1
NCU_INSTANCES ?=
NCU_RUNS ?=
CLOCK_CONTROL ?= none
VARIANT ?=
LAUNCH_COUNT ?=
COPIES ?= 100 500 1000 2500 5200
REPEAT ?= 3
THRESHOLD ?= 5
METRIC ?= auto
NPROC ?= 1
STRAGGLER ?=
BASE ?=
NEW ?=

.PHONY: help setup test test-gpu test-battery lint demo systems report report-one picks compute profile profile-all diff bench \
        sweep bench-analysis

help: ## list targets and their variables
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo "variables: WORKLOAD=$(WORKLOAD) (name, file.py or file.py:NAME) KERNEL=$(KERNEL) VARIANT=$(VARIANT)"
	@echo "           SCRIPT=\"python train.py ...\" NAME=run-and-report-name NVTX_INCLUDE=step/fwd/"
	@echo "           SIZE=$(SIZE) (default|small) NPROC=$(NPROC) STRAGGLER=$(STRAGGLER) (ddp_step)"
	@echo "           SAMPLE=$(SAMPLE) (none|cpu: CPU and Python samples in the capture)"
	@echo "           ITERS=$(ITERS) NCU_ITERS=$(NCU_ITERS) CLOCK_CONTROL=$(CLOCK_CONTROL) (none|base)"
	@echo "           LAUNCH_COUNT=$(LAUNCH_COUNT) NCU_INSTANCES=$(NCU_INSTANCES) NCU_RUNS=$(NCU_RUNS) (the Compute plan) RUNS=$(RUNS) PY=$(PY)"
	@echo "           BASE=$(BASE) NEW=$(NEW) THRESHOLD=$(THRESHOLD) METRIC=$(METRIC) COPIES=$(COPIES) REPEAT=$(REPEAT)"

setup: ## create .venv and install the package with test dependencies (CPU torch for kernel tests)
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q "$(TORCH_SPEC)" triton nvtx
	.venv/bin/pip install -q -e ".[dev,plots]"
	.venv/bin/python -m compileall -q analysis workflows kernels   # bytecode, as an installed package has it

test: ## CPU test suite on every core (GPU tests skip without CUDA)
	$(PY) -m pytest -q -n auto

test-gpu: ## GPU tests only (needs CUDA; Nsight tools for some)
	$(PY) -m pytest -q -m gpu

test-battery: ## the generated battery's captures: every loop replays to its run (slow)
	$(PY) -m pytest -q -n auto --battery -m battery

lint: ## ruff over the code, and the import layers (import-linter's contracts in pyproject.toml)
	$(PY) -m ruff check analysis workflows kernels tests nsight_workflows
	$(PY) -c "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"

demo: ## render every committed H200 capture (tests/data) into runs/demo/ (no GPU needed)
	$(PY) -m analysis demo tests/data -o $(RUNS)/demo

systems: ## WORKLOAD=name|file.py or SCRIPT="cmd" NAME=n: nsys timeline -> reports/NAME/README.md
	$(need_name)
	$(if $(ONE_COMMAND),$(PY) -m nsight_workflows systems $(CLI_ARGS))
	$(if $(ONE_COMMAND),,$(PY) -m workflows.nsys $(if $(SCRIPT),,--size $(SIZE) --iters $(ITERS)) \
	    $(if $(filter-out 1,$(NPROC)),--nproc $(NPROC)) $(if $(STRAGGLER),--straggler $(STRAGGLER)) \
	    $(if $(filter-out none,$(SAMPLE)),--sample $(SAMPLE)) $(TARGET))
	$(if $(ONE_COMMAND),,$(MAKE) --no-print-directory report NAME=$(NAME))

report: ## NAME=name (or WORKLOAD=...): latest systems (+ compute) run -> reports/NAME/README.md
	$(if $(wildcard $(RUN)/rank0.sqlite),$(PY) -m analysis systems $(RUN) -o reports/$(NAME),\
	    $(MAKE) --no-print-directory report-one NAME=$(NAME))

report-one:
	@test -e $(RUN)/trace.sqlite || { echo "no complete run of $(NAME) under $(RUNS)/:" \
	    "run make systems first" >&2; exit 2; }
	$(PY) -m analysis systems $(RUN)/trace.sqlite --meta $(RUN)/meta.json \
	    $(if $(wildcard $(RUN)/torch_logs.txt),--torch-logs $(RUN)/torch_logs.txt) -o reports/$(NAME)
	$(if $(wildcard $(RUNS)/$(NAME)/latest-ncu/ncu_raw.csv),$(PY) -m analysis compute \
	    $(RUNS)/$(NAME)/latest-ncu/ncu_raw.csv --meta $(RUNS)/$(NAME)/latest-ncu/meta.json \
	    -o reports/$(NAME))
	$(PY) -m analysis page reports/$(NAME)

diff: ## BASE=runs/w/a NEW=runs/w/b [THRESHOLD=5] [METRIC=span|kernel|busy]: fails on a regression
	$(PY) -m analysis diff $(BASE) $(NEW) --threshold $(THRESHOLD) --metric $(METRIC)

picks: ## NAME=n: the Nsight Compute plan of reports/NAME (kernels, launches, ncu runs, time), before any GPU time
	$(PY) -m analysis picks reports/$(NAME) $(if $(NCU_INSTANCES),--instances $(NCU_INSTANCES)) \
	    $(if $(NCU_RUNS),--runs $(NCU_RUNS))

compute: ## KERNEL=name|file.py [VARIANT=v] or SCRIPT="cmd" NAME=n [NVTX_INCLUDE=f]: ncu -> reports/NAME/compute.md
	$(need_name)
	$(PY) -m workflows.ncu $(if $(SCRIPT),,--size $(SIZE) --iters $(NCU_ITERS)) \
	    --clock-control $(CLOCK_CONTROL) $(if $(VARIANT),--variant $(VARIANT)) \
	    $(if $(NVTX_INCLUDE),--nvtx-include "$(NVTX_INCLUDE)") \
	    $(if $(LAUNCH_COUNT),--launch-count $(LAUNCH_COUNT)) \
	    $(if $(NCU_INSTANCES),$(if $(SCRIPT),--instances $(NCU_INSTANCES))) \
	    $(if $(NCU_RUNS),$(if $(SCRIPT),--max-runs $(NCU_RUNS))) \
	    $(if $(SCRIPT),--name $(KNAME) --runs $(RUNS) -- $(SCRIPT),$(KERNEL) --name $(KNAME) --runs $(RUNS))
	$(PY) -m analysis compute $(NCU_RUN)/ncu_raw.csv --meta $(NCU_RUN)/meta.json -o reports/$(KNAME)
	$(if $(wildcard reports/$(KNAME)/systems.json),$(PY) -m analysis page reports/$(KNAME),\
	    @echo "reports/$(KNAME)/README.md needs the timeline too: make systems")

profile: ## WORKLOAD=... or SCRIPT=... NAME=...: Nsight Systems, then Nsight Compute, then the page
	$(need_name)
	$(if $(ONE_COMMAND),$(PY) -m nsight_workflows profile $(CLI_ARGS))
	$(if $(ONE_COMMAND),,$(MAKE) --no-print-directory systems)
	$(if $(ONE_COMMAND),,$(MAKE) --no-print-directory compute $(if $(SCRIPT),,KERNEL=$(WORKLOAD)))

profile-all: ## make profile for every registered workload
	@for w in $$($(PY) -c "from workflows.workloads import REGISTRY; print(' '.join(REGISTRY))"); do \
	    $(MAKE) --no-print-directory profile WORKLOAD=$$w NAME=$$w || exit 1; done

bench: ## [WORKLOAD=a,b]: median times vs true and measured ceilings -> reports/bench/<gpu>.md
	$(PY) -m workflows.bench $(if $(filter command line,$(origin WORKLOAD)),--workloads $(WORKLOAD)) \
	    --size $(SIZE) -o reports/bench

sweep: ## KERNEL=matmul_relu|attention|attention_causal: time every config -> reports/bench/sweep_*
	$(PY) -m workflows.sweep $(KERNEL) -o reports/bench

bench-analysis: ## time and memory of python -m analysis vs nsys stats: 0.1M-5M kernels, an NVTX-heavy capture x1-x5 -> reports/bench/
	$(PY) -m analysis.commands.bench --copies $(COPIES) --repeat $(REPEAT) -o reports/bench
	$(PY) -m analysis.commands.bench --base tests/data/emit_nvtx_200/trace.sqlite --copies 1 3 5 \
	    --repeat $(REPEAT) --stem analysis_nvtx_heavy -o reports/bench
	$(PY) -m analysis.commands.bench --base tests/data/emit_shapes/trace.sqlite --copies 1 \
	    --repeat $(REPEAT) --stem analysis_emit_shapes -o reports/bench
	$(PY) -m analysis.commands.bench --ranks 16 -o reports/bench
