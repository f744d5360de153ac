/*
 * gmp.hpp -- C++17 interface to libgmp (Go's M:P:G goroutine scheduler), header-only;
 * C++20 adds the range concepts. A guide: docs/cpp.md.
 *
 * A thin layer over gmp.h (included here; the C API stays available):
 *  - gmp::go(f, args...)            a goroutine running any callable (move-only ones too);
 *                                   returns a gmp::goroutine to join() or drop
 *  - gmp::chan<T>                   Go's channel for any movable T, shared by copying; an
 *                                   input range of the values it receives until closed
 *  - gmp::select()                  a gmp::selector, the builder for Go's select: cases,
 *                                   default, timeout
 *  - gmp::mutex, shared_mutex,      Go's sync primitives with the standard interfaces, so
 *    condition_variable,            std::lock_guard, std::unique_lock, std::scoped_lock and
 *    wait_group, once_flag          std::shared_lock work with them; timed waits:
 *                                   condition_variable::wait_for/until, gmp::timed_mutex
 *  - gmp::scope                     Go's context (WithCancel / WithTimeout) carried by the
 *                                   goroutine: cancel and deadline reach every wait of the
 *                                   goroutines started in it; the destructor waits for them
 *  - gmp::sleep_for, yield, goid, lock_os_thread (a scope guard)
 *
 * Errors: a negative errno from the C API becomes std::system_error (generic_category,
 * the errno category). A closed channel is not an error: recv() returns an empty
 * std::optional, send() returns false, as Go's `v, ok := <-c` reports it. A wait ended
 * by its gmp::scope throws std::system_error with ECANCELED or ETIMEDOUT.
 *
 * An exception escaping a goroutine ends the program (as one escaping a std::thread
 * does) with a "gmp: goroutine N: uncaught exception ..." line naming its type and
 * what(): the runtime under the goroutine is not C++ and must not be unwound through.
 *
 * Goroutines may resume on another OS thread after any call that can switch (channel
 * operations, locks, waits, sleeps, yield): do not keep the address of a thread_local
 * across them (see gmp.h; gmp::go_with({.pinned = true}, ...) pins a goroutine).
 */
#ifndef GMP_SCHED_HPP
#define GMP_SCHED_HPP

#if __cplusplus < 201703L
#error "gmp.hpp needs C++17 or later"
#endif

#include "gmp.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#if defined(__GNUC__) && __has_include(<cxxabi.h>)
#include <cxxabi.h>
#define GMP_SCHED_HPP_CXXABI 1
#endif

namespace gmp {

namespace detail {

/* Throws the std::system_error for a negative errno result `r` of the C call `what`. */
[[noreturn]] inline void throw_errno(std::int64_t r, const char *what)
{
    throw std::system_error(static_cast<int>(-r), std::generic_category(), what);
}

/* Returns `r`, or throws for a negative errno result. */
inline std::int64_t check(std::int64_t r, const char *what)
{
    if (r < 0)
        throw_errno(r, what);
    return r;
}

/* A timeout for the C API: at least 1 ns when positive (rounded up), 0 ("do not wait")
 * when zero or negative, as std's wait_for treats it, and -1 ("no limit") when beyond
 * what int64 nanoseconds hold (about 292 years, e.g. duration::max()). */
template <class Rep, class Period>
std::int64_t timeout_ns(const std::chrono::duration<Rep, Period> &d)
{
    const long double ns = std::chrono::duration<long double, std::nano>(d).count();
    if (!(ns > 0))
        return 0;
    if (ns >= 9.2e18L)
        return -1;
    const auto whole = static_cast<std::int64_t>(ns);
    return static_cast<long double>(whole) < ns ? whole + 1 : whole;
}

template <class Clock, class Duration>
std::int64_t timeout_ns(const std::chrono::time_point<Clock, Duration> &deadline)
{
    return timeout_ns(deadline - Clock::now());
}

/* The dynamic type of the exception being handled, demangled where the ABI allows. */
inline std::string current_exception_type(const std::type_info *known)
{
#ifdef GMP_SCHED_HPP_CXXABI
    const std::type_info *t = known ? known : abi::__cxa_current_exception_type();
    if (t == nullptr)
        return "unknown";
    int status = 0;
    char *name = abi::__cxa_demangle(t->name(), nullptr, nullptr, &status);
    std::string out = (status == 0 && name) ? name : t->name();
    std::free(name);
    return out;
#else
    return known ? known->name() : "unknown";
#endif
}

/* Ends the program for an exception that escaped goroutine code. Called from a catch
 * handler; never returns. */
[[noreturn]] inline void uncaught_in_goroutine() noexcept
{
    std::string type = "unknown", what;
    try {
        throw;
    } catch (const std::exception &e) {
        try {
            type = current_exception_type(&typeid(e));
            what = e.what();
        } catch (...) {
        }
    } catch (...) {
        try {
            type = current_exception_type(nullptr);
        } catch (...) {
        }
    }
    std::fprintf(stderr, "gmp: goroutine %lld: uncaught exception of type %s%s%s\n",
                 static_cast<long long>(gmp_goid()), type.c_str(), what.empty() ? "" : ": ",
                 what.c_str());
    std::fflush(stderr);
    std::abort();
}

/* What a goroutine started by gmp::go shares with its gmp::goroutine handle: a
 * WaitGroup that counts 1 until the goroutine's function has returned and its copies of
 * the callable and arguments are destroyed, and a reference count (the goroutine and the
 * handle: the last to let go deletes it). */
struct go_state {
    gmp_wg done{0, 0, 0};
    std::atomic<int> refs{2};
    std::int64_t id = 0;

    go_state() = default;
    go_state(const go_state &) = delete;
    go_state &operator=(const go_state &) = delete;
    virtual ~go_state() = default;

