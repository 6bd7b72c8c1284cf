#!/usr/bin/env bash
# bench-kernels.sh: the CPU engine's kernels (tpu/cpu/kernels) against this
# machine's anchors, as issue 14 asks.
#
#   GEMV (decode, m = 1) GB/s as a fraction of the streaming read bandwidth
#     (BenchmarkStreamRead: a 256 MiB buffer summed on the pool's threads),
#     and bf16 / int8 GEMV speed relative to f32 GEMV;
#   GEMM (prefill, 128 tokens) GFLOP/s relative to torch's sgemm on the same
#     threads (torch.set_num_threads).
#
# Rounds are interleaved (ours, then torch, per round) and each figure is the
# median over rounds. Every run holds /tmp/bench.lock so that benchmarks of
# other sessions do not overlap ours. The load average is printed before and
# after: on a shared machine, read the figures with it.
#
# Usage: scripts/bench-kernels.sh [rounds=3] [threads=2]
# Needs: go; for the torch anchor, a python3 with torch (Debian:
# apt-get install python3-torch libopenblas0-pthread; without OpenBLAS the
# Debian torch falls back to the reference BLAS, about 1.5 GFLOP/s).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${2:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

py=""
for cand in python3 /usr/bin/python3; do
	if command -v "$cand" >/dev/null && "$cand" -c 'import torch' 2>/dev/null; then
		py=$cand
		break
	fi
done

go test -c -o "$tmp/kernels.test" ./tpu/cpu/kernels
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), threads=$threads, rounds=$rounds"

cat >"$tmp/torch_sgemm.py" <<'PY'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
for m, n, k in [(128, 768, 768), (128, 2048, 768), (128, 768, 2048)]:
    a = torch.randn(m, k)
    w = torch.randn(n, k)
    for _ in range(5):
        a @ w.t()
    reps, t = 0, time.perf_counter()
    while time.perf_counter() - t < 1.0:
        a @ w.t()
        reps += 1
    dt = (time.perf_counter() - t) / reps
    print(f"torch/{m}x{n}x{k} {2 * m * n * k / dt / 1e9:.2f}")
PY

for r in $(seq "$rounds"); do
	flock /tmp/bench.lock "$tmp/kernels.test" -test.run '^$' -test.cpu "$threads" -test.benchtime 1s \
		-test.bench 'StreamRead|GEMV/(f32|bf16|int8)/|GEMM/(f32|bf16|int8)/128x(768x768|2048x768|768x2048)$' \
		>>"$tmp/go.txt"
	if [ -n "$py" ]; then
		flock /tmp/bench.lock "$py" "$tmp/torch_sgemm.py" "$threads" >>"$tmp/torch.txt"
	fi
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$py" ] || echo "# torch not found: no sgemm anchor"
touch "$tmp/torch.txt"

python3 - "$tmp/go.txt" "$tmp/torch.txt" <<'PY'
import re, sys, statistics as st
vals = {}
for line in open(sys.argv[1]):
    f = line.split()
    if not f or not f[0].startswith("Benchmark"):
        continue
    name = re.sub(r"-\d+$", "", f[0][len("Benchmark"):])
    d = vals.setdefault(name, {})
    for v, unit in zip(f[2::2], f[3::2]):
        d.setdefault(unit, []).append(float(v))
torch = {}
for line in open(sys.argv[2]):
    name, v = line.split()
    torch.setdefault(name, []).append(float(v))
med = lambda xs: st.median(xs)
stream = med(vals["StreamRead"]["MB/s"]) / 1000
print(f"stream read: {stream:.1f} GB/s (median of {len(vals['StreamRead']['MB/s'])})")
print()
print("GEMV [out x in]    dtype   GB/s   of stream   us/op   speed vs f32")
shapes = ["768x768", "2048x768", "768x2048", "32000x768"]
for s in shapes:
    f32 = med(vals[f"GEMV/f32/{s}"]["ns/op"])
    for dt in ["f32", "bf16", "int8"]:
        d = vals[f"GEMV/{dt}/{s}"]
        gbs = med(d["MB/s"]) / 1000
        ns = med(d["ns/op"])
        print(f"{s:>17}  {dt:>5}  {gbs:6.1f}   {gbs / stream:8.0%}  {ns / 1000:7.1f}   {f32 / ns:5.2f}x")
# One 110M Llama layer: q, k, v, o (768x768), gate and up (2048x768), down (768x2048).
layer = {"768x768": 4, "2048x768": 2, "768x2048": 1}
print()
for dt in ["f32", "bf16", "int8"]:
    t = sum(c * med(vals[f"GEMV/{dt}/{s}"]["ns/op"]) for s, c in layer.items())
    t32 = sum(c * med(vals[f"GEMV/f32/{s}"]["ns/op"]) for s, c in layer.items())
    byts = sum(c * int(s.split("x")[0]) * int(s.split("x")[1]) * {"f32": 4, "bf16": 2, "int8": 1}[dt] for s, c in layer.items())
    print(f"110M layer GEMVs {dt:>5}: {t / 1000:7.1f} us, {byts / t:5.1f} GB/s = {byts / t / stream:4.0%} of stream, {t32 / t:4.2f}x f32")
print()
print("GEMM m x n x k       dtype  GFLOP/s   torch sgemm   ours/torch")
for s in ["128x768x768", "128x2048x768", "128x768x2048"]:
    tv = torch.get(f"torch/{s}")
    for dt in ["f32", "bf16", "int8"]:
        g = med(vals[f"GEMM/{dt}/{s}"]["GFLOP/s"])
        if tv:
            print(f"{s:>17}  {dt:>5}  {g:7.1f}   {med(tv):9.1f}     {g / med(tv):5.0%}")
        else:
            print(f"{s:>17}  {dt:>5}  {g:7.1f}          -")
PY
