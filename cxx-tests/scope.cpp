// Scopes (gmp::scope, Go's context made implicit): a cancel ends the waits of the scope's
// goroutines and of its owner with std::system_error ECANCELED, a deadline with
// ETIMEDOUT; err() and deadline() report them; the destructor waits for the goroutines,
// cancels first when an exception unwinds through it, and makes the enclosing scope
// current again; a select with a default case, try operations and buffered values still
// complete in an ended scope, and a lock of a held gmp::mutex or gmp::shared_mutex throws
// ECANCELED there (a free one is taken). Waits are for states (values on channels), never sleeps.
#include <gmp-sched/gmp.hpp>

#include "check.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <system_error>
#include <utility>

using namespace std::chrono_literals;

// Runs `f`; returns the errno of the std::system_error it threw, 0 if it returned.
template <class F> static int errno_of(F &&f)
{
    try {
        f();
    } catch (const std::system_error &e) {
        CHECK(e.code().category() == std::generic_category());
        return e.code().value();
    }
    return 0;
}

// A goroutine of the scope: says it is about to wait on `ready`, waits on a channel
// nobody feeds, and reports the errno its wait threw on `results`.
static void blocked_receiver(gmp::chan<int> ready, gmp::chan<int> results)
{
    gmp::chan<int> never;
    ready.send(1);
    results.send(errno_of([&] { (void)never.recv(); }));
}

static void step_cancel()
{
    gmp::chan<int> ready(16), results(16);
    constexpr int n = 10;
    {
        gmp::scope s;
        CHECK(gmp_scope_current() == s.native_handle());
        CHECK(!s.err());
        CHECK(!s.deadline());
        for (int i = 0; i < n; i++)
            gmp::go(blocked_receiver, ready, results);
        for (int i = 0; i < n; i++)
            CHECK(ready.recv_for(10s).status == gmp::chan_status::ok);
        const auto t0 = std::chrono::steady_clock::now();
        s.cancel();
        s.wait();
        const auto took = std::chrono::steady_clock::now() - t0;
        CHECK(took < 1s);
        CHECK(s.err() == std::errc::operation_canceled);
        // The owner's own waits are in the scope too.
        CHECK(errno_of([&] { (void)ready.recv(); }) == ECANCELED);
        CHECK(errno_of([&] { gmp::sleep_for(1h); }) == ECANCELED);
        s.cancel(); // twice: harmless
    }
    CHECK(gmp_scope_current() == nullptr);
    for (int i = 0; i < n; i++) {
        auto r = results.try_recv();
        CHECK(r && *r == ECANCELED);
    }
}

static void step_ended_scope_still_completes()
{
    gmp::scope s;
    s.cancel();
    gmp::chan<int> buffered(1), unbuffered;
    CHECK(buffered.send(7));                                   // room: no wait
    CHECK(errno_of([&] { (void)buffered.send(8); }) == ECANCELED); // full: would wait
    auto v = buffered.recv();                                  // a value is there
    CHECK(v && *v == 7);
    CHECK(unbuffered.try_recv().status == gmp::chan_status::would_block);
    CHECK(unbuffered.recv_for(0s).status == gmp::chan_status::timeout); // a try
    CHECK(errno_of([&] { (void)unbuffered.recv_for(1h); }) == ECANCELED);
    CHECK(errno_of([&] { (void)gmp::select().recv(unbuffered, [] {}).run(); }) == ECANCELED);
    CHECK(errno_of([&] { (void)gmp::select().recv(unbuffered, [] {}).timeout(1h, [] {}).run(); }) ==
          ECANCELED);
    bool defaulted = false;
    CHECK(gmp::select().recv(unbuffered, [] {}).otherwise([&] { defaulted = true; }).run() == -1);
    CHECK(defaulted);
    // Locks: a free one is taken; a held one would wait, and lock_guard throws.
    gmp::mutex m;
    gmp::shared_mutex rw;
    {
        std::lock_guard<gmp::mutex> g(m);
        CHECK(errno_of([&] { std::lock_guard<gmp::mutex> again(m); }) == ECANCELED);
        std::shared_lock<gmp::shared_mutex> r(rw);
        CHECK(errno_of([&] { std::unique_lock<gmp::shared_mutex> w(rw); }) == ECANCELED);
    }
    CHECK(m.try_lock());
    m.unlock();
}

static void deadline_receiver(gmp::chan<int> results, std::chrono::steady_clock::time_point deadline)
{
    gmp::chan<int> never;
    const int e = errno_of([&] { (void)never.recv(); });
    const auto at = std::chrono::steady_clock::now();
    // Not before the deadline (1 ms for carrying it between clocks), not long after.
    results.send(e == ETIMEDOUT && at >= deadline - 1ms && at < deadline + 5s ? 0 : e == 0 ? -1 : e);
}