    void release() noexcept
    {
        // acq_rel: the last owner sees everything the other did before letting go.
        if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
            delete this;
    }
};

/* The goroutine's own part: the callable and its arguments, destroyed when it returns. */
template <class F, class Tuple> struct task final : go_state {
    struct body {
        F f;
        Tuple args;
        template <class G, class... A> explicit body(G &&g, A &&...a) : f(std::forward<G>(g)), args(std::forward<A>(a)...) {}
    };
    std::optional<body> b;
};

/* The goroutine's C entry: runs the task, destroys the callable, marks the state done and
 * lets go of it. Nothing may unwind out of it (the caller is the Rust runtime), so every
 * exception ends the program. */
template <class Task> void task_entry(void *p) noexcept
{
    auto *t = static_cast<Task *>(p);
    try {
        std::apply(std::move(t->b->f), std::move(t->b->args));
        t->b.reset();
    } catch (...) {
        uncaught_in_goroutine();
    }
    (void)gmp_wg_done(&t->done);
    t->release();
}

template <class T> struct identity {
    using type = T;
};
template <class T> using identity_t = typename identity<T>::type;

template <class> inline constexpr bool always_false = false;

/* A type-erased callable that may be move-only: C++23's std::move_only_function, reduced
 * to what this header stores (a select's default or timeout handler). Empty, or owning
 * one callable on the heap; moving it moves the pointer, never the callable. */
template <class Sig> class move_only_function;

template <class R, class... Args> class move_only_function<R(Args...)> {
    struct base {
        virtual ~base() = default;
        virtual R call(Args &&...args) = 0;
    };
    template <class F> struct holder final : base {
        F f;
        explicit holder(F &&fn) : f(std::move(fn)) {}
        R call(Args &&...args) override
        {
            if constexpr (std::is_void_v<R>)
                std::invoke(f, std::forward<Args>(args)...);
            else
                return std::invoke(f, std::forward<Args>(args)...);
        }
    };
    std::unique_ptr<base> p_;

  public:
    move_only_function() noexcept = default;
    move_only_function(std::nullptr_t) noexcept {}
    template <class F, class D = std::decay_t<F>,
              std::enable_if_t<!std::is_same_v<D, move_only_function> &&
                                   std::is_invocable_r_v<R, D &, Args...>,
                               int> = 0>
    move_only_function(F &&f) : p_(std::make_unique<holder<D>>(D(std::forward<F>(f))))
    {
    }
    move_only_function(move_only_function &&) noexcept = default;
    move_only_function &operator=(move_only_function &&) noexcept = default;
    move_only_function(const move_only_function &) = delete;
    move_only_function &operator=(const move_only_function &) = delete;

    explicit operator bool() const noexcept { return p_ != nullptr; }
    /* Calls the callable; it must not be empty. */
    R operator()(Args... args) { return p_->call(std::forward<Args>(args)...); }
};

} // namespace detail

/* Options of gmp::go_with (gmp_attr): stack bytes (0: the default), pinning to the
 * OS thread that first runs the goroutine (GMP_GO_PINNED), and starting locked to its
 * thread, as if its first call were gmp_lock_os_thread (GMP_GO_LOCKED). */
struct go_options {
    std::size_t stack_size = 0;
    bool pinned = false;
    bool locked = false;
};

/* A goroutine started by gmp::go, as std::thread is a thread: join() waits for its
 * function to return (a goroutine that joins parks; a plain thread blocks), detach()
 * lets it run on its own. Unlike std::thread (std::terminate) and std::jthread (join),
 * destroying a joinable handle detaches it, as Go's goroutines are never joined: the
 * statement `gmp::go(f);` starts f and goes on. Move-only. */
class goroutine {
    detail::go_state *st_ = nullptr;

    explicit goroutine(detail::go_state *st) noexcept : st_(st) {}
    template <class F, class... Args> friend goroutine go_with(const go_options &, F &&, Args &&...);

  public:
    /* A handle to no goroutine (not joinable). */
    goroutine() noexcept = default;
    goroutine(goroutine &&o) noexcept : st_(std::exchange(o.st_, nullptr)) {}
    /* Detaches the goroutine this handle had, if any, and takes `o`'s. */
    goroutine &operator=(goroutine &&o) noexcept
    {
        if (this != &o) {
            if (st_)
                st_->release();
            st_ = std::exchange(o.st_, nullptr);
        }
        return *this;
    }
    goroutine(const goroutine &) = delete;
    goroutine &operator=(const goroutine &) = delete;
    /* Detaches (see the class comment). */
    ~goroutine()
    {
        if (st_)
            st_->release();
    }

    /* Whether the handle still refers to its goroutine: not joined, not detached. A
     * goroutine that has returned stays joinable until join() or detach(). */
    bool joinable() const noexcept { return st_ != nullptr; }

    /* The goroutine's id (gmp_goid() inside it) while joinable, else 0. */
    std::int64_t id() const noexcept { return st_ ? st_->id : 0; }

    /* Waits until the goroutine's function has returned and its copies of the callable
     * and arguments are destroyed; what it did happens before join() returns. Then the
     * handle is not joinable. Throws std::system_error: EINVAL if it is not joinable,
     * EDEADLK if the goroutine would join itself. */
    void join()
    {
        if (!st_)
            throw std::system_error(EINVAL, std::generic_category(), "gmp::goroutine::join");
        if (st_->id == gmp_goid())
            throw std::system_error(EDEADLK, std::generic_category(), "gmp::goroutine::join");
        detail::check(gmp_wg_wait(&st_->done), "gmp_wg_wait");
        std::exchange(st_, nullptr)->release();
    }

    /* Lets the goroutine run on without a handle. Throws std::system_error (EINVAL) if
     * it is not joinable. */
    void detach()
    {
        if (!st_)
            throw std::system_error(EINVAL, std::generic_category(), "gmp::goroutine::detach");
        std::exchange(st_, nullptr)->release();
    }

