#!/usr/bin/env bash
# The aarch64 port on an aarch64 kernel: boots Debian's arm64 kernel under
# qemu-system-aarch64 (a `virt` machine with a GICv3, `-cpu max`: SVE, SVE2 and a PMU;
# two CPUs) with an initramfs of busybox, the cross toolchain's glibc and a small agent,
# shares this tree with it over 9p at the same path, and runs there what qemu-user
# cannot show:
# - the unseen-call path, which reads /proc/<tid>/syscall (qemu-user shows its own
#   x86-64 calls there): the contract tests of C code's own pthread locks, raw sleeps, a
#   raw terminal read and stdio bound to a thread, with their plain-libc reference runs
#   as they run on x86-64;
# - asynchronous preemption by the kernel's own source (a perf event), and preemption
#   beside raw system calls (preempt_soak, with the CPU-time timer);
# - guard pages, madvise, process_vm_readv and a real fork (the unit tests qemu-user
#   cannot pass);
# - the torture test and the fuzzer with every feature and op, pthread locks and fork
#   included.
# The test drivers run on the host under qemu-user and start each C program in the
# machine through scripts/aarch64-vm/run (GMP_TEST_RUNNER); the unit-test binary runs in
# the machine as a whole. Emulation keeps the host's memory order (x86-64 TSO), and its
# timings are not performance figures. HACKING.md, "aarch64", says what is left out.
#
# Expects scripts/aarch64.sh's builds (.ci/run runs it first); downloads the kernel and
# busybox packages once into target/aarch64-vm/cache, checked against the SHA256s the
# archive's Packages index gives.
#
# Usage: scripts/aarch64-vm.sh [-k]
#   -k: boot the machine, print how to use it and leave it running (kill the pid to stop it)
set -euo pipefail
cd "$(dirname "$0")/.."

keep=
while getopts "k" opt; do
    case "$opt" in
        k) keep=1 ;;
        *) sed -n '2,27p' "$0"; exit 2 ;;
    esac
done

target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu
vm=$PWD/target/aarch64-vm
cache=$vm/cache
start=$SECONDS
mkdir -p "$cache"

