"""The most prompt bytes one token of a tokenizer can stand for, so a prompt far too long for the
model is refused from its length alone, without tokenizing it (4 MB took ~4 s of CPU).

A prompt of N bytes has at least ceil(N / max_token_bytes) tokens only if no part of it can vanish
or shrink on the way to tokens. So the bound is given only for tokenizers whose every step is known
to keep each byte: normalizers that never shorten text, pre-tokenizers that drop nothing, and a
model that never folds a run of unknown text into one token. The one loss that is allowed is a
byte-level vocabulary without some byte values (SmolLM2 has no token for '\x04', and drops it):
those bytes are named, and only the others count. For any other tokenizer ``UnboundedTokens`` says
why, and prompts are tokenized before the length check as before.

Token strings are measured, not single-token decodes: for byte-level BPE (GPT-2 style, 'Ġ' for a
space) each character of a token string is one byte of the prompt; otherwise the token string
*is* prompt text, after normalizing (a SentencePiece '▁' decodes to one space, yet a prompt may
hold '▁' itself, three bytes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from transformers.convert_slow_tokenizer import bytes_to_unicode

# GPT-2's byte-level alphabet: the character that stands for each of the 256 byte values.
BYTE_TO_CHAR: dict[int, str] = bytes_to_unicode()
BYTE_LEVEL_ALPHABET = frozenset(BYTE_TO_CHAR.values())
_BYTE_FALLBACK_TOKEN = re.compile(r"<0x[0-9A-F]{2}>")
# Normalizers and pre-tokenizers that never drop or shorten text (Replace and Split are checked
# by their arguments below; Lowercase, NFKC and even NFC/NFD can shorten a character).
_KEEPING_NORMALIZERS = frozenset({"Prepend", "Replace", "Sequence"})
_KEEPING_PRE_TOKENIZERS = frozenset(
    {"ByteLevel", "Metaspace", "Split", "Digits", "Punctuation", "UnicodeScripts", "Sequence"}
)
# The longest UTF-8 character: what one unknown-character token can stand for.
MAX_CHAR_BYTES = 4


class UnboundedTokens(Exception):
    """No byte bound holds for this tokenizer; the message says which part allows long tokens."""


@dataclass(frozen=True)
class TokenBytes:
    """No token stands for more than ``max_bytes`` prompt bytes, ``dropped`` bytes aside."""

    max_bytes: int
    # Byte values a byte-level vocabulary has no token for: the tokenizer drops them (or folds
    # them into unknown tokens), so they may make no token at all.
    dropped: bytes = b""

    def counted_bytes(self, prompt: bytes) -> int:
        """The bytes of ``prompt`` that each belong to some token."""
        return len(prompt.translate(None, self.dropped)) if self.dropped else len(prompt)


def max_token_bytes(tokenizer: Any) -> TokenBytes:
    """The bound for a Hugging Face fast tokenizer (what vLLM's ``get_tokenizer()`` returns)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UnboundedTokens(
            f"{type(tokenizer).__name__} is not a Hugging Face fast tokenizer; its tokens "
            "cannot be inspected"
        )
    return max_token_bytes_of(json.loads(backend.to_str()))


def max_token_bytes_of(config: Mapping[str, Any]) -> TokenBytes:
    """The bound for a tokenizer given as its ``tokenizer.json`` content."""
    _check_normalizer(config.get("normalizer"))
    pre_tokenizers = list(_flatten(config.get("pre_tokenizer"), "pretokenizers"))
    for step in pre_tokenizers:
        _check_pre_tokenizer(step)
    byte_level = any(step["type"] == "ByteLevel" for step in pre_tokenizers)

    model = config["model"]
    kind = model.get("type")
    if kind == "BPE":
        vocab: Iterable[str] = model["vocab"]
    elif kind == "Unigram":
        vocab = [piece for piece, _score in model["vocab"]]
    else:
        raise UnboundedTokens(f"a {kind} model can map a whole unknown word to one token")
    byte_fallback = bool(model.get("byte_fallback"))
    seen = set(vocab)
    longest = max((_token_bytes(token, byte_level, byte_fallback) for token in seen), default=0)
    dropped = b""
    if byte_level:
        dropped = bytes(sorted(value for value, char in BYTE_TO_CHAR.items() if char not in seen))
    else:
        longest = max(longest, _unknown_token_bytes(model, seen, byte_fallback))

    for added in config.get("added_tokens") or []:
        if added.get("lstrip") or added.get("rstrip"):
            raise UnboundedTokens(
                f"added token {added['content']!r} takes in any whitespace beside it "
                "(lstrip/rstrip)"
            )
        longest = max(longest, len(added["content"].encode("utf-8")))
    if longest == 0:
        raise UnboundedTokens("the tokenizer has no tokens")
    return TokenBytes(longest, dropped)


def _token_bytes(token: str, byte_level: bool, byte_fallback: bool) -> int:
    if byte_level and BYTE_LEVEL_ALPHABET.issuperset(token):
        return len(token)
    if byte_fallback and _BYTE_FALLBACK_TOKEN.fullmatch(token):
        return 1
    return len(token.encode("utf-8"))


def _unknown_token_bytes(model: Mapping[str, Any], vocab: set[str], byte_fallback: bool) -> int:
    """What a token for text the vocabulary cannot spell stands for: one character at most."""
    if byte_fallback and all(f"<0x{value:02X}>" in vocab for value in range(256)):
        return 0
    if model["type"] == "Unigram":
        raise UnboundedTokens("the Unigram model folds a run of unknown characters into one token")
    if not model.get("unk_token"):
        raise UnboundedTokens("the BPE model drops characters it has no token for")
    if model.get("fuse_unk"):
        raise UnboundedTokens("the BPE model folds a run of unknown characters into one token "
                              "(fuse_unk)")
    return MAX_CHAR_BYTES


def _flatten(step: Mapping[str, Any] | None, children: str) -> Iterable[Mapping[str, Any]]:
    if step is None:
        return
    if step["type"] == "Sequence":
        for child in step[children]:
            yield from _flatten(child, children)
    else:
        yield step


def _check_normalizer(normalizer: Mapping[str, Any] | None) -> None:
    for step in _flatten(normalizer, "normalizers"):
        kind = step["type"]
        if kind not in _KEEPING_NORMALIZERS:
            raise UnboundedTokens(f"the {kind} normalizer can shorten or drop prompt text")
        if kind == "Replace":
            pattern = step["pattern"]
            if "String" not in pattern or (
                len(step["content"].encode("utf-8")) < len(pattern["String"].encode("utf-8"))
            ):
                raise UnboundedTokens(
                    f"the Replace normalizer ({json.dumps(pattern)} -> "
                    f"{json.dumps(step['content'])}) can shorten prompt text"
                )


def _check_pre_tokenizer(step: Mapping[str, Any]) -> None:
    kind = step["type"]
    if kind not in _KEEPING_PRE_TOKENIZERS:
        raise UnboundedTokens(f"the {kind} pre-tokenizer can drop prompt text")
    if step.get("behavior") == "Removed":
        raise UnboundedTokens(f"the {kind} pre-tokenizer removes what it splits on")
