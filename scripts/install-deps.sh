#!/usr/bin/env bash
# Installs the system packages the build and the full test suite need on a fresh Debian
# machine (as root; nothing is installed when everything is there already): C and C++
# compilers, binutils, Python, Go (the benchmarks' other side), GNU MP's headers (the
# coexistence tests), cmake/pkg-config (the CMake package tests), redis-server, hiredis,
# memcached, libmemcached and libcurl (the interposer's tests), PostgreSQL with libpq, OpenSSL and SQLite (the
# real-library tests), gdb and valgrind (the debugging tests).
# README's second command and .ci/run both run it before `cargo test`.
set -euo pipefail
need_apt=()
for tool in cc c++ nm readelf python3 go; do
    command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool")
done
# GNU MP's headers (gmp.h, gmpxx.h) and libraries: tests/header.rs compiles ours with
# them, tests/cmake.rs builds a program that uses both libraries.
{ [ -f /usr/include/gmp.h ] || [ -f /usr/include/x86_64-linux-gnu/gmp.h ]; } \
    && [ -f /usr/include/gmpxx.h ] || need_apt+=(gmpdev)
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq build-essential binutils python3 golang-go libgmp-dev >/dev/null
fi
# The CMake build and package tests (tests/cmake.rs) and the C++ tests (tests/cxx.rs).
need_cmake=()
for tool in cmake pkg-config g++ readelf; do
    command -v "$tool" >/dev/null 2>&1 || need_cmake+=("$tool")
done
if [ ${#need_cmake[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq cmake pkg-config g++ binutils >/dev/null
fi
# The resolver's address-selection test (tests/c_interpose.rs: resolver_addrsel) gives a
# network namespace its addresses with ip.
if ! command -v ip >/dev/null 2>&1 && [ ! -x /usr/sbin/ip ] && [ ! -x /sbin/ip ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq iproute2 >/dev/null
fi
# The interposer's tests run unmodified libraries: hiredis against a local redis-server,
# libmemcached against a local memcached, and libcurl (tests/c_interpose.rs:
# interpose_hiredis, interpose_memcached, interpose_curl).
need_interpose=()
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || need_interpose+=(redis-server)
[ -f /usr/include/hiredis/hiredis.h ] || need_interpose+=(libhiredis-dev)
command -v memcached >/dev/null 2>&1 || [ -x /usr/bin/memcached ] || need_interpose+=(memcached)
[ -f /usr/include/libmemcached/memcached.h ] || need_interpose+=(libmemcached-dev)
[ -f /usr/include/curl/curl.h ] || [ -f /usr/include/x86_64-linux-gnu/curl/curl.h ] || need_interpose+=(libcurl4-openssl-dev)
if [ ${#need_interpose[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_interpose[@]}" >/dev/null
fi
# The real-library tests (tests/c_reallib.rs: reallib_*): libpq against a PostgreSQL server
# the test starts (initdb and postgres from the postgresql package), OpenSSL's libssl and
# libcrypto, SQLite.
need_reallibs=()
[ -f /usr/include/postgresql/libpq-fe.h ] || need_reallibs+=(libpq-dev)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_reallibs+=(postgresql)
[ -f /usr/include/openssl/ssl.h ] || need_reallibs+=(libssl-dev)
command -v openssl >/dev/null 2>&1 || need_reallibs+=(openssl)
[ -f /usr/include/sqlite3.h ] || need_reallibs+=(libsqlite3-dev)
if [ ${#need_reallibs[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_reallibs[@]}" >/dev/null
fi
# gdb and valgrind, for the gdb script's test and the valgrind tests (c_debug gdb_goroutines,
# c_sanitizers valgrind_*).
if ! command -v gdb >/dev/null 2>&1 || ! command -v valgrind >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq gdb valgrind >/dev/null
fi
