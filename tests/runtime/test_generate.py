"""Model.generate (glm5next_runtime/generate.py) on a tiny random model (its text is noise, which is fine):
greedy equals a manual eval + argmax loop, seeded sampling is reproducible, end-of-generation tokens, stop
strings, the context limit, streaming (complete UTF-8 pieces that concatenate to the text), metrics and bad
arguments. Where a case needs particular tokens, `scripted` replaces the model's logits."""
from __future__ import annotations

import numpy as np
import pytest

from glm5next_runtime import Model, _core
from glm5next_runtime.generate import GenerationResult, GenerationStream, TextStream

PROMPT = "Hello world, this is"
N_CTX = 64


@pytest.fixture(scope="module")
def gguf(checkpoints):
    return checkpoints.convert(checkpoints.make("gen-tiny", "tiny", dtype="f32"), outtype="f32")


@pytest.fixture
def model(gguf) -> Model:
    # one thread: a tiny model gains nothing from more, and shared CI cores make ggml's thread sync slow; fixed
    # draft lengths: seeded sampled output depends on them (adaptive ones follow timings)
    return Model(gguf, n_ctx=N_CTX, n_threads=1, draft_adaptive=False)


@pytest.fixture
def no_eog(model, monkeypatch) -> Model:
    """The model with no end-of-generation tokens, so that runs go to max_tokens."""
    monkeypatch.setattr(model.tokenizer, "special_ids", {})
    return model


def scripted(model: Model, monkeypatch, script: list[int]) -> None:
    """Replace the C++ generation loop by one that emits `script`, one token per round (the text handling,
    stop strings and end-of-generation tokens are the Python side's)."""
    ids = iter(script)

    class ScriptedGenerator:
        room = 1_000
        stats = {"n_prompt_tokens": 1, "n_cached_tokens": 0, "cache_source": "none", "prompt_ms": 1.0, "n_drafts": 0, "n_drafted": 0, "n_accepted": 0,
                 "acceptance_per_position": [], "drafted_at": [], "accepted_at": [], "rounds_at_length": [1],
                 "mean_accepted_length": 0.0,
                 "draft_ms": 0.0, "verify_ms": 0.0}

        def __init__(self, *args, **kwargs):
            pass

        def start(self, prompt, cache_prompt=False):
            return next(ids)

        def finish(self):
            pass

        def step(self, max_tokens=None):
            return [next(ids)]

    monkeypatch.setattr(_core, "Generator", ScriptedGenerator)


def test_greedy_equals_manual_argmax_loop(no_eog):
    m = no_eog
    got = m.generate(PROMPT, max_tokens=20, temperature=0)
    m.reset()
    logits = m.eval(m.tokenize(PROMPT))
    want = []
    for _ in range(20):
        want.append(int(np.argmax(logits)))
        logits = m.eval(want[-1:])
    assert got.tokens == want
    assert got.finish_reason == "length"
    # control tokens are generated and counted but are not text (llama-server without --special)
    assert got.text == b"".join(m.tokenizer.token_to_piece(t, special=False) for t in want).decode("utf-8", "replace")


def test_token_prompt_equals_text_prompt(no_eog):
    m = no_eog
    text = m.generate(PROMPT, max_tokens=8, temperature=0)
    assert m.generate(m.tokenize(PROMPT), max_tokens=8, temperature=0).tokens == text.tokens


def test_seeded_sampling_is_reproducible(no_eog):
    def run(seed):
        return no_eog.generate(PROMPT, max_tokens=24, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed)

    assert run(3).tokens == run(3).tokens
    assert run(3).tokens != run(4).tokens  # 24 draws over a near-flat 448-token distribution


