# pipepar-deps.cmake — what pipepar's two targets link with. Included by the vendored build
# (CMakeLists.txt) and by the installed package (pipepar-config.cmake), so both link alike.
#
#   PIPEPAR_LINK            pipepar::pipepar's libraries: Threads::Threads, and libm where there is one
#   pipepar_find_gpu_deps() looks for the companions' dependencies and sets
#     PIPEPAR_GPU_DEPS_MISSING what was not found, "" when everything was
#     PIPEPAR_GPU_LINK         CUDA::cudart (the toolkit's runtime and headers), NCCL's library,
#                              the C++ runtime (pipepar_cuda.cu is compiled as C++), librt (shm_open)
#     PIPEPAR_NCCL_INCLUDE_DIR where nccl.h is (to build pipepar_nccl.c)
# NCCL is looked for under NCCL_HOME (a CMake or an environment variable), then in the CUDA
# toolkit's directories, then in the system's. The toolkit: CUDAToolkit_ROOT, or nvcc on PATH,
# or /usr/local/cuda (CMake's FindCUDAToolkit).

find_package(Threads QUIET)
set(PIPEPAR_LINK Threads::Threads)
find_library(PIPEPAR_M_LIBRARY m)
mark_as_advanced(PIPEPAR_M_LIBRARY)
if(PIPEPAR_M_LIBRARY)
  list(APPEND PIPEPAR_LINK m)
endif()

macro(pipepar_find_gpu_deps)
  set(PIPEPAR_GPU_DEPS_MISSING "")
  set(PIPEPAR_GPU_LINK "")
  find_package(CUDAToolkit QUIET)
  set(_pipepar_nccl_hints ${NCCL_HOME} $ENV{NCCL_HOME} ${PIPEPAR_NCCL_HINT})
  find_path(PIPEPAR_NCCL_INCLUDE_DIR nccl.h
            HINTS ${_pipepar_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(PIPEPAR_NCCL_LIBRARY nccl
               HINTS ${_pipepar_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
  mark_as_advanced(PIPEPAR_NCCL_INCLUDE_DIR PIPEPAR_NCCL_LIBRARY)
  if(NOT TARGET CUDA::cudart)
    string(APPEND PIPEPAR_GPU_DEPS_MISSING " the CUDA toolkit (set CUDAToolkit_ROOT);")
  endif()
  if(NOT PIPEPAR_NCCL_LIBRARY)
    string(APPEND PIPEPAR_GPU_DEPS_MISSING " NCCL's library (set NCCL_HOME);")
  endif()
  if(NOT PIPEPAR_GPU_DEPS_MISSING)
    set(PIPEPAR_GPU_LINK CUDA::cudart ${PIPEPAR_NCCL_LIBRARY} stdc++)
    if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
      list(APPEND PIPEPAR_GPU_LINK rt)
    endif()
  endif()
endmacro()
