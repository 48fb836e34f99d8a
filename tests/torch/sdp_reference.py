"""Subnetwork Data Parallelism in PyTorch, from docs/architecture.md and docs/design.md, driven by a
run's plan.json (which workers own which unit). It replays a whole run on one process, in float64
(or in float32, to measure what float32 rounding alone does):

- every worker r takes its own batches (batches.py);
- backward masking: r runs the full model forward and backward; the gradient of every element
  is averaged over the workers that own it (its unit's owners, or all N for shared tensors);
- forward masking: r runs its compact subnetwork (dropped blocks, or only its heads, neurons or
  channels, with the branch scale), and the gradients are averaged over owners the same way;
- --sdp-mask none: all N own everything (data parallelism);
- then clipping by the global norm (each element once), the learning-rate schedule, and the
  optimizer (torch.optim.SGD or AdamW) on the whole model: every element has at least one owner,
  and its owners hold the same values, so one optimizer over the assembled model is all of them.

Ownership beyond the units (docs/design.md): under backward masking with block units, the stem
(the shared tensors declared before the first block, GPT's tied embedding included) belongs to
the first droppable block's unit; everything that no unit names is shared by all workers.
"""
import math

import torch

from models import Keep


class Plan:
    def __init__(self, plan):
        self.raw = plan
        self.world = plan["world"]
        self.mask = plan["mask"]
        self.unit = plan["unit"]
        self.units = plan["units"]
        self.scale = 1.0 / plan["coverage"] if plan["branch_scale"] == "inverse" else 1.0


def owner_masks(model, plan, shapes):
    """{tensor: bool tensor [N, *shape]}: which workers own each element."""
    N = plan.world
    masks, named = {}, {}
    for name, shape in shapes.items():
        masks[name] = torch.zeros((N,) + tuple(shape), dtype=torch.bool)
        named[name] = torch.zeros(tuple(shape), dtype=torch.bool)

    def give(name, owners, index=...):
        for r in owners:
            masks[name][r][index] = True
        named[name][index] = True

    unit_blocks = [u["block"] for u in plan.units]
    for u in plan.units:
        if u["group"] is None:  # a block unit: every tensor of the block
            for name in shapes:
                if name.startswith(u["block"] + "."):
                    give(name, u["owners"])
            continue
        a0, a1 = u["atoms"]
        for name, axis, segments, width in model.group_tensors(u["block"], u["group"]):
            seg = shapes[name][axis] // segments
            for k in range(segments):
                index = [slice(None)] * len(shapes[name])
                index[axis] = slice(k * seg + a0 * width, k * seg + a1 * width)
                give(name, u["owners"], tuple(index))
    if plan.mask == "backward" and plan.unit == "block" and plan.units:
        first = next(b for b in model.blocks() if b in unit_blocks)
        owners = next(u["owners"] for u in plan.units if u["block"] == first)
        for name in model.stem():
            give(name, owners)
    for name in shapes:  # shared
        masks[name][:, ~named[name]] = True
    return masks


def subnetwork(model, plan, rank):
    """Worker rank's subnetwork under forward masking: {block: Keep}."""
    sub = {}
    for u in plan.units:
        keep = sub.setdefault(u["block"], Keep(drop=False, scale=plan.scale))
        if u["group"] is None:
            keep.drop = rank not in u["owners"]
            continue
        same = [v for v in plan.units if v["block"] == u["block"] and v["group"] == u["group"]]
        total = max(v["atoms"][1] for v in same)
        atoms = keep.atoms.setdefault(u["group"], torch.zeros(total, dtype=torch.bool))
        if rank in u["owners"]:
            atoms[u["atoms"][0] : u["atoms"][1]] = True
    return sub


def lr_at(step, warmup, total, lr_max, lr_min):
    """Linear warmup over `warmup` steps (step s < warmup takes lr_max*(s+1)/warmup), then half a
    cosine from lr_max at step `warmup` to lr_min at step `total`."""
    if step < warmup:
        return lr_max * (step + 1) / warmup
    progress = min((step - warmup) / max(total - warmup, 1), 1.0)
    return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + math.cos(math.pi * progress))


