// Signals as channels (gmp::signal_notify / gmp::signal_stop, Go's os/signal): a raised
// SIGUSR1 arrives on the chan<int> as its number; after stop the program's own handler
// is back; a refused signal throws std::system_error (EINVAL).
#include <gmp-sched/gmp.hpp>

#include "check.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <system_error>

using namespace std::chrono_literals;

static std::atomic<int> own_calls{0};

extern "C" void own_handler(int) { own_calls++; }

int main()
{
    CHECK(std::signal(SIGUSR1, own_handler) != SIG_ERR);
    gmp::chan<int> c(4);
    gmp::signal_notify(c, {SIGUSR1});
    CHECK(std::raise(SIGUSR1) == 0);
    auto r = c.recv_for(5s);
    CHECK(r && *r == SIGUSR1);
    CHECK(own_calls == 0);
    gmp::signal_stop(c);
    CHECK(std::raise(SIGUSR1) == 0);
    CHECK(own_calls == 1);
    bool threw = false;
    try {
        gmp::signal_notify(c, {SIGURG});
    } catch (const std::system_error &e) {
        threw = e.code().value() == EINVAL;
    }
    CHECK(threw);
    std::printf("signal: ok\n");
    return 0;
}
