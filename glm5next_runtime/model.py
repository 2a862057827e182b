"""The Python face of a loaded model: the native loader, the tokenizer and the run settings in one object."""
from __future__ import annotations

import copy
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import _core
from .generate import Decoding, Generation, GenerationResult, GenerationStream, end_of_generation_ids
from .grammar import Grammar, constraint_for
from .draft import DraftResult, draft, selected_positions
from .draft_calibration import DraftCalibration, calibrate
from .placement import CPU, plan_placement
from .cache_sizes import CACHE_TYPES
from .prompt import check_prompt
from .tokenizer import Tokenizer

SUPPORTED_TOKENIZERS = {"gpt2": ("glm4",)}  # tokenizer.ggml.model -> accepted tokenizer.ggml.pre
SPEC_TYPES = ("draft-mtp", "none")
INDEX_SHARE = {"auto": -1, "off": 0, "on": 1}  # spec_index_share -> _core.Generator's index_share
SPEC_SAMPLING = ("match", "rejection")  # spec_sampling: how drafts are kept when sampling (_core.Generator)
DRAFT_N_MAX = 3  # the default draft_n_max: --spec-draft-n-max's default and glm5next-bench's `auto`
# the draft calibration's timed rounds at load: for this share of the load time or CALIBRATION_BUDGET_S seconds,
# whichever is more (issue 28)
CALIBRATION_SHARE, CALIBRATION_BUDGET_S = 0.02, 0.2


class TensorInfo(NamedTuple):
    """One tensor of the file: its GGUF name, ggml type name ("f32", "q8_0", ...), shape in ggml order (ne[0]
    first, trailing 1s dropped) and size in bytes."""
    name: str
    type: str
    shape: list[int]
    nbytes: int


def offload_devices(names: Sequence[str] | None = None) -> list[str]:
    """ggml device names that can hold weights: "CPU" first, then the offload devices: GPUs and RPC servers
    (accelerators such as BLAS only speed up CPU work and are not placement targets). `names` (-dev) picks
    offload devices by name, in that order; ["none"] offloads nothing. Raises ValueError naming an unknown one."""
    available = [d["name"] for d in _core.list_devices() if d["type"] in ("gpu", "igpu")]
    if names is None:
        return [CPU, *available]
    names = list(names)
    if names == ["none"]:
        return [CPU]
    for i, name in enumerate(names):
        if name not in available:
            raise ValueError(f"--device {name!r}: unknown offload device (available: {', '.join(available) or 'none'})")
        if name in names[:i]:
            raise ValueError(f"--device {name!r} is given twice")
    return [CPU, *names]


def _tokenizer(core: _core.Model) -> Tokenizer:
    model, pre = _meta(core, "tokenizer.ggml.model", ""), _meta(core, "tokenizer.ggml.pre", "")
    if model not in SUPPORTED_TOKENIZERS or (pre and pre not in SUPPORTED_TOKENIZERS[model]):
        raise ValueError(f"{core.path}: tokenizer {model!r} with pre-tokenizer {pre!r} is not supported "
                         f"(expected 'gpt2' with 'glm4')")
    try:
        tokens, types, merges, special = core.vocab()
        return Tokenizer.from_gguf_vocab(tokens, types, merges, special,
                                         add_bos=bool(_meta(core, "tokenizer.ggml.add_bos_token", False)),
                                         add_eos=bool(_meta(core, "tokenizer.ggml.add_eos_token", False)))
    except ValueError as e:  # the tokenizer's checks know the token, not the file
        raise ValueError(f"{core.path}: {e}") from None


def _meta(core: _core.Model, key: str, default: Any) -> Any:
    try:
        return core.metadata(key)
    except KeyError:
        return default


