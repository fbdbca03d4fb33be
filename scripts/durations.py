"""Group a pytest `--durations=0` listing by file and by phase (setup: the fixtures a test is the first
to need; call: the test itself), as docs/testing.md's "Time" tables show it.

    python -m pytest -q --durations=0 > run.txt; python scripts/durations.py run.txt [--top 15]
"""
import argparse
import collections
import re
import sys

LINE = re.compile(r"\s*([\d.]+)s (setup|call|teardown)\s+(\S.*)$")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("listing", help="the output of a pytest run with --durations=0")
    ap.add_argument("--top", type=int, default=15, help="how many of the slowest tests to list (setup + call)")
    a = ap.parse_args(argv)
    phase, test = collections.defaultdict(float), collections.defaultdict(float)
    for line in open(a.listing, encoding="utf-8", errors="replace"):
        m = LINE.match(line)
        if m:
            seconds, when, node = float(m[1]), m[2], m[3].strip()
            phase[node.split("::")[0], when] += seconds
            if when != "teardown":
                test[node] += seconds
    if not test:
        print(f"{a.listing}: no --durations lines", file=sys.stderr)
        return 2
    files = sorted({f for f, _ in phase}, key=lambda f: -sum(phase[f, w] for w in ("setup", "call", "teardown")))
    print("| file | total s | setup s | call s |\n|---|---:|---:|---:|")
    for f in files:
        s, c, t = (phase[f, w] for w in ("setup", "call", "teardown"))
        print(f"| `{f}` | {s + c + t:.0f} | {s:.0f} | {c:.0f} |")
    print(f"| all ({len(test)} tests) | {sum(phase.values()):.0f} | "
          f"{sum(v for (f, w), v in phase.items() if w == 'setup'):.0f} | "
          f"{sum(v for (f, w), v in phase.items() if w == 'call'):.0f} |\n")
    print(f"| the {a.top} slowest (setup + call) | s |\n|---|---:|")
    for node, seconds in sorted(test.items(), key=lambda x: -x[1])[:a.top]:
        print(f"| `{node}` | {seconds:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
