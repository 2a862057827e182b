"""The graph census (csrc/runtime/graph_census.h) and the product route it checks (model/kernel_limits.h,
multiplies_rows_alone): on a device declared CUDA (a loopback glm5next-rpc-server with GLM5NEXT_RPC_BACKEND=CUDA,
the tests' stand-in for a GPU) every graph kind multiplies plainly and keeps ggml-cuda's CUDA graphs on, while the
CPU and plain RPC keep the row-by-row route of batch invariance. The CUDA rule itself is held to the cases read
from the vendored ggml-cuda (ggml-cuda.cu, ggml_cuda_mul_mat_id_needs_sync)."""
from __future__ import annotations

import re

import pytest

from conftest import random_tokens


@pytest.fixture(scope="module")
def device(rpc_servers) -> str:
    from glm5next_runtime import _core
    endpoint = rpc_servers.get("census")[0]
    _core.add_rpc_servers([endpoint])
    return next(d["name"] for d in _core.list_devices() if d["description"] == endpoint)


@pytest.fixture(scope="module")
def tiny_q8_0(checkpoints):
    return checkpoints.convert(checkpoints.make("census-tiny", "tiny", dtype="f32"), outtype="q8_0")


@pytest.fixture(scope="module")
def tiny_f32(checkpoints):
    return checkpoints.convert(checkpoints.make("census-tiny", "tiny", dtype="f32"), outtype="f32")


# (weight type, k, m, experts, experts per row, rows, compute capability) -> ggml-cuda synchronizes, read from the
# vendored ggml-cuda: MMVQ for quantized experts up to 8 rows (4 for q8_0 before Turing, not Volta), MMQ from Turing
# on (and with DP4A before Volta, or below 64 rows on Volta), MMF for float matrices of rows a multiple of 32, row
# lengths a multiple of 32 values per 4 bytes, within its row counts, on the type's tensor cores.
CUDA_RULE = [
    (("q8_0", 256, 64, 8, 2, 8, 900), False),    # MMVQ
    (("q8_0", 256, 64, 8, 2, 64, 900), False),   # MMQ
    (("q8_0", 256, 64, 8, 2, 5, 610), False),    # past Pascal's MMVQ (4 rows for q8_0): MMQ with DP4A
    (("q8_0", 256, 64, 8, 2, 5, 520), True),     # Maxwell: no MMQ for a quantized matrix, no MMF
    (("q8_0", 256, 64, 8, 2, 4, 520), False),    # ... but MMVQ up to 4 rows
    (("f32", 256, 24, 1, 1, 4, 900), True),      # mHC's hc_fn as one expert: 24 rows are no multiple of 32
    (("f32", 256, 64, 1, 1, 4, 900), False),     # MMF
    (("f32", 48, 64, 1, 1, 4, 900), True),       # a row of 48 f32 values
    (("f32", 256, 64, 1, 1, 4, 750), True),      # f32 tensor cores from Ampere on
    (("f16", 256, 64, 1, 1, 4, 750), False),     # f16 ones from Volta on
    (("f16", 64, 64, 1, 1, 4, 900), False),      # 64 f16 values per row: 32 x 4 / 2 bytes
    (("f16", 32, 64, 1, 1, 4, 900), True),
    (("bf16", 256, 64, 1, 1, 4, 800), False),
    (("bf16", 256, 64, 1, 1, 4, 750), True),
    (("f32", 256, 64, 8, 2, 512, 900), False),   # MMF takes up to 512 rows of a matrix of <= 1024 rows ...
    (("f32", 256, 64, 8, 2, 513, 900), True),
    (("f32", 256, 2048, 8, 2, 128, 900), False),  # ... and up to 128 of a larger one
    (("f32", 256, 2048, 8, 2, 129, 900), True),
]


@pytest.mark.parametrize("case, syncs", CUDA_RULE, ids=[str(c) for c, _ in CUDA_RULE])
def test_the_cuda_graph_rule_is_ggml_cudas(case, syncs):
    from glm5next_runtime import _testing
    assert _testing.cuda_mul_mat_id_needs_sync(*case) is syncs


def test_the_cuda_graph_rule_names_a_bad_type():
    from glm5next_runtime import _testing
    with pytest.raises(ValueError, match="unknown ggml type \"q9_9\""):
        _testing.cuda_mul_mat_id_needs_sync("q9_9", 256, 64, 8, 2, 4, 900)


