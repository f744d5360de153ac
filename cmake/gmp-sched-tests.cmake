# The C tests (c-tests/*.c) and the C++ tests (cxx-tests/*.cpp), compiled as the C test
# drivers (tests/c_*.rs, harness in tests/support/ctest.rs) and tests/cxx.rs compile them
# (without the sanitizers: those runs belong to cargo test) and registered with ctest:
# `ctest -R '^c\.'`, `ctest -R '^cxx\.'`. A program's plain run (no arguments) is its
# test, or for the programs that take a case name, one test per case listed below; the
# misuse cases that must abort, and the programs that need what only the tests/c_*.rs
# drivers set up (arguments, the library's path, a preemption-stress environment), are
# checked by cargo test only.

# Environments the C tests need, as the tests/c_*.rs drivers give them.
set(gmp_sched_test_env_maxprocs GMP_MAXPROCS=3)
set(gmp_sched_test_env_steals GMP_MAXPROCS=2)
set(gmp_sched_test_env_attrs GMP_MAXPROCS=2)
set(gmp_sched_test_env_chan_basic GMP_MAXPROCS=2)
set(gmp_sched_test_env_select_basic GMP_MAXPROCS=2)
set(gmp_sched_test_env_dump GMP_MAXPROCS=2)
# Tests that read backtraces and function names (FRAME_FLAGS in tests/support/ctest.rs).
set(gmp_sched_test_frames dump deadlock trace sanitize)

# Programs run once per case (argv[1]).
set(gmp_sched_test_cases_feature_mix
    timeout_race locked_timer shrink_timers pingpong_fair spin_fair timer_order)
set(gmp_sched_test_cases_netpoll echo10k deadline close timer pipes idle badinput)
set(gmp_sched_test_cases_preempt hog fair)
set(gmp_sched_test_cases_pthread_exit_goroutine locked)
# Built, not registered: cargo test runs them with what they need.
set(gmp_sched_c_tests_cargo_only dlclose_reload config_effects interpose resolver)
# Not built here: they link third-party libraries (hiredis, libmemcached, libcurl, OpenSSL, SQLite,
# libpq) that cargo test finds, and the reallib_* programs need a server it starts.
set(gmp_sched_c_tests_not_built interpose_hiredis interpose_memcached interpose_curl interpose_scope
    reallib_openssl reallib_sqlite reallib_pq)

file(GLOB gmp_sched_c_tests CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/c-tests/*.c")
foreach(src IN LISTS gmp_sched_c_tests)
    get_filename_component(name "${src}" NAME_WE)
    if(name IN_LIST gmp_sched_c_tests_not_built)
        continue()
    endif()
    add_executable(c_test_${name} "${src}")
    set_target_properties(c_test_${name} PROPERTIES
        OUTPUT_NAME ${name}
        RUNTIME_OUTPUT_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/c-tests"
        C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
    target_compile_options(c_test_${name} PRIVATE -Wall -Wextra -Werror -Wpedantic)
    target_link_libraries(c_test_${name} PRIVATE gmp::sched Threads::Threads m)
    if(name IN_LIST gmp_sched_test_frames)
        target_compile_options(c_test_${name} PRIVATE -fno-omit-frame-pointer)
        target_link_options(c_test_${name} PRIVATE -rdynamic)
    endif()
    if(name IN_LIST gmp_sched_c_tests_cargo_only)
        continue()
    endif()
    if(DEFINED gmp_sched_test_cases_${name})
        set(tests "")
        foreach(case IN LISTS gmp_sched_test_cases_${name})
            add_test(NAME c.${name}.${case} COMMAND c_test_${name} ${case}
                     WORKING_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/c-tests")
            list(APPEND tests c.${name}.${case})
        endforeach()
    else()
        add_test(NAME c.${name} COMMAND c_test_${name}
                 WORKING_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/c-tests")
        set(tests c.${name})
    endif()
    # parallel_speedup measures a speed-up: nothing else may run beside it.
    set_tests_properties(${tests} PROPERTIES TIMEOUT 300 RUN_SERIAL ON)
    if(DEFINED gmp_sched_test_env_${name})
        set_tests_properties(${tests} PROPERTIES ENVIRONMENT "${gmp_sched_test_env_${name}}")
    endif()
endforeach()

file(GLOB gmp_sched_cxx_tests CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/cxx-tests/*.cpp")
foreach(src IN LISTS gmp_sched_cxx_tests)
    get_filename_component(name "${src}" NAME_WE)
    add_executable(cxx_test_${name} "${src}")
    set_target_properties(cxx_test_${name} PROPERTIES
        OUTPUT_NAME ${name}
        RUNTIME_OUTPUT_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/cxx-tests"
        CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
    target_compile_options(cxx_test_${name} PRIVATE -Wall -Wextra -Werror -pedantic)
    target_link_libraries(cxx_test_${name} PRIVATE gmp::sched Threads::Threads)
    add_test(NAME cxx.${name} COMMAND cxx_test_${name})
    set_tests_properties(cxx.${name} PROPERTIES TIMEOUT 300 RUN_SERIAL ON)
endforeach()
