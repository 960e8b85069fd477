#!/usr/bin/python3
"""An independent forward pass of an exported model, in NumPy.

    reference_forward.py MODEL_DIR CASES.safetensors

MODEL_DIR is what `swarm --role export` writes (model.safetensors,
config.json); CASES holds `tokens` (I64 [B, T]) and `logits` (F32 [B, T, V]),
swarm's logits of those tokens. This script reads both with json and numpy
only, computes the logits as Hugging Face's LlamaForCausalLM (or
Qwen2ForCausalLM, or GPT2LMHeadModel) defines them, prints the largest
absolute difference and exits 1 when it is above 1e-4.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64}


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[base + begin:base + end], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def attention(q, k, v):
    """q [H, T, hd], k, v [H, T, hd]: causal softmax(q k^T / sqrt(hd)) v."""
    t, hd = q.shape[1], q.shape[2]
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
    scores = np.where(np.triu(np.ones((t, t), dtype=bool), 1), -np.inf, scores)
    return softmax(scores) @ v


def llama(w, c, tokens):
    """Llama, or Qwen2: the same layer with biases on the q, k and v projections."""
    d, h = c["hidden_size"], c["num_attention_heads"]
    kvh, hd = c["num_key_value_heads"], c["hidden_size"] // c["num_attention_heads"]
    eps, theta = c["rms_norm_eps"], c["rope_theta"]

    def rms(x, g):
        return g * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))

    # Rotary embeddings as transformers' LlamaRotaryEmbedding and rotate_half.
    t = tokens.shape[0]
    inv_freq = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    angles = np.outer(np.arange(t, dtype=np.float64), inv_freq)
    angles = np.concatenate([angles, angles], -1)
    cos, sin = np.cos(angles), np.sin(angles)

    def rope(x):
        half = hd // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    def qkv(a, p, name, heads):
        y = a @ w[p + f"self_attn.{name}.weight"].T
        if c["model_type"] == "qwen2":  # Qwen2Attention: q, k and v always have biases
            y = y + w[p + f"self_attn.{name}.bias"]
        return y.reshape(t, heads, hd).transpose(1, 0, 2)

    x = w["model.embed_tokens.weight"][tokens].astype(np.float64)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms(x, w[p + "input_layernorm.weight"])
        q, k, v = qkv(a, p, "q_proj", h), qkv(a, p, "k_proj", kvh), qkv(a, p, "v_proj", kvh)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, h // kvh, axis=0), np.repeat(v, h // kvh, axis=0)
        y = attention(q, k, v).transpose(1, 0, 2).reshape(t, d)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        m = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = m @ w[p + "mlp.gate_proj.weight"].T
        silu = gate / (1.0 + np.exp(-gate))
        x = x + (silu * (m @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def gpt2(w, c, tokens):
    d, h, eps = c["n_embd"], c["n_head"], c["layer_norm_epsilon"]
    t, hd = tokens.shape[0], c["n_embd"] // c["n_head"]

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return g * (x - mu) / np.sqrt(var + eps) + b

    def gelu_new(x):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))

    x = (w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:t]).astype(np.float64)
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        a = ln(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: [in, out]
        q, k, v = (m.reshape(t, h, hd).transpose(1, 0, 2) for m in np.split(qkv, 3, axis=-1))
        y = attention(q, k, v).transpose(1, 0, 2).reshape(t, d)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = ln(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        f = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + f @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    return ln(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"]) @ w["lm_head.weight"].T


def main():
    model_dir, cases_path = sys.argv[1], sys.argv[2]
    config = json.load(open(f"{model_dir}/config.json"))
    weights = {k: v.astype(np.float64) for k, v in read_safetensors(f"{model_dir}/model.safetensors").items()}
    cases = read_safetensors(cases_path)
    forward = {"llama": llama, "qwen2": llama, "gpt2": gpt2}[config["model_type"]]
    worst = 0.0
    for tokens, want in zip(cases["tokens"], cases["logits"]):
        got = forward(weights, config, tokens)
        worst = max(worst, float(np.abs(got - want).max()))
    print(f"reference_forward: {config['model_type']}, {cases['tokens'].shape[0]} sequences of "
          f"{cases['tokens'].shape[1]} tokens: max abs difference {worst:.3g}")
    sys.exit(0 if worst <= 1e-4 else 1)


if __name__ == "__main__":
    main()
