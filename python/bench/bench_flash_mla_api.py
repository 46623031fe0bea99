"""Times mla_decode.flash_mla_with_kvcache (the FlashMLA-compatible Python API) on the GPU.

    PYTHONPATH=build/python python3 python/bench/bench_flash_mla_api.py [--quick] [--json FILE]

Method, as `mla bench decode` and FlashMLA's published numbers: causal, page 64, h_kv 1, inputs
clamp(randn / 10, -1, 1) in bf16, a randomly permuted block table, NaN in unused slots; each run
flushes the L2 (256 MB written) and is timed with CUDA events around one eager Python call (the
flush keeps the GPU busy while Python issues the call, so the time is the GPU's); the median of
--runs. The plan (get_mla_metadata) is timed apart, as it runs once per step for all layers.
host_us is the CPU time of one call (Python, argument checks, launch). Rows print µs, GB/s,
TFLOP/s and, where bench/reference/flashmla-h200.json has the configuration, × FlashMLA.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

import mla_decode

QUICK = [(1, 1, 16, "4096"), (1, 1, 128, "32768"), (8, 2, 16, "4096"), (32, 2, 64, "8192"),
         (128, 1, 16, "4096"), (128, 2, 128, "4096"), (128, 1, 64, "uniform[1,8192]"),
         (128, 2, 16, "32768")]
DEFAULT_REFERENCE = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "reference",
                                 "flashmla-h200.json")


def make_inputs(b, s_q, h_q, seqlen_k, gen):
    if seqlen_k.startswith("uniform"):
        seqlens = torch.randint(1, 8193, (b,), generator=torch.Generator().manual_seed(0))
    else:
        seqlens = torch.full((b,), int(seqlen_k))
    max_blocks = math.ceil(int(seqlens.max()) / 64)
    num_blocks = b * max_blocks
    q = (torch.randn(b, s_q, h_q, 576, generator=gen, device="cuda") / 10).clamp_(-1, 1)
    k_cache = torch.empty(num_blocks, 64, 1, 576, dtype=torch.bfloat16, device="cuda")
    for start in range(0, num_blocks, 4096):  # in chunks: the fp32 temporary stays small
        chunk = k_cache[start : start + 4096]
        chunk.copy_((torch.randn(chunk.shape, generator=gen, device="cuda") / 10).clamp_(-1, 1))
    perm = torch.randperm(num_blocks, generator=gen, device="cuda")
    block_table = perm.view(b, max_blocks).to(torch.int32)
    cache_seqlens = seqlens.to(torch.int32).cuda()
    for i, length in enumerate(seqlens.tolist()):  # NaN past each sequence's end
        if length % 64:
            k_cache[block_table[i, length // 64].item(), length % 64 :] = float("nan")
        k_cache[block_table[i, math.ceil(length / 64) :].long()] = float("nan")
    return q.to(torch.bfloat16), k_cache, block_table, cache_seqlens, float(seqlens.float().mean())


def time_gpu(fn, runs, flush):
    times = []
    for _ in range(runs):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def time_host(fn, runs):
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        begin = time.perf_counter()
        fn()
        times.append((time.perf_counter() - begin) * 1e6)
    return statistics.median(times)


def bench_config(b, s_q, h_q, seqlen_k, kernels, runs, flush, gen, reference):
    """One configuration, every kernel: a row each (its inputs are freed on return)."""
    q, k_cache, block_table, cache_seqlens, mean_seqlen = make_inputs(b, s_q, h_q, seqlen_k, gen)
    metadata, num_splits = mla_decode.get_mla_metadata(cache_seqlens, s_q * h_q, 1)
    plan_us = time_gpu(lambda: mla_decode.get_mla_metadata(cache_seqlens, s_q * h_q, 1), runs,
                       flush)
    bytes_moved = b * (s_q * h_q * 576 * 2 + mean_seqlen * 576 * 2 + s_q * h_q * 512 * 2)
    flops = 2 * b * s_q * h_q * mean_seqlen * (576 + 512)
    rows = []
    for kernel in kernels:
        def call(kernel=kernel):
            return mla_decode.flash_mla_with_kvcache(
                q, k_cache, block_table, cache_seqlens, 512, metadata, num_splits,
                softmax_scale=192**-0.5, causal=True, kernel=kernel)

        out, lse = call()  # warm up, and a sanity check
        if torch.isnan(out).any() or torch.isnan(lse).any():
            raise RuntimeError(f"NaN in the output of b {b} s_q {s_q} h_q {h_q} s_k {seqlen_k} "
                               f"kernel {kernel}")
        us = time_gpu(call, runs, flush)
        rows.append(dict(b=b, s_q=s_q, h_q=h_q, s_k=seqlen_k, mean_s_k=mean_seqlen, kernel=kernel,
                         us=us, gbps=bytes_moved / us * 1e-3, tflops=flops / us * 1e-6,
                         plan_us=plan_us, host_us=time_host(call, 10),
                         flashmla_us=reference.get((b, s_q, h_q, seqlen_k))))
    return rows


def load_reference(path):
    if not path or not os.path.exists(path):
        return {}
    with open(path) as file:
        rows = json.load(file)["rows"]
    return {(r["b"], r["s_q"], r["h_q"], str(r["s_k"])): r["us"] for r in rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few representative rows")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--kernels", default="fast,baseline")
    parser.add_argument("--reference", default=DEFAULT_REFERENCE,
                        help="FlashMLA's H200 times (JSON; '' for none)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("bench_flash_mla_api: needs an sm_90 GPU (H100/H200); nothing timed")
        return 0
    reference = load_reference(args.reference)
    configs = QUICK if args.quick else sorted(reference, key=lambda c: (c[0], c[1], c[2], c[3]))
    kernels = args.kernels.split(",")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, causal, h_kv 1, "
          f"median of {args.runs} runs, L2 flushed")
    header = (f"{'b':>4} {'s_q':>3} {'h_q':>4} {'s_k':>16} {'kernel':>8} {'us':>9} {'GB/s':>7} "
              f"{'TFLOP/s':>8} {'plan_us':>8} {'host_us':>8} {'FlashMLA_us':>11} {'x FlashMLA':>10}")
    print(header)
    rows = []
    for config in configs:
        for row in bench_config(*config, kernels, args.runs, flush, gen, reference):
            rows.append(row)
            flashmla_us = row["flashmla_us"]
            versus = f"{flashmla_us / row['us']:.2f}x" if flashmla_us else "-"
            print(f"{row['b']:>4} {row['s_q']:>3} {row['h_q']:>4} {row['s_k']:>16} "
                  f"{row['kernel']:>8} {row['us']:>9.1f} {row['gbps']:>7.0f} "
                  f"{row['tflops']:>8.1f} {row['plan_us']:>8.1f} {row['host_us']:>8.1f} "
                  f"{flashmla_us or '-':>11} {versus:>10}", flush=True)
    for kernel in kernels:
        ratios = [r["flashmla_us"] / r["us"] for r in rows if r["kernel"] == kernel and r["flashmla_us"]]
        if ratios:
            geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print(f"# {kernel}: geometric mean {geomean:.2f}x FlashMLA over {len(ratios)} rows")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
