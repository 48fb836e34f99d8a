# Each tests/test_*.c is one cmocka program; each tests/test_*.sh is a shell test that drives the
# real `sdp` binary (bad input, resume, MPI runs). Both see the same environment.
set(SDP_TEST_TEXT "${CMAKE_SOURCE_DIR}/../shared/data/tinyshakespeare.txt"
    CACHE FILEPATH "Real text used by end-to-end tests")
# The tests start about a thousand MPI processes. Two Open MPI start-up costs that none of them
# needs are left out: the psm component's probe for QLogic hardware, which sleeps about 0.25 s in
# every MPI_Init, and the daemon that a process started without mpiexec forks for itself. Open MPI
# picks the same transport (ob1: shared memory and TCP) with or without them.
set(SDP_TEST_ENV
    "SDP_BIN=$<TARGET_FILE:sdp>"
    "SDP_TEST_TEXT=${SDP_TEST_TEXT}"
    "SDP_TEST_TMP=${CMAKE_BINARY_DIR}/test_tmp"
    "SDP_BUILD_DIR=${CMAKE_BINARY_DIR}"
    "MPIEXEC=${MPIEXEC_EXECUTABLE}"
    "OMPI_ALLOW_RUN_AS_ROOT=1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
    "OMPI_MCA_rmaps_base_oversubscribe=1" "OMP_NUM_THREADS=1"
    "OMPI_MCA_mtl=^ofi,psm,psm2" "OMPI_MCA_ess_singleton_isolated=1")

file(GLOB SDP_C_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
list(FILTER SDP_C_TESTS EXCLUDE REGEX "test_backend_ops\\.c$") # below: it takes an argument
list(FILTER SDP_C_TESTS EXCLUDE REGEX "test_plan_fast\\.c$")   # below: it needs src/train
foreach(src ${SDP_C_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE sdpcore PkgConfig::CMOCKA)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${SDP_TEST_ENV}" TIMEOUT 300)
endforeach()

# tests/mpi_*.c are MPI programs that the shell tests launch with mpiexec on several ranks.
file(GLOB SDP_MPI_PROGRAMS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/mpi_*.c)
foreach(src ${SDP_MPI_PROGRAMS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE sdptrain sdp_nocuda)
  list(APPEND SDP_TEST_ENV "SDP_${name}=$<TARGET_FILE:${name}>")
endforeach()

file(GLOB SDP_SH_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.sh)
foreach(src ${SDP_SH_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME ${name} COMMAND bash ${src})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${SDP_TEST_ENV}" TIMEOUT 600
                                           SKIP_RETURN_CODE 77)
endforeach()

# sdp plan's fast paths against their reference, which live in src/train.
add_executable(test_plan_fast ${CMAKE_SOURCE_DIR}/tests/test_plan_fast.c)
target_link_libraries(test_plan_fast PRIVATE sdptrain sdp_nocuda PkgConfig::CMOCKA)
add_test(NAME test_plan_fast COMMAND test_plan_fast)
set_tests_properties(test_plan_fast PROPERTIES ENVIRONMENT "${SDP_TEST_ENV}" TIMEOUT 300)

# Every op of the backend table against the CPU backend: on the emulated device here (bitwise),
# and on CUDA where the CUDA backend is built (CMakeLists.txt links it there and adds that test).
add_executable(test_backend_ops ${CMAKE_SOURCE_DIR}/tests/test_backend_ops.c)
target_link_libraries(test_backend_ops PRIVATE sdpcore)
add_test(NAME test_backend_ops_emulated COMMAND test_backend_ops emulated)
set_tests_properties(test_backend_ops_emulated PROPERTIES ENVIRONMENT "${SDP_TEST_ENV}" TIMEOUT 300)

# The fused CUDA attention kernels (src/ops/cuda/flash_attention.cuh) run on the CPU under the
# small CUDA emulation of tests/cuda_emu/, so their arithmetic is checked on every machine with a
# C++ compiler, GPU or not. Not in the fuzz build, whose flags are clang's alone.
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER AND NOT SDP_FUZZ)
  enable_language(CXX)
  add_executable(test_flash_emulated ${CMAKE_SOURCE_DIR}/tests/cuda_emu/test_flash_emulated.cpp
                                     ${CMAKE_SOURCE_DIR}/tests/cuda_emu/cuda_emu.cpp)
  target_include_directories(test_flash_emulated PRIVATE ${CMAKE_SOURCE_DIR}/src
                                                         ${CMAKE_SOURCE_DIR}/include
                                                         ${CMAKE_SOURCE_DIR}/tests/cuda_emu)
  set_target_properties(test_flash_emulated PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  add_test(NAME test_flash_emulated COMMAND test_flash_emulated)
  set_tests_properties(test_flash_emulated PROPERTIES TIMEOUT 300)
  # The CUDA GEMM's bf16-operand slicing (src/ops/cuda/gemm_slices.h), with CPU stand-ins.
  add_executable(test_gemm_slices ${CMAKE_SOURCE_DIR}/tests/cuda_emu/test_gemm_slices.cpp)
  target_include_directories(test_gemm_slices PRIVATE ${CMAKE_SOURCE_DIR}/src)
  set_target_properties(test_gemm_slices PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  add_test(NAME test_gemm_slices COMMAND test_gemm_slices)
else()
  message(STATUS "sdp: no C++ compiler: test_flash_emulated and test_gemm_slices are not built")
endif()
