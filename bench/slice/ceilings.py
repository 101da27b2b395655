#!/usr/bin/env python3
"""The two ceilings of this GPU, measured through PyTorch (METHOD.md: measure them once, use them for the
per-kernel table's achieved/ceiling columns).

  matmul: bf16 C = A @ B, 8192 x 8192 x 8192, random normal operands (never zeros: they run faster), three
          rotating operand sets, CUDA events, median of 20 after 5 warm-ups; 2*n^3 FLOPs.
  fp8:    the same with E4M3 operands (torch._scaled_mm, per-tensor fp32 scales, bf16 output): the FP8 tensor
          ceiling the FP8 GEMMs are rated against (issue 43); absent when this torch has no _scaled_mm.
  copy:   device-to-device copy of a 2 GiB buffer (random bytes), median of 20 after 3 warm-ups; bytes read plus
          bytes written (2 x 2 GiB), as performance.md counts it.

Usage: python3 bench/slice/ceilings.py OUT.json
"""

import json
import statistics
import sys
import time

import torch


def timed(fn, warm, reps):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def main():
    out_path = sys.argv[1]
    t0 = time.time()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    n = 8192
    gen = torch.Generator(device=dev).manual_seed(0)
    sets = [(torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen),
             torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)) for _ in range(3)]
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    i = [0]

    def mm():
        a, b = sets[i[0] % 3]
        i[0] += 1
        torch.matmul(a, b, out=c)

    mm_ms = timed(mm, 5, 20)
    mm_med = statistics.median(mm_ms)
    tflops = 2 * n ** 3 / (mm_med * 1e-3) / 1e12
    del c

    fp8_med, fp8_ms = None, []
    if hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
        # _scaled_mm wants B column-major: the transpose of a row-major matrix.
        f8 = [(a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()) for a, b in sets]
        one = torch.ones((), device=dev, dtype=torch.float32)
        j = [0]

        def mm8():
            a, b = f8[j[0] % 3]
            j[0] += 1
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        try:
            fp8_ms = timed(mm8, 5, 20)
            fp8_med = statistics.median(fp8_ms)
        except RuntimeError as e:  # an FP8 path this torch or GPU lacks
            print(f"fp8 ceiling not measured: {e}")
        del f8
    del sets
    torch.cuda.empty_cache()

    nbytes = 2 << 30
    src = torch.randint(0, 256, (nbytes,), device=dev, dtype=torch.uint8, generator=gen)
    dst = torch.empty_like(src)
    cp_ms = timed(lambda: dst.copy_(src), 3, 20)
    cp_med = statistics.median(cp_ms)
    gbps = 2 * nbytes / (cp_med * 1e-3) / 1e9
    del src, dst
    torch.cuda.empty_cache()

    res = {
        "gpu": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "matmul_tflops": round(tflops, 1),
        "matmul_ms_median": mm_med,
        "matmul_ms_min_max": [min(mm_ms), max(mm_ms)],
        "matmul_definition": f"bf16 {n}x{n}x{n} torch.matmul, random operands (3 rotating sets), median of 20 "
                             "after 5 warm-ups, CUDA events, 2*n^3 FLOPs",
        "fp8_matmul_tflops": round(2 * n ** 3 / (fp8_med * 1e-3) / 1e12, 1) if fp8_med else None,
        "fp8_matmul_ms_min_max": [min(fp8_ms), max(fp8_ms)] if fp8_ms else None,
        "fp8_matmul_definition": f"e4m3 {n}x{n}x{n} torch._scaled_mm, per-tensor scales, bf16 out, as matmul",
        "copy_gbps": round(gbps, 1),
        "copy_ms_median": cp_med,
        "copy_ms_min_max": [min(cp_ms), max(cp_ms)],
        "copy_definition": "2 GiB device-to-device Tensor.copy_, random bytes, median of 20 after 3 warm-ups, "
                           "bytes read + bytes written",
        "seconds": round(time.time() - t0, 1),
    }
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    print(f"ceilings: matmul {res['matmul_tflops']} TFLOP/s (bf16 {n}^3), fp8 {res['fp8_matmul_tflops']}, copy {res['copy_gbps']} GB/s (read+write) "
          f"on {res['gpu']} in {res['seconds']} s")


if __name__ == "__main__":
    main()
