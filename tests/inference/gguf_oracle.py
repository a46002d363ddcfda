#!/usr/bin/python3
"""Oracle test of GGUF models: Switchyard's GGUF writer and reader against the `gguf` package
(gguf-py, llama.cpp's own Python GGUF library) and against the Hugging Face checkpoints.

Usage: /usr/bin/python3 gguf_oracle.py SWITCHYARD GGUF_TOOL WORK_DIR

For each family of hf_moe_oracle.py (mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek) it writes the
tiny HF checkpoint, exports it with `gguf_tool export` (inference/gguf_model.h), then checks:
  1. `switchyard generate --model x.gguf` gives the same prompt logits, bit for bit, and the same
     greedy tokens as `--model HF_DIR`.
  2. gguf-py's GGUFReader finds every tensor with the name, type, shape and values that llama.cpp's
     convert_hf_to_gguf.py would give it -- computed here from the HF tensors: q/k rows permuted
     for llama and deepseek (reshape(n_head, 2, d/2, ...).swapaxes(1, 2)), experts stacked into
     3-D ffn_{gate,up,down}_exps -- and every metadata key with the value the config implies.
  3. HF -> GGUF -> HF gives every tensor back byte for byte (`gguf_tool check-hf`), and
     GGUF -> read -> write is byte-exact (`gguf_tool rewrite`).
Then, the other way round, gguf-py's GGUFWriter writes each family as llama.cpp's converter does,
with the matrices quantized to Q8_0 or Q4_0 by gguf.quants; `gguf_tool dump` must dequantize each
tensor to exactly gguf.quants.dequantize's values, and `switchyard generate` on that file must
match hf_moe_oracle's float64 forward on the dequantized weights (tolerance 1e-4 x max|logit|).
The quantized attention projections and LM head stay in their blocks ("dense matrices q8_0 xN"),
their inputs rounded to 8 bits as the experts' are (below), which the float64 forward emulates
(compare_logits says how it allows for an input on a rounding boundary); a Q6_K LM head
(llama-quantize's Q4_0 files), a Q5_K attention output and experts all in Q4_K, Q5_K or Q6_K
must run in their own blocks, and so must a Q4_K_M-style file's mixed Q4_K / Q6_K experts (with
an offload policy, whose host layout holds one type: as gguf.quants' Q8_0 requantization). Our
Q8_0 / Q4_0 export must equal gguf.quants.quantize byte for byte, and random Q4_K / Q5_K / Q6_K
blocks must dequantize to gguf.quants.dequantize's values exactly. Quantized experts: on
models whose expert rows are whole blocks, a gguf-py Q8_0 / Q4_0 file must load its experts as
stored (generate reports "experts q8_0"), and `--quantize experts` on the HF directory must
quantize them on load; both run the quantized kernels and must match the float64 forward on the
dequantized weights (gguf.quants) with the experts' inputs rounded to 8 bits as the kernels
round them (hf_moe_oracle.round_activations), and the attention's too where the file holds it
in blocks. Finally a truncated file,
a header pointing past the end, an unknown tensor type and a missing tensor each fail naming the
file and the tensor.
"""
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import torch
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import quantize, dequantize
except ImportError as e:  # ctest reads 77 as "skipped"
    print(f"SKIP: {e}; run scripts/install-deps.sh (gguf from PyPI, python3-torch, numpy)")
    sys.exit(77)
import hf_moe_oracle as H  # noqa: E402

ARCH = {"mixtral": "llama", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "olmoe": "olmoe",
        "deepseek": "deepseek", "glm4_moe": "glm4moe"}
PERMUTED = {"mixtral", "deepseek"}
TOL = 1e-4


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def gguf_tensors(fam, c, hf):
    """{gguf name: float array in GGUF (row-major) layout} from HF tensors {name: array}."""
    out = {}
    layer_map = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
        "mlp.gate.weight": "ffn_gate_inp.weight",
        "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
        "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    }
    for x in "qkv":
        for kind in ("weight", "bias"):
            layer_map[f"self_attn.{x}_proj.{kind}"] = f"attn_{x}.{kind}"
    for shared in ("mlp.shared_expert.", "mlp.shared_experts."):
        for p in ("gate", "up", "down"):
            layer_map[f"{shared}{p}_proj.weight"] = f"ffn_{p}_shexp.weight"
    if fam == "glm4_moe":  # llama.cpp's glm4moe: attn_post_norm, and the correction bias
        layer_map["post_attention_layernorm.weight"] = "post_attention_norm.weight"
        layer_map["mlp.gate.e_score_correction_bias"] = "exp_probs_b.bias"
    experts = {}
    for name, a in hf.items():
        a = np.asarray(a)
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = a
            continue
        if name == "model.norm.weight":
            out["output_norm.weight"] = a
            continue
        if name == "lm_head.weight":
            out["output.weight"] = a
            continue
        parts = name.split(".")
        layer, rest = int(parts[2]), ".".join(parts[3:])
        if ".experts." in rest:
            e = int(rest.split(".experts.")[1].split(".")[0])
            proj = rest.split(".")[-2]
            stack = {"w1": "gate", "w3": "up", "w2": "down", "gate_proj": "gate",
                     "up_proj": "up", "down_proj": "down"}[proj]
            experts.setdefault((layer, stack), {})[e] = a
            continue
        if fam in PERMUTED and rest.startswith("self_attn.q_proj"):
            a = permute(a, c["num_attention_heads"])
        if fam in PERMUTED and rest.startswith("self_attn.k_proj"):
            a = permute(a, c["num_key_value_heads"])
        out[f"blk.{layer}.{layer_map[rest]}"] = a
    for (layer, stack), by_e in experts.items():
        out[f"blk.{layer}.ffn_{stack}_exps.weight"] = np.stack([by_e[e] for e in sorted(by_e)])
    if fam == "olmoe" and c.get("tie_word_embeddings", False):
        # Where llama.cpp's converter writes nothing: llama.cpp's olmoe loader requires
        # output.weight, so a tied OLMoE gets the embedding again (switchyard.tie_word_embeddings).
        out["output.weight"] = out["token_embd.weight"]
    return out


