"""Placement on real ggml devices (docs/runtime.md, placement): the devices are glm5next-rpc-server processes on
loopback, reached through ggml's registry, scheduler and buffers as a GPU would be. A placed model gives the
CPU-only logits and selections, greedy draft-MTP equals plain decoding on it, and the weights the plan puts on a
device are in that device's process."""
from __future__ import annotations

import numpy as np
import psutil
import pytest

from conftest import random_tokens

PROMPT = random_tokens(120, seed=21)  # index_topk is 16: 7x past it, so sparsity is exercised


@pytest.fixture(scope="module")
def devices(rpc_servers):
    """Two RPC devices (by endpoint); registered once per test process."""
    from glm5next_runtime import _core
    endpoints = [rpc_servers.get("devices-a")[0], rpc_servers.get("devices-b")[0]]
    _core.add_rpc_servers(endpoints)
    return endpoints


# How run() feeds the prompt: single rows before any pool is complete and while fewer than index_topk / kpool
# pools are candidates (attention over gathered rows, non-candidates masked), one large ubatch (one masked dense
# pass), a 4-row ubatch whose first rows cannot see the pool its last row completes (as a verify pass), single rows,
# and a large ubatch past max_dense_keys (75 keys here: it gathers, sparse prefill).
CHUNKS = [1] * 18 + [56, 4] + [1] * 2 + [40]


def run(model):
    """Logits of every row of PROMPT fed in CHUNKS, and each DSA layer's selections."""
    assert sum(CHUNKS) == len(PROMPT)
    model.reset()
    logits, selections, start = [], {}, 0
    for n in CHUNKS:
        logits.append(model.eval(PROMPT[start:start + n], logits_all=True))
        start += n
        for il in model.dsa_layers:
            selections.setdefault(il, []).extend(model.selected_positions(il))
    return np.concatenate(logits), selections


@pytest.fixture(scope="module")
def cpu_only(predictable_gguf):
    from glm5next_runtime import Model
    m = Model(predictable_gguf, n_ctx=256, n_threads=2)
    out = run(m)
    assert m.graph_splits == 1
    return out


def device_name(endpoint: str) -> str:
    from glm5next_runtime import _core
    return next(d["name"] for d in _core.list_devices() if d["description"] == endpoint)


PLACEMENTS = {
    "ngl-all": lambda a, b: dict(n_gpu_layers=99),
    "ngl-all-cpu-moe": lambda a, b: dict(n_gpu_layers=99, cpu_moe=True),
    "ngl-partial": lambda a, b: dict(n_gpu_layers=3),
    "override-tensor": lambda a, b: dict(override_tensor=[rf"blk\.[02]\.={a}", rf"attn_q_b={b}"]),
    "two-devices-ts": lambda a, b: dict(n_gpu_layers=99, devices=[a, b], tensor_split=[1, 1]),
    "trunk-on-device-draft-on-cpu": lambda a, b: dict(n_gpu_layers=99, devices=[a], draft_device="CPU"),
    "trunk-on-cpu-draft-on-device": lambda a, b: dict(devices=[a], draft_device=a),
}


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_placed_model_gives_the_cpu_logits_and_selections(predictable_gguf, devices, cpu_only, placement):
    from glm5next_runtime import Model
    a, b = (device_name(e) for e in devices)
    m = Model(predictable_gguf, n_ctx=256, n_threads=2, **PLACEMENTS[placement](a, b))
    placed = {dev for dev in m.placement().values() if dev != "CPU"}
    assert placed, "the plan puts something on a device"
    assert set(m.devices) == placed  # the plan that is printed is the plan that runs
    if placement == "two-devices-ts":
        assert placed == {a, b}
    logits, selections = run(m)
    trunk_placed = any(dev != "CPU" for name, dev in m.placement().items() if not name.startswith(f"blk.{m.hparams['n_trunk']}."))
    assert (m.graph_splits > 1) == trunk_placed  # the trunk's graph crossed devices iff trunk weights were placed
    want_logits, want_selections = cpu_only
    assert np.abs(logits - want_logits).max() <= 1e-5
    assert selections == want_selections


