/*
 * foreign_promises.c -- goroutines that C main spawns and that cannot start yet cost no
 * stack of their own: each holds the promise of one, as a goroutine's spawns do.
 *
 * Scenario: GOMAXPROCS=1, asynchronous preemption off (GMP_DEBUG=asyncpreemptoff=1, set by
 * the harness). A hog goroutine holds the only P, spinning without calling the runtime
 * until main lets it go, so nothing else can start. Main (a thread that is not a
 * goroutine, with no dead goroutine to reuse) spawns 20,000 goroutines, then lets the hog
 * finish and waits for them all.
 *
 * A stack mapped at spawn gets its 64 KiB guard installed at once (a page-table marker),
 * which makes the kernel allocate the page tables covering it: 20,000 stacks of 256 KiB
 * plus guard span ~6 GiB, ~12 MiB of page tables (VmPTE grows by about that much if C
 * main maps a stack per spawn). A promise is address space the pool keeps for the
 * goroutine and costs none until the goroutine starts and takes a stack (VmPTE grows by a
 * few kB).
 *
 * Checks: no spawned goroutine started while the hog held the P; VmPTE grew by less than
 * 3 MiB over the 20,000 spawns; afterwards all 20,000 ran.
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 20000L

static atomic_int hog_running, hog_release;
static atomic_long ran;
static gmp_wg wg = GMP_WG_INIT;

static void hog(void *arg)
{
    (void)arg;
    atomic_store(&hog_running, 1);
    while (!atomic_load(&hog_release)) {
    }
    CHECK_EQ(gmp_wg_done(&wg), 0);
}

static void spawned(void *arg)
{
    (void)arg;
    atomic_fetch_add(&ran, 1);
    CHECK_EQ(gmp_wg_done(&wg), 0);
}

/* The process's page-table memory, kB (/proc/self/status VmPTE). */
static long vm_pte_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmPTE:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    }
    fclose(f);
    CHECK(kb >= 0);
    return kb;
}

int main(void)
{
    CHECK(gmp_maxprocs(1) >= 1);
    CHECK_OK(gmp_wg_add(&wg, N + 1));
    CHECK(gmp_go(hog, NULL) > 0);
    WAIT_UNTIL(atomic_load(&hog_running), 5.0);
    long before = vm_pte_kb();
    for (long i = 0; i < N; i++)
        CHECK(gmp_go(spawned, NULL) > 0);
    long after = vm_pte_kb();
    CHECK_EQ(atomic_load(&ran), 0);
    printf("foreign_promises: VmPTE %ld -> %ld kB over %ld spawns\n", before, after, N);
    CHECK(after - before < 3 * 1024);
    atomic_store(&hog_release, 1);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(atomic_load(&ran), N);
    return 0;
}
