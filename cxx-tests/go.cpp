// gmp::go and gmp::go_with: callables of every kind (lambdas with move-only captures,
// function pointers with arguments, member functions, mutable functors), arguments
// passed by value as std::thread does, options (pinned, locked, stack size), many
// goroutines, exceptions caught inside goroutines, the gmp::goroutine handle (join,
// detach, dropping it), and an exception escaping a goroutine, which must end the
// program with a gmp: message.
#include <gmp-sched/gmp.hpp>

#include "check.hpp"

#include <atomic>
#include <memory>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>
#include <vector>

static std::atomic<long> total{0};

static void add(long a, const std::string &s, gmp::wait_group *wg)
{
    total += a + static_cast<long>(s.size());
    wg->done();
}

struct counter {
    long n = 0;
    void bump(long by, gmp::wait_group *wg)
    {
        n += by;
        total += n;
        wg->done();
    }
};

struct mutable_functor {
    int calls = 0;
    gmp::wait_group *wg;
    void operator()() // not const: the goroutine owns its copy
    {
        calls++;
        total += calls * 1000;
        wg->done();
    }
};

static void throws_runtime_error() { throw std::runtime_error("boom in goroutine"); }

// Sets a flag when destroyed: join() returns after the goroutine's copies are gone.
struct flags_on_destroy {
    std::atomic<bool> *flag;
    explicit flags_on_destroy(std::atomic<bool> *f) : flag(f) {}
    flags_on_destroy(flags_on_destroy &&o) noexcept : flag(std::exchange(o.flag, nullptr)) {}
    ~flags_on_destroy()
    {
        if (flag)
            *flag = true;
    }
};

