"""asyncio bridge: awaiting channels without blocking the loop."""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
from typing import Any

import pytest

import gmp_sched as gs
from gmp_sched import Chan, ChannelClosed, WaitGroup
from gmp_sched import _aio

from conftest import Job


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_recv_async_does_not_block_the_loop() -> None:
    ch = Chan(ctypes.c_int64)

    async def main() -> tuple[int, int]:
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.005)

        t = asyncio.create_task(ticker())

        def later() -> None:
            gs.sleep(0.2)
            ch.send(99)

        gs.go(later)
        v = await ch.recv_async()
        stop = True
        await t
        return v, ticks

    v, ticks = run(main())
    assert v == 99
    assert ticks >= 10  # the loop kept running for the 0.2 s wait


def test_send_async_to_full_channel_and_closed_channel() -> None:
    ch = Chan(ctypes.c_int64, 1)

    async def main() -> list[int]:
        await ch.send_async(1)  # fast path
        taker = Chan(ctypes.c_int64, 4)

        def drain() -> None:
            gs.sleep(0.05)
            for _ in range(2):
                taker.send(ch.recv())

        gs.go(drain)
        await ch.send_async(2)  # waits for room
        got = [await taker.recv_async(), await taker.recv_async()]
        ch.close()
        with pytest.raises(ChannelClosed):
            await ch.send_async(3)
        with pytest.raises(ChannelClosed):
            await ch.recv_async()
        return got

    assert run(main()) == [1, 2]


def test_close_wakes_waiting_coroutines() -> None:
    ch = Chan(ctypes.c_int64)

    async def main() -> int:
        async def waiter() -> str:
            try:
                await ch.recv_async()
            except ChannelClosed:
                return "closed"
            return "value"

        tasks = [asyncio.create_task(waiter()) for _ in range(20)]
        await asyncio.sleep(0.05)
        ch.close()
        results = await asyncio.gather(*tasks)
        return results.count("closed")

    assert run(main()) == 20


def test_cancellation_withdraws_the_operation() -> None:
    ch = Chan(ctypes.c_int64, 1)

    async def main() -> int:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(ch.recv_async(), 0.05)
        bridge = _aio._bridge()
        deadline = time.monotonic() + 10
        while bridge.ops and time.monotonic() < deadline:  # withdrawn from the select
            await asyncio.sleep(0.001)
        assert not bridge.ops
        ch.send(5)
        return await ch.recv_async()

    assert run(main()) == 5


def test_object_channel_async() -> None:
    ch = Chan(object)

    async def main() -> object:
        gs.go(lambda: ch.send({"a": 1}))
        return await ch.recv_async()

    assert run(main()) == {"a": 1}


def test_bridge_under_load(worker) -> None:  # type: ignore[no-untyped-def]
    # 200 coroutines send through C echo goroutines (x -> x + 1) and receive the
    # replies, with the loop never blocked; every value comes back exactly once.
    requests = Chan(ctypes.c_int64)
    replies = Chan(ctypes.c_int64)
    wg = WaitGroup()
    job = Job(requests.handle, replies.handle, wg._addr)
    n_echo, n_coros, per = 16, 200, 20
    wg.add(n_echo)
    for _ in range(n_echo):
        gs.go(worker.echo_plus_one, job)

    async def main() -> list[int]:
        got: list[int] = []

        async def sender(i: int) -> None:
            for k in range(per):
                await requests.send_async(i * per + k)

        async def receiver() -> None:
            for _ in range(per):
                got.append(await replies.recv_async())

        await asyncio.gather(*(sender(i) for i in range(n_coros)),
                             *(receiver() for _ in range(n_coros)))
        return got

    t0 = time.monotonic()
    got = run(main())
    elapsed = time.monotonic() - t0
    m = n_coros * per
    assert sorted(got) == [x + 1 for x in range(m)]
    requests.close()
    assert wg.wait(timeout=30)
    print(f"aio bridge: {m} round trips by {n_coros} coroutines in {elapsed:.2f} s")


def test_recv_async_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError):
        asyncio.get_event_loop_policy().new_event_loop().run_until_complete(
            _needs_loop_outside())


async def _needs_loop_outside() -> None:
    raise RuntimeError("no loop")


