#!/usr/bin/env python3
"""Summary of scripts/gpu/sm-balance.sh: per weights source and row, fast_smbal / fast in each
process (the two timed interleaved in one process), their median over the processes, and the
geometric mean of those medians over the rows. Reads the rows.jsonl the script writes."""
import json
import math
import statistics
import sys
from collections import defaultdict


def main(path):
    ratios = defaultdict(list)  # (source, row) -> [smbal / fast]
    fast_us = defaultdict(list)
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        entry = json.loads(line)
        us = entry["us"]
        if "fast" not in us or "fast_smbal" not in us:
            print(f"{entry['source']} {entry['row']} rep {entry['rep']}: no pair in {sorted(us)}")
            continue
        key = (entry["source"], entry["row"])
        ratios[key].append(us["fast_smbal"] / us["fast"])
        fast_us[key].append(us["fast"])
    for source in sorted({s for s, _ in ratios}):
        print(f"weights from {source}: fast_smbal / fast (median over processes; < 1: balanced wins)")
        logs = []
        for (s, row), values in sorted(ratios.items()):
            if s != source:
                continue
            m = statistics.median(values)
            logs.append(math.log(m))
            each = " ".join(f"{v:.4f}" for v in values)
            print(f"  {row:<16} fast {statistics.median(fast_us[(s, row)]):9.1f} us  "
                  f"ratio {m:.4f}  ({each})")
        if logs:
            print(f"  geometric mean over {len(logs)} rows: {math.exp(sum(logs) / len(logs)):.4f}")


if __name__ == "__main__":
    main(sys.argv[1])
