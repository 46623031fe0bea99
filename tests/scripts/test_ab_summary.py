#!/usr/bin/env python3
"""CPU test of scripts/gpu/ab_summary.py on made-up measurements whose answer is known by
construction: the tree's fast kernel is exactly 10 % faster than the reference's on compute-bound
rows and 5 % slower on memory-bound ones, with baseline equal in both; a malformed AB line and a
failed row (empty µs) must be skipped, not crash the summary.

  test_ab_summary.py PATH/TO/ab_summary.py
"""
import json
import os
import subprocess
import sys
import tempfile


def sweep(fast_scale):
    rows = []
    for b, s_q, h_q, s_k in [(128, 2, 128, 8192), (32, 1, 128, 4096), (128, 1, 16, 4096),
                             (128, 1, 64, 8192)]:
        compute = s_q * h_q >= 128
        scale = fast_scale[0] if compute else fast_scale[1]
        rows.append({"kernel": "baseline", "b": b, "s_q": s_q, "h_q": h_q, "s_k": s_k,
                     "us": 100.0, "speedup_vs_flashmla": 0.8})
        rows.append({"kernel": "fast", "b": b, "s_q": s_q, "h_q": h_q, "s_k": s_k,
                     "us": 80.0 * scale, "speedup_vs_flashmla": 1.0 / scale})
    return {"rows": rows}


def main():
    script = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "ab.log")
        with open(log, "w", encoding="utf-8") as f:
            for rep in (1, 2, 3):
                f.write(f"AB tree 128,2,128,8192 {rep} {72.0 + rep * 0.0} 100.0\n")
                f.write(f"AB main 128,2,128,8192 {rep} 80.0 100.0\n")
                f.write(f"AB tree 128,1,64,8192 {rep} 84.0 100.0\n")
                f.write(f"AB main 128,1,64,8192 {rep} 80.0 100.0\n")
            f.write("AB tree 128,1,64,8192 4  100.0\n")  # a failed run: one field short
            f.write("AB tree garbage\nnot an AB line at all\n")
        paths = []
        for name, scale in (("tree", (0.9, 1.05)), ("main", (1.0, 1.0))):
            path = os.path.join(tmp, f"sweeps-{name}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump([sweep(scale), sweep(scale)], f)
            paths.append(path)
        result = subprocess.run([sys.executable, script, log] + paths, capture_output=True,
                                text=True, check=False)
        out = result.stdout
        if result.returncode != 0:
            failures.append(f"exit status {result.returncode}: {result.stderr}")
        expected = [
            "change against main",
            "0.7200 -10.0 %",            # 72/100 against 80/100
            "0.8400  +5.0 %",            # 84/100 against 80/100
            "tree against main: fast/baseline -2.79 % over 4 rows",  # (0.9 · 0.9 · 1.05 · 1.05)^(1/4)
            "compute-bound (2 rows): -10.00 %",
            "memory-bound (2 rows): +5.00 %",
            "sweep 2 against sweep 1: +0.00 %",
        ]
        for text in expected:
            if text not in out:
                failures.append(f"missing {text!r}")
    if failures:
        print(out)
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("ab_summary: all expected figures found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
