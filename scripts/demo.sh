#!/usr/bin/env bash
# Builds libgmp (release) and runs examples/demo.c with the scheduler trace on.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
mkdir -p target/demo
# Link by path (-lgmp would find GNU MP); the rpath finds libgmp.so.0 at run time.
cc -std=c11 -O2 -Wall -Wextra -Werror -Wpedantic -Iinclude examples/demo.c \
   "$PWD/target/release/libgmp.so" -Wl,-rpath,"$PWD/target/release" -o target/demo/demo
GMP_DEBUG="${GMP_DEBUG:-schedtrace=100}" ./target/demo/demo
