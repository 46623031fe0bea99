#!/usr/bin/env python3
"""Summary of scripts/gpu/decode-ab.sh: each build against the reference build.

  scripts/gpu/ab_summary.py AB_LOG [SWEEPS_JSON ...]

AB_LOG holds lines "AB <build> <b,s_q,h_q,s_k> <rep> <fast µs> <baseline µs>"; each SWEEPS_JSON
(sweeps-<build>.json) a list of `mla bench decode --json` objects of one build. The reference is
the first build other than "tree" (the working tree), in the order the log first names them.
Every comparison is of fast/baseline: baseline's code is the same in every build, so the ratio
cancels what moves a whole process (clocks, power); times are compared only as a second look.
Rows are grouped as compute-bound (s_q·h_q >= 128 and b >= 32), small batches (b <= 8) and
memory-bound (the rest).
"""
import json
import math
import os
import statistics
import sys


def geomean(values):
    """Geometric mean; nan for no values."""
    if not values:
        return float("nan")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomean_change(ratios):
    """Geometric mean of a list of ratios, as a per-cent change."""
    return 100.0 * (geomean(ratios) - 1.0)


def row_class(b, s_q, h_q):
    if b <= 8:
        return "small batches"
    return "compute-bound" if s_q * h_q >= 128 and b >= 32 else "memory-bound"


def read_ab_lines(path):
    """{(build, row): [fast/baseline, ...]}, {(build, row): [fast µs, ...]}, builds in order."""
    ratios, fast, builds = {}, {}, []
    with open(path, encoding="utf-8") as log:
        for line in log:
            fields = line.split()
            if len(fields) != 6 or fields[0] != "AB":
                continue
            build, row = fields[1], fields[2]
            try:
                fast_us, base_us = float(fields[4]), float(fields[5])
            except ValueError:
                continue
            if build not in builds:
                builds.append(build)
            ratios.setdefault((build, row), []).append(fast_us / base_us)
            fast.setdefault((build, row), []).append(fast_us)
    return ratios, fast, builds


def reference_of(builds):
    others = [b for b in builds if b != "tree"]
    return others[0] if others else None


def print_rows(ratios, fast, builds):
    reference = reference_of(builds)
    rows = []
    for (_, row) in ratios:
        if row not in rows:
            rows.append(row)
    if not rows:
        print("single rows: no measurements")
        return
    print(f"single rows, alternating processes: median fast/baseline per build"
          f"{f' (change against {reference})' if reference else ''}")
    print("row".ljust(18) + "".join(b.rjust(22) for b in builds))
    for row in rows:
        cells = []
        for build in builds:
            values = ratios.get((build, row))
            if not values:
                cells.append("–".rjust(22))
                continue
            median = statistics.median(values)
            text = f"{median:.4f}"
            ref_values = ratios.get((reference, row)) if reference else None
            if ref_values and build != reference:
                text += f" {100.0 * (median / statistics.median(ref_values) - 1.0):+5.1f} %"
            text += f" ({statistics.median(fast[(build, row)]):.1f} µs)"
            cells.append(text.rjust(22))
        print(row.ljust(18) + "".join(cells))


def read_sweeps(path):
    """[{(b, s_q, h_q, s_k): {kernel: row}}] for the sweeps of one build."""
    with open(path, encoding="utf-8") as f:
        sweeps = json.load(f)
    out = []
    for sweep in sweeps:
        rows = {}
        for r in sweep.get("rows", []):
            rows.setdefault((r["b"], r["s_q"], r["h_q"], str(r["s_k"])), {})[r["kernel"]] = r
        out.append(rows)
    return out


def sweep_ratio(rows, key):
    kernels = rows.get(key, {})
    if "fast" not in kernels or "baseline" not in kernels:
        return None
    return kernels["fast"]["us"] / kernels["baseline"]["us"]


def flashmla_geomean(rows, kernel):
    return geomean([k[kernel]["speedup_vs_flashmla"] for k in rows.values()
                    if kernel in k and k[kernel].get("speedup_vs_flashmla")])


def print_sweeps(paths, builds):
    sweeps = {}
    for path in paths:
        name = os.path.basename(path)[len("sweeps-"):-len(".json")]
        try:
            sweeps[name] = read_sweeps(path)
        except (OSError, ValueError) as error:
            print(f"{path}: unreadable ({error})")
    sweeps = {name: s for name, s in sweeps.items() if s}
    if not sweeps:
        print("sweeps: none")
        return
    order = [b for b in builds if b in sweeps] + [b for b in sweeps if b not in builds]
    reference = reference_of(order)
    print()
    print("whole sweeps (fast/baseline per row, median over a build's sweeps):")
    for name in order:
        geo = [f"fast {flashmla_geomean(rows, 'fast'):.3f} / baseline "
               f"{flashmla_geomean(rows, 'baseline'):.3f}" for rows in sweeps[name]]
        print(f"  {name}: {len(sweeps[name])} sweeps; × FlashMLA geometric means: " + "; ".join(geo))
        if len(sweeps[name]) > 1:
            first = sweeps[name][0]
            for i, rows in enumerate(sweeps[name][1:], start=2):
                changes = [sweep_ratio(rows, k) / sweep_ratio(first, k) for k in first
                           if sweep_ratio(rows, k) and sweep_ratio(first, k)]
                print(f"    sweep {i} against sweep 1: {geomean_change(changes):+.2f} % (spread)")
    if reference is None:
        return

    def median_ratio(name, key):
        values = [r for r in (sweep_ratio(rows, key) for rows in sweeps[name]) if r]
        return statistics.median(values) if values else None

    def median_fast(name, key):
        values = [rows[key]["fast"]["us"] for rows in sweeps[name]
                  if key in rows and "fast" in rows[key]]
        return statistics.median(values) if values else None

    keys = list(sweeps[reference][0].keys())
    for name in order:
        if name == reference:
            continue
        by_class, fast_by_class, changes = {}, {}, []
        for key in keys:
            mine, ref = median_ratio(name, key), median_ratio(reference, key)
            if not mine or not ref:
                continue
            cls = row_class(key[0], key[1], key[2])
            by_class.setdefault(cls, []).append(mine / ref)
            fast_mine, fast_ref = median_fast(name, key), median_fast(reference, key)
            if fast_mine and fast_ref:
                fast_by_class.setdefault(cls, []).append(fast_mine / fast_ref)
            changes.append((mine / ref, key))
        every = [r for rs in by_class.values() for r in rs]
        every_fast = [r for rs in fast_by_class.values() for r in rs]
        print(f"  {name} against {reference}: fast/baseline {geomean_change(every):+.2f} % over "
              f"{len(every)} rows (fast's µs {geomean_change(every_fast):+.2f} %)")
        for cls in sorted(by_class):
            print(f"    {cls} ({len(by_class[cls])} rows): {geomean_change(by_class[cls]):+.2f} % "
                  f"(fast's µs {geomean_change(fast_by_class.get(cls, [])):+.2f} %)")
        changes.sort()
        for ratio, key in changes[:3] + changes[-3:]:
            print(f"    row {key}: {100.0 * (ratio - 1.0):+.1f} %")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    ratios, fast, builds = read_ab_lines(sys.argv[1])
    print_rows(ratios, fast, builds)
    print_sweeps(sys.argv[2:], builds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
