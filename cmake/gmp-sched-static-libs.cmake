# What a program linking libgmp.a (a Rust staticlib) needs besides it: the system
# libraries Rust's standard library uses on Linux, as `rustc --print native-static-libs`
# lists them (-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc; libc comes by default).
# Shared by the build tree and the installed package.
set(GMP_SCHED_STATIC_LIBS gcc_s util rt pthread m dl)
