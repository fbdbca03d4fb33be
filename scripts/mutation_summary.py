"""Reads `mutmut results --all true` on stdin; prints the score per module and the survivors.

Score = killed / (killed + survived); timeouts count as killed (the mutant hangs the engine), and
mutants no test reaches ("no tests") are listed apart, since they are survivors too.
"""
import re
import sys
from collections import Counter, defaultdict

modules = sys.argv[1:]
status = {}
for line in sys.stdin:
    m = re.match(r"\s*(\S+): (.+)$", line)
    if m:
        status[m.group(1)] = m.group(2).strip()
by_module = defaultdict(Counter)
survivors = defaultdict(list)
for name, s in status.items():
    module = name.split(".x_")[0].split(".xǁ")[0]
    if modules and module not in modules:
        continue
    s = {"timeout": "killed"}.get(s, s)
    by_module[module][s] += 1
    if s in ("survived", "no tests"):
        survivors[module].append(f"{name} ({s})")
print(f"{'module':24}{'mutants':>8}{'killed':>8}{'survived':>9}{'no tests':>9}{'score':>8}")
for module in sorted(by_module):
    c = by_module[module]
    total, killed = sum(c.values()), c["killed"]
    alive = c["survived"] + c["no tests"]
    score = killed / max(killed + alive, 1)
    print(f"{module:24}{total:>8}{killed:>8}{c['survived']:>9}{c['no tests']:>9}{score:>8.1%}")
for module in sorted(survivors):
    print(f"\n{module}: surviving")
    for s in sorted(survivors[module]):
        print("  " + s)
