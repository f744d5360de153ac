// gmp::chan<T>: trivially copyable values by value (also a struct larger than
// GMP_CHAN_MAX_ELEM, which is boxed), move-only and non-trivially-copyable types moved
// through the channel (every element constructed is destroyed exactly once, also those
// left in a channel when its last handle goes), shared handles, send/recv across
// goroutines and threads, the try_/_for/_until forms, close, len/cap, range-for, nil.
#include <gmp-sched/gmp.hpp>

#include "check.hpp"

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>

using namespace std::chrono_literals;

// Counts live instances: copies are forbidden, moves leave an empty shell that is still
// counted until destroyed.
static std::atomic<long> live{0};
struct tracked {
    long v;
    explicit tracked(long x) : v(x) { live++; }
    tracked(const tracked &) = delete;
    tracked(tracked &&o) noexcept : v(o.v) { o.v = -1; live++; }
    tracked &operator=(tracked &&o) noexcept
    {
        v = o.v;
        o.v = -1;
        return *this;
    }
    ~tracked() { live--; }
};
static_assert(!std::is_trivially_copyable_v<tracked>);

struct point {
    int x, y;
};

struct huge {
    std::array<unsigned char, GMP_CHAN_MAX_ELEM + 1> bytes;
};

static void trivially_copyable()
{
    gmp::chan<point> c(4);
    CHECK(c.cap() == 4 && c.len() == 0);
    CHECK(c.send({1, 2}));
    CHECK(c.send(point{3, 4}));
    CHECK(c.len() == 2);
    auto a = c.recv();
    CHECK(a && a->x == 1 && a->y == 2);
    auto b = c.recv();
    CHECK(b && b->x == 3 && b->y == 4);

    // Unbuffered, between a goroutine and this (non-goroutine) thread.
    gmp::chan<long> u;
    CHECK(u.cap() == 0);
    gmp::go([u] {
        for (long i = 1; i <= 1000; i++)
            CHECK(u.send(i));
        u.close();
    });
    long sum = 0;
    for (long v : u)
        sum += v;
    CHECK(sum == 1000 * 1001 / 2);
    CHECK(!u.recv()); // closed and drained
    CHECK(!u.send(1));
    CHECK(!u.close()); // already closed: false, not an exception
}

static void huge_values()
{
    gmp::chan<huge> c(2);
    auto h = std::make_unique<huge>();
    h->bytes.fill(7);
    h->bytes.back() = 9;
    CHECK(c.send(*h));
    auto got = c.recv();
    CHECK(got && got->bytes.front() == 7 && got->bytes.back() == 9);
}

static void move_only()
{
    gmp::chan<std::unique_ptr<std::string>> c(8);
    gmp::wait_group wg;
    wg.add(1);
    gmp::go([c, &wg] {
        for (int i = 0; i < 100; i++)
            CHECK(c.send(std::make_unique<std::string>(std::to_string(i))));
        c.close();
        wg.done();
    });
    int n = 0;
    for (auto &p : c) {
        CHECK(p && *p == std::to_string(n));
        n++;
    }
    CHECK(n == 100);
    wg.wait();

    // std::string (not trivially copyable) by value: moved through, contents intact.
    gmp::chan<std::string> s(1);
    std::string long_text(1000, 'x');
    CHECK(s.send(long_text));
    CHECK(long_text.size() == 1000); // sent a copy of an lvalue
    CHECK(*s.recv() == std::string(1000, 'x'));
}

static void destructors()
{
    {
        gmp::chan<tracked> c(16);
        for (long i = 0; i < 10; i++)
            CHECK(c.send(tracked(i)));
        CHECK(c.recv()->v == 0);
        gmp::chan<tracked> alias = c; // the same channel
        CHECK(alias == c && alias.len() == 9);
        c = gmp::chan<tracked>::nil();
        CHECK(alias.recv()->v == 1);
        CHECK(live == 8); // the 8 buffered ones
        // alias goes out of scope holding 8 elements: they are destroyed
    }
    CHECK(live == 0);
    {
        gmp::chan<tracked> c(4);
        CHECK(c.send(tracked(1)));
        CHECK(c.close());
        // closed with one element left: recv still drains it
        auto v = c.recv();
        CHECK(v && v->v == 1);
        CHECK(!c.recv());
        CHECK(c.send(tracked(2)) == false); // dropped, not leaked
    }
    CHECK(live == 0);
    {
        // Closed with elements in it and never drained.
        gmp::chan<tracked> c(4);
        CHECK(c.send(tracked(1)));
        CHECK(c.send(tracked(2)));
        CHECK(c.close());
    }
    CHECK(live == 0);
}

