/*
 * preempt: a goroutine that never calls the runtime cannot starve the others
 * (asynchronous preemption, rt/preempt.rs). One case per run (argv[1]):
 *
 *   hog       GOMAXPROCS=1, one goroutine spins in a loop that calls nothing: another
 *             goroutine's 1 ms sleep wakes within 30 ms, 100 times in a row; the main
 *             thread's gmp_maxprocs and its WaitGroup wait are not starved.
 *   fair      4 CPU-bound goroutines at GOMAXPROCS=1 for a second each get 25% +- 6%
 *             (slices measured from when sysmon first sees them, with a sleep that
 *             depends on the queues, gave one of them 33% every run: rt/sysmon.rs).
 *   regs      (GMP_DEBUG=asyncpreemptstress=1) loops computing in SSE, AVX2 and, where
 *             the CPU has it, AVX-512 registers (on aarch64: NEON, 4 and 16
 *             accumulators), with long doubles and with a changed rounding mode (MXCSR,
 *             FPCR), give bit-identical results to the same loops run without preemption, across 20,000 preemptions (each one a thread
 *             hand-over: the stopped goroutine keeps its thread until it resumes).
 *   libc      (stress) a malloc-heavy and a printf-heavy loop stay correct; signals that
 *             land in libc are refused (counted), none is taken there.
 *   tid       (stress) GOMAXPROCS=2: a preempted goroutine's gettid() never changes across
 *             10,000 preemptions while yielding goroutines migrate between threads.
 *   lockexit  (stress) GOMAXPROCS=1: a goroutine preempted hundreds of times (each stop
 *             binds it to its thread for that one stop) then ends inside
 *             gmp_lock_os_thread: its thread must end with it, 5 times (a binding
 *             left counted on the thread keeps it alive for goroutines it no longer has).
 *   sigurg    (stress) the program's own SIGURG handler, installed before the runtime
 *             starts, sees every SIGURG the program sends itself (1,000), while a hog is
 *             being preempted; asyncpreemptoff=1 turns the signals off.
 */
#include "check.h"

#include <errno.h>
#include <fenv.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_AVX2() (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
#define HAVE_AVX512() __builtin_cpu_supports("avx512f")
#define WIDE "avx2"
#define WIDEST "avx512"
#elif defined(__aarch64__)
#include <arm_neon.h>
#include <sys/auxv.h>
/* aarch64: the "sse" loop is 4 NEON accumulators, the "avx2" one 16 (with a and b, 18
 * live vectors: v16-v31, which no call preserves, and the upper halves of v8-v15), the
 * "avx512" one 8 SVE vectors of the CPU's length (z16-z23: past their low 128 bits, a
 * NEON instruction in another goroutine zeroes them). */
#define HAVE_AVX2() 1
#define HAVE_AVX512() ((getauxval(AT_HWCAP) & HWCAP_SVE) != 0)
#define WIDE "neon x16"
#define WIDEST "sve"
#else
#error "preempt.c: x86_64 or aarch64"
#endif

#include <gmp-sched/gmp.h>

#define MS 1000000LL

static atomic_int stop;

/* ---------------------------------------------------------------------------------- */
/* hog */

static gmp_wg hog_wg = GMP_WG_INIT;
static volatile unsigned long hog_spins;

static void hog(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        hog_spins++;
    gmp_wg_done(&hog_wg);
}

static int64_t hog_worst;

static void hog_sleeper(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++) {
        int64_t t0 = gmp_now();
        CHECK_OK(gmp_sleep(1 * MS));
        int64_t late = gmp_now() - t0 - 1 * MS;
        if (late > hog_worst)
            hog_worst = late;
    }
    gmp_wg_done(&hog_wg);
}

