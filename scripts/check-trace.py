#!/usr/bin/env python3
"""Checks an execution trace written by libgmp (GMP_TRACE / gmp_trace_start).

    python3 scripts/check-trace.py TRACE

TRACE is the binary file (turned into JSON by scripts/trace2json.py first) or its JSON.
Parses the Chrome trace-event JSON and checks the invariants of the format we write:
  - on every track (pid, tid), in time order, B and E alternate: every slice ends, and no
    two slices overlap on one P (nor two syscalls on one M); an E names the goroutine of
    its B;
  - every goroutine run (a B on a P track) names its goroutine (args.goid);
  - every `unpark` names a goroutine that runs (a B with that goid) at or after it.
Prints one JSON line of counts (slices, spawns, unparks, steals, preempts, syscalls,
handoffs, counters, tracks) on success; exits 1 with the first violations otherwise.
Python 3 standard library only.
"""
import io
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace2json  # noqa: E402


def main(path):
    with open(path, "rb") as f:
        binary = f.read(8) == trace2json.MAGIC
    if binary:
        text = io.StringIO()
        trace2json.to_json(trace2json.load(path), text)
        doc = json.loads(text.getvalue())
    else:
        with open(path) as f:
            doc = json.load(f)
    evs = doc["traceEvents"]
    errors = []
    tracks = defaultdict(list)
    counts = defaultdict(int)
    starts = defaultdict(list)  # goid -> B timestamps
    for i, e in enumerate(evs):
        ph = e.get("ph")
        if ph in ("B", "E"):
            tracks[(e["pid"], e["tid"])].append((e["ts"], i, e))
        if ph == "B" and e["pid"] == 1:
            if "goid" not in e.get("args", {}):
                errors.append("slice without goid: %r" % e)
            else:
                starts[e["args"]["goid"]].append(e["ts"])
            counts["slices"] += 1
        if ph == "B" and e["pid"] == 2:
            counts["syscalls"] += 1
        if ph == "i":
            counts[e["name"] + "s"] += 1
        if ph == "C":
            counts["counters"] += 1
    for key, lst in tracks.items():
        lst.sort(key=lambda t: (t[0], t[1]))
        open_ev = None
        for ts, _, e in lst:
            if e["ph"] == "B":
                if open_ev is not None:
                    errors.append("track %r: slice at %.3f starts while the one from %.3f is open"
                                  % (key, ts, open_ev["ts"]))
                open_ev = e
            else:
                if open_ev is None:
                    errors.append("track %r: end at %.3f without a start" % (key, ts))
                elif open_ev.get("args", {}).get("goid") != e.get("args", {}).get("goid"):
                    errors.append("track %r: slice of goroutine %r ended as goroutine %r at %.3f"
                                  % (key, open_ev["args"].get("goid"), e["args"].get("goid"), ts))
                open_ev = None
        if open_ev is not None:
            errors.append("track %r: slice from %.3f never ends" % (key, open_ev["ts"]))
    last_start = {g: max(ts) for g, ts in starts.items()}
    for e in evs:
        if e.get("ph") == "i" and e["name"] == "unpark":
            g = e["args"]["goid"]
            if last_start.get(g, -1.0) < e["ts"]:
                errors.append("unpark of goroutine %d at %.3f: it never runs after" % (g, e["ts"]))
    counts["tracks"] = len({(e["pid"], e["tid"]) for e in evs if "tid" in e})
    if errors:
        for err in errors[:20]:
            print(err, file=sys.stderr)
        print("%d violations" % len(errors), file=sys.stderr)
        return 1
    print(json.dumps(dict(counts), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