def expected_metadata(fam, c):
    a = ARCH[fam]
    hd = head_dim(c)
    moe = H.num_experts(fam, c)
    m = {"general.architecture": a, "general.name": "switchyard",
         "general.quantization_version": 2,
         f"{a}.vocab_size": c["vocab_size"], f"{a}.context_length": c["max_position_embeddings"],
         f"{a}.embedding_length": c["hidden_size"], f"{a}.block_count": c["num_hidden_layers"],
         f"{a}.feed_forward_length": c["intermediate_size"],
         f"{a}.attention.head_count": c["num_attention_heads"],
         f"{a}.attention.head_count_kv": c["num_key_value_heads"],
         f"{a}.attention.key_length": hd, f"{a}.attention.value_length": hd,
         f"{a}.rope.dimension_count": hd, f"{a}.rope.freq_base": np.float32(c["rope_theta"]),
         f"{a}.attention.layer_norm_rms_epsilon": np.float32(c["rms_norm_eps"]),
         f"{a}.expert_count": moe, f"{a}.expert_used_count": c["num_experts_per_tok"],
         f"{a}.expert_weights_norm": True if fam == "mixtral" else c["norm_topk_prob"]}
    if fam != "mixtral":
        m[f"{a}.expert_feed_forward_length"] = c.get("moe_intermediate_size") or \
            c["intermediate_size"]
    if fam == "qwen2_moe":
        m[f"{a}.expert_shared_feed_forward_length"] = c["shared_expert_intermediate_size"]
    if fam == "deepseek":
        m[f"{a}.expert_shared_count"] = c["n_shared_experts"]
        m[f"{a}.leading_dense_block_count"] = c["first_k_dense_replace"]
        m[f"{a}.expert_weights_scale"] = np.float32(1.0)
    if fam == "glm4_moe":  # as llama.cpp's Glm4MoeModel.set_gguf_parameters
        m[f"{a}.rope.dimension_count"] = H.rotary_dim(fam, c)
        m[f"{a}.expert_shared_count"] = c["n_shared_experts"]
        m[f"{a}.leading_dense_block_count"] = c["first_k_dense_replace"]
        m[f"{a}.expert_weights_scale"] = np.float32(c["routed_scaling_factor"])
        m[f"{a}.expert_gating_func"] = 2  # sigmoid
        if c["topk_group"] < c["n_group"]:
            m[f"{a}.expert_group_count"] = c["n_group"]
            m[f"{a}.expert_group_used_count"] = c["topk_group"]
    if fam == "olmoe" and c.get("tie_word_embeddings", False):
        m["switchyard.tie_word_embeddings"] = True
    return m


def check_with_gguf_py(fam, c, path, hf_values, src_dtype):
    """Our GGUF read by gguf-py: every tensor and key as llama.cpp's converter would have them."""
    failures = []
    r = gguf.GGUFReader(path)
    want = gguf_tensors(fam, c, hf_values)
    have = {t.name: t for t in r.tensors}
    if set(have) != set(want):
        return [f"{fam}: tensor names {sorted(set(have) ^ set(want))} differ"]
    qtype = {"F32": Q.F32, "F16": Q.F16, "BF16": Q.BF16}[src_dtype]
    for name, w in want.items():
        t = have[name]
        values = dequantize(t.data, t.tensor_type).reshape(w.shape)
        if t.tensor_type != qtype or list(t.shape) != list(reversed(w.shape)) or \
                not np.array_equal(values.astype(np.float64), w):
            failures.append(f"{fam}: tensor {name}: type {t.tensor_type.name} shape "
                            f"{list(t.shape)} or values differ from llama.cpp's layout")
    meta = expected_metadata(fam, c)
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        if key == "general.file_type":
            continue
        if key not in meta:
            failures.append(f"{fam}: unexpected metadata key {key}")
            continue
        got = field.contents()
        exp = meta[key]
        ok = got == exp if not isinstance(exp, np.floating) else np.float32(got) == exp
        if not ok:
            failures.append(f"{fam}: metadata {key} = {got!r}, expected {exp!r}")
    for key in meta:
        if key not in r.fields:
            failures.append(f"{fam}: metadata key {key} is missing")
    print(f"{'ok  ' if not failures else 'FAIL'} {fam:10s} gguf-py reads {len(want)} tensors and "
          f"{len(meta)} keys as llama.cpp's converter writes them")
    return failures


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


