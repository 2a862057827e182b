#!/usr/bin/env bash
# The GPU path in one short run (issue 26; docs/runtime.md, placement and devices): on a machine with a GPU, the
# bench preset (q8_0) fully offloaded (-ngl 99) and with the routed experts on the CPU (-ngl 99 --cpu-moe):
#   1. glm5next-bench: pp512 and tg32 with and without draft-MTP (3 drafts at a synthetic acceptance of 2.5), and the
#      graph splits, bytes and copy time crossing devices per decode token, verify pass, prefill ubatch and draft step;
#   2. a draft-MTP round on each placed model (the bench preset, the bundled one): the splits of its draft step and verify pass, the bytes the scheduler
#      copied between devices, its time against a decode step's, and greedy draft-MTP against plain decoding;
#   3. llama-batched-bench's table (issue 24), the bench preset and the bundled model (models/glm5next-small, whose
#      draft head is trained: its draft-MTP rows accept drafts) fully offloaded: glm5next-bench -npl 1,2,4,8 plain
#      and with 3 drafts on text prompts (README.md, docs/), with glm5next's graph census per graph kind (--census:
#      nodes by device, splits, CUDA-graph blockers, device reads), 3 drafts at a synthetic acceptance of 2.5 at
#      B = 1 and 4 (issue 48's bound), the plain rows with CUDA graphs off (GGML_CUDA_DISABLE_GRAPHS=1: what they
#      buy), then llama.cpp's on the same files: the
#      llama-batched-bench binary named by LLAMA_BATCHED_BENCH (built from the llama.cpp that llama-cpp-python 0.3.36
#      vendors, for the same GPU), else llama-cpp-python in-process (glm5next-bench --llama-cpp, ours again beside it).
# What a user should see on a GPU (the issue's bounds): a decode token, a draft step and a verify pass in 2 splits
# or fewer with -ngl 99, KiB (not MiB) copied per round, draft-MTP faster than plain decoding at acceptance 2.5, and
# greedy draft-MTP equal to plain decoding, or parting only at a near-tie (a device's multi-row products need not be
# bit-identical to its one-row ones; the bench preset's random q8_0 model meets near-ties often). With --cpu-moe the
# routed experts add their CPU splits.
#
# Usage: scripts/gpu_check.sh [--rpc HOST:PORT|local] [-t THREADS]   (Python 3.11+; transformers not needed)
#   --rpc: a dry run with a ggml RPC server as the device (no GPU needed); "local" starts glm5next-rpc-server on
#          loopback for the run. The server is declared CUDA (GLM5NEXT_RPC_BACKEND=CUDA unless set otherwise), so
#          that the dry run takes a GPU's routes: plain products, one pass per step, CUDA's kernel limits. Without it the GPU ggml was built for is the device: when nvidia-smi answers and
#          ggml lists no CUDA device, the venv's llama-cpp-python is rebuilt with CUDA first (scripts/setup.sh with
#          CMAKE_ARGS=-DGGML_CUDA=ON; 5-15 minutes, once).
# Environment: VENV (default .venv), GPU_CHECK_DIR (the models' folder, default /tmp/glm5next-gpu-check),
#   LLAMA_BATCHED_BENCH (llama.cpp's llama-batched-bench for step 3; optional), GPU_CHECK_STEPS (which of the steps
#   above to run, e.g. 3 or 1,2; default 1,2,3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
DIR="${GPU_CHECK_DIR:-/tmp/glm5next-gpu-check}"
RPC=""
THREADS="$(nproc 2>/dev/null || sysctl -n hw.ncpu)"
while [ $# -gt 0 ]; do
    case "$1" in
        --rpc) RPC="$2"; shift 2 ;;
        -t) THREADS="$2"; shift 2 ;;
        *) echo "gpu_check.sh: unknown argument $1 (see the header)" >&2; exit 2 ;;
    esac
done

devices() { "$PY" -c 'from glm5next_runtime import _core; print(" ".join(d["name"] for d in _core.list_devices()))'; }
if [ -z "$RPC" ]; then
    if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1 && ! devices | grep -q CUDA; then
        echo "== building with CUDA (scripts/setup.sh, CMAKE_ARGS=-DGGML_CUDA=ON)"
        CMAKE_ARGS="-DGGML_CUDA=ON${CMAKE_ARGS:+ $CMAKE_ARGS}" VENV="$VENV" bash scripts/setup.sh
    fi
    devices | grep -qE 'CUDA|ROCm|Vulkan|Metal|MUSA' || { echo "gpu_check.sh: ggml lists no GPU ($(devices)); use --rpc for a dry run" >&2; exit 1; }
