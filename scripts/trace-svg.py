#!/usr/bin/env python3
"""Draws the per-P timeline of a libgmp execution trace as an SVG (an offline picture of
what ui.perfetto.dev shows: one row per P with a box per goroutine run, one row per M
with its blocking calls, and ticks for unparks, steals and hand-offs).

    python3 scripts/trace-svg.py TRACE OUT.svg [--from MS] [--ms WINDOW]

TRACE: the binary file (read through scripts/trace2json.py) or its JSON.

Python 3 standard library only.
"""
import argparse
import colorsys
import hashlib
import html
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace2json  # noqa: E402


def colour(name):
    h = int(hashlib.md5(name.encode()).hexdigest()[:6], 16) / 0xFFFFFF
    r, g, b = colorsys.hls_to_rgb(h, 0.62, 0.55)
    return "#%02x%02x%02x" % (int(r * 255), int(g * 255), int(b * 255))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from", dest="start", type=float, default=None, help="ms")
    ap.add_argument("--ms", type=float, default=2.0, help="window in ms")
    a = ap.parse_args()
    with open(a.trace, "rb") as f:
        binary = f.read(8) == trace2json.MAGIC
    if binary:
        text = io.StringIO()
        trace2json.to_json(trace2json.load(a.trace), text)
        evs = json.loads(text.getvalue())["traceEvents"]
    else:
        with open(a.trace) as f:
            evs = json.load(f)["traceEvents"]
    runs = [e for e in evs if e.get("ph") in ("B", "E")]
    t0 = a.start * 1000 if a.start is not None else min(e["ts"] for e in runs if e["ph"] == "B")
    t1 = t0 + a.ms * 1000
    open_ = {}
    boxes = []  # (pid, tid, start, end, name)
    for e in sorted(runs, key=lambda e: e["ts"]):
        k = (e["pid"], e["tid"])
        if e["ph"] == "B":
            open_[k] = e
        elif k in open_:
            b = open_.pop(k)
            if e["ts"] >= t0 and b["ts"] <= t1:
                boxes.append((k[0], k[1], max(b["ts"], t0), min(e["ts"], t1), b.get("name", "")))
    ticks = [e for e in evs if e.get("ph") == "i" and t0 <= e["ts"] <= t1
             and e["name"] in ("unpark", "steal", "handoff", "preempt")]
    rows = sorted({(p, t) for p, t, *_ in boxes} | {(1, e["tid"]) for e in ticks if e["tid"] < 100000})
    W, left, rowh, top = 1100, 70, 26, 30
    scale = (W - left - 10) / (t1 - t0)
    H = top + rowh * len(rows) + 60
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">libgmp execution trace, %.1f ms (%s)</text>'
           % (left, a.ms, html.escape(a.trace.split("/")[-1]))]
    y_of = {}
    for i, (p, t) in enumerate(rows):
        y = top + i * rowh
        y_of[(p, t)] = y
        out.append('<text x="4" y="%d">%s%d</text>' % (y + 16, "P" if p == 1 else "M", t))
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#ddd"/>' % (left, W - 10, y + rowh - 2, y + rowh - 2))
    # Boxes narrower than a pixel that follow each other closely merge into one (the
    # picture keeps its shape; the file stays small). Ticks: one per pixel and kind.
    merged = []
    for b in sorted(boxes, key=lambda b: (b[0], b[1], b[2])):
        if merged:
            m = merged[-1]
            if m[:2] == b[:2] and (b[2] - m[3]) * scale < 1.0 and (b[3] - b[2]) * scale < 1.0 \
                    and (m[3] - m[2]) * scale < 3.0:
                merged[-1] = (m[0], m[1], m[2], max(m[3], b[3]), m[4])
                continue
        merged.append(b)
    boxes = merged
    seen_tick = set()
    kept = []
    for e in ticks:
        key = (e["tid"], e["name"], int((e["ts"] - t0) * scale))
        if key not in seen_tick:
            seen_tick.add(key)
            kept.append(e)
    ticks = kept
    for p, t, s, e, name in boxes:
        x, w = left + (s - t0) * scale, max((e - s) * scale, 0.6)
        fill = "#9e9e9e" if p == 2 else colour(name.split(" ", 1)[-1])
        out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %.1f us</title></rect>'
                   % (x, y_of[(p, t)] + 3, w, rowh - 8, fill, html.escape(name), e - s))
    tick_col = {"unpark": "#1565c0", "steal": "#c62828", "handoff": "#ef6c00", "preempt": "#6a1b9a"}
    for e in ticks:
        k = (1, e["tid"])
        if k in y_of:
            x = left + (e["ts"] - t0) * scale
            out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="1"/>'
                       % (x, x, y_of[k], y_of[k] + 4, tick_col[e["name"]]))
    ly = top + rowh * len(rows) + 20
    names = sorted({n.split(" ", 1)[-1] for p, _, _, _, n in boxes if p == 1})[:6]
    x = left
    for n in names:
        out.append('<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d">%s</text>'
                   % (x, ly, colour(n), x + 16, ly + 9, html.escape(n)))
        x += 30 + 7 * len(n)
    out.append('<rect x="%d" y="%d" width="12" height="10" fill="#9e9e9e"/><text x="%d" y="%d">syscall (M row)</text>'
               % (x, ly, x + 16, ly + 9))
    ly += 20
    x = left
    for n, c in tick_col.items():
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>'
                   % (x + 6, x + 6, ly, ly + 10, c, x + 14, ly + 9, n))
        x += 90
    out.append('<text x="%d" y="%d" fill="#555">0 .. %.0f us</text>' % (W - 120, ly + 9, t1 - t0))
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
