#!/usr/bin/env python3
"""Turns a libgmp execution trace (GMP_TRACE, gmp_trace_start, or a flight recorder's
window: GMP_TRACE=flight, gmp_trace_flight_write) into Chrome trace-event JSON, which
ui.perfetto.dev and chrome://tracing open.

    python3 scripts/trace2json.py TRACE [OUT.json]      (OUT: TRACE.json; "-": stdout)

The JSON: process "Ps" (pid 1), one track per P, a slice per goroutine run named after
its entry function (args: goid, entry, labels), instants spawn (goid, parent), unpark
(goid, waker: 0 for a thread outside the runtime), steal (victim, count), preempt (goid),
handoff (p), and counters (runnable goroutines, idle Ps, threads); process "Ms" (pid 2),
one track per thread, a `syscall` slice per blocking call. Times in microseconds from the
trace's start (a flight recorder's window: from the window's start).

The binary form is described in src/rt/trace.rs (the file) and src/rt/traceevent.rs (the
events). Python 3 standard library only; `load` is importable (scripts/check-trace.py).
"""
import json
import struct
import sys

MAGIC = b"gmptrace"
CLOCK, CHUNK, NAME, COUNTERS, NOTE, END = 1, 2, 3, 4, 5, 6
GO_START, GO_STOP, SPAWN, UNPARK, STEAL, PREEMPT, HANDOFF = 1, 2, 3, 4, 5, 6, 7
SYSCALL_BEGIN, SYSCALL_END, LABELS, TRACK = 8, 9, 10, 0x80
OUTSIDE_SLOT, OUTSIDE = 1024, 100000
WHY = ["?", "park", "yield", "preempt", "exit", "syscall"]
INSTANTS = {
    SPAWN: ("spawn", "goid", "parent"),
    UNPARK: ("unpark", "goid", "waker"),
    STEAL: ("steal", "victim", "count"),
    PREEMPT: ("preempt", "goid", None),
    HANDOFF: ("handoff", "p", None),
}


class Trace:
    """A decoded file: events as (ticks, order, kind, track, a, b, text), in time order."""

    def __init__(self):
        self.flight = False
        self.window_ns = 0
        self.clocks = []
        self.names = {}
        self.counters = []
        self.notes = []
        self.dropped = 0
        self.events = []
        self.ended = False


def _decode_chunk(slot, base, data, out, seq):
    """Appends the events of one chunk's bytes (all its pieces, joined) to out."""
    i, n, t = 0, len(data), base
    idx = 0
    pc = 0
    while i < n:
        k = data[i]
        i += 1
        vals = []
        for _ in range(4 if k & TRACK else 3):
            v = shift = 0
            while True:
                if i >= n:
                    return
                x = data[i]
                i += 1
                v |= (x & 0x7F) << shift
                if x < 0x80:
                    break
                shift += 7
            vals.append(v)
        t += vals[0]
        if k & TRACK:
            track, a, b = vals[1], vals[2], vals[3]
        else:
            track, a, b = (OUTSIDE if slot == OUTSIDE_SLOT else slot), vals[1], vals[2]
        k &= 0x7F
        if k == GO_START:
            # The entry pc, as a zigzag difference from the chunk's previous start's.
            pc = (pc + ((b >> 1) ^ -(b & 1))) & 0xFFFFFFFFFFFFFFFF
            b = pc
        text = None
        if k == LABELS:
            if i + b > n:
                return
            text = bytes(data[i:i + b])
            i += b
        out.append((t, seq, idx, k, track, a, b, text))
        idx += 1


def load(path):
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != MAGIC:
        raise ValueError("%s is not a libgmp trace (no gmptrace header)" % path)
    version, flags, window = struct.unpack_from("<IIQ", buf, 8)
    if version != 1:
        raise ValueError("%s: trace format version %d, this script reads 1" % (path, version))
    tr = Trace()
    tr.flight = bool(flags & 1)
    tr.window_ns = window
    chunks = {}  # (slot, seq) -> [base, bytearray]
    i = 24
    n = len(buf)
    while i < n:
        tag = buf[i]
        i += 1
        if tag == CLOCK:
            tr.clocks.append(struct.unpack_from("<Qq", buf, i))
            i += 16
        elif tag == CHUNK:
            slot, seq, base, off, ln = struct.unpack_from("<IQQII", buf, i)
            i += 28
            piece = buf[i:i + ln]
            i += ln
            c = chunks.get((slot, seq))
            if c is None or off == 0:
                c = chunks[(slot, seq)] = [base, bytearray()]
            if off == len(c[1]):
                c[1] += piece
        elif tag == NAME:
            (pc,) = struct.unpack_from("<Q", buf, i)
            j = buf.index(b"\0", i + 8)
            tr.names[pc] = buf[i + 8:j].decode("utf-8", "replace")
            i = j + 1
        elif tag == COUNTERS:
            tr.counters.append(struct.unpack_from("<QQQQ", buf, i))
            i += 32
        elif tag == NOTE:
            j = buf.index(b"\0", i)
            tr.notes.append(buf[i:j].decode("utf-8", "replace"))
            i = j + 1
        elif tag == END:
            (tr.dropped,) = struct.unpack_from("<Q", buf, i)
            tr.ended = True
            break
        else:
            raise ValueError("%s: unknown record %d at byte %d" % (path, tag, i - 1))
    evs = []
    for (slot, seq), (base, data) in chunks.items():
        _decode_chunk(slot, base, data, evs, seq)
    evs.sort(key=lambda e: (e[0], e[1], e[2]))
    tr.events = evs
    return tr