def test_a_device_declared_cuda_gives_the_cpu_logits_and_selections(predictable_gguf, devices, cpu_only, monkeypatch):
    """A GPU backend multiplies a ubatch's rows in one plain product (model/kernel_limits.h, multiplies_rows_alone),
    not row by row: declared CUDA, the CPU behind this RPC device takes tinyBLAS for the 4-row ubatch's products too
    (and its 56-row one's, as before). An f32 file's logits stay within 1e-4 of the CPU-only ones (the bound the
    placed path promises, docs/runtime.md) and every DSA layer selects the same keys."""
    from glm5next_runtime import Model
    monkeypatch.setenv("GLM5NEXT_RPC_BACKEND", "CUDA")
    m = Model(predictable_gguf, n_ctx=256, n_threads=2, n_gpu_layers=99, devices=[device_name(devices[0])])
    m.engine.census_graphs(True)
    logits, selections = run(m)
    assert m.engine.graph_census()["prefill 4 rows"]["one_matrix_id"] == 0  # the route this test is about
    want_logits, want_selections = cpu_only
    assert np.abs(logits - want_logits).max() <= 1e-4
    assert selections == want_selections


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_greedy_draft_mtp_equals_plain_decoding_when_placed(predictable_gguf, devices, placement):
    from glm5next_runtime import Model
    a, b = (device_name(e) for e in devices)
    m = Model(predictable_gguf, n_ctx=256, n_threads=2, spec_type="draft-mtp", draft_n_max=3, draft_adaptive=False,
              **PLACEMENTS[placement](a, b))  # fixed lengths: whether adaptive ones draft depends on timings
    plain = m.generate(PROMPT, max_tokens=60, temperature=0, spec_n_max=0).tokens
    spec = m.generate(PROMPT, max_tokens=60, temperature=0)
    assert spec.tokens == plain
    assert spec.metrics["n_accepted"] > 0  # the rounds really kept drafts


def test_device_process_holds_the_weights_placed_on_it(predictable_gguf, rpc_servers):
    """Measured from the server process (resident memory), not from our own accounting."""
    from glm5next_runtime import Model, _core
    endpoint, proc = rpc_servers.get("devices-memory")
    _core.add_rpc_servers([endpoint])
    name = device_name(endpoint)
    before = psutil.Process(proc.pid).memory_info().rss
    m = Model(predictable_gguf, n_ctx=256, n_threads=2, override_tensor=[rf"blk\.=" + name])
    placed = sum(t.nbytes for t in m.tensors() if m.placement()[t.name] == name)
    reported = next(r for r in m.memory() if r["device"] == name)
    grown = psutil.Process(proc.pid).memory_info().rss - before
    assert placed > 1 << 20 and reported["weights"] == placed  # the load report says what the plan placed
    # the process grew by those weights, plus at most the caches and compute buffers the report puts there
    ceiling = reported["weights"] + reported["caches"] + reported["compute"] + (2 << 20)
    assert 0.95 * reported["weights"] <= grown <= ceiling


def test_rpc_given_as_one_string(predictable_gguf, devices):
    from glm5next_runtime import Model
    m = Model(predictable_gguf, n_ctx=64, n_threads=1, rpc=devices[0], devices=[device_name(devices[0])], n_gpu_layers=1)
    assert m.devices == [device_name(devices[0])]


def test_sequences_of_one_model_share_the_placed_weights(predictable_gguf, rpc_servers):
    """Model.another_sequence (the server's slots) loads nothing again: the device process grows by the weights
    once, and each sequence decodes on its own caches with the same results."""
    from glm5next_runtime import Model, _core
    endpoint, proc = rpc_servers.get("devices-shared")
    _core.add_rpc_servers([endpoint])
    name = device_name(endpoint)
    m = Model(predictable_gguf, n_ctx=256, n_threads=2, override_tensor=[rf"blk\.=" + name])
    placed = sum(t.nbytes for t in m.tensors() if m.placement()[t.name] == name)
    before = psutil.Process(proc.pid).memory_info().rss
    others = [m.another_sequence() for _ in range(2)]
    grown = psutil.Process(proc.pid).memory_info().rss - before
    # two more sequences, less than one copy of the weights: caches and compute buffers only (on this 4-layer file
    # they are about the weights' size, ~0.45 MB of touched pages per sequence against 1.8 MB of weights, so the
    # bound says no copy was made, with a factor 2 either way)
    assert grown < placed
    a = m.generate(PROMPT, max_tokens=20, temperature=0)
    for o in others:
        assert o.devices == m.devices
        assert o.generate(PROMPT, max_tokens=20, temperature=0).tokens == a.tokens


