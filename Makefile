# pipepar — build, demo, tests, benchmarks.
#
#   make            everything this machine can build (GPU parts only where nvcc and NCCL exist)
#   make demo       train a small MLP pipeline-parallel on CPU threads and draw its schedule
#   make test       all host tests: plain, ASan+UBSan, TSan; ends with "N passed, N failed"
#   make test-gpu   kernel and NCCL tests (on a machine with GPUs)
#   make bench      host benchmarks (bench/RESULTS.md records their numbers)
#
# Overrides: CC, NVCC, CUDA_HOME (default /usr/local/cuda), NCCL_HOME (where include/nccl.h and
# lib/libnccl.so live; default: the system paths, then CUDA_HOME), CUDA_ARCH (default sm_90).

CC       ?= cc
CXX      ?= c++
CSTD     := -std=c99 -D_POSIX_C_SOURCE=200809L
WARN     := -Wall -Wextra -Wpedantic -Werror -Wshadow -Wno-unused-function
OPT      ?= -O2 -g
CFLAGS   ?=
LDLIBS   := -lpthread -lm
BUILD    ?= build
SAN      ?=

CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(shell command -v nvcc 2>/dev/null || (test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc))
CUDA_ARCH ?= sm_90
NCCL_HOME ?= $(firstword $(foreach d,/usr /usr/local $(CUDA_HOME),$(if $(wildcard $(d)/include/nccl.h),$(d))))
NCCL_INC  := $(if $(NCCL_HOME),-I$(NCCL_HOME)/include)
NCCL_LIB  := $(if $(NCCL_HOME),-L$(NCCL_HOME)/lib -L$(NCCL_HOME)/lib64 -L$(NCCL_HOME)/lib/x86_64-linux-gnu)
HAVE_GPU  := $(if $(NVCC),$(if $(NCCL_HOME),1))
NVFLAGS   ?= -O3 -std=c++17 -arch=$(CUDA_ARCH) -lineinfo -Xcompiler -Wall
CUDA_LIBS := -L$(CUDA_HOME)/lib64 $(NCCL_LIB) -lcublasLt -lcublas -lnccl -lcudart -lrt -lpthread -lm

ALL_CFLAGS = $(CSTD) $(WARN) $(OPT) $(SAN) $(CFLAGS)

CLI_SRCS     := $(sort $(wildcard examples/cli_*.c))
TEST_SRCS    := $(sort $(wildcard tests/test_*.c))
EXAMPLE_SRCS := $(filter-out examples/pipepar.c $(CLI_SRCS),$(wildcard examples/*.c))
EXAMPLES     := $(patsubst examples/%.c,$(BUILD)/%,$(EXAMPLE_SRCS))
BENCH_SRCS   := $(wildcard bench/*.c)
BENCHES      := $(patsubst bench/%.c,$(BUILD)/bench_%,$(BENCH_SRCS))
GPU_EXAMPLES := $(patsubst examples/%.cu,$(BUILD)/%,$(wildcard examples/*.cu))
GPU_TESTS    := $(patsubst tests/gpu/%.cu,$(BUILD)/gpu/%,$(wildcard tests/gpu/test_*.cu))
GPU_TESTS_C  := $(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/test_*.c))
# host tests of pipepar_nccl.c's internals (it is #included): they need its headers and libraries,
# not a GPU, so `make test` runs them wherever those are
GPU_HOST_TESTS := $(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/host_*.c))
GPU_BENCHES  := $(patsubst bench/%.cu,$(BUILD)/bench_%,$(wildcard bench/*.cu))
GPU_ALL      := $(if $(HAVE_GPU),$(BUILD)/pipepar_cuda.o $(BUILD)/pipepar_nccl.o $(GPU_EXAMPLES) $(GPU_TESTS) $(GPU_TESTS_C) $(GPU_HOST_TESTS) $(GPU_BENCHES))

.PHONY: all host gpu demo test test-host test-gpu bench clean help
help:
	@echo "make            build everything this machine can (GPU parts where nvcc and NCCL are)"
	@echo "make demo       train a small model pipeline-parallel on CPU threads, with its schedule"
	@echo "make test       every host test: plain, ASan+UBSan, TSan, the CLI, compile checks (CI's run)"
	@echo "make test-gpu   the GPU and NCCL tests (on a machine with NVIDIA GPUs; NCCL tests want 2)"
	@echo "make bench      the host benchmarks (bench/RESULTS.md has the GPU ones and their commands)"
	@echo "make host       only the host parts: build/pipepar (the CLI), the examples, the test runner"
	@echo "make clean      remove build/, build-asan/, build-tsan/"
	@echo "Variables: CUDA_HOME, NCCL_HOME, CUDA_ARCH (GPU build), CC, CFLAGS"

all: host $(GPU_ALL)
host: $(BUILD)/pipepar $(BUILD)/run_tests $(EXAMPLES) $(BENCHES)
gpu: $(GPU_ALL)

$(BUILD)/.dir:
	@mkdir -p $(BUILD)/gpu && touch $@

$(BUILD)/cli_commands.gen.h: $(CLI_SRCS) | $(BUILD)/.dir
	@{ printf '#define PP_CLI_COMMANDS(X) \\\n'; \
	   sed -n 's/^int pp_cli_\([a-z_0-9]*\)(int argc.*/    X(\1) \\/p' $(CLI_SRCS); echo; } > $@

$(BUILD)/suites.gen.h: $(TEST_SRCS) | $(BUILD)/.dir
	@{ printf '#define PP_SUITES(X) \\\n'; \
	   for f in $(TEST_SRCS); do n=$${f#tests/test_}; echo "    X($${n%.c}) \\"; done; echo; } > $@

$(BUILD)/pipepar: examples/pipepar.c examples/cli.h $(CLI_SRCS) $(BUILD)/cli_commands.gen.h pipepar.h
	$(CC) $(ALL_CFLAGS) -I$(BUILD) -o $@ examples/pipepar.c $(CLI_SRCS) $(LDLIBS)

$(BUILD)/run_tests: tests/run_tests.c tests/impl.c tests/pp_test.h $(TEST_SRCS) $(BUILD)/suites.gen.h pipepar.h
	$(CC) $(ALL_CFLAGS) -I$(BUILD) -o $@ tests/run_tests.c tests/impl.c $(TEST_SRCS) $(LDLIBS)

$(BUILD)/%: examples/%.c pipepar.h | $(BUILD)/.dir
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LDLIBS)
# examples whose model lives in a header of its own
$(BUILD)/gpt: examples/gpt_model.h
$(BUILD)/mimo_threads: examples/mimo_model.h

$(BUILD)/bench_%: bench/%.c pipepar.h | $(BUILD)/.dir
	$(CC) $(CSTD) $(WARN) -O2 -g $(CFLAGS) -o $@ $< $(LDLIBS)

# --- GPU companions (need nvcc and NCCL) ---------------------------------------------------
$(BUILD)/pipepar_impl.o: tests/impl.c pipepar.h | $(BUILD)/.dir
	$(CC) $(CSTD) $(WARN) -O2 -g -c -o $@ $<

$(BUILD)/pipepar_cuda.o: pipepar_cuda.cu pipepar.h | $(BUILD)/.dir
	$(NVCC) $(NVFLAGS) -c -o $@ $<

$(BUILD)/pipepar_nccl.o: pipepar_nccl.c pipepar.h | $(BUILD)/.dir
	$(CC) $(CSTD) $(WARN) -O2 -g -I$(CUDA_HOME)/include $(NCCL_INC) -c -o $@ $<

GPU_OBJS := $(BUILD)/pipepar_cuda.o $(BUILD)/pipepar_nccl.o $(BUILD)/pipepar_impl.o

$(BUILD)/%: examples/%.cu $(GPU_OBJS)
	$(NVCC) $(NVFLAGS) $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS)

$(BUILD)/gpu/%: tests/gpu/%.cu $(GPU_OBJS) tests/pp_test.h
	$(NVCC) $(NVFLAGS) $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS)

$(BUILD)/gpu/%: tests/gpu/%.c $(GPU_OBJS) tests/pp_test.h
	$(CC) $(CSTD) $(WARN) -O2 -g -I$(CUDA_HOME)/include $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS) -lstdc++

$(BUILD)/gpu/host_%: tests/gpu/host_%.c pipepar_nccl.c $(BUILD)/pipepar_impl.o $(BUILD)/pipepar_cuda.o
	$(CC) $(CSTD) $(WARN) -O2 -g -I$(CUDA_HOME)/include $(NCCL_INC) -o $@ $< $(BUILD)/pipepar_impl.o \
	    $(BUILD)/pipepar_cuda.o $(CUDA_LIBS) -lstdc++

$(BUILD)/bench_%: bench/%.cu $(GPU_OBJS)
	$(NVCC) $(NVFLAGS) $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS)

# --- the README's commands -------------------------------------------------------------------
demo: host
	@if [ -x $(BUILD)/mlp_threads ]; then \
	   $(BUILD)/mlp_threads --pp 4 --vpp 2 --mb 8 --schedule interleaved --steps 20; \
	 else \
	   $(BUILD)/pipepar schedule --kind interleaved --pp 4 --vpp 2 --mb 8 --format text; fi

test:
	@bash tests/run_all.sh

test-gpu: gpu
	@bash tests/gpu/run_all.sh $(BUILD)

bench: host
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

clean:
	rm -rf $(BUILD) build-asan build-tsan