static void try_and_timeouts()
{
    gmp::chan<int> c(1);
    auto r = c.try_recv();
    CHECK(!r && r.status == gmp::chan_status::would_block && !r.value);
    CHECK(c.try_send(1) == gmp::chan_status::ok);
    CHECK(c.try_send(2) == gmp::chan_status::would_block);
    CHECK(c.send_for(2, 1ms) == gmp::chan_status::timeout);
    CHECK(c.send_for(2, -5s) == gmp::chan_status::timeout); // negative: do not wait
    r = c.try_recv();
    CHECK(r && *r == 1);

    auto t0 = std::chrono::steady_clock::now();
    auto t = c.recv_for(20ms);
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(t.status == gmp::chan_status::timeout && waited >= 20ms && waited < 5s);
    t = c.recv_until(std::chrono::steady_clock::now() + 5ms);
    CHECK(t.status == gmp::chan_status::timeout);

    // A value arriving within the timeout; duration::max() means "no limit".
    std::thread sender([c]() mutable {
        gmp::sleep_for(10ms);
        CHECK(c.send(5));
    });
    auto m = c.recv_for(std::chrono::hours::max());
    CHECK(m && *m == 5);
    sender.join();

    // A move-only value that could not be sent stays with the caller.
    gmp::chan<std::unique_ptr<int>> full(1);
    CHECK(full.send(std::make_unique<int>(1)));
    auto mine = std::make_unique<int>(2);
    CHECK(full.try_send(std::move(mine)) == gmp::chan_status::would_block);
    CHECK(mine && *mine == 2);
    CHECK(full.send_until(std::move(mine), std::chrono::steady_clock::now() + 1ms) ==
          gmp::chan_status::timeout);
    CHECK(mine && *mine == 2);
    CHECK(**full.recv() == 1);
    CHECK(full.try_send(std::move(mine)) == gmp::chan_status::ok);
    CHECK(mine == nullptr);
    CHECK(full.close());
    CHECK(**full.try_recv() == 2);
    auto drained = full.try_recv();
    CHECK(drained.status == gmp::chan_status::closed);
    auto again = std::make_unique<int>(3);
    CHECK(full.try_send(std::move(again)) == gmp::chan_status::closed);
    CHECK(again && *again == 3);
}

static void many_goroutines()
{
    // 8 senders, 8 receivers, a small buffer: every value arrives exactly once.
    gmp::chan<std::unique_ptr<long>> c(3);
    gmp::chan<long> sums;
    gmp::wait_group senders;
    senders.add(8);
    for (long s = 0; s < 8; s++)
        gmp::go([c, &senders](long base) {
            for (long i = 0; i < 1000; i++)
                CHECK(c.send(std::make_unique<long>(base * 1000 + i)));
            senders.done();
        }, s);
    for (int r = 0; r < 8; r++)
        gmp::go([c, sums] {
            long sum = 0;
            for (auto &p : c)
                sum += *p;
            CHECK(sums.send(sum));
        });
    senders.wait();
    CHECK(c.close());
    long total = 0;
    for (int r = 0; r < 8; r++)
        total += *sums.recv();
    CHECK(total == 8000L * 7999 / 2);
}

static void nil_and_errors()
{
    auto nil = gmp::chan<int>::nil();
    CHECK(!nil);
    CHECK(nil.native_handle() == nullptr);
    CHECK_ERRNO(nil.send(1), EINVAL);
    CHECK_ERRNO(nil.recv(), EINVAL);
    CHECK_ERRNO(nil.len(), EINVAL);
    // A buffer that cannot exist: 2^31 + 1 elements.
    CHECK_ERRNO(gmp::chan<char>((std::size_t{1} << 31) + 1), EINVAL);
    // A moved-from handle is nil.
    gmp::chan<int> a(1);
    gmp::chan<int> b = std::move(a);
    CHECK(b && b.cap() == 1);
}

int main()
{
    trivially_copyable();
    huge_values();
    move_only();
    destructors();
    try_and_timeouts();
    many_goroutines();
    nil_and_errors();
    CHECK(live == 0);
    std::printf("chan: ok\n");
    return 0;
}