@pytest.mark.parametrize("name", ["eos", "eot", "eom"])
def test_end_of_generation_token_stops_and_is_not_returned(no_eog, monkeypatch, name):
    m = no_eog
    ref = m.generate(PROMPT, max_tokens=12, temperature=0).tokens
    end = ref[5]
    monkeypatch.setattr(m.tokenizer, "special_ids", {name: end})
    got = m.generate(PROMPT, max_tokens=12, temperature=0)
    assert got.tokens == ref[:ref.index(end)]
    assert got.finish_reason == "stop"


def test_other_special_tokens_do_not_stop(no_eog, monkeypatch):
    m = no_eog
    ref = m.generate(PROMPT, max_tokens=12, temperature=0).tokens
    monkeypatch.setattr(m.tokenizer, "special_ids", {"bos": ref[2], "pad": ref[3], "unk": ref[4]})
    assert m.generate(PROMPT, max_tokens=12, temperature=0).tokens == ref


def test_eos_of_the_file_ends_generation(model, monkeypatch):
    eos = model.tokenizer.special_ids["eos"]
    scripted(model, monkeypatch, [10, 11, eos, 12])
    got = model.generate(PROMPT, max_tokens=10, temperature=0)
    assert (got.tokens, got.finish_reason) == ([10, 11], "stop")


def greedy_text(m: Model, n: int = 40) -> str:
    return m.generate(PROMPT, max_tokens=n, temperature=0).text


def printable_window(text: str, start: int, size: int) -> str:
    """A substring of `text` at or after `start` with no replacement character (whose bytes are ambiguous)."""
    for i in range(start, len(text) - size):
        if "\ufffd" not in text[i:i + size]:
            return text[i:i + size]
    pytest.skip("no clean window in the greedy text")


