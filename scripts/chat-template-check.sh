#!/usr/bin/env bash
# Renders a chat template with tputool's sandbox and with Python's jinja2
# (the environment transformers uses: sandboxed, trim_blocks, lstrip_blocks,
# loop controls, tojson as json.dumps(ensure_ascii=False), raise_exception,
# strftime_now) on the same conversation (scripts/chat-template-check), and
# says whether the texts are identical, printing the diff if not.
#
#   scripts/chat-template-check.sh chat_template.jinja [...]
#
# Needs python3 with jinja2 (Debian: python3-jinja2).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/check" ./scripts/chat-template-check
"$bin/check" -json > "$bin/conv.json"
status=0
for t in "$@"; do
  "$bin/check" "$t" > "$bin/go.out"
  python3 - "$t" "$bin/conv.json" > "$bin/py.out" <<'PY'
import datetime, json, sys
import jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

def raise_exception(m):
    raise jinja2.exceptions.TemplateError(m)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: datetime.datetime.now().strftime(f)
conv = json.load(open(sys.argv[2]))
t = env.from_string(open(sys.argv[1]).read())
sys.stdout.write(t.render(messages=conv["messages"], tools=conv["tools"], add_generation_prompt=True,
                          bos_token="", eos_token="", reasoning_effort=conv["reasoning_effort"]))
PY
  if cmp -s "$bin/go.out" "$bin/py.out"; then
    echo "$t: identical ($(wc -c < "$bin/go.out") bytes)"
  else
    echo "$t: differs"
    diff "$bin/py.out" "$bin/go.out" || true
    status=1
  fi
done
exit $status