    void swap(goroutine &o) noexcept { std::swap(st_, o.st_); }
    friend void swap(goroutine &a, goroutine &b) noexcept { a.swap(b); }
};

/* Starts a goroutine running `std::invoke(f, args...)` on copies (or moves) of `f` and
 * `args`, as std::thread does; move-only callables and arguments are fine. Returns its
 * handle, which may be dropped (see gmp::goroutine). Throws std::system_error (ENOMEM,
 * EINVAL) if it could not be started. */
template <class F, class... Args> goroutine go_with(const go_options &opts, F &&f, Args &&...args)
{
    using Fn = std::decay_t<F>;
    using Tuple = std::tuple<std::decay_t<Args>...>;
    static_assert(std::is_invocable_v<Fn, std::decay_t<Args>...>,
                  "gmp::go: the function cannot be called with these arguments (by value)");
    using Task = detail::task<Fn, Tuple>;
    auto t = std::make_unique<Task>();
    t->b.emplace(std::forward<F>(f), std::forward<Args>(args)...);
    detail::check(gmp_wg_add(&t->done, 1), "gmp_wg_add");
    gmp_attr attr{};
    attr.stack_size = opts.stack_size;
    attr.flags = (opts.pinned ? GMP_GO_PINNED : 0u) | (opts.locked ? GMP_GO_LOCKED : 0u);
    // The id is known only once the goroutine runs; it reads nothing of the state but
    // the callable, so the id is stored after the start (the handle's reads of it are
    // this thread's own write).
    Task *raw = t.get();
    const std::int64_t id = gmp_go_attr(&detail::task_entry<Task>, raw, &attr);
    detail::check(id, "gmp_go");
    t.release(); // the goroutine and the handle own it now
    raw->id = id;
    return goroutine(raw);
}

/* Starts a goroutine with the default options; see go_with. */
template <class F, class... Args> goroutine go(F &&f, Args &&...args)
{
    return go_with(go_options{}, std::forward<F>(f), std::forward<Args>(args)...);
}

/* Gosched: lets other goroutines run (sched_yield outside goroutines). */
inline void yield() noexcept { gmp_yield(); }

/* The calling goroutine's id, 0 outside goroutines. */
inline std::int64_t goid() noexcept { return gmp_goid(); }

/* Parks the calling goroutine on a timer (a plain thread sleeps); <= 0 only yields.
 * In a scope that ends first (gmp::scope), throws std::system_error (ECANCELED,
 * ETIMEDOUT). */
template <class Rep, class Period> void sleep_for(const std::chrono::duration<Rep, Period> &d)
{
    const std::int64_t ns = detail::timeout_ns(d);
    detail::check(gmp_sleep(ns < 0 ? INT64_MAX : ns), "gmp_sleep");
}

template <class Clock, class Duration>
void sleep_until(const std::chrono::time_point<Clock, Duration> &deadline)
{
    sleep_for(deadline - Clock::now());
}

/* ---------------------------------------------------------------------------------
 * Channels
 * ------------------------------------------------------------------------------- */

/* How a non-blocking or timed channel operation ended. */
enum class chan_status {
    ok,          /* sent / received */
    closed,      /* the channel is closed (and, for a receive, drained) */
    would_block, /* try_: no partner and no buffer room / no element */
    timeout,     /* _for / _until: the time passed */
};

/* What try_recv / recv_for / recv_until return: a value when status is ok. */
template <class T> struct recv_result {
    std::optional<T> value;
    chan_status status;

    explicit operator bool() const noexcept { return status == chan_status::ok; }
    T &operator*() & { return *value; }
    T &&operator*() && { return std::move(*value); }
    T *operator->() { return &*value; }
};

namespace detail {

/* How a T travels through the C channel. Trivially copyable values of at most
 * GMP_CHAN_MAX_ELEM bytes travel as their bytes. Everything else travels as a T*
 * (a "box" from new T(std::move(v))): the receiver takes ownership, so a T is moved,
 * never copied bit-wise; boxes left in a channel are deleted with its last handle. */
template <class T>
inline constexpr bool boxed = !(std::is_trivially_copyable_v<T> && sizeof(T) <= GMP_CHAN_MAX_ELEM);

/* Where one received element lands. */
template <class T, bool Boxed = boxed<T>> struct recv_slot;

template <class T> struct recv_slot<T, false> {
    alignas(T) unsigned char raw[sizeof(T)];
    void *buf() noexcept { return raw; }
    T take() { return *std::launder(reinterpret_cast<T *>(raw)); }
};

template <class T> struct recv_slot<T, true> {
    T *box = nullptr;
    void *buf() noexcept { return &box; }
    T take()
    {
        std::unique_ptr<T> owned(box);
        box = nullptr;
        return T(std::move(*owned));
    }
};

/* One element on its way in: the bytes of `value`, or a box owning a moved-in T. */
template <class T, bool Boxed = boxed<T>> struct send_slot;

template <class T> struct send_slot<T, false> {
    T value;
    explicit send_slot(T v) : value(v) {}
    const void *buf() const noexcept { return std::addressof(value); }
    void sent() noexcept {}
};

template <class T> struct send_slot<T, true> {
    std::unique_ptr<T> owned;
    T *box;
    explicit send_slot(T &&v) : owned(new T(std::move(v))), box(owned.get()) {}
    const void *buf() const noexcept { return &box; }
    void sent() noexcept { (void)owned.release(); } // the receiver owns the box now
};

/* The error of the caller's current scope (gmp::scope): 0 while it runs in none or in
 * one that has not ended, else -ECANCELED or -ETIMEDOUT. */
inline int scope_error() noexcept
{
    gmp_scope *s = gmp_scope_current();
    return s == nullptr ? 0 : gmp_scope_err(s);
}

/* How long a channel call may wait: not at all (a try), a time, or without limit. */
enum class wait_kind { none, timed, untimed };

/* The kind of a call waiting `ns` nanoseconds (detail::timeout_ns's result). */
inline wait_kind wait_kind_of(std::int64_t ns) noexcept
{
    return ns == 0 ? wait_kind::none : ns < 0 ? wait_kind::untimed : wait_kind::timed;
}

/* Maps a channel call's result; throws for anything but the documented outcomes.
 * -ETIMEDOUT is a timeout only for a call that may not wait or waits for a time: a call
 * that waited in a scope that has ended throws the scope's error (a wait its scope
 * ended always throws), and an untimed one sees -ETIMEDOUT only from its scope. */
inline chan_status chan_result(int r, const char *what, wait_kind kind = wait_kind::none)
{
    switch (r) {
    case 0:
        return chan_status::ok;
    case -EPIPE:
        return chan_status::closed;
    case -EAGAIN:
        return chan_status::would_block;
    case -ETIMEDOUT: {
        if (kind == wait_kind::none)
            return chan_status::timeout;
        const int e = scope_error();
        if (e < 0)
            throw_errno(e, what);
        if (kind == wait_kind::untimed)
            throw_errno(r, what);
        return chan_status::timeout;
    }
    default:
        throw_errno(r < 0 ? r : -EPROTO, what);
    }
}

} // namespace detail

/* Go's channel of T: buffered or not, shared by copying the handle (every copy is the
 * same channel; the last one to go frees it and destroys the elements still buffered).
 * Like a shared_ptr, the handle is const when the channel's operations are used: a
 * lambda may capture it by value and send on it.
 * A default-constructed channel is unbuffered; chan<T>::nil() is Go's nil channel (a
 * select case on it never fires; other operations throw EINVAL). All operations may be
 * called from goroutines and plain threads; the blocking ones park a goroutine. */
template <class T> class chan {
    static_assert(std::is_object_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T>,
                  "gmp::chan<T>: T must be a non-const object type");
    static_assert(std::is_move_constructible_v<T>, "gmp::chan<T>: T must be movable");
    static constexpr bool boxed = detail::boxed<T>;

    /* The C channel and its one C reference; destroyed with the last handle. */
    struct state {
        gmp_chan *c = nullptr;
        state() = default;
        state(const state &) = delete;
        state &operator=(const state &) = delete;
        ~state()
        {
            if (c == nullptr) // gmp_chan_make failed
                return;
            if constexpr (boxed) {
                // Nobody else holds a handle, so nobody is blocked on the channel: what is
                // buffered comes out at once, then -EAGAIN (open) or -EPIPE (closed).
                T *box = nullptr;
                while (gmp_chan_try_recv(c, &box) == 0)
                    delete box;
            }
            gmp_chan_release(c);
        }
    };
    std::shared_ptr<state> s_;

    gmp_chan *raw() const noexcept { return s_ ? s_->c : nullptr; }

    struct nil_tag {};
    explicit chan(nil_tag) noexcept {}

    template <class Call>
    chan_status deliver(detail::send_slot<T> &slot, Call call, const char *what,
                        detail::wait_kind kind = detail::wait_kind::none) const
    {
        const chan_status st = detail::chan_result(call(raw(), slot.buf()), what, kind);
        if (st == chan_status::ok)
            slot.sent();
        return st;
    }

    /* A send that hands `v` back (moved back into it) unless it was sent. */
    template <class Call>
    chan_status send_or_keep(T &v, Call call, const char *what,
                             detail::wait_kind kind = detail::wait_kind::none) const
    {
        if constexpr (boxed) {
            static_assert(std::is_move_assignable_v<T>,
                          "gmp::chan<T>::try_send/send_for/send_until need a move-assignable T "
                          "(an unsent value is moved back into the argument)");
            detail::send_slot<T> slot(std::move(v));
            const chan_status st = deliver(slot, call, what, kind);
            if (st != chan_status::ok)
                v = std::move(*slot.owned);
            return st;
        } else {
            detail::send_slot<T> slot(v);
            return deliver(slot, call, what, kind);
        }
    }

    /* A blocking receive on `c`; empty once it is closed and drained. */
    static std::optional<T> recv_on(gmp_chan *c)
    {
        detail::recv_slot<T> slot;
        if (detail::chan_result(gmp_chan_recv(c, slot.buf()), "gmp_chan_recv", detail::wait_kind::untimed) ==
            chan_status::ok)
            return std::optional<T>(slot.take());
        return std::nullopt;
    }

    template <class Call>
    recv_result<T> recv_with(Call call, const char *what, detail::wait_kind kind = detail::wait_kind::none) const
    {
        detail::recv_slot<T> slot;
        const chan_status st = detail::chan_result(call(raw(), slot.buf()), what, kind);
        if (st == chan_status::ok)
            return {std::optional<T>(slot.take()), st};
        return {std::nullopt, st};
    }

  public:
    using value_type = T;

    /* Makes a channel with a buffer of `cap` elements (0: unbuffered). Throws
     * std::system_error (EINVAL for an impossible capacity, ENOMEM). */
    explicit chan(std::size_t cap = 0) : s_(std::make_shared<state>())
    {
        detail::check(gmp_chan_make(&s_->c, boxed ? sizeof(T *) : sizeof(T), cap), "gmp_chan_make");
    }

    /* Go's nil channel. */
    static chan nil() noexcept { return chan(nil_tag{}); }

    /* Sends `v`, waiting for a receiver or buffer room. Returns false if the channel is
     * closed (also when it is closed while waiting): `v` is then dropped. In a scope that
     * ends while it waits, throws std::system_error (ECANCELED, ETIMEDOUT). */
    bool send(T v) const
    {
        detail::send_slot<T> slot(std::move(v));
        return deliver(slot, [](gmp_chan *c, const void *b) { return gmp_chan_send(c, b); },
                         "gmp_chan_send", detail::wait_kind::untimed) == chan_status::ok;
    }

    /* Sends without waiting: ok, would_block or closed. An unsent `v` stays with the
     * caller (a moved-in value is moved back). */
    chan_status try_send(T &&v) const
    {
        return send_or_keep(v, [](gmp_chan *c, const void *b) { return gmp_chan_try_send(c, b); },
                            "gmp_chan_try_send");
    }
    chan_status try_send(const T &v) const
    {
        T copy(v);
        return try_send(std::move(copy));
    }

    /* Sends, waiting at most `d`: ok, timeout or closed; an unsent `v` stays with the
     * caller. */
    template <class Rep, class Period> chan_status send_for(T &&v, const std::chrono::duration<Rep, Period> &d) const
    {
        const std::int64_t ns = detail::timeout_ns(d);
        return send_or_keep(
            v, [ns](gmp_chan *c, const void *b) { return gmp_chan_send_timeout(c, b, ns); },
            "gmp_chan_send_timeout", detail::wait_kind_of(ns));
    }
    template <class Rep, class Period>
    chan_status send_for(const T &v, const std::chrono::duration<Rep, Period> &d) const
    {
        T copy(v);
        return send_for(std::move(copy), d);
    }
    template <class Clock, class Duration>
    chan_status send_until(T &&v, const std::chrono::time_point<Clock, Duration> &deadline) const
    {
        return send_for(std::move(v), deadline - Clock::now());
    }
    template <class Clock, class Duration>
    chan_status send_until(const T &v, const std::chrono::time_point<Clock, Duration> &deadline) const
    {
        return send_for(v, deadline - Clock::now());
    }

    /* Receives, waiting for a value; empty once the channel is closed and drained. In a
     * scope that ends while it waits, throws std::system_error (ECANCELED, ETIMEDOUT). */
    std::optional<T> recv() const { return recv_on(raw()); }

    /* Receives without waiting: ok (with a value), would_block or closed. */
    recv_result<T> try_recv() const
    {
        return recv_with([](gmp_chan *c, void *b) { return gmp_chan_try_recv(c, b); },
                         "gmp_chan_try_recv");
    }

    /* Receives, waiting at most `d`: ok (with a value), timeout or closed. */
    template <class Rep, class Period> recv_result<T> recv_for(const std::chrono::duration<Rep, Period> &d) const
    {
        const std::int64_t ns = detail::timeout_ns(d);
        return recv_with([ns](gmp_chan *c, void *b) { return gmp_chan_recv_timeout(c, b, ns); },
                         "gmp_chan_recv_timeout", detail::wait_kind_of(ns));
    }
    template <class Clock, class Duration>
    recv_result<T> recv_until(const std::chrono::time_point<Clock, Duration> &deadline) const
    {
        return recv_for(deadline - Clock::now());
    }

    /* Closes the channel: receivers drain the buffer, then get nothing; every waiting
     * sender and receiver wakes. Returns false if it was already closed (Go panics). */
    bool close() const
    {
        const int r = gmp_chan_close(raw());
        if (r == -EPIPE)
            return false;
        detail::check(r, "gmp_chan_close");
        return true;
    }

    /* Elements buffered (a snapshot) and the buffer's capacity. */
    std::size_t len() const
    {
        return static_cast<std::size_t>(detail::check(gmp_chan_len(raw()), "gmp_chan_len"));
    }
    std::size_t cap() const
    {
        return static_cast<std::size_t>(detail::check(gmp_chan_cap(raw()), "gmp_chan_cap"));
    }

    /* False for the nil channel. */
    explicit operator bool() const noexcept { return raw() != nullptr; }

    /* The C channel (NULL for nil), for gmp_select and C code. Its elements are T's bytes
     * for trivially copyable T, else owning T* boxes. The handle keeps the reference:
     * C code that keeps the channel longer takes its own with gmp_chan_retain. */
    gmp_chan *native_handle() const noexcept { return raw(); }

    /* Whether two handles are the same channel. */
    friend bool operator==(const chan &a, const chan &b) noexcept { return a.raw() == b.raw(); }
    friend bool operator!=(const chan &a, const chan &b) noexcept { return a.raw() != b.raw(); }

    /* Where a channel's range ends: an iterator equals it once the channel is closed
     * and drained. */
    struct sentinel {};

    /* The channel as an input range of the values received until it is closed and
     * drained: `for (auto &v : c)`, and under C++20 std::ranges::input_range (with the
     * algorithms and views that take one). Receiving is lazy: begin() receives nothing;
     * the value under the iterator is received when it is first read (`*it`) or compared
     * with the end, and ++ moves past it (receiving it first if it was not read). So a
     * loop that stops after n values (std::views::take(n), a break) has received n
     * values, not n + 1, and the rest stay in the channel. Each receive may block, as
     * recv() does; a nil channel throws EINVAL at the first. The iterator is a handle of
     * its own (the channel lives while it does); a default-constructed one equals the
     * end, for algorithms that want one iterator type: `std::find(c.begin(),
     * chan<T>::iterator(), x)`. */
    class iterator {
        mutable std::shared_ptr<state> s_;
        mutable std::optional<T> cur_;
        mutable bool pending_ = false; /* the current value is not received yet */
        mutable bool done_ = true;     /* at the end */
        friend class chan;
        explicit iterator(std::shared_ptr<state> s) : s_(std::move(s)), pending_(true), done_(false) {}

        void fill() const
        {
            if (!pending_)
                return;
            cur_ = recv_on(s_ ? s_->c : nullptr);
            pending_ = false;
            if (!cur_) {
                done_ = true;
                s_.reset();
            }
        }

        /* What it++ returns: the value it moved past. */
        struct postfix {
            std::optional<T> v;
            T &operator*() { return *v; }
        };

      public:
        using iterator_category = std::input_iterator_tag;
#if __cplusplus >= 202002L
        using iterator_concept = std::input_iterator_tag;
#endif
        using value_type = T;
        using difference_type = std::ptrdiff_t;
        using pointer = T *;
        using reference = T &;

        iterator() = default;

        T &operator*() const
        {
            fill();
            return *cur_;
        }
        T *operator->() const { return std::addressof(**this); }
        iterator &operator++()
        {
            fill();
            cur_.reset();
            pending_ = !done_;
            return *this;
        }
        postfix operator++(int)
        {
            fill();
            postfix p{std::move(cur_)};
            ++*this;
            return p;
        }

        friend bool operator==(const iterator &i, sentinel)
        {
            i.fill();
            return i.done_;
        }
        friend bool operator==(const iterator &a, const iterator &b)
        {
            a.fill();
            b.fill();
            return a.done_ == b.done_ && (a.done_ || a.s_ == b.s_);
        }
#if __cplusplus < 202002L
        friend bool operator==(sentinel s, const iterator &i) { return i == s; }
        friend bool operator!=(const iterator &i, sentinel s) { return !(i == s); }
        friend bool operator!=(sentinel s, const iterator &i) { return !(i == s); }
        friend bool operator!=(const iterator &a, const iterator &b) { return !(a == b); }
#endif
    };
    iterator begin() const { return iterator(s_); }
    sentinel end() const noexcept { return {}; }
};

/* ---------------------------------------------------------------------------------
 * select
 * ------------------------------------------------------------------------------- */

/* Go's select, built case by case and then run; gmp::select() returns an empty one:
 *
 *     int fired = gmp::select()
 *         .recv(results, [&](std::optional<int> v) { ... })  // v empty: closed
 *         .send(jobs, job, [&](bool sent) { ... })           // sent false: closed
 *         .timeout(50ms, [&] { ... })                        // or .otherwise(...)
 *         .run();
 *
 * run() waits until one case can proceed, performs it, calls its handler and returns
 * its index (in the order the cases were added), or -1 when the default or timeout
 * handler ran instead. Ready cases are chosen at random, as in Go; a nil channel's case
 * never fires. Handlers run in the caller after the channel operation; an exception
 * from one propagates out of run(). A send case's value is sent at most once: a builder
 * may be run again (a loop over receive cases), and a send case that delivered behaves
 * as a nil channel from then on. The selector owns its handlers, which may be move-only
 * callables. */
class selector {
    struct arm {
        virtual ~arm() = default;
        virtual void *buf() noexcept = 0;
        /* The case fired with `status` (0 or -EPIPE). */
        virtual void fire(int status) = 0;
    };

