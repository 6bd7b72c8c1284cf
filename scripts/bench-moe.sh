#!/bin/sh
# MoE decode benchmark (docs/moe.md): decode tok/s of a generated Qwen3-MoE
# (hidden 512, 4 layers, 64 experts of 256, top 8) at batch 1 and 64, with
# the experts grouped by routed tokens (compiled and eager) and with the
# naive dense formulation, in one run on the pure-Go backend.
#
#   scripts/bench-moe.sh                  # 20 decode steps per case
#   scripts/bench-moe.sh -benchtime 50x   # more steps
#
# Set TPUTOOL_BENCH_MOE_MODEL to a directory holding the model to skip
# regenerating it. Runs under nice: it keeps every core busy for minutes.
cd "$(dirname "$0")/.." || exit 1
exec nice -n 10 go test -run '^$' -bench 'BenchmarkMoEDecode' -benchtime 20x -timeout 60m ./pipeline/qwen3moe/ "$@"