def census_of_steps(path, cuda_cc: int = 900, **placement) -> dict:
    """The census of every graph kind that 1, 2 and 4 sequences batched run (their prompts in the same steps, as the
    server's scheduler runs them, in ubatches of 32 rows; then 6 rounds of 3 drafts: draft steps and 4-row verify
    passes; then 6 plain decode steps), on a model of 4 sequences' cells."""
    from glm5next_runtime import Model, _core
    first = Model(path, n_ctx=256, n_batch=32, n_threads=2, n_seq_max=4, draft_adaptive=False, **placement)
    models = [first] + [first.another_sequence() for _ in range(3)]
    first.engine.census_graphs(True, cuda_cc)
    for b in (1, 2, 4):
        for n_max in (3, 0):
            gens = [m.generator(n_max=n_max, adaptive=False, temperature=0, seed=0) for m in models[:b]]
            batch = _core.Batch(first.engine)
            for i, g in enumerate(gens):
                _core.Batch.start(g, random_tokens(40 + 8 * i, seed=30 + i), False)
            rounds = 0
            while rounds < 6:
                rounds += not any(g.prompting for g in gens)
                batch.set(gens, [64] * b, None)
                batch.begin()
                while batch.drafting:
                    batch.draft_step()
                batch.verify()
            for g in gens:
                g.finish()
    return first.engine.graph_census()


KINDS = ["decode 1 row", "decode 4 rows x 4 sequences", "verify 4 rows", "verify 16 rows x 4 sequences",
         "draft step 4 rows x 4 sequences", "prefill 32 rows"]


def test_a_device_declared_cuda_multiplies_plainly_and_keeps_cuda_graphs(tiny_q8_0, device, monkeypatch):
    """On plain RPC (a CPU behind it) a step's few-row products take the row-by-row route (one-matrix MUL_MAT_IDs);
    declared CUDA, no graph kind has one and none turns CUDA graphs off (the routed q8_0 experts take MMVQ / MMQ).
    Several sequences' decode, verify or draft-step rows there select and attend with one node set per DSA layer for
    all (BlockBuilder::attends_at_once, issue 48): each sequence adds a few nodes and no product (on plain RPC, where
    every sequence's indexer and attention are its own, 10 products and ~50 nodes)."""
    plain = census_of_steps(tiny_q8_0, n_gpu_layers=99, devices=[device])
    monkeypatch.setenv("GLM5NEXT_RPC_BACKEND", "CUDA")
    cuda = census_of_steps(tiny_q8_0, n_gpu_layers=99, devices=[device])
    assert set(KINDS) <= set(cuda) and set(KINDS) <= set(plain)
    assert plain["verify 4 rows"]["one_matrix_id"] > 0 and plain["decode 4 rows x 4 sequences"]["one_matrix_id"] > 0
    assert {k: (c["one_matrix_id"], c["cuda_graph_blockers"]) for k, c in cuda.items()} == {k: (0, 0) for k in cuda}
    for kind in ("decode 1 row", "verify 4 rows", "prefill 32 rows", "draft step 1 row"):
        assert cuda[kind]["products"] == plain[kind]["products"]  # the same products, routed plainly
    for one, four in (("decode 1 row", "decode 4 rows x 4 sequences"), ("verify 4 rows", "verify 16 rows x 4 sequences"),
                      ("draft step 1 row", "draft step 4 rows x 4 sequences")):
        assert cuda[four]["products"] == cuda[one]["products"] < plain[four]["products"], four
        assert cuda[four]["nodes"] - cuda[one]["nodes"] <= 3 * 25 < plain[four]["nodes"] - plain[one]["nodes"], four
    for kind, c in cuda.items():
        assert c["by_device"][device] > 0.95 * c["nodes"]  # run on the device
    # a generation's step reads its group's hidden rows and logits back once each, whatever its sequences
    assert cuda["decode 4 rows x 4 sequences"]["readbacks"] == plain["decode 4 rows x 4 sequences"]["readbacks"] == 2
    # a draft step's logits, z and (index sharing keeps it on the host) step 0's selection: each sequence's own on
    # plain RPC, the group's at once declared CUDA
    assert plain["draft step 4 rows x 4 sequences"]["readbacks"] == 2 + 4
    assert cuda["draft step 4 rows x 4 sequences"]["readbacks"] == 2 + 1


