# Sourced by scripts/aarch64.sh and scripts/aarch64-vm.sh.
#
# qemu-user 7.2's fork of a multi-threaded guest can deadlock in the child before it execs
# (a host lock of the emulator's, held by another thread at the fork: the child waits in
# a futex for ever). It happens to the Rust test harness itself, which does not load the
# library, starting a C test program now and then when tests run in parallel (its spawn
# waits for the exec, so the harness's own time limit never starts). So every step under
# qemu has a time limit, and a step that runs out of it (and only that) is run once more;
# a step that fails, or runs out of time twice, fails the script.
# Usage: under_qemu SECONDS NAME COMMAND...
under_qemu() {
    local limit=$1 name=$2
    shift 2
    local try rc
    for try in 1 2; do
        rc=0
        timeout -k 10 "$limit" "$@" || rc=$?
        if [ "$rc" -eq 0 ]; then
            return 0
        fi
        if [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; then
            echo "$name failed (exit $rc)"
            return "$rc"
        fi
        echo "$name: no end after $limit s (try $try; qemu-user's fork can deadlock)"
    done
    return 1
}
