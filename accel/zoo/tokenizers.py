"""In-memory tokenizers for the tiny zoo: no hub download, deterministic vocabularies.

Real checkpoints ship tokenizer files; the zoo builds equivalents from tiny vocabularies so that the
pipelines' real tokenisation code (padding, truncation, chat templates) runs unchanged. Every tokenizer
sets ``model_max_length`` explicitly: without it transformers reports ~1e30 and FLUX pads to it.
"""

from __future__ import annotations

import string

from transformers import CLIPTokenizer, Qwen2Tokenizer, T5Tokenizer

CLIP_MAX_LENGTH = 77
T5_MAX_LENGTH = 128


def clip_tokenizer() -> CLIPTokenizer:
    """A character-level CLIP BPE tokenizer (vocabulary of 56 entries, ids 0 and 1 are BOS/EOS)."""
    letters = list(string.ascii_lowercase)
    words = ["<|startoftext|>", "<|endoftext|>"] + [c + "</w>" for c in letters] + letters
    vocab = {word: index for index, word in enumerate(words)}
    return CLIPTokenizer(
        vocab=vocab,
        merges=[],
        model_max_length=CLIP_MAX_LENGTH,
        unk_token="<|endoftext|>",
        bos_token="<|startoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )


def t5_tokenizer() -> T5Tokenizer:
    """A character-level T5 (unigram) tokenizer; ids 0/1/2 are pad, EOS and unknown as in T5."""
    letters = list(string.ascii_lowercase)
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    pieces += [(c, -1.0) for c in letters] + [("▁" + c, -1.0) for c in letters] + [("▁", -1.0)]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=T5_MAX_LENGTH)


def _gpt2_byte_alphabet() -> list[str]:
    """GPT-2's byte-to-unicode table (256 printable characters), as byte-level BPE tokenizers use."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return [chr(code) for code in codes]


QWEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def qwen2_tokenizer() -> Qwen2Tokenizer:
    """A byte-level Qwen2 tokenizer covering every byte (259 ids).

    QwenImage wraps the prompt in a chat template and drops its first 34 tokens, so the vocabulary must
    cover the whole byte alphabet: a word-level vocabulary yields an empty embedding.
    """
    vocab = {char: index for index, char in enumerate(_gpt2_byte_alphabet())}
    for token in QWEN_SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    return Qwen2Tokenizer(
        vocab=vocab,
        merges=[],
        model_max_length=1024,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,  # type: ignore[arg-type]  # Qwen2's tokenizer has no unknown token; transformers takes None
    )
