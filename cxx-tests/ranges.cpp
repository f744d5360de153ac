// gmp::chan<T> as a range: range-for until close, lazy receiving (begin() receives
// nothing; a loop that stops early leaves the rest in the channel), the iterator with the
// classic algorithms (a default-constructed iterator is the end), it++, move-only
// values, a nil channel; under C++20 the concepts (std::ranges::input_range and friends),
// std::ranges algorithms and views over a channel fed by a goroutine.
#include <gmp-sched/gmp.hpp>

#include "check.hpp"

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>
#if __cplusplus >= 202002L
#include <ranges>
#endif

using namespace std::chrono_literals;

#if __cplusplus >= 202002L
static_assert(std::ranges::input_range<gmp::chan<int>>);
static_assert(std::ranges::input_range<const gmp::chan<int>>);
static_assert(std::ranges::input_range<gmp::chan<std::unique_ptr<int>>>);
static_assert(std::ranges::input_range<gmp::chan<std::string>>);
static_assert(std::input_iterator<gmp::chan<int>::iterator>);
static_assert(std::sentinel_for<gmp::chan<int>::sentinel, gmp::chan<int>::iterator>);
static_assert(std::sentinel_for<gmp::chan<int>::iterator, gmp::chan<int>::iterator>);
static_assert(std::same_as<std::ranges::range_value_t<gmp::chan<std::string>>, std::string>);
#endif

// A channel of `n` values 1..n from a goroutine, closed after the last.
static gmp::chan<int> counting(int n)
{
    gmp::chan<int> c;
    gmp::go([c, n] {
        for (int i = 1; i <= n; i++)
            CHECK(c.send(i));
        c.close();
    });
    return c;
}

static void classic()
{
    // Range-for until close, from a goroutine.
    long sum = 0;
    for (int v : counting(100))
        sum += v;
    CHECK(sum == 5050);

    // begin() receives nothing: on an empty open channel it returns at once.
    gmp::chan<int> c(3);
    auto it = c.begin();
    CHECK(c.try_send(1) == gmp::chan_status::ok);
    CHECK(c.try_send(2) == gmp::chan_status::ok);
    CHECK(c.try_send(3) == gmp::chan_status::ok);
    CHECK(c.len() == 3);
    CHECK(*it == 1 && c.len() == 2); // read: received now
    CHECK(*it == 1 && c.len() == 2); // read again: the same value
    ++it;
    CHECK(c.len() == 2); // moved past it: the next is not received yet
    ++it;                // skipping the unread 2 receives it
    CHECK(c.len() == 1);
    CHECK(*it++ == 3 && c.len() == 0);

    // A loop that stops early leaves the rest in the channel.
    for (int i = 1; i <= 3; i++)
        CHECK(c.send(i * 10));
    for (int v : c)
        if (v == 10)
            break;
    CHECK(c.len() == 2);

    // Classic algorithms with one iterator type: a default-constructed iterator is the end.
    c.close();
    CHECK(std::accumulate(c.begin(), gmp::chan<int>::iterator(), 0) == 50);
    CHECK(c.begin() == c.end() && c.begin() == gmp::chan<int>::iterator());
    auto found = counting(10);
    auto f = std::find(found.begin(), gmp::chan<int>::iterator(), 4);
    CHECK(f != gmp::chan<int>::iterator() && *f == 4);
    CHECK(*found.recv() == 5); // find stopped at 4
    while (found.recv()) {
    }

    // Move-only values come out by reference: move them away.
    gmp::chan<std::unique_ptr<std::string>> owned(4);
    CHECK(owned.send(std::make_unique<std::string>("a")));
    CHECK(owned.send(std::make_unique<std::string>("b")));
    owned.close();
    std::vector<std::unique_ptr<std::string>> kept;
    for (auto &p : owned)
        kept.push_back(std::move(p));
    CHECK(kept.size() == 2 && *kept[0] == "a" && *kept[1] == "b");

    // A nil channel's range throws EINVAL at its first receive.
    auto nil = gmp::chan<int>::nil();
    CHECK_ERRNO(for (int v : nil) (void)v, EINVAL);
}

#if __cplusplus >= 202002L
static void ranges()
{
    CHECK(std::ranges::count_if(counting(100), [](int v) { return v % 3 == 0; }) == 33);

    std::vector<int> squares;
    for (int v : counting(20) | std::views::filter([](int v) { return v % 2 == 1; }) |
                     std::views::transform([](int v) { return v * v; }))
        squares.push_back(v);
    CHECK(squares.size() == 10 && squares.front() == 1 && squares.back() == 361);

    // take(n) receives exactly n values.
    gmp::chan<int> c(5);
    for (int i = 1; i <= 5; i++)
        CHECK(c.send(i));
    std::vector<int> first;
    std::ranges::copy(c | std::views::take(3), std::back_inserter(first));
    CHECK((first == std::vector<int>{1, 2, 3}) && c.len() == 2);

    auto r = std::ranges::find(c, 5);
    CHECK(r != c.end() && *r == 5 && c.len() == 0);

    // A channel of strings through ranges::for_each.
    gmp::chan<std::string> words;
    gmp::go([words] {
        for (const char *w : {"go", "rust", "c++"})
            CHECK(words.send(w));
        words.close();
    });
    std::string all;
    std::ranges::for_each(words, [&](const std::string &w) { all += w; });
    CHECK(all == "gorustc++");
}
#endif

int main()
{
    classic();
#if __cplusplus >= 202002L
    ranges();
#endif
    std::printf("ranges: ok\n");
    return 0;
}
