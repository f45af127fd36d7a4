# memvirt_add_test(NAME <name> SOURCES <src...> [LIBS <lib...>] [LABELS <label...>]
#                  [ENV <VAR=value...>] [TIMEOUT <seconds>] [SERIAL])
# A GoogleTest binary registered with ctest as one test per TEST() (gtest_discover_tests).
# Label "unit" is added unless LABELS is given; "slow" tests are excluded from sanitizer runs
# by .ci/run only if they are labelled so. SERIAL: ctest runs these tests alone (timing-sensitive
# tests, e.g. bandwidth models), never beside others under ctest -j.
function(memvirt_add_test)
  cmake_parse_arguments(T "SERIAL" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ENV" ${ARGN})
  if(NOT BUILD_TESTS)
    return()
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(T_SERIAL)
    set(T_SERIAL TRUE)
  else()
    set(T_SERIAL FALSE)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main
                                          Threads::Threads)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${MEMVIRT_TEST_BIN_DIR})
  # Note [test properties]: gtest_discover_tests(PROPERTIES ...) flattens list values, so a
  # second label or environment entry would be lost. Instead the discovered test names
  # (TEST_LIST) are given their properties by an include file that ctest reads after the
  # discovery file.
  gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 60 TEST_LIST ${T_NAME}_TESTS)
  set(props_file ${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_properties.cmake)
  string(CONCAT props_content
    "if(${T_NAME}_TESTS)\n"
    "  set_tests_properties(\${${T_NAME}_TESTS} PROPERTIES\n"
    "    LABELS [==[${T_LABELS}]==]\n"
    "    TIMEOUT ${T_TIMEOUT}\n"
    "    RUN_SERIAL ${T_SERIAL}\n"
    "    ENVIRONMENT [==[${T_ENV}]==])\n"
    "endif()\n")
  # file(GENERATE) evaluates generator expressions in ENV (e.g. $<TARGET_FILE:...>).
  file(GENERATE OUTPUT ${props_file} CONTENT "${props_content}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${props_file})
endfunction()

# memvirt_use_sim_driver(<target>)
# Links <target> the way an unmodified CUDA application is linked (toolkit stub, -lcuda) and
# gives it a RUNPATH to build/lib/sim, so it runs on the simulated GPU without LD_LIBRARY_PATH.
# LD_LIBRARY_PATH still takes precedence (RUNPATH semantics): pointing it at a real driver's
# directory runs the same binary on a GPU.
function(memvirt_use_sim_driver target)
  target_link_libraries(${target} PRIVATE cuda::stub)
  set_property(TARGET ${target} APPEND PROPERTY BUILD_RPATH ${MEMVIRT_SIM_LIB_DIR})
  if(TARGET memsim_cuda)
    add_dependencies(${target} memsim_cuda)
  endif()
endfunction()