    template <class T, class F> struct recv_arm final : arm {
        chan<T> c;
        F f;
        detail::recv_slot<T> slot;
        recv_arm(chan<T> ch, F fn) : c(std::move(ch)), f(std::move(fn)) {}
        void *buf() noexcept override { return slot.buf(); }
        void fire(int status) override
        {
            std::optional<T> v;
            if (status == 0)
                v.emplace(slot.take());
            if constexpr (std::is_invocable_v<F &, std::optional<T>>)
                f(std::move(v));
            else
                f();
        }
    };

    template <class T, class F> struct send_arm final : arm {
        chan<T> c;
        F f;
        detail::send_slot<T> slot;
        send_arm(chan<T> ch, T &&v, F fn) : c(std::move(ch)), f(std::move(fn)), slot(std::move(v)) {}
        void *buf() noexcept override { return const_cast<void *>(slot.buf()); }
        void fire(int status) override
        {
            if (status == 0)
                slot.sent();
            if constexpr (std::is_invocable_v<F &, bool>)
                f(status == 0);
            else
                f();
        }
    };

    std::vector<gmp_select_case> cases_;
    std::vector<std::unique_ptr<arm>> arms_;
    std::vector<bool> send_case_;
    detail::move_only_function<void()> fallback_;
    std::int64_t timeout_ns_ = -1;
    bool has_default_ = false;

