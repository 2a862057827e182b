"""The bundled demo model (models/glm5next-small, issue 6): what it is, that it writes Python, and that draft-MTP
on it is exact (greedy output equal to plain decoding) and pays (drafts get accepted).

Prompts are held-out stdlib files (scripts/train/data.py's split: never trained on), past index_topk tokens so that
sparse selection decides what the rows attend."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np

import pytest

from conftest import ROOT, hf_trunk
from live_server import Server

sys.path.insert(0, str(ROOT / "scripts"))

from train import data  # noqa: E402

BUNDLED = ROOT / "models" / "glm5next-small"
TEXT_CONFIG = json.loads((BUNDLED / "config.json").read_text())["text_config"]
CLI = Path(sys.executable).parent / "glm5next-cli"
PROMPT_TOKENS = 384  # 3 x index_topk
N_GEN = 200


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> Path:
    from glm5next_convert import convert
    return convert(BUNDLED, tmp_path_factory.mktemp("bundled") / "glm5next-small-f16.gguf", outtype="f16",
                   progress=False, log=lambda m: None)


@pytest.fixture(scope="module")
def model(gguf):
    """Fixed draft lengths: the claims below count drafts, and adaptive lengths, learned across this module's
    requests, may draft none in a short reply where drafting does not pay (tests/csrc/test_draft_length.py)."""
    from glm5next_runtime import Model
    return Model(gguf, n_ctx=1024, n_threads=2, spec_type="draft-mtp", draft_n_max=3, draft_adaptive=False)


@pytest.fixture(scope="module")
def heldout(model) -> list[list[int]]:
    """The token ids of every held-out file, in the split's order."""
    _, held = data.split(data.stdlib_sources())
    return [model.tokenize(t, parse_special=False) for t in data.read_texts(held)]


@pytest.fixture(scope="module")
def prompts(heldout) -> list[list[int]]:
    """The first PROMPT_TOKENS tokens of the first two long enough held-out files."""
    return [i[:PROMPT_TOKENS] for i in heldout if len(i) >= PROMPT_TOKENS][:2]


@pytest.fixture(scope="module")
def long_prompt(heldout) -> list[int]:
    """4 x index_topk + 7 tokens of the first held-out file that long."""
    n = 4 * TEXT_CONFIG["index_topk"] + 7
    return next(i[:n] for i in heldout if len(i) >= n)


def hf_trunk_and_index_scores(tokens: list[int]):
    """hf_trunk's (logits, hidden, selections) and each full-indexer layer's pool scores [n_tokens, n_pools], in
    layer order. The scores exist only inside the indexer's forward, so they are taken at its top-k call."""
    import torch
    k = TEXT_CONFIG["index_topk"] // TEXT_CONFIG["index_kpool"]
    scores, topk = [], torch.Tensor.topk

    def spy(self, kk, *args, **kwargs):
        if kk == k and self.dim() == 3:
            scores.append(self[0].detach().numpy().copy())
        return topk(self, kk, *args, **kwargs)
    with mock.patch.object(torch.Tensor, "topk", spy):
        return hf_trunk(BUNDLED, tokens), scores