@pytest.mark.parametrize("devices_arg,message", [(["NoSuchGpu0"], "unknown offload device"),
                                                 (["{a}", "{a}"], "given twice")])
def test_bad_device_list_names_the_culprit(predictable_gguf, devices, devices_arg, message):
    from glm5next_runtime import Model
    a = device_name(devices[0])
    with pytest.raises(ValueError, match=message):
        Model(predictable_gguf, n_ctx=64, n_threads=1, devices=[d.format(a=a) for d in devices_arg], n_gpu_layers=99)


@pytest.mark.parametrize("draft_on", ["trunk-device", "CPU"])
def test_separate_draft_file_is_placed_too(checkpoints, devices, draft_on):
    """-md: the draft file's NextN layer and output layer follow the same rules (-devd, the trunk's last layer)."""
    from glm5next_runtime import Model
    ckpt = checkpoints.make("spec-predictable", "predictable", dtype="f32")
    trunk = checkpoints.convert(ckpt, tag="-no-mtp", outtype="f32", layout="no-mtp")
    draft = checkpoints.convert(ckpt, tag="-mtp-only", outtype="f32", layout="mtp-only")
    a = device_name(devices[0])
    m = Model(trunk, n_ctx=256, n_threads=2, draft_model=draft, n_gpu_layers=99, devices=[a],
              draft_device=None if draft_on == "trunk-device" else "CPU", spec_type="draft-mtp", draft_n_max=3,
              draft_adaptive=False)
    nextn = {dev for name, dev in m.draft_placement().items() if name.startswith("blk.")}
    assert nextn == ({a} if draft_on == "trunk-device" else {"CPU"})
    plain = m.generate(PROMPT, max_tokens=40, temperature=0, spec_n_max=0).tokens
    spec = m.generate(PROMPT, max_tokens=40, temperature=0)
    assert spec.tokens == plain and spec.metrics["n_accepted"] > 0


@pytest.mark.parametrize("n_seq_max", [1, 3])
@pytest.mark.parametrize("placement, backend", [("ngl-all", "RPC"), ("ngl-all-cpu-moe", "RPC"), ("ngl-partial", "RPC"),
                                                ("ngl-all", "CUDA")])
def test_sequences_batched_on_a_placed_model_decode_as_alone(predictable_gguf, devices, placement, backend, n_seq_max,
                                                             monkeypatch):
    """The slots' rounds batched (glm5next_runtime/scheduler.py) on a model placed on devices: each sequence's part
    of a graph runs on the devices of its layers, with ggml's standard ops there. Those multiply several rows with
    the device's own kernels, which need not round as one row alone does (on the CPU a row's bits are its bits
    alone, graph/parts.h): here greedy tokens are held equal and log-probabilities close (f32). n_seq_max 1: the
    later sequences keep caches of their own; 3: all are cells of the engine's on the devices (runtime/cache_cells.h),
    as the server makes its slots. Declared CUDA, the device multiplies a step's rows in one plain product each
    (model/kernel_limits.h): the CPU behind it rounds them with tinyBLAS, not row by row."""
    from glm5next_runtime import Model
    from glm5next_runtime.scheduler import Scheduler
    monkeypatch.setenv("GLM5NEXT_RPC_BACKEND", backend)
    a, b = (device_name(e) for e in devices)
    first = Model(predictable_gguf, n_ctx=512, n_batch=32, n_threads=2, draft_adaptive=False, n_seq_max=n_seq_max,
                  **PLACEMENTS[placement](a, b))
    models = [first, first.another_sequence(), first.another_sequence()]
    prompts = [random_tokens(20 + 30 * i, seed=50 + i) for i in range(3)]

    def job(i: int):
        return models[i].generation(prompts[i], max_tokens=40, temperature=0, spec_n_max=3, cache_prompt=False,
                                    logprobs=1)

    want = [job(i).run_to_end() for i in range(3)]
    scheduler = Scheduler(64).start()
    try:
        got = [h.stream.finish() for h in [scheduler.submit(job(i)) for i in range(3)]]
    finally:
        scheduler.close()
    assert max(scheduler.rows_per_step) == 3
    for g, w in zip(got, want):
        assert g.tokens == w.tokens
        assert np.abs(np.array([e.logprob for e in g.logprobs]) - [e.logprob for e in w.logprobs]).max() <= 1e-4
        # the draft head batched (declared CUDA in cells: every sequence's selection at once) drafts as alone
        assert (g.metrics["n_drafted"], g.metrics["n_accepted"]) == (w.metrics["n_drafted"], w.metrics["n_accepted"])


