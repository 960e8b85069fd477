#!/usr/bin/python3
"""The PyTorch side of scripts/bench_llama.sh: the same Llama model (RMSNorm,
rotary positions in the rotate-half layout, grouped-query attention, SwiGLU,
no biases, untied head) trained as `swarm --role local` trains it: batch =
microbatches x microbatch with gradient accumulation, AdamW (weight decay on
matrices), gradient clipping at 1.0, byte-level windows of a text. Prints one
line of JSON: tokens per second over the steps after the first.

    bench_llama_torch.py --d-model 256 --n-heads 8 --n-kv-heads 4 --n-layers 4 \\
        --ffn-dim 768 --seq-len 128 --microbatch 8 --batch-size 64 --steps 10 --threads 2 --corpus FILE
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
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    text = np.frombuffer(open(a.corpus, "rb").read(), dtype=np.uint8).astype(np.int64)
    rng = np.random.default_rng(1)
    model = Llama(a)
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
            logits = model(window[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 256), window[:, 1:].reshape(-1)) / micro
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    tokens = micro * a.microbatch * a.seq_len
    rates = [tokens / t for t in times[1:]]  # the first step warms up allocator and threads
    print(json.dumps({"tokens_per_s": sum(rates) / len(rates), "steps": len(rates), "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
