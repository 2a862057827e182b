#!/usr/bin/env python3
"""llama-server's own pytest suite (llama.cpp `tools/server/tests`) run against glm5next-server: issue 16's figure.

A developer tool, not part of our test suite: it needs llama.cpp's test files, which are not ours and are never
copied into this repository. Get them once (any recent llama.cpp; the figures in the notes were taken at
0c1e57098bba, the llama.cpp that llama-cpp-python 0.3.36 vendors, whose sdist holds the same files under
vendor/llama.cpp/tools/server/tests):

    git clone --filter=blob:none --sparse --no-checkout https://github.com/ggml-org/llama.cpp /tmp/llama.cpp
    git -C /tmp/llama.cpp sparse-checkout set tools/server/tests
    git -C /tmp/llama.cpp checkout 0c1e57098bba43ac29e6e3b677cdceebdd22334f   # or leave it at the newest
    cp -r /tmp/llama.cpp/tools/server/tests /tmp/llama-server-tests

(a newer suite may add tests that NOT_APPLICABLE below does not classify yet: they count as applicable).

Their requirements are ours already (pytest, requests, openai, filelock); `wget` (their model downloader) is
stubbed, since nothing is downloaded here. Then:

    .venv/bin/python scripts/llama_server_suite.py [--tests /tmp/llama-server-tests] [--model FILE.gguf]
        [--source TREE] [--timeout 90] [--json OUT.json] [-k EXPR] [test_basic.py ...]
    .venv/bin/python scripts/llama_server_suite.py report RUN_DIR [OUT.json]   # a run's table again

How it adapts their suite, without editing their files:
- Their `ServerProcess.start()` runs `$LLAMA_SERVER_BIN_PATH` with llama-server's flags. That path is a wrapper that
  runs this script's `serve` command, which maps the flags (`translate`) and execs `python -m
  glm5next_runtime.server`. Their model (a Hugging Face repo or file) becomes one glm5next GGUF: `--model`, else
  the bundled demo model converted to /tmp/llama-suite/demo.gguf. A flag the target server does not list in its
  --help is dropped and logged (so a missing flag costs the tests that need its effect, not every test), as are
  flags with no meaning here (NO_MEANING). No --spec-type means llama-server's default, no speculation:
  `--spec-type none`; any draft type becomes draft-mtp (the file's NextN layer is the draft), with
  `--spec-draft-adaptive off` and `--spec-sampling match`: llama-server drafts n_max every round, so their tests
  count drafts of fixed lengths, and keeps a sampled draft while it equals the target's draw, so a seed gives the
  tokens of decoding without drafts (test_with_and_without_draft).
- `--source TREE` serves another checkout's Python (e.g. a `git worktree` of an older commit) with the installed
  native extension: the editable install's import hook is turned off for that server (SKBUILD_EDITABLE_SKIP) and
  TREE goes first on PYTHONPATH; TREE/glm5next_runtime needs the extension there (a symlink to the installed
  `_core*.so`), and the server logs `glm5next_runtime.__file__` so the log shows which tree answered.
- Tests that do not apply are skipped with a reason starting "N/A" (NOT_APPLICABLE below, each with why): a
  particular model's text (regexes on the output of their test models), their tokenizer's counts and ids, other
  model families' chat templates, and features this server does not have by design (embeddings, rerank, infill,
  LoRA, multimodal, router mode, the web UI and its tools/MCP proxy, context shift, draft models and synthetic
  drafts, backend sampling, llama-server's internal log tags and state-file format).
- Tests whose subject is the server's behaviour but which also assert their model's text or token counts run
  adapted (ADAPTED below, each with why): those assertions replaced, in a copy of the test function compiled at
  collection, by ones any model satisfies; their flow and every other assertion unchanged, their files untouched.
- Each file runs in its own pytest process; each test gets --timeout seconds (SIGALRM); the server gets -t 1
  (GLM5NEXT_SUITE_THREADS) so that shared cores are not oversubscribed.

Prints per file: passed as written / passed adapted / failed / skipped (by their own marks) / slow, not run (their
`slow` mark: real-model tests llama.cpp's default run leaves out too) / not applicable, the total, and the failures'
first lines; --json writes every test's outcome.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import types
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(tempfile.gettempdir()) / "llama-suite"
DEFAULT_TESTS = Path(tempfile.gettempdir()) / "llama-server-tests"
DEMO_GGUF = WORK / "demo.gguf"
ENV_PREFIX = "GLM5NEXT_SUITE_"

# --- what does not apply, and why --------------------------------------------------------------------------
MODEL_TEXT = "N/A model text: asserts what their test model writes (a regex on its output)"
TOKENIZER = "N/A model tokenizer: asserts their model's token counts, ids or BOS text"
TEMPLATE = "N/A other model's template: renders another model family's chat template (llama3, command-r, Qwen3...)"
FILES = {
    "test_embedding.py": "N/A embeddings: a generative model without a pooling head",
    "test_rerank.py": "N/A rerank: needs a reranker model",
    "test_infill.py": "N/A infill: the vocabulary has no fill-in-the-middle tokens",
    "test_lora.py": "N/A LoRA: no adapters for this architecture",
    "test_vision_api.py": "N/A multimodal: a text-only model",
    "test_router.py": "N/A router mode: one model per process",
    "test_stream.py": "N/A router mode: conversation streams of the router (/v1/stream)",
    "test_tool_call.py": "N/A tool-call templates of other models (models/templates/*.jinja, their HF models)",
    "test_tools_builtin.py": "N/A web UI's server-side tools (--tools)",
    "test_mcp_servers.py": "N/A web UI's MCP servers (--mcp-servers-*)",
    "test_proxy.py": "N/A web UI's CORS proxy (--ui-mcp-proxy)",
}
# (file, test function, {param: value} that must all match, or None for every case) -> reason
TESTS: list[tuple[str, str, dict | None, str]] = [
    ("test_basic.py", "test_load_split_model", None, MODEL_TEXT),
    ("test_basic.py", "test_no_ui", None, "N/A web UI"),
    ("test_chat_completion.py", "test_chat_completion", None, MODEL_TEXT),
    ("test_chat_completion.py", "test_chat_completion_stream", None, MODEL_TEXT),
    ("test_chat_completion.py", "test_chat_completion_with_openai_library", None, MODEL_TEXT),
    ("test_chat_completion.py", "test_chat_template", None, TEMPLATE),
    ("test_chat_completion.py", "test_chat_template_assistant_prefill", {"re_prefill": "Wh\n\nill"},
     TEMPLATE + " (a prefill of typed text parts: llama.cpp hands the parts to a template that takes them, which "
     "joins them its own way; here the parts are one string before any template sees them)"),
    ("test_chat_completion.py", "test_apply_chat_template", None, TEMPLATE),
    ("test_completion.py", "test_completion", None, MODEL_TEXT),
    ("test_completion.py", "test_completion_stream", None, MODEL_TEXT),
    ("test_completion.py", "test_completion_with_openai_library", None, MODEL_TEXT),
    ("test_completion.py", "test_completion_stream_with_openai_library", None, MODEL_TEXT),
    ("test_completion.py", "test_completion_stream_with_openai_library_stops", None, MODEL_TEXT),
    ("test_completion.py", "test_completion_response_fields", {"n_predict": 32}, TOKENIZER + " ('<s> ' + prompt)"),
    ("test_completion.py", "test_n_probs_post_backend_sampling", None, "N/A backend sampling (--backend_sampling)"),
    ("test_completion.py", "test_completion_prompt_cache", None, TOKENIZER),
    ("test_ctx_shift.py", "test_ctx_shift_enabled", None, "N/A context shift (KDA state cannot drop tokens)"),
    ("test_ctx_shift.py", "test_ctx_shift_disabled_short_prompt", {"n_predict": -1}, TOKENIZER + " (8-token prompt)"),
    ("test_ctx_shift.py", "test_ctx_shift_disabled_long_prompt", None,
     TOKENIZER + " (their LONG_TEXT is over the 256-token slot; ours is 213 tokens: it fits, and is answered)"),
    ("test_security.py", "test_access_static_assets_without_api_key", None, "N/A web UI"),
    ("test_security.py", "test_cors_origins_defaults_to_localhost_with_tools_enabled", None,
     "N/A web UI's server-side tools (--tools)"),
    ("test_security.py", "test_cors_proxy_only_forwards_explicit_proxy_headers", None, "N/A web UI's CORS proxy"),
    ("test_security.py", "test_local_media_file", None, "N/A multimodal"),
    ("test_metrics.py", "test_metrics_embedding_prompt_is_counted", None, "N/A embeddings"),
    ("test_slot_save.py", "test_slot_restore_legacy_token_list", None, "N/A llama-server's state-file format"),
    ("test_slot_save.py", "test_slot_save_restore_text_only_on_multimodal", None, "N/A multimodal"),
    ("test_slot_save.py", "test_slot_save_restore_with_image", None, "N/A multimodal"),
    ("test_slot_save.py", "test_slot_save_restore_with_two_images", None, "N/A multimodal"),
    ("test_slot_save.py", "test_slot_save_restore_with_image_across_restart", None, "N/A multimodal"),
    ("test_slot_save.py", "test_slot_save_restore_image_payload_larger_than_context", None, "N/A multimodal"),
    ("test_slot_save.py", "test_slot_restore_media_file_without_mmproj", None, "N/A multimodal"),
    ("test_speculative.py", "test_with_ctx_shift", None, "N/A context shift"),
    ("test_tokenize.py", "test_tokenize_with_bos", None, TOKENIZER + " (BOS id 1)"),
    ("test_template.py", "test_reasoning", None, TEMPLATE),
    ("test_template.py", "test_date_inside_prompt", None, TEMPLATE),
    ("test_compat_anthropic.py", "test_anthropic_vision_base64_with_multimodal_model", None, "N/A multimodal"),
    ("test_compat_anthropic.py", "test_anthropic_tool_result", None,
     "N/A model's template: expects a text block first; this model's template (--jinja) thinks first"),
    ("test_compat_anthropic.py", "test_anthropic_thinking_with_reasoning_model", None, MODEL_TEXT),
    ("test_compat_oai_responses.py", "test_responses_with_openai_library", None, MODEL_TEXT),
    ("test_compat_oai_responses.py", "test_responses_stream_with_openai_library", None, MODEL_TEXT),
]
NOT_APPLICABLE = {"files": FILES, "tests": TESTS}

# --- model-neutral adaptations --------------------------------------------------------------------------------
# Tests whose subject is the server's behaviour but which also assert their test model's text or token counts run
# with those assertions replaced by ones any model satisfies; the flow and every other assertion stay theirs.
# (file, test function, {param: value} or None, reason, [(their source text, its replacement)]): each source text is
# replaced wherever it occurs in the function's source; one that does not occur makes the test fail as a stale
# adaptation (their file changed).
SLOW = "slow: a real-model test that llama.cpp's own default run leaves out (-m 'not slow'; SLOW_TESTS=1)"
QWEN3_TEMPLATE = ("server.chat_template_file = '../../../models/templates/Qwen-Qwen3-0.6B.jinja'",
                  "server.chat_template_file = None")
THEIR_TEXT = ('assert match_regex("(Whiskers|Flana)+", res.body["content"])', 'assert res.body["content"]')
PROCESSED_ALL = ('assert res.body["timings"]["prompt_n"] == 21  # all tokens are processed',
                 'assert res.body["timings"]["prompt_n"] == res.body["tokens_evaluated"]')
ADAPTED: list[tuple[str, str, dict | None, str, list[tuple[str, str]]]] = [
    ("test_chat_completion.py", "test_chat_completion_cached_tokens", None,
     "their token counts (77 prompt tokens; 76, 51, 47 cached) -> a prompt, and a cache hit where theirs has one",
     [('assert res.body["usage"]["prompt_tokens"] == n_prompt', 'assert res.body["usage"]["prompt_tokens"] > 0'),
      ('assert res.body["usage"]["prompt_tokens_details"]["cached_tokens"] == n_cache',
       'assert (res.body["usage"]["prompt_tokens_details"]["cached_tokens"] > 0) == (n_cache > 0)')]),
    ("test_chat_completion.py", "test_return_progress", None,
     "the number of progress events follows their prompt's length in their tokenizer -> two or more where "
     "something was evaluated; one for a prompt resumed whole (its end's checkpoint keeps the logits: llama-server "
     "evaluates its last token again)",
     [("assert total_batch_count == batch_count",
       'assert total_batch_count >= (2 if last_progress["processed"] > last_progress["cache"] else 1)')]),
    ("test_slot_save.py", "test_slot_save_restore", None,
     "their model's text and token counts (21 prompt tokens, 84 saved, 6 evaluated) -> some text; the whole prompt "
     "evaluated, then less of it; tokens saved and restored; the same prompt again evaluates at most 1 (this server: "
     "0, its end's checkpoint keeps the logits)",
     [THEIR_TEXT, PROCESSED_ALL,
      ('assert match_regex("(Jack|said)+", res.body["content"])', 'assert res.body["content"]'),
      ('assert res.body["n_saved"] == 84', 'assert res.body["n_saved"] > 0'),
      ('assert res.body["n_restored"] == 84', 'assert res.body["n_restored"] > 0'),
      ('assert res.body["timings"]["prompt_n"] == 6  # only different part is processed',
       'assert 0 < res.body["timings"]["prompt_n"] < res.body["tokens_evaluated"]'),
      ('assert res.body["timings"]["prompt_n"] == 1', 'assert res.body["timings"]["prompt_n"] <= 1')]),
    ("test_speculative.py", "test_slot_ctx_not_exceeded", None,
     "their prompt ('Hello ' * 248) is 248 of their tokens and ~497 of ours, over the 256 context -> 'Hello ' * 124, "
     "the same ~248 tokens: drafting at the context's end",
     [('"prompt": "Hello " * 248', '"prompt": "Hello " * 124')]),
    ("test_speculative.py", "test_multi_requests_parallel", None,
     "their model's text -> every parallel greedy request answers as the first",
     [('assert match_regex("(wise|kind|owl|answer)+", res.body["content"])',
       'assert res.body["content"] and res.body["content"] == results[0].body["content"]')]),
    ("test_tool_call.py", "test_completion_without_tool_call_fast", None,
     "another family's template (Llama 3.3) -> the model file's own: no tool_calls without tools or with "
     "tool_choice none, whatever the template",
     [("server.chat_template_file = f'../../../models/templates/{template_name}.jinja'",
       "server.chat_template_file = None")]),
    ("test_compat_anthropic.py", "test_anthropic_thinking_history_in_count_tokens", None,
     "another family's template (Qwen3) -> the model file's own, which renders an answer's reasoning too",
     [QWEN3_TEMPLATE]),
    ("test_compat_anthropic.py", "test_anthropic_thinking_history_in_template", None,
     "another family's template (Qwen3) -> the model file's own, which renders an answer's reasoning too",
     [QWEN3_TEMPLATE]),
    ("test_slot_save.py", "test_slot_erase", None,
     "their model's text and token count (21 prompt tokens) -> some text; the whole prompt evaluated",
     [THEIR_TEXT, PROCESSED_ALL]),
    ("test_speculative.py", "test_with_and_without_draft", None,
     "their third server's synthetic drafter (--spec-synth-rates 0: every draft rejected, a llama.cpp test feature) "
     "-> the file's own NextN drafts again: drafting, and the seeded tokens of the server without drafts",
     [("server.spec_synth_rates = [0.0] * server.spec_draft_n_max", "pass  # no synthetic drafts here"),
      ('assert res.body["timings"]["draft_n_accepted"] == 0',
       'assert 0 <= res.body["timings"]["draft_n_accepted"] <= res.body["timings"]["draft_n"]')]),
    ("test_speculative.py", "test_synth_is_deterministic", None,
     "synthetic acceptance rates (a llama.cpp test feature) -> the file's own drafts: the same seeded request "
     "twice drafts and keeps the same",
     [("server.spec_synth_rates = [0.75 ** (i + 1) for i in range(server.spec_draft_n_max)]",
       "pass  # no synthetic drafts here")]),
    ("test_speculative.py", "test_synth_ignores_target_tokens", None,
     "synthetic drafts kept whatever the target says (a llama.cpp test feature) -> the file's own: drafting, under "
     "a grammar, and to the token limit with ignore_eos",
     [("server.spec_synth_rates = [1.0] * server.spec_draft_n_max", "pass  # no synthetic drafts here"),
      ('assert res.body["timings"]["draft_n_accepted"] == res.body["timings"]["draft_n"]',
       'assert 0 <= res.body["timings"]["draft_n_accepted"] <= res.body["timings"]["draft_n"]')]),
    ("test_kv_keep_only_active.py", "test_clear_and_restore", None,
     "llama-server's log tags (__TEST_TAG_*, 'updating prompt cache') -> what they stand for: the long prompt sent "
     "again after another slot ran is served from a cache (cache_n > 0, fewer tokens evaluated)",
     [('assert "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" in log.drain()', "log.drain()"),
      ('assert "__TEST_TAG_CACHE_IDLE_SLOT__" in log.drain()', "log.drain()"),
      ('assert "updating prompt cache" in log.drain()', "log.drain()")]),
    ("test_template.py", "test_add_generation_prompt", None,
     "Llama 3.3's template -> the model file's own, whose generation prompt is <|assistant|>",
     [("server.chat_template_file = f'../../../models/templates/{template_name}.jinja'",
       "server.chat_template_file = None; expected_generation_prompt = '<|assistant|>'")]),
    ("test_compat_anthropic.py", "test_anthropic_thinking_with_reasoning_model", None,
     "a 7B reasoning model (slow: downloaded) -> the bundled model with the file's template, whose reasoning may "
     "not end within max_tokens: the thinking block first with its signature (and signature_delta), and a text "
     "block, where there is one, after it",
     [('assert len(content) >= 2, "Should have at least thinking and text blocks"',
       'assert content and content[0]["type"] == "thinking"'),
      ('assert len(text_blocks) > 0, "Should have text content block"',
       'assert all(b["type"] == "text" for b in content[1:])'),
      ('assert len(text_starts) > 0, "Should have text content_block_start event"',
       'text_starts = text_starts or [{"index": 1}]  # no text block: nothing to place')]),
]


def names(entry: tuple, file: str, name: str, params: dict) -> bool:
    """Whether an entry of TESTS or ADAPTED (file, test function, {param: value} or None, ...) names this test."""
    f, fn, match = entry[:3]
    return f == file and fn == name and all(params.get(k) == v for k, v in (match or {}).items())


def adaptation(file: str, name: str, params: dict) -> tuple[str, list[tuple[str, str]]] | None:
    """The (reason, rewrites) that adapt a collected test, or None."""
    return next((entry[3:] for entry in ADAPTED if names(entry, file, name, params)), None)


def adapted_function(func, rewrites: list[tuple[str, str]]):
    """`func` (a test function) compiled again from its source with `rewrites` applied, in its module's globals, at
    its own line numbers; a rewrite whose text is not in the source makes a function that fails saying so."""
    import inspect
    import textwrap
    lines, first = inspect.getsourcelines(func)
    source = textwrap.dedent("".join(lines))
    for old, new in rewrites:  # every occurrence
        if source.count(old) == 0:
            def stale(*args, **kwargs):
                raise AssertionError(f"stale adaptation: {old!r} is not in the test")
            stale.__signature__ = inspect.signature(func)
            return stale
        source = source.replace(old, new)
    start = source.index(f"def {func.__name__}(")  # without its decorators (already applied), at its own lines
    source = "\n" * (first - 1 + source[:start].count("\n")) + source[start:]
    namespace: dict = {}
    exec(compile(source, inspect.getsourcefile(func) or "<adapted>", "exec"), func.__globals__, namespace)
    return namespace[func.__name__]


def not_applicable(file: str, name: str, params: dict) -> str | None:
    """Why a collected test does not apply to this server, or None."""
    if file in FILES:
        return FILES[file]
    return next((entry[3] for entry in TESTS if names(entry, file, name, params)), None)


# --- llama-server's flags -> glm5next-server's ----------------------------------------------------------------
# llama-server flags that take a value (those their harness passes)
VALUED = {
    "--port", "--temp", "--seed", "--host", "--model", "-m", "--model-url", "--model-draft", "--hf-repo", "--hf-file",
    "--models-dir", "--models-max", "--models-preset", "--cors-origins", "--batch-size", "--ubatch-size", "--threads",
    "--n-gpu-layers", "--pooling", "--alias", "--tags", "--ctx-size", "--parallel", "-ctk", "-ctv", "-fa",
    "--n-predict", "--slot-save-path", "--grp-attn-n", "--grp-attn-w", "--lora", "--spec-type", "--api-key",
    "--spec-draft-n-max", "--spec-draft-n-min", "--spec-synth-len", "--spec-synth-rates", "--reasoning-format",
    "--reasoning", "--chat-template", "--chat-template-file", "--mmproj-url", "--media-path", "--sleep-idle-seconds",
    "--cache-ram", "--cache-reuse-hybrid", "--cache-reuse-hybrid-min-share", "--tools", "--tools-runtime",
    "--mcp-servers-config", "--mcp-servers-json",
}
MODEL_FLAGS = {"--model", "-m", "--model-url", "--hf-repo", "--hf-file"}
NO_MEANING = {  # flags whose effect is already what this server does, or that have nothing to act on here
    "--offline": "nothing is downloaded",
    "--model-draft": "the draft is the file's NextN layer (--spec-type draft-mtp)",
    "--cont-batching": "llama-server's default, and the only way here: the -np slots' generations run batched",
    "--swa-full": "no sliding-window layers",
    "--no-ui": "there is no web UI",
}
OTHER_TEMPLATES = "another model family's built-in template: the file's own template is used"


def translate(argv: list[str], model: str, known: set[str], builtin: set[str]) -> tuple[list[str], list[str]]:
    """(glm5next-server's argv, notes on what was dropped) for llama-server's `argv`; `known`: the target's flags,
    `builtin`: its built-in template names."""
    out: list[str] = ["-m", model]
    notes: list[str] = []
    spec_type = None
    i = 0
    while i < len(argv):
        flag = argv[i]
        value = argv[i + 1] if flag in VALUED and i + 1 < len(argv) else None
        i += 2 if value is not None else 1
        if flag in MODEL_FLAGS:
            continue
        if flag in NO_MEANING:
            notes.append(f"{flag}: dropped ({NO_MEANING[flag]})")
            continue
        if flag == "--spec-type":
            spec_type = "none" if value == "none" else "draft-mtp"
            continue
        if flag == "--chat-template" and value not in builtin and "{%" not in (value or "") and "{{" not in (value or ""):
            notes.append(f"--chat-template {value}: dropped ({OTHER_TEMPLATES})")
            continue
        if flag not in known:
            notes.append(f"{flag}{'' if value is None else ' ' + value}: dropped (not a flag of this server)")
            continue
        out += [flag] if value is None else [flag, value]
    out += ["--spec-type", spec_type or "none"]
    if spec_type == "draft-mtp" and "--spec-draft-adaptive" in known:  # llama-server drafts n_max every round
        out += ["--spec-draft-adaptive", "off"]
    if spec_type == "draft-mtp" and "--spec-sampling" in known:  # and keeps a sampled draft while it matches
        out += ["--spec-sampling", "match"]
    if "--threads" not in argv and "-t" in known:
        out += ["-t", os.environ.get(ENV_PREFIX + "THREADS", "1")]
    return out, notes


def server_env(source: str | None) -> dict[str, str]:
    """The environment of a server that serves `source`'s Python (None: this checkout's)."""
    env = dict(os.environ)
    if source:
        import glm5next_runtime._core as core  # the installed extension: its libraries' directory
        build = _editable_build_dir()
        env["SKBUILD_EDITABLE_SKIP"] = os.pathsep.join(p for p in (env.get("SKBUILD_EDITABLE_SKIP"), build) if p)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
        libs = Path(core.__file__).resolve().parent.parent / "llama_cpp" / "lib"
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(libs), env.get("LD_LIBRARY_PATH")) if p)
    return env


def _editable_build_dir() -> str:
    """The build directory that the editable install's import hook names (its SKBUILD_EDITABLE_SKIP key)."""
    import sysconfig
    for pth in Path(sysconfig.get_paths()["purelib"]).glob("_editable_skbc_*.py"):
        m = re.search(r"'(/[^']*/build/[^']*)'", pth.read_text().splitlines()[-1])
        if m:
            return m.group(1)
    return ""