static void case_hog(void)
{
    CHECK_OK(gmp_maxprocs(1));
    gmp_wg sl = GMP_WG_INIT;
    (void)sl;
    CHECK_OK(gmp_wg_add(&hog_wg, 2));
    CHECK_OK(gmp_go(hog, NULL));
    CHECK_OK(gmp_go(hog_sleeper, NULL));
    /* The main thread is not starved: GOMAXPROCS queries and a WaitGroup wait work. */
    for (int i = 0; i < 10; i++)
        CHECK_EQ(gmp_maxprocs(0), 1);
    gmp_wg one = GMP_WG_INIT;
    CHECK_OK(gmp_wg_add(&one, 1));
    CHECK_OK(gmp_wg_done(&one));
    CHECK_OK(gmp_wg_wait(&one));
    while (hog_worst == 0 && sched_stats().async_preempts < 100)
        sleep_ms(10);
    /* Wait for the sleeper (the hog only ends when told). */
    for (;;) {
        struct gmp_sched_stats s = sched_stats();
        if (s.goroutines <= 1)
            break;
        sleep_ms(10);
    }
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&hog_wg));
    struct gmp_sched_stats s = sched_stats();
    printf("hog: worst 1 ms sleep lateness %.1f ms; %llu signals, %llu preemptions\n",
           (double)hog_worst / 1e6, (unsigned long long)s.preempt_signals,
           (unsigned long long)s.async_preempts);
    CHECK(hog_worst < 30 * MS);
    CHECK(s.async_preempts > 0);
}

/* ---------------------------------------------------------------------------------- */
/* fair */

#define FAIR_N 4
static volatile unsigned long fair_count[FAIR_N];
static gmp_wg fair_wg = GMP_WG_INIT;
static atomic_int fair_started;

static void fair_worker(void *arg)
{
    int i = (int)(intptr_t)arg;
    atomic_fetch_add(&fair_started, 1);
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        fair_count[i]++;
    gmp_wg_done(&fair_wg);
}

static void case_fair(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_wg_add(&fair_wg, FAIR_N));
    for (int i = 0; i < FAIR_N; i++)
        CHECK_OK(gmp_go(fair_worker, (void *)(intptr_t)i));
    while (atomic_load(&fair_started) < FAIR_N)
        sleep_ms(1);
    unsigned long c0[FAIR_N];
    for (int i = 0; i < FAIR_N; i++)
        c0[i] = fair_count[i];
    sleep_ms(1000);
    unsigned long d[FAIR_N], total = 0;
    for (int i = 0; i < FAIR_N; i++) {
        d[i] = fair_count[i] - c0[i];
        total += d[i];
    }
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&fair_wg));
    CHECK(total > 0);
    for (int i = 0; i < FAIR_N; i++) {
        double share = (double)d[i] / (double)total;
        printf("fair: goroutine %d got %.1f%%\n", i, 100 * share);
        CHECK(share > 0.19 && share < 0.31);
    }
}

/* ---------------------------------------------------------------------------------- */
/* regs: deterministic register-heavy loops, compared bit for bit */

#define REG_ITERS 200000

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Eight accumulators in named variables (not an array), so that they live in ymm/zmm
 * registers for the whole loop: a preemption that lost their upper halves would show. */
#define FMA8(T, FMA, a, b)                                                                 \
    do {                                                                                   \
        x0 = FMA(x0, a, x1);                                                               \
        x1 = FMA(x1, a, b);                                                                \
        x2 = FMA(x2, a, x3);                                                               \
        x3 = FMA(x3, a, b);                                                                \
        x4 = FMA(x4, a, x5);                                                               \
        x5 = FMA(x5, a, b);                                                                \
        x6 = FMA(x6, a, x7);                                                               \
        x7 = FMA(x7, a, b);                                                                \
    } while (0)

#if defined(__x86_64__)
static uint64_t sse_loop(void)
{
    __m128d a = _mm_set_pd(1.000001, 0.999999), b = _mm_set_pd(1e-9, -3e-9);
    __m128d x0 = _mm_set1_pd(1.0), x1 = _mm_set1_pd(2.0), x2 = _mm_set1_pd(3.0), x3 = _mm_set1_pd(4.0);
    for (int i = 0; i < REG_ITERS; i++) {
        x0 = _mm_add_pd(_mm_mul_pd(x0, a), b);
        x1 = _mm_sub_pd(_mm_mul_pd(x1, a), b);
        x2 = _mm_add_pd(_mm_mul_pd(x2, a), x0);
        x3 = _mm_sub_pd(_mm_mul_pd(x3, a), x1);
    }
    double out[8];
    _mm_storeu_pd(out, x0);
    _mm_storeu_pd(out + 2, x1);
    _mm_storeu_pd(out + 4, x2);
    _mm_storeu_pd(out + 6, x3);
    return mix(0xcbf29ce484222325ULL, out, sizeof out);
}