def loopback_bytes() -> int:
    """Bytes through the loopback interface so far (/proc/net/dev), both directions of every connection on it."""
    for line in open("/proc/net/dev"):
        if line.strip().startswith("lo:"):
            return int(line.split(":")[1].split()[0])
    raise RuntimeError("no loopback interface in /proc/net/dev")


def test_a_rejected_draft_rolls_the_kda_state_back_on_the_device(checkpoints, rpc_servers):
    """Issue 26 item 1: a round whose drafts are all rejected puts every KDA layer back to its snapshot where the
    layer lives (the verify pass's snapshots stay on the device: ggml's buffer copy, one COPY_TENSOR per tensor over
    RPC). Counted from the connection: the bytes through loopback per round stay under a quarter of the placed
    layers' KDA state (the state went to the host and back before: bench preset 11.2 MiB per round, 2.3x its
    states; 0.9 MiB after), and the tokens are plain decoding's."""
    from glm5next_runtime import Model, _core
    endpoint, _ = rpc_servers.get("devices-rollback")
    _core.add_rpc_servers([endpoint])
    name = device_name(endpoint)
    # a random NextN head (every draft rejected) and wide KDA states (32 heads x 128: 2 MiB per layer)
    ckpt = checkpoints.make("rollback-wide-kda", "tiny", dtype="f32", num_attention_heads=32, linear_head_dim=128)
    m = Model(checkpoints.convert(ckpt, outtype="f32"), n_ctx=256, n_threads=1, devices=[name], n_gpu_layers=99,
              draft_adaptive=False)
    kda = [il for il, kv in enumerate(m.hparams["head_count_kv"][: m.hparams["n_trunk"]]) if kv == 0]
    state_bytes = len(kda) * sum(a.nbytes for a in m.sequence.kda_state(kda[0]).values())
    g = m.generator(n_max=3, adaptive=False, temperature=0.0, seed=0)
    tokens = [g.start(PROMPT)] + g.step()
    before, rounds = loopback_bytes(), 8
    for _ in range(rounds):
        tokens += g.step()
    per_round = (loopback_bytes() - before) / rounds
    assert g.stats["accepted_at"][0] < g.stats["drafted_at"][0]  # rounds rejected drafts: rollbacks ran
    assert per_round < state_bytes / 4, (per_round, state_bytes)
    plain = Model(m.path, n_ctx=256, n_threads=1, devices=["none"], spec_type="none")
    assert plain.generate(PROMPT, max_tokens=len(tokens), temperature=0).tokens == tokens


@pytest.mark.parametrize("head_dim, pinned", [(24, True), (16, False)])
def test_a_kda_head_size_the_device_kernel_lacks_runs_on_the_cpu(checkpoints, devices, monkeypatch, head_dim, pinned):
    """ggml-cuda's gated_delta_net is built for head sizes 16, 32, 64 and 128 and aborts on another, though it claims
    the op (model/kernel_limits.h). With the RPC servers declared CUDA (GLM5NEXT_RPC_BACKEND), a fully offloaded
    model of head size 24 runs KDA's recurrence on the CPU (more graph splits than placed as plain RPC), says so, and
    gives the CPU-only logits; one of head size 16 keeps it on the device."""
    from glm5next_runtime import Model
    path = checkpoints.convert(checkpoints.make(f"kda-head-{head_dim}", "tiny", linear_head_dim=head_dim), outtype="f32")
    device = device_name(devices[0])
    prompt = random_tokens(40, seed=5)

    def run(m):
        return m.eval(prompt, logits_all=True), m.eval(prompt[:1]), m.graph_splits  # a prompt, then a decode row

    cpu = run(Model(path, n_ctx=128, n_threads=2))
    plain = Model(path, n_ctx=128, n_threads=2, n_gpu_layers=99, devices=[device])
    monkeypatch.setenv("GLM5NEXT_RPC_BACKEND", "CUDA")
    cuda = Model(path, n_ctx=128, n_threads=2, n_gpu_layers=99, devices=[device])
    assert plain.engine.cpu_pinned_ops == []
    assert len(cuda.engine.cpu_pinned_ops) == (1 if pinned else 0)
    if pinned:
        assert f"{device}: KDA's gated_delta_net (head size 24) runs on the CPU" in cuda.engine.cpu_pinned_ops[0]
    got, want = run(cuda), run(plain)
    assert (got[2] > want[2]) == pinned  # the decode graph crossed to the CPU and back once more per KDA layer
    for ours, theirs in zip(got[:2], cpu[:2]):
        assert np.abs(ours - theirs).max() <= 1e-5


