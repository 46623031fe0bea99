#!/usr/bin/env python3
"""Summary of scripts/gpu/sm-balance.sh: per weights source and row, ratios of the variants timed
interleaved in one process, fast (the usual plan), fast_smbal (a plan whose shares follow the SM
weights), fast_smeq (the same kind of plan with every SM weighing 1) and fast_smrank (the usual
plan with its parts ranked by the weights, the slowest SMs taking the parts with less work):
  smbal / fast   what the shares give against today's plan;
  smbal / smeq   the weights' own effect (the same plan shape);
  smeq / fast    the plan shape's (whole sequences where the usual plan keeps them, against
                 pieces split at every part boundary);
  smrank / fast  the ranking's.
Each is the median over the processes; the last line per source is the geometric mean over the
rows. Reads the rows.jsonl the script writes."""
import json
import math
import statistics
import sys
from collections import defaultdict

RATIOS = [("fast_smbal", "fast"), ("fast_smbal", "fast_smeq"), ("fast_smeq", "fast"),
          ("fast_smrank", "fast")]


def main(path):
    ratios = defaultdict(lambda: defaultdict(list))  # (source, row) -> ratio name -> values
    fast_us = defaultdict(list)
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        entry = json.loads(line)
        us = entry["us"]
        key = (entry["source"], entry["row"])
        missing = [n for n in ("fast", "fast_smbal", "fast_smeq", "fast_smrank") if n not in us]
        if missing:
            print(f"{entry['source']} {entry['row']} rep {entry['rep']}: no {missing} in {sorted(us)}")
        if "fast" in us:
            fast_us[key].append(us["fast"])
        for a, b in RATIOS:
            if a in us and b in us:
                ratios[key][f"{a}/{b}"].append(us[a] / us[b])
    names = [f"{a}/{b}" for a, b in RATIOS]
    for source in sorted({s for s, _ in ratios}):
        print(f"weights from {source}: medians over processes (< 1: the first is faster)")
        print(f"  {'row':<16} {'fast us':>9}  " + "  ".join(f"{n.replace('fast_', ''):>11}" for n in names))
        logs = defaultdict(list)
        for (s, row), by_name in sorted(ratios.items()):
            if s != source:
                continue
            cells = []
            for n in names:
                values = by_name.get(n, [])
                if values:
                    m = statistics.median(values)
                    logs[n].append(math.log(m))
                    cells.append(f"{m:11.4f}")
                else:
                    cells.append(f"{'-':>11}")
            print(f"  {row:<16} {statistics.median(fast_us[(s, row)]) if fast_us[(s, row)] else 0:9.1f}  "
                  + "  ".join(cells))
        print(f"  {'geometric mean':<16} {'':>9}  " + "  ".join(
            f"{math.exp(sum(logs[n]) / len(logs[n])):11.4f}" if logs[n] else f"{'-':>11}" for n in names))


if __name__ == "__main__":
    main(sys.argv[1])