def test_a_step_of_several_prompts_on_a_gpu_backend_is_one_pass(tiny_q8_0, device, monkeypatch):
    """On plain RPC (and the CPU) each prompt of a step longer than 16 rows is a row group of its own: the trunk's
    blocks without caches run once per prompt, every weight read once per prompt, two graph splits each. Declared
    CUDA, every graph kind is one row group in 2 splits: each prompt of a step adds only its own attention's and
    indexer's products (each weight once), as each sequence's decode row does on plain RPC, and the step's rows stay
    within the engine's n_batch of 32 (llama.cpp's ubatch: the prompts share it)."""
    plain = census_of_steps(tiny_q8_0, n_gpu_layers=99, devices=[device])
    monkeypatch.setenv("GLM5NEXT_RPC_BACKEND", "CUDA")
    cuda = census_of_steps(tiny_q8_0, n_gpu_layers=99, devices=[device])
    assert plain["prefill 128 rows x 4 sequences"]["row_groups"] == 4
    assert plain["prefill 128 rows x 4 sequences"]["splits"] == 8
    assert {k: (c["row_groups"], c["splits"]) for k, c in cuda.items()} == {k: (1, 2) for k in cuda}
    prompts = cuda["prefill 32 rows x 4 sequences"]
    per_sequence = plain["decode 4 rows x 4 sequences"]["products"] - plain["decode 1 row"]["products"]
    assert prompts["parts"] == 4 and prompts["products"] - cuda["prefill 32 rows"]["products"] == per_sequence > 0
    rows = [int(re.search(r"(\d+) rows?", k).group(1)) for k in cuda if not k.startswith("draft")]
    assert max(rows) <= 32


def test_the_census_counts_the_cuda_graph_blockers_of_f32_experts_before_ampere(tiny_f32, device, monkeypatch):
    """f32 routed experts take ggml-cuda's MMF kernel only with Ampere's f32 tensor cores: at compute capability 7.5
    (Turing) each of their three MUL_MAT_IDs per MoE layer synchronizes, at 9.0 (Hopper) none does."""
    from glm5next_runtime import Model
    monkeypatch.setenv("GLM5NEXT_RPC_BACKEND", "CUDA")
    hopper = census_of_steps(tiny_f32, 900, n_gpu_layers=99, devices=[device])
    turing = census_of_steps(tiny_f32, 750, n_gpu_layers=99, devices=[device])
    hp = Model(tiny_f32, n_ctx=64, n_threads=1).hparams
    moe_layers = hp["n_trunk"] - hp["n_dense_lead"]
    assert all(c["cuda_graph_blockers"] == 0 for c in hopper.values())
    for kind in ("decode 1 row", "verify 4 rows", "decode 4 rows x 4 sequences", "prefill 32 rows x 4 sequences"):
        assert turing[kind]["cuda_graph_blockers"] == 3 * moe_layers, kind  # one row group: once per MoE layer


def test_the_census_counts_each_read_of_device_memory(tiny_q8_0, device):
    """A decode step of one sequence evaluated for inspection (Model.eval) reads its hidden row, its logits and its
    selection of every DSA layer back from the device (each read waits for it); a generation's decode step reads
    the hidden row and the logits alone (nothing reads its selections). On the CPU nothing is a device read."""
    from glm5next_runtime import Model
    prompt = random_tokens(30, seed=3)
    for placement, on_device in ((dict(n_gpu_layers=99, devices=[device]), True), (dict(devices=["none"]), False)):
        m = Model(tiny_q8_0, n_ctx=128, n_threads=2, spec_type="none", **placement)
        m.engine.census_graphs(True)
        m.eval(prompt)
        m.eval(prompt[:1])
        decode = m.engine.graph_census()["decode 1 row"]
        assert decode["readbacks"] == (2 + len(m.dsa_layers) if on_device else 0)
        assert decode["splits"] == (2 if on_device else 1)
        m.reset()
        g = m.generator(n_max=0, temperature=0)
        g.start(prompt)
        g.step()
        assert m.engine.graph_census()["decode 1 row"]["readbacks"] == (2 if on_device else 0)


def test_the_census_is_empty_until_asked_and_forgets_when_stopped(tiny_q8_0):
    from glm5next_runtime import Model
    m = Model(tiny_q8_0, n_ctx=64, n_threads=1, spec_type="none")
    m.eval(random_tokens(8, seed=1))
    assert m.engine.graph_census() == {}
    m.engine.census_graphs(True)
    m.eval(random_tokens(1, seed=2))
    assert set(m.engine.graph_census()) == {"decode 1 row"}
    m.engine.census_graphs(False)
    assert m.engine.graph_census() == {}
