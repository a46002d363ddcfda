#!/usr/bin/python3
"""Oracle test: Hugging Face checkpoints of each MoE family, loaded by `switchyard generate`,
against an independent PyTorch implementation of that family.

Usage: /usr/bin/python3 hf_moe_oracle.py SWITCHYARD_BINARY WORK_DIR

For each family (mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek, glm4_moe) this writes a tiny random model
in the family's real on-disk format -- config.json with the family's own keys, safetensors with
the tensor names exactly as Hugging Face writes them (written byte by byte here, no safetensors
package needed), in F32, BF16 or F16, single-file or sharded with model.safetensors.index.json --
then runs

  switchyard generate --model DIR --prompt-ids ... --dump-logits FILE

and compares the logits with a float64 forward written here from the math of the Hugging Face
modeling files (modeling_mixtral.py, modeling_qwen2_moe.py, modeling_qwen3_moe.py,
modeling_olmoe.py, DeepSeek-MoE's modeling_deepseek.py, modeling_glm4_moe.py), on the values the
files hold.

Tolerance: max |ours - oracle| <= TOL * max(1, max |oracle|), TOL = 1e-4. Switchyard runs in f32
on a model with O(1) activations, so its error is ~1e-6. To show the tolerance is tight enough the
script also checks that plausible loader bugs -- a transposed q_proj, Mixtral's w1/w3 swapped,
missing 1/sqrt(head_dim) attention scale, the q/k norm skipped, top-k renormalised when the family
does not (or vice versa), the shared-expert gate dropped -- each move the oracle's logits by more
than 10 x TOL. It also checks that a missing tensor, an unexpected tensor, a wrong shape, an
unknown model_type and rope_scaling each fail with an error naming them. Greedy generation
(`--max-tokens 6`, which decodes over the KV cache) must pick, at every step, the argmax of the
oracle's logits recomputed over the whole sequence. GLM-4.5 also runs under every offload policy
on the sim device, with the oracle's logits and the resident model's tokens.

Exit status 0 when every check passes. Prints the max error per family.
"""
import json
import math
import os
import struct
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # ctest reads 77 as "skipped"
    print(f"SKIP: {e}; install Debian's python3-torch and python3-numpy")
    sys.exit(77)

torch.set_default_dtype(torch.float64)
TOL = 1e-4
PROMPT = [3, 17, 42, 5, 61, 0, 29, 8, 50, 11]

# ---------------------------------------------------------------- safetensors, by hand