def test_trunk_matches_transformers_up_to_exact_ties(tmp_path_factory, long_prompt):
    """Trained indexers score many pools exactly 0 (ReLU), so exact ties at the top-k boundary happen (4 rows of
    519 here, in the last DSA layer). docs/model.md (Indexer) breaks a tie toward the lower pool; torch.topk leaves
    it open. So: where the selections differ, the swapped pools tie exactly in transformers' own scores and ours are
    the lower ones; every row whose selections agree in every layer has the same logits and hidden state."""
    from glm5next_convert import convert
    from glm5next_runtime import Model
    path = convert(BUNDLED, tmp_path_factory.mktemp("bundled-f32") / "f32.gguf", outtype="f32", progress=False,
                   log=lambda m: None)
    (want_logits, want_hidden, want_sel), scores = hf_trunk_and_index_scores(long_prompt)
    kpool = TEXT_CONFIG["index_kpool"]
    m = Model(path, n_ctx=1024, n_threads=2, cache_type_k="f32")  # fp32 math, as transformers' (f16: test_trunk)
    logits = m.eval(long_prompt, logits_all=True)
    assert len(scores) == len(want_sel) > 0
    differing = set()
    for (il, rows), s in zip(sorted(want_sel.items()), scores):
        got = m.selected_positions(il)
        assert len(rows[-1]) < len(long_prompt) - 1  # sparse selection decides what late rows attend
        for t in (t for t in range(len(long_prompt)) if got[t] != rows[t]):
            differing.add(t)
            ours = sorted({p // kpool for p in got[t] - rows[t]})
            theirs = sorted({p // kpool for p in rows[t] - got[t]})
            tied = s[t][ours + theirs]
            assert np.all(tied == tied[0]), f"layer {il} row {t}: pools {ours} vs {theirs} score {tied}"
            assert max(ours) < min(theirs), f"layer {il} row {t}: a tie went to the higher pool {ours} vs {theirs}"
    same = [t for t in range(len(long_prompt)) if t not in differing]
    assert len(same) > 0.95 * len(long_prompt)
    assert np.abs(logits[same] - want_logits[same]).max() <= 1e-4
    assert np.abs(m.hidden[same] - want_hidden[same]).max() <= 1e-4


def test_checkpoint_is_small_and_complete():
    size = sum(f.stat().st_size for f in BUNDLED.iterdir())
    assert size <= 25 * 2**20, f"{size / 2**20:.1f} MiB"
    config = json.loads((BUNDLED / "config.json").read_text())
    text = config["text_config"]
    assert config["architectures"] == ["Glm5NextForConditionalGeneration"] and text["num_nextn_predict_layers"] == 1
    assert text["index_topk"] < PROMPT_TOKENS
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "training.json"):
        assert (BUNDLED / name).is_file(), name
    held = json.loads((BUNDLED / "training.json").read_text())
    assert held["tokens"] >= 3_000_000


def assert_python_like(text: str) -> None:
    """Generated text looks like Python: several lines, indented by multiples of 4 spaces, and at least half of
    them parse on their own as a statement or as the head of a block (docstring prose does not; random weights
    give no line that does)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) >= 3, text
    assert all((len(ln) - len(ln.lstrip(" "))) % 4 == 0 for ln in lines), text

    def parses(line: str) -> bool:
        for source in (line.strip(), line.strip() + "\n    pass"):
            try:
                ast.parse(source)
                return True
            except SyntaxError:
                pass
        return False
    assert sum(map(parses, lines)) >= len(lines) / 2, text


def test_cli_writes_python(gguf):
    run = subprocess.run([str(CLI), "-m", str(gguf), "-t", "2", "-c", "512", "-p", "def fibonacci(n):", "-n", "64",
                          "--temp", "0"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert_python_like("def fibonacci(n):" + run.stdout)  # the text continues the prompt's line


def test_server_writes_python(gguf, model, tmp_path):
    """glm5next-server with draft-MTP: the completion equals the Python API's and reads as Python."""
    prompt = 'def parse_args(argv):\n    """Parse the command line."""\n'
    want = model.generate(prompt, max_tokens=64, temperature=0)
    server = Server(gguf, tmp_path / "server.log", "--spec-type", "draft-mtp", "--spec-draft-adaptive", "off",
                    n_ctx=1024)  # as the model fixture: fixed lengths, so that drafts are accepted whatever the timings
    try:
        r = server.client().completions.create(model=gguf.name, prompt=prompt, max_tokens=64, temperature=0)
    finally:
        server.stop()
    assert r.choices[0].text == want.text
    assert_python_like(prompt + r.choices[0].text)
    assert r.model_extra["timings"]["draft_n_accepted"] > 0


def test_a_chat_through_the_openai_client_resumes_every_turn(gguf, tmp_path):
    """Issue 25, as a new user meets it: the bundled template opens <think> in its generation prompt and renders an
    earlier answer without it, so every next turn parts a few tokens before the last prompt's end. With the default
    checkpoints (one every 8,192 tokens) turns 2-4 used to evaluate everything again; the checkpoint before the
    generation prompt keeps them at <= 25% of their prompt, answering as cache_prompt false does."""
    server = Server(gguf, tmp_path / "server.log", n_ctx=2048)
    try:
        client = server.client()
        system = "You write short Python functions and explain them in one sentence. " * 100  # ~1,500 tokens
        messages = [{"role": "system", "content": system}, {"role": "user", "content": "Write is_even(n)."}]
        for turn in range(4):
            reply = client.chat.completions.create(model="m", messages=messages, max_tokens=16, temperature=0)
            usage = reply.usage
            if turn == 0:
                assert 1400 < usage.prompt_tokens < 1900, usage
            else:
                evaluated = usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens
                assert evaluated <= 0.25 * usage.prompt_tokens, (turn, usage)
            again = client.chat.completions.create(model="m", messages=messages, max_tokens=16, temperature=0,
                                                   extra_body={"cache_prompt": False})
            assert again.choices[0].message == reply.choices[0].message
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": f"Now question {turn + 2}: write is_odd(n)."}]
    finally:
        server.stop()


@pytest.mark.parametrize("n_max", [1, 3, 5])
def test_greedy_draft_mtp_equals_plain_decoding(model, prompts, n_max):
    for prompt in prompts:
        plain = model.generate(prompt, max_tokens=N_GEN, temperature=0, spec_n_max=0)
        spec = model.generate(prompt, max_tokens=N_GEN, temperature=0, spec_n_max=n_max)
        assert spec.tokens == plain.tokens
        assert spec.metrics["n_drafts"] > 0


def test_drafts_get_accepted(model, prompts):
    """The trained head agrees with the trunk often (the acceptance benchmark reports the real figures): more than
    a third of first drafts, and at least one accepted draft per two rounds at n_max 3."""
    drafted = accepted = rounds = n_accepted = 0
    for prompt in prompts:
        m = model.generate(prompt, max_tokens=N_GEN, temperature=0, spec_n_max=3).metrics
        drafted += m["drafted_at"][0]
        accepted += m["accepted_at"][0]
        rounds += m["n_drafts"]
        n_accepted += m["n_accepted"]
    assert accepted / drafted > 1 / 3 and n_accepted / rounds > 0.5
