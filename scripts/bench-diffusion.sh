#!/usr/bin/env bash
# Diffusion benchmark on the CPU (pure-Go backend): seconds per denoising step
# (one UNet call with classifier-free guidance, batch 2) and compile times,
# eager against compiled, at 64x64 and 256x256, for the tiny SD pipeline and a
# ~100M-parameter SD-like UNet (generated once; about 400 MB).
#
#   scripts/bench-diffusion.sh                  # all cases, one measured call each
#   BENCHTIME=3x scripts/bench-diffusion.sh     # more iterations
#   scripts/bench-diffusion.sh -bench 'Denoise/tiny-sd'   # extra go test flags
#
# It runs with nice: do not run it next to other heavy work on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${TPUTOOL_SD100M:-${TMPDIR:-/tmp}/tputool-sd-100m}
if [ ! -f "$dir/model_index.json" ]; then
  go run ./scripts/gen-tiny-sd -preset sd-100m -o "$dir"
fi
echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
TPUTOOL_SD100M=$dir nice go test ./pipeline/diffusion/sd -run '^$' -bench Denoise \
  -benchtime "${BENCHTIME:-1x}" -timeout 180m "$@"