def encode(arr, dtype):
    """float64 numpy array -> (bytes, values as the file holds them, float64)."""
    a32 = np.ascontiguousarray(arr, dtype=np.float32)
    if dtype == "F32":
        return a32.tobytes(), a32.astype(np.float64)
    if dtype == "F16":
        h = a32.astype(np.float16)
        return h.tobytes(), h.astype(np.float64)
    if dtype == "BF16":
        bits = a32.view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        back = (rounded.astype(np.uint32) << 16).view(np.float32)
        return rounded.tobytes(), back.astype(np.float64)
    raise ValueError(dtype)


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, np array). Returns {name: float64 torch tensor of file values}."""
    header, chunks, values, offset = {"__metadata__": {"format": "pt"}}, [], {}, 0
    for name, arr in tensors:
        raw, back = encode(arr, dtype)
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        values[name] = torch.from_numpy(back.reshape(arr.shape))
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # as the reference writer pads
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
    return values


def write_model(model_dir, config, tensors, dtype, shards=1):
    os.makedirs(model_dir, exist_ok=True)
    for name in os.listdir(model_dir):
        os.remove(os.path.join(model_dir, name))
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    values = {}
    if shards == 1:
        values.update(write_safetensors(os.path.join(model_dir, "model.safetensors"), tensors,
                                        dtype))
        return values
    weight_map = {}
    per = (len(tensors) + shards - 1) // shards
    for s in range(shards):
        part = tensors[s * per:(s + 1) * per]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        values.update(write_safetensors(os.path.join(model_dir, fname), part, dtype))
        for name, _ in part:
            weight_map[name] = fname
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)
    return values


# ---------------------------------------------------------------- a SentencePiece tokenizer


def _pb_varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _pb_field(number, wire, payload):
    """One protobuf field: wire 0 = varint (payload an int), 2 = bytes, 5 = f32."""
    key = _pb_varint(number << 3 | wire)
    if wire == 0:
        return key + _pb_varint(payload)
    if wire == 5:
        return key + struct.pack("<f", payload)
    return key + _pb_varint(len(payload)) + payload


def spm_vocabulary(vocab_size):
    """The pieces of write_spm_tokenizer: [(piece, score, type)], type as in sentencepiece's
    ModelProto (1 normal, 2 unknown, 3 control). Ids 0-2 are <unk>, <s>, </s>; every other piece
    is an upper-case letter followed by a lower-case one ("Aa", "Ab", ...), so a text made of
    pieces splits into them in exactly one way, and a printed token sequence reads back into ids
    (every piece is two printable bytes)."""
    assert 3 < vocab_size <= 3 + 26 * 26
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    for i in range(vocab_size - 3):
        pieces.append((chr(ord("A") + i // 26) + chr(ord("a") + i % 26), -1.0 - i / 1024, 1))
    return pieces


def write_spm_tokenizer(model_dir, vocab_size):
    """Writes tokenizer.model (a SentencePiece unigram model, serialized by hand so that no
    sentencepiece Python package is needed) and tokenizer_config.json: no dummy prefix, no
    whitespace rewriting, BOS added. Returns spm_vocabulary(vocab_size)."""
    pieces = spm_vocabulary(vocab_size)
    proto = b"".join(_pb_field(1, 2, _pb_field(1, 2, p.encode()) + _pb_field(2, 5, sc) +
                               _pb_field(3, 0, t)) for p, sc, t in pieces)
    # TrainerSpec: model_type UNIGRAM, vocab_size; unk/bos/eos/pad ids keep their defaults 0/1/2/-1.
    proto += _pb_field(2, 2, _pb_field(3, 0, 1) + _pb_field(4, 0, vocab_size))
    # NormalizerSpec: identity, add_dummy_prefix false, remove_extra_whitespaces false.
    proto += _pb_field(3, 2, _pb_field(1, 2, b"identity") + _pb_field(3, 0, 0) +
                       _pb_field(4, 0, 0))
    with open(os.path.join(model_dir, "tokenizer.model"), "wb") as f:
        f.write(proto)
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "add_prefix_space": False,
                   "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                   "tokenizer_class": "LlamaTokenizer"}, f, indent=2)
    return pieces


# ---------------------------------------------------------------- tiny random models


def layer_is_moe(fam, c, l):
    if fam in ("mixtral", "olmoe"):
        return True
    if fam in ("qwen2_moe", "qwen3_moe"):
        return l not in c.get("mlp_only_layers", []) and (l + 1) % c.get("decoder_sparse_step",
                                                                         1) == 0
    if fam == "deepseek":
        return l >= c["first_k_dense_replace"] and l % c["moe_layer_freq"] == 0
    if fam == "glm4_moe":
        return l >= c["first_k_dense_replace"]
    raise ValueError(fam)


def num_experts(fam, c):
    return {"mixtral": c.get("num_local_experts"), "deepseek": c.get("n_routed_experts"),
            "glm4_moe": c.get("n_routed_experts")}.get(fam, c.get("num_experts"))


def qkv_bias(fam, c):
    """Whether q, k and v carry a bias: Qwen2-MoE unless "qkv_bias": false; the others with
    attention_bias."""
    if fam == "qwen2_moe":
        return c.get("qkv_bias", True)
    return bool(c.get("attention_bias", False))


def o_bias(fam, c):
    """transformers' attention_bias puts a bias on o too, except in Qwen2-MoE and GLM-4.5 (q, k, v
    only)."""
    return fam not in ("qwen2_moe", "glm4_moe") and bool(c.get("attention_bias", False))


def rotary_dim(fam, c):
    """The values of each head that RoPE rotates: GLM-4.5's int(head_dim * partial_rotary_factor),
    the whole head elsewhere."""
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    if fam == "glm4_moe":
        return int(hd * c.get("partial_rotary_factor", 0.5))
    return hd


def make_tensors(fam, c, rng):
    """The family's tensors with Hugging Face names, weights ~ N(0, 1/in) (O(1) activations)."""
    h = c["hidden_size"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or h // nh
    out = []

    def lin(name, o, i):
        out.append((name, rng.standard_normal((o, i)) / math.sqrt(i)))

    def vec(name, n, around=1.0):
        out.append((name, around + 0.2 * rng.standard_normal(n)))

    def mlp(prefix, inter, names=("gate_proj", "up_proj", "down_proj")):
        lin(f"{prefix}.{names[0]}.weight", inter, h)
        lin(f"{prefix}.{names[1]}.weight", inter, h)
        lin(f"{prefix}.{names[2]}.weight", h, inter)

    out.append(("model.embed_tokens.weight", rng.standard_normal((c["vocab_size"], h))))
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        vec(p + "input_layernorm.weight", h)
        vec(p + "post_attention_layernorm.weight", h)
        lin(p + "self_attn.q_proj.weight", nh * hd, h)
        lin(p + "self_attn.k_proj.weight", nkv * hd, h)
        lin(p + "self_attn.v_proj.weight", nkv * hd, h)
        lin(p + "self_attn.o_proj.weight", h, nh * hd)
        if qkv_bias(fam, c):
            for x, n in (("q", nh), ("k", nkv), ("v", nkv)):
                vec(p + f"self_attn.{x}_proj.bias", n * hd, around=0.0)
        if o_bias(fam, c):
            vec(p + "self_attn.o_proj.bias", h, around=0.0)
        if fam == "qwen3_moe" or (fam == "glm4_moe" and c.get("use_qk_norm")):
            vec(p + "self_attn.q_norm.weight", hd)
            vec(p + "self_attn.k_norm.weight", hd)
        if fam == "olmoe":
            vec(p + "self_attn.q_norm.weight", nh * hd)
            vec(p + "self_attn.k_norm.weight", nkv * hd)
        e = num_experts(fam, c)
        if not layer_is_moe(fam, c, l):
            mlp(p + "mlp", c["intermediate_size"])
            continue
        if fam == "mixtral":
            out.append((p + "block_sparse_moe.gate.weight",
                        1.5 * rng.standard_normal((e, h)) / math.sqrt(h)))
            for x in range(e):
                mlp(p + f"block_sparse_moe.experts.{x}", c["intermediate_size"],
                    names=("w1", "w3", "w2"))
            continue
        # Router logits of std ~1.5: spread enough that no top-k choice is a near tie, flat
        # enough that renormalising the top-k weights matters.
        out.append((p + "mlp.gate.weight", 1.5 * rng.standard_normal((e, h)) / math.sqrt(h)))
        inter = c.get("moe_intermediate_size") or c["intermediate_size"]
        for x in range(e):
            mlp(p + f"mlp.experts.{x}", inter)
        if fam == "qwen2_moe":
            mlp(p + "mlp.shared_expert", c["shared_expert_intermediate_size"])
            lin(p + "mlp.shared_expert_gate.weight", 1, h)
        if fam in ("deepseek", "glm4_moe") and c.get("n_shared_experts"):
            mlp(p + "mlp.shared_experts", c["moe_intermediate_size"] * c["n_shared_experts"])
        if fam == "glm4_moe":
            # Spread like the sigmoid scores' gaps, so that the bias changes some choices.
            out.append((p + "mlp.gate.e_score_correction_bias", 0.1 * rng.standard_normal(e)))
    for l in range(c["num_hidden_layers"],
                   c["num_hidden_layers"] + c.get("num_nextn_predict_layers", 0)):
        # GLM-4.5's multi-token-prediction layer, stored after the decoder's: not in the forward.
        p = f"model.layers.{l}."
        for name in ("enorm", "hnorm", "shared_head.norm", "input_layernorm",
                     "post_attention_layernorm"):
            vec(p + name + ".weight", h)
        lin(p + "eh_proj.weight", h, 2 * h)
        lin(p + "self_attn.q_proj.weight", nh * hd, h)
        mlp(p + "mlp.shared_experts", c["moe_intermediate_size"])
    vec("model.norm.weight", h)
    if not c.get("tie_word_embeddings", False):
        lin("lm_head.weight", c["vocab_size"], h)
    return out


CASES = {
    "mixtral": (dict(
        architectures=["MixtralForCausalLM"], model_type="mixtral", vocab_size=64, hidden_size=32,
        intermediate_size=24, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=4, num_experts_per_tok=2, rope_theta=1e6, rms_norm_eps=1e-5,
        sliding_window=None, max_position_embeddings=128, tie_word_embeddings=False,
        hidden_act="silu", router_aux_loss_coef=0.02, torch_dtype="bfloat16"), "BF16", 1),
    "qwen2_moe": (dict(
        architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", vocab_size=64,
        hidden_size=32, intermediate_size=40, moe_intermediate_size=16,
        shared_expert_intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, norm_topk_prob=False,
        decoder_sparse_step=2, mlp_only_layers=[], use_sliding_window=False, sliding_window=32,
        max_position_embeddings=128, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=False, hidden_act="silu", torch_dtype="float16"), "F16", 1),
    "qwen3_moe": (dict(
        architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", vocab_size=64,
        hidden_size=32, head_dim=16, intermediate_size=40, moe_intermediate_size=12,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_experts=8,
        num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        use_sliding_window=False, sliding_window=None, max_position_embeddings=128,
        rope_theta=1e6, rms_norm_eps=1e-6, attention_bias=False, rope_scaling=None,
        tie_word_embeddings=False, hidden_act="silu"), "F32", 1),
    "olmoe": (dict(
        architectures=["OlmoeForCausalLM"], model_type="olmoe", vocab_size=64, hidden_size=32,
        intermediate_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, rope_theta=10000.0,
        rms_norm_eps=1e-5, clip_qkv=None, attention_bias=False, max_position_embeddings=128,
        tie_word_embeddings=True, hidden_act="silu"), "F32", 1),
    "deepseek": (dict(
        architectures=["DeepseekForCausalLM"], model_type="deepseek", vocab_size=64,
        hidden_size=32, intermediate_size=48, moe_intermediate_size=12, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=2, n_routed_experts=6,
        num_experts_per_tok=2, moe_layer_freq=1, first_k_dense_replace=1, norm_topk_prob=False,
        scoring_func="softmax", aux_loss_alpha=0.001, seq_aux=True, rope_theta=10000.0,
        rope_scaling=None, rms_norm_eps=1e-6, attention_bias=False, max_position_embeddings=128,
        tie_word_embeddings=False, hidden_act="silu", pretraining_tp=1), "BF16", 3),
    # Group-limited: 8 experts in 4 groups, the best 2 groups per token, top-3 of their 4.
    "glm4_moe": (dict(
        architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe", vocab_size=64,
        hidden_size=32, head_dim=16, intermediate_size=48, moe_intermediate_size=12,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, n_shared_experts=1,
        n_routed_experts=8, num_experts_per_tok=3, first_k_dense_replace=1, norm_topk_prob=True,
        n_group=4, topk_group=2, routed_scaling_factor=2.5, partial_rotary_factor=0.5,
        use_qk_norm=True, attention_bias=True, rope_theta=10000.0, rope_scaling=None,
        rms_norm_eps=1e-5, max_position_embeddings=128, tie_word_embeddings=False,
        hidden_act="silu", num_nextn_predict_layers=0), "F32", 2),
}

# ---------------------------------------------------------------- the families' forward


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


def rope(x, theta, rotary=None):
    """x [T, H, D]; Hugging Face apply_rotary_pos_emb with positions 0..T-1, on the first `rotary`
    values of each head (all D by default; the rest pass through, as GLM-4.5's partial rotary)."""
    t, _, d = x.shape
    r = d if rotary is None else rotary
    inv_freq = 1.0 / (theta ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    x_rot, x_pass = x[..., :r], x[..., r:]
    rotated = x_rot * emb.cos()[:, None, :] + rotate_half(x_rot) * emb.sin()[:, None, :]
    return torch.cat((rotated, x_pass), dim=-1)


def round_activations(x):
    """RoundActivationBlocks (runtime/core/quant_blocks.h) of the last dimension, in f32 as the
    kernels do it: per block of 32, d = amax / 127, q = round-half-even(x * (127 / amax)); returns
    d * q in x's dtype."""
    v = x.detach().to(torch.float32).numpy().reshape(-1, 32)
    amax = np.abs(v).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(v * inv)
    return torch.from_numpy((d.astype(np.float64) * q).reshape(x.shape)).to(x.dtype)


class Family:
    """Forward of one family; `bug` injects a plausible loader bug (for the sensitivity check)."""

    def __init__(self, fam, c, w, bug=None, pregate=False, round_expert_inputs=False,
                 round_inputs_of=()):
        self.fam, self.c, self.w, self.bug = fam, c, w, bug
        # Q8_0 / Q4_0 routed experts: the CPU kernels multiply their inputs rounded to 8 bits per
        # block of 32 (runtime/core/quant_blocks.h, RoundActivationBlocks), emulated here in f32.
        self.round_expert_inputs = round_expert_inputs
        # The same for the dense matrices (HF weight names) held in Q8_0 / Q4_0 blocks: a GGUF's
        # quantized attention projections, dense FFNs and LM head (LoadOptions::
        # keep_quantized_matrices).
        self.round_inputs_of = frozenset(round_inputs_of)
        # Pre-gated (`generate --pregate`): MoE layer m >= 1 routes on MoE layer m-1's input
        # through its own gate (Pre-gated MoE: the pre-gate in layer m-1 is layer m's gate).
        self.pregate = pregate
        self.min_gap = float("inf")  # smallest gap between the k-th and (k+1)-th router prob
        self.routed = {}  # decoder layer -> tokens routed to each expert (every forward so far)

    def rounded(self, x, name):
        return round_activations(x) if name in self.round_inputs_of else x

    def linear(self, x, name, bias=None):
        return F.linear(self.rounded(x, name), self.w[name], self.w.get(bias) if bias else None)

    def mlp(self, x, p, names=("gate_proj", "up_proj", "down_proj"), round_inputs=False):
        r = round_activations if round_inputs else (lambda v: v)
        x = r(x)
        g = self.linear(x, f"{p}.{names[0]}.weight")
        u = self.linear(x, f"{p}.{names[1]}.weight")
        return self.linear(r(F.silu(g) * u), f"{p}.{names[2]}.weight")

    def attention(self, l, x):
        c, fam, bug = self.c, self.fam, self.bug
        t = x.shape[0]
        nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
        hd = c.get("head_dim") or c["hidden_size"] // nh
        p = f"model.layers.{l}.self_attn."
        bias = qkv_bias(fam, c)
        wq = self.w[p + "q_proj.weight"]
        if bug == "transposed_q" and wq.shape[0] == wq.shape[1]:
            wq = wq.t()
        q = F.linear(self.rounded(x, p + "q_proj.weight"), wq,
                     self.w[p + "q_proj.bias"] if bias else None)
        k = self.linear(x, p + "k_proj.weight", p + "k_proj.bias" if bias else None)
        v = self.linear(x, p + "v_proj.weight", p + "v_proj.bias" if bias else None)
        eps = c["rms_norm_eps"]
        if fam == "olmoe" and bug != "no_qk_norm":  # over the whole projection
            q = rms_norm(q, self.w[p + "q_norm.weight"], eps)
            k = rms_norm(k, self.w[p + "k_norm.weight"], eps)
        q, k, v = q.view(t, nh, hd), k.view(t, nkv, hd), v.view(t, nkv, hd)
        per_head_norm = fam == "qwen3_moe" or (fam == "glm4_moe" and c.get("use_qk_norm"))
        if per_head_norm and bug != "no_qk_norm":  # per head, before RoPE
            q = rms_norm(q, self.w[p + "q_norm.weight"], eps)
            k = rms_norm(k, self.w[p + "k_norm.weight"], eps)
        theta = c["rope_theta"]
        rotary = hd if bug == "full_rotary" else rotary_dim(fam, c)
        q, k = rope(q, theta, rotary), rope(k, theta, rotary)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        scale = 1.0 if bug == "no_scale" else 1.0 / math.sqrt(hd)
        scores = torch.einsum("thd,shd->hts", q, k) * scale
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        out = torch.einsum("hts,shd->thd", torch.softmax(scores, -1), v).reshape(t, nh * hd)
        return self.linear(out, p + "o_proj.weight", p + "o_proj.bias" if o_bias(fam, c) else None)

    def moe(self, l, x, route_x=None):
        c, fam, bug = self.c, self.fam, self.bug
        route_x = x if route_x is None else route_x
        p = f"model.layers.{l}."
        if fam == "mixtral":
            gate, experts, names = p + "block_sparse_moe.gate.weight", \
                p + "block_sparse_moe.experts", ("w1", "w3", "w2")
            if bug == "swap_w1_w3":
                names = ("w3", "w1", "w2")
            renorm = True
        else:
            gate, experts, names = p + "mlp.gate.weight", p + "mlp.experts", \
                ("gate_proj", "up_proj", "down_proj")
            renorm = c.get("norm_topk_prob", False)
        if bug == "flip_renorm":
            renorm = not renorm
        k = c["num_experts_per_tok"]
        if fam == "glm4_moe":
            weights, chosen = self.sigmoid_routing(l, self.linear(route_x, gate), renorm)
            return self.combine(l, x, weights, chosen, experts, names)
        probs = torch.softmax(self.linear(route_x, gate), dim=-1)
        weights, chosen = torch.topk(probs, k, dim=-1)
        if k < probs.shape[1]:
            top = torch.topk(probs, k + 1, dim=-1).values
            self.min_gap = min(self.min_gap, float((top[:, k - 1] - top[:, k]).min()))
        if renorm:
            weights = weights / weights.sum(-1, keepdim=True)
        return self.combine(l, x, weights, chosen, experts, names)

    def sigmoid_routing(self, l, logits, renorm):
        """GLM-4.5's Glm4MoeTopkRouter: sigmoid scores; the choice on score + correction bias
        within the best topk_group of n_group groups (a group's worth: its two best); masked
        experts' choice values become 0, as transformers' masked_fill(..., 0.0)."""
        c, bug = self.c, self.bug
        e, k = logits.shape[1], c["num_experts_per_tok"]
        scores = torch.sigmoid(logits)
        bias = self.w[f"model.layers.{l}.mlp.gate.e_score_correction_bias"]
        choice = scores if bug == "no_score_bias" else scores + bias
        groups, keep = c.get("n_group", 1), c.get("topk_group", 1)
        if bug != "no_groups" and keep < groups:
            worth = choice.view(-1, groups, e // groups).topk(2, dim=-1).values.sum(-1)
            kept = torch.zeros_like(worth).scatter_(1, torch.topk(worth, keep, dim=-1).indices, 1)
            mask = kept.unsqueeze(-1).expand(-1, groups, e // groups).reshape(-1, e)
            choice = choice.masked_fill(mask == 0, 0.0)
        top = torch.topk(choice, min(k + 1, e), dim=-1).values
        if k < e:
            self.min_gap = min(self.min_gap, float((top[:, k - 1] - top[:, k]).min()))
        chosen = torch.topk(choice, k, dim=-1).indices
        weights = scores.gather(1, chosen)
        if renorm:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        if bug != "no_routed_scale":
            weights = weights * c.get("routed_scaling_factor", 1.0)
        return weights, chosen

    def combine(self, l, x, weights, chosen, experts, names):
        """The routed experts' outputs weighted, plus the family's shared experts."""
        c, fam, bug = self.c, self.fam, self.bug
        p = f"model.layers.{l}."
        counts = self.routed.setdefault(l, [0] * num_experts(fam, c))
        for e in chosen.reshape(-1).tolist():
            counts[int(e)] += 1
        out = torch.zeros_like(x)
        for tok in range(x.shape[0]):
            for j in range(chosen.shape[1]):
                e = int(chosen[tok, j])
                out[tok] += weights[tok, j] * self.mlp(x[tok], f"{experts}.{e}", names,
                                                       self.round_expert_inputs)
        if fam == "qwen2_moe":
            s = self.mlp(x, p + "mlp.shared_expert")
            if bug != "no_shared_gate":
                s = torch.sigmoid(self.linear(x, p + "mlp.shared_expert_gate.weight")) * s
            out = out + s
        if fam in ("deepseek", "glm4_moe") and c.get("n_shared_experts"):
            out = out + self.mlp(x, p + "mlp.shared_experts")
        return out

    def forward(self, ids):
        c, w = self.c, self.w
        eps = c["rms_norm_eps"]
        x = w["model.embed_tokens.weight"][torch.tensor(ids)]
        previous_moe_input = None
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            x = x + self.attention(l, rms_norm(x, w[p + "input_layernorm.weight"], eps))
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            if layer_is_moe(self.fam, c, l):
                route = previous_moe_input if self.pregate else None
                previous_moe_input = h
                x = x + self.moe(l, h, route)
            else:
                x = x + self.mlp(h, p + "mlp")
        x = rms_norm(x, w["model.norm.weight"], eps)
        if c.get("tie_word_embeddings"):  # (a GGUF's output.weight copy of it may be held)
            return F.linear(self.rounded(x, "lm_head.weight"), w["model.embed_tokens.weight"])
        return self.linear(x, "lm_head.weight")


# ---------------------------------------------------------------- running switchyard


def run_switchyard(binary, model_dir, out_file, extra=()):
    # f32 weights unless the caller names a dtype (the oracle computes in float64; --dtype's
    # default, auto, would take a config's torch_dtype).
    dtype = [] if "--dtype" in extra else ["--dtype", "f32"]
    cmd = [binary, "generate", "--model", model_dir, "--prompt-ids",
           ",".join(map(str, PROMPT)), "--dump-logits", out_file, *dtype, *extra]
    return subprocess.run(cmd, capture_output=True, text=True)


def read_logits(out_file):
    with open(out_file + ".json") as f:
        shape = json.load(f)["shape"]
    data = np.fromfile(out_file, dtype="<f4")
    return torch.from_numpy(data.astype(np.float64)).reshape(shape)


BUGS = {
    "mixtral": ["transposed_q", "swap_w1_w3", "no_scale", "flip_renorm"],
    "qwen2_moe": ["no_shared_gate", "flip_renorm", "no_scale"],
    "qwen3_moe": ["no_qk_norm", "flip_renorm"],
    "olmoe": ["no_qk_norm", "flip_renorm", "transposed_q"],
    "deepseek": ["flip_renorm", "no_scale", "transposed_q"],
    "glm4_moe": ["flip_renorm", "no_score_bias", "no_groups", "no_routed_scale", "full_rotary",
                 "no_qk_norm"],
}


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures = []
    all_values = {}
    for fam, (config, dtype, shards) in CASES.items():
        rng = np.random.default_rng(sum(map(ord, fam)))
        tensors = make_tensors(fam, config, rng)
        model_dir = os.path.join(work, fam)
        values = write_model(model_dir, config, tensors, dtype, shards)
        all_values[fam] = values
        out_file = os.path.join(work, fam + ".logits")
        r = run_switchyard(binary, model_dir, out_file)
        if r.returncode != 0:
            failures.append(f"{fam}: switchyard failed: {r.stderr.strip()}")
            print(f"FAIL {fam}: {r.stderr.strip()}")
            continue
        ours = read_logits(out_file)
        family = Family(fam, config, values)
        ref = family.forward(PROMPT)
        scale = max(1.0, float(ref.abs().max()))
        err = float((ours - ref).abs().max())
        ok = ours.shape == ref.shape and err <= TOL * scale
        print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} {dtype:4s} shards={shards} "
              f"max|logit|={float(ref.abs().max()):.3f} max abs err={err:.3e} "
              f"(tolerance {TOL * scale:.3e}; closest top-k margin {family.min_gap:.1e})")
        if not ok:
            failures.append(f"{fam}: max abs err {err:.3e} > {TOL * scale:.3e}")
        # --dtype auto (the default): the weights load in the dtype config.json's torch_dtype
        # names (f32 without one, as transformers), which is the dtype they are stored in here
        # when named, so the logits stay within TOL.
        want_dtype = {"bfloat16": "bf16", "float16": "f16"}.get(config.get("torch_dtype"), "f32")
        r = run_switchyard(binary, model_dir, out_file + ".auto", ("--dtype", "auto"))
        auto_err = float((read_logits(out_file + ".auto") - ref).abs().max()) \
            if r.returncode == 0 else float("inf")
        load_line = next((line for line in r.stderr.splitlines() if line.startswith("loaded")),
                         "")
        ok = load_line.endswith(want_dtype) and auto_err <= TOL * scale
        print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} --dtype auto loads {want_dtype} "
              f"(torch_dtype): max abs err={auto_err:.3e}: {load_line[-60:]!r}")
        if not ok:
            failures.append(f"{fam}: --dtype auto: {load_line!r}, err {auto_err:.3e}")
        for bug in BUGS[fam]:
            bad = Family(fam, config, values, bug=bug).forward(PROMPT)
            moved = float((bad - ref).abs().max())
            if moved <= 10 * TOL * scale:
                failures.append(f"{fam}: injected bug {bug} moves the logits only {moved:.2e}")
            print(f"     bug {bug:15s} moves logits by {moved:.3e} (> {10 * TOL * scale:.1e})")
    failures += pregate_check(binary, work, all_values)
    failures += policy_check(binary, work, "glm4_moe", all_values)
    for fam in ("glm4_moe", "mixtral"):
        failures += profile_check(binary, work, fam, all_values)
    for fam in CASES:
        failures += greedy_check(binary, work, fam)
    failures += bias_checks(binary, work)
    failures += error_checks(binary, work)
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("\nall families match")
    return 0