    selector &add(gmp_chan *c, std::uint32_t op, std::unique_ptr<arm> a, bool is_send)
    {
        gmp_select_case sc{};
        sc.chan = c;
        sc.op = op;
        sc.buf = a->buf();
        cases_.push_back(sc);
        arms_.push_back(std::move(a));
        send_case_.push_back(is_send);
        return *this;
    }

  public:
    selector() = default;
    selector(const selector &) = delete;
    selector &operator=(const selector &) = delete;
    selector(selector &&) = default;
    selector &operator=(selector &&) = default;

    /* A receive case: `f(std::optional<T>)` (empty: closed and drained) or `f()`. */
    template <class T, class F> selector &recv(const chan<T> &c, F f)
    {
        static_assert(std::is_invocable_v<F &, std::optional<T>> || std::is_invocable_v<F &>,
                      "gmp::selector::recv: the handler takes std::optional<T> or nothing");
        return add(c.native_handle(), GMP_RECV, std::make_unique<recv_arm<T, F>>(c, std::move(f)),
                   false);
    }

    /* A send case of `v`: `f(bool sent)` (false: the channel is closed) or `f()`. */
    template <class T, class F> selector &send(const chan<T> &c, detail::identity_t<T> v, F f)
    {
        static_assert(std::is_invocable_v<F &, bool> || std::is_invocable_v<F &>,
                      "gmp::selector::send: the handler takes bool or nothing");
        return add(c.native_handle(), GMP_SEND,
                   std::make_unique<send_arm<T, F>>(c, std::move(v), std::move(f)), true);
    }

    /* A send case without a handler. */
    template <class T> selector &send(const chan<T> &c, detail::identity_t<T> v)
    {
        return send(c, std::move(v), [] {});
    }

    /* Go's default case: runs `f` when no case is ready. Not with timeout(). */
    template <class F> selector &otherwise(F f)
    {
        if (has_default_ || timeout_ns_ >= 0)
            throw std::logic_error("gmp::select: one default or timeout per select");
        has_default_ = true;
        timeout_ns_ = 0;
        fallback_ = std::move(f);
        return *this;
    }

    /* Runs `f` if no case could proceed within `d`. Not with otherwise(). */
    template <class Rep, class Period, class F> selector &timeout(const std::chrono::duration<Rep, Period> &d, F f)
    {
        if (has_default_ || timeout_ns_ >= 0)
            throw std::logic_error("gmp::select: one default or timeout per select");
        const std::int64_t ns = detail::timeout_ns(d);
        if (ns < 0)
            return *this; // beyond int64 nanoseconds: no limit, the handler never runs
        timeout_ns_ = ns == 0 ? 1 : ns; // 0 would be a default case: wait at least 1 ns
        fallback_ = std::move(f);
        return *this;
    }

    /* Waits for one case (see the class comment). Returns the index of the case that
     * fired, or -1 after the default or timeout handler. Throws std::system_error
     * (EINVAL: no case could ever fire and nothing bounds the wait; ECANCELED or
     * ETIMEDOUT: the caller's scope ended, before or while it waited; with a default
     * case the default runs instead, as polling a scope is Go's `select` with `default`
     * on `ctx.Done()`). */
    int run()
    {
        const int r = gmp_select(cases_.data(), cases_.size(), timeout_ns_);
        if (r == -ETIMEDOUT && !has_default_) {
            // A wait that ended with its scope (the scope's deadline included) throws.
            const int e = detail::scope_error();
            if (e < 0 || timeout_ns_ < 0)
                detail::throw_errno(e < 0 ? e : r, "gmp_select");
        }
        if (r == -EAGAIN || r == -ETIMEDOUT) {
            if (fallback_)
                fallback_();
            return -1;
        }
        detail::check(r, "gmp_select");
        const auto i = static_cast<std::size_t>(r);
        const int status = cases_[i].status;
        if (send_case_[i] && status == 0)
            cases_[i].chan = nullptr; // delivered: never send the same value twice
        arms_[i]->fire(status);
        return r;
    }
};

/* An empty selector: `gmp::select().recv(...).run()`. A function, not a type, so that with
 * `using namespace gmp;` an unqualified `select()` and POSIX select(2) from
 * <sys/select.h> are two overloads of one name, told apart by their arguments. */
inline selector select() { return selector(); }

/* ---------------------------------------------------------------------------------
 * sync
 * ------------------------------------------------------------------------------- */

/* Go's sync.Mutex (Lockable): a goroutine that waits parks, a plain thread sleeps on a
 * futex. Not recursive. Unlike std::mutex, any thread or goroutine may unlock it (a
 * goroutine may even resume on another thread while holding it). */
class mutex {
    gmp_mutex m_;