__attribute__((target("avx2,fma"))) static uint64_t avx2_loop(void)
{
    __m256d a = _mm256_set_pd(1.000001, 0.999999, 1.0000003, 0.9999997);
    __m256d b = _mm256_set1_pd(1e-9);
    __m256d x0 = _mm256_set1_pd(1.0), x1 = _mm256_set1_pd(2.0), x2 = _mm256_set1_pd(3.0),
            x3 = _mm256_set1_pd(4.0), x4 = _mm256_set1_pd(5.0), x5 = _mm256_set1_pd(6.0),
            x6 = _mm256_set1_pd(7.0), x7 = _mm256_set1_pd(8.0);
    for (int i = 0; i < REG_ITERS; i++)
        FMA8(__m256d, _mm256_fmadd_pd, a, b);
    double out[32];
    _mm256_storeu_pd(out, x0);
    _mm256_storeu_pd(out + 4, x1);
    _mm256_storeu_pd(out + 8, x2);
    _mm256_storeu_pd(out + 12, x3);
    _mm256_storeu_pd(out + 16, x4);
    _mm256_storeu_pd(out + 20, x5);
    _mm256_storeu_pd(out + 24, x6);
    _mm256_storeu_pd(out + 28, x7);
    return mix(0xcbf29ce484222325ULL, out, sizeof out);
}

__attribute__((target("avx512f"))) static uint64_t avx512_loop(void)
{
    __m512d a = _mm512_set1_pd(1.0000001), b = _mm512_set1_pd(-1e-10);
    __m512d x0 = _mm512_set1_pd(2.0), x1 = _mm512_set1_pd(3.0), x2 = _mm512_set1_pd(4.0),
            x3 = _mm512_set1_pd(5.0), x4 = _mm512_set1_pd(6.0), x5 = _mm512_set1_pd(7.0),
            x6 = _mm512_set1_pd(8.0), x7 = _mm512_set1_pd(9.0);
    for (int i = 0; i < REG_ITERS; i++)
        FMA8(__m512d, _mm512_fmadd_pd, a, b);
    double out[64];
    _mm512_storeu_pd(out, x0);
    _mm512_storeu_pd(out + 8, x1);
    _mm512_storeu_pd(out + 16, x2);
    _mm512_storeu_pd(out + 24, x3);
    _mm512_storeu_pd(out + 32, x4);
    _mm512_storeu_pd(out + 40, x5);
    _mm512_storeu_pd(out + 48, x6);
    _mm512_storeu_pd(out + 56, x7);
    return mix(0xcbf29ce484222325ULL, out, sizeof out);
}

#else
/* The same roles as the x86-64 loops above, in NEON registers. */
static uint64_t sse_loop(void)
{
    float64x2_t a = {1.000001, 0.999999}, b = {1e-9, -3e-9};
    float64x2_t x0 = vdupq_n_f64(1.0), x1 = vdupq_n_f64(2.0), x2 = vdupq_n_f64(3.0),
                x3 = vdupq_n_f64(4.0);
    for (int i = 0; i < REG_ITERS; i++) {
        x0 = vaddq_f64(vmulq_f64(x0, a), b);
        x1 = vsubq_f64(vmulq_f64(x1, a), b);
        x2 = vaddq_f64(vmulq_f64(x2, a), x0);
        x3 = vsubq_f64(vmulq_f64(x3, a), x1);
    }
    double out[8];
    vst1q_f64(out, x0);
    vst1q_f64(out + 2, x1);
    vst1q_f64(out + 4, x2);
    vst1q_f64(out + 6, x3);
    return mix(0xcbf29ce484222325ULL, out, sizeof out);
}

#define NFMA(x, a, y) vfmaq_f64(y, x, a)
#define FMA16(a, b)                                                                        \
    do {                                                                                   \
        FMA8(float64x2_t, NFMA, a, b);                                                     \
        y0 = NFMA(y0, a, y1);                                                              \
        y1 = NFMA(y1, a, b);                                                               \
        y2 = NFMA(y2, a, y3);                                                              \
        y3 = NFMA(y3, a, b);                                                               \
        y4 = NFMA(y4, a, y5);                                                              \
        y5 = NFMA(y5, a, b);                                                               \
        y6 = NFMA(y6, a, y7);                                                              \
        y7 = NFMA(y7, a, b);                                                               \
    } while (0)