def pregate_check(binary, work, all_values):
    """`generate --pregate` (a conventional checkpoint loaded as a pre-gated model) against the
    oracle's pre-gated forward, where MoE layer m >= 1 routes on layer m-1's input with its own
    gate; the pre-gated logits must also differ from the conventional ones."""
    failures = []
    # qwen2_moe's case has one MoE layer: nothing to pre-gate, and the load must say so.
    r = run_switchyard(binary, os.path.join(work, "qwen2_moe"),
                       os.path.join(work, "qwen2_moe.pregate.logits"), ["--pregate"])
    ok = r.returncode != 0 and "at least two MoE layers" in r.stderr
    print(f"{'ok  ' if ok else 'FAIL'} qwen2_moe  --pregate with one MoE layer: {r.stderr.strip()}")
    if not ok:
        failures.append("qwen2_moe --pregate with one MoE layer: no clear error")
    for fam in ("mixtral", "olmoe"):
        config, _, _ = CASES[fam]
        if fam not in all_values:
            continue  # its conventional run failed, reported already
        values = all_values[fam]
        out_file = os.path.join(work, fam + ".pregate.logits")
        r = run_switchyard(binary, os.path.join(work, fam), out_file, ["--pregate"])
        if r.returncode != 0:
            failures.append(f"{fam} --pregate: switchyard failed: {r.stderr.strip()}")
            continue
        if "has no trained pre-gates" not in r.stderr or "altered model" not in r.stderr:
            failures.append(f"{fam} --pregate: no warning that the model is altered: "
                            f"{r.stderr.strip()}")
        ours = read_logits(out_file)
        ref = Family(fam, config, values, pregate=True).forward(PROMPT)
        conventional = Family(fam, config, values).forward(PROMPT)
        scale = max(1.0, float(ref.abs().max()))
        err = float((ours - ref).abs().max())
        moved = float((conventional - ref).abs().max())
        ok = ours.shape == ref.shape and err <= TOL * scale and moved > 10 * TOL * scale
        print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} --pregate max abs err={err:.3e} "
              f"(tolerance {TOL * scale:.3e}); pre-gating moves the logits by {moved:.3e}")
        if not ok:
            failures.append(f"{fam} --pregate: max abs err {err:.3e}, moved {moved:.3e}")
        # The same pre-gated model through the pregated offload policy on the sim device, its
        # experts loaded into host memory and copied into device slots as the pre-gates ask.
        out_file = os.path.join(work, fam + ".pregated-policy.logits")
        r = run_switchyard(binary, os.path.join(work, fam), out_file,
                           ["--pregate", "--policy", "pregated", "--device", "sim"])
        if r.returncode != 0:
            failures.append(f"{fam} --policy pregated: switchyard failed: {r.stderr.strip()}")
            continue
        err = float((read_logits(out_file) - ref).abs().max())
        ok = err <= TOL * scale
        print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} --pregate --policy pregated --device sim "
              f"max abs err={err:.3e}")
        if not ok:
            failures.append(f"{fam} --policy pregated: max abs err {err:.3e}")
    return failures