@pytest.mark.parametrize("head_dim, pinned", [(24, True), (16, False)])
def test_a_step_over_cells_keeps_kda_on_the_cpu_where_the_device_kernel_lacks_its_head_size(checkpoints, devices,
                                                                                            monkeypatch, head_dim,
                                                                                            pinned):
    """The same pin when two sequences' KDA states are gathered from the engine's cells and run as one gated delta
    rule (csrc/runtime/cache_cells.h): a batched decode step of head size 24 on a device declared CUDA crosses to the
    CPU for it (more splits than placed as plain RPC), and the tokens are the CPU-only ones."""
    from glm5next_runtime import Model, _core
    path = checkpoints.convert(checkpoints.make(f"kda-head-{head_dim}", "tiny", linear_head_dim=head_dim), outtype="f32")
    device = device_name(devices[0])
    prompts = [random_tokens(20, seed=6), random_tokens(20, seed=7)]

    def run(**placement):
        first = Model(path, n_ctx=128, n_threads=2, n_seq_max=2, spec_type="none", **placement)
        gens = [m.generator(n_max=0, temperature=0, seed=0) for m in (first, first.another_sequence())]
        batch = _core.Batch(first.engine)
        for g, p in zip(gens, prompts):
            _core.Batch.start(g, p, False)
        tokens = [[], []]
        for _ in range(6):  # the prompts (in equal ubatches: the checkpoint plan cuts the last 4 rows), then decodes
            batch.set(gens, [100, 100], None)
            batch.begin()
            batch.verify()
            for i in range(2):
                tokens[i] += batch.emitted(i)
        return tokens, first.graph_splits

    cpu = run()
    plain = run(n_gpu_layers=99, devices=[device])
    monkeypatch.setenv("GLM5NEXT_RPC_BACKEND", "CUDA")
    cuda = run(n_gpu_layers=99, devices=[device])
    assert (cuda[1] > plain[1]) == pinned
    assert cuda[0] == plain[0] == cpu[0] and all(len(t) >= 4 for t in cpu[0])


@pytest.mark.parametrize("preset", ["notail", "kpool8"])
def test_a_dense_ubatchs_mask_made_on_the_device_gives_the_cpu_logits_and_selections(checkpoints, devices, preset):
    """kpool_mask_std (graph/select_std.h) against the CPU's kpool_mask: without the tail (early rows select no key:
    their output is zero either way) and with pools of 8 rows, a prompt ubatch of more rows than kGatherMaxRows
    within max_dense_keys attends densely on the device, in 2 graph splits, with the CPU-only logits and pools."""
    from glm5next_runtime import Model
    path = checkpoints.convert(checkpoints.make(f"dense-mask-{preset}", preset, dtype="f32"), outtype="f32")
    prompt = random_tokens(60, seed=8)

    def run(m):  # ubatches of 40 and 60 rows from position 0: max_dense_keys is 63 (notail) and 91 (kpool8)
        logits, selections = [], []
        for n in (40, 60):
            m.reset()
            logits.append(m.eval(prompt[:n], logits_all=True))
            selections.append([m.selected_positions(il) for il in m.dsa_layers])
        return logits, selections, m.graph_splits

    cpu = Model(path, n_ctx=128, n_threads=2)
    placed = Model(path, n_ctx=128, n_threads=2, n_gpu_layers=99, devices=[device_name(devices[0])])
    (want, want_sel, _), (got, got_sel, splits) = run(cpu), run(placed)
    assert splits == 2
    for ours, theirs in zip(got, want):
        assert np.abs(ours - theirs).max() <= 1e-5
    assert got_sel == want_sel


