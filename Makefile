# pipepar — build, demo, tests, benchmarks, install.
#
#   make            everything this machine can build: the CLI, examples, test runner and host
#                   benchmarks; where nvcc and NCCL exist also the GPU companions as a library
#                   (build/libpipepar_gpu.a) and the GPU examples, tests and benchmarks
#   make demo       train a small MLP pipeline-parallel on CPU threads and draw its schedule
#   make test       all host tests: plain, ASan+UBSan, TSan; ends with "N passed, N failed"
#   make test-gpu   kernel and NCCL tests (on a machine with GPUs)
#   make bench      host benchmarks (bench/RESULTS.md records their numbers)
#   make install    the header, the CLI, pkg-config and CMake package files, and (where nvcc and
#                   NCCL exist) the companions' library, under PREFIX; `make uninstall` removes them
#   make help       these targets, one line each
#
# Overrides: CC, NVCC, CUDA_HOME (default /usr/local/cuda), NCCL_HOME (where include/nccl.h and
# lib/libnccl.so live; default: the system paths, then CUDA_HOME), CUDA_ARCH (default sm_90).
# Install: PREFIX (default /usr/local), DESTDIR (a staging root put before every path), and
# BINDIR, INCLUDEDIR, LIBDIR, DOCDIR (defaults under PREFIX).

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
GPU_EXAMPLES := $(patsubst examples/%.cu,$(BUILD)/%,$(wildcard examples/*.cu)) $(BUILD)/gpt_gpu_fp32
GPU_TESTS    := $(patsubst tests/gpu/%.cu,$(BUILD)/gpu/%,$(wildcard tests/gpu/test_*.cu))
GPU_TESTS_C  := $(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/test_*.c))
# host tests of pipepar_nccl.c's internals (it is #included) and of examples/gpt_gpu.cu's host side
# (nvcc): they need the headers and libraries, not a GPU, so `make test` runs them wherever those are
GPU_HOST_TESTS := $(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/host_*.c)) $(BUILD)/gpu/host_gpt_gpu
GPU_BENCHES  := $(patsubst bench/%.cu,$(BUILD)/bench_%,$(wildcard bench/*.cu))
GPU_ALL      := $(if $(HAVE_GPU),$(BUILD)/libpipepar_gpu.a $(GPU_EXAMPLES) $(GPU_TESTS) $(GPU_TESTS_C) $(GPU_HOST_TESTS) $(GPU_BENCHES))

.PHONY: all host gpu demo test test-host test-gpu bench install uninstall clean help
all: host $(GPU_ALL)
host: $(BUILD)/pipepar $(BUILD)/run_tests $(EXAMPLES) $(BENCHES)
gpu: $(GPU_ALL)

help:
	@echo "make            build everything this machine can (GPU parts where nvcc and NCCL are)"
	@echo "make demo       train a small model pipeline-parallel on CPU threads, with its schedule"
	@echo "make test       every host test: plain, ASan+UBSan, TSan, the CLI, compile checks (CI's run)"
	@echo "make test-gpu   the GPU and NCCL tests (on a machine with NVIDIA GPUs; NCCL tests want 2)"
	@echo "make bench      the host benchmarks (bench/RESULTS.md has the GPU ones and their commands)"
	@echo "make host       only the host parts: build/pipepar (the CLI), the examples, the test runner"
	@echo "make gpu        only the GPU parts: build/libpipepar_gpu.a, the GPU examples, tests, benchmarks"
	@echo "make install    header, CLI, pkg-config and CMake files (+ the GPU library) under PREFIX"
	@echo "make uninstall  remove what make install put there (same PREFIX and DESTDIR)"
	@echo "make clean      remove build/, build-asan/, build-tsan/"
	@echo "Variables: CUDA_HOME, NCCL_HOME, CUDA_ARCH (GPU build), CC, CFLAGS,"
	@echo "           PREFIX (/usr/local), DESTDIR, BINDIR, INCLUDEDIR, LIBDIR, DOCDIR (install)"

$(BUILD)/.dir:
	@mkdir -p $(BUILD)/gpu && touch $@

$(BUILD)/cli_commands.gen.h: $(CLI_SRCS) | $(BUILD)/.dir
	@{ printf '#define PP_CLI_COMMANDS(X) \\\n'; \
	   sed -n 's/^int pp_cli_\([a-z_0-9]*\)(int argc.*/    X(\1) \\/p' $(CLI_SRCS); echo; } > $@

$(BUILD)/suites.gen.h: $(TEST_SRCS) | $(BUILD)/.dir
	@{ printf '#define PP_SUITES(X) \\\n'; \
	   for f in $(TEST_SRCS); do n=$${f#tests/test_}; echo "    X($${n%.c}) \\"; done; echo; } > $@

# The CLI and the test runner are built from one object per source file, so that make -j spreads
# them over the cores (the sanitizer builds of `make test` are most of its compile time).
CLI_OBJS  := $(patsubst examples/%.c,$(BUILD)/obj/%.o,examples/pipepar.c $(CLI_SRCS))
TEST_OBJS := $(patsubst tests/%.c,$(BUILD)/obj/%.o,tests/run_tests.c tests/impl.c $(TEST_SRCS))

$(BUILD)/obj/.dir:
	@mkdir -p $(BUILD)/obj $(BUILD)/gpu && touch $@

$(BUILD)/obj/%.o: examples/%.c examples/cli.h examples/text_file.h pipepar.h | $(BUILD)/obj/.dir
	$(CC) $(ALL_CFLAGS) -I$(BUILD) -c -o $@ $<
$(BUILD)/obj/pipepar.o: $(BUILD)/cli_commands.gen.h

$(BUILD)/obj/%.o: tests/%.c tests/pp_test.h pipepar.h $(wildcard examples/*_model.h) | $(BUILD)/obj/.dir
	$(CC) $(ALL_CFLAGS) -I$(BUILD) -c -o $@ $<
$(BUILD)/obj/run_tests.o: $(BUILD)/suites.gen.h

$(BUILD)/pipepar: $(CLI_OBJS)
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJS) $(LDLIBS)

$(BUILD)/run_tests: $(TEST_OBJS)
	$(CC) $(ALL_CFLAGS) -o $@ $(TEST_OBJS) $(LDLIBS)

$(BUILD)/%: examples/%.c pipepar.h | $(BUILD)/.dir
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LDLIBS)
# examples whose model lives in a header of its own
$(BUILD)/gpt: examples/gpt_model.h
$(BUILD)/mimo_threads: examples/mimo_model.h
$(BUILD)/mlp_threads: examples/mlp_model.h
$(BUILD)/mlp_plan: examples/mlp_threads.c examples/mlp_model.h examples/text_file.h

$(BUILD)/bench_%: bench/%.c pipepar.h | $(BUILD)/.dir
	$(CC) $(CSTD) $(WARN) -O2 -g $(CFLAGS) -o $@ $< $(LDLIBS)

# --- GPU companions (need nvcc and NCCL) ---------------------------------------------------
$(BUILD)/pipepar_impl.o: tests/impl.c pipepar.h | $(BUILD)/.dir
	$(CC) $(CSTD) $(WARN) -O2 -g -c -o $@ $<

# position-independent, so that the installed library links into shared objects too
$(BUILD)/pipepar_cuda.o: pipepar_cuda.cu pipepar.h | $(BUILD)/.dir
	$(NVCC) $(NVFLAGS) -Xcompiler -fPIC -c -o $@ $<

$(BUILD)/pipepar_nccl.o: pipepar_nccl.c pipepar.h | $(BUILD)/.dir
	$(CC) $(CSTD) $(WARN) -O2 -g -fPIC -I$(CUDA_HOME)/include $(NCCL_INC) -c -o $@ $<

# the two companions as one library: what a GPU trainer links (make install puts it in LIBDIR)
$(BUILD)/libpipepar_gpu.a: $(BUILD)/pipepar_cuda.o $(BUILD)/pipepar_nccl.o
	rm -f $@ && $(AR) rcs $@ $^

GPU_OBJS := $(BUILD)/pipepar_cuda.o $(BUILD)/pipepar_nccl.o $(BUILD)/pipepar_impl.o

$(BUILD)/%: examples/%.cu $(wildcard examples/*.h) $(GPU_OBJS)
	$(NVCC) $(NVFLAGS) $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS)

# examples/gpt_gpu.cu in fp32 (its --selftest compares with the CPU model at fp32's precision)
$(BUILD)/gpt_gpu_fp32: examples/gpt_gpu.cu $(wildcard examples/*.h) $(GPU_OBJS)
	$(NVCC) $(NVFLAGS) -DGPT_GPU_FP32 $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS)

# examples/gpt_gpu.cu's host-side logic with cuBLASLt on the host (nvcc, no GPU needed; fp32)
$(BUILD)/gpu/host_gpt_gpu: tests/gpu/host_gpt_gpu.cu examples/gpt_gpu.cu $(wildcard examples/*.h) $(GPU_OBJS)
	$(NVCC) $(NVFLAGS) -DGPT_GPU_FP32 $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS)

$(BUILD)/gpu/%: tests/gpu/%.cu $(GPU_OBJS) tests/pp_test.h
	$(NVCC) $(NVFLAGS) $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS)

$(BUILD)/gpu/%: tests/gpu/%.c $(GPU_OBJS) tests/pp_test.h
	$(CC) $(CSTD) $(WARN) -O2 -g -I$(CUDA_HOME)/include $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS) -lstdc++

$(BUILD)/gpu/host_%: tests/gpu/host_%.c pipepar_nccl.c $(BUILD)/pipepar_impl.o $(BUILD)/pipepar_cuda.o
	$(CC) $(CSTD) $(WARN) -O2 -g -I$(CUDA_HOME)/include $(NCCL_INC) -o $@ $< $(BUILD)/pipepar_impl.o \
	    $(BUILD)/pipepar_cuda.o $(CUDA_LIBS) -lstdc++

$(BUILD)/bench_%: bench/%.cu $(GPU_OBJS)
	$(NVCC) $(NVFLAGS) $(NCCL_INC) -o $@ $< $(GPU_OBJS) $(CUDA_LIBS)

# --- make install ---------------------------------------------------------------------------
# Where nvcc and NCCL exist: the header, the CLI, build/libpipepar_gpu.a and both pkg-config
# files (pipepar: the header; pipepar-gpu: + the companions, CUDA's runtime, NCCL). Elsewhere the
# header and the CLI, pipepar.pc and the CMake package without pipepar::gpu.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
INCLUDEDIR ?= $(PREFIX)/include
LIBDIR     ?= $(PREFIX)/lib
DOCDIR     ?= $(PREFIX)/share/doc/pipepar
PCDIR      := $(LIBDIR)/pkgconfig
CMAKEDIR   := $(LIBDIR)/cmake/pipepar

# the header's PIPEPAR_VERSION_STRING
VERSION := $(shell sed -n 's/^[#]define PIPEPAR_VERSION_STRING "\([0-9.]*\)".*/\1/p' pipepar.h)

CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
NCCL_LIBDIR := $(patsubst %/,%,$(dir $(firstword $(wildcard $(addsuffix /libnccl.so,\
                   $(NCCL_HOME)/lib $(NCCL_HOME)/lib64 $(NCCL_HOME)/lib/x86_64-linux-gnu)))))
# what the companions need, no more: pipepar_cuda.o is C++ (libstdc++), pipepar_nccl.o uses shm_open
GPU_PC_LIBS := $(addprefix -L,$(sort $(CUDA_LIBDIR) $(NCCL_LIBDIR))) -lnccl -lcudart -lstdc++ -lrt

ifneq ($(filter install,$(MAKECMDGOALS)),)
$(foreach v,PREFIX INCLUDEDIR LIBDIR,$(if $(filter /%,$($(v))),,\
    $(error $(v)=$($(v)): must be an absolute path (the pkg-config and CMake files record it))))
$(if $(VERSION),,$(error pipepar.h: no PIPEPAR_VERSION_STRING "x.y.z" to version the package files))
endif

# the *.in templates filled in with this call's paths, version and toolkit (made on every install)
INSTALL_SUBST = sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@VERSION_MAJOR@|$(word 1,$(subst ., ,$(VERSION)))|g' \
    -e 's|@VERSION_MINOR@|$(word 2,$(subst ., ,$(VERSION)))|g' -e 's|@PREFIX@|$(PREFIX)|g' \
    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@HAVE_GPU@|$(if $(HAVE_GPU),TRUE,FALSE)|g' \
    -e 's|@NCCL_HOME@|$(NCCL_HOME)|g' -e 's|@CUDA_INCDIR@|$(CUDA_HOME)/include|g' -e 's|@GPU_LIBS@|$(GPU_PC_LIBS)|g'
.PHONY: FORCE
$(BUILD)/install/%: %.in FORCE | $(BUILD)/.dir
	@mkdir -p $(@D) && $(INSTALL_SUBST) $< > $@
$(BUILD)/install/%: cmake/%.in FORCE | $(BUILD)/.dir
	@mkdir -p $(@D) && $(INSTALL_SUBST) $< > $@

# what goes where: SOURCE>DESTINATION>MODE
INSTALL_ROWS := $(BUILD)/pipepar>$(BINDIR)/pipepar>755 \
    pipepar.h>$(INCLUDEDIR)/pipepar.h>644 \
    LICENSE>$(DOCDIR)/LICENSE>644 \
    $(BUILD)/install/pipepar.pc>$(PCDIR)/pipepar.pc>644 \
    $(BUILD)/install/pipepar-config.cmake>$(CMAKEDIR)/pipepar-config.cmake>644 \
    $(BUILD)/install/pipepar-config-version.cmake>$(CMAKEDIR)/pipepar-config-version.cmake>644 \
    cmake/pipepar-deps.cmake>$(CMAKEDIR)/pipepar-deps.cmake>644
INSTALL_ROWS_GPU := $(BUILD)/libpipepar_gpu.a>$(LIBDIR)/libpipepar_gpu.a>644 \
    $(BUILD)/install/pipepar-gpu.pc>$(PCDIR)/pipepar-gpu.pc>644
INSTALL_NOW := $(INSTALL_ROWS) $(if $(HAVE_GPU),$(INSTALL_ROWS_GPU))

install: $(foreach r,$(INSTALL_NOW),$(firstword $(subst >, ,$(r))))
	@$(foreach r,$(INSTALL_NOW),set -- $(subst >, ,$(r)) && install -d "$(DESTDIR)$$(dirname $$2)" && \
	    install -m $$3 $$1 "$(DESTDIR)$$2" && echo "installed $(DESTDIR)$$2" &&) true
	@$(if $(HAVE_GPU),,echo "no nvcc or NCCL here: installed without the GPU companions (no libpipepar_gpu.a, pipepar-gpu.pc or pipepar::gpu)")

uninstall:
	@$(foreach r,$(INSTALL_ROWS) $(INSTALL_ROWS_GPU),set -- $(subst >, ,$(r)) && \
	    if [ -e "$(DESTDIR)$$2" ]; then rm -f "$(DESTDIR)$$2" && echo "removed $(DESTDIR)$$2"; fi &&) true
	@rmdir "$(DESTDIR)$(CMAKEDIR)" "$(DESTDIR)$(DOCDIR)" 2>/dev/null || true

# --- the README's commands -------------------------------------------------------------------
demo: $(BUILD)/mlp_threads
	@$(BUILD)/mlp_threads --pp 4 --vpp 2 --mb 8 --schedule interleaved --steps 20

test:
	@bash tests/run_all.sh

test-gpu: host gpu
	@bash tests/gpu/run_all.sh $(BUILD)

bench: host
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

clean:
	rm -rf $(BUILD) build-asan build-tsan