OFFLOAD_POLICIES = [["ondemand"], ["prefetch-all"], ["ring"], ["predictive"], ["cpu-compute"],
                    ["hot-cold"], ["layer-split"],
                    # Pre-gated MoE's LIFO and ProMoE's per-layer LRU device caches, with fewer
                    # slots (5) than the 8 experts of one layer, so that they evict.
                    ["ondemand", "--device-cache", "lifo", "--device-slots", "5"],
                    ["predictive", "--device-cache", "layer-lru", "--device-slots", "5"]]


def policy_check(binary, work, fam, all_values):
    """Every offload policy on the sim device (the experts in host memory, copied into device
    slots or computed on the CPU) gives the oracle's prompt logits, and the same greedy tokens as
    the resident model."""
    if fam not in all_values:
        return []  # its resident run failed, reported already
    config, _, _ = CASES[fam]
    model_dir = os.path.join(work, fam)
    ref = Family(fam, config, all_values[fam]).forward(PROMPT)
    scale = max(1.0, float(ref.abs().max()))
    resident, _ = run_greedy(binary, model_dir, os.path.join(work, fam + ".resident.decode"))
    failures = []
    for policy_args in OFFLOAD_POLICIES:
        extra = ["--device", "sim", "--policy", *policy_args]
        policy = " ".join(policy_args)
        out_file = os.path.join(work, f"{fam}.{'_'.join(policy_args)}.logits")
        r = run_switchyard(binary, model_dir, out_file, extra)
        if r.returncode != 0:
            failures.append(f"{fam} --policy {policy}: switchyard failed: {r.stderr.strip()}")
            continue
        err = float((read_logits(out_file) - ref).abs().max())
        cmd = [binary, "generate", "--model", model_dir, "--prompt-ids",
               ",".join(map(str, PROMPT)), "--max-tokens", str(GREEDY_STEPS), "--dtype", "f32",
               *extra]
        g = subprocess.run(cmd, capture_output=True, text=True)
        tokens = [int(x) for x in g.stdout.strip().split(",")] if g.returncode == 0 else None
        ok = err <= TOL * scale and tokens == resident
        print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} --policy {policy} --device sim: prompt "
              f"logits max abs err={err:.3e}; greedy {tokens} (resident {resident})")
        if not ok:
            failures.append(f"{fam} --policy {policy}: err {err:.3e}, tokens {tokens} vs "
                            f"resident {resident}")
    return failures


