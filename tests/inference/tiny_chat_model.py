"""A tiny Qwen3-MoE Hugging Face directory that chats: random weights in the family's real format
(hf_moe_oracle.py), the hand-made byte-level tokenizer (tiny_tokenizer.py), Qwen3's chat template
and generation_config.json's end-of-sequence id. Only printable ASCII gets a score from the LM
head, so answers are plain text. Used by the server tests, the chat command's and the Python
package's."""
import json
import os

import chat_templates
import hf_moe_oracle as oracle  # (exits 77 without numpy / torch)
import tiny_tokenizer

EOS = tiny_tokenizer.special_id("<|im_end|>")


def write(model_dir, with_tokenizer=True, max_position_embeddings=4096, seed=19):
    """Writes the model; returns (config, the stored values for oracle.Family)."""
    config = dict(oracle.CASES["qwen3_moe"][0])
    config.update(vocab_size=tiny_tokenizer.VOCAB_SIZE,
                  max_position_embeddings=max_position_embeddings)
    tensors = oracle.make_tensors("qwen3_moe", config, oracle.np.random.default_rng(seed))
    printable = oracle.np.zeros(config["vocab_size"], dtype=bool)
    printable[32:127] = True
    for i, (name, value) in enumerate(tensors):
        if name == "lm_head.weight":
            tensors[i] = (name, value * printable[:, None] * 4.0)
    values = oracle.write_model(model_dir, config, tensors, "F32")
    if with_tokenizer:
        template, bos, eos = chat_templates.FAMILIES["qwen3_moe"]
        tiny_tokenizer.write(model_dir, chat_template=template, bos_token=bos, eos_token=eos)
        with open(os.path.join(model_dir, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": EOS}, f)
    return config, values