class Model:
    """A glm5next GGUF ready for inference.

    Args:
        path: the .gguf file.
        n_ctx: context size in tokens (-c), >= 1.
        n_threads: CPU threads (-t); None = all cores.
        n_batch: prompt tokens per forward pass (-b), >= 1.
        n_seq_max: the sequences (this one and those another_sequence makes) whose caches are cells of the
            engine's, as llama.cpp's n_seq_max sizes its unified KV cache and recurrent memory (the server passes
            -np): their rows in one batched step write their caches and run KDA per layer at once
            (csrc/runtime/cache_cells.h). More sequences may be made; theirs run per sequence. >= 1.
        override_kv: llama.cpp --override-kv "KEY=TYPE:VALUE" strings (see _core.Model).
        n_gpu_layers, cpu_moe, n_cpu_moe, override_tensor, split_mode, tensor_split, main_gpu, draft_device:
            placement as in llama-server (-ngl, --cpu-moe, --n-cpu-moe, -ot, -sm, -ts, -mg, -devd; see
            placement.py).
        devices: -dev, the offload devices to use by name (None: every GPU and RPC device; ["none"]: none).
        spec_type: "draft-mtp" (speculate with the file's NextN layer), "none" (no drafting: the sequences keep
            no NextN layer caches, as llama.cpp), or None: draft-mtp when the file has a NextN layer, else none.
        draft_n_max, draft_n_min, draft_p_min: drafts per round, the shortest draft worth verifying, and the draft
            probability below which drafting stops (docs/runtime.md, draft-MTP round).
        draft_adaptive: each round drafts as many as pay on this machine and file, at most draft_n_max, from the
            acceptance and timings the generation measures (none when drafting does not pay; _core.DraftLengthPolicy),
            and, until a round was timed, from costs measured at load (draft_calibration: rounds of 0..draft_n_max
            drafts timed on a scratch sequence for ~200 ms, or 2% of the load time when that is more, and at least
            one turn of each; see warmup).
            Greedy output, and sampled output with spec_sampling "match", is the same either way. With "rejection",
            sampled output depends on the draft lengths, so a generation that samples with a fixed seed drafts
            draft_n_max every round (its output reproducible, not timing-dependent) unless generator(adaptive=True)
            asks otherwise; False: draft_n_max every round always.
        spec_sampling: how drafts are kept when the sampler draws (temperature > 0; _core.Generator's sampled_accept,
            docs/runtime.md, draft-MTP round): "rejection" (the default, speculative sampling: the same distribution,
            far more drafts kept than under match, other tokens than plain decoding) or "match" (llama.cpp's rule:
            the drafts are the draft head's argmax, kept while equal to the token the target draws as plain decoding
            would, so a seed gives plain decoding's tokens).
        spec_index_share: "auto" (the file's index_share_for_mtp_iteration), "on" or "off".
        spec_draft_type: "auto" (the draft layer's weights as stored), "q8_0" or "q4_0" (requantized at load).
        draft_model: a separate draft file (converted with --mtp-only) whose NextN layer drafts for this trunk.
        ctx_checkpoints: context checkpoints kept per sequence (llama-server's --ctx-checkpoints; 0 = none): the
            states a later prompt sharing a prefix resumes from (see generate's cache_prompt).
        checkpoint_every: while prefilling, a checkpoint at every multiple of this many tokens (a ubatch ends
            there), besides the one at the end of every prompt.
        cache_type_k: the type of the attention caches' rows (llama-server's -ctk): the MLA latent, which is both
            key and value, and the indexer's keys and gates; "f16" (llama.cpp's default), "bf16", "f32", "q8_0" or
            "q4_0" (for widths that are whole blocks of 32). The pooled keys and the KDA states stay f32
            (docs/runtime.md, Engine).
        warmup: with adaptive drafting, run each kind of draft-MTP round at load on a scratch sequence (the weights
            first touched, as by llama-server's --warmup; a request's own graphs are still built at its first rounds)
            and time them for the draft length policies (draft_calibration, a DraftCalibration; None when False, and
            the built-in cost ratios are assumed until rounds are timed).
        use_mmap: map the file, every page faulted in at load (llama.cpp's default); False: read it into anonymous
            memory (llama-server's --no-mmap).
        use_mlock: lock the weights' pages in RAM (llama-server's --mlock); where the system refuses (RLIMIT_MEMLOCK)
            a RuntimeWarning says so and the model loads unlocked, as in llama.cpp.
        rpc: "HOST:PORT" endpoints (a list, or one str) of ggml RPC servers (glm5next-rpc-server, llama.cpp's
            --rpc) whose devices become placement targets. ggml's registry keeps them for the life of the process:
            a later Model in the same process sees them too (devices=[...] chooses).
    Raises:
        ValueError: a malformed file, key, tensor, override or placement rule (the message names it), a
            non-positive n_ctx / n_batch / n_threads, a tokenizer this runtime does not implement, or
            spec_type "draft-mtp" for a file without a NextN layer, a cache_type_k it does not keep (or a quantized
            one for widths that are not whole blocks), or an rpc
            endpoint that is malformed,
            unreachable or not a ggml RPC server of this protocol version (named).
    """

    def __init__(self, path: str | os.PathLike, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512,
                 override_kv: Sequence[str] = (), n_gpu_layers: int = 0, cpu_moe: bool = False, n_cpu_moe: int = 0,
                 override_tensor: Sequence[str] = (), spec_type: str | None = None, draft_n_max: int = DRAFT_N_MAX,
                 draft_n_min: int = 0, draft_p_min: float = 0.0, draft_adaptive: bool = True,
                 spec_sampling: str = "rejection", spec_index_share: str = "auto",
                 spec_draft_type: str = "auto", draft_model: str | os.PathLike | None = None,
                 rpc: Sequence[str] = (), devices: Sequence[str] | None = None, split_mode: str = "layer",
                 tensor_split: Sequence[float] | None = None, main_gpu: int = 0, draft_device: str | None = None,
                 ctx_checkpoints: int = 32, checkpoint_every: int = 8192, cache_type_k: str = "f16",
                 warmup: bool = True, n_seq_max: int = 1, use_mmap: bool = True, use_mlock: bool = False):
        load_start = time.perf_counter()
        for name, value in (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_threads", n_threads),
                            ("checkpoint_every", checkpoint_every), ("n_seq_max", n_seq_max)):
            if value is not None and value < 1:
                raise ValueError(f"{name} = {value}: must be >= 1")
        if ctx_checkpoints < 0:
            raise ValueError(f"ctx_checkpoints = {ctx_checkpoints}: must be >= 0")
        if cache_type_k not in CACHE_TYPES:  # before the file is read: the flag's error names the flag's value
            raise ValueError(f"cache_type_k {cache_type_k!r}: expected one of {', '.join(CACHE_TYPES)}")
        self._sequence_args = dict(n_checkpoints=ctx_checkpoints, checkpoint_every=checkpoint_every,
                                   cache_type=cache_type_k)
        self._n_verify_rows = max(draft_n_max, 0) + 1
        self.n_seq_max = n_seq_max
        # checked before ggml's client sees them: it aborts on a bad endpoint
        _core.add_rpc_servers([rpc] if isinstance(rpc, str) else list(rpc))
        self._files = (os.fspath(path), os.fspath(draft_model) if draft_model else None, list(override_kv))
        self._load_options = dict(use_mmap=use_mmap, use_mlock=use_mlock)
        self._core = self._load_file(self._files[0])
        # seconds the load spent: reading the file (mapped and faulted in, or read), then (set below) the draft-MTP
        # calibration's rounds
        self.load_seconds = {"weights": time.perf_counter() - load_start}
        # known while unloaded too
        self._path, self._n_vocab, self._kv_overrides = self._core.path, self._core.n_vocab, self._core.kv_overrides
        self._indexer_top_k = self._core.hparams["idx_top_k"]
        self.tokenizer = _tokenizer(self._core)
        self._n_ctx = n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.n_batch = n_batch
        self._offload = offload_devices(devices)
        self._placement_args = dict(n_gpu_layers=n_gpu_layers, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe,
                                    override_tensor=tuple(override_tensor), split_mode=split_mode,
                                    tensor_split=tensor_split, main_gpu=main_gpu, draft_device=draft_device)
        self._placement = self._place(self._core)  # at load: a bad -ot rule fails here, naming it
        self._draft_core = self._load_file(self._files[1]) if draft_model else None
        self._draft_placement = self._place(self._draft_core) if self._draft_core else {}
        self._spec_draft_type = spec_draft_type
        self._engine = self._new_engine()
        has_nextn = self._engine.has_draft_head
        self.spec_type = spec_type or ("draft-mtp" if has_nextn else "none")
        if self.spec_type not in SPEC_TYPES:
            raise ValueError(f"spec_type {spec_type!r}: expected one of {', '.join(SPEC_TYPES)}")
        if self.spec_type == "draft-mtp" and not has_nextn:
            raise ValueError(f"{path}: spec_type draft-mtp needs a NextN layer, and the file has none")
        # the NextN layer's caches only where drafting can happen (issue 27: llama.cpp skips the layer's too)
        self._sequence_args["draft_rows"] = self.spec_type == "draft-mtp"
        self._seq = self._new_sequence()
        self._last: dict | None = None
        if spec_index_share not in INDEX_SHARE:
            raise ValueError(f"spec_index_share {spec_index_share!r}: expected auto, on or off")
        if spec_sampling not in SPEC_SAMPLING:
            raise ValueError(f"spec_sampling {spec_sampling!r}: expected one of {', '.join(SPEC_SAMPLING)}")
        self.spec = dict(n_max=draft_n_max if self.spec_type == "draft-mtp" else 0, n_min=draft_n_min,
                         p_min=draft_p_min, index_share=INDEX_SHARE[spec_index_share], adaptive=draft_adaptive,
                         sampled_accept=spec_sampling)
        self._draft_length_policies: dict[tuple, _core.DraftLengthPolicy] = {}  # _draft_length_policy
        # what a draft length policy assumes until it timed a round (issue 28): measured now, timed rounds for 2% of
        # the load time or 200 ms, whichever is more (draft_calibration.calibrate says by how much a slow model's
        # turns exceed it); kept by reload (the same machine and file)
        self.draft_calibration: DraftCalibration | None = None
        if warmup and self.spec["adaptive"] and self.spec["n_max"] > 0:
            budget_s = max(CALIBRATION_BUDGET_S, CALIBRATION_SHARE * (time.perf_counter() - load_start))
            calibration_start = time.perf_counter()
            try:
                self.draft_calibration = calibrate(self._engine, self.spec["n_max"], budget_s, self._sequence_args)
            except (ValueError, RuntimeError) as e:  # the model loaded: what fails here fails a request, named there
                warnings.warn(f"{path}: draft-MTP round costs not measured at load ({e}); the built-in ratios are "
                              "assumed until the rounds are timed", RuntimeWarning, stacklevel=2)
            self.load_seconds["calibration"] = time.perf_counter() - calibration_start

    def _load_file(self, path: str) -> _core.Model:
        """_core.Model of `path` with this model's overrides and load options; warns when mlock was refused."""
        core = _core.Model(path, self._files[2], **self._load_options)
        if self._load_options["use_mlock"] and not core.locked:
            warnings.warn(f"{path}: the weights could not be locked in RAM ({core.lock_error}); they load unlocked "
                          "(raise the memory-lock limit: ulimit -l, or LimitMEMLOCK for a service)", RuntimeWarning,
                          stacklevel=3)
        return core

    @property
    def mapped(self) -> bool:
        """Whether the weights are the file's mapping (use_mmap), not a copy read into memory."""
        return self._load_options["use_mmap"]

    @property
    def locked(self) -> bool:
        """Whether the weights' pages are locked in RAM (use_mlock, and the system allowed it)."""
        return self._core.locked if self._core is not None else False

    def _new_engine(self) -> _core.Engine:
        return _core.Engine(self._core, self.n_batch, self.n_threads, self._spec_draft_type, self._draft_core,
                            self._n_verify_rows, self.n_seq_max)

    def _new_sequence(self) -> _core.Seq:
        return _core.Seq(self._engine, self._n_ctx, **self._sequence_args)

    def another_sequence(self) -> Model:
        """A Model on the same engine (the loaded weights, devices, compute buffers and thread pool, not made
        again) with its own sequence: its own caches and checkpoints, the same settings. This is llama.cpp's one
        context, several sequences: the server's slots are made this way, and their rows can share a graph
        (_core.Batch)."""
        other = copy.copy(self)
        other.spec = dict(self.spec)
        other._seq = self._new_sequence()
        other._last = None
        # its own: slots generate at once on threads of their own, and a policy is told every round's timings
        other._draft_length_policies = {}
        return other

    def unload(self) -> None:
        """Free this sequence (its caches) and let go of the engine and the weights, which are freed once no Model
        holds them (llama-server's sleep: the slots made by another_sequence share them, so unload them all). Until
        reload(), only the settings, the tokenizer, path and n_vocab may be used."""
        self._seq = self._engine = self._core = self._draft_core = self._last = None

    def reload(self, weights_of: Model | None = None) -> None:
        """Load again after unload(): the file's weights (and the draft file's), placed by the same rules, and an
        engine on them, or the engine `weights_of` (a loaded Model of the same file, e.g. slot 0 for the others)
        holds; then an empty sequence. Raises ValueError when the file no longer loads (as the constructor)."""
        if weights_of is not None:
            self._core, self._draft_core, self._engine = weights_of._core, weights_of._draft_core, weights_of._engine
        else:
            path, draft_path, _ = self._files
            self._core = self._load_file(path)
            self._placement = self._place(self._core)
            self._draft_core = self._load_file(draft_path) if draft_path else None
            self._draft_placement = self._place(self._draft_core) if self._draft_core else {}
            self._engine = self._new_engine()
        self._seq = self._new_sequence()

    @property
    def loaded(self) -> bool:
        """False between unload() and reload()."""
        return self._seq is not None

    @property
    def engine(self) -> _core.Engine:
        """The engine this model's sequence runs on, shared with the Models another_sequence made (_core.Batch runs
        their rounds together)."""
        return self._engine

    @property
    def sequence(self) -> _core.Seq:
        """This model's sequence (its tokens, caches and checkpoints) on the engine."""
        return self._seq

    def eval(self, tokens: Sequence[int], logits_all: bool = False) -> np.ndarray:
        """Append `tokens` to the sequence and run the trunk over them (prefill in ubatches of n_batch).

        Returns float32 logits: [len(tokens), n_vocab] with logits_all, else [n_vocab] for the last row. The
        post-norm hidden states and the indexer selections of these rows are then in `hidden` and
        `selected_positions(layer)`. Raises ValueError for no tokens, an id outside the vocabulary, or more
        tokens than the context has left (math: docs/model.md, Trunk).
        """
        self._last = self._seq.eval([int(t) for t in tokens], logits_all)
        logits = self._last["logits"]
        return logits if logits_all else logits[0]

    def reset(self) -> None:
        """Forget the sequence: caches cleared, n_past = 0."""
        self._seq.reset()
        self._last = None

    @property
    def tokens(self) -> list[int]:
        """The ids the sequence holds, one per evaluated row (what a prompt sharing a prefix resumes from)."""
        return self._seq.tokens

    @property
    def n_past(self) -> int:
        """Tokens in the sequence."""
        return self._seq.n_past

    @property
    def hidden(self) -> np.ndarray:
        """float32 [n_tokens, n_embd]: post-norm hidden states of the last eval's rows (the draft head's input)."""
        return self._require_eval()["hidden"]

    @property
    def dsa_layers(self) -> list[int]:
        """Trunk DSA layer indices, in order."""
        return list(self._require_eval()["pools"])

    def selected_positions(self, layer: int) -> list[set[int]]:
        """Per row of the last eval, the key positions DSA layer `layer` attends: the rows of the chosen pools
        plus, with kpool_select_tail, the incomplete pool ending at the row (docs/model.md, Indexer)."""
        pools = self._require_eval()["pools"][layer]
        hp = self.hparams
        first = self.n_past - len(pools)
        return [selected_positions(row, first + t, hp["idx_kpool"], hp["idx_select_tail"]) for t, row in enumerate(pools)]

    def draft(self, tokens: Sequence[int], n_steps: int, share: bool | None = None) -> DraftResult:
        """What the NextN draft head drafts after a prompt, step by step (see glm5next_runtime.draft.draft):
        `tokens` is the prompt plus the token the trunk emits next; returns the drafted ids, float32 logits
        [n_steps, n_vocab] and each step's attended positions. share=None follows the file (index sharing)."""
        return draft(self, tokens, n_steps, share)

    def draft_chain(self, share: bool) -> _core.DraftChain:
        """The NextN draft chain on this model's sequence, as the speculative round runs it (_core.DraftChain):
        begin(hidden, next_tokens, pos0) writes the draft rows up to step 0, next(token) takes a step. The
        sequence is reset (the chain's rows follow the trunk's). share: steps >= 1 reuse step 0's selection.
        Raises ValueError when the model has no NextN layer."""
        self.reset()
        return _core.DraftChain(self._seq, share)

    def _require_eval(self) -> dict:
        if self._last is None:
            raise RuntimeError("no eval since the model was loaded or reset")
        return self._last

    @property
    def path(self) -> str:
        return self._path

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def hparams(self) -> dict:
        """Every hyper-parameter after overrides (see _core.Model.hparams for the keys)."""
        return self._core.hparams

    @property
    def kv_overrides(self) -> list[tuple[str, str, str]]:
        """The --override-kv entries applied at load, in order: (key as the file's architecture spells it, type
        int|float|bool|str, value as given) (_core.Model.kv_overrides)."""
        return list(self._kv_overrides)

    @property
    def indexer_top_k(self) -> int:
        """Keys a DSA layer's query attends (the sparse indexer's top-k, docs/model.md, Indexer) after overrides: the
        file's attention.indexer.top_k unless --override-kv set it."""
        return self._indexer_top_k

    @property
    def chat_template(self) -> str | None:
        return self._core.chat_template

    def metadata(self, key: str) -> Any:
        """Value of GGUF key `key` after overrides (either arch prefix works). Raises KeyError when absent."""
        return self._core.metadata(key)

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Token ids of `text` (see Tokenizer.encode)."""
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of `ids`. Raises ValueError for an id outside the vocab."""
        return self.tokenizer.decode(ids)

    def generate(self, prompt: str | Sequence[int], max_tokens: int = 128, temperature: float = 0.8, top_k: int = 40,
                 top_p: float = 0.95, min_p: float = 0.05, seed: int | None = None,
                 stop: str | Sequence[str] | None = None, stream: bool = False,
                 spec_n_max: int | None = None, cache_prompt: bool = True,
                 special: bool = False, logprobs: int | None = None, grammar: str | Grammar | None = None,
                 json_schema: Mapping[str, Any] | str | bool | None = None,
                 logit_bias: Mapping[int, float] | Sequence[tuple[int, float]] | None = None,
                 post_sampling_probs: bool = False) -> GenerationResult | GenerationStream:
        """Continue `prompt`: evaluate the prompt, then generate round by round (one token per round, or with
        draft-MTP the accepted drafts and the target's token).

        prompt: text (tokenized with add_special=True, as llama-server does, and control tokens parsed) or ids.
        max_tokens: most tokens to generate (0: evaluate the prompt only).
        temperature, top_k, top_p, min_p, seed: the sampler (see _core.Sampler; temperature <= 0 is greedy, seed
            None draws one). The same seed and settings give the same tokens.
        stop: string(s) that end the generation; the first one to appear and all after it are left out of the text.
        spec_n_max: drafts per round for this call (0 = no speculation); None keeps the model's setting.
        cache_prompt: resume from the longest prefix of the prompt this model's sequence already holds (what an
            earlier call evaluated and generated, back to its newest context checkpoint at or before the point
            where the prompts part) and evaluate only the rest, as llama-server does (metrics n_cached_tokens);
            False starts over. The output is the same either way.
        special: show generated control tokens ([MASK], <|user|>, ...) in the text; by default they are generated
            and counted but render as nothing, as in llama-server without --special and llama-cpp-python.
        logprobs: None: none; N >= 0: the result's `logprobs` (and the stream's, as they come) hold, per generated
            token, its log-probability under the target model and the N most probable tokens' (a TokenLogprob:
            natural log, before the sampler's filters and temperature; the same with and without speculation).
        post_sampling_probs: those log-probabilities are the sampler's instead, its filters and temperature applied
            (llama-server's post_sampling_probs; the N most probable of the tokens that survive the filters).
        grammar, json_schema: structured output (glm5next_runtime.grammar, llguidance): every generated token is
            one the grammar allows, with draft-MTP too (drafted under the grammar's masks; greedy output is the
            same with and without speculation). grammar: llama.cpp's GBNF (root rule `root`) or llguidance's
            Lark (`start`), or a compiled Grammar; json_schema: a JSON schema (dict or JSON text; true or {}: any
            JSON value). The text is complete when the model ends it (an end token, allowed only there); max_tokens
            can cut it short (finish_reason "length"). logprobs stay the model's own, before the grammar (unless
            post_sampling_probs: the sampler's, after it).
        logit_bias: {token id: bias} or [(token id, bias)], added to the target's logits (and the draft head's)
            before sampling; -inf bans a token. A token listed twice gets both.
        Generation also ends at an eos / eot / eom token (not returned) and before the context overflows.
        Returns a GenerationResult, or with stream=True a GenerationStream: an iterator of text pieces (complete
        UTF-8 only, stop strings held back while they may still form) whose `result` is set once it is exhausted.
        Raises ValueError (before anything runs) for max_tokens < 0, logprobs < 0, an empty stop string, invalid
        sampler settings, a logit_bias token outside the vocab or a NaN or +inf bias, a GrammarError (a ValueError)
        for a grammar or schema that does not compile or both given, and a PromptError (a ValueError, see
        glm5next_runtime.prompt) for an empty prompt, one longer than n_ctx (a prompt of exactly n_ctx tokens
        generates nothing) or an id outside the vocab.
        """
        job = self.generation(prompt, max_tokens, temperature, top_k, top_p, min_p, seed, stop, spec_n_max,
                              cache_prompt, special, logprobs, grammar, json_schema, logit_bias, post_sampling_probs)
        pieces = GenerationStream(job.run(), job.decoding.tokens, job.decoding.logprobs)
        return pieces if stream else pieces.finish()

    def generation(self, prompt: str | Sequence[int], max_tokens: int = 128, temperature: float = 0.8,
                   top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, seed: int | None = None,
                   stop: str | Sequence[str] | None = None, spec_n_max: int | None = None, cache_prompt: bool = True,
                   special: bool = False, logprobs: int | None = None, grammar: str | Grammar | None = None,
                   json_schema: Mapping[str, Any] | str | bool | None = None,
                   logit_bias: Mapping[int, float] | Sequence[tuple[int, float]] | None = None,
                   post_sampling_probs: bool = False) -> Generation:
        """What generate() runs, checked and ready but not run (the arguments and errors are generate's): run it
        with Generation.run, or hand it to a Scheduler (scheduler.py) that runs the generations of several sequences
        of this model's engine at once."""
        ids = self.tokenize(prompt, add_special=True) if isinstance(prompt, str) else [int(t) for t in prompt]
        check_prompt(ids, self.n_ctx, self.n_vocab)
        if max_tokens < 0:
            raise ValueError(f"max_tokens = {max_tokens}: must be >= 0")
        stops = [stop] if isinstance(stop, str) else list(stop or ())
        if not all(isinstance(s, str) and s for s in stops):
            raise ValueError(f"stop = {stop!r}: stop strings must be non-empty str")
        if logprobs is not None and logprobs < 0:
            raise ValueError(f"logprobs = {logprobs}: must be >= 0 (None: no log-probabilities)")
        constraint = constraint_for(self.tokenizer, end_of_generation_ids(self.tokenizer), grammar, json_schema)
        generator = self.generator(n_max=spec_n_max, temperature=temperature, top_k=top_k, top_p=top_p,
                                   min_p=min_p, seed=seed, n_probs=logprobs, logit_bias=logit_bias,
                                   post_sampling_probs=post_sampling_probs)
        decoding = Decoding(self.tokenizer, self.n_ctx, len(ids), max_tokens, stops, special, [],
                            None if logprobs is None else [])
        return Generation(self._engine, generator, ids, cache_prompt, decoding, constraint)

    def generator(self, n_max: int | None = None, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                  min_p: float = 0.05, seed: int | None = None, index_share: str | None = None,
                  n_min: int | None = None, p_min: float | None = None, adaptive: bool | None = None,
                  synthetic_accepted: float = -1.0, n_probs: int | None = None,
                  logit_bias: Mapping[int, float] | Sequence[tuple[int, float]] | None = None,
                  post_sampling_probs: bool = False) -> _core.Generator:
        """A native generation loop on this model's sequence (what Model.generate drives): its `start(prompt ids,
        cache_prompt=False)` evaluates the prompt (resetting the sequence, or resuming from a shared prefix) and
        returns the first token; each `step()` runs one round and
        returns the tokens it emits (or `draft()` then `verify(n_keep, masks)`, the round cut in two for a grammar's
        masks, see grammar.Constraint.step); `room` and `stats` as in _core.Generator.

        n_max: drafts per round (0 = no speculation); None keeps the model's (draft_n_max, 0 with spec_type none).
        temperature, top_k, top_p, min_p, seed: the sampler (see _core.Sampler; temperature <= 0 is greedy, seed
            None draws one).
        index_share: "auto", "on" or "off" (as spec_index_share); None keeps the model's.
        n_min, p_min: the shortest draft worth verifying and the draft probability below which drafting stops;
            None keeps the model's (draft_n_min, draft_p_min).
        adaptive: draft lengths chosen round by round (at most n_max) or n_max every round (see draft_adaptive);
            None keeps the model's, except that sampling with a given seed under spec_sampling "rejection" drafts
            n_max every round (reproducible).
        synthetic_accepted: benchmarks only, a fixed mean number of accepted drafts per round (< 0: real
            acceptance).
        n_probs: report the log-probability of every emitted token and of the n_probs most probable tokens at
            its position (`probs` after each start and step); None: none.
        logit_bias: {token id: bias} or [(token id, bias)] added to every row's logits (-inf bans); None: none.
        post_sampling_probs: n_probs reports the distribution the sampler drew from (its filters and temperature
            applied, llama-server's post_sampling_probs), not the model's.
        Use one generator at a time: each shares the model's sequence. Raises ValueError for an unknown
        index_share, drafting (n_max > 0) with spec_type none (no NextN caches, or no NextN layer), n_max >=
        n_batch, invalid sampler settings, or a logit_bias token outside the vocab or a NaN or +inf bias.
        """
        if index_share is not None and index_share not in INDEX_SHARE:
            raise ValueError(f"index_share {index_share!r}: expected auto, on or off")
        spec = dict(self.spec)
        if n_max is not None:
            if n_max > 0 and self.spec_type != "draft-mtp":
                raise ValueError(f"n_max = {n_max}: drafting needs spec_type draft-mtp (this model was loaded with "
                                 f"spec_type {self.spec_type}, which keeps no NextN caches)")
            spec["n_max"] = n_max
        if index_share is not None:
            spec["index_share"] = INDEX_SHARE[index_share]
        if adaptive is None and seed is not None and temperature > 0 and spec["sampled_accept"] == "rejection":
            adaptive = False  # a seeded sample is reproduced only with the same draft lengths, not timing-chosen ones
        for key, value in (("n_min", n_min), ("p_min", p_min), ("adaptive", adaptive)):
            if value is not None:
                spec[key] = value
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        bias = list(logit_bias.items()) if isinstance(logit_bias, Mapping) else list(logit_bias or ())
        return _core.Generator(self._seq, **spec, synthetic_accepted=synthetic_accepted,
                               temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                               n_probs=-1 if n_probs is None else n_probs, post_sampling_probs=post_sampling_probs,
                               logit_bias=bias,
                               policy=self._draft_length_policy(spec, synthetic_accepted),
                               end_ids=end_of_generation_ids(self.tokenizer))

    def _draft_length_policy(self, spec: dict, synthetic_accepted: float = -1.0) -> _core.DraftLengthPolicy | None:
        """The draft length policy of adaptive generators with spec's n_max and n_min: one per pair for this
        sequence's life, so that what a request learned of acceptance and of this machine's timings carries over to
        the next (a new policy per request relearned from its prior: ~2% of a short reply, issue 15); not shared
        with another_sequence's (a server's slots run at once; the C++ policy has no lock). Generators with
        synthetic acceptance (synthetic_accepted >= 0, benchmarks) share one per acceptance instead, whose made-up
        outcomes never teach the real one. None without adaptive drafting."""
        if not spec["adaptive"] or spec["n_max"] <= 0:
            return None
        pair = (spec["n_max"], max(spec["n_min"], 0))
        key = pair + ((float(synthetic_accepted),) if synthetic_accepted >= 0 else ())
        if key not in self._draft_length_policies:
            self._draft_length_policies[key] = self.new_draft_length_policy(*pair)
        return self._draft_length_policies[key]

    def new_draft_length_policy(self, n_max: int, n_min: int = 0) -> _core.DraftLengthPolicy:
        """A new _core.DraftLengthPolicy for rounds on this model's engine: it assumes the round costs measured at
        load (draft_calibration) until it timed its own, or the built-in ratios without a calibration. Raises
        ValueError for n_max < 0."""
        prior = self.draft_calibration.prior if self.draft_calibration else _core.RoundCostPrior()
        return _core.DraftLengthPolicy(n_max, n_min, prior)

    @property
    def devices(self) -> list[str]:
        """The devices other than the CPU that hold this model's weights, the draft file's included (as placed at
        load, see placement() and draft_placement())."""
        main = list(self._core.devices)
        return main + [d for d in (self._draft_core.devices if self._draft_core else []) if d not in main]

    def memory(self) -> list[dict]:
        """llama.cpp's load report: per device that holds anything, {"device", "weights", "caches", "compute"} in
        bytes, the CPU last, for the engine (shared by the Models another_sequence made: caches are all their
        sequences', compute the schedulers' buffers, once for all); compute is sized at load for a full ubatch at the
        end of the context. This sequence's own caches: sequence.cache_bytes."""
        return self._engine.memory()

    @property
    def graph_splits(self) -> int:
        """Splits of the last graph run by ggml's scheduler: 1 when every op ran on one device, more when the
        graph crossed devices (each split boundary copies tensors between them)."""
        return self._engine.n_splits

    @property
    def graphs_built(self) -> int:
        """Graphs built since load. A ubatch of the same shape as the one before (a decode step, a draft step, a
        verify pass of as many rows) runs the graph built for that one with new inputs (llama.cpp's graph reuse);
        decoding builds one every kPoolBucket pools (csrc/graph/blocks.h: 256 tokens at index_kpool 4)."""
        return self._engine.n_graphs_built

    def checkpoints(self) -> dict[str, Any]:
        """The context checkpoints this sequence keeps (see generate's cache_prompt): {"count", "bytes" (host
        memory of all), "rows" (the sequence length each resumes at, ascending), "bytes_each" (one checkpoint: the
        KDA conv windows and states of every trunk layer, and one hidden row), "max_count" (ctx_checkpoints)}."""
        return self._seq.checkpoint_stats()

    def save_state(self) -> bytes:
        """The whole sequence as bytes (llama.cpp's llama_state_seq_get_data, llama-cpp-python's save_state): its
        tokens, the trunk's and the NextN layer's cache rows and its context checkpoints. A Model of the same file
        given them by load_state resumes from them as this one would (see generate's cache_prompt). Format:
        csrc/runtime/sequence_state.h; its size grows with the sequence (latent and indexer rows) and the
        checkpoints (checkpoints()["bytes"])."""
        return self._seq.save_state()

    def load_state(self, data: bytes) -> None:
        """Replace the sequence with one save_state returned (by this Model or another of the same file): a prompt
        sharing a prefix with it then evaluates only the rest. Raises ValueError, naming what is wrong and keeping
        the sequence as it was, for bytes that are not a saved sequence, a damaged one, one of another model, or
        one longer than n_ctx."""
        self._seq.load_state(bytes(data))
        self._last = None

    @property
    def graph_traffic(self) -> dict[str, Any]:
        """What crossed devices in the last graph run: {"splits": int, "bytes_copied": int (bytes the scheduler
        copied between devices), "copy_seconds": float (time those copies took)}; bytes and seconds are measured
        only while profile_traffic(True) is on (else 0 and -1)."""
        return self._engine.traffic()

    def profile_traffic(self, on: bool) -> None:
        """Measure graph_traffic's bytes and copy time on every graph run from now on. Compute is slower while on
        (each device syncs after every node), the copies are not: compare copy_seconds with an unprofiled run.
        ValueError while the engine's profile_ops is on (one timer at a time)."""
        self._engine.profile_traffic(bool(on))

    def placement(self) -> dict[str, str]:
        """Tensor name -> device name ("CPU", "CUDA0", ...) under this model's placement settings."""
        return dict(self._placement)

    def draft_placement(self) -> dict[str, str]:
        """The same for the separate draft file (draft_model, -md), placed by the same rules (its NextN layer
        follows -devd or the trunk's last layer, its output layer the trunk's); {} without one."""
        return dict(self._draft_placement)

    def tensors(self) -> list[TensorInfo]:
        """Every tensor of the file (trunk file only, not a draft_model's), in file order: (name, ggml type name,
        shape, nbytes) (see TensorInfo)."""
        return [TensorInfo(*t) for t in self._core.tensors()]

    def _place(self, core: _core.Model) -> dict[str, str]:
        """Plans where `core`'s tensors go under this model's placement settings, places them, returns the plan."""
        hp = core.hparams
        names = [name for name, *_ in core.tensors()]
        plan = plan_placement(names, hp["n_layer_all"], hp["n_trunk"], self._offload, **self._placement_args)
        core.place({name: device for name, device in plan.items() if device != CPU})
        return plan
