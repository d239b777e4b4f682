"""Unit tests for llm_backend.token_bytes: the most prompt bytes one token can stand for."""

from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import pytest
from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from control_plane.demo_model import MODEL_DIR
from llm_backend.token_bytes import (
    BYTE_LEVEL_ALPHABET,
    MAX_CHAR_BYTES,
    TokenBytes,
    UnboundedTokens,
    max_token_bytes,
    max_token_bytes_of,
)

CORPUS = [
    "hello world " * 50,
    "the quick brown fox jumps over the lazy dog " * 40,
    "ééé ünïcödé ✓✓✓ 日本語 " * 30,
    "def f(x):\n" + "    return x\n" * 20,
]


def byte_level_bpe() -> Tokenizer:
    """A small GPT-2-style tokenizer ('Ġ' for a space), trained here in milliseconds."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def sentencepiece_bpe() -> Tokenizer:
    """A Llama-2-style tokenizer: spaces become '▁', unknown bytes fall back to <0xNN>."""
    vocab = {f"<0x{value:02X}>": value for value in range(256)}
    for piece in ("▁", "▁▁▁▁", "▁the", "▁t", "he", "h", "e", "t"):
        vocab[piece] = len(vocab)
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "▁"), ("▁▁", "▁▁")]
    vocab["▁▁"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return tok


def config(tok: Tokenizer) -> dict:
    return json.loads(tok.to_str())


def random_texts(seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcdefghij ék✓日\n\t\x04\x00" + "".join(sorted(BYTE_LEVEL_ALPHABET))[:40] + "▁"
    pieces = [*CORPUS, "<|endoftext|>", "\n" + " " * 80, "▁▁▁▁▁▁▁▁", "\x04" * 50]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300))) for _ in range(200)]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 5))) for _ in range(100)]
    return texts


def assert_bound_holds(tok: Tokenizer, bound: TokenBytes) -> None:
    """The promise the backend relies on: N counted bytes make at least ceil(N / max) tokens."""
    for text in random_texts():
        tokens = len(tok.encode(text).ids)
        assert tokens >= math.ceil(bound.counted_bytes(text.encode()) / bound.max_bytes), \
            (text, tokens)


# -- byte-level BPE ------------------------------------------------------------------------------


def test_byte_level_tokens_count_bytes_not_characters_of_the_token_string():
    tok = byte_level_bpe()
    bound = max_token_bytes_of(config(tok))
    decoded = max(len(tok.decode([i]).encode()) for i in range(tok.get_vocab_size())
                  if tok.id_to_token(i) != "<|endoftext|>")
    # 'Ã©' is two characters of four UTF-8 bytes standing for 'é', two bytes.
    assert bound == TokenBytes(max(decoded, len("<|endoftext|>")))
    assert bound.max_bytes < max(len(t.encode()) for t in tok.get_vocab())
    assert_bound_holds(tok, bound)


def test_an_added_token_counts_its_content():
    tok = byte_level_bpe()
    tok.add_tokens([AddedToken("<" + "long special " * 10 + ">", special=True)])
    bound = max_token_bytes_of(config(tok))
    assert bound.max_bytes == len("<" + "long special " * 10 + ">")
    assert_bound_holds(tok, bound)


@pytest.mark.parametrize(("strip", "text"), [({"lstrip": True}, " " * 1000 + "<mask>"),
                                             ({"rstrip": True}, "<mask>" + " " * 1000)])
def test_an_added_token_that_takes_in_whitespace_has_no_bound(strip, text):
    tok = byte_level_bpe()
    tok.add_special_tokens([AddedToken("<mask>", **strip)])
    assert len(tok.encode(text).ids) == 1
    with pytest.raises(UnboundedTokens, match="'<mask>' takes in any whitespace"):
        max_token_bytes_of(config(tok))


def test_the_demo_model_tokenizer():
    if not (MODEL_DIR / "tokenizer.json").exists():
        pytest.skip("the demo model is not built (scripts/bootstrap.sh)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    bound = max_token_bytes(tokenizer)
    # SmolLM2's longest token: a newline and 80 spaces.
    assert bound.max_bytes == 81
    assert len(tokenizer.encode("\n" + " " * 80)) == 1
    # Six ASCII control characters have no token and vanish; the others can never occur in UTF-8
    # text or start characters beyond U+3FFFF.
    assert bound.dropped == bytes([0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2,
                                   *range(0xF5, 0x100)])
    assert tokenizer.encode("\x04" * 1000 + "Hello") == tokenizer.encode("Hello")
    assert bound.counted_bytes(("\x04" * 1000 + "Hello").encode()) == 5
    assert_bound_holds(tokenizer.backend_tokenizer, bound)


# -- SentencePiece-style BPE ---------------------------------------------------------------------


def test_sentencepiece_tokens_count_their_own_bytes_not_what_they_decode_to():
    tok = sentencepiece_bpe()
    bound = max_token_bytes_of(config(tok))
    # '▁▁▁▁' decodes to four spaces, but a prompt may hold '▁▁▁▁' itself: 12 bytes, one token.
    assert bound == TokenBytes(len("▁▁▁▁".encode())) == TokenBytes(12)
    assert len(tok.encode("▁▁▁▁").ids) <= 2
    assert_bound_holds(tok, bound)


def test_byte_fallback_tokens_stand_for_one_byte():
    cfg = config(sentencepiece_bpe())
    cfg["model"]["vocab"] = {f"<0x{value:02X}>": value for value in range(256)}
    cfg["model"]["merges"] = []
    assert max_token_bytes_of(cfg) == TokenBytes(1)


# -- what makes a bound impossible ---------------------------------------------------------------


@pytest.mark.parametrize("normalizer", [
    normalizers.Lowercase(), normalizers.NFKC(), normalizers.NFC(), normalizers.Strip(),
    normalizers.BertNormalizer(), normalizers.Replace("▁", " "),
    normalizers.Sequence([normalizers.Prepend("▁"), normalizers.NFKD()]),
])
def test_a_normalizer_that_can_shorten_text_has_no_bound(normalizer):
    tok = byte_level_bpe()
    tok.normalizer = normalizer
    with pytest.raises(UnboundedTokens, match="normalizer"):
        max_token_bytes_of(config(tok))


def test_a_regex_replace_has_no_bound():
    cfg = config(sentencepiece_bpe())
    cfg["normalizer"] = {"type": "Replace", "pattern": {"Regex": " +"}, "content": " "}
    with pytest.raises(UnboundedTokens, match="Replace normalizer"):
        max_token_bytes_of(cfg)


@pytest.mark.parametrize("pre_tokenizer", [
    pre_tokenizers.Whitespace(), pre_tokenizers.WhitespaceSplit(),
    pre_tokenizers.BertPreTokenizer(),
    pre_tokenizers.Split(" ", behavior="removed"),
    pre_tokenizers.Sequence([pre_tokenizers.Digits(), pre_tokenizers.Punctuation("removed")]),
])
def test_a_pre_tokenizer_that_drops_text_has_no_bound(pre_tokenizer):
    tok = byte_level_bpe()
    tok.pre_tokenizer = pre_tokenizer
    with pytest.raises(UnboundedTokens, match="pre-tokenizer"):
        max_token_bytes_of(config(tok))


def test_pre_tokenizers_that_keep_text_keep_the_bound():
    tok = byte_level_bpe()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="isolated"), pre_tokenizers.Digits(),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    assert_bound_holds(tok, max_token_bytes_of(config(tok)))


def unknown_prone_bpe(**kwargs) -> dict:
    """A BPE without byte fallback whose vocabulary cannot spell every character."""
    cfg = config(sentencepiece_bpe())
    cfg["model"].update(byte_fallback=False, **kwargs)
    cfg["model"]["vocab"] = {"▁": 0, "a": 1, "<unk>": 2, "▁a": 3}
    cfg["model"]["merges"] = [["▁", "a"]]
    return cfg


def test_bpe_with_an_unknown_token_per_character_counts_a_whole_character():
    bound = max_token_bytes_of(unknown_prone_bpe(unk_token="<unk>", fuse_unk=False))
    assert bound == TokenBytes(max(MAX_CHAR_BYTES, len("<unk>")))


@pytest.mark.parametrize(("model", "message"), [
    ({"unk_token": "<unk>", "fuse_unk": True}, "folds a run of unknown characters"),
    ({"unk_token": None}, "drops characters"),
])
def test_bpe_that_folds_or_drops_unknown_text_has_no_bound(model, message):
    with pytest.raises(UnboundedTokens, match=message):
        max_token_bytes_of(unknown_prone_bpe(**model))


@pytest.mark.parametrize("unk", [{}, {"unk_token": "<|endoftext|>"},
                                 {"unk_token": "<|endoftext|>", "fuse_unk": True}])
def test_bytes_a_byte_level_vocabulary_lacks_are_not_counted(unk):
    tok = byte_level_bpe()
    cfg = config(tok)
    del cfg["model"]["vocab"]["Ā"]  # byte 0x00
    cfg["model"].update(unk)
    bound = max_token_bytes_of(cfg)
    assert bound.dropped == b"\x00"
    assert bound.counted_bytes(b"\x00\x00ab\x00") == 2
    assert_bound_holds(Tokenizer.from_str(json.dumps(cfg)), bound)


def test_unigram_needs_byte_fallback():
    vocab = [("<unk>", 0.0), ("▁", -1.0), ("a", -2.0), ("▁aaa", -1.5)]
    without = config(Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=False)))
    with pytest.raises(UnboundedTokens, match="Unigram"):
        max_token_bytes_of(without)
    vocab += [(f"<0x{value:02X}>", -9.0) for value in range(256)]
    with_fallback = config(Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True)))
    assert max_token_bytes_of(with_fallback) == TokenBytes(len("▁aaa".encode()))


@pytest.mark.parametrize("model", [
    models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"),
    models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"),
])
def test_word_models_have_no_bound(model):
    with pytest.raises(UnboundedTokens, match="whole unknown word"):
        max_token_bytes_of(config(Tokenizer(model)))


def test_a_tokenizer_without_a_fast_backend_has_no_bound():
    with pytest.raises(UnboundedTokens, match="not a Hugging Face fast tokenizer"):
        max_token_bytes(SimpleNamespace())


def test_a_fast_tokenizer_is_read_through_its_backend():
    tok = byte_level_bpe()
    assert max_token_bytes(SimpleNamespace(backend_tokenizer=tok)) == \
        max_token_bytes_of(config(tok))