# Where the f16 scales sit in each K-quant block: d (and dmin) of Q2_K, Q4_K and Q5_K, d of Q3_K and
# Q6_K.
KQUANT_SCALES = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


# The range of those scales, so that random blocks of each type hold values of about the same size
# (typically ~0.05): Q2_K's 2-bit values with 4-bit scales need larger ones, Q3_K's 3-bit values
# somewhat larger.
KQUANT_SCALE_RANGE = {Q.Q2_K: (2e-3, 8e-3), Q.Q3_K: (7e-4, 3e-3)}


def random_kquant_blocks(rng, shape, qtype):
    """Random K-quant blocks for a tensor of `shape` (last dim a multiple of 256): random bytes
    with small finite f16 scales, since gguf-py has no K-quant quantizers."""
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    lead, blocks = tuple(shape[:-1]), shape[-1] // 256
    raw = rng.integers(0, 256, size=lead + (blocks, block_bytes), dtype=np.uint8)
    for off in KQUANT_SCALES[qtype]:
        lo, hi = KQUANT_SCALE_RANGE.get(qtype, (1e-4, 5e-4))
        d = rng.uniform(lo, hi, size=lead + (blocks,)).astype(np.float16)
        raw[..., off:off + 2] = d.view(np.uint8).reshape(lead + (blocks, 2))
    return raw.reshape(lead + (blocks * block_bytes,))