def target_flags(env: dict[str, str]) -> tuple[set[str], set[str]]:
    """(flags, built-in template names) of the server that `env` runs, from its --help (cached per run and source)."""
    key = hashlib.sha1(env.get("PYTHONPATH", "").encode()).hexdigest()[:12]
    cache = Path(os.environ.get(ENV_PREFIX + "RUN_DIR", WORK)) / f"flags-{key}.json"
    if cache.exists():
        data = json.loads(cache.read_text())
    else:
        help_text = subprocess.run([sys.executable, "-m", "glm5next_runtime.server", "--help"], env=env,
                                   capture_output=True, text=True, check=True).stdout
        probe = ("from glm5next_runtime.server import builtin_templates as b; print(' '.join(b.BUILTIN))")
        names = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout.split()
        data = {"flags": sorted(set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_text))), "builtin": names}
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(data))
    return set(data["flags"]), set(data["builtin"])


def serve(argv: list[str]) -> None:
    """The wrapper's command: llama-server's argv -> exec glm5next-server (logging what was dropped)."""
    env = server_env(os.environ.get(ENV_PREFIX + "SOURCE"))
    known, builtin = target_flags(env)
    ours, notes = translate(argv, os.environ[ENV_PREFIX + "MODEL"], known, builtin)
    log = os.environ.get(ENV_PREFIX + "FLAGLOG")
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    if log and notes:
        with open(log, "a") as f:
            f.write(json.dumps({"test": test, "notes": notes}) + "\n")
    code = "import sys, glm5next_runtime, runpy; print('serving', glm5next_runtime.__file__, file=sys.stderr, flush=True); " \
           "sys.argv = ['glm5next-server'] + sys.argv[1:]; runpy.run_module('glm5next_runtime.server', run_name='__main__')"
    print("glm5next-server", shlex.join(ours), *(f"[{n}]" for n in notes), sep="\n  ", file=sys.stderr, flush=True)
    os.execve(sys.executable, [sys.executable, "-c", code, *ours], env)


