/*
 * reallib_sqlite.c -- the distribution's unmodified SQLite driven from goroutines as a
 * thread-per-worker program drives it from threads, beside the same code on plain
 * pthreads. One case per run: argv[1] is the case, argv[2] the mode, "go" (goroutines;
 * the program links libgmp.so, so SQLite's pwrite64, fdatasync, fcntl64... are its hooks)
 * or "thread" (one pthread per worker; tests/c_reallib.rs runs it with GMP_INTERPOSE=0 and
 * compares the "outcome:" lines of both modes), argv[3] a directory for the databases.
 *
 *   shared   one connection (serialized mode) shared by 8 workers, each of which takes
 *            the program's pthread mutex around an insert that commits on its own (with
 *            synchronous=FULL: journal and database writes and their fdatasync) and a
 *            query. The holder's P moves on during the hooked file calls while the others
 *            block in pthread_mutex_lock, a futex wait the hooks do not see; the holder
 *            must get a P back.
 *   serialized  the same connection and inserts without the program's mutex: SQLite's
 *            serialized mode locks the connection (a recursive pthread mutex, whose owner
 *            is a thread) around each call itself.
 *   perfile  8 workers, each with its own database file, each round opening its
 *            connection, inserting rows in a transaction, running a CPU-heavy recursive
 *            query, and closing it: SQLite's global mutexes (the unix VFS's inode list,
 *            the memory allocator's, the pager cache's) are taken all the time, and
 *            preemption stops goroutines while they hold them.
 *
 * Every row must be there, with the right sums. A watchdog ends a hung run with a
 * message (and, in goroutines, the goroutine dump).
 */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include <gmp-sched/gmp.h>

#define WORKERS 8
#define SHARED_ROUNDS 12
#define PERFILE_ROUNDS 12
#define PERFILE_ROWS 50

static int use_goroutines;
static gmp_wg wg = GMP_WG_INIT;
static const char *dir;

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "reallib_sqlite: hung (watchdog)\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing more to do */
    }
    if (use_goroutines)
        gmp_dump(2);
    _exit(3);
}

static void exec_ok(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "reallib_sqlite: %s: %s\n", sql, err ? err : "?");
        _exit(1);
    }
}

/* The single integer `sql` returns. */
static long long query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    CHECK_EQ(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    CHECK_EQ(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    CHECK_EQ(sqlite3_step(st), SQLITE_DONE);
    CHECK_EQ(sqlite3_finalize(st), SQLITE_OK);
    return v;
}

struct start {
    void (*fn)(long);
    long i;
};
static void go_start(void *arg)
{
    struct start *s = arg;
    s->fn(s->i);
    gmp_wg_done(&wg);
}
static void *thread_start(void *arg)
{
    struct start *s = arg;
    s->fn(s->i);
    return NULL;
}
/* Runs fn(i) for i in 0..n as goroutines or pthreads, and waits for all of them. */
static void run_all(void (*fn)(long), int n)
{
    struct start s[WORKERS];
    pthread_t t[WORKERS];
    CHECK(n <= WORKERS);
    for (int i = 0; i < n; i++) {
        s[i].fn = fn;
        s[i].i = i;
        if (use_goroutines) {
            CHECK_OK(gmp_wg_add(&wg, 1));
            CHECK_OK(gmp_go(go_start, &s[i]));
        } else {
            CHECK_EQ(pthread_create(&t[i], NULL, thread_start, &s[i]), 0);
        }
    }
    if (use_goroutines)
        CHECK_OK(gmp_wg_wait(&wg));
    else
        for (int i = 0; i < n; i++)
            CHECK_EQ(pthread_join(t[i], NULL), 0);
}

/* ---- one connection shared by every worker, under the program's mutex ---- */

static sqlite3 *shared_db;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_long commits;

static void shared_worker(long id)
{
    char sql[160];
    for (int r = 0; r < SHARED_ROUNDS; r++) {
        CHECK_EQ(pthread_mutex_lock(&mu), 0);
        snprintf(sql, sizeof sql,
                 "INSERT INTO log(worker, seq, line) VALUES (%ld, %d, 'worker %ld record %d')",
                 id, r, id, r);
        exec_ok(shared_db, sql);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM log WHERE worker = %ld", id);
        CHECK_EQ(query_int(shared_db, sql), r + 1);
        CHECK_EQ(pthread_mutex_unlock(&mu), 0);
        atomic_fetch_add(&commits, 1);
    }
}

/* The same without the program's mutex: SQLite's serialized mode locks the connection
 * (a recursive pthread mutex) around each call itself. */
static void serialized_worker(long id)
{
    char sql[160];
    for (int r = 0; r < SHARED_ROUNDS; r++) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO log(worker, seq, line) VALUES (%ld, %d, 'worker %ld record %d')",
                 id, r, id, r);
        exec_ok(shared_db, sql);
        atomic_fetch_add(&commits, 1);
    }
}