static uint64_t avx2_loop(void)
{
    float64x2_t a = {1.0000001, 0.9999999}, b = vdupq_n_f64(1e-9);
    float64x2_t x0 = vdupq_n_f64(1.0), x1 = vdupq_n_f64(2.0), x2 = vdupq_n_f64(3.0),
                x3 = vdupq_n_f64(4.0), x4 = vdupq_n_f64(5.0), x5 = vdupq_n_f64(6.0),
                x6 = vdupq_n_f64(7.0), x7 = vdupq_n_f64(8.0);
    float64x2_t y0 = vdupq_n_f64(-1.0), y1 = vdupq_n_f64(-2.0), y2 = vdupq_n_f64(-3.0),
                y3 = vdupq_n_f64(-4.0), y4 = vdupq_n_f64(-5.0), y5 = vdupq_n_f64(-6.0),
                y6 = vdupq_n_f64(-7.0), y7 = vdupq_n_f64(-8.0);
    for (int i = 0; i < REG_ITERS; i++)
        FMA16(a, b);
    double out[32];
    float64x2_t all[16] = {x0, x1, x2, x3, x4, x5, x6, x7, y0, y1, y2, y3, y4, y5, y6, y7};
    for (int i = 0; i < 16; i++)
        vst1q_f64(out + 2 * i, all[i]);
    return mix(0xcbf29ce484222325ULL, out, sizeof out);
}

/* Eight SVE vectors added and xored into each other lane by lane, in assembly (the file
 * is built for the base architecture, and the lanes past 128 bits are what is checked). */
static uint64_t avx512_loop(void)
{
    uint64_t out[8 * 32]; /* 8 vectors of up to 2048 bits */
    uint64_t lanes;
    __asm__ volatile(".arch_extension sve\n"
                     "ptrue p0.d\n"
                     "index z16.d, #1, #3\n"
                     "index z17.d, #2, #5\n"
                     "index z18.d, #3, #7\n"
                     "index z19.d, #4, #11\n"
                     "index z20.d, #5, #13\n"
                     "index z21.d, #6, #-7\n"
                     "index z22.d, #7, #-5\n"
                     "index z23.d, #8, #-3\n"
                     "mov x9, %[n]\n"
                     "1:\n"
                     "add z16.d, z16.d, z17.d\n"
                     "eor z17.d, z17.d, z18.d\n"
                     "add z18.d, z18.d, z19.d\n"
                     "eor z19.d, z19.d, z20.d\n"
                     "add z20.d, z20.d, z21.d\n"
                     "eor z21.d, z21.d, z22.d\n"
                     "add z22.d, z22.d, z23.d\n"
                     "eor z23.d, z23.d, z16.d\n"
                     "subs x9, x9, #1\n"
                     "b.ne 1b\n"
                     "st1d {z16.d}, p0, [%[o], #0, mul vl]\n"
                     "st1d {z17.d}, p0, [%[o], #1, mul vl]\n"
                     "st1d {z18.d}, p0, [%[o], #2, mul vl]\n"
                     "st1d {z19.d}, p0, [%[o], #3, mul vl]\n"
                     "st1d {z20.d}, p0, [%[o], #4, mul vl]\n"
                     "st1d {z21.d}, p0, [%[o], #5, mul vl]\n"
                     "st1d {z22.d}, p0, [%[o], #6, mul vl]\n"
                     "st1d {z23.d}, p0, [%[o], #7, mul vl]\n"
                     "cntd %[lanes]\n"
                     : [lanes] "=r"(lanes)
                     : [n] "r"((uint64_t)REG_ITERS * 4), [o] "r"(out)
                     : "x9", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "cc",
                       "memory");
    return mix(0xcbf29ce484222325ULL, out, (size_t)lanes * 8 * sizeof(uint64_t));
}

#endif

static uint64_t x87_loop(void)
{
    long double x = 1.0L, y = 3.0L;
    for (int i = 0; i < REG_ITERS; i++) {
        x = x * 1.0000001L + y * 1e-12L;
        y = y * 0.9999999L - x * 1e-12L;
    }
    long double out[2] = {x, y};
    return mix(0xcbf29ce484222325ULL, out, 10) ^ mix(7, &out[1], 10);
}

