# bench_cuda: CUDA kernel throughput against a device copy of the same bytes. Included from
# tests/bench/CMakeLists.txt when FP4LAB_CUDA is on: if(FP4LAB_CUDA) include(cuda.cmake) endif()
add_executable(bench_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_cuda.cpp)
# fp4lab_kernels_cuda brings CUDA::cudart (and cuda_runtime.h) along as a PUBLIC dependency.
target_link_libraries(bench_cuda PRIVATE fp4lab_kernels fp4lab_kernels_cuda)
add_test(NAME bench_cuda COMMAND bench_cuda)
set_tests_properties(bench_cuda PROPERTIES LABELS "bench")
