//! C API for time (gmp_now, gmp_sleep).