/* Float arithmetic whose result depends on the rounding mode (MXCSR, FPCR). */
static uint64_t rounding_loop(void)
{
    volatile float third = 1.0f / 3.0f;
    float acc = 0.0f;
    for (int i = 0; i < REG_ITERS; i++)
        acc = acc + third * (float)(i & 7);
    return mix(0xcbf29ce484222325ULL, &acc, sizeof acc);
}

static uint64_t ref_sse, ref_avx2, ref_avx512, ref_x87, ref_round_up;
static int have_avx2, have_avx512;
static atomic_ulong reg_rounds, reg_failures;
static gmp_wg reg_wg = GMP_WG_INIT;

static void reg_worker(void *arg)
{
    int kind = (int)(intptr_t)arg;
    if (kind == 4)
        CHECK_EQ(fesetround(FE_UPWARD), 0);
    while (!atomic_load(&stop)) {
        uint64_t got = 0, want = 0;
        switch (kind) {
        case 0: got = sse_loop(); want = ref_sse; break;
        case 1: got = have_avx2 ? avx2_loop() : ref_avx2; want = ref_avx2; break;
        case 2: got = have_avx512 ? avx512_loop() : ref_avx512; want = ref_avx512; break;
        case 3: got = x87_loop(); want = ref_x87; break;
        case 4: got = rounding_loop(); want = ref_round_up; break;
        }
        if (got != want)
            atomic_fetch_add(&reg_failures, 1);
        atomic_fetch_add(&reg_rounds, 1);
    }
    if (kind == 4)
        CHECK_EQ(fegetround(), FE_UPWARD);
    gmp_wg_done(&reg_wg);
}

static void case_regs(void)
{
    have_avx2 = HAVE_AVX2();
    have_avx512 = HAVE_AVX512();
    /* References, computed without any goroutine (no preemption). */
    ref_sse = sse_loop();
    ref_avx2 = have_avx2 ? avx2_loop() : 0;
    ref_avx512 = have_avx512 ? avx512_loop() : 0;
    ref_x87 = x87_loop();
    CHECK_EQ(fesetround(FE_UPWARD), 0);
    ref_round_up = rounding_loop();
    CHECK_EQ(fesetround(FE_TONEAREST), 0);
    CHECK(ref_round_up != rounding_loop()); /* the loop does depend on the mode */

    /* One processor: every preempted loop shares its thread with the others, which
     * overwrite every vector register it does not get back. */
    CHECK_OK(gmp_maxprocs(1));
    uint64_t p0 = sched_stats().async_preempts;
    CHECK_OK(gmp_wg_add(&reg_wg, 5));
    for (int k = 0; k < 5; k++)
        CHECK_OK(gmp_go(reg_worker, (void *)(intptr_t)k));
    double t0 = now_sec();
    /* 20,000 preemptions (a few seconds on hardware), or what 30 s give under emulation:
     * what is checked is that none of them changed a register, not their rate. */
    while (sched_stats().async_preempts - p0 < 20000 && now_sec() - t0 < 30)
        sleep_ms(50);
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&reg_wg));
    uint64_t n = sched_stats().async_preempts - p0;
    printf("regs: %llu preemptions, %lu rounds (" WIDE " %s, " WIDEST " %s), %lu mismatches\n",
           (unsigned long long)n, atomic_load(&reg_rounds), have_avx2 ? "yes" : "no",
           have_avx512 ? "yes" : "no", atomic_load(&reg_failures));
    CHECK(n >= 2000);
    CHECK_EQ(atomic_load(&reg_failures), 0);
}

/* ---------------------------------------------------------------------------------- */
/* libc */

static gmp_wg libc_wg = GMP_WG_INIT;
static atomic_ulong libc_bad;

static void malloc_worker(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        void *p[64];
        for (int i = 0; i < 64; i++) {
            p[i] = malloc((size_t)(16 + i * 37));
            CHECK(p[i] != NULL);
            memset(p[i], i, (size_t)(16 + i * 37));
        }
        for (int i = 0; i < 64; i++) {
            unsigned char *b = p[i];
            if (b[0] != (unsigned char)i || b[15 + i * 37] != (unsigned char)i)
                atomic_fetch_add(&libc_bad, 1);
            free(p[i]);
        }
    }
    gmp_wg_done(&libc_wg);
}

