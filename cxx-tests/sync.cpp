// The sync wrappers through the standard lock adapters: gmp::mutex with std::lock_guard,
// std::unique_lock, std::scoped_lock (two mutexes, no deadlock) and std::try_lock;
// gmp::shared_mutex with std::shared_lock and std::unique_lock, and its try forms;
// gmp::condition_variable with std::unique_lock<gmp::mutex>; gmp::wait_group;
// gmp::call_once (concurrent callers, an exception); gmp::sleep_for; the
// gmp::lock_os_thread guard; errors as std::system_error with the errno category;
// move-only callables for call_once and the waits' predicates.
#include <gmp-sched/gmp.hpp>

#include "check.hpp"

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;

static gmp::mutex global_mu; // constant-initialised: usable before main
static long counter = 0;

static void mutexes()
{
    gmp::wait_group wg;
    wg.add(20);
    for (int g = 0; g < 20; g++)
        gmp::go([&wg] {
            for (int i = 0; i < 1000; i++) {
                std::lock_guard<gmp::mutex> lk(global_mu);
                long seen = counter;
                if (i % 100 == 0)
                    gmp::yield(); // switch while holding it
                counter = seen + 1;
            }
            wg.done();
        });
    // A plain thread contends too.
    std::thread t([] {
        for (int i = 0; i < 1000; i++) {
            std::unique_lock<gmp::mutex> lk(global_mu);
            counter++;
        }
    });
    wg.wait();
    t.join();
    CHECK(counter == 21000);

    // try_lock, std::try_lock, std::scoped_lock over two mutexes taken in both orders.
    gmp::mutex a, b;
    CHECK(a.try_lock());
    CHECK(!a.try_lock());
    CHECK(std::try_lock(b, a) == 1); // b taken and released again, a busy
    a.unlock();
    CHECK(std::try_lock(a, b) == -1);
    a.unlock();
    b.unlock();
    long both = 0;
    wg.add(2);
    gmp::go([&] {
        for (int i = 0; i < 2000; i++) {
            std::scoped_lock lk(a, b);
            both++;
        }
        wg.done();
    });
    gmp::go([&] {
        for (int i = 0; i < 2000; i++) {
            std::scoped_lock lk(b, a);
            both++;
        }
        wg.done();
    });
    wg.wait();
    CHECK(both == 4000);
}

static void shared_mutexes()
{
    gmp::shared_mutex rw;
    {
        std::shared_lock<gmp::shared_mutex> r1(rw);
        CHECK(rw.try_lock_shared()); // a second reader
        CHECK(!rw.try_lock());       // no writer while readers are in
        rw.unlock_shared();
    }
    {
        std::unique_lock<gmp::shared_mutex> w(rw);
        CHECK(!rw.try_lock_shared());
        CHECK(!rw.try_lock());
    }
    CHECK(rw.try_lock());
    rw.unlock();

    // Readers see the writer's pairs whole; writers exclude each other.
    long x = 0, y = 0;
    std::atomic<long> reads{0};
    gmp::wait_group wg;
    wg.add(12);
    for (int w = 0; w < 4; w++)
        gmp::go([&] {
            for (int i = 0; i < 500; i++) {
                std::unique_lock<gmp::shared_mutex> lk(rw);
                x++;
                gmp::yield();
                y++;
            }
            wg.done();
        });
    for (int r = 0; r < 8; r++)
        gmp::go([&] {
            for (int i = 0; i < 500; i++) {
                std::shared_lock<gmp::shared_mutex> lk(rw);
                CHECK(x == y);
                reads++;
            }
            wg.done();
        });
    wg.wait();
    CHECK(x == 2000 && y == 2000 && reads == 4000);
}

static void condition_variables()
{
    gmp::mutex mu;
    gmp::condition_variable not_empty;
    std::deque<int> q;
    bool done = false;
    long sum = 0;
    gmp::wait_group wg;
    wg.add(3);
    for (int c = 0; c < 3; c++)
        gmp::go([&] {
            std::unique_lock<gmp::mutex> lk(mu);
            for (;;) {
                not_empty.wait(lk, [&] { return !q.empty() || done; });
                if (q.empty())
                    break;
                sum += q.front();
                q.pop_front();
            }
            // Unlock before done: once wait() returns, `mu` may be gone.
            lk.unlock();
            wg.done();
        });
    for (int i = 1; i <= 1000; i++) {
        std::lock_guard<gmp::mutex> lk(mu);
        q.push_back(i);
        not_empty.notify_one();
    }
    {
        std::lock_guard<gmp::mutex> lk(mu);
        done = true;
    }
    not_empty.notify_all();
    wg.wait();
    CHECK(sum == 1000 * 1001 / 2);

    std::unique_lock<gmp::mutex> unlocked(mu, std::defer_lock);
    CHECK_ERRNO(not_empty.wait(unlocked), EPERM);
}

