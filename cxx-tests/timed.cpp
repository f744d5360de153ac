// Timed waits: gmp::condition_variable::wait_for / wait_until (cv_status and predicate
// forms; timeouts, notifies from goroutines and threads, timed and untimed waiters mixed
// under notify_one and notify_all, timeouts racing notifies) and gmp::timed_mutex
// (try_lock_for / try_lock_until, std::unique_lock's timed constructors, contention;
// unlocking it unlocked aborts).
#include <gmp-sched/gmp.hpp>

#include "check.hpp"

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

static void cv_timeouts()
{
    gmp::mutex mu;
    gmp::condition_variable cv;
    std::unique_lock<gmp::mutex> lk(mu);

    // Nobody notifies: timeout after about that long, with the lock owned again.
    auto t0 = steady::now();
    CHECK(cv.wait_for(lk, 20ms) == std::cv_status::timeout);
    CHECK(steady::now() - t0 >= 20ms && lk.owns_lock());
    t0 = steady::now();
    CHECK(cv.wait_until(lk, t0 + 10ms) == std::cv_status::timeout);
    CHECK(steady::now() - t0 >= 10ms);
    CHECK(cv.wait_until(lk, std::chrono::system_clock::now() + 5ms) == std::cv_status::timeout);
    // Zero and negative durations, and deadlines in the past: at once.
    CHECK(cv.wait_for(lk, 0ms) == std::cv_status::timeout);
    CHECK(cv.wait_for(lk, -5s) == std::cv_status::timeout);
    CHECK(cv.wait_until(lk, steady::now() - 1s) == std::cv_status::timeout);
    CHECK(!cv.wait_for(lk, 5ms, [] { return false; }));
    CHECK(cv.wait_for(lk, 5ms, [] { return true; }));
    CHECK(lk.owns_lock());

    // A notify from a goroutine ends the wait early; what it wrote under the lock is seen.
    bool ready = false;
    gmp::go([&] {
        gmp::sleep_for(5ms);
        std::lock_guard<gmp::mutex> g(mu);
        ready = true;
        cv.notify_one();
    });
    t0 = steady::now();
    CHECK(cv.wait_for(lk, 10s, [&] { return ready; }));
    CHECK(steady::now() - t0 < 5s);

    // ... and from a plain thread, with wait_until and an unbounded duration.
    ready = false;
    std::thread t([&] {
        std::this_thread::sleep_for(5ms);
        std::lock_guard<gmp::mutex> g(mu);
        ready = true;
        cv.notify_all();
    });
    CHECK(cv.wait_until(lk, steady::now() + 10s, [&] { return ready; }));
    ready = false;
    lk.unlock();
    std::thread t2([&] {
        std::this_thread::sleep_for(5ms);
        std::lock_guard<gmp::mutex> g(mu);
        ready = true;
        cv.notify_one();
    });
    lk.lock();
    CHECK(cv.wait_for(lk, std::chrono::hours::max(), [&] { return ready; }));
    lk.unlock();
    t.join();
    t2.join();

    std::unique_lock<gmp::mutex> unlocked(mu, std::defer_lock);
    CHECK_ERRNO(cv.wait_for(unlocked, 1ms), EPERM);
    CHECK_ERRNO(cv.wait_until(unlocked, steady::now() + 1ms), EPERM);
}

// Timed and untimed waiters (goroutines and threads) take tokens; one notify_one per
// token wakes them all, none times out; notify_all wakes the rest.
static void cv_mixed()
{
    gmp::mutex mu;
    gmp::condition_variable cv;
    int tokens = 0;
    std::atomic<int> took{0}, timed_out{0};
    gmp::wait_group wg;
    const int timed = 20, untimed = 20;
    wg.add(timed + untimed);
    for (int i = 0; i < timed; i++)
        gmp::go([&] {
            std::unique_lock<gmp::mutex> lk(mu);
            if (cv.wait_for(lk, 60s, [&] { return tokens > 0; })) {
                tokens--;
                took++;
            } else {
                timed_out++;
            }
            lk.unlock();
            wg.done();
        });
    for (int i = 0; i < untimed; i++)
        gmp::go([&] {
            std::unique_lock<gmp::mutex> lk(mu);
            cv.wait(lk, [&] { return tokens > 0; });
            tokens--;
            took++;
            lk.unlock();
            wg.done();
        });
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; i++)
        threads.emplace_back([&] {
            std::unique_lock<gmp::mutex> lk(mu);
            while (cv.wait_until(lk, steady::now() + 60s) == std::cv_status::no_timeout && tokens == 0) {
            }
            if (tokens > 0) {
                tokens--;
                took++;
            } else {
                timed_out++;
            }
        });
    gmp::sleep_for(20ms); // let most of them queue
    for (int i = 0; i < timed + untimed + 4; i++) {
        gmp::sleep_for(100us);
        std::lock_guard<gmp::mutex> g(mu);
        tokens++;
        cv.notify_one();
    }
    wg.wait();
    for (auto &t : threads)
        t.join();
    CHECK(took == timed + untimed + 4 && timed_out == 0 && tokens == 0);

    // notify_all wakes timed and untimed waiters alike.
    bool go_on = false;
    wg.add(10);
    for (int i = 0; i < 10; i++)
        gmp::go([&, i] {
            std::unique_lock<gmp::mutex> lk(mu);
            if (i % 2)
                CHECK(cv.wait_for(lk, 60s, [&] { return go_on; }));
            else
                cv.wait(lk, [&] { return go_on; });
            lk.unlock();
            wg.done();
        });
    gmp::sleep_for(10ms);
    {
        std::lock_guard<gmp::mutex> g(mu);
        go_on = true;
    }
    cv.notify_all();
    wg.wait();
}

