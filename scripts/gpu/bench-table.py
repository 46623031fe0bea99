#!/usr/bin/env python3
"""Turns `mla bench decode --json` output into the Markdown tables of BENCHMARKS.md.

usage: scripts/gpu/bench-table.py RESULT.json [--clocks "SM 1980 MHz, memory 3201 MHz"]
"""
import argparse
import json


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("result")
    parser.add_argument("--clocks", default="")
    args = parser.parse_args()
    with open(args.result) as f:
        run = json.load(f)
    ceilings = run["ceilings_same_run"]
    print(f"- GPU: {run['gpu']}; date {run['date']}; commit `{run['commit']}`"
          + (f"; clocks {args.clocks}" if args.clocks else ""))
    print(f"- Ceilings measured in the same run: copy {ceilings['copy_GBps_read_plus_write']:.0f} GB/s"
          f" (read + write), cuBLAS bf16 8192³ GEMM {ceilings['bf16_gemm_8192_TFLOPS']:.0f} TFLOP/s"
          + (f"; a one-block kernel timed the same way {ceilings['one_block_kernel_us']:.1f} µs"
             if "one_block_kernel_us" in ceilings else ""))
    print(f"- Reference: {run.get('flashmla_reference', '')}")
    print()
    # With --flashmla-same-run: FlashMLA's own rows ("flashmla") and a same-run ratio column.
    same_run = any("speedup_vs_flashmla_same_run" in r for r in run["rows"])
    extra_head = " × FlashMLA (same run) |" if same_run else ""
    print("| kernel | b | s_q | h_q | s_k | µs | plan µs | GB/s | TFLOP/s | % copy | % GEMM "
          "| FlashMLA µs (ref) | × FlashMLA |" + extra_head + " workspace MB |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          + ("---:|" if same_run else ""))
    for r in run["rows"]:
        flash = f"{r['flashmla_us']:.1f}" if "flashmla_us" in r else "–"
        speedup = f"{r['speedup_vs_flashmla']:.2f}" if "speedup_vs_flashmla" in r else "–"
        extra = ""
        if same_run:
            ratio = r.get("speedup_vs_flashmla_same_run")
            extra = f" {ratio:.2f} |" if ratio is not None else " – |"
        print(f"| {r['kernel']} | {r['b']} | {r['s_q']} | {r['h_q']} | {r['s_k']} | {r['us']:.1f} "
              f"| {r['us_plan']:.1f} | {r['GBps']:.0f} | {r['TFLOPS']:.1f} | {r['pct_copy']:.1f} "
              f"| {r['pct_gemm']:.1f} | {flash} | {speedup} |{extra} {r['workspace_bytes'] / 1e6:.1f} |")


if __name__ == "__main__":
    main()