// gmp::goroutine: join from a plain thread and from a goroutine, detach, dropping a
// handle (never blocks), moves, errors.
static void handles()
{
    // Join from this (plain) thread: the goroutine's writes and the destruction of its
    // copies happen before join() returns.
    long result = 0;
    std::atomic<bool> destroyed{false};
    gmp::goroutine g = gmp::go([&result](flags_on_destroy) {
        gmp::sleep_for(std::chrono::milliseconds(5));
        result = 42;
    }, flags_on_destroy(&destroyed));
    CHECK(g.joinable() && g.id() > 0);
    g.join();
    CHECK(!g.joinable() && g.id() == 0 && result == 42 && destroyed);
    CHECK_ERRNO(g.join(), EINVAL);
    CHECK_ERRNO(g.detach(), EINVAL);

    // Join a goroutine that has already returned.
    gmp::chan<int> started(1);
    auto quick = gmp::go([started] { CHECK(started.send(1)); });
    CHECK(*started.recv() == 1);
    gmp::sleep_for(std::chrono::milliseconds(5));
    CHECK(quick.joinable());
    quick.join();

    // Join from goroutines (they park): a tree of joins.
    std::atomic<long> leaves{0};
    auto root = gmp::go([&] {
        std::vector<gmp::goroutine> kids;
        for (int i = 0; i < 10; i++)
            kids.push_back(gmp::go([&] {
                std::vector<gmp::goroutine> grandkids;
                for (int j = 0; j < 10; j++)
                    grandkids.push_back(gmp::go([&] {
                        gmp::yield();
                        leaves++;
                    }));
                for (auto &k : grandkids)
                    k.join();
            }));
        for (auto &k : kids)
            k.join();
        CHECK(leaves == 100);
    });
    root.join();
    CHECK(leaves == 100);

    // A goroutine cannot join itself.
    gmp::chan<gmp::goroutine *> self(1);
    gmp::chan<bool> deadlock_seen(1);
    gmp::goroutine me = gmp::go([self, deadlock_seen] {
        gmp::goroutine *h = *self.recv();
        bool seen = false;
        try {
            h->join();
        } catch (const std::system_error &e) {
            seen = e.code() == std::errc::resource_deadlock_would_occur;
        }
        CHECK(deadlock_seen.send(seen));
    });
    CHECK(self.send(&me));
    CHECK(*deadlock_seen.recv());
    me.join();

    // Dropping a handle detaches: a goroutine blocked on a channel does not block the
    // statement that started it, nor the handle's destruction.
    gmp::chan<int> gate, out(1);
    gmp::go([gate, out] { CHECK(out.send(*gate.recv() + 1)); });
    {
        auto dropped = gmp::go([gate] { (void)gate; });
        auto moved = std::move(dropped);
        CHECK(!dropped.joinable() && moved.joinable());
        moved = gmp::go([] {}); // detaches the goroutine it had
        gmp::goroutine other;
        swap(other, moved);
        CHECK(other.joinable() && !moved.joinable());
        other.detach();
        CHECK(!other.joinable());
    }
    CHECK(gate.send(1));
    CHECK(*out.recv() == 2);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        // Misuse cases: must abort with the gmp: message naming the exception.
        std::string which = argv[1];
        gmp::wait_group wg;
        wg.add(1);
        if (which == "throw")
            gmp::go(throws_runtime_error);
        else if (which == "throw_int")
            gmp::go([] { throw 42; });
        wg.wait(); // never done: the goroutine ends the program
        return 0;
    }

    gmp::wait_group wg;

    // A lambda owning a move-only capture.
    wg.add(1);
    auto p = std::make_unique<long>(7);
    gmp::go([q = std::move(p), &wg] {
        total += *q;
        wg.done();
    });
    CHECK(p == nullptr);

    // A function with arguments: copies, moves, conversions as std::thread.
    wg.add(1);
    std::string hello = "hello";
    gmp::go(add, 10, hello, &wg);
    CHECK(hello == "hello");

    // A move-only argument.
    wg.add(1);
    gmp::go([&wg](std::unique_ptr<long> v) {
        total += *v;
        wg.done();
    }, std::make_unique<long>(100));

    // A member function through std::invoke.
    counter c;
    wg.add(1);
    gmp::go(&counter::bump, &c, 3, &wg);

    // A mutable functor (the goroutine's own copy).
    mutable_functor f{0, &wg};
    wg.add(1);
    gmp::go(f);
    wg.wait();
    CHECK(f.calls == 0);
    CHECK(c.n == 3);
    CHECK(total == 7 + 10 + 5 + 100 + 3 + 1000);

    // Many goroutines, each started from another goroutine too.
    std::atomic<int> ran{0};
    wg.add(2000);
    for (int i = 0; i < 1000; i++)
        gmp::go([&] {
            ran++;
            gmp::go([&] {
                ran++;
                wg.done();
            });
            wg.done();
        });
    wg.wait();
    CHECK(ran == 2000);

    // go_with: a pinned goroutine keeps its OS thread across yields; a custom stack
    // size holds a frame larger than the default would.
    wg.add(1);
    std::atomic<bool> same_thread{false};
    CHECK(gmp::go_with({0, true}, [&] {
        const long tid = syscall(SYS_gettid);
        bool same = true;
        for (int i = 0; i < 100; i++) {
            gmp::yield();
            same = same && syscall(SYS_gettid) == tid;
        }
        same_thread = same;
        wg.done();
    }).id() > 0);
    // go_with locked: the goroutine is locked from its start (a lock nests to 2) and
    // keeps its thread until it unlocks.
    wg.add(1);
    std::atomic<bool> locked_ok{false};
    CHECK(gmp::go_with({0, false, true}, [&] {
        const long tid = syscall(SYS_gettid);
        bool ok = gmp_lock_os_thread() == 2 && gmp_unlock_os_thread() == 1;
        for (int i = 0; i < 20; i++) {
            gmp::yield();
            ok = ok && syscall(SYS_gettid) == tid;
        }
        locked_ok = ok && gmp_unlock_os_thread() == 0;
        wg.done();
    }).id() > 0);
    wg.add(1);
    std::atomic<long> big_sum{0};
    gmp::go_with({4u << 20, false}, [&] {
        volatile char frame[2u << 20];
        for (std::size_t i = 0; i < sizeof frame; i += 4096)
            frame[i] = 1;
        long s = 0;
        for (std::size_t i = 0; i < sizeof frame; i += 4096)
            s += frame[i];
        big_sum = s;
        wg.done();
    });
    wg.wait();
    CHECK(same_thread);
    CHECK(locked_ok);
    CHECK(big_sum == (2 << 20) / 4096);

    // Exceptions thrown and caught inside goroutines, across switches, are ordinary.
    std::atomic<int> caught{0};
    wg.add(50);
    for (int i = 0; i < 50; i++)
        gmp::go([&, i] {
            try {
                gmp::yield();
                if (i % 2 == 0)
                    throw std::runtime_error(std::to_string(i));
                throw i;
            } catch (const std::runtime_error &e) {
                caught += std::stoi(e.what()) == i;
            } catch (int v) {
                caught += v == i;
            }
            wg.done();
        });
    wg.wait();
    CHECK(caught == 50);

    // Options the runtime refuses are std::system_error(EINVAL); nothing leaks.
    CHECK_ERRNO(gmp::go_with({1, false}, [] {}), EINVAL);

    handles();

    CHECK(gmp::goid() == 0);
    std::printf("go: ok\n");
    return 0;
}
