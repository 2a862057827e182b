"""A sequence saved as bytes and loaded into another Model of the same file (Model.save_state / load_state;
csrc/runtime/sequence_state.h) resumes as the Model that saved it would: a prompt sharing a prefix evaluates only
the rest, and the output, drafts and acceptance are those of a fresh sequence. Bytes that are not a saved sequence,
a damaged one or one of another model are refused with a ValueError and the sequence is left as it was."""
from __future__ import annotations

import pytest

from conftest import random_tokens
from test_prompt_cache import CHECKPOINT_EVERY, FIRST, N_GEN, CacheFile, new_model


@pytest.fixture(scope="module", params=["tiny-f32", "predictable-q8_0"])
def gguf(request, checkpoints):
    preset, outtype = request.param.split("-")
    return CacheFile.of(checkpoints.convert(checkpoints.make(f"cache-{preset}", preset, dtype="f32"), outtype=outtype),
                        outtype)


@pytest.fixture(scope="module")
def saver(gguf):
    return new_model(gguf)


@pytest.fixture(scope="module")
def loader(gguf):
    return new_model(gguf)


@pytest.fixture(scope="module")
def fresh(gguf):
    return new_model(gguf)


@pytest.mark.parametrize("spec_n_max", [0, 3])
@pytest.mark.parametrize("split", [5, 30, 72, 80])
def test_a_loaded_sequence_resumes_as_the_one_that_saved_it(saver, loader, fresh, split, spec_n_max):
    """The prompt parts from the saved sequence inside the first pool (5: nothing to resume from), past a prefill
    checkpoint (30), at the end of the saved prompt (72) and inside the tokens it generated (80)."""
    kw = dict(temperature=0, spec_n_max=spec_n_max)
    first = saver.generate(FIRST, max_tokens=N_GEN, **kw)
    loader.generate(random_tokens(40, seed=7), max_tokens=2, **kw)  # something else to replace
    loader.load_state(saver.save_state())
    assert loader.tokens == saver.tokens and loader.checkpoints() == saver.checkpoints()
    prompt = (FIRST + first.tokens)[:split] + random_tokens(10, seed=split)
    hit = loader.generate(prompt, max_tokens=N_GEN, **kw)
    on_saver = saver.generate(prompt, max_tokens=N_GEN, **kw)
    want = fresh.generate(prompt, max_tokens=N_GEN, cache_prompt=False, **kw)
    assert hit.tokens == on_saver.tokens == want.tokens
    assert hit.metrics["n_cached_tokens"] == on_saver.metrics["n_cached_tokens"]
    assert (hit.metrics["n_cached_tokens"] > 0) == (split >= CHECKPOINT_EVERY)
    if spec_n_max:
        for key in ("drafted_at", "accepted_at", "n_drafts"):
            assert hit.metrics[key] == want.metrics[key], key


def test_saving_a_loaded_sequence_gives_the_same_bytes(saver, loader):
    saver.generate(FIRST, max_tokens=4, temperature=0)
    data = saver.save_state()
    loader.load_state(data)
    assert loader.save_state() == data


def test_an_empty_sequence_saves_and_loads(gguf, loader):
    empty = new_model(gguf)
    loader.generate(FIRST, max_tokens=2, temperature=0)
    loader.load_state(empty.save_state())
    assert loader.tokens == [] and loader.checkpoints()["count"] == 0
    assert loader.generate(FIRST, max_tokens=2, temperature=0).metrics["n_cached_tokens"] == 0


