#!/usr/bin/env bash
# Regenerates include/gmp-sched/gmp.h from src/ffi (the build script writes it to OUT_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet
out=$(ls -t target/debug/build/gmp-*/out/gmp.h | head -n 1)
cp "$out" include/gmp-sched/gmp.h
echo "include/gmp-sched/gmp.h updated from $out"