  public:
    constexpr mutex() noexcept : m_{0, 0} {}
    mutex(const mutex &) = delete;
    mutex &operator=(const mutex &) = delete;

    void lock() { detail::check(gmp_mutex_lock(&m_), "gmp_mutex_lock"); }
    bool try_lock()
    {
        const int r = gmp_mutex_trylock(&m_);
        if (r == -EBUSY)
            return false;
        detail::check(r, "gmp_mutex_trylock");
        return true;
    }
    /* Unlocking an unlocked mutex aborts with a "gmp:" message (Go panics). */
    void unlock() noexcept { (void)gmp_mutex_unlock(&m_); }
    gmp_mutex *native_handle() noexcept { return &m_; }
};

/* Go's sync.RWMutex (SharedLockable and Lockable): a pending writer keeps new readers
 * out. A reader must not take the shared lock recursively. */
class shared_mutex {
    gmp_rwmutex rw_;

  public:
    constexpr shared_mutex() noexcept : rw_{{0, 0}, 0, 0, 0, 0} {}
    shared_mutex(const shared_mutex &) = delete;
    shared_mutex &operator=(const shared_mutex &) = delete;

    void lock() { detail::check(gmp_rwmutex_lock(&rw_), "gmp_rwmutex_lock"); }
    /* Go's TryLock / TryRLock. */
    bool try_lock()
    {
        const int r = gmp_rwmutex_trylock(&rw_);
        if (r == -EBUSY)
            return false;
        detail::check(r, "gmp_rwmutex_trylock");
        return true;
    }
    void unlock() noexcept { (void)gmp_rwmutex_unlock(&rw_); }

    void lock_shared() { detail::check(gmp_rwmutex_rlock(&rw_), "gmp_rwmutex_rlock"); }
    bool try_lock_shared()
    {
        const int r = gmp_rwmutex_tryrlock(&rw_);
        if (r == -EBUSY)
            return false;
        detail::check(r, "gmp_rwmutex_tryrlock");
        return true;
    }
    void unlock_shared() noexcept { (void)gmp_rwmutex_runlock(&rw_); }
    gmp_rwmutex *native_handle() noexcept { return &rw_; }
};

/* Go's sync.Cond used through std::unique_lock<gmp::mutex>, with std's timed waits too.
 *
 * Untimed waits are Go's (gmp_cond_wait): waiters wake in FIFO order and there are no
 * spurious wakeups, but use the predicate form anyway. The C API has no timed wait, so
 * wait_for / wait_until queue the caller on a list of their own, here, in arrival order,
 * and park it on a channel of its own (made for the wait) with the channel's timeout.
 * notify_one wakes the longest-waiting timed waiter if there is one, else an untimed
 * waiter; notify_all wakes both. A timed wait that a notify reaches as it times out
 * reports no_timeout: a notification is never lost. Only these methods wake timed
 * waiters: gmp_cond_signal on native_handle() reaches the untimed ones alone. */
class condition_variable {
    /* A waiter in a timed wait, on its stack while it waits. */
    struct timed_waiter {
        gmp_chan *wake = nullptr; /* signal channel (no elements, 1 slot) */
        timed_waiter *next = nullptr;
        bool notified = false;
    };

    gmp_cond c_;
    /* Guards the timed waiters' list (a gmp_mutex: a goroutine that waits for it parks). */
    gmp_mutex list_mu_;
    timed_waiter *head_ = nullptr;
    timed_waiter *tail_ = nullptr;
    /* Timed waiters on the list; written under list_mu_, read without it by notifiers. */
    std::atomic<std::size_t> timed_{0};

    void list_lock() noexcept { (void)gmp_mutex_lock_nocancel(&list_mu_); }
    void list_unlock() noexcept { (void)gmp_mutex_unlock(&list_mu_); }

    /* Takes `w` off the list. list_mu_ held; `w` is on it. */
    void unlink(timed_waiter *w) noexcept
    {
        timed_waiter *prev = nullptr;
        for (timed_waiter *cur = head_; cur != w; cur = cur->next)
            prev = cur;
        (prev ? prev->next : head_) = w->next;
        if (tail_ == w)
            tail_ = prev;
        timed_.fetch_sub(1, std::memory_order_relaxed);
    }

    /* Wakes the first timed waiter (all of them if `all`). Returns whether there was one.
     * The signal is sent under list_mu_, so a waiter that sees `notified` there may free
     * its channel. */
    bool wake_timed(bool all) noexcept
    {
        if (timed_.load(std::memory_order_relaxed) == 0)
            return false;
        list_lock();
        bool woke = false;
        while (head_ != nullptr && (all || !woke)) {
            timed_waiter *w = head_;
            unlink(w);
            w->notified = true;
            (void)gmp_chan_try_send(w->wake, nullptr); // 1 free slot: never blocks
            woke = true;
        }
        list_unlock();
        return woke;
    }

    /* The timed wait: at most `ns` nanoseconds (>= 0). */
    std::cv_status wait_ns(std::unique_lock<mutex> &lock, std::int64_t ns)
    {
        if (!lock.owns_lock())
            throw std::system_error(EPERM, std::generic_category(), "gmp::condition_variable::wait_for");
        timed_waiter w;
        detail::check(gmp_chan_make(&w.wake, 0, 1), "gmp_chan_make");
        // Queued before the caller's mutex is unlocked: a notify after the unlock finds it.
        list_lock();
        (tail_ ? tail_->next : head_) = &w;
        tail_ = &w;
        timed_.fetch_add(1, std::memory_order_relaxed);
        list_unlock();
        lock.unlock();
        const int r = gmp_chan_recv_timeout(w.wake, nullptr, ns);
        list_lock();
        const bool notified = w.notified;
        if (!notified)
            unlink(&w);
        list_unlock();
        (void)gmp_chan_release(w.wake);
        // Re-locked whatever the caller's scope says (a wait must return holding it).
        mutex *m = lock.mutex();
        (void)gmp_mutex_lock_nocancel(m->native_handle());
        lock = std::unique_lock<mutex>(*m, std::adopt_lock);
        if (r != 0 && r != -ETIMEDOUT)
            detail::throw_errno(r, "gmp_chan_recv_timeout");
        return notified ? std::cv_status::no_timeout : std::cv_status::timeout;
    }

  public:
    constexpr condition_variable() noexcept : c_{0, 0, 0, 0, nullptr, nullptr}, list_mu_{0, 0} {}
    condition_variable(const condition_variable &) = delete;
    condition_variable &operator=(const condition_variable &) = delete;