def write_with_gguf_py(fam, c, hf_values, path, qtype, quantized=None, q6k_head_rng=None,
                       kquants=None, mtp_block=False):
    """The family as llama.cpp's converter writes it, by gguf-py; matrices with rows of a
    multiple of 32 quantized to `qtype` (routers and vectors in F32). Returns the values the file
    holds (dequantized, GGUF names) for the oracle forward; the names of the quantized tensors go
    into the set `quantized` when one is given. With q6k_head_rng, output.weight is Q6_K blocks of
    random bytes with small finite scales, as llama-quantize writes a Q4_0 model's LM head (gguf-py
    has no Q6_K quantizer); `kquants` maps more GGUF tensor kinds ("ffn_down_exps",
    "attn_output", ...) to the K-quant type their random blocks take, from the same generator.
    mtp_block (glm4moe): one multi-token-prediction block after the decoder's, counted in
    block_count with nextn_predict_layers = 1, as llama.cpp's converter writes GLM-4.5."""
    a = ARCH[fam]
    w = gguf.GGUFWriter(path, a)
    hd = head_dim(c)
    w.add_name("gguf-py")
    w.add_vocab_size(c["vocab_size"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"] + (1 if mtp_block else 0))
    if mtp_block:
        w.add_uint32(f"{a}.nextn_predict_layers", 1)
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(H.rotary_dim(fam, c))
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_count(H.num_experts(fam, c))
    w.add_expert_used_count(c["num_experts_per_tok"])
    if fam != "mixtral":
        w.add_expert_feed_forward_length(c.get("moe_intermediate_size") or c["intermediate_size"])
        w.add_expert_weights_norm(c["norm_topk_prob"])
    if fam == "qwen2_moe":
        w.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    if fam == "deepseek":
        w.add_leading_dense_block_count(c["first_k_dense_replace"])
        w.add_expert_shared_count(c["n_shared_experts"])
        w.add_expert_weights_scale(1.0)
    if fam == "glm4_moe":
        w.add_leading_dense_block_count(c["first_k_dense_replace"])
        w.add_expert_shared_count(c["n_shared_experts"])
        w.add_expert_weights_scale(c["routed_scaling_factor"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        if c["topk_group"] < c["n_group"]:
            w.add_uint32(f"{a}.expert_group_count", c["n_group"])
            w.add_uint32(f"{a}.expert_group_used_count", c["topk_group"])
    tensors = gguf_tensors(fam, c, hf_values)
    if mtp_block:
        blk, h = f"blk.{c['num_hidden_layers']}.", c["hidden_size"]
        for name in ("attn_norm", "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm"):
            tensors[blk + name + ".weight"] = np.ones(h)
        tensors[blk + "nextn.eh_proj.weight"] = np.full((h, 2 * h), 0.01)
    held = {}
    for name, arr in tensors.items():
        arr = arr.astype(np.float32)
        ktype = kquants.get(name.split(".")[-2]) if kquants else None
        if name == "output.weight" and q6k_head_rng is not None:
            ktype = Q.Q6_K
        if ktype is not None:
            raw = random_kquant_blocks(q6k_head_rng, arr.shape, ktype)
            w.add_tensor(name, raw, raw_dtype=ktype)
            held[name] = dequantize(raw, ktype).reshape(arr.shape)
            if quantized is not None:
                quantized.add(name)
            continue
        if arr.ndim >= 2 and arr.shape[-1] % 32 == 0 and "gate_inp" not in name:
            q = quantize(arr, qtype)
            w.add_tensor(name, q, raw_dtype=qtype)
            held[name] = dequantize(q, qtype).reshape(arr.shape)
            if quantized is not None:
                quantized.add(name)
        else:
            w.add_tensor(name, arr)
            held[name] = arr
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return held


def to_hf_layout(fam, c, held):
    """Inverse of gguf_tensors, on float64 torch tensors for hf_moe_oracle.Family."""
    hf, names = {}, {}
    rows = {name: arr.astype(np.float64) for name, arr in held.items()}
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    inv = {"token_embd.weight": "model.embed_tokens.weight",
           "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    lay = {"attn_norm.weight": "input_layernorm.weight",
           "ffn_norm.weight": "post_attention_layernorm.weight",
           "attn_output.weight": "self_attn.o_proj.weight",
           "attn_q_norm.weight": "self_attn.q_norm.weight",
           "attn_k_norm.weight": "self_attn.k_norm.weight",
           "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
           "ffn_down.weight": "mlp.down_proj.weight",
           "ffn_gate_inp.weight": ("block_sparse_moe.gate.weight" if fam == "mixtral"
                                   else "mlp.gate.weight"),
           "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight"}
    for x in "qkv":
        for kind in ("weight", "bias"):
            lay[f"attn_{x}.{kind}"] = f"self_attn.{x}_proj.{kind}"
    shared = "mlp.shared_expert." if fam == "qwen2_moe" else "mlp.shared_experts."
    for p in ("gate", "up", "down"):
        lay[f"ffn_{p}_shexp.weight"] = f"{shared}{p}_proj.weight"
    if fam == "glm4_moe":
        lay["post_attention_norm.weight"] = "post_attention_layernorm.weight"
        lay["exp_probs_b.bias"] = "mlp.gate.e_score_correction_bias"
    for name, a in rows.items():
        if name in inv:
            names[inv[name]] = a
            continue
        _, layer, rest = name.split(".", 2)
        prefix = f"model.layers.{layer}."
        if rest.endswith("_exps.weight"):
            stack = rest.split("_")[1]
            proj = {"gate": "w1", "up": "w3", "down": "w2"}[stack] if fam == "mixtral" \
                else f"{stack}_proj"
            base = "block_sparse_moe.experts." if fam == "mixtral" else "mlp.experts."
            for e in range(a.shape[0]):
                names[f"{prefix}{base}{e}.{proj}.weight"] = a[e]
            continue
        if fam in PERMUTED and rest.startswith(("attn_q.", "attn_k.")):
            n = nh if rest.startswith("attn_q.") else nkv
            hdim = a.shape[0] // n
            # inverse of permute: reshape(n, d/2, 2, ...).swapaxes(1, 2)
            a = a.reshape(n, hdim // 2, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)
        names[prefix + lay[rest]] = a
    for k, v in names.items():
        hf[k] = torch.from_numpy(np.ascontiguousarray(v))
    return hf


DENSE_MATRICES = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                  "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "ffn_gate_shexp.weight",
                  "ffn_up_shexp.weight", "ffn_down_shexp.weight")


def held_matrices(fam, c, held, quantized):
    """HF names of the dense matrices (runtime/model/dense_matrices.h) that the file stores in
    Q8_0 / Q4_0 blocks: Switchyard keeps them so (LoadOptions::keep_quantized_matrices), and its
    kernels round their inputs to 8 bits per block of 32, which the oracle then emulates."""
    dense = {n: held[n] for n in quantized
             if n == "output.weight" or n.split(".", 2)[-1] in DENSE_MATRICES}
    return set(to_hf_layout(fam, c, dense))


# Rounded inputs (8 bits per block of 32) are emulated on the float64 forward's values, which
# differ from the f32 run's by ~1e-7: an input that close to a rounding boundary rounds the other
# way there, which moves its token's logits by about one 8-bit step (~5e-3 of max|logit| on these
# models; the input not rounded at all moves every token by as much). So with rounded inputs, all
# but a fifth of the tokens must match to TOL, and every token to FLIP_TOL.
FLIP_TOL = 1e-2


def compare_logits(ours, ref, label, rounded=False):
    """Our logits against the float64 forward on the dequantized weights: [] or one failure."""
    scale = max(1.0, float(ref.abs().max()))
    if ours.shape != ref.shape:
        print(f"FAIL {label}: logits of shape {tuple(ours.shape)}, expected {tuple(ref.shape)}")
        return [f"{label.strip()}: logits shape {tuple(ours.shape)}"]
    row_err = (ours - ref).abs().reshape(ref.shape[0], -1).max(dim=1).values
    err = float(row_err.max())
    if rounded:
        exact = int((row_err <= TOL * scale).sum())
        rows = ref.shape[0]
        ok = exact >= rows - max(1, rows // 5) and err <= FLIP_TOL * scale
        detail = f"; {exact} of {rows} tokens within {TOL:g} of max|logit|"
    else:
        ok, detail = err <= TOL * scale, ""
    print(f"{'ok  ' if ok else 'FAIL'} {label}: max abs err {err:.2e} against the float64 "
          f"forward on the dequantized weights{detail}")
    return [] if ok else [f"{label.strip()}: logits err {err:.2e}{detail}"]


def quantized_experts_check(binary, work):
    """Experts held in Q8_0 / Q4_0 blocks at run time (runtime/cpu/cpu_quant.h): a gguf-py file's
    own blocks, and `--quantize experts` of the HF directory."""
    failures = []
    for fam in ("mixtral", "qwen3_moe"):
        config, dtype, shards = H.CASES[fam]
        config = dict(config, hidden_size=64, intermediate_size=64)
        if fam != "mixtral":
            config["moe_intermediate_size"] = 32
        rng = np.random.default_rng(7 + sum(map(ord, fam)))
        model_dir = os.path.join(work, fam + ".blocks")
        H.write_model(model_dir, config, H.make_tensors(fam, config, rng), dtype, shards)
        hf_values = {}
        for name in os.listdir(model_dir):
            if name.endswith(".safetensors"):
                hf_values.update({k: v.numpy() for k, v in
                                  H.read_safetensors(os.path.join(model_dir, name)).items()})
        for qtype in (Q.Q8_0, Q.Q4_0):
            qname = qtype.name.lower()
            # The gguf-py file: every matrix quantized; experts stay in blocks, the rest is read
            # as f32.
            qpath = os.path.join(work, f"{fam}.blocks.{qname}.gguf")
            quantized = set()
            held = write_with_gguf_py(fam, config, hf_values, qpath, qtype, quantized)
            ref = H.Family(fam, config, to_hf_layout(fam, config, held), round_expert_inputs=True,
                           round_inputs_of=held_matrices(fam, config, held, quantized)
                           ).forward(H.PROMPT)
            # --quantize experts on the HF directory: only the experts' values change.
            hf_q = {}
            for name, arr in hf_values.items():
                arr = arr.astype(np.float32)
                if ".experts." in name:
                    arr = dequantize(quantize(arr, qtype), qtype).reshape(arr.shape)
                hf_q[name] = torch.from_numpy(arr.astype(np.float64))
            ref_hf = H.Family(fam, config, hf_q, round_expert_inputs=True).forward(H.PROMPT)
            for what, model, extra, want in (
                    ("GGUF's own blocks", qpath, (), ref),
                    ("--quantize experts", model_dir,
                     ("--quantize", "experts", "--quant-type", qname), ref_hf)):
                out = os.path.join(work, f"{fam}.blocks.{qname}.logits")
                rr = H.run_switchyard(binary, model, out, extra)
                label = f"{fam}: {qname} experts, {what}"
                if rr.returncode != 0:
                    failures.append(f"{label}: generate failed: {rr.stderr.strip()}")
                    continue
                if f"experts {qname}" not in rr.stderr:
                    failures.append(f"{label}: the experts did not load as {qname}: "
                                    f"{rr.stderr.strip()}")
                failures += compare_logits(H.read_logits(out), want, label, rounded=True)
    return failures


EXPERT_KINDS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def kquant_blocks_check(binary, work, name, seed, intermediate, kquants, label):
    """A llama-quantize-style mixtral file: Q8_0 matrices, a Q6_K LM head, and the tensor kinds of
    `kquants` in random blocks of their K-quant types. Switchyard runs every Q4_K, Q5_K and Q6_K
    matrix in its own blocks, no requantizing, the experts too when their matrices come in several
    types (ModelOptions::expert_layer_dtypes). The oracle is the float64 forward on gguf.quants'
    values, every matrix's input rounded to 8 bits as the kernels round. With mixed experts, an
    offload policy (experts on the host, whose layout holds one type) must run them as gguf.quants'
    Q8_0 requantization of their values, and says so."""
    fam = "mixtral"
    config = dict(H.CASES[fam][0], hidden_size=256, intermediate_size=intermediate)
    rng = np.random.default_rng(seed)
    model_dir = os.path.join(work, name)
    H.write_model(model_dir, config, H.make_tensors(fam, config, rng), "F32", 1)
    hf_values = {k: v.numpy() for k, v in H.read_safetensors(
        os.path.join(model_dir, "model.safetensors")).items()}
    path = os.path.join(work, name + ".gguf")
    quantized = set()
    held = write_with_gguf_py(fam, config, hf_values, path, Q.Q8_0, quantized, rng, kquants)
    layers = config["num_hidden_layers"]
    expert_types = [kquants.get(k, Q.Q8_0).name.lower() for k in EXPERT_KINDS]
    if len(set(expert_types)) == 1:
        experts = expert_types[0]
    else:  # one matrix of each kind per layer, counted by type
        experts = ", ".join(f"{t} x{expert_types.count(t) * layers}"
                            for t in sorted(set(expert_types)))
    # 4 matrices per layer and the LM head, each in the type the file holds it in.
    dense = {"q6_k": 1, "q8_0": 3 * layers}
    out_type = kquants.get("attn_output", Q.Q8_0).name.lower()
    dense[out_type] = dense.get(out_type, 0) + layers
    want = "dense matrices " + ", ".join(f"{t} x{n}" for t, n in sorted(dense.items()))
    rounded = held_matrices(fam, config, held, quantized)
    runs = [("resident", (), held, experts)]
    if len(set(expert_types)) > 1:
        requantized = dict(held)
        for tensor, arr in held.items():
            if tensor.split(".")[-2] in EXPERT_KINDS:
                requantized[tensor] = dequantize(quantize(arr, Q.Q8_0), Q.Q8_0).reshape(arr.shape)
        runs.append(("ondemand", ("--policy", "ondemand"), requantized, "q8_0"))
    failures = []
    for policy, extra, values, want_experts in runs:
        ref = H.Family(fam, config, to_hf_layout(fam, config, values), round_expert_inputs=True,
                       round_inputs_of=rounded).forward(H.PROMPT)
        out = os.path.join(work, f"{name}.{policy}.logits")
        rr = H.run_switchyard(binary, path, out, extra)
        what = f"{label}, {policy}"
        if rr.returncode != 0:
            failures.append(f"{what}: generate failed: {rr.stderr.strip()}")
            continue
        if want not in rr.stderr or f"experts {want_experts}," not in rr.stderr:
            failures.append(f"{what}: expected experts {want_experts} and {want}: "
                            f"{rr.stderr.strip()}")
        if values is not held:
            # The requantized values differ from the file's by more than the tolerance, so the
            # check would fail had they been read as the file holds them.
            plain = H.Family(fam, config, to_hf_layout(fam, config, held),
                             round_expert_inputs=True, round_inputs_of=rounded).forward(H.PROMPT)
            gap = float((plain - ref).abs().max()) / max(1.0, float(ref.abs().max()))
            print(f"     (the experts' values against their Q8_0 requantization: {gap:.1e} of "
                  f"max|logit|)")
        failures += compare_logits(H.read_logits(out), ref, what, rounded=True)
    return failures


def q6k_head_check(binary, work):
    """Q8_0 attention and experts and a Q6_K LM head, as llama-quantize writes a Q4_0 model."""
    return kquant_blocks_check(binary, work, "q6k_head", 6, 64, {},
                               "mixtral: Q8_0 file with a Q6_K LM head")


def kquant_mix_check(binary, work):
    """As llama-quantize writes a Q4_K_M model: Q4_K expert gate and up, Q6_K expert down, a Q5_K
    attention output, a Q6_K LM head (and Q8_0 q/k/v here)."""
    kquants = {"ffn_gate_exps": Q.Q4_K, "ffn_up_exps": Q.Q4_K, "ffn_down_exps": Q.Q6_K,
               "attn_output": Q.Q5_K}
    return kquant_blocks_check(binary, work, "kquant_mix", 26, 256, kquants,
                               "mixtral: Q4_K_M-style file (Q4_K, Q5_K, Q6_K, Q8_0)")


def kquant_experts_check(binary, work):
    """Every expert matrix in one k-quant type (as llama-quantize's Q6_K and Q5_K_S files hold
    them): the experts load and run in that type. A rounded input that lands on a rounding
    boundary in one forward and not the other changes that token's keys and values, and with them
    every later token's logits (compare_logits allows for a fifth of the tokens, not for that):
    the seeds are ones whose prompts meet no such boundary. The kernels themselves are checked
    against the double reference on random blocks of every type by the backend-ops harness
    (runtime/opcheck), and against ggml's own dot products by
    benchmarks/inference/quant_kernels_vs_ggml.sh."""
    failures = []
    for qtype, seed in ((Q.Q6_K, 31), (Q.Q5_K, 32), (Q.Q4_K, 33), (Q.Q3_K, 41), (Q.Q2_K, 35)):
        kquants = {k: qtype for k in EXPERT_KINDS}
        failures += kquant_blocks_check(binary, work, f"{qtype.name.lower()}_experts", seed, 256,
                                        kquants, f"mixtral: {qtype.name} experts")
    return failures


def mtp_block_check(binary, work, fam, config, hf_values):
    """GLM-4.5 as llama.cpp's converter writes it: block_count counts the multi-token-prediction
    block (nextn_predict_layers), whose tensors the forward skips: the logits equal those of the
    same file without it."""
    logits = []
    for mtp in (False, True):
        path = os.path.join(work, f"{fam}.mtp{int(mtp)}.gguf")
        write_with_gguf_py(fam, config, hf_values, path, Q.Q8_0, mtp_block=mtp)
        out = path + ".logits"
        rr = H.run_switchyard(binary, path, out)
        if rr.returncode != 0:
            print(f"FAIL {fam}: generate on {path}: {rr.stderr.strip()}")
            return [f"{fam}: generate on a GGUF with an MTP block failed: {rr.stderr.strip()}"]
        logits.append(H.read_logits(out))
    same = torch.equal(logits[0], logits[1])
    print(f"{'ok  ' if same else 'FAIL'} {fam:10s} a GGUF with a multi-token-prediction block "
          f"(nextn_predict_layers 1) gives the logits of the same file without it: {same}")
    return [] if same else [f"{fam}: the MTP block changes the logits"]


def main():
    binary, tool, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    failures = []
    for fam, (config, dtype, shards) in H.CASES.items():
        rng = np.random.default_rng(sum(map(ord, fam)))
        tensors = H.make_tensors(fam, config, rng)
        model_dir = os.path.join(work, fam)
        H.write_model(model_dir, config, tensors, dtype, shards)
        hf_values = {}
        for name in os.listdir(model_dir):
            if name.endswith(".safetensors"):
                hf_values.update({k: v.numpy() for k, v in
                                  H.read_safetensors(os.path.join(model_dir, name)).items()})
        path = os.path.join(work, fam + ".gguf")
        r = run([tool, "export", model_dir, path])
        if r.returncode != 0:
            failures.append(f"{fam}: export failed: {r.stderr.strip()}")
            continue
        # 1. Same logits and tokens as the HF directory.
        logits = []
        for m in (model_dir, path):
            out = os.path.join(work, fam + (".gguf" if m == path else ".hf") + ".logits")
            rr = H.run_switchyard(binary, m, out)
            if rr.returncode != 0:
                failures.append(f"{fam}: generate --model {m} failed: {rr.stderr.strip()}")
                break
            logits.append(H.read_logits(out))
        if len(logits) == 2:
            same = logits[0].shape == logits[1].shape and torch.equal(logits[0], logits[1])
            g_hf, _ = H.run_greedy(binary, model_dir, os.path.join(work, fam + ".hf.dl"))
            g_gg, _ = H.run_greedy(binary, path, os.path.join(work, fam + ".gguf.dl"))
            ok = same and g_hf is not None and g_hf == g_gg
            print(f"{'ok  ' if ok else 'FAIL'} {fam:10s} {dtype:4s} GGUF logits equal the HF "
                  f"directory's: {same}; greedy {g_gg} vs {g_hf}")
            if not ok:
                failures.append(f"{fam}: GGUF and HF runs differ")
        # 2. gguf-py reads it as llama.cpp's converter would have written it.
        failures += check_with_gguf_py(fam, config, path, hf_values, dtype)
        # 3. Round trips.
        r = run([tool, "check-hf", path, model_dir])
        if r.returncode != 0:
            failures.append(f"{fam}: HF -> GGUF -> HF: {r.stderr.strip()}")
        again = os.path.join(work, fam + ".rewritten.gguf")
        r = run([tool, "rewrite", path, again])
        same = r.returncode == 0 and open(path, "rb").read() == open(again, "rb").read()
        print(f"{'ok  ' if same else 'FAIL'} {fam:10s} HF -> GGUF -> HF bit-exact; GGUF -> GGUF "
              f"byte-exact: {same}")
        if not same:
            failures.append(f"{fam}: GGUF rewrite is not byte-exact: {r.stderr.strip()}")
        # 4. A GGUF written by gguf-py, quantized by gguf.quants, read by us.
        if fam == "glm4_moe":
            failures += mtp_block_check(binary, work, fam, config, hf_values)
        qtype = Q.Q8_0 if fam in ("mixtral", "qwen3_moe", "deepseek") else Q.Q4_0
        qpath = os.path.join(work, fam + ".ggufpy.gguf")
        quantized = set()
        held = write_with_gguf_py(fam, config, hf_values, qpath, qtype, quantized)
        for name, want in held.items():
            dump = os.path.join(work, "dump.f32")
            r = run([tool, "dump", qpath, name, dump])
            got = np.fromfile(dump, dtype="<f4") if r.returncode == 0 else None
            if got is None or not np.array_equal(got, want.reshape(-1)):
                failures.append(f"{fam}: {name} ({qtype.name}) dequantizes differently from "
                                f"gguf.quants: {r.stderr.strip()}")
        out = os.path.join(work, fam + ".ggufpy.logits")
        rr = H.run_switchyard(binary, qpath, out)
        if rr.returncode != 0:
            failures.append(f"{fam}: generate on gguf-py's file failed: {rr.stderr.strip()}")
        else:
            rounded = held_matrices(fam, config, held, quantized)
            ref = H.Family(fam, config, to_hf_layout(fam, config, held),
                           round_inputs_of=rounded).forward(H.PROMPT)
            failures += compare_logits(H.read_logits(out), ref,
                                       f"{fam:10s} gguf-py {qtype.name} file, {len(rounded)} "
                                       f"matrices in blocks", rounded=bool(rounded))
            if rounded and "dense matrices" not in rr.stderr:
                failures.append(f"{fam}: gguf-py's quantized matrices did not stay in blocks: "
                                f"{rr.stderr.strip()}")
    failures += quantized_export_check(tool, work)
    failures += kquant_dequant_check(tool, work)
    failures += quantized_experts_check(binary, work)
    failures += q6k_head_check(binary, work)
    failures += kquant_mix_check(binary, work)
    failures += kquant_experts_check(binary, work)
    failures += bad_input_checks(binary, work)
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    print("\nall GGUF checks pass")
    return 0


def quantized_export_check(tool, work):
    """Our Q8_0 / Q4_0 export equals gguf.quants.quantize of the same values, byte for byte."""
    failures = []
    model_dir = os.path.join(work, "qwen3_moe")  # F32, hidden 32
    for qname, qtype in (("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0)):
        path = os.path.join(work, f"qwen3_moe.{qname}.gguf")
        r = run([tool, "export", model_dir, path, qname])
        if r.returncode != 0:
            failures.append(f"export {qname}: {r.stderr.strip()}")
            continue
        ref = gguf.GGUFReader(os.path.join(work, "qwen3_moe.gguf"))
        ours = {t.name: t for t in gguf.GGUFReader(path).tensors}
        n = 0
        for t in ref.tensors:
            o = ours[t.name]
            src = dequantize(t.data, t.tensor_type)
            if o.tensor_type == qtype:
                n += 1
                if not np.array_equal(np.asarray(o.data).reshape(-1),
                                      quantize(src, qtype).reshape(-1)):
                    failures.append(f"export {qname}: {t.name} differs from gguf.quants")
            elif o.tensor_type != Q.F32 or not np.array_equal(o.data, src):
                failures.append(f"export {qname}: {t.name} kept as {o.tensor_type.name}")
        print(f"{'ok  ' if not failures else 'FAIL'} export {qname}: {n} tensors equal "
              f"gguf.quants.quantize byte for byte")
    return failures


def kquant_dequant_check(tool, work):
    """Q2_K ... Q6_K blocks of random bytes (llama-quantize's Q4_K_M files mix Q4_K, Q5_K, Q6_K)
    dump to exactly gguf.quants.dequantize's values. The f16 super-block scales are drawn finite."""
    failures = []
    rng = np.random.default_rng(18)
    path = os.path.join(work, "kquants.gguf")
    w = gguf.GGUFWriter(path, "llama")
    want = {}
    for qtype, d_offsets in KQUANT_SCALES.items():
        block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
        rows, blocks = 3, 2
        raw = rng.integers(0, 256, size=(rows, blocks, block_bytes), dtype=np.uint8)
        for off in d_offsets:
            d = rng.uniform(-2.0, 2.0, size=(rows, blocks)).astype(np.float16)
            raw[:, :, off:off + 2] = d.view(np.uint8).reshape(rows, blocks, 2)
        raw = raw.reshape(rows, blocks * block_bytes)
        name = f"{qtype.name.lower()}.weight"
        w.add_tensor(name, raw, raw_dtype=qtype)
        want[name] = dequantize(raw, qtype).reshape(-1).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for name, values in want.items():
        dump = os.path.join(work, "kquant.f32")
        r = run([tool, "dump", path, name, dump])
        got = np.fromfile(dump, dtype="<f4") if r.returncode == 0 else None
        ok = got is not None and np.array_equal(got, values)
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {values.size} values dequantize to "
              f"gguf.quants.dequantize's exactly")
        if not ok:
            failures.append(f"{name} dequantizes differently from gguf.quants: {r.stderr.strip()}")
    return failures


def bad_input_checks(binary, work):
    failures = []
    good = open(os.path.join(work, "mixtral.gguf"), "rb").read()
    reader = gguf.GGUFReader(os.path.join(work, "mixtral.gguf"))
    last = reader.tensors[-1]
    # The offset of a tensor info's type field: after name, n_dims and dims.
    def info_at(name):
        key = struct.pack("<Q", len(name)) + name.encode()
        return good.index(key) + len(key)
    cases = []
    cases.append(("truncated", good[:-64], last.name))
    bad = bytearray(good)
    at = info_at(last.name)
    n_dims = struct.unpack_from("<I", bad, at)[0]
    struct.pack_into("<Q", bad, at + 4 + 8 * n_dims + 4, 1 << 40)  # its offset
    cases.append(("header pointing past the end", bytes(bad), last.name))
    bad = bytearray(good)
    at = info_at("blk.0.attn_q.weight")
    struct.pack_into("<I", bad, at + 4 + 16, 99)
    cases.append(("wrong dtype", bytes(bad), "blk.0.attn_q.weight"))
    # A hostile block_count: 2^31 - 1 layers (the layer pattern used to look up tensors for each,
    # minutes of work before failing); refused at once, naming the key.
    bad = bytearray(good)
    key = struct.pack("<Q", len("llama.block_count")) + b"llama.block_count"
    struct.pack_into("<I", bad, good.index(key) + len(key) + 4, 0x7FFFFFFF)
    cases.append(("block_count 2^31 - 1", bytes(bad), "llama.block_count"))
    # A missing tensor: gguf-py copy without blk.1.ffn_up_exps.weight.
    path = os.path.join(work, "missing.gguf")
    w = gguf.GGUFWriter(path, "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        v = field.contents()
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(key, v)
        else:
            w.add_key_value(key, v, vtype)
    for t in reader.tensors:
        if t.name != "blk.1.ffn_up_exps.weight":
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    cases.append(("missing tensor", open(path, "rb").read(), "experts.0.w3"))
    for what, blob, needle in cases:
        p = os.path.join(work, "bad.gguf")
        with open(p, "wb") as f:
            f.write(blob)
        r = H.run_switchyard(binary, p, os.path.join(work, "bad.logits"))
        ok = r.returncode != 0 and needle in r.stderr and "bad.gguf" in r.stderr
        print(f"{'ok  ' if ok else 'FAIL'} error check: {what}: {r.stderr.strip()[:200]}")
        if not ok:
            failures.append(f"error check {what}: rc={r.returncode} {r.stderr.strip()}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