static void once()
{
    static gmp::once_flag flag;
    std::atomic<int> calls{0};
    std::atomic<int> saw_done{0};
    gmp::wait_group wg;
    wg.add(50);
    for (int i = 0; i < 50; i++)
        gmp::go([&] {
            gmp::call_once(flag, [&](int by) {
                gmp::sleep_for(2ms); // the others wait for it
                calls += by;
            }, 1);
            saw_done += calls.load() == 1;
            wg.done();
        });
    wg.wait();
    CHECK(calls == 1 && saw_done == 50);

    // A throwing call reaches its caller and counts as the one call (Go's Once).
    gmp::once_flag f2;
    bool caught = false;
    try {
        gmp::call_once(f2, [] { throw std::runtime_error("once"); });
    } catch (const std::runtime_error &) {
        caught = true;
    }
    CHECK(caught);
    bool again = false;
    gmp::call_once(f2, [&] { again = true; });
    CHECK(!again);
}

static void sleeping_and_threads()
{
    auto t0 = std::chrono::steady_clock::now();
    gmp::sleep_for(15ms); // a plain thread sleeps
    CHECK(std::chrono::steady_clock::now() - t0 >= 15ms);

    gmp::chan<bool> result;
    gmp::go([result] {
        auto t1 = std::chrono::steady_clock::now();
        gmp::sleep_until(t1 + 10ms); // a goroutine parks
        bool ok = std::chrono::steady_clock::now() - t1 >= 10ms;
        {
            gmp::lock_os_thread pin;
            const long tid = syscall(SYS_gettid);
            for (int i = 0; i < 50; i++) {
                gmp::yield();
                gmp::sleep_for(100us);
                ok = ok && syscall(SYS_gettid) == tid;
            }
            {
                gmp::lock_os_thread nested; // guards nest
                gmp::yield();
                ok = ok && syscall(SYS_gettid) == tid;
            }
            gmp::yield();
            ok = ok && syscall(SYS_gettid) == tid;
        }
        // Unlocked again: gmp_lock_os_thread's count is back to 1 after one lock.
        ok = ok && gmp_lock_os_thread() == 1 && gmp_unlock_os_thread() == 0;
        CHECK(result.send(ok));
    });
    CHECK(*result.recv());

    // Outside a goroutine the guard cannot exist.
    CHECK_ERRNO(gmp::lock_os_thread guard, EPERM);
    try {
        gmp::lock_os_thread guard;
    } catch (const std::system_error &e) {
        CHECK(e.code().category() == std::generic_category());
        CHECK(e.code() == std::errc::operation_not_permitted);
    }
    CHECK(gmp::maxprocs() >= 1 && gmp::num_goroutine() >= 0);
}

// call_once and the predicate forms of the waits take move-only callables.
static void move_only_callables()
{
    gmp::once_flag f;
    int got = 0;
    auto p = std::make_unique<int>(7);
    gmp::call_once(f, [q = std::move(p), &got] { got = *q; });
    CHECK(got == 7);

    gmp::mutex mu;
    gmp::condition_variable cv;
    std::unique_lock<gmp::mutex> lk(mu);
    cv.wait(lk, [q = std::make_unique<int>(1)] { return *q == 1; });
    CHECK(cv.wait_for(lk, 1ms, [q = std::make_unique<int>(1)] { return *q == 1; }));
    CHECK(!cv.wait_until(lk, std::chrono::steady_clock::now() + 1ms,
                         [q = std::make_unique<int>(2)] { return *q == 1; }));
}

int main()
{
    mutexes();
    shared_mutexes();
    condition_variables();
    once();
    sleeping_and_threads();
    move_only_callables();
    std::printf("sync: ok\n");
    return 0;
}
