// gmp::select: receive and send cases with handlers, the default and timeout cases, nil
// channels, closed channels (not errors), move-only values through send cases (an
// unsent value is destroyed with the builder, a sent one belongs to the receiver), a
// builder run repeatedly, random choice among ready cases, and move-only handlers.
#include <gmp-sched/gmp.hpp>

#include "check.hpp"

#include <atomic>
#include <memory>
#include <string>

using namespace std::chrono_literals;

static std::atomic<long> live{0};
struct tracked {
    long v;
    explicit tracked(long x) : v(x) { live++; }
    tracked(const tracked &) = delete;
    tracked(tracked &&o) noexcept : v(o.v) { live++; }
    ~tracked() { live--; }
};

int main()
{
    gmp::chan<int> a(1), b(1);

    // Default: nothing ready.
    bool defaulted = false;
    int fired = gmp::select()
                    .recv(a, [](std::optional<int>) { CHECK(false); })
                    .recv(b, [](std::optional<int>) { CHECK(false); })
                    .otherwise([&] { defaulted = true; })
                    .run();
    CHECK(fired == -1 && defaulted);

    // A ready receive case fires with its value.
    CHECK(b.send(42));
    int got = 0;
    fired = gmp::select()
                .recv(a, [](std::optional<int>) { CHECK(false); })
                .recv(b, [&](std::optional<int> v) { got = v.value_or(-1); })
                .run();
    CHECK(fired == 1 && got == 42);

    // A send case; handlers with and without the `sent` flag.
    bool sent = false;
    fired = gmp::select().send(a, 7, [&](bool ok) { sent = ok; }).run();
    CHECK(fired == 0 && sent && *a.recv() == 7);
    int plain = 0;
    CHECK(gmp::select().send(a, 8, [&] { plain++; }).run() == 0 && plain == 1);
    CHECK(*a.recv() == 8);

    // Timeout: waits about that long, runs the handler.
    bool timed_out = false;
    auto t0 = std::chrono::steady_clock::now();
    fired = gmp::select()
                .recv(a, [](std::optional<int>) { CHECK(false); })
                .timeout(20ms, [&] { timed_out = true; })
                .run();
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(fired == -1 && timed_out && waited >= 20ms && waited < 5s);

    // A value arriving from a goroutine while select waits.
    gmp::go([b] {
        gmp::sleep_for(5ms);
        CHECK(b.send(99));
    });
    got = 0;
    fired = gmp::select()
                .recv(a, [](std::optional<int>) { CHECK(false); })
                .recv(b, [&](std::optional<int> v) { got = *v; })
                .timeout(10s, [] { CHECK(false); })
                .run();
    CHECK(fired == 1 && got == 99);

    // Closed channels: a receive case fires empty, a send case fires with sent=false.
    gmp::chan<int> closed(1);
    CHECK(closed.close());
    bool empty = false;
    CHECK(gmp::select().recv(closed, [&](std::optional<int> v) { empty = !v; }).run() == 0 && empty);
    sent = true;
    CHECK(gmp::select().send(closed, 1, [&](bool ok) { sent = ok; }).run() == 0 && !sent);

    // Nil channels never fire; a select on nothing but nil channels with no bound is
    // refused (it would wait forever).
    auto nil = gmp::chan<int>::nil();
    CHECK(gmp::select().recv(nil, [] { CHECK(false); }).timeout(1ms, [] {}).run() == -1);
    CHECK_ERRNO(gmp::select().recv(nil, [] {}).run(), EINVAL);
    bool threw = false;
    try {
        gmp::select().otherwise([] {}).timeout(1ms, [] {});
    } catch (const std::logic_error &) {
        threw = true;
    }
    CHECK(threw);

    // Move-only values: a sent one arrives; an unsent one dies with the builder.
    {
        gmp::chan<tracked> m(1);
        CHECK(gmp::select().send(m, tracked(5)).run() == 0);
        CHECK(live == 1);
        fired = gmp::select()
                    .send(m, tracked(6), [] { CHECK(false); }) // full: cannot fire
                    .otherwise([] {})
                    .run();
        CHECK(fired == -1 && live == 1);
        long v = 0;
        CHECK(gmp::select().recv(m, [&](std::optional<tracked> t) { v = t->v; }).run() == 0);
        CHECK(v == 5 && live == 0);
        gmp::chan<std::unique_ptr<std::string>> s(1);
        CHECK(gmp::select().send(s, std::make_unique<std::string>("moved")).run() == 0);
        CHECK(**s.recv() == "moved");
    }
    CHECK(live == 0);

    // A builder run in a loop: receive cases fire again; a delivered send case becomes
    // a nil channel (its value is sent once).
    {
        gmp::chan<int> in(4), out(1);
        for (int i = 1; i <= 4; i++)
            CHECK(in.send(i));
        int sum = 0, sends = 0;
        auto sel = gmp::select();
        sel.recv(in, [&](std::optional<int> v) { sum += *v; })
            .send(out, 100, [&] { sends++; });
        int rounds = 0;
        while (sum < 10 || sends < 1) {
            CHECK(sel.run() >= 0);
            CHECK(++rounds <= 5);
        }
        CHECK(sum == 10 && sends == 1 && out.len() == 1 && *out.recv() == 100);
        // out is empty again, but its delivered case is nil now; in is empty.
        sel.timeout(1ms, [] {});
        CHECK(sel.run() == -1 && out.len() == 0);
    }

    // Random choice: with both cases always ready, each fires a fair share.
    {
        gmp::chan<int> x(1), y(1);
        int xs = 0, ys = 0;
        for (int i = 0; i < 2000; i++) {
            CHECK(x.try_send(1) != gmp::chan_status::closed);
            CHECK(y.try_send(1) != gmp::chan_status::closed);
            gmp::select().recv(x, [&] { xs++; }).recv(y, [&] { ys++; }).run();
        }
        CHECK(xs + ys == 2000 && xs > 700 && ys > 700);
    }

    // An exception from a handler propagates out of run().
    {
        gmp::chan<int> c(1);
        CHECK(c.send(1));
        bool caught = false;
        try {
            gmp::select().recv(c, [](std::optional<int>) { throw std::runtime_error("handler"); }).run();
        } catch (const std::runtime_error &) {
            caught = true;
        }
        CHECK(caught && c.len() == 0);
    }

    // Move-only handlers: the receive and send cases, the default and the timeout all
    // take them (the select owns its handlers).
    {
        gmp::chan<int> c(1);
        int seen = 0;
        CHECK(c.send(1));
        CHECK(gmp::select()
                  .recv(c, [p = std::make_unique<int>(1), &seen](std::optional<int> v) { seen = *p + *v; })
                  .run() == 0 &&
              seen == 2);
        CHECK(gmp::select()
                  .send(c, 5, [p = std::make_unique<int>(3), &seen](bool ok) { seen = ok ? *p : -1; })
                  .run() == 0 &&
              seen == 3);
        // c is full: the send case cannot fire.
        auto owned = std::make_unique<int>(4);
        CHECK(gmp::select()
                  .send(c, 6, [] { CHECK(false); })
                  .otherwise([p = std::move(owned), &seen] { seen = *p; })
                  .run() == -1 &&
              seen == 4);
        CHECK(gmp::select()
                  .send(c, 7, [] { CHECK(false); })
                  .timeout(1ms, [p = std::make_unique<int>(5), &seen] { seen = *p; })
                  .run() == -1 &&
              seen == 5);
        CHECK(*c.recv() == 5);
    }

    std::printf("select: ok\n");
    return 0;
}