# --- the pytest plugin (loaded with -p llama_server_suite in each file's pytest process) ------------------------
if "wget" not in sys.modules:
    try:
        import wget  # noqa: F401
    except ImportError:  # their utils imports it to download models; nothing is downloaded here
        sys.modules["wget"] = types.SimpleNamespace(download=lambda url, out=None, **kw: out)


class Timeout(Exception):
    pass


def pytest_configure(config):
    import utils  # theirs: conftest.py put their directory on sys.path
    utils.ServerPreset.load_all = staticmethod(lambda: None)  # it would start every preset once to download it


def pytest_collection_modifyitems(config, items):
    import pytest
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        file, name = Path(str(item.fspath)).name, item.originalname or item.name
        reason = not_applicable(file, name, params)
        if adapted := adaptation(file, name, params):  # first: an adaptation may run a slow test on our model
            item.obj = adapted_function(item.obj, adapted[1])
            item.user_properties.append(("adapted", adapted[0]))
        elif item.get_closest_marker("slow"):  # before N/A: their default run leaves these out too
            item.add_marker(pytest.mark.skip(reason=SLOW))
        elif reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def _pytest_runtest_call(item):
    seconds = int(os.environ.get(ENV_PREFIX + "TIMEOUT", "90"))

    def expired(signum, frame):
        raise Timeout(f"test took more than {seconds} s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pytest_runtest_logreport(report):
    out = os.environ.get(ENV_PREFIX + "RESULTS")
    if not out or (report.when != "call" and report.outcome != "failed" and not report.skipped):
        return
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        bare = reason.removeprefix("Skipped: ")
        outcome = "n/a" if bare.startswith("N/A") else "slow" if bare.startswith("slow:") else "skipped"
    else:
        outcome = report.outcome
        reason = "" if report.passed else (report.longrepr.reprcrash.message if hasattr(report.longrepr, "reprcrash")
                                           and report.longrepr.reprcrash else str(report.longrepr)).splitlines()[0]
        if outcome == "passed" and dict(report.user_properties).get("adapted"):
            outcome, reason = "adapted", dict(report.user_properties)["adapted"]
    with open(out, "a") as f:
        f.write(json.dumps({"id": report.nodeid, "when": report.when, "outcome": outcome, "reason": reason}) + "\n")


def _hookwrappers():
    try:
        import pytest
    except ImportError:
        return
    globals()["pytest_runtest_call"] = pytest.hookimpl(wrapper=True)(_pytest_runtest_call)


_hookwrappers()


# --- the runner ----------------------------------------------------------------------------------------------
def demo_model() -> Path:
    """The bundled demo model as a GGUF (converted once)."""
    if not DEMO_GGUF.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "glm5next_convert.cli", str(ROOT / "models" / "glm5next-small"),
                        "--outfile", str(DEMO_GGUF)], check=True)
    return DEMO_GGUF


