# libFuzzer targets for every reader of outside bytes (fuzz/*.c), built with -DSDP_FUZZ=ON by
# clang (scripts/fuzz.sh). Every source is instrumented for coverage, ASan and UBSan, and built
# with SDP_FUZZ so that sdp_fatal returns to the harness instead of exiting.
# fuzz/ledger.c records what a reader holds through these, so that a rejected input leaks nothing.
set(SDP_FUZZ_WRAPPED malloc calloc realloc free sdp_alloc sdp_free open close fopen fdopen fclose
    gzopen gzbuffer gzclose mmap munmap glob globfree cJSON_Parse cJSON_ParseWithLengthOpts
    cJSON_Delete)
list(TRANSFORM SDP_FUZZ_WRAPPED PREPEND "-Wl,--wrap=" OUTPUT_VARIABLE SDP_FUZZ_WRAP_OPTIONS)
file(GLOB SDP_FUZZ_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/fuzz_*.c)
add_custom_target(fuzz_targets)
foreach(src ${SDP_FUZZ_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} ${CMAKE_SOURCE_DIR}/fuzz/ledger.c
                 ${CMAKE_SOURCE_DIR}/src/cli/report_run.c ${CMAKE_SOURCE_DIR}/src/cli/plan_calibration.c)
  target_link_libraries(${name} PRIVATE sdptrain sdp_nocuda)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer ${SDP_FUZZ_WRAP_OPTIONS})
  add_dependencies(fuzz_targets ${name})
endforeach()
