#!/usr/bin/env bash
# The main job on a fresh machine: set up, convert the bundled demo model (models/glm5next-small: a ~11M-parameter
# GLM-5.3-Flash of the real architecture, NextN head included, trained on the Python stdlib's sources by
# scripts/train_small.py) with glm5next-convert, generate Python with glm5next-cli, then start glm5next-server
# (draft-MTP on) and ask it for a completion.
#   OUT=dir   where the GGUF goes (default: out/)
#   PORT=n    the server's port (default 8080)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
bin="${VENV:-.venv}/bin"
OUT="${OUT:-out}"
PORT="${PORT:-8080}"
gguf="$OUT/glm5next-small-q8_0.gguf"
mkdir -p "$OUT"
"$bin/glm5next-convert" models/glm5next-small --outfile "$gguf" --outtype q8_0
"$bin/glm5next-cli" -m "$gguf" -p "def fibonacci(n):" -n 64 --temp 0

"$bin/glm5next-server" -m "$gguf" --port "$PORT" -c 2048 --spec-type draft-mtp &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "import os\n\n\ndef list_files(path):\n", "max_tokens": 64, "temperature": 0}' |
    "$bin/python" -c 'import json, sys; r = json.load(sys.stdin); print(r["choices"][0]["text"]); print(r["timings"])'