def run(args: argparse.Namespace) -> int:
    tests = Path(args.tests)
    if not (tests / "utils.py").exists() or not (tests / "unit").is_dir():
        sys.exit(f"llama_server_suite: no llama.cpp server tests in {tests}: fetch them as this script's docstring "
                 "says (git sparse checkout of ggml-org/llama.cpp tools/server/tests)")
    model = Path(args.model).resolve() if args.model else demo_model()
    WORK.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=WORK))
    wrapper = run_dir / "llama-server"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(__file__)} serve \"$@\"\n")
    wrapper.chmod(0o755)
    results, flaglog = run_dir / "results.jsonl", run_dir / "flags.jsonl"
    env = dict(os.environ, LLAMA_SERVER_BIN_PATH=str(wrapper), PORT=str(args.port),
               PYTHONPATH=os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p),
               **{ENV_PREFIX + "MODEL": str(model), ENV_PREFIX + "RESULTS": str(results),
                  ENV_PREFIX + "FLAGLOG": str(flaglog), ENV_PREFIX + "TIMEOUT": str(args.timeout),
                  ENV_PREFIX + "RUN_DIR": str(run_dir)})
    if args.source:
        env[ENV_PREFIX + "SOURCE"] = str(Path(args.source).resolve())
    files = [Path(f).name for f in args.files] or sorted(p.name for p in (tests / "unit").glob("test_*.py"))
    for name in files:
        cmd = [sys.executable, "-m", "pytest", "-p", "llama_server_suite", "-p", "no:cacheprovider", "-q",
               "-o", "addopts=", "--rootdir", str(tests), f"unit/{name}"] + (["-k", args.k] if args.k else [])
        with open(run_dir / f"{name}.log", "w") as log:
            subprocess.run(cmd, cwd=tests, env=env, stdout=log, stderr=subprocess.STDOUT)
        print(f"ran {name}", file=sys.stderr, flush=True)
    return report(results, flaglog, files, run_dir, args.json)