static void step_deadline()
{
    gmp::chan<int> results(1);
    const auto before = std::chrono::steady_clock::now();
    {
        gmp::scope s(50ms);
        const auto d = s.deadline();
        CHECK(d);
        CHECK(*d >= before + 45ms && *d <= std::chrono::steady_clock::now() + 55ms);
        {
            gmp::scope inner(10s); // asks for later: gets the enclosing deadline
            const auto di = inner.deadline();
            CHECK(di && *di <= *d + 5ms);
        }
        CHECK(gmp_scope_current() == s.native_handle());
        gmp::go(deadline_receiver, results, *d);
        s.wait();
        CHECK(s.err() == std::errc::timed_out);
        // An untimed wait past the deadline throws (not "closed"), a timed one too.
        gmp::chan<int> never;
        CHECK(errno_of([&] { (void)never.recv(); }) == ETIMEDOUT);
        CHECK(errno_of([&] { (void)never.send(1); }) == ETIMEDOUT);
        CHECK(errno_of([&] { (void)never.recv_for(1h); }) == ETIMEDOUT);
    }
    auto r = results.try_recv();
    if (r && *r != 0)
        std::fprintf(stderr, "scope: deadline receiver: %d\n", *r);
    CHECK(r && *r == 0);
    // An expired timeout: ended at once.
    gmp::scope zero(0s);
    CHECK(zero.err() == std::errc::timed_out);
}

// A goroutine that finishes on its own: the destructor waits for it.
static void step_destructor_waits()
{
    std::atomic<bool> finished{false};
    gmp::chan<int> go_on;
    {
        gmp::scope s;
        gmp::go([&finished, go_on] {
            (void)go_on.recv(); // released from the scope's owner below
            finished = true;
        });
        CHECK(go_on.send(1));
    }
    CHECK(finished);
}

// An exception through the scope cancels it: a goroutine blocked for good is freed, the
// destructor's wait returns, the exception arrives.
static void step_exception_cancels()
{
    gmp::chan<int> ready(1), results(1);
    bool caught = false;
    try {
        gmp::scope s;
        gmp::go(blocked_receiver, ready, results);
        CHECK(ready.recv_for(10s).status == gmp::chan_status::ok);
        throw std::runtime_error("give up");
    } catch (const std::runtime_error &) {
        caught = true;
    }
    CHECK(caught);
    CHECK(gmp_scope_current() == nullptr);
    auto r = results.try_recv();
    CHECK(r && *r == ECANCELED);
}

static gmp::scope make_scope() { return gmp::scope(1h); }

// Nesting, moving, and a scope inside a goroutine.
static void step_nesting()
{
    gmp::scope outer;
    {
        gmp::scope inner = make_scope(); // moved out of the function: still current
        CHECK(gmp_scope_current() == inner.native_handle());
        outer.cancel(); // reaches the inner scope
        CHECK(inner.err() == std::errc::operation_canceled);
    }
    CHECK(gmp_scope_current() == outer.native_handle());
    gmp::chan<int> results(1);
    gmp::go([results] {
        gmp::scope mine; // in a goroutine of `outer`: its own child
        results.send(mine.err() == std::errc::operation_canceled ? 0 : 1);
    });
    outer.wait();
    auto r = results.try_recv();
    CHECK(r && *r == 0);
}

static void step_goroutine_owner()
{
    // A goroutine owns a scope and its goroutines; cancel from the main thread.
    gmp::chan<gmp_scope *> handle(1);
    gmp::chan<int> ready(16), results(16), owner_done(1);
    gmp::go([=] {
        int e = 0;
        {
            gmp::scope s;
            for (int i = 0; i < 4; i++)
                gmp::go(blocked_receiver, ready, results);
            handle.send(s.native_handle());
            e = errno_of([&] { (void)gmp::chan<int>().recv(); });
        }
        owner_done.send(e);
    });
    auto h = handle.recv();
    CHECK(h);
    for (int i = 0; i < 4; i++)
        CHECK(ready.recv_for(10s).status == gmp::chan_status::ok);
    CHECK(gmp_scope_cancel(*h) == 0);
    auto e = owner_done.recv();
    CHECK(e && *e == ECANCELED);
    for (int i = 0; i < 4; i++) {
        auto r = results.recv_for(10s);
        CHECK(r && *r == ECANCELED);
    }
}

int main()
{
    step_cancel();
    step_ended_scope_still_completes();
    step_deadline();
    step_destructor_waits();
    step_exception_cancels();
    step_nesting();
    step_goroutine_owner();
    std::printf("scope: ok\n");
    return 0;
}