def profile_check(binary, work, fam, all_values):
    """`switchyard profile` counts, per MoE layer, the tokens the gate sent to each expert: the
    oracle's own choices over the same chunks (--context 4: each chunk a fresh prefill). The file
    then places experts: `--profile` with cpu-compute and with ondemand's static device cache
    gives the resident model's tokens."""
    if fam not in all_values:
        return []
    config, _, _ = CASES[fam]
    model_dir = os.path.join(work, fam)
    out = os.path.join(work, fam + ".profile.json")
    r = subprocess.run([binary, "profile", "--model", model_dir, "--prompt-ids",
                        ",".join(map(str, PROMPT)), "--context", "4", "--out", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return [f"{fam}: switchyard profile failed: {r.stderr.strip()}"]
    with open(out) as f:
        got = json.load(f)
    family = Family(fam, config, all_values[fam])
    for begin in range(0, len(PROMPT), 4):
        family.forward(PROMPT[begin:begin + 4])
    want = [family.routed[l] for l in sorted(family.routed)]
    ok = got["counts"] == want and got["num_moe_layers"] == len(want)
    print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} profile counts {got['counts']} = the oracle's "
          f"choices {want}")
    failures = [] if ok else [f"{fam}: profile counts {got['counts']}, oracle {want}"]
    resident, _ = run_greedy(binary, model_dir, os.path.join(work, fam + ".resident2.decode"))
    for extra in (["--policy", "cpu-compute", "--device-slots", "4"],
                  ["--policy", "ondemand", "--device-cache", "static", "--device-slots", "6"]):
        cmd = [binary, "generate", "--model", model_dir, "--prompt-ids",
               ",".join(map(str, PROMPT)), "--max-tokens", str(GREEDY_STEPS), "--dtype", "f32",
               "--device", "sim", "--profile", out, *extra]
        g = subprocess.run(cmd, capture_output=True, text=True)
        tokens = [int(x) for x in g.stdout.strip().split(",")] if g.returncode == 0 else None
        ok = tokens == resident
        print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} --profile {' '.join(extra)}: {tokens} "
              f"(resident {resident})")
        if not ok:
            failures.append(f"{fam}: --profile {' '.join(extra)}: {tokens} vs {resident}: "
                            f"{g.stderr.strip()[-300:]}")
    return failures


