#!/usr/bin/env python3
"""Summarises one Nsight Compute report exported as CSV (scripts/gpu/decode-profile.sh):
the details page's metrics (speed of light, warp states, pipes, memory), then the source page's
warp-stall samples per SASS opcode and the instructions where most samples stalled.
    python3 ncu_stalls.py DETAILS_CSV SOURCE_CSV [TOP]
"""
import csv
import sys
from collections import defaultdict


def csv_rows(path):
    with open(path, newline="", errors="replace") as handle:
        return list(csv.reader(line for line in handle if line.startswith('"')))


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def print_details(path):
    rows = csv_rows(path)
    if not rows:
        print("(no details)")
        return
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}
    needed = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
    if not all(name in col for name in needed):
        print("details header:", header)
        return
    for row in rows[1:]:
        section, metric, unit, value = (row[col[name]] for name in needed)
        if section == "SourceCounters" and not metric.startswith("Branch"):
            continue
        print(f"  {section:28.28} {metric:60.60} {value:>14} {unit}")


def print_stalls(path, top):
    rows = csv_rows(path)
    header = None
    samples = []  # (all samples, not issued, address, sass, per-reason dict)
    for row in rows:
        if "Source" in row and any("Sampling" in name for name in row):
            header = row
            continue
        if header is None or len(row) != len(header):
            continue
        record = dict(zip(header, row))
        all_col = next((n for n in header if "Sampling (All" in n), None)
        not_col = next((n for n in header if "Not-issued" in n or "Not Issued" in n), None)
        if all_col is None:
            continue
        reasons = {n: number(record[n]) for n in header
                   if n.startswith("stall_") or n.startswith("smsp__pcsamp")}
        samples.append((number(record[all_col]), number(record[not_col]) if not_col else 0.0,
                        record.get("# Address", record.get("Address", "?")),
                        record.get("Source", "?").strip(), reasons))
    if header is None:
        print("(no source page with warp-stall samples; first lines follow)")
        for row in rows[:5]:
            print("  ", row[:8])
        return
    total = sum(s[0] for s in samples) or 1.0
    print(f"  warp-stall samples: {int(total)} over {len(samples)} SASS instructions")
    by_opcode = defaultdict(float)
    for s in samples:
        by_opcode[s[3].split(" ")[0] if s[3] else "?"] += s[0]
    print("  by opcode (share of all samples):")
    for opcode, count in sorted(by_opcode.items(), key=lambda kv: -kv[1])[:16]:
        print(f"    {100 * count / total:5.1f} %  {opcode}")
    reason_totals = defaultdict(float)
    for s in samples:
        for name, value in s[4].items():
            reason_totals[name] += value
    if reason_totals:
        print("  by reason:")
        for name, count in sorted(reason_totals.items(), key=lambda kv: -kv[1])[:14]:
            if count > 0:
                print(f"    {100 * count / total:5.1f} %  {name}")
    print(f"  top {top} instructions (all samples, not issued, address, SASS, top reasons):")
    for s in sorted(samples, key=lambda s: -s[0])[:top]:
        reasons = sorted(((v, n) for n, v in s[4].items() if v > 0), reverse=True)[:3]
        why = ", ".join(f"{n.replace('stall_', '')} {int(v)}" for v, n in reasons)
        print(f"    {100 * s[0] / total:5.1f} % {int(s[1]):7d}  {s[2]:>6}  {s[3][:70]:70}  {why}")


def main():
    details, source = sys.argv[1], sys.argv[2]
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    print_details(details)
    print_stalls(source, top)


if __name__ == "__main__":
    main()
