/*
 * nested_spawn.c -- a tree of goroutines joined with per-node WaitGroups.
 *
 * Scenario: a root goroutine spawns FANOUT children, each of which spawns FANOUT more,
 * down to DEPTH (87,381 nodes). Every node waits for its children on a WaitGroup that
 * lives on its own goroutine stack, with the children's argument records on that stack
 * too, then reports its subtree size to its parent through a plain (non-atomic) field:
 * the wait must give the happens-before edge from the children's writes. Nodes are
 * numbered in heap order (child i of n is n*FANOUT+i+1), so the ids are exactly
 * 0..NODES-1. Checks: the subtree size reported to main, an atomic node count, and the
 * sum of all ids; and goroutine ids: each node's gmp_goid() is what gmp_go returned to
 * its parent, positive, and no two nodes share one (spawned from main and from
 * goroutines on both Ps, through the per-P caches of id batches).
 */
#include "check.h"

#include <gmp-sched/gmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FANOUT 4
#define DEPTH 8 /* levels below the root */

struct node {
    long id;
    int64_t goid; /* what gmp_go returned for this node */
    int depth;
    long subtree; /* written by the node before it signals its parent */
    gmp_wg *parent_wg;
};

static atomic_long nodes_run;
static atomic_llong id_sum;
static int64_t *goids; /* goids[id]: the node's own gmp_goid() */

static void node_main(void *arg)
{
    struct node *self = arg;
    atomic_fetch_add_explicit(&nodes_run, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&id_sum, self->id, memory_order_relaxed);
    goids[self->id] = gmp_goid();

    long subtree = 1;
    if (self->depth < DEPTH) {
        gmp_wg wg = GMP_WG_INIT;
        struct node kids[FANOUT];
        CHECK_OK(gmp_wg_add(&wg, FANOUT));
        for (int i = 0; i < FANOUT; i++) {
            kids[i].id = self->id * FANOUT + i + 1;
            kids[i].depth = self->depth + 1;
            kids[i].subtree = -1;
            kids[i].parent_wg = &wg;
            CHECK((kids[i].goid = gmp_go(node_main, &kids[i])) > 0);
        }
        CHECK_OK(gmp_wg_wait(&wg));
        for (int i = 0; i < FANOUT; i++) {
            CHECK(kids[i].subtree > 0);
            CHECK_EQ(goids[kids[i].id], kids[i].goid);
            subtree += kids[i].subtree;
        }
    }
    self->subtree = subtree;
    CHECK_OK(gmp_wg_done(self->parent_wg));
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    long expect = 0, level = 1;
    for (int d = 0; d <= DEPTH; d++, level *= FANOUT)
        expect += level;
    goids = calloc((size_t)expect, sizeof *goids);
    CHECK(goids != NULL);

    gmp_wg wg = GMP_WG_INIT;
    struct node root = {0, -1, 0, -1, &wg};
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK((root.goid = gmp_go(node_main, &root)) > 0);
    CHECK_OK(gmp_wg_wait(&wg));
    CHECK_EQ(goids[0], root.goid);
    qsort(goids, (size_t)expect, sizeof *goids, cmp_i64);
    CHECK(goids[0] > 0);
    for (long i = 1; i < expect; i++)
        if (goids[i] == goids[i - 1]) {
            fprintf(stderr, "goroutine id %lld given twice\n", (long long)goids[i]);
            CHECK(0);
        }
    free(goids);

    CHECK_EQ(root.subtree, expect);
    CHECK_EQ(atomic_load(&nodes_run), expect);
    CHECK_EQ(atomic_load(&id_sum), (long long)expect * (expect - 1) / 2);

    double deadline = now_sec() + 10.0;
    while (gmp_num_goroutine() != 0 && now_sec() < deadline)
        sleep_ms(1);
    CHECK_EQ(gmp_num_goroutine(), 0);
    printf("nested_spawn: %ld nodes\n", expect);
    return 0;
}
