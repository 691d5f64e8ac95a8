# Thin entry points; the work lives in workflows/ (running, profiling) and analysis/ (reports).
PY ?= $(shell test -x .venv/bin/python && echo .venv/bin/python || echo python3)
WORKLOAD ?= gelu
KERNEL ?= $(WORKLOAD)
SIZE ?= default
ITERS ?= 20
RUNS ?= runs
TORCH_SPEC ?= torch==2.13.0
RUN = $(RUNS)/$(WORKLOAD)/latest
NCU_RUN = $(RUNS)/$(KERNEL)/latest-ncu
NCU_ITERS ?= 1
CLOCK_CONTROL ?= none
VARIANT ?=
LAUNCH_COUNT ?=
COPIES ?= 300 1000 3000
THRESHOLD ?= 5
BASE ?=
NEW ?=

.PHONY: help setup test test-gpu lint demo systems report compute diff bench sweep bench-analysis

help: ## list targets and their variables
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo "variables: WORKLOAD=$(WORKLOAD) KERNEL=$(KERNEL) VARIANT=$(VARIANT) SIZE=$(SIZE) (default|small)"
	@echo "           ITERS=$(ITERS) NCU_ITERS=$(NCU_ITERS) CLOCK_CONTROL=$(CLOCK_CONTROL) (none|base)"
	@echo "           LAUNCH_COUNT=$(LAUNCH_COUNT) RUNS=$(RUNS) PY=$(PY)"
	@echo "           BASE=$(BASE) NEW=$(NEW) THRESHOLD=$(THRESHOLD) COPIES=$(COPIES)"

setup: ## create .venv and install the package with test dependencies (CPU torch for kernel tests)
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q "$(TORCH_SPEC)" triton nvtx
	.venv/bin/pip install -q -e ".[dev,plots]"

test: ## CPU test suite (GPU tests skip without CUDA)
	$(PY) -m pytest -q

test-gpu: ## GPU tests only (needs CUDA; Nsight tools for some)
	$(PY) -m pytest -q -m gpu

lint: ## ruff over the code
	$(PY) -m ruff check analysis workflows kernels tests

demo: ## render every committed H200 capture (tests/data) into runs/demo/ (no GPU needed)
	$(PY) -m analysis demo tests/data -o $(RUNS)/demo

systems: ## WORKLOAD=name: nsys timeline of every variant -> reports/WORKLOAD/README.md, systems.md
	$(PY) -m workflows.nsys $(WORKLOAD) --size $(SIZE) --iters $(ITERS) --runs $(RUNS)
	$(MAKE) --no-print-directory report WORKLOAD=$(WORKLOAD)

report: ## WORKLOAD=name: latest systems (+ compute) run -> reports/WORKLOAD/README.md
	@test -e $(RUN)/trace.sqlite || { echo "no run of $(WORKLOAD) under $(RUNS)/:" \
	    "run make systems WORKLOAD=$(WORKLOAD) first" >&2; exit 2; }
	$(PY) -m analysis systems $(RUN)/trace.sqlite --meta $(RUN)/meta.json \
	    --torch-logs $(RUN)/torch_logs.txt -o reports/$(WORKLOAD)
	$(if $(wildcard $(RUNS)/$(WORKLOAD)/latest-ncu/ncu_raw.csv),$(PY) -m analysis compute \
	    $(RUNS)/$(WORKLOAD)/latest-ncu/ncu_raw.csv --meta $(RUNS)/$(WORKLOAD)/latest-ncu/meta.json \
	    -o reports/$(WORKLOAD))
	$(PY) -m analysis page reports/$(WORKLOAD)

diff: ## BASE=runs/w/a NEW=runs/w/b [THRESHOLD=5]: per-variant change; fails on a regression
	$(PY) -m analysis diff $(BASE) $(NEW) --threshold $(THRESHOLD)

compute: ## KERNEL=name [VARIANT=v]: ncu counters per kernel -> reports/KERNEL/compute.md
	$(PY) -m workflows.ncu $(KERNEL) --size $(SIZE) --iters $(NCU_ITERS) \
	    --clock-control $(CLOCK_CONTROL) $(if $(VARIANT),--variant $(VARIANT)) \
	    $(if $(LAUNCH_COUNT),--launch-count $(LAUNCH_COUNT)) --runs $(RUNS)
	$(PY) -m analysis compute $(NCU_RUN)/ncu_raw.csv --meta $(NCU_RUN)/meta.json -o reports/$(KERNEL)
	$(if $(wildcard reports/$(KERNEL)/systems.json),$(PY) -m analysis page reports/$(KERNEL),\
	    @echo "reports/$(KERNEL)/README.md needs the timeline too: make systems WORKLOAD=$(KERNEL)")

bench: ## [WORKLOAD=a,b]: median times vs measured ceilings -> reports/bench/<gpu>.md
	$(PY) -m workflows.bench $(if $(filter command line,$(origin WORKLOAD)),--workloads $(WORKLOAD)) \
	    --size $(SIZE) -o reports/bench

sweep: ## KERNEL=matmul_relu|attention|attention_causal: time every config -> reports/bench/sweep_*
	$(PY) -m workflows.sweep $(KERNEL) -o reports/bench

bench-analysis: ## time python -m analysis on traces of 0.1M-1M kernels vs nsys stats -> reports/bench/
	$(PY) -m analysis.bench --copies $(COPIES) -o reports/bench
