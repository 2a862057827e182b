"""GLM's byte-level BPE tokenizer, rebuilt from the vocab a GGUF carries (docs/gguf.md, Tokenizer).

The GGUF stores llama.cpp's `gpt2` model with the `glm4` pre-tokenizer: token strings in the byte-level
alphabet, merges, and a type per token. This builds the equivalent Hugging Face `tokenizers.Tokenizer`, so ids
match the checkpoint's own tokenizer.json.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from functools import cached_property, lru_cache

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers

from . import text_pieces

# GLM-4's split expression, the one llama.cpp's "glm4" pre-tokenizer uses.
GLM4_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# llama.cpp token types (tokenizer.ggml.token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """The byte-level alphabet, inverted: char -> byte (GPT-2's bytes_to_unicode)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}  # printable bytes stand for themselves
    others = [b for b in range(256) if b not in table.values()]
    table.update({chr(256 + n): b for n, b in enumerate(others)})  # the rest for 256, 257, ... in byte order
    return table


class Tokenizer:
    """Text <-> token ids for a glm5next GGUF. Build it with `from_gguf_vocab`."""

    def __init__(self, tok: tokenizers.Tokenizer, tokens: list[str], token_types: list[int],
                 special_ids: Mapping[str, int], add_bos: bool = False, add_eos: bool = False):
        self._tok = tok
        self._tokens = tuple(tokens)
        self._types = tuple(token_types)
        self.special_ids = dict(special_ids)
        self.add_bos, self.add_eos = add_bos, add_eos
        # `encode_special_tokens` is tokenizer state; the lock keeps one encode's setting from leaking into another's
        self._lock = threading.Lock()

    @classmethod
    def from_gguf_vocab(cls, tokens: Sequence[str | bytes], token_types: Sequence[int], merges: Sequence[str],
                        special_ids: Mapping[str, int], add_bos: bool = False, add_eos: bool = False) -> Tokenizer:
        """Build from what `_core.Model.vocab()` returns.

        tokens: [n_vocab] token strings (byte-level alphabet for BPE tokens, plain text for added tokens).
        token_types: [n_vocab] llama.cpp types; CONTROL (3) tokens become special added tokens, USER_DEFINED (4)
            non-special added tokens, UNUSED (5) padding is left out of the vocab (decodes to nothing).
        merges: BPE merges "left right", highest priority first (bytes for one that is not UTF-8: refused).
        special_ids: e.g. {"bos": 386, "eos": 384, "eot": 391}.
        add_bos / add_eos: what encode(add_special=True) adds (tokenizer.ggml.add_bos_token / add_eos_token).
        Raises ValueError for mismatched lengths, a token that is not UTF-8 or merges the vocab cannot support.
        """
        if len(tokens) != len(token_types):
            raise ValueError(f"vocab: {len(tokens)} tokens but {len(token_types)} token types")
        texts: list[str] = []
        for i, t in enumerate(tokens):
            if isinstance(t, bytes):
                try:
                    t = t.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(f"vocab: token {i} ({t!r}) is not UTF-8") from None
            texts.append(t)
        vocab: dict[str, int] = {}
        for i, (t, ty) in enumerate(zip(texts, token_types)):
            if ty != UNUSED:
                vocab.setdefault(t, i)
        pairs = []
        for m in merges:
            if isinstance(m, bytes):
                raise ValueError(f"vocab: merge {m!r} is not UTF-8")
            left, sep, right = m.partition(" ")
            if not sep:
                raise ValueError(f"vocab: merge {m!r} is not 'left right'")
            pairs.append((left, right))
        try:
            bpe = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False)
        except Exception as e:  # tokenizers raises its own exception type for a merge outside the vocab
            raise ValueError(f"vocab: cannot build the BPE model: {e}") from None

        tok = tokenizers.Tokenizer(bpe)
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(GLM4_SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        # Their ids are kept because each content is already in the BPE vocab under that id.
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t, ty in zip(texts, token_types) if ty == CONTROL])
        tok.add_tokens([AddedToken(t, special=False, normalized=False)
                        for t, ty in zip(texts, token_types) if ty == USER_DEFINED])
        return cls(tok, texts, list(token_types), special_ids, add_bos, add_eos)

    @property
    def n_vocab(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> tuple[str, ...]:
        """[n_vocab] the token strings as the file stores them (byte-level alphabet for BPE tokens, plain text for
        added tokens); token_to_piece gives a token's bytes."""
        return self._tokens

    @property
    def token_types(self) -> tuple[int, ...]:
        """[n_vocab] llama.cpp token types: NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE (1..6)."""
        return self._types

    def encode(self, text: str, add_special: bool = False, parse_special: bool = True,
               max_tokens: int | None = None) -> list[int]:
        """Token ids of `text`.

        add_special: add BOS / EOS when the file asks for them (GLM files do not: the chat template writes
            [gMASK]<sop> itself).
        parse_special: control tokens written in the text (e.g. "<|user|>") become their ids; when False they are
            tokenized as plain text. User-defined added tokens (e.g. "<think>") are always matched, as in llama.cpp.
        max_tokens: stop once the text is known to have more tokens than this and return the ids so far (more than
            max_tokens of them, the start of the full answer); a long text is tokenized piece by piece at cuts that
            leave its tokens unchanged (text_pieces.py), so little is tokenized past the limit. None: all of it.
        The Rust tokenizer runs without the GIL, so other Python threads (the server's event loop) keep running.
        """
        return self._add_special(self._encode_text(text, parse_special, max_tokens), add_special)

    def split_control(self, text: str) -> list[str | int]:
        """`text` cut at the control tokens it spells, as encode(parse_special=True) finds them (added tokens
        matched leftmost-longest): the text between them (non-empty str) and the control tokens' ids (int)."""
        parts: list[str | int] = []
        start = 0
        for match in self._added_pattern.finditer(text) if self._added_pattern is not None else ():
            token = self._control_ids.get(match[0])
            if token is None:  # a user-defined token: encode matches it in the text part
                continue
            if match.start() > start:
                parts.append(text[start:match.start()])
            parts.append(token)
            start = match.end()
        if start < len(text):
            parts.append(text[start:])
        return parts

    def encode_parts(self, parts: Sequence[str | int], add_special: bool = False,
                     max_tokens: int | None = None) -> list[int]:
        """Token ids of `parts` in order: each str tokenized without parsing control tokens (parse_special=False),
        each int taken as a token id (not checked). add_special and max_tokens as in encode."""
        ids: list[int] = []
        for part in parts:
            if max_tokens is not None and len(ids) > max_tokens:
                break
            if isinstance(part, str):
                ids += self._encode_text(part, False, None if max_tokens is None else max_tokens - len(ids))
            else:
                ids.append(int(part))
        return self._add_special(ids, add_special)

    @cached_property
    def max_token_bytes(self) -> int:
        """The most bytes one token stands for (its token_to_piece). A text of B UTF-8 bytes is at least
        ceil(B / max_token_bytes) tokens, however it is tokenized: the pieces of its tokens spell its bytes."""
        return max((len(self.token_to_piece(i)) for i in range(len(self._tokens))), default=1) or 1

    @cached_property
    def added_tokens(self) -> tuple[str, ...]:
        """The texts of the added tokens (control and user-defined), longest first: where a long text may not be
        cut (glm5next_runtime.text_pieces)."""
        return tuple(sorted({t for t, ty in zip(self._tokens, self._types) if ty in (CONTROL, USER_DEFINED) and t},
                            key=len, reverse=True))

    @cached_property
    def _added_pattern(self) -> re.Pattern[str] | None:
        return re.compile("|".join(map(re.escape, self.added_tokens))) if self.added_tokens else None

    @cached_property
    def _control_ids(self) -> dict[str, int]:
        # first id of each text, as the HF tokenizer keeps it
        out: dict[str, int] = {}
        for i, (t, ty) in enumerate(zip(self._tokens, self._types)):
            if ty == CONTROL and t:
                out.setdefault(t, i)
        return out

    def _encode_text(self, text: str, parse_special: bool, max_tokens: int | None) -> list[int]:
        ids: list[int] = []
        for piece in text_pieces.pieces(text, self.added_tokens):
            # encode_batch releases the GIL (encode does not); `encode_special_tokens` is tokenizer state, hence
            # the lock
            with self._lock:
                self._tok.encode_special_tokens = not parse_special
                ids += self._tok.encode_batch([piece], add_special_tokens=False)[0].ids
            if max_tokens is not None and len(ids) > max_tokens:
                break
        return ids

    def _add_special(self, ids: list[int], add_special: bool) -> list[int]:
        if add_special and self.add_bos and "bos" in self.special_ids:
            ids.insert(0, self.special_ids["bos"])
        if add_special and self.add_eos and "eos" in self.special_ids:
            ids.append(self.special_ids["eos"])
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text of `ids` (invalid UTF-8 from a partial sequence becomes U+FFFD; stream with token_to_piece).
        skip_special drops control tokens. Raises ValueError for an id outside the vocab."""
        ids = [self._check_id(i) for i in ids]
        return self._tok.decode(ids, skip_special_tokens=skip_special)

    def token_to_piece(self, token_id: int, special: bool = True) -> bytes:
        """The exact bytes token `token_id` stands for (may be part of a UTF-8 sequence): concatenating the pieces
        of a sequence gives its UTF-8 text. Added tokens give their text, unused padding tokens b"".
        special=False renders control tokens as b"" (llama.cpp's token_to_piece without `special`: what
        llama-server and llama-cpp-python show of a generation). Raises ValueError for an id outside the vocab."""
        i = self._check_id(token_id)
        ty = self._types[i]
        if ty == UNUSED or (ty == CONTROL and not special):
            return b""
        text = self._tokens[i]
        if ty in (CONTROL, USER_DEFINED):
            return text.encode("utf-8")
        table = _byte_decoder()
        return b"".join(bytes([table[c]]) if c in table else c.encode("utf-8") for c in text)

    def _check_id(self, token_id: int) -> int:
        if not 0 <= token_id < len(self._tokens):
            raise ValueError(f"token id {token_id} is outside the vocab [0, {len(self._tokens)})")
        return int(token_id)
