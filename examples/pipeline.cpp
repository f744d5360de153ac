// pipeline: Go's concurrent prime sieve and a worker pool, written with gmp.hpp.
//
// The sieve is a chain of goroutines, one per prime found, each filtering the multiples
// of its prime out of the stream it passes on (channels carry ints by value). The pool
// is four workers taking jobs (move-only std::unique_ptr payloads) from one channel and
// reporting on another, with a select that also watches a deadline.
//
//   c++ -std=c++17 pipeline.cpp $(pkg-config --cflags --libs gmp-sched) -o pipeline
#include <gmp-sched/gmp.hpp>

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace std::chrono_literals;

// Sends 2, 3, 4, ... up to `limit`, then closes.
static void generate(gmp::chan<int> out, int limit)
{
    for (int i = 2; i < limit; i++)
        out.send(i);
    out.close();
}

// Passes on the values of `in` that `prime` does not divide.
static void filter(gmp::chan<int> in, gmp::chan<int> out, int prime)
{
    for (int v : in)
        if (v % prime != 0)
            out.send(v);
    out.close();
}

static int count_primes(int limit)
{
    gmp::chan<int> ch;
    gmp::go(generate, ch, limit);
    int found = 0;
    // Each prime that comes out of the chain gets its own filter goroutine.
    while (auto prime = ch.recv()) {
        found++;
        gmp::chan<int> next;
        gmp::go(filter, ch, next, *prime);
        ch = next;
    }
    return found;
}

struct job {
    int id;
    std::string text;
};

int main()
{
    const int limit = 2000;
    const int primes = count_primes(limit);
    std::printf("primes below %d: %d\n", limit, primes);

    gmp::chan<std::unique_ptr<job>> jobs(8);
    gmp::chan<std::size_t> lengths(8);
    gmp::wait_group workers;
    gmp::mutex mu;
    std::vector<int> done_ids;
    for (int w = 0; w < 4; w++) {
        workers.add(1);
        gmp::go([&, jobs, lengths] {
            for (auto &j : jobs) {
                lengths.send(j->text.size());
                std::lock_guard<gmp::mutex> lk(mu);
                done_ids.push_back(j->id);
            }
            workers.done();
        });
    }
    gmp::go([jobs] {
        for (int i = 0; i < 100; i++)
            jobs.send(std::make_unique<job>(job{i, std::string(static_cast<std::size_t>(i), '*')}));
        jobs.close();
    });

    std::size_t total = 0;
    int received = 0;
    bool late = false;
    while (received < 100 && !late)
        gmp::select()
            .recv(lengths, [&](std::optional<std::size_t> n) {
                total += *n;
                received++;
            })
            .timeout(10s, [&] { late = true; })
            .run();
    workers.wait();
    std::printf("%d jobs, %zu characters, %zu results collected\n", received, total, done_ids.size());
    // 303 primes below 2000; 0 + 1 + ... + 99 characters.
    return (primes == 303 && !late && total == 4950 && done_ids.size() == 100) ? 0 : 1;
}