def test_two_event_loops_in_two_threads_share_the_bridge() -> None:
    # Each loop gets its own eventfd; completions go to the loop that awaited them.
    ch = Chan(ctypes.c_int64)
    n = 300
    results: dict[str, list[int]] = {}

    def loop_thread(name: str) -> None:
        async def main() -> list[int]:
            return [await ch.recv_async() for _ in range(n)]

        results[name] = asyncio.run(asyncio.wait_for(main(), 60))

    threads = [threading.Thread(target=loop_thread, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for i in range(2 * n):
        ch.send(i, timeout=30)
    for t in threads:
        t.join(60)
    assert sorted(results["a"] + results["b"]) == list(range(2 * n))
    assert len(results["a"]) == len(results["b"]) == n


def test_a_port_whose_loop_is_gone_drops_completions() -> None:
    # The bridge thread posts to a loop's fd; once the loop's collection closed it, a post
    # neither raises (that would stop the bridge for every loop) nor writes to the number,
    # which may belong to another file by then.
    loop = asyncio.new_event_loop()
    port = _aio._port(loop)
    wfd = port.wfd
    port.close()
    r, w = os.pipe()  # likely takes the closed number
    try:
        port.post(type("Op", (), {"finish": lambda self: None})())  # type: ignore[arg-type]
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 8)
        assert port.closed and wfd >= 0
    finally:
        os.close(r)
        os.close(w)
        loop.close()

    # And later operations on other loops still complete (the bridge thread is alive).
    ch = Chan(ctypes.c_int64, 1)
    ch.send(7)
    assert run(ch.recv_async()) == 7


@pytest.mark.parametrize("elem", [ctypes.c_int64, object, None])
def test_two_coroutines_talk_over_unbuffered_channels(elem: object) -> None:
    # Both ends wait in the bridge's one select, which never pairs with itself: the
    # bridge hands such values over itself.
    async def main() -> list[object]:
        a: Chan[Any] = Chan(elem)
        b: Chan[Any] = Chan(elem)
        value = (lambda i: None) if elem is None else (lambda i: i)

        async def peer() -> None:
            async for v in a:
                await b.send_async(v)

        task = asyncio.create_task(peer())
        got = []
        for i in range(300):
            await a.send_async(value(i))
            got.append(await b.recv_async())
        a.close()
        await task
        return got

    got = asyncio.run(asyncio.wait_for(main(), 60))
    assert got == ([None] * 300 if elem is None else list(range(300)))


def test_paired_send_fails_on_a_closed_channel() -> None:
    async def main() -> None:
        ch: Chan[int] = Chan(ctypes.c_int64)
        sender = asyncio.create_task(ch.send_async(1))
        await asyncio.sleep(0.05)
        ch.close()
        with pytest.raises(ChannelClosed):
            await asyncio.wait_for(sender, 10)

    asyncio.run(main())


def test_coroutines_of_two_loops_talk_over_unbuffered_channels() -> None:
    # A pending operation of one loop may be met (taken over) by a coroutine of another:
    # its completion then goes to its own loop through its port.
    a: Chan[int] = Chan(ctypes.c_int64)
    b: Chan[int] = Chan(ctypes.c_int64)
    n = 300
    got: list[int] = []

    def echo() -> None:
        async def main() -> None:
            async for v in a:
                await b.send_async(v * 2)

        asyncio.run(asyncio.wait_for(main(), 60))

    t = threading.Thread(target=echo)
    t.start()

    async def main() -> None:
        for i in range(n):
            await a.send_async(i)
            got.append(await b.recv_async())
        a.close()

    asyncio.run(asyncio.wait_for(main(), 60))
    t.join(60)
    assert got == [2 * i for i in range(n)]


def test_cancelled_receives_keep_order_and_never_duplicate() -> None:
    # Receives cancelled over and over while a coroutine sends: what arrives comes in
    # order, once. (A receive the bridge completes in the instant it is cancelled drops
    # its value, as documented; one taken over by a coroutine is never a cancelled one.)
    async def main() -> tuple[list[int], int]:
        ch: Chan[int] = Chan(ctypes.c_int64)
        received: list[int] = []

        async def consumer() -> None:
            while True:
                try:
                    received.append(await asyncio.wait_for(ch.recv_async(), 0.0005))
                except asyncio.TimeoutError:
                    continue
                except ChannelClosed:
                    return

        task = asyncio.create_task(consumer())
        sent = 0
        for i in range(300):
            await ch.send_async(i)
            sent += 1
        ch.close()
        await task
        return received, sent

    received, sent = asyncio.run(asyncio.wait_for(main(), 60))
    assert sent == 300
    assert received == sorted(set(received)) and set(received) <= set(range(sent))
    assert len(received) >= sent // 2