// Short timed waits racing a stream of notifies: every waiter record leaves its list
// whether a notify or its timeout comes first (ASan checks the records on the stacks).
static void cv_races()
{
    gmp::mutex mu;
    gmp::condition_variable cv;
    std::atomic<bool> stop{false};
    std::atomic<long> woken{0}, expired{0};
    gmp::wait_group wg;
    wg.add(16);
    for (int i = 0; i < 16; i++)
        gmp::go([&, i] {
            std::unique_lock<gmp::mutex> lk(mu);
            for (int k = 0; k < 200; k++) {
                if (cv.wait_for(lk, std::chrono::microseconds(50 + 37 * ((i + k) % 7))) == std::cv_status::timeout)
                    expired++;
                else
                    woken++;
            }
            lk.unlock();
            wg.done();
        });
    auto notifier = gmp::go([&] {
        for (long n = 0; !stop; n++) {
            if (n % 3 == 0)
                cv.notify_all();
            else
                cv.notify_one();
            gmp::sleep_for(std::chrono::microseconds(20));
        }
    });
    wg.wait();
    stop = true;
    notifier.join();
    CHECK(woken + expired == 16 * 200 && woken > 0);
}

static void timed_mutexes()
{
    gmp::timed_mutex tm;
    CHECK(tm.try_lock());
    CHECK(!tm.try_lock());
    CHECK(!tm.try_lock_for(0ms));
    auto t0 = steady::now();
    CHECK(!tm.try_lock_for(20ms));
    CHECK(steady::now() - t0 >= 20ms);
    CHECK(!tm.try_lock_until(steady::now() + 5ms));
    CHECK(!tm.try_lock_until(std::chrono::system_clock::now() + 5ms));

    // Another goroutine unlocks it (not owned by a thread) while we wait.
    gmp::go([&] {
        gmp::sleep_for(5ms);
        tm.unlock();
    });
    t0 = steady::now();
    CHECK(tm.try_lock_for(10s));
    CHECK(steady::now() - t0 < 5s);
    tm.unlock();

    // std::unique_lock's timed constructors.
    {
        std::unique_lock<gmp::timed_mutex> a(tm, 10ms);
        CHECK(a.owns_lock());
        std::thread([&] {
            std::unique_lock<gmp::timed_mutex> b(tm, steady::now() + 5ms);
            CHECK(!b.owns_lock());
        }).join();
    }

    // Contention: goroutines with lock(), with try_lock_for, and a thread.
    long counter = 0;
    std::atomic<long> gave_up{0};
    gmp::wait_group wg;
    wg.add(16);
    for (int g = 0; g < 16; g++)
        gmp::go([&, g] {
            for (int i = 0; i < 300; i++) {
                if (g % 2) {
                    std::lock_guard<gmp::timed_mutex> lk(tm);
                    long seen = counter;
                    if (i % 50 == 0)
                        gmp::yield();
                    counter = seen + 1;
                } else if (tm.try_lock_for(std::chrono::microseconds(200))) {
                    long seen = counter;
                    if (i % 50 == 0)
                        gmp::yield();
                    counter = seen + 1;
                    tm.unlock();
                } else {
                    gave_up++;
                }
            }
            wg.done();
        });
    std::thread t([&] {
        for (int i = 0; i < 300; i++) {
            std::lock_guard<gmp::timed_mutex> lk(tm);
            counter++;
        }
    });
    wg.wait();
    t.join();
    CHECK(counter + gave_up == 17 * 300);
}

int main(int argc, char **argv)
{
    if (argc > 1 && std::string(argv[1]) == "unlock_unlocked") {
        gmp::timed_mutex tm;
        tm.unlock(); // aborts with a gmp: message
        return 0;
    }
    cv_timeouts();
    cv_mixed();
    cv_races();
    timed_mutexes();
    std::printf("timed: ok\n");
    return 0;
}