else
    export GLM5NEXT_RPC_BACKEND="${GLM5NEXT_RPC_BACKEND:-CUDA}"
fi
if [ "$RPC" = local ]; then
    RPC="127.0.0.1:$((50100 + RANDOM % 800))"
    mkdir -p "$DIR"
    "$VENV/bin/glm5next-rpc-server" --host "${RPC%:*}" --port "${RPC#*:}" -t "$THREADS" >"$DIR/rpc.log" 2>&1 &
    RPC_PID=$!
    trap 'kill "$RPC_PID" 2>/dev/null || true' EXIT
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        "$PY" -c "import socket, sys; socket.create_connection(('${RPC%:*}', ${RPC#*:}), 1)" 2>/dev/null && break
        kill -0 "$RPC_PID" 2>/dev/null || { echo "gpu_check.sh: glm5next-rpc-server did not start ($DIR/rpc.log)" >&2; exit 1; }
        sleep 1
    done
fi

mkdir -p "$DIR"
# --arch glm5-next: the spelling llama.cpp loads (glm5next loads both), so that step 3 runs both engines on one file.
# No vision tower in the checkpoint: its weights come from transformers' glm5_next classes, which a GPU image's
# transformers may lack; the GGUF holds the text model alone either way.
MODEL="$DIR/bench-glm5-next-q8_0.gguf"
if [ ! -f "$MODEL" ]; then
    echo "== writing the bench preset and converting it to q8_0 ($MODEL)"
    "$PY" scripts/make_checkpoint.py "$DIR/ckpt" --preset bench --set vision=false >/dev/null
    "$VENV/bin/glm5next-convert" "$DIR/ckpt" --outfile "$MODEL.tmp" --outtype q8_0 --arch glm5-next >/dev/null
    mv "$MODEL.tmp" "$MODEL"
fi
BUNDLED="$DIR/small-glm5-next-q8_0.gguf"
if [ ! -f "$BUNDLED" ]; then
    "$VENV/bin/glm5next-convert" models/glm5next-small --outfile "$BUNDLED.tmp" --outtype q8_0 --arch glm5-next >/dev/null
    mv "$BUNDLED.tmp" "$BUNDLED"
fi

rpc_args=()
[ -n "$RPC" ] && rpc_args=(--rpc "$RPC")
step() { case ",${GPU_CHECK_STEPS:-1,2,3}," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
if step 1; then
    for placement in "-ngl 99" "-ngl 99 --cpu-moe"; do
        echo "== glm5next-bench $placement"
        # shellcheck disable=SC2086
        "$VENV/bin/glm5next-bench" -m "$MODEL" -t "$THREADS" $placement ${rpc_args[@]+"${rpc_args[@]}"} -p 512 -n 32 -r 2 \
            --spec-n-max 3 --spec-accept 2.5
    done
fi

if step 2; then
for model in "$MODEL" "$BUNDLED"; do
echo "== a draft-MTP round, placed: $(basename "$model")"
GPU_CHECK_RPC="$RPC" "$PY" - "$model" "$THREADS" <<'PYTHON'
import os
import statistics
import sys
import time

from glm5next_runtime import Model

path, threads = sys.argv[1], int(sys.argv[2])
prompt = [(i * 7919) % 400 + 10 for i in range(200)]


def same(m, plain, spec):
    """"yes", or where they part and how close plain decoding's top two logits were there: on a device a verify
    pass's rows need not be bit-identical to one-row decode steps (its multi-row products), so a near-tie may go
    the other way; on the CPU they are (docs/runtime.md, draft-MTP round)."""
    if spec == plain:
        return "yes"
    i = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), min(len(plain), len(spec)))
    m.reset()
    row = m.eval(prompt + plain[:i])
    top = sorted(row.tolist(), reverse=True)
    return f"no, from token {i} (plain decoding's top two logits there {top[0] - top[1]:.2g} apart)"


