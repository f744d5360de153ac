"""The interposer under LD_PRELOAD, from Python (tests/c_interpose.rs: interpose_preload).

Loads libgmp.so with ctypes and starts N goroutines whose function is `usleep`, looked
up in the process's global scope (ctypes.CDLL(None)), with 100,000 (µs) as argument, at
GOMAXPROCS=2. With libgmp.so preloaded, that `usleep` is the library's hook: the
goroutines park on timers, on a few threads, and all finish in about 100 ms. Without the
preload, ctypes' dlopen interposes nothing: `usleep` is libc's, and each goroutine sleeps
in the kernel on its thread; sysmon sees it there and has it give its processor up
(rt/unseen.rs), so they too finish in about 100 ms, but on a thread each. argv[1]:
"preload" or "dlopen" (which case the environment is).
"""
import ctypes
import os
import sys
import time

N = 20
mode = sys.argv[1]
lib = ctypes.CDLL(os.environ["GMP_LIB"])
lib.gmp_go.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.gmp_go.restype = ctypes.c_int64
lib.gmp_num_goroutine.restype = ctypes.c_int64
lib.gmp_maxprocs.argtypes = [ctypes.c_int]
assert lib.gmp_maxprocs(2) > 0

usleep = ctypes.cast(ctypes.CDLL(None).usleep, ctypes.c_void_p).value
hook = ctypes.cast(lib.usleep, ctypes.c_void_p).value
print(f"{mode}: global usleep is {'the hook' if usleep == hook else 'libc'}")
assert (usleep == hook) == (mode == "preload")

t0 = time.monotonic()
for _ in range(N):
    assert lib.gmp_go(usleep, 100000) > 0
while lib.gmp_num_goroutine() > 0:
    time.sleep(0.005)
dt = time.monotonic() - t0
threads = len(os.listdir("/proc/self/task"))
print(f"{mode}: {N} goroutines sleeping 100 ms with usleep took {dt:.3f} s, {threads} threads")
# Holding their processors, they would take N / 2 x 100 ms.
assert dt < 0.6, dt
if mode == "preload":
    assert threads < N, threads
else:
    assert threads >= N // 2, threads