def test_stop_string_cuts_the_text(no_eog):
    m = no_eog
    full = m.generate(PROMPT, max_tokens=40, temperature=0)
    stop = printable_window(full.text, len(full.text) // 3, 2)
    got = m.generate(PROMPT, max_tokens=40, temperature=0, stop=stop)
    assert got.text == full.text[:full.text.find(stop)]
    assert got.finish_reason == "stop"
    assert full.tokens[:len(got.tokens)] == got.tokens and len(got.tokens) < len(full.tokens)


def test_earliest_of_several_stop_strings_wins(no_eog):
    m = no_eog
    full = greedy_text(m)
    early = printable_window(full, len(full) // 4, 2)
    late = printable_window(full, full.find(early) + 3, 3)
    got = m.generate(PROMPT, max_tokens=40, temperature=0, stop=[late, early, "never in this text \x00"])
    assert got.text == full[:full.find(early)]


def test_stream_concatenates_to_the_text(no_eog):
    m = no_eog
    for kwargs in (dict(temperature=0), dict(temperature=0.9, seed=3), dict(temperature=0.9, seed=3, stop="e")):
        whole = m.generate(PROMPT, max_tokens=30, **kwargs)
        stream = m.generate(PROMPT, max_tokens=30, stream=True, **kwargs)
        assert isinstance(stream, GenerationStream) and stream.result is None
        pieces = list(stream)
        assert all(pieces) and "".join(pieces) == whole.text
        assert isinstance(stream.result, GenerationResult)
        assert (stream.result.text, stream.result.tokens, stream.result.finish_reason) == (
            whole.text, whole.tokens, whole.finish_reason)
        assert list(stream) == [] and stream.result.tokens == whole.tokens  # exhausted stays exhausted


def test_stream_emits_only_complete_utf8_and_holds_back_stop_prefixes(model, monkeypatch):
    byte_id = {model.tokenizer.token_to_piece(i): i for i in range(model.n_vocab)}
    text = "aé€😀b"
    script = [byte_id[bytes([b])] for b in text.encode()] + [model.tokenizer.special_ids["eos"]]
    scripted(model, monkeypatch, script)
    stream = model.generate(PROMPT, max_tokens=50, temperature=0, stream=True)
    assert list(stream) == ["a", "é", "€", "😀", "b"]  # one piece per character, not per byte
    assert stream.result.finish_reason == "stop" and len(stream.result.tokens) == len(text.encode())

    scripted(model, monkeypatch, script)
    stream = model.generate(PROMPT, max_tokens=50, temperature=0, stream=True, stop=["€😀c", "é€x"])
    # "é€" could grow into "é€x" until "😀" arrives, "€😀" into "€😀c" until "b" does
    assert list(stream) == ["a", "é", "€😀b"]
    assert stream.result.text == text


def test_max_tokens_zero_returns_nothing(model):
    got = model.generate(PROMPT, max_tokens=0)
    assert (got.text, got.tokens, got.finish_reason) == ("", [], "length")
    assert got.metrics["n_prompt_tokens"] == len(model.tokenize(PROMPT)) and got.metrics["n_generated"] == 0


def test_generation_stops_at_the_context_size(gguf, monkeypatch):
    m = Model(gguf, n_ctx=16, n_threads=1)
    monkeypatch.setattr(m.tokenizer, "special_ids", {})
    got = m.generate(list(range(10)), max_tokens=100, temperature=0)
    assert len(got.tokens) == 6 and got.finish_reason == "length"
    full = m.generate(list(range(16)), max_tokens=100, temperature=0)  # a prompt that fills the context
    assert full.tokens == [] and full.finish_reason == "length"


def test_metrics(model):
    got = model.generate(PROMPT, max_tokens=10, temperature=0, stop=None)
    keys = {"n_prompt_tokens", "n_generated", "prompt_ms", "decode_ms", "prompt_tokens_per_s", "decode_tokens_per_s"}
    spec = {"n_drafts", "n_drafted", "n_accepted", "acceptance_per_position", "drafted_at", "accepted_at",
            "rounds_at_length", "mean_accepted_length", "draft_ms", "verify_ms"}
    assert set(got.metrics) == keys | spec | {"n_cached_tokens", "cache_source"}
    assert got.metrics["n_prompt_tokens"] == len(model.tokenize(PROMPT))
    assert 0 <= got.metrics["n_cached_tokens"] < got.metrics["n_prompt_tokens"]
    assert got.metrics["cache_source"] == ("none" if got.metrics["n_cached_tokens"] == 0 else "sequence")
    assert got.metrics["n_generated"] == len(got.tokens) > 0
    assert all(got.metrics[k] > 0 for k in keys)


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt=""), "empty"),
    (dict(prompt=[]), "empty"),
    (dict(prompt=list(range(N_CTX + 1))), "n_ctx"),
    (dict(prompt=[1, 448]), "outside the vocab"),
    (dict(prompt=[1, -1]), "outside the vocab"),
    (dict(max_tokens=-1), "max_tokens"),
    (dict(stop=""), "stop"),
    (dict(stop=["a", ""]), "stop"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_k=-3), "top_k"),
    (dict(min_p=1.5), "min_p"),
])
def test_bad_arguments_raise_value_error(model, kwargs, match):
    kwargs = {"prompt": PROMPT, **kwargs}
    with pytest.raises(ValueError, match=match):
        model.generate(**kwargs)
    with pytest.raises(ValueError, match=match):  # also when streaming: checked before the stream is returned
        model.generate(**kwargs, stream=True)


def test_text_stream_unit():
    s = TextStream(["abc"])
    assert [s.feed(b) for b in (b"x", b"a", b"b", b"d")] == ["x", "", "", "abd"]
    assert [s.feed(b) for b in (b"a", b"b", b"c", b"z")] == ["", "", "", ""] and s.stopped
    assert s.flush() == ""

    s = TextStream()
    euro = "€".encode()
    assert [s.feed(euro[:1]), s.feed(euro[1:2]), s.feed(euro[2:] + b"x")] == ["", "", "€x"]
    assert s.feed(euro[:2]) == "" and s.flush() == "\ufffd"  # a truncated character at the very end

    s = TextStream(["é"])
    assert s.feed(b"a\xc3") == "a" and s.feed(b"\xa9tail") == "" and s.stopped