def damaged(data: bytes) -> list[tuple[str, bytes]]:
    return [("empty", b""), ("magic", b"X" + data[1:]), ("version", data[:8] + b"\x09" + data[9:]),
            ("cut at 16 bytes", data[:16]), ("cut in the middle", data[:len(data) // 2]),
            ("last byte missing", data[:-1]), ("a byte too many", data + b"\0"),
            ("huge token count", data[:12] + b"\xff\xff\xff\x7f" + data[16:])]


@pytest.mark.parametrize("case", range(8))
def test_damaged_bytes_are_refused_and_the_sequence_kept(saver, loader, case):
    saver.generate(FIRST, max_tokens=4, temperature=0)
    loader.generate(FIRST[:30], max_tokens=2, temperature=0)
    before = loader.save_state()
    name, data = damaged(saver.save_state())[case]
    with pytest.raises(ValueError, match="saved|sequence"):
        loader.load_state(data)
    assert loader.save_state() == before, name


def test_a_sequence_of_another_model_is_refused(checkpoints, saver, loader):
    other = new_model(CacheFile.of(checkpoints.convert(checkpoints.make("state-other", "tiny", dtype="f32", seed=3,
                                                                        kv_lora_rank=24)), "f32"))
    other.generate(FIRST[:20], max_tokens=2, temperature=0)
    before = loader.save_state()
    with pytest.raises(ValueError, match="another model|does not fit"):
        loader.load_state(other.save_state())
    assert loader.save_state() == before


def test_a_sequence_saved_with_another_cache_type_is_refused_by_name(gguf, saver, loader):
    """The rows are saved as the cache keeps them (-ctk): an f32 sequence does not load into f16 caches."""
    other = new_model(gguf, cache_type_k="f32")
    other.generate(FIRST[:20], max_tokens=2, temperature=0)
    before = loader.save_state()
    with pytest.raises(ValueError, match=r"cache_latent-\d+ is f32 where this sequence keeps f16 .*-ctk"):
        loader.load_state(other.save_state())
    assert loader.save_state() == before


def test_a_cache_type_the_runtime_does_not_keep_is_refused_by_name(gguf):
    from glm5next_runtime import Model
    with pytest.raises(ValueError, match="cache_type_k 'q5_0': expected one of f16, bf16, f32, q8_0, q4_0"):
        Model(gguf.path, cache_type_k="q5_0")


def test_a_quantized_cache_needs_widths_of_whole_blocks(checkpoints):
    from glm5next_runtime import Model
    path = checkpoints.convert(checkpoints.make("state-other", "tiny", dtype="f32", seed=3, kv_lora_rank=24))
    with pytest.raises(ValueError, match="q8_0 stores rows in blocks of 32 values, and this model's kv_lora_rank is 24"):
        Model(path, cache_type_k="q8_0")


def test_a_sequence_longer_than_the_context_is_refused(gguf, saver):
    from glm5next_runtime import Model
    saver.generate(FIRST, max_tokens=4, temperature=0)
    small = Model(gguf.path, n_ctx=64, n_threads=2, n_batch=gguf.n_batch, checkpoint_every=CHECKPOINT_EVERY)
    with pytest.raises(ValueError, match="n_ctx = 64"):
        small.load_state(saver.save_state())


def test_a_sequence_without_drafting_keeps_no_nextn_caches(gguf, saver, fresh):
    """spec_type none (issue 27): the sequence has no NextN layer caches (one layer's fewer bytes, as llama.cpp skips
    the layer), answers as a drafting one, and refuses a generator that would draft, naming spec_type."""
    plain = new_model(gguf, spec_type="none")
    assert not plain.sequence.has_draft_head and saver.sequence.has_draft_head
    n_layers = saver.hparams["n_trunk"] + 1  # the NextN layer's caches are one layer's, sized as a trunk layer's
    assert 0 < saver.sequence.cache_bytes - plain.sequence.cache_bytes < saver.sequence.cache_bytes / (n_layers - 2)
    want = fresh.generate(FIRST, max_tokens=N_GEN, temperature=0, spec_n_max=3, cache_prompt=False)
    assert plain.generate(FIRST, max_tokens=N_GEN, temperature=0).tokens == want.tokens
    with pytest.raises(ValueError, match="spec_type draft-mtp"):
        plain.generate(FIRST, max_tokens=2, spec_n_max=2)


def test_a_saved_sequence_loads_without_its_nextn_rows_where_nothing_drafts(gguf, saver):
    """A slot saved while drafting restores into a sequence that does not draft (its trunk rows resume there); one
    saved without drafting is refused by a sequence that drafts (it could resume nothing) and the sequence kept."""
    plain = new_model(gguf, spec_type="none")
    saver.generate(FIRST, max_tokens=4, temperature=0)
    plain.load_state(saver.save_state())
    assert plain.tokens == saver.tokens
    assert plain.generate(FIRST + [5, 6], max_tokens=1, temperature=0).metrics["n_cached_tokens"] >= len(FIRST)
    before = saver.tokens
    with pytest.raises(ValueError, match="saved without drafting"):
        saver.load_state(plain.save_state())
    assert saver.tokens == before
