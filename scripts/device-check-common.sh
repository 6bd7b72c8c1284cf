# device-check-common.sh: what scripts/device-check.sh and
# scripts/device-check-moe.sh share. Sourced, not run. The caller sets
# prog (the prefix of its messages), log (its log file), OUT, bin (the
# binaries' directory), device and PYTHON before calling these.

# say MSG...: MSG on stderr and in the log.
say() { echo "$prog: $*" | tee -a "$log" >&2; }

# fail MSG...: records a failed check.
failures=()
fail() { failures+=("$*"); say "FAIL: $*"; }

# set_f32_env sets f32_env, the env prefix that keeps the device's float32
# matmuls in float32: no TF32 in cuBLAS, and no Triton GEMMs (they take
# TF32 at default precision) when the plugin knows the flag (an XLA that
# does not know a flag in XLA_FLAGS aborts).
set_f32_env() {
	f32_env=(env NVIDIA_TF32_OVERRIDE=0)
	case "$device" in
	xla:/*)
		if grep -q -a -m1 xla_gpu_enable_triton_gemm "${device#xla:}" 2>/dev/null; then
			f32_env+=("XLA_FLAGS=${XLA_FLAGS:-} --xla_gpu_enable_triton_gemm=false")
		fi
		;;
	esac
}

# run NAME CMD...: runs CMD with stdout to $OUT/NAME, stderr to the log.
run() {
	local name=$1
	shift
	local shown="$*"
	shown=${shown//"$bin"\//}
	say "+ $shown"
	local start=$SECONDS rc=0
	"$@" >"$OUT/$name" 2>>"$log" || rc=$?
	if [ "$rc" = 0 ]; then
		say "  ok ($((SECONDS - start)) s)"
		return 0
	fi
	fail "$name: exit $rc ($shown)"
	return 1
}

# compare_tokens REF OTHER...: every row's token ids equal REF's.
compare_tokens() {
	"$PYTHON" - "$@" <<'EOF'
import json, sys
def load(p):
    with open(p) as f:
        return [r["token_ids"] for r in json.load(f)]
ref = load(sys.argv[1])
bad = 0
for p in sys.argv[2:]:
    try:
        got = load(p)
    except Exception as e:
        print(f"{p}: unreadable: {e}"); bad += 1; continue
    for i, (a, b) in enumerate(zip(ref, got)):
        if a != b:
            j = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print(f"{p}: prompt {i}: token {j} differs: {b[j:j+4]} != {a[j:j+4]} (reference {sys.argv[1]})")
            bad += 1
    if len(ref) != len(got):
        print(f"{p}: {len(got)} results, want {len(ref)}"); bad += 1
sys.exit(1 if bad else 0)
EOF
}