def to_json(tr, out):
    clocks = tr.clocks or [(0, 0)]
    (t0, n0), (t1, n1) = clocks[0], clocks[-1]
    scale = (n1 - n0) / (t1 - t0) if t1 != t0 else 1.0

    def ns(t):
        return n0 + (t - t0) * scale

    origin = n0
    if tr.flight and len(clocks) > 1:
        origin = max(n0, n1 - tr.window_ns)

    def us(t):
        return "%.3f" % ((ns(t) - origin) / 1000.0)

    first = [True]

    def emit(obj):
        out.write("\n" if first[0] else ",\n")
        first[0] = False
        out.write(obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":")))

    out.write('{"displayTimeUnit":"ns","traceEvents":[')
    emit({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Ps"}})
    emit({"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "Ms"}})
    seen = set()

    def track(pid, tid):
        if (pid, tid) in seen:
            return
        seen.add((pid, tid))
        name = "threads outside the runtime" if pid == 1 and tid == OUTSIDE else (
            ("P%d" if pid == 1 else "M%d") % tid)
        emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        emit({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
              "args": {"sort_index": tid}})

    labels = {}
    open_p, open_m = {}, {}
    last = 0
    for (t, _seq, _idx, k, tr_, a, b, text) in tr.events:
        if ns(t) < origin:
            if k == LABELS:
                _set_labels(labels, a, text)
            continue
        last = max(last, t)
        ts = us(t)
        if k == LABELS:
            _set_labels(labels, a, text)
        elif k == GO_START:
            track(1, tr_)
            name = tr.names.get(b, "0x%x" % b).replace('"', "_").replace("\\", "_")
            args = {"goid": a, "entry": name}
            if a in labels:
                args["labels"] = labels[a]
            emit('{"ph":"B","pid":1,"tid":%d,"ts":%s,"name":%s,"cat":"goroutine","args":%s}'
                 % (tr_, ts, json.dumps("G%d %s" % (a, name)),
                    json.dumps(args, separators=(",", ":"))))
            open_p[tr_] = a
        elif k == GO_STOP:
            if open_p.pop(tr_, None) is not None:
                why = WHY[b] if b < len(WHY) else "?"
                emit('{"ph":"E","pid":1,"tid":%d,"ts":%s,"args":{"goid":%d,"why":"%s"}}'
                     % (tr_, ts, a, why))
        elif k == SYSCALL_BEGIN:
            track(2, tr_)
            emit('{"ph":"B","pid":2,"tid":%d,"ts":%s,"name":"syscall","cat":"syscall",'
                 '"args":{"goid":%d}}' % (tr_, ts, a))
            open_m[tr_] = a
        elif k == SYSCALL_END:
            if open_m.pop(tr_, None) is not None:
                emit('{"ph":"E","pid":2,"tid":%d,"ts":%s,"args":{"goid":%d}}' % (tr_, ts, a))
        elif k in INSTANTS:
            track(1, tr_)
            name, k1, k2 = INSTANTS[k]
            args = '"%s":%d' % (k1, a) + (',"%s":%d' % (k2, b) if k2 else "")
            emit('{"ph":"i","s":"t","pid":1,"tid":%d,"ts":%s,"name":"%s","args":{%s}}'
                 % (tr_, ts, name, args))
    for (t, runnable, idle, threads) in tr.counters:
        if ns(t) < origin:
            continue
        ts = us(t)
        emit('{"ph":"C","pid":1,"name":"runnable goroutines","ts":%s,"args":{"runnable":%d}}'
             % (ts, runnable))
        emit('{"ph":"C","pid":1,"name":"idle Ps","ts":%s,"args":{"idle":%d}}' % (ts, idle))
        emit('{"ph":"C","pid":1,"name":"threads","ts":%s,"args":{"threads":%d}}'
             % (ts, threads))
    end = us(max(last, t1))
    for tid, g in sorted(open_p.items()):
        emit('{"ph":"E","pid":1,"tid":%d,"ts":%s,"args":{"goid":%d,"why":"trace end"}}'
             % (tid, end, g))
    for tid, g in sorted(open_m.items()):
        emit('{"ph":"E","pid":2,"tid":%d,"ts":%s,"args":{"goid":%d}}' % (tid, end, g))
    other = {"dropped_events": str(tr.dropped)}
    if tr.notes:
        other["written_on"] = "; ".join(tr.notes)
    if tr.flight:
        other["flight_window_ns"] = str(tr.window_ns)
    if not tr.ended:
        other["unfinished"] = "the file ends before its END record"
    out.write("\n],\"otherData\":%s}\n" % json.dumps(other, separators=(",", ":")))


def _set_labels(labels, goid, text):
    parts = text.split(b"\0")
    d = {}
    for j in range(0, len(parts) - 1, 2):
        if parts[j]:
            d[parts[j].decode("utf-8", "replace")] = parts[j + 1].decode("utf-8", "replace")
    if d:
        labels[goid] = d
    else:
        labels.pop(goid, None)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src = argv[1]
    dst = argv[2] if len(argv) > 2 else src + ".json"
    try:
        tr = load(src)
    except (OSError, ValueError) as e:
        print("trace2json: %s" % e, file=sys.stderr)
        return 1
    if dst == "-":
        to_json(tr, sys.stdout)
    else:
        with open(dst, "w") as f:
            to_json(tr, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