static void printf_worker(void *arg)
{
    (void)arg;
    unsigned long i = 0;
    while (!atomic_load(&stop)) {
        char buf[128], want[128];
        snprintf(buf, sizeof buf, "%lu %.3f %s %x", i, (double)i / 7.0, "text", (unsigned)i);
        /* The same formatting again: equal unless something corrupted it. */
        snprintf(want, sizeof want, "%lu %.3f %s %x", i, (double)i / 7.0, "text", (unsigned)i);
        if (strcmp(buf, want) != 0)
            atomic_fetch_add(&libc_bad, 1);
        i++;
    }
    gmp_wg_done(&libc_wg);
}

static void case_libc(void)
{
    CHECK_OK(gmp_maxprocs(1));
    struct gmp_sched_stats s0 = sched_stats();
    CHECK_OK(gmp_wg_add(&libc_wg, 2));
    CHECK_OK(gmp_go(malloc_worker, NULL));
    CHECK_OK(gmp_go(printf_worker, NULL));
    sleep_ms(1500);
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&libc_wg));
    struct gmp_sched_stats s1 = sched_stats();
    unsigned long long done = s1.async_preempts - s0.async_preempts;
    unsigned long long lib = s1.async_refused_lib - s0.async_refused_lib;
    printf("libc: %llu preemptions outside libc, %llu signals refused inside it\n", done, lib);
    CHECK_EQ(atomic_load(&libc_bad), 0);
    CHECK(done > 0);
    CHECK(lib > 0);
}

/* ---------------------------------------------------------------------------------- */
/* tid */

static gmp_wg tid_wg = GMP_WG_INIT;
static atomic_ulong tid_changes, tid_mover_moves;

static void tid_spinner(void *arg)
{
    (void)arg;
    long tid = syscall(SYS_gettid);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (volatile int k = 0; k < 1000; k++)
            ;
        if (syscall(SYS_gettid) != tid)
            atomic_fetch_add(&tid_changes, 1);
    }
    gmp_wg_done(&tid_wg);
}

static gmp_chan *tid_tokens;

static void tid_mover(void *arg)
{
    (void)arg;
    long last = syscall(SYS_gettid);
    int token;
    /* Tokens come from the main thread (a foreign thread: through the global queue), so
     * whichever thread is free runs the mover next: it migrates. */
    while (gmp_chan_recv(tid_tokens, &token) == 0) {
        long now = syscall(SYS_gettid);
        if (now != last)
            atomic_fetch_add(&tid_mover_moves, 1);
        last = now;
    }
    gmp_wg_done(&tid_wg);
}

static void case_tid(void)
{
    CHECK_OK(gmp_maxprocs(2));
    CHECK_OK(gmp_chan_make(&tid_tokens, sizeof(int), 0));
    uint64_t p0 = sched_stats().async_preempts;
    CHECK_OK(gmp_wg_add(&tid_wg, 6));
    for (int i = 0; i < 2; i++)
        CHECK_OK(gmp_go(tid_spinner, NULL));
    for (int i = 0; i < 4; i++)
        CHECK_OK(gmp_go(tid_mover, NULL));
    double t0 = now_sec();
    int token = 0;
    while (sched_stats().async_preempts - p0 < 10000 && now_sec() - t0 < 60) {
        for (int k = 0; k < 20; k++)
            CHECK_OK(gmp_chan_send(tid_tokens, &token));
        sleep_ms(1);
    }
    atomic_store(&stop, 1);
    CHECK_OK(gmp_chan_close(tid_tokens));
    CHECK_OK(gmp_wg_wait(&tid_wg));
    uint64_t n = sched_stats().async_preempts - p0;
    printf("tid: %llu preemptions, spinner thread changes %lu, yielders moved %lu times\n",
           (unsigned long long)n, atomic_load(&tid_changes), atomic_load(&tid_mover_moves));
    CHECK(n >= 10000);
    CHECK_EQ(atomic_load(&tid_changes), 0);
    CHECK(atomic_load(&tid_mover_moves) > 0);
}

