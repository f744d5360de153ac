// Assertions for the C++ tests: a failed CHECK prints where and what, then exits 1.
#ifndef GMP_CXX_TESTS_CHECK_HPP
#define GMP_CXX_TESTS_CHECK_HPP

#include <cstdio>
#include <cstdlib>

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            std::exit(1);                                                               \
        }                                                                               \
    } while (0)

// Runs `stmt`, which must throw std::system_error with errno value `errnum`.
#define CHECK_ERRNO(stmt, errnum)                                                          \
    do {                                                                                 \
        bool thrown_ = false;                                                            \
        try {                                                                            \
            stmt;                                                                        \
        } catch (const std::system_error &e_) {                                          \
            thrown_ = e_.code() == std::error_code((errnum), std::generic_category()) &&   \
                      e_.code() == std::errc(errnum);                                      \
        }                                                                                \
        CHECK(thrown_);                                                                  \
    } while (0)

#endif
