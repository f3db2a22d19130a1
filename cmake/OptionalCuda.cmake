# The GPU test programs and benchmark need a CUDA toolkit to build (ibemu
# itself never does: the provider loads the CUDA driver at run time). Sets
# IBEMU_HAVE_CUDA and enables the CUDA language when a toolkit is found.
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
set(IBEMU_HAVE_CUDA OFF)
if(CMAKE_CUDA_COMPILER)
  enable_language(CUDA)
  find_package(CUDAToolkit)
  if(CUDAToolkit_FOUND)
    set(IBEMU_HAVE_CUDA ON)
  endif()
endif()
if(NOT IBEMU_HAVE_CUDA)
  message(STATUS "CUDA not found: the GPU test programs (gpu_rdma, gpu_write_bw) are not built")
endif()

# A CUDA program of the tests: Hopper and Ampere code, C++17 for nvcc.
function(ibemu_cuda_program name source)
  add_executable(${name} ${source})
  set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES "80;90" CUDA_STANDARD 17)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/programs)
  target_link_libraries(${name} PRIVATE ibemu_test_rc_common ${IBEMU_LIBIBVERBS}
                        CUDA::cuda_driver CUDA::cudart_static)
endfunction()
