// `using namespace gmp;` beside the C library's headers: an unqualified select() builds a
// gmp::selector while select(2) from <sys/select.h> stays callable unqualified (two
// overloads of one name), and the other names gmp exports collide with nothing in
// <unistd.h>, <pthread.h>, <sched.h>, <signal.h>, <poll.h> or <time.h>.
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <gmp-sched/gmp.hpp>

#include "check.hpp"

using namespace gmp;
using namespace std::chrono_literals;

int main()
{
    chan<int> c(1);
    CHECK(c.send(1));
    int got = 0;
    int fired = select()
                    .recv(c, [&](std::optional<int> v) { got = *v; })
                    .timeout(10s, [] { CHECK(false); })
                    .run();
    CHECK(fired == 0 && got == 1);

    // POSIX select(2), unqualified: no descriptors, a 1 ms timeout.
    struct timeval tv = {0, 1000};
    CHECK(select(0, nullptr, nullptr, nullptr, &tv) == 0);

    // The builder's type by name.
    selector sel;
    sel.recv(c, [] { CHECK(false); }).otherwise([] {});
    CHECK(sel.run() == -1);

    // The rest of the namespace, unqualified.
    wait_group wg;
    mutex mu;
    condition_variable cv;
    once_flag once;
    int n = 0, calls = 0;
    wg.add(4);
    for (int i = 0; i < 4; i++)
        go([&] {
            call_once(once, [&] { calls++; });
            yield();
            sleep_for(100us);
            {
                std::lock_guard<mutex> lk(mu);
                n++;
            }
            cv.notify_all();
            wg.done();
        });
    {
        std::unique_lock<mutex> lk(mu);
        cv.wait(lk, [&] { return n == 4; });
    }
    wg.wait();
    CHECK(n == 4 && calls == 1 && goid() == 0 && maxprocs() >= 1);

    std::printf("namespace: ok\n");
    return 0;
}