need=()
command -v qemu-system-aarch64 >/dev/null 2>&1 || need+=(qemu-system-arm)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
if ((${#need[@]})); then
    echo "== installing ${need[*]}"
    apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Debian's arm64 kernel and busybox, from the archive the machine's apt uses: the
# Packages index names the current file and its SHA256.
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/\?$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
index=$cache/Packages
if [ ! -s "$index" ]; then
    curl -sSfL "$mirror/dists/bookworm/main/binary-arm64/Packages.xz" | xz -dc >"$index.tmp"
    mv "$index.tmp" "$index"
fi
field() { # field PACKAGE FIELD: the first FIELD of PACKAGE's entry in the index
    awk -v p="$1" -v f="$2:" '$1=="Package:"{on=($2==p)} on&&$1==f{print $2; exit}' "$index"
}
fetch_deb() { # fetch_deb PACKAGE: prints the path of its .deb, downloaded and checked
    local file sum deb
    file=$(field "$1" Filename)
    sum=$(field "$1" SHA256)
    [ -n "$file" ] || { echo "no $1 in $mirror's arm64 index" >&2; return 1; }
    deb=$cache/$(basename "$file")
    if [ ! -s "$deb" ]; then
        curl -sSfL "$mirror/$file" -o "$deb.tmp"
        mv "$deb.tmp" "$deb"
    fi
    echo "$sum  $deb" | sha256sum -c --quiet >&2 || { rm -f "$deb"; return 1; }
    echo "$deb"
}
kdeb=$(fetch_deb "$(field linux-image-arm64 Depends)")
bdeb=$(fetch_deb busybox-static)
rm -rf "$vm/kernel" "$vm/busybox" "$vm/root"
dpkg-deb -x "$kdeb" "$vm/kernel"
dpkg-deb -x "$bdeb" "$vm/busybox"
kimage=$(ls "$vm"/kernel/boot/vmlinuz-*)
kmods=$(ls -d "$vm"/kernel/lib/modules/*)/kernel

echo "== initramfs: busybox, glibc, the agent, 9p modules"
root=$vm/root
mkdir -p "$root"/{bin,sbin,lib/aarch64-linux-gnu,modules,proc,sys,dev,tmp,etc}
cp "$vm/busybox/bin/busybox" "$root/bin/"
cp -a "$sysroot"/lib/*.so* "$root/lib/aarch64-linux-gnu/"
ln -sf aarch64-linux-gnu/ld-linux-aarch64.so.1 "$root/lib/ld-linux-aarch64.so.1"
aarch64-linux-gnu-gcc -std=c11 -Wall -Wextra -Werror -Wpedantic -O2 -static \
    scripts/aarch64-vm/agent.c -o "$root/bin/agent"
modules=(drivers/virtio/virtio_mmio net/9p/9pnet net/9p/9pnet_virtio fs/netfs/netfs
    fs/fscache/fscache fs/9p/9p)
for m in "${modules[@]}"; do cp "$kmods/$m.ko" "$root/modules/"; done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
queue=$vm/queue
rm -rf "$queue"
mkdir -p "$queue"
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
ip link set lo up
for m in $(for m in "${modules[@]}"; do printf '%s ' "$(basename "$m")"; done); do insmod /modules/\$m.ko; done
mkdir -p "$PWD"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share "$PWD"
ulimit -c 0
echo "vm: \$(uname -sr) \$(grep -c ^processor /proc/cpuinfo) CPUs; \$(grep -m1 ^Features /proc/cpuinfo | tr ' ' '\n' | grep -x -e sve -e sve2 -e sme | tr '\n' ' ')"
exec /bin/agent "$queue"
EOF
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$vm/initrd.gz")

echo "== booting the machine"
log=$vm/console.log
qemu-system-aarch64 -M virt,gic-version=3 -cpu max -smp 2 -m 4096 -nographic -no-reboot \
    -kernel "$kimage" -initrd "$vm/initrd.gz" \
    -append "console=ttyAMA0 quiet panic=-1" \
    -fsdev local,id=fs0,path="$PWD",security_model=none \
    -device virtio-9p-device,fsdev=fs0,mount_tag=share \
    </dev/null >"$log" 2>&1 &
qemu=$!
trap 'kill "$qemu" 2>/dev/null || true; wait "$qemu" 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
    grep -q "agent: ready" "$log" && break
    kill -0 "$qemu" 2>/dev/null || { cat "$log"; echo "the machine stopped"; exit 1; }
    sleep 0.5
done
grep -q "agent: ready" "$log" || { tail -40 "$log"; echo "the machine did not start in 120 s"; exit 1; }
grep "^vm:" "$log"
echo "   booted in $((SECONDS - start)) s"

export GMP_VM_QUEUE=$queue
vmrun=$PWD/scripts/aarch64-vm/run
"$vmrun" /bin/sh -c 'cat /proc/self/syscall' | grep -q '^63 ' ||
    { echo "the machine's /proc/<tid>/syscall does not show aarch64 numbers"; exit 1; }
if [ -n "$keep" ]; then
    trap - EXIT
    echo "machine running as pid $qemu; console $log"
    echo "export GMP_VM_QUEUE=$queue GMP_TEST_RUNNER=$vmrun"
    exit 0
fi

# The whole unit-test binary runs in the machine: the guard pages, madvise,
# process_vm_readv, the unseen-call restarts and the stack counts of a kernel with
# mprotect'ed guards (Debian's 6.1) included.
echo "== unit tests in the machine"
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=$vmrun \
    timeout -k 10 600 cargo test --release --quiet --target "$target" --lib

# The C tests' drivers run here under qemu-user (scripts/aarch64.sh's under_qemu: the
# emulator's fork can deadlock) and start their programs in the machine.
. scripts/aarch64-common.sh
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $sysroot"
export GMP_TEST_CC=aarch64-linux-gnu-gcc GMP_TEST_RUNNER=$vmrun

# What qemu-user leaves out for want of the unseen-call path, with the plain-libc
# reference runs as on x86-64 (no GMP_TEST_NO_UNSEEN).
echo "== contract tests in the machine: C code's own locks, raw sleeps, a raw tty, stdio, sigwait"
under_qemu 600 "contract tests in the machine" \
    cargo test --release --quiet --target "$target" --test c_interpose -- \
    contract_locks contract_fds_rawsleep contract_fds_rawtty contract_fds_stdio_bound \
    contract_fds_sigwait

# Preemption by the kernel's own source (a perf event), one program at a time;
# preempt_regs with SVE vectors live in one of its loops. Left out: bounds on preemptions
# per second (preempt_tid) and latency (preempt_hog), which the machine's 250 Hz tick and
# emulation do not meet, and preempt_soak with the perf source, which damaged a call with
# no unseen-call signal refused in a few runs of forty here (HACKING.md, "aarch64").
# preempt_soak with the CPU-time timer runs: the unseen-call window (rt/unseen.rs, "The
# window"), wide under emulation, damages calls here, and the test checks that each is
# one the runtime counted as missed.
echo "== preemption tests in the machine"
under_qemu 900 "preemption tests in the machine" \
    cargo test --release --quiet --target "$target" --test c_preempt -- --test-threads=1 \
    --skip preempt_hog --skip preempt_tid --skip preempt_soak_default_source

# The torture test and the fuzzer with every feature and op: pthread locks (the unseen
# path), posix_spawn and fork (the machine's own kernel has no qemu-user fork deadlock).
out=$vm/progs
build_torture_fuzz "$out"
torture_and_fuzz "$out" "in the machine" "$vmrun" 180 "" all ""

echo "aarch64 machine: done in $((SECONDS - start)) s"
