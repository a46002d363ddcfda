"""A small byte-level BPE tokenizer.json, written by hand, for tests that need text in and out.

Its vocabulary: the 256 GPT-2 byte symbols (id = the byte), three merges (" t", "he", " the"),
then the special tokens SPECIALS (chat markers of the five families), padded with reserved
tokens up to VOCAB_SIZE, so that a tiny model with vocab_size = VOCAB_SIZE can decode every id it
draws. It is the GPT-2 format (ByteLevel pre-tokenizer with the GPT-2 regex, ByteLevel decoder)
that inference/hf_tokenizer.cc reads and the Hugging Face tokenizers library reads too.
"""
import json
import os

VOCAB_SIZE = 288
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<|user|>",
            "<|assistant|>", "<|system|>", "<think>", "</think>", "<｜begin▁of▁sentence｜>",
            "<｜end▁of▁sentence｜>"]


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character table."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def special_id(token):
    return 256 + len(MERGES) + SPECIALS.index(token)


def tokenizer_json():
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    added = []
    for i in range(len(vocab), VOCAB_SIZE):
        k = i - 256 - len(MERGES)
        content = SPECIALS[k] if k < len(SPECIALS) else f"<|reserved_{k}|>"
        vocab[content] = i
        added.append({"id": i, "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "vocab": vocab, "merges": [f"{a} {b}" for a, b in MERGES]},
    }


def write(model_dir, chat_template=None, bos_token=None, eos_token=None):
    """Writes tokenizer.json, and tokenizer_config.json when a template or token is given."""
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(), f, ensure_ascii=False)
    config = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if chat_template is not None:
        config["chat_template"] = chat_template
    if bos_token is not None:
        config["bos_token"] = bos_token
    if eos_token is not None:
        config["eos_token"] = eos_token
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
