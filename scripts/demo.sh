#!/usr/bin/env bash
# The main job on a fresh machine: set up, make a small GLM-5.3-Flash checkpoint in the hub layout, convert
# it with glm5next-convert, and generate from the GGUF. Until glm5next's own engine lands (issue 3), the
# generation step runs the `--arch glm5-next` file in llama-cpp-python, which proves the file loads upstream.
#   OUT=dir  where the checkpoint and GGUF go (default: out/)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
py="${VENV:-.venv}/bin/python"
OUT="${OUT:-out}"
"$py" scripts/make_checkpoint.py "$OUT/glm5next-tiny" --preset tiny
"${VENV:-.venv}/bin/glm5next-convert" "$OUT/glm5next-tiny" --outfile "$OUT/glm5next-tiny-q8_0.gguf" \
    --outtype q8_0 --mtp-type q4_0 --arch glm5-next
"$py" - "$OUT/glm5next-tiny-q8_0.gguf" <<'PY'
import sys
from llama_cpp import Llama

llm = Llama(model_path=sys.argv[1], n_ctx=512, verbose=False)
out = llm("def fibonacci(n):", max_tokens=24, temperature=0.0)
print("generated (random weights, so expect noise):", repr(out["choices"][0]["text"]))
PY