rpc = os.environ.get("GPU_CHECK_RPC") or ()
for placement in (dict(n_gpu_layers=99), dict(n_gpu_layers=99, cpu_moe=True)):
    m = Model(path, n_ctx=1024, n_threads=threads, rpc=rpc, spec_type="draft-mtp", draft_n_max=3,
              draft_adaptive=False, **placement)
    for line in m.engine.cpu_pinned_ops:
        print("  kernel limit:", line)
    plain = m.generate(prompt, max_tokens=48, temperature=0, spec_n_max=0).tokens
    spec = m.generate(prompt, max_tokens=48, temperature=0).tokens
    g = m.generator(n_max=3, temperature=0)
    g.start(prompt)
    splits, copied, round_ms, decode_ms = {}, [], [], []
    m.profile_traffic(True)  # every node synced while on: what crosses, not how long a round takes
    for _ in range(4):
        drafts = g.draft()
        splits["draft step"], draft_bytes = m.graph_traffic["splits"], m.graph_traffic["bytes_copied"]
        g.verify(len(drafts))
        splits["verify pass"] = m.graph_traffic["splits"]
        copied.append(draft_bytes + m.graph_traffic["bytes_copied"])
    m.profile_traffic(False)
    for _ in range(6):
        t0 = time.perf_counter()
        g.step()
        round_ms.append((time.perf_counter() - t0) * 1e3)
    d = m.generator(n_max=0, temperature=0)
    d.start(prompt)
    for _ in range(6):
        t0 = time.perf_counter()
        d.step()
        decode_ms.append((time.perf_counter() - t0) * 1e3)
    splits["decode token"] = m.graph_traffic["splits"]
    print(f"  {' '.join(f'{k}={v}' for k, v in placement.items())}: splits " +
          ", ".join(f"{k} {v}" for k, v in splits.items()) +
          f"; copied per round (last draft step + verify) {statistics.median(copied) / 1024:.1f} KiB; "
          f"a round of 3 drafts {statistics.median(round_ms):.2f} ms against a decode step "
          f"{statistics.median(decode_ms):.2f} ms; greedy draft-MTP equals plain decoding: {same(m, plain, spec)}")
PYTHON
done
fi

if step 3; then
    texts=(README.md docs/*.md)
    for model in "$BUNDLED" "$MODEL"; do
        echo "== the batched table, $(basename "$model"), -ngl 99: glm5next (plain, 3 drafts)"
        "$VENV/bin/glm5next-bench" -m "$model" -t "$THREADS" -ngl 99 ${rpc_args[@]+"${rpc_args[@]}"} -npl 1,2,4,8 \
            -npp 128 -ntg 128 -r 3 --spec-n-max 3 --spec-prompts "${texts[@]}" --census || echo "glm5next-bench -npl failed (exit $?)"
        # issue 48's bounds for drafting: 3 drafts at a fixed mean accepted length of 2.5 against plain, B = 1 and 4
        echo "== $(basename "$model"), -ngl 99: 3 drafts at a synthetic acceptance of 2.5"
        "$VENV/bin/glm5next-bench" -m "$model" -t "$THREADS" -ngl 99 ${rpc_args[@]+"${rpc_args[@]}"} -npl 1,4 \
            -npp 128 -ntg 128 -r 3 --spec-n-max 3 --spec-accept 2.5 || echo "glm5next-bench --spec-accept failed (exit $?)"
        if [ -z "$RPC" ]; then  # what CUDA graphs buy: the plain rows with them off (ggml-cuda's switch)
            echo "== $(basename "$model"), -ngl 99: CUDA graphs off (GGML_CUDA_DISABLE_GRAPHS=1)"
            GGML_CUDA_DISABLE_GRAPHS=1 "$VENV/bin/glm5next-bench" -m "$model" -t "$THREADS" -ngl 99 -npl 1,4,8 \
                -npp 128 -ntg 128 -r 3 || echo "glm5next-bench without CUDA graphs failed (exit $?)"
        fi
        if [ -n "${LLAMA_BATCHED_BENCH:-}" ]; then
            echo "== the batched table, $(basename "$model"), -ngl 99: $LLAMA_BATCHED_BENCH (-c: 512 per sequence)"
            "$LLAMA_BATCHED_BENCH" -m "$model" -t "$THREADS" -ngl 99 -c 4096 -b 512 -ub 512 -npp 128 -ntg 128 \
                -npl 1,2,4,8 2>&1 | grep -E '^\||error|failed' || echo "llama-batched-bench failed (exit ${PIPESTATUS[0]})"
        elif [ -z "$RPC" ]; then
            echo "== the batched table, $(basename "$model"), -ngl 99: llama-cpp-python in-process, beside glm5next"
            "$VENV/bin/glm5next-bench" -m "$model" -t "$THREADS" -ngl 99 -npl 1,2,4,8 -npp 128 -ntg 128 -r 3 --llama-cpp \
                || echo "glm5next-bench --llama-cpp failed (exit $?)"
        fi
    done
fi