/* ---------------------------------------------------------------------------------- */
/* lockexit */

static atomic_long lockexit_tid;

static void preempted_then_locked(void *arg)
{
    (void)arg;
    uint64_t p0 = sched_stats().async_preempts;
    double t0 = now_sec();
    while (sched_stats().async_preempts - p0 < 200 && now_sec() - t0 < 30)
        for (volatile int k = 0; k < 1000; k++)
            ;
    CHECK(sched_stats().async_preempts - p0 >= 200);
    CHECK_OK(gmp_lock_os_thread());
    atomic_store(&lockexit_tid, (long)syscall(SYS_gettid));
}

static int task_exists(long tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld", tid);
    return access(path, F_OK) == 0;
}

static void case_lockexit(void)
{
    CHECK_OK(gmp_maxprocs(1));
    for (int i = 0; i < 5; i++) {
        atomic_store(&lockexit_tid, 0);
        CHECK_OK(gmp_go(preempted_then_locked, NULL));
        WAIT_UNTIL(atomic_load(&lockexit_tid) != 0, 60.0);
        long tid = atomic_load(&lockexit_tid);
        WAIT_UNTIL(!task_exists(tid), 5.0);
    }
    printf("lockexit: 5 threads ended with their locked goroutine after 200 preemptions "
           "each\n");
}

/* ---------------------------------------------------------------------------------- */
/* sigurg */

static atomic_ulong user_sigurgs;

static void user_handler(int sig)
{
    (void)sig;
    atomic_fetch_add(&user_sigurgs, 1);
}

static gmp_wg su_wg = GMP_WG_INIT;

static void case_sigurg(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = user_handler;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGURG, &sa, NULL), 0);
    /* Now the runtime starts (and chains to the handler above). */
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_wg_add(&su_wg, 1));
    CHECK_OK(gmp_go(hog, NULL));
    hog_wg = su_wg;
    for (int i = 0; i < 1000; i++) {
        unsigned long before = atomic_load(&user_sigurgs);
        CHECK_EQ(kill(getpid(), SIGURG), 0);
        double t0 = now_sec();
        while (atomic_load(&user_sigurgs) == before) {
            CHECK(now_sec() - t0 < 5.0);
            sched_yield();
        }
    }
    /* Let the hog be preempted some more with the user's handler in place. */
    uint64_t p0 = sched_stats().async_preempts;
    double t0 = now_sec();
    while (sched_stats().async_preempts - p0 < 100 && now_sec() - t0 < 30)
        sleep_ms(5);
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&hog_wg));
    printf("sigurg: the user's handler saw %lu of 1000 SIGURGs; %llu preemptions meanwhile\n",
           atomic_load(&user_sigurgs), (unsigned long long)(sched_stats().async_preempts - p0));
    CHECK_EQ(atomic_load(&user_sigurgs), 1000);
    CHECK(sched_stats().async_preempts - p0 >= 100);
}

/* asyncpreemptoff=1: no signals at all (the cooperative request stays). */
static void case_off(void)
{
    CHECK_OK(gmp_maxprocs(1));
    CHECK_OK(gmp_wg_add(&hog_wg, 1));
    CHECK_OK(gmp_go(hog, NULL));
    sleep_ms(300);
    struct gmp_sched_stats s = sched_stats();
    atomic_store(&stop, 1);
    CHECK_OK(gmp_wg_wait(&hog_wg));
    printf("off: %llu preemption requests, %llu signals\n",
           (unsigned long long)s.preempt_requests, (unsigned long long)s.preempt_signals);
    CHECK(s.preempt_requests > 0);
    CHECK_EQ(s.preempt_signals, 0);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"hog", case_hog},   {"fair", case_fair},     {"regs", case_regs}, {"libc", case_libc},
        {"tid", case_tid},   {"sigurg", case_sigurg}, {"off", case_off},
        {"lockexit", case_lockexit},
    };
    if (argc != 2) {
        fprintf(stderr, "usage: preempt CASE\n");
        return 2;
    }
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            alarm(90); /* a hang fails the case */
            cases[i].fn();
            return 0;
        }
    }
    fprintf(stderr, "preempt: unknown case %s\n", argv[1]);
    return 2;
}
