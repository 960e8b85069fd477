#!/usr/bin/python3
"""The PyTorch side of scripts/bench_ddp.sh: the GPT of scripts/bench_torch.py
trained with DistributedDataParallel over gloo, RANKS processes of THREADS
torch threads each on this machine, the global batch split evenly across
ranks (each accumulates its share in microbatches, DDP all-reduces the last
one's gradients), AdamW and clipping as swarm. Prints one line of JSON:
global tokens per second over the steps after the first.

    bench_ddp.py --d-model 128 --n-heads 4 --n-layers 4 --seq-len 128 --microbatch 8 \\
        --batch-size 64 --steps 10 --ranks 2 --threads 1
"""
import argparse
import contextlib
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import Gpt  # noqa: E402


def rank_main(rank, a, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(Gpt(a))
    text = np.frombuffer(open(a.corpus, "rb").read(), dtype=np.uint8).astype(np.int64)
    rng = np.random.default_rng(1 + rank)
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [q for q in params if q.dim() >= 2], "weight_decay": 0.1},
                             {"params": [q for q in params if q.dim() < 2], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95))
    micro = max(1, a.batch_size // a.ranks // a.microbatch)
    times = []
    for _ in range(a.steps):
        dist.barrier()
        start = time.perf_counter()
        for i in range(micro):
            at = rng.integers(0, len(text) - a.seq_len - 1, a.microbatch)
            window = torch.from_numpy(np.stack([text[j:j + a.seq_len + 1] for j in at]))
            sync = contextlib.nullcontext() if i == micro - 1 else model.no_sync()
            with sync:
                logits = model(window[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, 256), window[:, 1:].reshape(-1)) / micro
                loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    if rank == 0:
        tokens = micro * a.microbatch * a.seq_len * a.ranks
        rates = [tokens / t for t in times[1:]]
        out.put({"tokens_per_s": sum(rates) / len(rates), "steps": len(rates), "ranks": a.ranks,
                 "threads": a.threads, "torch": torch.__version__})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, default in [("d-model", 128), ("n-heads", 4), ("n-layers", 4), ("seq-len", 128), ("microbatch", 8),
                          ("batch-size", 64), ("steps", 10), ("ranks", 2), ("threads", 1), ("port", 29517)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--corpus", default="/usr/share/games/fortunes/fortunes")
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.spawn(rank_main, args=(a, a.port, out), nprocs=a.ranks, join=True)
    print(json.dumps(out.get()))


if __name__ == "__main__":
    main()
