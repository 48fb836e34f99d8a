#!/usr/bin/env python3
"""The PyTorch peer of an sdp GPT run: what a PyTorch user would train the same model with.

A byte-level GPT-2 style model of sdp's shape (tied LM head, learned positions, LayerNorm, biases,
tanh GELU, d_ff = 4 * width, vocabulary 256 padded to a multiple of 64 as sdp pads it: the same
parameter count as `sdp plan` prints), trained on N CPU processes with torch.distributed over
gloo (localhost TCP), DistributedDataParallel and AdamW (sdp's defaults: lr 1e-3 with warm-up and
cosine decay, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only, gradient clipping at
norm 1.0). Each rank draws its own random windows of T + 1 bytes from the first 90% of the text.

  --checkpoint  wraps each transformer layer in torch.utils.checkpoint.checkpoint (non-reentrant):
                activation recomputation, PyTorch's counterpart of sdp's --recompute layer.
  --zero        torch.distributed.optim.ZeroRedundancyOptimizer around AdamW (ZeRO stage 1:
                each rank holds the AdamW state of its shard of the parameters only).
  --baseline    builds no model and trains nothing: the peak RSS of a worker that has imported
                torch, joined the gloo group and read the text, PyTorch's fixed cost per worker.

Two ways to start it:
  /usr/bin/python3 bench/torch_peer.py --workers N [options]            (torch.multiprocessing)
  mpirun -np N /usr/bin/python3 bench/torch_peer.py [options]           (ranks from OMPI_COMM_WORLD_*;
                                                                         gloo still does the work)
Both rendezvous over TCP at 127.0.0.1:MASTER_PORT (default 29517); one node only.

Threads per process: --threads, or 0 (the default) for cores / workers on the node, at least one,
as sdp's --threads 0 does.

Output, printed by rank 0 once training ends (the format is stable; bench/memory_levers.sh parses it):
  torch_peer: <description>
  worker R tokens_per_s X ms_per_step Y peak_rss_mib Z         (one line per rank)
  result mode=M workers=N params=P tokens_per_s=X ms_per_step=Y peak_rss_mib=Z loss=L
where a worker's ms_per_step is the median of its steps after --warmup steps, its tokens_per_s
is B * T / that median, its peak_rss_mib is getrusage's ru_maxrss of its process; the result line
sums tokens_per_s over the workers and gives the slowest worker's ms_per_step and the largest
worker's peak RSS. --json FILE also writes all of it as JSON.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

EPS = 1e-5


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C, eps=EPS)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=EPS)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        H = self.H
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        # torch 1.13 has no scaled_dot_product_attention: the scores are materialised, as in sdp.
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(C // H))
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        y = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, width, heads, seq_len, vocab, checkpoint=False):
        super().__init__()
        self.vocab, self.checkpoint = vocab, checkpoint
        padded = (vocab + 63) // 64 * 64
        self.wte = nn.Embedding(padded, width)
        self.wpe = nn.Embedding(seq_len, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=EPS)
        # GPT-2's initialisation, as sdp's: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2L)).
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias") and "ln_" not in name:
                nn.init.zeros_(p)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe.weight[:T]
        for block in self.h:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits[..., : self.vocab].reshape(-1, self.vocab), targets.reshape(-1))


def param_groups(model, weight_decay):
    """Weight decay on the linear layers' matrices only (not embeddings, norms or biases), as sdp."""
    decay, rest = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() == 2 and not name.startswith(("wte", "wpe")) else rest).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def lr_at(step, a):
    """sdp's schedule: linear warm-up (10% of the steps, at most 100), then cosine to lr_min."""
    warm = min(100, a.steps // 10)
    if step <= warm:
        return a.lr * step / max(1, warm)
    frac = (step - warm) / max(1, a.steps - warm)
    return a.lr_min + 0.5 * (a.lr - a.lr_min) * (1 + math.cos(math.pi * frac))


def train(a, rank, text):
    """Trains a.steps steps; returns (parameters, each step's seconds, the last loss)."""
    torch.manual_seed(a.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = GPT(a.layers, a.width, a.heads, a.seq_len, 256, checkpoint=a.checkpoint)
    params = sum(p.numel() for p in model.parameters())
    ddp = nn.parallel.DistributedDataParallel(model)
    groups = param_groups(model, a.weight_decay)
    adam = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if a.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, **adam)
    else:
        opt = torch.optim.AdamW(groups, **adam)

    gen = torch.Generator().manual_seed(a.seed + 1 + rank)
    offsets = torch.arange(a.seq_len + 1)
    times, loss = [], float("nan")
    dist.barrier()
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        starts = torch.randint(0, text.numel() - a.seq_len - 1, (a.batch, 1), generator=gen)
        window = text[starts + offsets].long()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.zero_grad(set_to_none=True)
        out = ddp(window[:, :-1], window[:, 1:])
        out.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        loss = out.item()
        times.append(time.perf_counter() - t0)
    return params, times, loss


def worker(rank, world, local_world, a):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(a.port))
    cores = os.cpu_count() or 1
    threads = a.threads if a.threads > 0 else max(1, cores // local_world)
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    with open(a.data, "rb") as f:
        text = f.read()
    text_bytes = torch.frombuffer(bytearray(text[: int(len(text) * 0.9)]), dtype=torch.uint8)
    if text_bytes.numel() <= a.seq_len + 1:
        sys.exit("torch_peer: %s is shorter than one sequence" % a.data)
    del text
    dist.barrier()

    params, times, loss = (0, [], float("nan")) if a.baseline else train(a, rank, text_bytes)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB

    timed = times[a.warmup:] or times
    ms = 1000.0 * statistics.median(timed) if timed else float("nan")
    tokens_per_s = a.batch * a.seq_len / (ms / 1000.0) if timed else 0.0
    mine = {"rank": rank, "ms_per_step": ms, "tokens_per_s": tokens_per_s, "peak_rss": peak_rss,
            "loss": loss, "threads": threads}
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        report(a, world, threads, params, every)
    dist.barrier()
    # Leave without tearing gloo down: in torch 1.13 the process group's destructor (run by
    # destroy_process_group or at exit, through DDP's reducer) joins a gloo thread that waits for
    # the GIL the main thread holds, and the process hangs now and then. Everything is printed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def report(a, world, threads, params, every):
    mode = "ddp" + ("+checkpoint" if a.checkpoint else "") + ("+zero" if a.zero else "")
    if a.baseline:
        mode = "baseline"
    print("torch_peer: gpt, %d layers, width %d, %d heads, T %d, batch %d | %d parameters | %d workers x %d "
          "threads | gloo | %s | %d steps, median after %d warm-up | torch %s"
          % (a.layers, a.width, a.heads, a.seq_len, a.batch, params, world, threads, mode, a.steps,
             min(a.warmup, a.steps - 1), torch.__version__))
    for w in every:
        print("worker %d tokens_per_s %.1f ms_per_step %.2f peak_rss_mib %.1f"
              % (w["rank"], w["tokens_per_s"], w["ms_per_step"], w["peak_rss"] / 2**20))
    total = {"mode": mode, "workers": world, "params": params,
             "tokens_per_s": sum(w["tokens_per_s"] for w in every),
             "ms_per_step": max(w["ms_per_step"] for w in every),
             "peak_rss": max(w["peak_rss"] for w in every), "loss": every[0]["loss"]}
    print("result mode=%s workers=%d params=%d tokens_per_s=%.1f ms_per_step=%.2f peak_rss_mib=%.1f loss=%.4f"
          % (mode, world, params, total["tokens_per_s"], total["ms_per_step"], total["peak_rss"] / 2**20,
             total["loss"]))
    sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": vars(a), "threads": threads, "result": total, "workers": every}, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="text file (trained on its bytes)")
    p.add_argument("--workers", type=int, default=0,
                   help="processes to spawn; 0 = one, or as many as mpirun started (OMPI_COMM_WORLD_SIZE)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=4, help="sequences per step per worker")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=1, help="first steps left out of the median")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-min", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--checkpoint", action="store_true", help="torch.utils.checkpoint around each layer")
    p.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer around AdamW")
    p.add_argument("--baseline", action="store_true",
                   help="no model and no training: the peak RSS of a worker that only imported torch, "
                        "joined the gloo group and read the text (PyTorch's fixed cost per worker)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads per process; 0 = cores / workers on the node")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--port", type=int, default=29517, help="rendezvous port, unless MASTER_PORT is set")
    p.add_argument("--json", help="also write the figures to this JSON file")
    a = p.parse_args()
    if a.width % a.heads:
        p.error("--width must be a multiple of --heads")
    if a.steps < 1:
        p.error("--steps must be at least 1")
    if not os.path.isfile(a.data):
        p.error("no text at %s" % a.data)

    if "OMPI_COMM_WORLD_SIZE" in os.environ:
        world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        if a.workers not in (0, world):
            p.error("--workers %d, but mpirun started %d" % (a.workers, world))
        worker(int(os.environ["OMPI_COMM_WORLD_RANK"]), world,
               int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", world)), a)
    else:
        world = max(1, a.workers)
        torch.multiprocessing.spawn(worker, args=(world, world, a), nprocs=world, join=True)


if __name__ == "__main__":
    main()
