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
 * sum of all ids.
 */
#include "check.h"

#include <gmp.h>
#include <stdatomic.h>

#define FANOUT 4
#define DEPTH 8 /* levels below the root */

struct node {
    long id;
    int depth;
    long subtree; /* written by the node before it signals its parent */
    gmp_wg *parent_wg;
};

static atomic_long nodes_run;
static atomic_llong id_sum;

static void node_main(void *arg)
{
    struct node *self = arg;
    atomic_fetch_add_explicit(&nodes_run, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&id_sum, self->id, memory_order_relaxed);

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
            CHECK(gmp_go(node_main, &kids[i]) > 0);
        }
        CHECK_OK(gmp_wg_wait(&wg));
        for (int i = 0; i < FANOUT; i++) {
            CHECK(kids[i].subtree > 0);
            subtree += kids[i].subtree;
        }
    }
    self->subtree = subtree;
    CHECK_OK(gmp_wg_done(self->parent_wg));
}

int main(void)
{
    long expect = 0, level = 1;
    for (int d = 0; d <= DEPTH; d++, level *= FANOUT)
        expect += level;

    gmp_wg wg = GMP_WG_INIT;
    struct node root = {0, 0, -1, &wg};
    CHECK_OK(gmp_wg_add(&wg, 1));
    CHECK(gmp_go(node_main, &root) > 0);
    CHECK_OK(gmp_wg_wait(&wg));

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
