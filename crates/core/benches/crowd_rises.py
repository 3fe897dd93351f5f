#!/usr/bin/env python3
"""Matches the backlog rises of `crowd`'s contention rows with what the
limiter's threads did, from `perf sched`.

    CROWD_RISES=/tmp/rises.txt CROWD_CASES=contention \
      perf sched record -k CLOCK_MONOTONIC -o /tmp/sched.data -- <crowd bench> --bench
    perf sched timehist -i /tmp/sched.data > /tmp/timehist.txt
    python3 crates/core/benches/crowd_rises.py /tmp/rises.txt /tmp/timehist.txt tollgate_1.0 [-v]

For each rise (a fill that came later than the active pool could hold),
it takes the overdue span, from when the fill was due (the rise plus half
a millisecond before the caller saw it) to when a caller saw it, and
reports where the filler thread (`tollgate-filler`) and each caller
(`crowd-caller`) spent that span: on CPU, runnable but off CPU, or asleep.
Rises are grouped by the filler's state and how many callers were
runnable but off CPU for at least half the span.
"""

import collections
import re
import sys

HALF_INTERVAL_NS = 500_000
LINE = re.compile(
    r"^\s*(\d+\.\d+)\s+\[\d+\]\s+(\S+)\[(\d+)(?:/\d+)?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
)


def load_rises(path):
    rises, windows = collections.defaultdict(list), {}
    for line in open(path):
        f = line.split()
        if f[0] == "window":
            windows[f[1]] = (int(f[2]), int(f[3]))
        elif f[0] == "rise":
            rises[f[1]].append((int(f[2]), int(f[3]), int(f[4])))
    return rises, windows


def load_states(path):
    """Per (name, tid): (start, end, state) spans, from timehist's
    switch-out lines (time, wait time, scheduling delay, run time)."""
    spans, last_out = collections.defaultdict(list), {}
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        name = m.group(2)
        if not (name.startswith("tollgate-fil") or name.startswith("crowd-caller")):
            continue
        out = int(float(m.group(1)) * 1e9)
        delay, run = float(m.group(5)) * 1e6, float(m.group(6)) * 1e6
        on = out - run
        runnable = on - delay
        key = (name, int(m.group(3)))
        if key in last_out and runnable > last_out[key]:
            spans[key].append((last_out[key], runnable, "asleep"))
        spans[key].append((runnable, on, "runnable"))
        spans[key].append((on, out, "running"))
        last_out[key] = out
    return spans


def share(spans, a, b):
    out = collections.Counter()
    for s, e, state in spans:
        overlap = min(e, b) - max(s, a)
        if overlap > 0:
            out[state] += overlap / (b - a)
    return out


def main():
    rises_path, timehist_path, row = sys.argv[1:4]
    verbose = "-v" in sys.argv[4:]
    rises, windows = load_rises(rises_path)
    states = load_states(timehist_path)
    w0, w1 = windows[row]
    active = [
        k for k, v in states.items() if any(s < w1 and e > w0 and st == "running" for s, e, st in v)
    ]
    fillers = [k for k in active if k[0].startswith("tollgate")]
    callers = [k for k in active if k[0].startswith("crowd")]
    groups, total = collections.Counter(), collections.Counter()
    for frm, seen, ns in sorted(rises[row], key=lambda r: r[1]):
        if seen < w0 or frm > w1:
            continue
        a, b = seen - ns - HALF_INTERVAL_NS, seen
        filler = collections.Counter()
        for k in fillers:
            filler += share(states[k], a, b)
        per_caller = [share(states[k], a, b) for k in callers]
        if not fillers:
            fstate = "none"
        else:
            fstate = max(("running", "runnable", "asleep"), key=lambda s: filler[s])
            if filler[fstate] < 0.5:
                fstate = "mixed"
        waiting = sum(1 for c in per_caller if c["runnable"] >= 0.5)
        group = f"filler {fstate}, callers runnable off CPU: {waiting}"
        groups[group] += 1
        total[group] += ns
        if verbose:
            print(
                f"rise {ns / 1e3:8.0f} us, span {(b - a) / 1e3:7.0f} us: filler "
                + " ".join(f"{s} {filler[s]:.2f}" for s in ("running", "runnable", "asleep"))
                + " | callers "
                + " | ".join(
                    " ".join(f"{s} {c[s]:.2f}" for s in ("running", "runnable", "asleep"))
                    for c in per_caller
                )
            )
    lost = sum(total.values())
    for group, n in groups.most_common():
        print(f"{group}: {n} rises, {total[group] / 1e6:.1f} ms ({total[group] / max(lost, 1):.0%})")
    print(f"all rises: {sum(groups.values())}, {lost / 1e6:.1f} ms")


if __name__ == "__main__":
    main()