    void notify_one() noexcept
    {
        if (!wake_timed(false))
            (void)gmp_cond_signal(&c_);
    }
    void notify_all() noexcept
    {
        (void)wake_timed(true);
        (void)gmp_cond_broadcast(&c_);
    }

    /* Unlocks, waits for a notify, locks again. `lock` must own its mutex (else
     * std::system_error EPERM, as for every wait). */
    void wait(std::unique_lock<mutex> &lock)
    {
        if (!lock.owns_lock())
            throw std::system_error(EPERM, std::generic_category(), "gmp::condition_variable::wait");
        detail::check(gmp_cond_wait(&c_, lock.mutex()->native_handle()), "gmp_cond_wait");
    }
    template <class Predicate> void wait(std::unique_lock<mutex> &lock, Predicate pred)
    {
        while (!pred())
            wait(lock);
    }

    /* Unlocks, waits for a notify or until `d` has passed, locks again. Returns
     * std::cv_status::timeout if the time passed without a notify reaching the caller.
     * A duration of zero or less only unlocks and relocks; one beyond what int64
     * nanoseconds hold waits without limit. */
    template <class Rep, class Period>
    std::cv_status wait_for(std::unique_lock<mutex> &lock, const std::chrono::duration<Rep, Period> &d)
    {
        const std::int64_t ns = detail::timeout_ns(d);
        if (ns < 0) {
            wait(lock);
            return std::cv_status::no_timeout;
        }
        return wait_ns(lock, ns);
    }

    /* wait_for until `deadline` on its clock: timeout only if the clock has reached it
     * when the wait returns (a clock that was set back makes it no_timeout, for the
     * caller to wait again). */
    template <class Clock, class Duration>
    std::cv_status wait_until(std::unique_lock<mutex> &lock, const std::chrono::time_point<Clock, Duration> &deadline)
    {
        if (wait_for(lock, deadline - Clock::now()) == std::cv_status::no_timeout)
            return std::cv_status::no_timeout;
        return Clock::now() < deadline ? std::cv_status::no_timeout : std::cv_status::timeout;
    }

    /* Waits until `pred()` holds or the time has passed; returns `pred()`. */
    template <class Clock, class Duration, class Predicate>
    bool wait_until(std::unique_lock<mutex> &lock, const std::chrono::time_point<Clock, Duration> &deadline,
                    Predicate pred)
    {
        while (!pred())
            if (wait_until(lock, deadline) == std::cv_status::timeout)
                return pred();
        return true;
    }
    template <class Rep, class Period, class Predicate>
    bool wait_for(std::unique_lock<mutex> &lock, const std::chrono::duration<Rep, Period> &d, Predicate pred)
    {
        const std::int64_t ns = detail::timeout_ns(d);
        if (ns < 0) {
            wait(lock, std::move(pred));
            return true;
        }
        return wait_until(lock, std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns), std::move(pred));
    }

    /* The C condition variable of the untimed waits. */
    gmp_cond *native_handle() noexcept { return &c_; }
};

/* A mutex with timed locking, as std::timed_mutex (TimedLockable): try_lock_for and
 * try_lock_until wait at most that long. It is Go's idiom, a channel with one slot
 * (lock: send, unlock: receive), so waiters queue in FIFO order, a goroutine parks and a
 * plain thread blocks, and any goroutine or thread may unlock it. Not recursive.
 * gmp::mutex has no timed lock: its waiters are Go's semaphore queue, which a waiter
 * cannot leave once counted; use this class where a lock must be able to give up.
 * Construction allocates the channel (std::system_error ENOMEM). Unlocking an unlocked
 * timed_mutex aborts with a "gmp:" message. */
class timed_mutex {
    gmp_chan *c_ = nullptr;

  public:
    timed_mutex() { detail::check(gmp_chan_make(&c_, 0, 1), "gmp_chan_make"); }
    ~timed_mutex() { (void)gmp_chan_release(c_); }
    timed_mutex(const timed_mutex &) = delete;
    timed_mutex &operator=(const timed_mutex &) = delete;

    void lock() { detail::check(gmp_chan_send(c_, nullptr), "gmp_chan_send"); }
    bool try_lock()
    {
        const int r = gmp_chan_try_send(c_, nullptr);
        if (r == -EAGAIN)
            return false;
        detail::check(r, "gmp_chan_try_send");
        return true;
    }
    /* Locks, waiting at most `d` (zero or less: try_lock). Returns whether it locked. */
    template <class Rep, class Period> bool try_lock_for(const std::chrono::duration<Rep, Period> &d)
    {
        const int r = gmp_chan_send_timeout(c_, nullptr, detail::timeout_ns(d));
        if (r == -ETIMEDOUT)
            return false;
        detail::check(r, "gmp_chan_send_timeout");
        return true;
    }
    template <class Clock, class Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration> &deadline)
    {
        return try_lock_for(deadline - Clock::now());
    }
    void unlock() noexcept
    {
        if (gmp_chan_try_recv(c_, nullptr) != 0) {
            std::fprintf(stderr, "gmp: sync: unlock of unlocked timed_mutex\n");
            std::fflush(stderr);
            std::abort();
        }
    }
};

/* Go's sync.WaitGroup. A counter below zero aborts with a "gmp:" message (Go panics). */
class wait_group {
    gmp_wg wg_;

  public:
    constexpr wait_group() noexcept : wg_{0, 0, 0} {}
    wait_group(const wait_group &) = delete;
    wait_group &operator=(const wait_group &) = delete;

    void add(std::int64_t delta = 1) { detail::check(gmp_wg_add(&wg_, delta), "gmp_wg_add"); }
    void done() { detail::check(gmp_wg_done(&wg_), "gmp_wg_done"); }
    void wait() { detail::check(gmp_wg_wait(&wg_), "gmp_wg_wait"); }
    gmp_wg *native_handle() noexcept { return &wg_; }
};

/* Go's sync.Once, for gmp::call_once. */
class once_flag {
    gmp_once o_;
    template <class F, class... Args> friend void call_once(once_flag &, F &&, Args &&...);

  public:
    constexpr once_flag() noexcept : o_{0, {0, 0}} {}
    once_flag(const once_flag &) = delete;
    once_flag &operator=(const once_flag &) = delete;
};

/* Calls `f(args...)` once per flag; every caller returns after that call has returned.
 * As in Go (and unlike std::call_once), a call that throws still counts: the exception
 * propagates to the caller that ran it and `f` is not called again. Calling call_once
 * on the same flag from inside `f` deadlocks. */
template <class F, class... Args> void call_once(once_flag &flag, F &&f, Args &&...args)
{
    struct call {
        F &f;
        std::tuple<Args &&...> args;
        std::exception_ptr error;
    } c{f, std::forward_as_tuple(std::forward<Args>(args)...), nullptr};
    auto entry = [](void *p) noexcept {
        auto *cp = static_cast<call *>(p);
        try {
            std::apply(std::forward<F>(cp->f), std::move(cp->args));
        } catch (...) {
            cp->error = std::current_exception();
        }
    };
    detail::check(gmp_once_do(&flag.o_, entry, &c), "gmp_once_do");
    if (c.error)
        std::rethrow_exception(c.error);
}

