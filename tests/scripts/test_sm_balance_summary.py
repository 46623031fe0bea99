#!/usr/bin/env python3
"""CPU test of scripts/gpu/sm_balance_summary.py on made-up measurements whose answer is known by
construction: on each row, fast_smbal is exactly 0.90 of fast, fast_smeq 0.96 and fast_smrank
0.98, in every process but one, whose ratios are off (the median must drop it); a line without
the twins must be reported, not crash the summary, and not count.

  test_sm_balance_summary.py PATH/TO/sm_balance_summary.py
"""
import json
import math
import os
import subprocess
import sys
import tempfile


def main():
    script = sys.argv[1]
    lines = []
    for source in ("stream", "decode"):
        for row, fast in (("128,1,16,4096", 165.0), ("128,1,16,32768", 1180.0)):
            for rep in (1, 2, 3):
                off = 1.2 if rep == 3 else 1.0  # one process off: the median keeps the others
                us = {"fast": fast, "fast_smbal": fast * 0.90 * off,
                      "fast_smeq": fast * 0.96 * off, "fast_smrank": fast * 0.98 * off}
                lines.append({"source": source, "rep": rep, "row": row, "us": us})
    lines.append({"source": "stream", "rep": 4, "row": "1,1,16,1024", "us": {"fast": 13.0}})
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for entry in lines:
            f.write(json.dumps(entry) + "\n")
        path = f.name
    try:
        out = subprocess.run([sys.executable, script, path], capture_output=True, text=True,
                             check=True).stdout
    finally:
        os.unlink(path)
    failures = []

    def expect(condition, what):
        if not condition:
            failures.append(what)

    expect("1,1,16,1024 rep 4: no" in out, "the row without twins is reported")
    for source in ("stream", "decode"):
        expect(f"weights from {source}" in out, f"a section for {source}")
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("128,1,16,")]
    expect(len(rows) == 4, f"two rows per source, got {len(rows)}")
    for cells in rows:
        ratios = [float(c) for c in cells[2:6]]
        expected = [0.90, 0.90 / 0.96, 0.96, 0.98]
        expect(all(math.isclose(r, e, abs_tol=5e-5) for r, e in zip(ratios, expected)),
               f"row {cells[0]}: ratios {ratios}, expected {expected}")
    means = [line.split() for line in out.splitlines() if line.strip().startswith("geometric mean")]
    expect(len(means) == 2, "a geometric mean per source")
    for cells in means:
        values = [float(c) for c in cells[2:6]]
        expect(math.isclose(values[0], 0.90, abs_tol=5e-5), f"geometric mean {values}")
    if failures:
        print(out)
        for failure in failures:
            print("FAILED:", failure)
        sys.exit(1)
    print("sm_balance_summary: all checks passed")


if __name__ == "__main__":
    main()
