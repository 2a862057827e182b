#!/usr/bin/env bash
# The main job on a fresh machine: set up, make a small GLM-5.3-Flash checkpoint in the hub layout (until the
# trained demo model of issue 6 is bundled: random weights whose NextN head often agrees with the trunk, so that
# draft-MTP accepts drafts), convert it with glm5next-convert, generate with glm5next-cli, then start
# glm5next-server (draft-mtp on) and ask it one chat completion.
#   OUT=dir   where the checkpoint and the GGUF go (default: out/)
#   PORT=n    the server's port (default 8080)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
bin="${VENV:-.venv}/bin"
OUT="${OUT:-out}"
PORT="${PORT:-8080}"
"$bin/python" scripts/make_checkpoint.py "$OUT/glm5next-small" --preset predictable
"$bin/glm5next-convert" "$OUT/glm5next-small" --outfile "$OUT/glm5next-small-q8_0.gguf" --outtype q8_0 --mtp-type q4_0
"$bin/glm5next-cli" -m "$OUT/glm5next-small-q8_0.gguf" -p "def fibonacci(n):" -n 32 --temp 0

"$bin/glm5next-server" -m "$OUT/glm5next-small-q8_0.gguf" --port "$PORT" -c 2048 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Write a Python function."}], "max_tokens": 32, "temperature": 0}'
echo
