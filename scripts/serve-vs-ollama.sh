# Sourced by scripts/bench-dense-vs-llamacpp.sh and
# scripts/bench-moe-vs-llamacpp.sh for MODE=serve: both servers up, and per
# round and level of LEVELS concurrent greedy streams, scripts/servebench
# against `tputool serve` then against ollama, one line each with the
# aggregate tok/s of both, their ratio, tputool's compiles and recompiles
# in the measured phase (from /metrics) and the load average.
#
# serve_vs_ollama TAG ARGS...: TAG is ollama's model; ARGS are the flags of
# `tputool serve` after --json serve. Uses DIR (tputool, servebench and
# the server's output go there), OLLAMA_HOST (ollama already serving TAG),
# ROUNDS, LEVELS and GEN, and sets TSERVER to the server's pid for the
# caller's trap.
serve_vs_ollama() {
  local tag="$1" addr="" r c t tc trc te o oe
  shift
  go build -o "$DIR/servebench" ./scripts/servebench
  "$DIR/tputool" --json serve "$@" > "$DIR/serve.out" 2> "$DIR/serve.log" &
  TSERVER=$!
  for _ in $(seq 600); do
    addr=$(sed -n 's/.*"address":"\([^"]*\)".*/\1/p' "$DIR/serve.out" | head -1)
    [ -n "$addr" ] && break
    kill -0 "$TSERVER" || { tail "$DIR/serve.log"; return 1; }
    sleep 0.5
  done
  "$DIR/servebench" -url "http://$OLLAMA_HOST" -model "$tag" -metrics=false -c 1 -max-tokens 8 -requests 1 > /dev/null 2>&1 # load
  echo "round  streams  tputool_agg_tok_s  ollama_agg_tok_s  ratio  tputool_compiles  tputool_recompiles  load_avg"
  for r in $(seq "$ROUNDS"); do
    for c in ${LEVELS//,/ }; do
      read -r t tc trc te < <("$DIR/servebench" -url "http://$addr" -c "$c" -max-tokens "$GEN" -requests 2 -json 2>/dev/null | serve_agg)
      read -r o _ _ oe < <("$DIR/servebench" -url "http://$OLLAMA_HOST" -model "$tag" -metrics=false -c "$c" -max-tokens "$GEN" -requests 2 -json 2>/dev/null | serve_agg)
      [ "$te" = 0 ] && [ "$oe" = 0 ] || echo "errors: tputool $te, ollama $oe" >&2
      printf '%s  %s  %.1f  %.1f  %.2f  %s  %s  %s\n' "$r" "$c" "$t" "$o" "$(python3 -c "print($t/$o)")" "$tc" "$trc" "$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
}

# serve_agg reads servebench's -json report and prints the first level's
# aggregate tok/s, compiles, recompiles and errors.
serve_agg() {
  python3 -c 'import json,sys; r=json.load(sys.stdin)[0]; print(r["agg_tok_s"], r["compiles"], r["recompiles"], r["errors"])'
}
