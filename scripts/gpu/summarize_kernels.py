#!/usr/bin/env python3
"""Groups an Nsight Compute CSV (--metrics gpu__time_duration.sum --csv) by kernel: launches,
total and mean microseconds, largest total first, and the sum over all kernels.
    python3 summarize_kernels.py NCU_CSV
"""
import csv
import re
import sys

SCALE_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
               "second": 1e6, "s": 1e6}


def short_name(name):
    """A kernel's name without its argument list and namespaces, templates kept short."""
    name = re.sub(r"\(.*\)$", "", name.strip())
    name = re.sub(r"^(void )", "", name)
    if len(name) > 90:
        name = name[:87] + "..."
    return name


def main(path):
    with open(path, newline="") as handle:
        lines = [line for line in handle if line.startswith('"')]
    rows = list(csv.DictReader(lines))
    kernels = {}
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "nsecond").strip()
        value = float(row["Metric Value"].replace(",", "")) * SCALE_TO_US.get(unit, 1e-3)
        entry = kernels.setdefault(short_name(row["Kernel Name"]), [0, 0.0])
        entry[0] += 1
        entry[1] += value
    if not kernels:
        print(f"no kernel timings in {path}")
        return 1
    total = sum(us for _, us in kernels.values())
    launches = sum(count for count, _ in kernels.values())
    print(f"{'kernel':90s} {'launches':>8s} {'total us':>10s} {'mean us':>9s} {'%':>6s}")
    for name, (count, us) in sorted(kernels.items(), key=lambda item: -item[1][1]):
        print(f"{name:90s} {count:8d} {us:10.1f} {us / count:9.2f} {100 * us / total:6.1f}")
    print(f"all kernels of the step: {launches} launches, {total:.1f} us of kernel time "
          "(serialised by ncu)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
