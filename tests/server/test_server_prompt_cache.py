"""The server's prompt cache (issue 12) through HTTP: a chat resumes turn after turn through the openai client, the
RAM prompt cache (--cache-ram) lets conversations alternate on one slot, and llama-server's slot actions
(POST /slots/{id}?action=save|restore|erase with --slot-save-path) save, load and empty slots, with llama-server's
shapes and errors. In every case the answers are those of a request that evaluates everything (cache_prompt
false)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from glm5next_runtime.server.slot_tasks import SlotTask, prompt_cache_line
from live_server import Server, post_json, request

SYSTEM = "You answer in one short sentence and never repeat the question. " * 40  # ~1,500 tokens


@pytest.fixture(scope="module")
def saves(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("slot-files")


@pytest.fixture(scope="module")
def server(predictable_gguf, saves, tmp_path_factory):
    s = Server(predictable_gguf, tmp_path_factory.mktemp("cache") / "server.log", "-np", "2", "--slot-save-path", str(saves))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def one_slot(predictable_gguf, tmp_path_factory):
    s = Server(predictable_gguf, tmp_path_factory.mktemp("one-slot") / "server.log", "-np", "1", "--cache-ram", "64")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def one_slot_no_ram(predictable_gguf, tmp_path_factory):
    s = Server(predictable_gguf, tmp_path_factory.mktemp("one-slot-no-ram") / "server.log", "-np", "1", "--cache-ram", "0")
    yield s
    s.stop()


def complete(server: Server, prompt: str, **kw) -> dict:
    status, out = post_json(server, "/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0, **kw})
    assert status == 200, out
    return out


def slot_action(server: Server, slot: object, action: str | None, body: object = None) -> tuple[int, dict]:
    path = f"/slots/{slot}" + (f"?action={action}" if action else "")
    status, raw = request(server, "POST", path, json.dumps(body).encode() if body is not None else None,
                          {"Content-Type": "application/json"})
    return status, json.loads(raw)


# ------------------------------------------------------------------------------------------ chat turns

def test_a_four_turn_chat_evaluates_only_what_is_new(server):
    """openai client, a ~1,500-token system prompt, the answers' content sent back (no reasoning): turns 2-4
    evaluate no more than the new tokens and the last generation prompt (the template rendered "<think>" there and
    renders the answer without it: the turn resumes from the checkpoint before it), at most 25% of the prompt (issue
    25); the same turns with cache_prompt false evaluate everything and answer the same."""
    client = server.client()
    model = client.models.list().data[0].id
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is a prompt cache?"}]
    turns = []
    for turn in range(4):
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0)
        turns.append((list(messages), reply))
        messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                     {"role": "user", "content": f"And question {turn + 2}?"}]
    assert turns[0][1].usage.prompt_tokens > 1400
    for (_, before), (_, reply) in zip(turns, turns[1:]):
        cached = reply.usage.prompt_tokens_details.cached_tokens
        new = reply.usage.prompt_tokens - before.usage.prompt_tokens
        evaluated = reply.usage.prompt_tokens - cached
        assert evaluated <= new + 4 and evaluated <= 0.25 * reply.usage.prompt_tokens, (cached, new)
    last = max(json.loads(request(server, "GET", "/slots")[1]), key=lambda slot: slot.get("id_task", -1))
    assert last["prompt_cache_source"] == "checkpoint"  # GET /slots says where turn 4 resumed from
    for sent, reply in turns:
        again = client.chat.completions.create(model=model, messages=sent, max_tokens=8, temperature=0,
                                               extra_body={"cache_prompt": False})
        assert again.usage.prompt_tokens_details.cached_tokens == 0
        assert again.choices[0].message.content == reply.choices[0].message.content


def test_a_prompt_that_differs_only_at_its_end_evaluates_only_its_end(server):
    """A raw prompt keeps a checkpoint 4 tokens before its end (runtime/checkpoint_plan.h): the same question with
    another last word resumes there (llama-server's test_slot_save_restore asks the same), and answers as with
    cache_prompt false (issue 30: it used to evaluate all of it)."""
    # the last word one token long even in the test checkpoints' small tokenizer (llama-server's test has
    # France / Germany, two tokens each in a real vocabulary)
    first = complete(server, "What is the population of city 1?", id_slot=1)
    again = complete(server, "What is the population of city 2?", id_slot=1)
    n_first = first["timings"]["prompt_n"] + first["timings"]["cache_n"]
    assert again["timings"]["cache_n"] == n_first - 4 and again["timings"]["prompt_n"] == 4, again["timings"]
    fresh = complete(server, "What is the population of city 2?", id_slot=1, cache_prompt=False)
    assert fresh["choices"][0]["text"] == again["choices"][0]["text"]


def test_the_log_line_says_what_the_prompt_cache_did():
    """At -v every request logs its prompt's tokens, those resumed and from where, those evaluated."""
    task = SlotTask(7, 1, {}, 973, None)
    line = prompt_cache_line(task, {"n_cached_tokens": 959, "cache_source": "checkpoint"})
    assert line == "slot 1 task 7: prompt 973 tokens, 959 resumed from the context checkpoint at row 959, 14 evaluated"
    line = prompt_cache_line(task, {"n_cached_tokens": 0, "cache_source": "none"})
    assert line == "slot 1 task 7: prompt 973 tokens, 0 resumed, 973 evaluated"


@pytest.mark.parametrize("cache_ram", [True, False])
def test_two_conversations_alternate_on_one_slot_through_the_ram_cache(one_slot, one_slot_no_ram, cache_ram):
    """-np 1: Ann, Bob, Ann, Bob. With --cache-ram the slot's sequence is kept when the other conversation takes
    the slot and loaded back when its conversation returns (turns 3 and 4 resume their own system prompt); with
    --cache-ram 0 they evaluate it again. The answers are the same either way."""
    server = one_slot if cache_ram else one_slot_no_ram
    prompts = {name: f"You are {name} and you speak about {name}'s garden. " * 20 for name in ("Ann", "Bob")}
    for i, name in enumerate(["Ann", "Bob", "Ann", "Bob"]):
        prompts[name] += f" Question {i}:"
        out = complete(server, prompts[name])
        if i >= 2:
            reused = out["timings"]["cache_n"] > 200  # its own system prompt at least
            assert reused == cache_ram, (name, out["timings"])
        miss = complete(server, prompts[name], cache_prompt=False)
        assert miss["choices"][0]["text"] == out["choices"][0]["text"]
        prompts[name] += out["choices"][0]["text"]


# ------------------------------------------------------------------------------------------ slot actions

def test_save_erase_restore_resumes_where_the_slot_was(server, saves):
    prompt = "Slot files keep a whole sequence: tokens, rows and checkpoints. " * 8
    first = complete(server, prompt, id_slot=0)
    status, saved = slot_action(server, 0, "save", {"filename": "conversation.bin"})
    assert status == 200, saved
    n_tokens = first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"] - 1  # the last one not evaluated
    assert saved["id_slot"] == 0 and saved["filename"] == "conversation.bin" and saved["n_saved"] == n_tokens
    assert saved["n_written"] == (saves / "conversation.bin").stat().st_size and saved["timings"]["save_ms"] >= 0
    for slot in (0, 1):
        status, erased = slot_action(server, slot, "erase")
        assert status == 200 and erased["id_slot"] == slot
    status, restored = slot_action(server, 0, "restore", {"filename": "conversation.bin"})
    assert status == 200 and restored["n_restored"] == n_tokens and restored["n_read"] == saved["n_written"]
    again = complete(server, prompt + first["choices"][0]["text"] + " More:")
    assert again["timings"]["cache_n"] >= first["usage"]["prompt_tokens"]
    assert again["choices"][0]["text"] == complete(server, prompt + first["choices"][0]["text"] + " More:",
                                                   cache_prompt=False)["choices"][0]["text"]


def test_erase_empties_the_slot(server):
    complete(server, "Something to erase, and then some more words. " * 4, id_slot=0)
    status, erased = slot_action(server, 0, "erase")
    assert status == 200 and erased["n_erased"] > 0
    assert slot_action(server, 0, "erase")[1]["n_erased"] == 0


def test_a_slot_id_past_the_last_slot_wraps_around(server):
    """llama-server's get_slot_by_id takes the id modulo the slot count (its tests pin this)."""
    status, out = slot_action(server, 2, "erase")
    assert status == 200 and out["id_slot"] == 0


@pytest.mark.parametrize("filename", ["../evil.bin", "sub/evil.bin", "..", "", " padded", "dot.", "a\x01b", 1, None])
def test_bad_filenames_are_refused(server, saves, filename):
    before = sorted(p.name for p in saves.iterdir())
    for action in ("save", "restore"):
        status, out = slot_action(server, 0, action, {} if filename is None else {"filename": filename})
        assert status == 400 and out["error"]["message"] == "Invalid filename"
    assert sorted(p.name for p in saves.iterdir()) == before


@pytest.mark.parametrize("slot", ["abc", "-1", "1.5"])
def test_bad_slot_ids_are_refused(server, slot):
    status, out = slot_action(server, slot, "save", {"filename": "x.bin"})
    assert status == 400 and out["error"]["message"] == "Invalid slot ID"


@pytest.mark.parametrize("action", ["frobnicate", None])
def test_unknown_actions_are_refused(server, action):
    status, out = slot_action(server, 0, action, {"filename": "x.bin"})
    assert status == 400 and out["error"]["message"] == "Invalid action"


@pytest.mark.parametrize("damage", ["missing", "cut", "not a sequence"])
def test_a_bad_file_is_refused_and_the_slot_kept(server, saves, damage):
    complete(server, "The slot keeps this sequence. " * 6, id_slot=0)
    status, saved = slot_action(server, 0, "save", {"filename": "keep.bin"})
    assert status == 200
    path = saves / f"bad-{damage}.bin"
    if damage == "cut":
        path.write_bytes((saves / "keep.bin").read_bytes()[:16])
    elif damage == "not a sequence":
        path.write_bytes(b"GGUF" + bytes(100))
    status, out = slot_action(server, 0, "restore", {"filename": path.name})
    assert status == 400 and out["error"]["message"].startswith(
        "Unable to restore slot, no available space in KV cache or invalid slot save file")
    assert path.name in out["error"]["message"]
    status, again = slot_action(server, 0, "save", {"filename": "keep-again.bin"})
    assert again["n_saved"] == saved["n_saved"]
    assert (saves / "keep-again.bin").read_bytes() == (saves / "keep.bin").read_bytes()


def test_slot_actions_need_a_slot_save_path(one_slot):
    status, out = slot_action(one_slot, 0, "save", {"filename": "x.bin"})
    assert status == 501
    assert out["error"]["message"] == "This server does not support slots action. Start it with `--slot-save-path`"
