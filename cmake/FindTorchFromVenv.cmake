# Locates LibTorch inside the pinned PyPI torch wheel that packaging/install-deps.sh installs
# into a virtual environment outside the checkout, via torch.utils.cmake_prefix_path.
set(FP4LAB_TORCH_VERSION 2.11.0)
if(DEFINED ENV{FP4LAB_VENV})
  set(_fp4lab_default_venv "$ENV{FP4LAB_VENV}")
elseif(DEFINED ENV{XDG_CACHE_HOME})
  set(_fp4lab_default_venv "$ENV{XDG_CACHE_HOME}/fp4lab/venv-torch-${FP4LAB_TORCH_VERSION}")
else()
  set(_fp4lab_default_venv "$ENV{HOME}/.cache/fp4lab/venv-torch-${FP4LAB_TORCH_VERSION}")
endif()
set(FP4LAB_PYTHON "${_fp4lab_default_venv}/bin/python" CACHE FILEPATH
    "Python of the virtual environment that holds the torch wheel")

if(NOT Torch_DIR)
  if(NOT EXISTS "${FP4LAB_PYTHON}")
    message(FATAL_ERROR "No torch virtual environment at ${FP4LAB_PYTHON}. "
                        "Run packaging/install-deps.sh first (or pass -DFP4LAB_PYTHON=...).")
  endif()
  execute_process(COMMAND "${FP4LAB_PYTHON}" -W ignore -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path, end='')"
                  OUTPUT_VARIABLE _fp4lab_torch_prefix RESULT_VARIABLE _fp4lab_rc)
  if(NOT _fp4lab_rc EQUAL 0)
    message(FATAL_ERROR "${FP4LAB_PYTHON} cannot import torch; rerun packaging/install-deps.sh")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${_fp4lab_torch_prefix}")
endif()
# The wheel's CMake config adds -gencode flags for every architecture it was built for (sm_50
# among them, which nvcc 13 refuses) to CMAKE_CUDA_FLAGS unless told which ones to use.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "")
  foreach(_arch IN LISTS FP4LAB_CUDA_ARCHITECTURES)
    string(REGEX REPLACE "([0-9]+)([0-9])$" "\\1.\\2" _dotted "${_arch}")
    list(APPEND TORCH_CUDA_ARCH_LIST "${_dotted}")
  endforeach()
endif()
find_package(Torch REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION} from ${Torch_DIR}")

# LibTorch's CPU parallelism is OpenMP, and at::parallel_for is a header template: code of ours
# that calls it must be compiled with -fopenmp, or it silently runs on one thread. It must then use
# the OpenMP runtime the wheel ships (the one libtorch_cpu loads), so that one runtime and one
# thread pool serve LibTorch and the engine: FP4LAB_TORCH_OPENMP is that library.
set(_fp4lab_torch_gomp "${TORCH_INSTALL_PREFIX}/lib/libgomp.so.1")
if(EXISTS "${_fp4lab_torch_gomp}")
  set(FP4LAB_TORCH_OPENMP "${_fp4lab_torch_gomp}")
else()
  find_package(OpenMP REQUIRED COMPONENTS CXX)
  set(FP4LAB_TORCH_OPENMP OpenMP::OpenMP_CXX)
endif()
message(STATUS "OpenMP runtime for at::parallel_for: ${FP4LAB_TORCH_OPENMP}")
