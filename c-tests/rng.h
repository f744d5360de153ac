/*
 * rng.h -- the seeded generators of the randomized tests (torture.c, fuzz.c): splitmix64
 * to derive a state from a seed, xorshift64* to draw from it. Each actor keeps its own
 * state, so that a seed fixes every actor's sequence of choices.
 */
#ifndef GMP_TESTS_RNG_H
#define GMP_TESTS_RNG_H

#include <stdint.h>

static inline uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static inline uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

static inline uint32_t rnd_below(uint64_t *s, uint32_t n)
{
    return (uint32_t)((rnd(s) >> 32) % n);
}

#endif