/* Go's runtime.LockOSThread for a scope: while the guard lives, the goroutine runs only
 * on one OS thread and the thread runs nothing else. That thread is the one it runs on
 * once the guard is constructed (the lock may move it off a thread other goroutines are
 * pinned to; see gmp_lock_os_thread). Guards nest. Throws std::system_error (EPERM)
 * outside a goroutine. */
class lock_os_thread {
  public:
    lock_os_thread() { detail::check(gmp_lock_os_thread(), "gmp_lock_os_thread"); }
    ~lock_os_thread() { (void)gmp_unlock_os_thread(); }
    lock_os_thread(const lock_os_thread &) = delete;
    lock_os_thread &operator=(const lock_os_thread &) = delete;
};

/* ---------------------------------------------------------------------------------
 * Scopes
 * ------------------------------------------------------------------------------- */

/* A scope (gmp_scope_begin): Go's context.Context from WithCancel / WithTimeout, carried
 * by the goroutine instead of passed along, and a nursery: the constructor begins a
 * scope, a child of the caller's current one, and makes it current for the calling
 * goroutine or thread; goroutines started while it is current belong to it, as do
 * theirs. Once it is cancelled (cancel(), or an enclosing scope's cancel) or its
 * deadline passes, every wait of those goroutines and of the caller (channel
 * operations, select, sleep_for, the library's fd waits, and under the interposer the
 * blocking libc calls that park) ends: the wrapper's waits throw std::system_error
 * with ECANCELED or ETIMEDOUT, C calls return -ECANCELED / -ETIMEDOUT, hooked libc
 * calls fail with errno ECANCELED / ETIMEDOUT. An operation that need not wait still
 * completes. Mutexes, condition variables' untimed waits, wait_group and join are not
 * ended by a scope.
 *
 * The destructor waits for the scope's goroutines to return (the wait is not ended by
 * the scope), then ends it: the enclosing scope becomes current again. When an
 * exception unwinds through it, it cancels the scope first, so that the goroutines
 * give up their waits and the exception is not held up behind them (trio's nurseries
 * do the same). Scopes nest: the innermost ends first, which destruction in reverse
 * order of construction gives; ending one out of order, or on another goroutine or
 * thread than the one that began it (after a move), aborts with a "gmp:" line.
 * Move-constructible (a function may return one), not assignable. */
class scope {
    gmp_scope *s_ = nullptr;
    /* std::uncaught_exceptions() when this object was made: more at destruction means
     * an exception is unwinding through it. */
    int uncaught_ = 0;

    void begin(std::int64_t ns) { detail::check(gmp_scope_begin(&s_, ns), "gmp_scope_begin"); }

    gmp_scope *live(const char *what) const
    {
        if (s_ == nullptr)
            throw std::system_error(EINVAL, std::generic_category(), what);
        return s_;
    }

  public:
    /* Begins a scope without a deadline of its own (the enclosing scope's applies). */
    scope() : uncaught_(std::uncaught_exceptions()) { begin(-1); }

    /* Begins a scope whose deadline is `timeout` from now, or the enclosing scope's if
     * that is earlier. A timeout beyond what int64 nanoseconds hold is none. */
    template <class Rep, class Period>
    explicit scope(const std::chrono::duration<Rep, Period> &timeout) : uncaught_(std::uncaught_exceptions())
    {
        const std::int64_t ns = detail::timeout_ns(timeout);
        begin(ns);
    }

    scope(scope &&o) noexcept : s_(std::exchange(o.s_, nullptr)), uncaught_(std::uncaught_exceptions()) {}
    scope(const scope &) = delete;
    scope &operator=(const scope &) = delete;
    scope &operator=(scope &&) = delete;

    /* Waits for the scope's goroutines, then ends the scope; cancels it first if an
     * exception is unwinding (see the class comment). */
    ~scope()
    {
        if (s_ == nullptr)
            return;
        if (std::uncaught_exceptions() > uncaught_)
            (void)gmp_scope_cancel(s_);
        (void)gmp_scope_wait(s_);
        if (gmp_scope_end(s_) < 0) {
            std::fprintf(stderr, "gmp: scope: ended out of order or by a goroutine or thread "
                                 "that did not begin it\n");
            std::fflush(stderr);
            std::abort();
        }
    }

    /* Cancels the scope and every scope begun inside it (Go's cancel()): their waits
     * end with ECANCELED, now and from then on. Harmless when repeated; callable from
     * any goroutine or thread while the scope lives. */
    void cancel() { detail::check(gmp_scope_cancel(live("gmp::scope::cancel")), "gmp_scope_cancel"); }

    /* Why the scope has ended (Go's ctx.Err()): an empty error_code while it has not,
     * std::errc::operation_canceled once it (or an enclosing scope) was cancelled,
     * std::errc::timed_out once its deadline passed. */
    std::error_code err() const
    {
        const int r = gmp_scope_err(live("gmp::scope::err"));
        if (r == -EINVAL)
            detail::throw_errno(r, "gmp_scope_err");
        return r == 0 ? std::error_code() : std::error_code(-r, std::generic_category());
    }

    /* The scope's deadline (the earliest of its own and its enclosing scopes'), on
     * std::chrono::steady_clock, or empty if it has none (Go's ctx.Deadline()). */
    std::optional<std::chrono::steady_clock::time_point> deadline() const
    {
        const std::int64_t d = gmp_scope_deadline(live("gmp::scope::deadline"));
        detail::check(d, "gmp_scope_deadline");
        if (d == INT64_MAX)
            return std::nullopt;
        // gmp_now's clock is CLOCK_MONOTONIC; steady_clock's epoch is not promised to be
        // its epoch, so the deadline is carried over as the time left until it.
        const auto left = std::chrono::nanoseconds(d - gmp_now());
        return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
    }

    /* Waits until every goroutine started in the scope (or a scope begun inside it) has
     * returned; not ended by the scope itself (cancel() first to make them return
     * sooner). A goroutine that waits parks; a plain thread blocks. */
    void wait() { detail::check(gmp_scope_wait(live("gmp::scope::wait")), "gmp_scope_wait"); }

    /* The C handle, for gmp_scope_* calls; valid while this object lives. */
    gmp_scope *native_handle() const noexcept { return s_; }
};

/* Go's signal.Notify: each of `sigs`, when the process receives it, is sent to `c` as its
 * number, without waiting (give the channel a buffer: a full one misses the signal).
 * Several channels may watch one signal; calling again adds signals. Throws
 * std::system_error (EINVAL) for an empty list or a signal the runtime refuses (SIGURG,
 * SIGKILL, SIGSTOP, synchronous faults). */
inline void signal_notify(const chan<int> &c, std::initializer_list<int> sigs)
{
    detail::check(gmp_signal_notify(c.native_handle(), sigs.begin(), sigs.size()),
                  "gmp_signal_notify");
}

/* Go's signal.Stop: `c` receives no more signals once it returns, and a signal no channel
 * watches any more gets back the action it had before. */
inline void signal_stop(const chan<int> &c)
{
    detail::check(gmp_signal_stop(c.native_handle()), "gmp_signal_stop");
}

/* GOMAXPROCS: queries (n <= 0) or sets it; returns the previous value. */
inline int maxprocs(int n = 0) { return static_cast<int>(detail::check(gmp_maxprocs(n), "gmp_maxprocs")); }

/* Live goroutines. */
inline std::int64_t num_goroutine() noexcept { return gmp_num_goroutine(); }

} // namespace gmp

#endif /* GMP_SCHED_HPP */