class Replay:
    """A run replayed from initial weights w0 ({name: numpy array}), in float64 (the reference) or
    in float32 (which measures how much float32 rounding alone moves the result)."""

    def __init__(self, model, cfg, plan, w0, data, dtype=torch.float64):
        self.model, self.cfg, self.plan, self.data, self.dtype = model, cfg, plan, data, dtype
        self.params = {n: torch.tensor(w, dtype=dtype) for n, w in w0.items()}
        self.trainable = [n for n in w0 if not model.is_buffer(n)]
        self.stats = {n: torch.tensor(w, dtype=dtype) for n, w in w0.items() if model.is_buffer(n)}
        for n in self.stats:  # nn.BatchNorm2d's initial statistics
            self.stats[n].fill_(0.0 if n.endswith("running_mean") else 1.0)
        for n in self.trainable:
            self.params[n].requires_grad_(True)
        shapes = {n: w.shape for n, w in w0.items() if n in self.trainable}
        self.owners = owner_masks(model, plan, shapes)
        decays = {n: cfg["decay-all"] or model.decays(n) for n in self.trainable}
        decay = [self.params[n] for n in self.trainable if decays[n]]
        rest = [self.params[n] for n in self.trainable if not decays[n]]
        wd = cfg["weight-decay"]
        if cfg["optimizer"] == "sgd":
            wd = 5e-4 if wd < 0 else wd
            groups = [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]
            self.opt = torch.optim.SGD(groups, lr=cfg["lr"], momentum=cfg["momentum"], nesterov=cfg["nesterov"])
        else:
            wd = 0.1 if wd < 0 else wd
            groups = [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]
            self.opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
        self.step = 0

    def _worker_gradient(self, rank):
        """(loss, {tensor: gradient}) of worker rank's micro-batches of this step."""
        A, world = self.cfg["grad-accum"], self.plan.world
        sub = subnetwork(self.model, self.plan, rank) if self.plan.mask == "forward" else None
        total = 0.0
        grads = {n: torch.zeros_like(self.params[n]) for n in self.trainable}
        for a in range(A):
            x, y = self.data.batch(self.step * A + a, rank)
            batch = (torch.from_numpy(x).to(self.dtype) if x.dtype.kind == "f" else torch.from_numpy(x),
                     torch.from_numpy(y))
            kwargs = {"stats": self.stats} if self.model.family == "resnet" and world == 1 else {}
            loss = self.model.forward(self.params, batch, sub, **kwargs) / A
            g = torch.autograd.grad(loss, [self.params[n] for n in self.trainable], allow_unused=True)
            for n, gi in zip(self.trainable, g):
                if gi is not None:
                    grads[n] += gi
            total += float(loss)
        return total, grads

    def train_step(self):
        """One optimizer step; returns (loss, gradient norm before clipping)."""
        N = self.plan.world
        losses, worker_grads = [], []
        for r in range(N):
            loss, g = self._worker_gradient(r)
            losses.append(loss)
            worker_grads.append(g)
        for n in self.trainable:
            mask = self.owners[n].to(self.dtype)
            total = sum(mask[r] * worker_grads[r][n] for r in range(N))
            self.params[n].grad = total / mask.sum(0)
        params = [self.params[n] for n in self.trainable]
        clip = self.cfg["clip"]
        norm = float(torch.sqrt(sum((p.grad * p.grad).sum() for p in params)))
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        lr = lr_at(self.step, self.cfg["warmup"], self.cfg["steps"], self.cfg["lr"], self.cfg["lr-min"])
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.step()
        self.step += 1
        return sum(losses) / N, norm

    def optimizer_state(self):
        """{name.state_key: tensor} with PyTorch's state keys, as optim.safetensors names them."""
        out = {}
        for n in self.trainable:
            for key, value in self.opt.state[self.params[n]].items():
                if torch.is_tensor(value) and value.dim() > 0:
                    out[n + "." + key] = value.detach()
        return out