def report(results: Path, flaglog: Path, files: list[str], run_dir: Path, json_out: str | None) -> int:
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    by_test: dict[str, dict] = {}
    for r in rows:  # a failed setup or teardown counts as a failure of the test
        if r["id"] not in by_test or r["outcome"] == "failed":
            by_test[r["id"]] = r
    for r in by_test.values():  # the classification as it is now (an earlier run may predate an entry)
        file, name = r["id"].split("::")[0].split("/")[-1], r["id"].split("::")[-1].split("[")[0]
        if r["outcome"] not in ("n/a", "slow", "adapted") and adaptation(file, name, {}) is None \
                and (reason := not_applicable(file, name, {})):
            r.update(outcome="n/a", reason=reason)
    table = {f: Counter() for f in files}
    for r in by_test.values():
        table.setdefault(r["id"].split("::")[0].split("/")[-1], Counter())[r["outcome"]] += 1
    total = Counter()
    print("| file | passed as written | passed adapted | failed | skipped | slow, not run | N/A | applicable |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")
    for f, c in list(table.items()) + [("total", None)]:
        if c is None:
            f, c = "total", total
        else:
            total += c
        print(f"| {f} | {c['passed']} | {c['adapted']} | {c['failed']} | {c['skipped']} | {c['slow']} | {c['n/a']} | "
              f"{c['passed'] + c['adapted'] + c['failed']} |")
    print("\nfailures:")
    for r in by_test.values():
        if r["outcome"] == "failed":
            print(f"  {r['id']}: {r['reason'][:200]}")
    if flaglog.exists():
        dropped = Counter(n.split(":")[0].split(" ")[0] for line in flaglog.read_text().splitlines()
                          for n in json.loads(line)["notes"])
        print("\nflags dropped (tests):", ", ".join(f"{k} ({v})" for k, v in dropped.most_common()))
    print(f"\nlogs: {run_dir}")
    if json_out:
        Path(json_out).write_text(json.dumps(list(by_test.values()), indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        serve(argv[1:])
    if argv[:1] == ["report"]:  # report RUN_DIR [OUT.json]: an earlier run's table again
        run_dir = Path(argv[1])
        return report(run_dir / "results.jsonl", run_dir / "flags.jsonl",
                      sorted(p.name[:-len(".log")] for p in run_dir.glob("test_*.py.log")), run_dir,
                      argv[2] if len(argv) > 2 else None)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="test files under unit/, by name or as unit/NAME (default: all)")
    p.add_argument("--tests", default=str(DEFAULT_TESTS), help=f"their tools/server/tests directory ({DEFAULT_TESTS})")
    p.add_argument("--model", help="the GGUF to serve (default: the demo model, converted once)")
    p.add_argument("--source", help="serve this checkout's Python instead of the installed one")
    p.add_argument("--port", type=int, default=18480, help="their server_port (18480)")
    p.add_argument("--timeout", type=int, default=90, help="seconds per test (90)")
    p.add_argument("-k", help="pytest -k expression")
    p.add_argument("--json", help="write every test's outcome here")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
