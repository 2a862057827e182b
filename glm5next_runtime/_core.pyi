"""
Native core of glm5next_runtime (ggml via llama-cpp-python's shared libraries).
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import typing
__all__: list[str] = ['Batch', 'DraftChain', 'DraftLengthPolicy', 'Engine', 'Generator', 'Model', 'ModelError', 'RoundCostPrior', 'Sampler', 'Seq', 'add_rpc_servers', 'ggml_commit', 'ggml_version', 'list_devices', 'read_hparams', 'selected_rows', 'serve_rpc', 'system_info']
class ModelError(ValueError):
    pass
class Model:
    """
    A glm5next GGUF loaded for inference (metadata + memory-mapped weights).
    
    Both architecture spellings load ("glm5next" and "glm5-next"). Weights stay in a read-only mapping of the
    file; nothing is copied.
    """
    def __init__(self, path: str, override_kv: collections.abc.Sequence[str] = [], use_mmap: bool = True, use_mlock: bool = False) -> None:
        """
        Load the GGUF at `path`.
        
        Args:
            path: str, path of a .gguf file (combined, trunk-only or draft-only layout).
            override_kv: list of str, llama.cpp --override-kv "KEY=TYPE:VALUE" (TYPE int, float, bool or str; bool
                values true/false; one str may hold several, comma-separated, as llama.cpp allows: a comma separates
                only where "KEY=TYPE:" follows, so str values may hold commas), applied in order before any
                hyper-parameter is read or checked. KEY may use
                either arch prefix ("glm5next." or "glm5-next."). An int/float override of an existing key keeps
                its stored type (range-checked).
            use_mmap: bool, map the file and fault every page in at load (as llama.cpp prefetches; the pages are the page
                cache's, shared); False: read it into anonymous memory (llama.cpp's --no-mmap).
            use_mlock: bool, lock the weights' pages in RAM (llama.cpp's --mlock); `locked` says whether it held.
        
        Raises:
            ModelError (a ValueError): the file is missing, not GGUF, truncated or corrupt; the architecture is
                not glm5next/glm5-next; a required key is missing or of the wrong type; a value is inconsistent
                (e.g. nextn_predict_layers >= block_count, kpool <= 1 or not dividing top_k); a required tensor
                is missing or mis-shaped; an override is malformed or does not fit its key. The message names the
                file and the key, tensor or override.
        """
    def metadata(self, key: str) -> typing.Any:
        """
        metadata(key) -> value of GGUF key `key` after overrides: int, float, bool, str (bytes if not UTF-8) or a list of those. `key` may use either arch prefix. Raises KeyError when absent.
        """
    def place(self, device_of: collections.abc.Mapping[str, str]) -> None:
        """
        place(device_of: dict[str, str]) -> None: copy the named weights from the mapping into a weight buffer of the named ggml device (e.g. {'blk.3.attn_output.weight': 'RPC0'}); the rest stay memory-mapped on the CPU. Call once, before an Engine is made on the model. Raises ModelError (ValueError) for an unknown tensor or device or a buffer that cannot be allocated.
        """
    def tensor_data(self, name: str) -> numpy.ndarray:
        """
        tensor_data(name) -> read-only numpy uint8 array [nbytes]: the tensor's bytes in the mapping (no copy; keeps the model alive). Raises KeyError for an unknown name.
        """
    def tensor_table(self) -> list:
        """
        tensor_table() -> list of (name: str, shape: list of int in ggml order (trailing 1s dropped), required: bool): every tensor the loader looked for under this file's hyper-parameters (docs/gguf.md, Tensors); a file holds all required ones and may hold the others.
        """
    def tensors(self) -> list:
        """
        tensors() -> list of (name: str, ggml type name: str, shape: list of int in ggml order (ne[0] first, trailing 1s dropped), nbytes: int), in file order.
        """
    def vocab(self) -> tuple:
        """
        vocab() -> (tokens, token_types, merges, special_ids).
        
        tokens: list[str] ([n_vocab]; bytes for a token that is not UTF-8), token_types: list[int] (llama.cpp types:
        1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), merges: list[str] ("left right"; bytes for one
        that is not UTF-8),
        special_ids: dict with those of bos, eos, eot, eom, unk, pad that the file sets.
        Raises ModelError (ValueError) when the file has no tokenizer.
        """
    @property
    def arch(self) -> str:
        """
        str: general.architecture as stored ('glm5next' or 'glm5-next').
        """
    @property
    def chat_template(self) -> typing.Any:
        """
        str or None: tokenizer.chat_template (jinja2), None when absent.
        """
    @property
    def devices(self) -> list[str]:
        """
        list[str]: the devices other than the CPU that hold weights after place().
        """
    @property
    def draft_only(self) -> bool:
        """
        bool: the file holds only the NextN (draft) layer, no trunk layers.
        """
    @property
    def hparams(self) -> dict:
        """
        dict: every hyper-parameter (HParams in csrc/model/hparams.h) after overrides.
        
        Keys: arch, n_vocab, n_embd, n_ff, n_ctx_train, n_layer_all, n_nextn, n_trunk, n_head, head_count_kv (list of
        int, [n_layer_all], 0 = KDA layer), rms_eps, ln_eps, q_lora_rank, kv_lora_rank, head_k_mla, head_v_mla,
        idx_n_head, idx_head_dim, idx_top_k, idx_kpool, idx_select_tail, idx_full (list of bool, [n_trunk]),
        index_share_mtp, n_dense_lead, n_expert, n_expert_used, n_expert_shared, n_expert_groups, n_group_used,
        n_ff_exp, expert_weights_scale, expert_weights_norm, swiglu_clamp_exp / swiglu_clamp_shexp (list of float,
        [n_layer_all], 0 = no clamp), ssm_conv_kernel, kda_head_dim, has_kda_lower_bound, kda_lower_bound, hc_mult,
        hc_sinkhorn_iters, hc_eps. Floats are the stored f32 values widened to Python floats.
        """
    @property
    def kv_overrides(self) -> list[tuple[str, str, str]]:
        """
        list of (key, type, value) str tuples: the --override-kv entries applied at load, in
        order, each key spelled as the file's architecture spells it (glm5next. or glm5-next.), type int, float, bool or str,
        value as given (what llama.cpp's kv_overrides takes, typed).
        """
    @property
    def lock_error(self) -> str:
        """
        str: why mlock failed (its errno's text; '' when it held or was not asked).
        """
    @property
    def locked(self) -> bool:
        """
        bool: use_mlock was asked and the weights' pages are locked in RAM.
        """
    @property
    def n_vocab(self) -> int:
        """
        int: vocabulary size.
        """
    @property
    def path(self) -> str:
        """
        str: the path the model was loaded from.
        """
class Engine:
    """
    What the sequences of one loaded model share: the weights, the devices, the
    graphs kept for reuse and one CPU thread pool (csrc/runtime/engine.h). Sequences (_core.Seq) are made on it;
    their rows run in its graphs, one sequence's alone or several sequences' together (_core.Batch).
    """
    def __init__(self, model: Model, n_batch: typing.SupportsInt | typing.SupportsIndex = 512, n_threads: typing.SupportsInt | typing.SupportsIndex = 0, draft_type: str = 'auto', draft_model: Model = None, n_verify_rows: typing.SupportsInt | typing.SupportsIndex = 4, n_seq_max: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        Engine(model: _core.Model, n_batch: int (rows per ubatch of a sequence), n_threads: int = 0 (all cores), draft_type: str = 'auto' (the draft layer as stored) | 'q8_0' | 'q4_0' (requantized at load, once for every sequence), draft_model: _core.Model | None (a separate --mtp-only file with the NextN layer), n_verify_rows: the rows of verify passes and draft steps the compute buffers are sized for at load (draft n_max + 1; longer ones grow them on first use), n_seq_max: the sequences whose caches (trunk and NextN layer) are cells of the engine's (llama.cpp's n_seq_max, the server's -np; csrc/runtime/cache_cells.h): their rows in one step write their caches and run KDA per layer at once; more sequences may be made, whose rows run per sequence).
        Raises ValueError for a draft-only file as model, n_batch or n_seq_max of 0, a bad draft_type, or a draft file that does not fit the model; RuntimeError when a device cannot hold the cells.
        """
    def census_graphs(self, on: bool, cuda_cc: typing.SupportsInt | typing.SupportsIndex = 900) -> None:
        """
        Take the census of every graph run from now on (runtime/graph_census.h), CUDA-graph blockers counted for NVIDIA compute capability cuda_cc (major * 100 + minor * 10; default 900, Hopper). False stops and forgets. One pass over each run's nodes: for benchmarks and tests.
        """
    def graph_census(self) -> dict:
        """
        graph_census() -> {graph kind: dict(nodes, by_device={device: nodes}, splits, row_groups, parts, products, one_matrix_id, cuda_graph_blockers, readbacks)}: the last graph run of each kind (graph_kind in runtime/op_profile.h) since census_graphs was turned on. nodes: compute nodes (no views); products: MUL_MAT, MUL_MAT_ID and the rows kernels; one_matrix_id: MUL_MAT_ID over one matrix (the CPU's row-by-row route); cuda_graph_blockers: MUL_MAT_ID nodes on a CUDA device (or an RPC one declared so by GLM5NEXT_RPC_BACKEND) that take ggml-cuda's synchronizing fallback; readbacks: reads of device memory per run (each waits for the device). Empty while off.
        """
    def memory(self) -> list:
        """
        memory() -> list of dict(device, weights, caches, compute) in bytes, one per device that holds any, the CPU last: llama.cpp's load report. caches: every sequence's on the engine and the cache cells no sequence has taken (n_seq_max); compute: the schedulers' buffers (sized at load for a full ubatch at the end of the first sequence's context, grown by the graphs run since), once for all sequences.
        """
    def op_profile(self) -> dict:
        """
        op_profile() -> {graph kind: dict(runs, ops={op: (ms, nodes)})}: what profile_ops timed since it was turned on, summed over the runs of each kind of graph ("decode 1 row", "verify 2 rows", "draft step 1 row, reused selection", "prefill 512 rows", "decode 4 rows x 4 sequences"; graph_kind in runtime/op_profile.h); ops by ggml op name, a product with its weight's type ("MUL_MAT q8_0"). Empty while off.
        """
    def profile_ops(self, on: bool) -> None:
        """
        Time every node of every graph run from now on, by graph kind and op (each node runs alone: compute is slower while on, the shares are what to read; for benchmarks). False stops and forgets the times. ValueError to turn it on while profile_traffic is on (one timer at a time).
        """
    def profile_traffic(self, on: bool) -> None:
        """
        Measure bytes copied and copy time of every graph run from now on (slows compute: each device syncs after every node; for benchmarks). ValueError to turn it on while profile_ops is on.
        """
    def traffic(self) -> dict:
        """
        traffic() -> dict(splits, bytes_copied, copy_seconds) of the last graph run: bytes the scheduler copied between devices and the seconds those copies took, measured only while profile_traffic is on (else 0 and -1).
        """
    @property
    def cpu_pinned_ops(self) -> list[str]:
        """
        list[str]: the ops that run on the CPU although their layer is placed on a device, because that device's kernel cannot take this model's shapes (one line each, for the load report; model/kernel_limits.h). For an RPC device the backend behind it is $GLM5NEXT_RPC_BACKEND, else unknown (then nothing is pinned).
        """
    @property
    def draft_requantized(self) -> dict[str, str]:
        """
        The draft layer's tensors requantized at load (draft_type q8_0 / q4_0): GGUF name -> ggml type name.
        """
    @property
    def has_draft_head(self) -> bool:
        ...
    @property
    def n_graphs_built(self) -> int:
        """
        Graphs built and allocated since load; a ubatch of the last graph's shape reuses it.
        """
    @property
    def n_splits(self) -> int:
        """
        Graph splits of the last graph run (1: every op ran on one device).
        """
class Seq:
    """
    One sequence (llama.cpp's seq) on an Engine: its tokens, the trunk's and the
    NextN layer's caches sized for n_ctx rows, its context checkpoints (csrc/runtime/sequence.h; named Seq here, not
    Sequence, which type checkers take for typing.Sequence). Its own calls run graphs of it alone, in ubatches.
    """
    def __init__(self, engine: Engine, n_ctx: typing.SupportsInt | typing.SupportsIndex = 4096, n_checkpoints: typing.SupportsInt | typing.SupportsIndex = 32, checkpoint_every: typing.SupportsInt | typing.SupportsIndex = 8192, draft_rows: bool = True, cache_type: str = 'f16') -> None:
        """
        Seq(engine: _core.Engine, n_ctx: int, n_checkpoints: context checkpoints kept (llama-server's --ctx-checkpoints; 0 = none), checkpoint_every: while prefilling, a checkpoint each time n_past crosses a multiple of it (tokens), draft_rows: the NextN layer's caches, for drafting (False: none, as without a NextN layer; has_draft_head then False), cache_type: the attention caches' rows (MLA latent, indexer keys and gates), 'f16' (llama.cpp's default), 'bf16', 'f32', 'q8_0' or 'q4_0'; pooled keys and KDA states stay f32).
        Raises ValueError for n_ctx out of [1, 2^24], checkpoint_every of 0, another cache_type or a quantized one for widths that are not whole blocks of 32, RuntimeError when a device cannot hold the caches.
        """
    def checkpoint_stats(self) -> dict:
        """
        checkpoint_stats() -> dict(count, bytes, rows, bytes_each, max_count): the context checkpoints kept, the host memory they take (bytes), the sequence length each resumes at, the size of one and the most kept.
        """
    def commit(self, n_keep: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Keep the first n_keep rows of the pending verify pass (1 <= n_keep <= its rows): KDA states and
        conv windows roll back to row n_keep-1's snapshot, later attention rows are dropped. Raises RuntimeError without
        a pending verify pass or for n_keep out of range.
        """
    def draft_rows(self, hidden: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], next_tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], pos0: typing.SupportsInt | typing.SupportsIndex, saved_pools: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] | None = None, saved_p0: typing.SupportsInt | typing.SupportsIndex = -1) -> dict:
        """
        Write NextN draft rows (hidden[i], next_tokens[i]) at positions pos0.. of the draft cache.
        
        hidden: float32 [n, n_embd] (trunk post-norm states, or the previous step's z); next_tokens: n ids x_{p+1}.
        saved_pools (with saved_p0 < pos0, n == 1): attend exactly the selection row saved_p0 made (index sharing).
        Returns a dict for the last row: "logits" float32 [n_vocab], "z" float32 [n_embd], "pools" int32 [index_topk/kpool].
        Raises ValueError without a NextN layer, for a gap after the rows written, or past n_ctx.
        """
    def eval(self, tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], logits_all: bool = False) -> dict:
        """
        Append `tokens` (list of ids) to the sequence and run the trunk over them.
        
        Returns a dict: "logits" float32 [n_tokens or 1, n_vocab], "hidden" float32 [n_tokens, n_embd] (post-norm),
        "pools" {DSA layer: int32 [n_tokens, index_topk / kpool]} the chosen indexer pools per row (-1 = none; shared
        layers report the full layer's choice they reuse).
        Raises ValueError for no tokens, an id outside the vocabulary, or more tokens than the context has left.
        """
    def kda_state(self, layer: typing.SupportsInt | typing.SupportsIndex) -> dict:
        """
        Copies of KDA layer `layer`'s caches: conv float32 [3*inner, K-1], state float32 [n_head, d, d].
        """
    def load_state(self, data: bytes) -> None:
        """
        load_state(data: bytes): replace the sequence with one save_state returned (by this sequence or another of the same model); a prompt sharing a prefix with it then resumes from it. Raises ValueError, naming what is wrong and keeping the sequence as it was, for bytes that are not a saved sequence, a damaged one, one of another model or one longer than n_ctx.
        """
    def reset(self) -> None:
        """
        Forget the sequence (caches cleared, n_past = 0).
        """
    def save_state(self) -> bytes:
        """
        save_state() -> bytes: the whole sequence (tokens, the trunk's and the NextN layer's cache rows, context checkpoints; csrc/runtime/sequence_state.h), for load_state on a sequence of the same model.
        """
    def verify(self, tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> dict:
        """
        The verify pass of a draft-MTP round over `tokens` (one ubatch), as provisional rows. Returns
        "logits" float32 [n, n_vocab] and "hidden" float32 [n, n_embd] of every row. commit(n_keep) must follow before
        anything else runs on the sequence. Raises ValueError for rows that do not fit one ubatch or the context.
        """
    @property
    def cache_bytes(self) -> int:
        """
        Memory of its caches (trunk and NextN layer), bytes.
        """
    @property
    def cache_cell(self) -> int:
        """
        The engine's cell its trunk caches are views of (0 .. n_seq_max-1), or -1: caches of its own (every cell was taken when it was made, or the cells are of another n_ctx or cache type).
        """
    @property
    def cache_type(self) -> str:
        """
        The attention caches' row type: 'f16', 'bf16' or 'f32'.
        """
    @property
    def engine(self) -> Engine:
        """
        The engine it runs on.
        """
    @property
    def has_draft_head(self) -> bool:
        ...
    @property
    def n_ctx(self) -> int:
        """
        Rows its caches hold.
        """
    @property
    def n_past(self) -> int:
        """
        Tokens in the sequence.
        """
    @property
    def tokens(self) -> list[int]:
        """
        The sequence's tokens (one per trunk row), a copy.
        """
class DraftChain:
    """
    The NextN draft steps of one round (docs/runtime.md,
    draft-MTP round, step 1): begin() writes the draft-head rows up to step 0; each next(token) is the following
    step on (z of the step before, token). With share=True steps >= 1 attend exactly step 0's selection (index
    sharing); with share=False each runs the head's own indexer. The caller picks the tokens.
    """
    def __init__(self, sequence: Seq, share: bool) -> None:
        """
        Raises ValueError when the sequence's engine has no draft head.
        """
    def begin(self, hidden: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], next_tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], pos0: typing.SupportsInt | typing.SupportsIndex) -> dict:
        """
        Step 0: write rows (hidden[i], next_tokens[i]) at positions pos0.. of the draft cache (hidden
        float32 [n, n_embd], trunk post-norm states; the last row is step 0). Returns "logits" float32 [n_vocab], "z"
        float32 [n_embd], "pools" int32 [index_topk / kpool] of step 0.
        """
    def next(self, token: typing.SupportsInt | typing.SupportsIndex) -> dict:
        """
        The next step on (z of the step before, token); returns its logits, z and pools (the saved ones when it reuses step 0's selection). Raises RuntimeError before begin().
        """
    @property
    def selection_pos(self) -> int:
        """
        The position whose selection the current step attends: p0 for shared steps, else its own row.
        """
    @property
    def step(self) -> int:
        """
        The step whose output is current (0 after begin).
        """
class Sampler:
    """
    Token sampler of one sequence (it owns the RNG: one seed fixes a generation).
    
    Temperature <= 0 is greedy (argmax, ties to the lowest id). Otherwise the filters run in this order on
    softmax(logits / temperature), each on the survivors of the previous one renormalized: top_k (0 = off),
    top_p (1 = off), min_p (0 = off, relative to the most probable token); then renormalize and draw.
    """
    def __init__(self, temperature: typing.SupportsFloat | typing.SupportsIndex = 0.800000011920929, top_k: typing.SupportsInt | typing.SupportsIndex = 40, top_p: typing.SupportsFloat | typing.SupportsIndex = 0.949999988079071, min_p: typing.SupportsFloat | typing.SupportsIndex = 0.05000000074505806, seed: typing.Any = None) -> None:
        """
        Sampler(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=None (random)).
        Raises ValueError for top_k < 0, top_p outside (0, 1], min_p outside [0, 1], a NaN temperature or a
        seed outside [0, 2**64).
        """
    def accept_draft(self, p: typing.Any, q: typing.Any, token: typing.SupportsInt | typing.SupportsIndex) -> bool:
        """
        Speculative sampling: accept draft `token` (drawn from q) with probability min(1, p[token] / q[token]).
        On rejection take sample_residual(p, q); the emitted tokens are then distributed exactly as p.
        p, q: float32 [n_vocab] (target and draft distributions). Raises ValueError for another dtype or
        shape, sizes that differ, or a token outside [0, n_vocab).
        """
    def distribution(self, logits: typing.Any) -> numpy.typing.NDArray[numpy.float32]:
        """
        float32 [n_vocab]: the filtered, normalized distribution sample() draws from (0 for filtered-out
        tokens; one-hot at the argmax when greedy). Raises as sample().
        """
    def sample(self, logits: typing.Any) -> int:
        """
        A token id drawn from distribution(logits). logits: float32 [n_vocab].
        Raises ValueError for another dtype or shape, a NaN logit or a maximum that is not finite.
        """
    def sample_from(self, p: typing.Any) -> int:
        """
        A token id drawn from p (float32 [n_vocab], non-negative, positive sum; need not be normalized) with
        this sampler's RNG. Raises ValueError for another dtype or shape or no positive entry.
        """
    def sample_residual(self, p: typing.Any, q: typing.Any) -> int:
        """
        A token id from norm(max(p - q, 0)), or from p where that is all zero. Raises as accept_draft.
        """
    @property
    def min_p(self) -> float:
        ...
    @property
    def seed(self) -> int:
        """
        The seed in use (the drawn one when constructed with seed=None).
        """
    @property
    def temperature(self) -> float:
        ...
    @property
    def top_k(self) -> int:
        ...
    @property
    def top_p(self) -> float:
        ...
class Generator:
    """
    Generation on a Sequence, optionally with draft-MTP
    speculation (docs/runtime.md, draft-MTP round). Greedy output is the same with and without speculation; sampled
    output keeps the target distribution (by sampled_accept: llama.cpp's match, which also gives plain decoding's tokens
    for a seed, or speculative sampling's rejection).
    """
    def __init__(self, sequence: Seq, n_max: typing.SupportsInt | typing.SupportsIndex = 3, n_min: typing.SupportsInt | typing.SupportsIndex = 0, p_min: typing.SupportsFloat | typing.SupportsIndex = 0.0, index_share: typing.SupportsInt | typing.SupportsIndex = -1, synthetic_accepted: typing.SupportsFloat | typing.SupportsIndex = -1.0, adaptive: bool = True, sampled_accept: str = 'rejection', temperature: typing.SupportsFloat | typing.SupportsIndex = 0.800000011920929, top_k: typing.SupportsInt | typing.SupportsIndex = 40, top_p: typing.SupportsFloat | typing.SupportsIndex = 0.949999988079071, min_p: typing.SupportsFloat | typing.SupportsIndex = 0.05000000074505806, seed: typing.SupportsInt | typing.SupportsIndex = 0, n_probs: typing.SupportsInt | typing.SupportsIndex = -1, post_sampling_probs: bool = False, logit_bias: collections.abc.Sequence[tuple[typing.SupportsInt | typing.SupportsIndex, typing.SupportsFloat | typing.SupportsIndex]] = [], policy: ... = None, end_ids: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = []) -> None:
        """
        n_max: drafts per round (the most, when adaptive; 0 = no speculation); n_min: shorter drafts are not verified; p_min: drafting stops below this top probability; index_share: -1 file, 0 off, 1 on; synthetic_accepted: benchmarks only, a fixed mean number of accepted drafts per round (< 0 = off); adaptive: each round drafts what DraftLengthPolicy chooses from measured acceptance and timings (0 when drafting does not pay; greedy output, and sampled output under match, is the same; under rejection a seeded sample then depends on timing), False: n_max every round; sampled_accept (temperature > 0): "match", drafts are the draft head's argmax, kept while they equal the token the target draws as plain decoding draws it (llama.cpp's rule: a seed gives plain decoding's tokens), or "rejection" (the default), speculative sampling (d ~ q kept with probability min(1, p/q), else a residual token: more drafts kept, the same distribution, other tokens). Raises ValueError for speculation without a NextN layer, n_max >= n_batch, an unknown sampled_accept, or bad sampler settings. n_probs >= 0: report log-probabilities (probs), with the n_probs most probable tokens'; < 0: none. post_sampling_probs: those of the distribution the sampler drew from (filters and temperature applied), not the model's. logit_bias: [(token id, bias)] added to the logits of every row (a token listed twice gets both; -inf bans it); ValueError for an id outside the vocabulary, a NaN or +inf bias. policy: the DraftLengthPolicy an adaptive generator learns in (shared with earlier generators, so that acceptance and timings carry over requests); None: a new one. ValueError for a policy of another n_max or n_min. end_ids: the end-of-generation tokens: drafting stops after drafting one (nothing after it is emitted).
        """
    def begin_draft(self, max_tokens: typing.SupportsInt | typing.SupportsIndex = 9223372036854775807) -> int:
        """
        draft() step by step, for drafts under a grammar: write the pending draft rows and run the draft head's step 0; returns how many drafts this round may have (0 without speculation). draft_next() drafts them, verify() must follow. Raises as draft().
        """
    def draft(self, max_tokens: typing.SupportsInt | typing.SupportsIndex = 9223372036854775807) -> list[int]:
        """
        The first half of a round, for constrained generation: the drafts step() would verify (none without speculation), unverified. verify() must follow. Raises ValueError as step(), or when the last drafts were not verified.
        """
    def draft_next(self, mask: typing.Any = None) -> int:
        """
        The next draft token, drawn from the draft head's logits with `mask` (uint32 [ceil(n_vocab / 32)], the tokens the grammar allows after the drafts so far; None: all) applied, or -1 once this round's drafting stopped (its limit, or below p_min). Raises ValueError without begin_draft() or for a mask of another dtype or shape.
        """
    def finish(self) -> None:
        """
        End the generation: write the NextN layer's rows still pending for evaluated tokens, so that a later prompt extending this sequence resumes at its end (start(cache_prompt=True)). Optional.
        """
    def start(self, prompt: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], cache_prompt: bool = False, mask: typing.Any = None) -> int:
        """
        Evaluate `prompt` (list of ids) and return the first sampled token. cache_prompt=False resets the sequence first; True keeps the longest prefix of the prompt the sequence can resume from (its current rows or a context checkpoint) and evaluates only the rest (stats n_cached_tokens). Raises ValueError for an empty prompt, an id outside the vocabulary or a prompt longer than the context. mask: uint32 [ceil(n_vocab / 32)] bitmask of the tokens the first one may be (token t allowed iff bit t % 32 of word t / 32 is set), or None.
        """
    def step(self, max_tokens: typing.SupportsInt | typing.SupportsIndex = 9223372036854775807) -> list[int]:
        """
        One round: returns the tokens it emits (accepted drafts, then the target's token), at most max_tokens (the tokens the caller may still use: drafts are capped so that every one can serve the reply, and the statistics count only those). Raises ValueError before start() or when the context is full.
        """
    def verify(self, n_keep: typing.SupportsInt | typing.SupportsIndex, masks: typing.Any = None) -> list[int]:
        """
        The second half: verify the first n_keep drafts of the round and return the emitted tokens as step() does. masks: uint32 [n_keep + 1, ceil(n_vocab / 32)], row i the bitmask of the tokens allowed after drafts[:i] (the target's disallowed logits become -inf before acceptance and sampling), or None. Drafts left out must start with one that row n_keep disallows (it counts as rejected: the token comes from speculative sampling's residual, so sampling stays exact). Raises ValueError without drafts to verify, for n_keep outside [0, len(drafts)] or masks of another dtype or shape.
        """
    @property
    def drafting(self) -> bool:
        """
        Whether this generation speculates: False without a NextN layer or drafts, once its policy cannot pay or is quiet, or while it rests (its prompt resumed a cache the draft head's rows do not cover, or a batch's policy stopped drafting); it then decodes as without speculation and writes no draft-head rows.
        """
    @property
    def policy(self) -> ...:
        """
        The DraftLengthPolicy this generator reports to and asks (None unless adaptive with n_max > 0).
        """
    @property
    def probs(self) -> list:
        """
        With n_probs >= 0: per token the last start(), step() or verify() returned, (token, logprob, [(id, logprob) of the n_probs most probable tokens, most probable first]): natural-log softmax of the raw logits of the target row that produced it (before the sampler's filters and temperature; csrc/runtime/token_probs.h), or with post_sampling_probs the log of the distribution the sampler drew it from (its top: the n_probs most probable of the tokens that survived its filters). Empty with n_probs < 0.
        """
    @property
    def prompt_left(self) -> int:
        """
        Rows of that prompt still to evaluate (0 when none or not prompting).
        """
    @property
    def prompt_next_rows(self) -> int:
        """
        Rows of that prompt the next round evaluates: one ubatch (at most n_batch, cut at checkpoint_every).
        """
    @property
    def prompting(self) -> bool:
        """
        Whether a prompt started by Batch.start is not done (rows to evaluate, or its first token to sample).
        """
    @property
    def room(self) -> int:
        """
        Tokens the context can still take.
        """
    @property
    def stats(self) -> dict:
        """
        Counters since start(): prompt tokens (and of those resumed from the cache), timings (ms), speculation (n_drafts = rounds that carried drafts, n_drafted, n_accepted, acceptance_per_position, drafted_at, accepted_at, mean_accepted_length = accepted drafts + 1 per round, rounds_at_length = rounds allowed k drafts for k = 0..n_max), pending_rows_max (the most draft-head rows, each a hidden state of n_embd floats, held at once on the host).
        """
class Batch:
    """
    One round for several generators, each on its own sequence of one engine, in
    shared graphs (csrc/runtime/batch.h): set(generators, max_tokens), then begin(), draft_step(masks) while drafting,
    verify(masks); emitted(i). A generator's tokens and drafts are those it gives alone.
    """
    @staticmethod
    def start(generator: Generator, prompt: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], cache_prompt: bool = False) -> None:
        """
        Start `prompt` on `generator` (cache_prompt as Generator.start) without evaluating it: the rounds that include the generator evaluate it, a ubatch per round; the round of its last ubatch emits its first token. Raises ValueError for an empty prompt, an id outside the vocabulary or a prompt longer than the context.
        """
    def __init__(self, engine: Engine) -> None:
        ...
    def __len__(self) -> int:
        ...
    def begin(self) -> None:
        """
        Phase 1: drafts chosen, waiting draft-head rows written and step 0 run, for every generator at once. Raises ValueError as Generator.begin_draft.
        """
    def draft_step(self, masks: collections.abc.Sequence[typing.Any] = []) -> None:
        """
        Phase 2: each generator with a draft to draw draws it under its mask (uint32 [ceil(n_vocab / 32)] or None; [] for none at all), then the next steps of those that go on run in one graph.
        """
    def drafts(self, i: typing.SupportsInt | typing.SupportsIndex) -> list[int]:
        """
        Generator i's drafts this round so far.
        """
    def emitted(self, i: typing.SupportsInt | typing.SupportsIndex) -> list[int]:
        """
        The tokens generator i emitted in the round (after verify; none while its prompt goes on).
        """
    def error(self, i: typing.SupportsInt | typing.SupportsIndex) -> str:
        """
        Why generator i's round failed ('' when it did not): a phase of that generator threw (a full context, a sampler left with no token); its sequence is left whole and the others went on.
        """
    def set(self, generators: collections.abc.Sequence[Generator], max_tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], policy: ... = None) -> None:
        """
        The generators of the next round (each on its own sequence of this engine) and the tokens each one's caller may still use. policy: the batch's DraftLengthPolicy (None: each generator's own): with two or more decoding generators whose lengths adapt it chooses one length for all of them from the batch's costs and their acceptance. Raises ValueError for a generator of another engine, two on one sequence, or lists of different lengths.
        """
    def verify(self, masks: collections.abc.Sequence[typing.Any] = []) -> None:
        """
        Phase 3: one trunk graph (prompt ubatches, verify passes), then each generator accepts under its masks (Generator.verify's masks for a decoding one, the first token's for one whose prompt ends; None) and commits.
        """
    @property
    def drafting(self) -> bool:
        """
        Whether a generator has a draft to draw (draft_step).
        """
class RoundCostPrior:
    """
    What a draft-MTP round costs before a
    DraftLengthPolicy timed it, in units of a round without drafts (a one-row verify): measured at load on a scratch
    sequence (glm5next_runtime/draft_calibration.py), or the built-in ratios (csrc/runtime/draft_length.h).
    """
    def __init__(self, verify: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex] = [], first: typing.SupportsFloat | typing.SupportsIndex = 0.3, next: typing.SupportsFloat | typing.SupportsIndex = 0.25, row: typing.SupportsFloat | typing.SupportsIndex = 0.05) -> None:
        """
        verify[r - 1]: a verify pass of r rows (verify[0] == 1; empty: the built-in 1 + 0.25 (r - 1)); first: draft step 0; next: each later draft step; row: a deferred draft-head row. ValueError, naming the field, for a ratio that is not finite and > 0 or verify[0] != 1.
        """
    def __repr__(self) -> str:
        ...
    def verify_ratio(self, rows: typing.SupportsInt | typing.SupportsIndex) -> float:
        """
        A verify pass of rows rows: verify[rows - 1]; past its end, its last entry plus the slope of its last two (at least 0; 0.25 with one entry); empty, 1 + 0.25 (rows - 1). ValueError for rows < 1.
        """
    @property
    def first(self) -> float:
        """
        Draft step 0 (with the draft-head rows it writes).
        """
    @property
    def next(self) -> float:
        """
        Each later draft step.
        """
    @property
    def row(self) -> float:
        """
        A deferred draft-head row.
        """
    @property
    def verify(self) -> list[float]:
        """
        verify[r - 1]: a verify pass of r rows (empty: built in).
        """
class DraftLengthPolicy:
    """
    The number of drafts a draft-MTP round should carry:
    the k that maximizes expected emitted tokens per ms from the round outcomes and timings it is told
    (csrc/runtime/draft_length.h). An adaptive Generator reports to one and asks it (Model keeps one per n_max and
    n_min, shared by its generators).
    """
    RECONSIDER_AFTER: typing.ClassVar[int] = 4096
    @staticmethod
    def clipped_mean(samples: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> float:
        """
        The policy's estimate of a cost from its latest timings (ms): their mean, each clipped at twice their median. ValueError for no samples or more than the policy's window of 9.
        """
    def __init__(self, n_max: typing.SupportsInt | typing.SupportsIndex, n_min: typing.SupportsInt | typing.SupportsIndex = 0, prior: RoundCostPrior = ...) -> None:
        """
        n_max: the most drafts (ValueError when < 0); n_min: a positive choice is at least this; prior: the round costs assumed until timed (Model.draft_calibration's, measured at load).
        """
    def acceptance(self, j: typing.SupportsInt | typing.SupportsIndex) -> float:
        """
        Estimated acceptance of draft j (1-based) given drafts 1..j-1 were accepted.
        """
    def can_pay(self) -> bool:
        """
        False once measured costs said no acceptance could make drafting pay (adaptive Generators on this policy then decode as without speculation, until reconsider): the last 9 probe-length rounds, each against the rounds without drafts before it, would gain under 5% even fully accepted. True before.
        """
    def choose(self, limit: typing.SupportsInt | typing.SupportsIndex) -> int:
        """
        The next round's drafts in {0} + [max(1, n_min), min(limit, n_max)]; a one-draft probe every probe_interval rounds while the best is 0.
        """
    def expected_cost(self, k: typing.SupportsInt | typing.SupportsIndex) -> float:
        """
        Expected ms of a round with k drafts (in one-row verifies before any timing was told).
        """
    def expected_tokens(self, k: typing.SupportsInt | typing.SupportsIndex) -> float:
        """
        Expected tokens a round with k drafts emits.
        """
    def observe(self, n_drafted: typing.SupportsInt | typing.SupportsIndex, n_accepted: typing.SupportsInt | typing.SupportsIndex, verify_rows: typing.SupportsInt | typing.SupportsIndex, pending_rows: typing.SupportsInt | typing.SupportsIndex, first_ms: typing.SupportsFloat | typing.SupportsIndex, next_ms: typing.SupportsFloat | typing.SupportsIndex, verify_ms: typing.SupportsFloat | typing.SupportsIndex, between_ms: typing.SupportsFloat | typing.SupportsIndex = -1.0, n_chosen: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        """
        A round's outcome: drafts, accepted drafts (a prefix), rows verified, draft-head rows step 0 wrote, step 0 ms, later steps' ms, verify ms, the caller's ms since the last round (< 0: unknown), the drafts choose allowed (< 0: as drafted; one not produced after accepted ones counts as rejected).
        """
    def observe_dormant(self) -> None:
        """
        A round without drafts because drafting cannot pay (counted for reconsider).
        """
    def observe_rows(self, n_rows: typing.SupportsInt | typing.SupportsIndex, ms: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        Deferred draft-head rows written without drafting: n_rows of them in ms.
        """
    def predictable_text_pays(self) -> bool:
        """
        Whether drafting would pay, at the round costs estimated now, on a text whose every draft is accepted with probability 0.8 (a text the draft head predicts well).
        """
    def quiet(self) -> bool:
        """
        True once a probe was rejected where even an accepted next probe would not make drafting pay: the generations on this policy then run without drafts and write no draft-head rows, until wake.
        """
    def reconsider(self) -> bool:
        """
        At a request's start: after RECONSIDER_AFTER dormant rounds, can_pay is judged anew from fresh probes. Returns whether it was.
        """
    def wake(self) -> bool:
        """
        At a generation's start (a new text): no longer quiet, the next probe within 8 rounds, if a predictable text could pay (predictable_text_pays) or this is the 64th new text that found it quiet since it last woke. Returns whether it woke.
        """
    @property
    def n_max(self) -> int:
        """
        The most drafts a round may carry.
        """
    @property
    def n_min(self) -> int:
        """
        The fewest drafts a positive choice carries.
        """
    @property
    def prior(self) -> RoundCostPrior:
        """
        The RoundCostPrior it was made with.
        """
    @property
    def probe_interval(self) -> int:
        """
        Rounds without drafts between probes (doubles while drafting does not pay).
        """
def add_rpc_servers(endpoints: collections.abc.Sequence[str], timeout_ms: typing.SupportsInt | typing.SupportsIndex = 5000) -> None:
    """
    add_rpc_servers(endpoints: list of 'HOST:PORT', timeout_ms=5000): add the devices of ggml RPC servers (llama.cpp's --rpc) after checking that each answers ggml's RPC hello with this ggml's protocol version (ggml's client would abort the process otherwise). An endpoint added before is skipped. Raises ValueError naming the endpoint that is malformed, unreachable or not a matching ggml RPC server, RuntimeError when this ggml was built without RPC.
    """
def ggml_commit() -> str:
    """
    llama.cpp commit the linked ggml was built from.
    """
def ggml_version() -> str:
    """
    Version string of the linked ggml, e.g. '0.25.3'.
    """
def list_devices(memory: bool = False) -> list:
    """
    list_devices(memory=False) -> list of dict(name, description, type: 'cpu'|'gpu'|'igpu'|'accel'|'meta', memory_free, memory_total (bytes; 0 unless memory=True)): ggml's registry in order, RPC servers included once added. memory=True asks each device (a network call for RPC devices; ggml's RPC client aborts the process when a server is gone).
    """
def read_hparams(path: str, override_kv: collections.abc.Sequence[str] = []) -> dict:
    """
    The hyper-parameters of a glm5next GGUF (the dict of Model.hparams) read and checked by the loader's
    rules without loading tensors or vocabulary: the converter runs it on the metadata it is about to write. Raises
    ModelError (a ValueError) naming the file and the key, as Model() does.
    """
def selected_rows(pools: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], pos: typing.SupportsInt | typing.SupportsIndex, kpool: typing.SupportsInt | typing.SupportsIndex, select_tail: bool) -> list[int]:
    """
    The key positions a row at `pos` attends, ascending, given its chosen pools (list of ids, -1 = none): the graph's own rule (csrc/graph/select_ops.h). Raises ValueError for pos < 0 or kpool < 1.
    """
def serve_rpc(endpoint: str, n_threads: typing.SupportsInt | typing.SupportsIndex, cache_dir: str = '') -> None:
    """
    serve_rpc(endpoint: 'HOST:PORT', n_threads: int, cache_dir: str = ''): serve this machine's CPU as a ggml RPC device; blocks for the life of the process (ggml's RPC protocol has no authentication). Raises ValueError for a malformed endpoint, RuntimeError when ggml has no RPC backend or the server cannot start.
    """
def system_info() -> str:
    """
    CPU features of ggml's CPU backend as 'NAME = VALUE | ...' (empty string if unavailable).
    """