GREEDY_STEPS = 6


def run_greedy(binary, model_dir, dump, steps=GREEDY_STEPS):
    """Greedy `switchyard generate --max-tokens STEPS` over the KV cache on PROMPT: (the generated
    ids, the logits each was chosen from [steps, vocab]), or (None, stderr) when it fails."""
    cmd = [binary, "generate", "--model", model_dir, "--prompt-ids", ",".join(map(str, PROMPT)),
           "--max-tokens", str(steps), "--dump-decode-logits", dump, "--dtype", "f32"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [int(x) for x in r.stdout.strip().split(",")], read_logits(dump)


def greedy_check(binary, work, fam):
    """`--max-tokens` greedy decoding over the KV cache picks the oracle's argmax at every step
    (the oracle recomputes the whole sequence each time)."""
    config, _, _ = CASES[fam]
    model_dir = os.path.join(work, fam)
    steps = GREEDY_STEPS
    generated, ours = run_greedy(binary, model_dir, os.path.join(work, fam + ".decode_logits"))
    if generated is None:
        return [f"{fam}: greedy generation failed: {ours}"]
    values = {}
    for name in os.listdir(model_dir):
        if name.endswith(".safetensors"):
            values.update(read_safetensors(os.path.join(model_dir, name)))
    logits = Family(fam, config, values).forward(PROMPT + generated)
    want = [int(logits[len(PROMPT) - 1 + i].argmax()) for i in range(len(generated))]
    ref = logits[len(PROMPT) - 1:len(PROMPT) - 1 + steps]
    scale = max(1.0, float(ref.abs().max()))
    err = float((ours - ref).abs().max()) if ours.shape == ref.shape else float("inf")
    ok = len(generated) == steps and generated == want and err <= TOL * scale
    print(f"{'ok  ' if ok else 'FAIL'} greedy KV-cache generation ({fam}): {generated} "
          f"(oracle {want}); decode-step logits max abs err={err:.3e}")
    return [] if ok else [f"{fam}: greedy generation {generated} (oracle {want}), decode-step "
                          f"logits err {err:.3e} > {TOL * scale:.3e}"]


def read_safetensors(path):
    """A safetensors file's F32 / F16 / BF16 tensors as float64."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = blob[8 + n + b:8 + n + e]
        if info["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif info["dtype"] == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        else:
            assert info["dtype"] == "BF16"
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32).astype(np.float64)
        out[name] = torch.from_numpy(arr.reshape(info["shape"]))
    return out


# Issue 17: the attention-bias variants transformers writes. attention_bias = true puts a bias
# on q, k, v and o in Qwen3-MoE, OLMoE and DeepSeek; Qwen2-MoE's q/k/v bias is absent with
# "qkv_bias": false, or when the checkpoint simply has no bias tensors. (name, family, config,
# tensors made for this config, or None to make them from a config with the key dropped)
BIAS_VARIANTS = [
    ("qwen3_moe attention_bias", "qwen3_moe", dict(CASES["qwen3_moe"][0], attention_bias=True)),
    ("olmoe attention_bias", "olmoe", dict(CASES["olmoe"][0], attention_bias=True)),
    ("deepseek attention_bias", "deepseek", dict(CASES["deepseek"][0], attention_bias=True)),
    ("qwen2_moe qkv_bias false", "qwen2_moe", dict(CASES["qwen2_moe"][0], qkv_bias=False)),
    # GLM-4.5 variants beside the bias ones: a multi-token-prediction layer stored after the
    # decoder's (skipped, as transformers skips it), the whole head rotating, no qk-norm, one
    # group (plain top-k), without renormalisation.
    ("glm4_moe with an MTP layer", "glm4_moe",
     dict(CASES["glm4_moe"][0], num_nextn_predict_layers=1)),
    ("glm4_moe partial_rotary_factor 1, no qk-norm, one group, no renorm", "glm4_moe",
     dict(CASES["glm4_moe"][0], partial_rotary_factor=1.0, use_qk_norm=False, n_group=1,
          topk_group=1, norm_topk_prob=False, attention_bias=False)),
]


def bias_variant_dirs(work):
    """Writes each variant's model; yields (what, fam, config, model_dir, values). The last one is
    a Qwen2-MoE whose config.json has no qkv_bias key and whose files hold no bias tensors."""
    variants = list(BIAS_VARIANTS)
    no_key = dict(CASES["qwen2_moe"][0])
    variants.append(("qwen2_moe without bias tensors", "qwen2_moe", no_key))
    for i, (what, fam, config) in enumerate(variants):
        rng = np.random.default_rng(100 + i)
        make_cfg = dict(config, qkv_bias=False) if what.endswith("without bias tensors") else config
        tensors = make_tensors(fam, make_cfg, rng)
        model_dir = os.path.join(work, "bias" + str(i))
        values = write_model(model_dir, config, tensors, "F32")
        yield what, fam, make_cfg, model_dir, values


def bias_checks(binary, work):
    """Each bias variant loads, and its logits match the oracle's forward with those biases; the
    biases must matter (dropping o's bias moves the oracle by more than 10 x TOL)."""
    failures = []
    for what, fam, config, model_dir, values in bias_variant_dirs(work):
        out_file = model_dir + ".logits"
        r = run_switchyard(binary, model_dir, out_file)
        if r.returncode != 0:
            failures.append(f"{what}: switchyard failed: {r.stderr.strip()}")
            print(f"FAIL {what}: {r.stderr.strip()}")
            continue
        ref = Family(fam, config, values).forward(PROMPT)
        scale = max(1.0, float(ref.abs().max()))
        err = float((read_logits(out_file) - ref).abs().max())
        ok = err <= TOL * scale
        note = ""
        if o_bias(fam, config):
            no_o = {k: v for k, v in values.items() if not k.endswith("o_proj.bias")}
            moved = float((Family(fam, dict(config, attention_bias=False), no_o)
                           .forward(PROMPT) - ref).abs().max())
            note = f"; the biases move the logits by {moved:.3e}"
            ok = ok and moved > 10 * TOL * scale
        print(f"{'ok  ' if ok else 'FAIL'} {what}: max abs err={err:.3e} "
              f"(tolerance {TOL * scale:.3e}){note}")
        if not ok:
            failures.append(f"{what}: max abs err {err:.3e}{note}")
    return failures


def error_checks(binary, work):
    """Malformed checkpoints fail with an error naming the problem."""
    failures = []
    config, dtype, _ = CASES["mixtral"]
    base = make_tensors("mixtral", config, np.random.default_rng(1))
    cases = []
    missing = [t for t in base if t[0] != "model.layers.1.block_sparse_moe.experts.2.w3.weight"]
    cases.append(("missing tensor", config, missing, "model.layers.1.block_sparse_moe.experts.2.w3"))
    extra = base + [("model.layers.0.mlp.gate_proj.weight", np.zeros((4, 32)))]
    cases.append(("unexpected tensor", config, extra, "model.layers.0.mlp.gate_proj.weight"))
    wrong = [(n, a.T.copy() if n == "model.layers.0.self_attn.k_proj.weight" else a)
             for n, a in base]
    cases.append(("wrong shape", config, wrong, "model.layers.0.self_attn.k_proj.weight"))
    cases.append(("unknown model_type", dict(config, model_type="llama4"), base, "llama4"))
    cases.append(("rope_scaling", dict(config, rope_scaling={"type": "yarn", "factor": 4.0}),
                  base, "rope_scaling"))
    cases.append(("sliding window", dict(config, sliding_window=16), base, "sliding_window"))
    for what, cfg, tensors, needle in cases:
        model_dir = os.path.join(work, "bad")
        write_model(model_dir, cfg, tensors, "F32")
        r = run_switchyard(binary, model_dir, os.path.join(work, "bad.logits"))
        ok = r.returncode != 0 and needle in r.stderr
        print(f"{'ok  ' if ok else 'FAIL'} error check: {what}: {r.stderr.strip()[:160]}")
        if not ok:
            failures.append(f"error check {what}: rc={r.returncode} stderr={r.stderr.strip()}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