/* ---- a connection per file per worker ---- */

static long long perfile_sum[WORKERS], perfile_rows[WORKERS];

static void perfile_worker(long id)
{
    char path[512], sql[200];
    snprintf(path, sizeof path, "%s/worker-%ld.db", dir, id);
    for (int r = 0; r < PERFILE_ROUNDS; r++) {
        sqlite3 *db;
        CHECK_EQ(sqlite3_open(path, &db), SQLITE_OK);
        exec_ok(db, "PRAGMA synchronous=OFF");
        exec_ok(db, "CREATE TABLE IF NOT EXISTS t(round INTEGER, i INTEGER, v INTEGER)");
        exec_ok(db, "BEGIN");
        for (int i = 0; i < PERFILE_ROWS; i++) {
            snprintf(sql, sizeof sql, "INSERT INTO t VALUES (%d, %d, %ld)", r, i,
                     id * 1000 + r * PERFILE_ROWS + i);
            exec_ok(db, sql);
        }
        exec_ok(db, "COMMIT");
        CHECK_EQ(query_int(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
                               "FROM c WHERE x < 20000) SELECT sum(x) FROM c"),
                 20000LL * 20001 / 2);
        CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), (long long)(r + 1) * PERFILE_ROWS);
        CHECK_EQ(sqlite3_close(db), SQLITE_OK);
    }
    sqlite3 *db;
    CHECK_EQ(sqlite3_open(path, &db), SQLITE_OK);
    perfile_sum[id] = query_int(db, "SELECT sum(v) FROM t");
    perfile_rows[id] = query_int(db, "SELECT count(*) FROM t");
    CHECK_EQ(sqlite3_close(db), SQLITE_OK);
}

int main(int argc, char **argv)
{
    CHECK(argc == 4);
    const char *c = argv[1];
    CHECK(strcmp(argv[2], "go") == 0 || strcmp(argv[2], "thread") == 0);
    use_goroutines = strcmp(argv[2], "go") == 0;
    dir = argv[3];
    signal(SIGALRM, watchdog);
    alarm(40);
    CHECK(sqlite3_threadsafe() != 0);
    double t0 = now_sec();
    if (strcmp(c, "shared") == 0 || strcmp(c, "serialized") == 0) {
        char path[512];
        snprintf(path, sizeof path, "%s/shared.db", dir);
        unlink(path);
        CHECK_EQ(sqlite3_open_v2(path, &shared_db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                     SQLITE_OPEN_FULLMUTEX,
                                 NULL),
                 SQLITE_OK);
        exec_ok(shared_db, "PRAGMA synchronous=FULL");
        exec_ok(shared_db, "CREATE TABLE log(worker INTEGER, seq INTEGER, line TEXT)");
        run_all(c[1] == 'h' ? shared_worker : serialized_worker, WORKERS);
        CHECK_EQ(atomic_load(&commits), (long)WORKERS * SHARED_ROUNDS);
        long long rows = query_int(shared_db, "SELECT count(*) FROM log");
        long long workers = query_int(shared_db, "SELECT count(DISTINCT worker) FROM log");
        long long seqs = query_int(shared_db, "SELECT sum(seq) FROM log");
        CHECK_EQ(rows, (long long)WORKERS * SHARED_ROUNDS);
        CHECK_EQ(workers, WORKERS);
        CHECK_EQ(seqs, (long long)WORKERS * SHARED_ROUNDS * (SHARED_ROUNDS - 1) / 2);
        CHECK_EQ(sqlite3_close(shared_db), SQLITE_OK);
        unlink(path);
        printf("outcome: %s rows=%lld workers=%lld seqsum=%lld\n", c, rows, workers, seqs);
    } else if (strcmp(c, "perfile") == 0) {
        for (int i = 0; i < WORKERS; i++) {
            char path[512];
            snprintf(path, sizeof path, "%s/worker-%d.db", dir, i);
            unlink(path);
        }
        run_all(perfile_worker, WORKERS);
        long long rows = 0, sum = 0;
        for (int id = 0; id < WORKERS; id++) {
            long long n = PERFILE_ROUNDS * PERFILE_ROWS;
            CHECK_EQ(perfile_rows[id], n);
            CHECK_EQ(perfile_sum[id], n * id * 1000 + n * (n - 1) / 2);
            rows += perfile_rows[id];
            sum += perfile_sum[id];
            char path[512];
            snprintf(path, sizeof path, "%s/worker-%d.db", dir, id);
            unlink(path);
        }
        printf("outcome: perfile rows=%lld sum=%lld\n", rows, sum);
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    double dt = now_sec() - t0;
    if (use_goroutines)
        printf("sqlite %s in goroutines: %.2f s at GOMAXPROCS=%d\n", c, dt, gmp_maxprocs(0));
    else
        printf("sqlite %s on pthreads: %.2f s\n", c, dt);
    return 0;
}
