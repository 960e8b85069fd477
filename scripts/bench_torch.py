#!/usr/bin/python3
"""The PyTorch side of scripts/bench_torch.sh and scripts/bench_llama.sh: the
same models as `swarm --role local` trains, trained as it trains them: batch =
microbatches x microbatch with gradient accumulation, AdamW (weight decay on
matrices), gradient clipping at 1.0, byte-level windows of a text.
  --model gpt: pre-LayerNorm blocks, fused qkv, tanh GELU MLP of 4 d, learned
    positions, untied head (models/gpt_block.cpp).
  --model llama: RMSNorm, rotary positions in the rotate-half layout,
    grouped-query attention, SwiGLU, no biases, untied head (models/llama_block.cpp).
  --precision bf16: forward under torch.autocast("cpu", torch.bfloat16), as
    swarm's --precision bf16; fp32 masters and optimizer.
Prints one line of JSON: tokens per second over the steps after the first.

    bench_torch.py --model gpt --d-model 1024 --n-heads 16 --n-layers 4 \\
        --seq-len 128 --microbatch 8 --batch-size 16 --steps 6 --threads 2 --corpus FILE
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d, self.h, self.kv = a.d_model, a.n_heads, a.n_kv_heads
        self.hd = d // a.n_heads
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d, 1e-5), RMSNorm(d, 1e-5)
        self.q_proj, self.k_proj = lin(d, self.h * self.hd), lin(d, self.kv * self.hd)
        self.v_proj, self.o_proj = lin(d, self.kv * self.hd), lin(self.h * self.hd, d)
        self.gate_proj, self.up_proj, self.down_proj = lin(d, a.ffn_dim), lin(d, a.ffn_dim), lin(a.ffn_dim, d)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if self.kv != self.h:
            k = k.repeat_interleave(self.h // self.kv, 1)
            v = v.repeat_interleave(self.h // self.kv, 1)
        scores = (q @ k.transpose(-2, -1)) / self.hd ** 0.5
        y = torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v
        r = x + self.o_proj(y.transpose(1, 2).reshape(b, t, -1))
        m = self.post_attention_layernorm(r)
        return r + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))


class GptBlock(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d, self.h = a.d_model, a.n_heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = (m.view(b, t, self.h, d // self.h).transpose(1, 2) for m in self.qkv(self.ln1(x)).chunk(3, -1))
        scores = (q @ k.transpose(-2, -1)) / (d // self.h) ** 0.5
        y = torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v
        h = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return h + self.out(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(256, a.d_model), torch.nn.Embedding(a.seq_len, a.d_model)
        self.blocks = torch.nn.ModuleList(GptBlock(a) for _ in range(a.n_layers))
        self.ln_f = torch.nn.LayerNorm(a.d_model)
        self.head = torch.nn.Linear(a.d_model, 256)
        self.mask = torch.ones(a.seq_len, a.seq_len, dtype=torch.bool).triu(1)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for blk in self.blocks:
            h = blk(h, self.mask)
        return self.head(self.ln_f(h))


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = torch.nn.Embedding(256, a.d_model)
        self.blocks = torch.nn.ModuleList(Block(a) for _ in range(a.n_layers))
        self.norm = RMSNorm(a.d_model, 1e-5)
        self.head = torch.nn.Linear(a.d_model, 256, bias=False)
        hd = a.d_model // a.n_heads
        inv_freq = 1.0 / 10000 ** (torch.arange(0, hd, 2).float() / hd)
        angles = torch.outer(torch.arange(a.seq_len).float(), inv_freq)
        angles = torch.cat([angles, angles], -1)
        self.cos, self.sin = angles.cos(), angles.sin()
        self.mask = torch.ones(a.seq_len, a.seq_len, dtype=torch.bool).triu(1)

    def forward(self, x):
        h = self.embed(x)
        for blk in self.blocks:
            h = blk(h, self.cos, self.sin, self.mask)
        return self.head(self.norm(h))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("d-model", 256), ("n-heads", 8), ("n-kv-heads", 4), ("n-layers", 4), ("ffn-dim", 768),
                          ("seq-len", 128), ("microbatch", 8), ("batch-size", 64), ("steps", 10), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--corpus", default="/usr/share/games/fortunes/fortunes")
    p.add_argument("--model", choices=["gpt", "llama"], default="llama")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    text = np.frombuffer(open(a.corpus, "rb").read(), dtype=np.uint8).astype(np.int64)
    rng = np.random.default_rng(1)
    model = Gpt(a) if a.model == "gpt" else Llama(a)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    rest = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95))
    micro = max(1, a.batch_size // a.microbatch)
    times = []
    for _ in range(a.steps):
        start = time.perf_counter()
        for _ in range(micro):
            at = rng.integers(0, len(text) - a.seq_len - 1, a.microbatch)
            window = torch.from_numpy(np.stack([text[i:i + a.seq_len + 1] for i in at]))
            with torch.autocast("cpu", torch.bfloat16, enabled=a.precision == "bf16"):
                logits = model(window[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, 256), window[:, 1:].reshape(-1)) / micro
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    tokens = micro * a.microbatch * a.seq_len
    rates = [tokens / t for t in times[1:]]  # the first step warms up allocator and threads
    print(json.dumps({"tokens_per_s": sum(rates) / len(rates), "steps": len(rates), "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "model": a.model, "precision": a.precision}))


if __name__ == "__main__":
    main()