@pytest.fixture(scope="module")
def wide_k4_q8_0(checkpoints):
    """A q8_0 file whose logits move by units for a last-bit change upstream (hidden 1024, 4 experts a token): its
    activations' q8_0 rounding carries one (the bench preset behaves so too)."""
    ckpt = checkpoints.make("route-k4", "tiny", dtype="f32", hidden_size=1024, num_experts_per_tok=4)
    return checkpoints.convert(ckpt, outtype="q8_0")


def test_greedy_draft_mtp_equals_plain_decoding_on_a_device_bit_for_bit(wide_k4_q8_0, devices):
    """A device multiplies a verify pass's rows one by one, as its decode steps (BlockBuilder::mm), so that a row's
    logits do not depend on the rows beside it there either: before, ggml's multi-row product on the device rounded
    differently, and on this file greedy draft-MTP parted from plain decoding (seed 22)."""
    from glm5next_runtime import Model
    m = Model(wide_k4_q8_0, n_ctx=256, n_threads=2, n_gpu_layers=99, devices=[device_name(devices[0])],
              spec_type="draft-mtp", draft_n_max=3, draft_adaptive=False)
    for seed in (21, 22, 23):
        prompt = random_tokens(60, seed=seed)
        plain = m.generate(prompt, max_tokens=80, temperature=0, spec_n_max=0, cache_prompt=False).tokens
        assert m.generate(prompt, max_tokens=80, temperature=0, cache_prompt=False).tokens == plain, seed


def test_a_placed_model_routing_several_experts_gives_the_cpu_logits(wide_k4_q8_0, devices):
    """A device routes with ggml's standard ops (sigmoid, argsort top-k, get_rows, sum_rows); the CPU with this
    project's op (graph/select_ops.h). Their weights must agree to the bit: from 3 experts per token a sum rounded
    differently changes a weight's last bit, and a q8_0 file's activation rounding carries that to the logits
    (0.024 here, 2.6 on the bench preset, before the CPU op summed as ggml does)."""
    from glm5next_runtime import Model
    path = wide_k4_q8_0
    prompt = random_tokens(24, seed=9)
    cpu = Model(path, n_ctx=128, n_threads=2).eval(prompt, logits_all=True)
    placed = Model(path, n_ctx=128, n_threads=2, n_gpu_layers=99, devices=[device_name(devices[0])])
    assert np.abs(placed.eval(prompt, logits_all=True) - cpu).max() <= 1e-5


def test_a_fully_offloaded_round_stays_on_the_device(predictable_gguf, devices):
    """Issue 26's splits: on a model placed whole on a device, a dense prompt ubatch (its mask made there,
    kpool_mask_std), a sparse-prefill ubatch, a decode token, every draft step (a shared one reads step 0's pools
    with ggml's standard ops there, graph/select_std.h) and a verify pass run in 2 graph splits (the token
    embeddings' rows come from the CPU, the logits go back); before, a shared step took 6 (its rows and mask from
    this project's CPU ops) and a dense ubatch 8 (its mask)."""
    from glm5next_runtime import Model
    m = Model(predictable_gguf, n_ctx=256, n_threads=2, n_gpu_layers=99, devices=[device_name(devices[0])],
              spec_type="draft-mtp", draft_n_max=3, draft_adaptive=False)
    m.eval(PROMPT[:56])  # more than kGatherMaxRows rows, up to max_dense_keys (75 here): one dense pass
    assert m.graph_splits == 2
    m.reset()
    m.eval(PROMPT)  # past max_dense_keys: sparse prefill gathers on the device
    assert m.graph_splits == 2
    m.reset()
    g = m.generator(n_max=3, temperature=0)
    g.start(PROMPT)
    for _ in range(3):
        g.step(1)  # one token: no drafts
        assert m.graph_splits == 2
        g.begin_draft()
        steps = [m.graph_splits]
        while g.draft_next() >= 0:
            steps.append(m.graph_splits)
        assert len(steps) == 4 and steps == [2] * 4
        g.verify(3)
        assert m.graph_splits == 2
