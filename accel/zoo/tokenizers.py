"""In-memory tokenizers for the tiny zoo: no hub download, deterministic vocabularies.

Real checkpoints ship tokenizer files; the zoo builds equivalents from tiny vocabularies so that the
pipelines' real tokenisation code (padding, truncation, chat templates) runs unchanged. Every tokenizer
sets ``model_max_length`` explicitly: without it transformers reports ~1e30 and FLUX pads to it.
"""

from __future__ import annotations

import string

from transformers import CLIPTokenizer, GemmaTokenizer, LlamaTokenizer, Qwen2Tokenizer, T5Tokenizer

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


_SENTENCEPIECE_BYTES = [f"<0x{byte:02X}>" for byte in range(256)]


def _sentencepiece_vocab(specials: list[str]) -> dict[str, int]:
    """Specials, word-start and plain letters, then byte fallback pieces: every string tokenises."""
    letters = list(string.ascii_lowercase)
    pieces = specials + ["▁"] + letters + ["▁" + c for c in letters] + _SENTENCEPIECE_BYTES
    return {piece: index for index, piece in enumerate(pieces)}


GEMMA_SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]


def gemma_tokenizer() -> GemmaTokenizer:
    """A character-level Gemma tokenizer with byte fallback (316 ids: 0 pad, 1 EOS, 2 BOS), as Sana and
    Lumina2's Gemma 2 encoders use."""
    return GemmaTokenizer(vocab=_sentencepiece_vocab(GEMMA_SPECIAL_TOKENS), merges=[], model_max_length=512)


def llama_tokenizer() -> LlamaTokenizer:
    """A character-level Llama tokenizer with byte fallback (313 ids: 0 unknown, 1 BOS, 2 EOS), as
    HunyuanVideo's and HiDream's Llama encoders use."""
    tokenizer = LlamaTokenizer(vocab=_sentencepiece_vocab(["<unk>", "<s>", "</s>"]), merges=[], model_max_length=512)
    tokenizer.pad_token = "</s>"
    return tokenizer


# Qwen2/Qwen3's ChatML, as the Qwen chat models ship it (without the tool and thinking branches).
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def qwen2_chat_tokenizer() -> Qwen2Tokenizer:
    """``qwen2_tokenizer`` with the ChatML template (Z-Image, FLUX.2 klein apply it to the prompt)."""
    tokenizer = qwen2_tokenizer()
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def glm_tokenizer() -> Qwen2Tokenizer:
    """``qwen2_tokenizer`` that starts every text with a prefix token, as GLM-4's ``[gMASK]<sop>`` does:
    CogView4 encodes an empty negative prompt, which would otherwise be zero tokens long."""
    return Qwen2Tokenizer(
        vocab=qwen2_tokenizer().get_vocab(),
        merges=[],
        model_max_length=1024,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token="<|im_start|>",
        add_bos_token=True,
        unk_token=None,  # type: ignore[arg-type]  # as qwen2_tokenizer
    )


# Qwen2-VL's vision tokens, at the ids the zoo's Qwen2.5-VL configs name (vision_start_token_id 290 ...).
QWEN_VL_TOKENS = {
    "<|vision_start|>": 290,
    "<|vision_end|>": 291,
    "<|vision_pad|>": 292,
    "<|image_pad|>": 293,
    "<|video_pad|>": 294,
}


def qwen_vl_tokenizer() -> Qwen2Tokenizer:
    """``qwen2_tokenizer`` with Qwen2-VL's vision tokens (a processor expands ``<|image_pad|>`` to the
    image's patch tokens), ids 259-289 left as unused fillers, and the ChatML template."""
    vocab = qwen2_tokenizer().get_vocab()
    for filler in range(len(vocab), min(QWEN_VL_TOKENS.values())):
        vocab[f"<|extra_{filler}|>"] = filler
    vocab.update(QWEN_VL_TOKENS)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=[],
        model_max_length=1024,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,  # type: ignore[arg-type]  # as qwen2_tokenizer
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [*QWEN_SPECIAL_TOKENS[1:], *QWEN_VL_TOKENS]})
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer
