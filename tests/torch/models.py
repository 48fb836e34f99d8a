"""The four sdp model families in PyTorch, written from their documented architecture
(README.md, docs/checkpoints.md for names and shapes, docs/design.md "The models, precisely" for the rest),
as functions of a dict of HF-named tensors, so that sdp's checkpoints load as they are.

Every forward returns the mean cross-entropy over the batch's targets (tokens or images) and
takes an optional subnetwork: for each block (by name), None for the whole block, or a
`Keep(drop, scale, atoms)`: drop the block (it becomes the identity), or scale both of its
residual branches by `scale` and keep only the atoms (heads, MLP neurons, inner channels) whose
entry in `atoms[group]` is True. A compact dense model with fewer heads or neurons computes the
same function as the full one with the dropped atoms' outputs removed, which is what the masks
below do; a group with no atom left removes its whole branch, bias included.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

EPS = 1e-5  # LayerNorm, RMSNorm and BatchNorm


@dataclass
class Keep:
    drop: bool = False
    scale: float = 1.0
    atoms: dict = field(default_factory=dict)  # group name -> bool tensor over the group's atoms


def _keep(sub, block):
    return sub.get(block) if sub else None


def _atoms(keep, group):
    return None if keep is None else keep.atoms.get(group)


def _attention(q, k, v, causal):
    """q, k, v [B, H, T, hs]: softmax(q k^T / sqrt(hs)) v, causal or bidirectional."""
    T, hs = q.shape[2], q.shape[3]
    scores = q @ k.transpose(-1, -2) / math.sqrt(hs)
    if causal:
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _heads(x, H):
    B, T, D = x.shape
    return x.view(B, T, H, D // H).transpose(1, 2)


def _merge(x, mask):
    """[B, H, T, hs] -> [B, T, H*hs], dropping the heads whose mask entry is False."""
    if mask is not None:
        x = x * mask.to(x.dtype)[None, :, None, None]
    B, H, T, hs = x.shape
    return x.transpose(1, 2).reshape(B, T, H * hs)


def _masked(x, mask):
    return x if mask is None else x * mask.to(x.dtype)


def _branch_present(mask):
    return mask is None or bool(mask.any())


def _rms_norm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * w


def _rope(x, theta):
    """Rotate-half RoPE on [B, H, T, hs]: position t turns pair (i, i + hs/2) by t*theta^(-2i/hs)."""
    T, hs = x.shape[2], x.shape[3]
    inv = theta ** (-torch.arange(0, hs // 2, dtype=x.dtype) * 2.0 / hs)
    ang = torch.arange(T, dtype=x.dtype)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., : hs // 2], x[..., hs // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _gelu(x):
    return F.gelu(x, approximate="tanh")


class Model:
    """What the reference needs to know of one run's model."""

    family = None
    margin = math.inf  # ReLU models: the smallest |ReLU input| / its tensor's RMS seen while tracking
    track = False

    def __init__(self, cfg, shapes, vocab):
        self.cfg, self.shapes, self.vocab = cfg, shapes, vocab

    def blocks(self):
        """The block names, as plan.json names them, in order."""
        raise NotImplementedError

    def stem(self):
        """The shared tensors declared before the first block."""
        raise NotImplementedError

    def group_tensors(self, block, group):
        """[(tensor, axis, segments, atom_width)]: where atom j of `group` lies in each tensor: along
        `axis`, which holds `segments` consecutive copies of the group's width (3 for GPT's fused
        q, k, v), atom j is elements [j*atom_width, (j+1)*atom_width) of each copy."""
        raise NotImplementedError

    def is_buffer(self, name):
        return False

    def decays(self, name):
        """Weight decay (without --decay-all) applies to the weights of linear layers and
        convolutions, not to norms, biases, embeddings, positions or the class token."""
        embeddings = ("transformer.wte.weight", "transformer.wpe.weight", "model.embed_tokens.weight")
        return name.endswith(".weight") and len(self.shapes[name]) >= 2 and name not in embeddings


# ---- GPT-2 style -------------------------------------------------------------------------------


class GPT(Model):
    family = "gpt"

    def blocks(self):
        return ["transformer.h.%d" % i for i in range(self.cfg["layers"])]

    def stem(self):
        return ["transformer.wte.weight", "transformer.wpe.weight"]

    def group_tensors(self, block, group):
        hs = self.cfg["width"] // self.cfg["heads"]
        if group == "attn":
            return [(block + ".attn.c_attn.weight", 0, 3, hs), (block + ".attn.c_attn.bias", 0, 3, hs),
                    (block + ".attn.c_proj.weight", 1, 1, hs)]
        return [(block + ".mlp.c_fc.weight", 0, 1, 1), (block + ".mlp.c_fc.bias", 0, 1, 1),
                (block + ".mlp.c_proj.weight", 1, 1, 1)]

    def forward(self, p, batch, sub=None):
        tokens, targets = batch
        C, H = self.cfg["width"], self.cfg["heads"]
        T = tokens.shape[1]
        x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][:T]
        for b in self.blocks():
            keep = _keep(sub, b)
            if keep is not None and keep.drop:
                continue
            s = 1.0 if keep is None else keep.scale
            heads = _atoms(keep, "attn")
            if _branch_present(heads):
                h = F.layer_norm(x, (C,), p[b + ".ln_1.weight"], p[b + ".ln_1.bias"], EPS)
                q, k, v = F.linear(h, p[b + ".attn.c_attn.weight"], p[b + ".attn.c_attn.bias"]).split(C, -1)
                y = _merge(_attention(_heads(q, H), _heads(k, H), _heads(v, H), True), heads)
                x = x + s * F.linear(y, p[b + ".attn.c_proj.weight"], p[b + ".attn.c_proj.bias"])
            neurons = _atoms(keep, "mlp")
            if _branch_present(neurons):
                h = F.layer_norm(x, (C,), p[b + ".ln_2.weight"], p[b + ".ln_2.bias"], EPS)
                a = _masked(_gelu(F.linear(h, p[b + ".mlp.c_fc.weight"], p[b + ".mlp.c_fc.bias"])), neurons)
                x = x + s * F.linear(a, p[b + ".mlp.c_proj.weight"], p[b + ".mlp.c_proj.bias"])
        x = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], EPS)
        logits = x @ p["transformer.wte.weight"].t()  # tied LM head; rows past the vocabulary are padding
        return F.cross_entropy(logits[..., : self.vocab].reshape(-1, self.vocab), targets.reshape(-1))


# ---- LLaMA style -------------------------------------------------------------------------------


class Llama(Model):
    family = "llama"

    def blocks(self):
        return ["model.layers.%d" % i for i in range(self.cfg["layers"])]

    def stem(self):
        return ["model.embed_tokens.weight"]

    def group_tensors(self, block, group):
        hs = self.cfg["width"] // self.cfg["heads"]
        if group == "attn":
            return [(block + ".self_attn.%s_proj.weight" % n, 0, 1, hs) for n in "qkv"] + [
                (block + ".self_attn.o_proj.weight", 1, 1, hs)]
        return [(block + ".mlp.gate_proj.weight", 0, 1, 1), (block + ".mlp.up_proj.weight", 0, 1, 1),
                (block + ".mlp.down_proj.weight", 1, 1, 1)]

    def forward(self, p, batch, sub=None):
        tokens, targets = batch
        H, theta = self.cfg["heads"], float(self.cfg["rope-theta"])
        x = p["model.embed_tokens.weight"][tokens]
        for b in self.blocks():
            keep = _keep(sub, b)
            if keep is not None and keep.drop:
                continue
            s = 1.0 if keep is None else keep.scale
            heads = _atoms(keep, "attn")
            if _branch_present(heads):
                h = _rms_norm(x, p[b + ".input_layernorm.weight"])
                q, k, v = (_heads(F.linear(h, p[b + ".self_attn.%s_proj.weight" % n]), H) for n in "qkv")
                y = _merge(_attention(_rope(q, theta), _rope(k, theta), v, True), heads)
                x = x + s * F.linear(y, p[b + ".self_attn.o_proj.weight"])
            neurons = _atoms(keep, "mlp")
            if _branch_present(neurons):
                h = _rms_norm(x, p[b + ".post_attention_layernorm.weight"])
                gate = F.linear(h, p[b + ".mlp.gate_proj.weight"])
                a = F.silu(gate) * F.linear(h, p[b + ".mlp.up_proj.weight"])
                x = x + s * F.linear(_masked(a, neurons), p[b + ".mlp.down_proj.weight"])
        x = _rms_norm(x, p["model.norm.weight"])
        logits = x @ p["lm_head.weight"].t()
        return F.cross_entropy(logits[..., : self.vocab].reshape(-1, self.vocab), targets.reshape(-1))


# ---- ViT ---------------------------------------------------------------------------------------


class ViT(Model):
    family = "vit"

    def blocks(self):
        return ["vit.encoder.layer.%d" % i for i in range(self.cfg["layers"])]

    def stem(self):
        return ["vit.embeddings.patch_embeddings.projection.weight",
                "vit.embeddings.patch_embeddings.projection.bias", "vit.embeddings.cls_token",
                "vit.embeddings.position_embeddings"]

    def group_tensors(self, block, group):
        hs = self.cfg["width"] // self.cfg["heads"]
        if group == "attn":
            att = block + ".attention.attention."
            qkv = [(att + n + "." + t, 0, 1, hs) for n in ("query", "key", "value") for t in ("weight", "bias")]
            return qkv + [(block + ".attention.output.dense.weight", 1, 1, hs)]
        return [(block + ".intermediate.dense.weight", 0, 1, 1),
                (block + ".intermediate.dense.bias", 0, 1, 1), (block + ".output.dense.weight", 1, 1, 1)]

    def forward(self, p, batch, sub=None):
        images, labels = batch
        C, H, P = self.cfg["width"], self.cfg["heads"], self.cfg["patch"]
        # HF ViTEmbeddings: a conv of kernel = stride = patch, patches in row-major order after the
        # class token, then the learned positions.
        x = F.conv2d(images, p["vit.embeddings.patch_embeddings.projection.weight"],
                     p["vit.embeddings.patch_embeddings.projection.bias"], stride=P)
        x = x.flatten(2).transpose(1, 2)
        cls = p["vit.embeddings.cls_token"].expand(x.shape[0], 1, C)
        x = torch.cat([cls, x], dim=1) + p["vit.embeddings.position_embeddings"]
        for b in self.blocks():
            keep = _keep(sub, b)
            if keep is not None and keep.drop:
                continue
            s = 1.0 if keep is None else keep.scale
            att = b + ".attention.attention."
            heads = _atoms(keep, "attn")
            if _branch_present(heads):
                h = F.layer_norm(x, (C,), p[b + ".layernorm_before.weight"], p[b + ".layernorm_before.bias"],
                                 EPS)
                q, k, v = (_heads(F.linear(h, p[att + n + ".weight"], p[att + n + ".bias"]), H)
                           for n in ("query", "key", "value"))
                y = _merge(_attention(q, k, v, False), heads)
                out = b + ".attention.output.dense."
                x = x + s * F.linear(y, p[out + "weight"], p[out + "bias"])
            neurons = _atoms(keep, "mlp")
            if _branch_present(neurons):
                h = F.layer_norm(x, (C,), p[b + ".layernorm_after.weight"], p[b + ".layernorm_after.bias"], EPS)
                fc = F.linear(h, p[b + ".intermediate.dense.weight"], p[b + ".intermediate.dense.bias"])
                a = _masked(_gelu(fc), neurons)
                x = x + s * F.linear(a, p[b + ".output.dense.weight"], p[b + ".output.dense.bias"])
        x = F.layer_norm(x[:, 0], (C,), p["vit.layernorm.weight"], p["vit.layernorm.bias"], EPS)
        return F.cross_entropy(F.linear(x, p["classifier.weight"], p["classifier.bias"]), labels)


# ---- CIFAR ResNet ------------------------------------------------------------------------------


class ResNet(Model):
    """3x3 stem convolution (stride 1, no max-pool), batch norm and ReLU; basic blocks
    out = relu(shortcut(x) + s * bn2(conv2(relu(bn1(conv1(x)))))), where the first block of every
    stage after the first has stride 2, and a block that changes the shape has the shortcut
    bn(conv1x1(x)) (and is shared); global average pooling and a linear classifier. Convolutions
    have no bias and pad by 1 (3x3) or 0 (1x1). Batch norm uses the batch's statistics in
    training (biased variance) and updates running statistics with momentum 0.1 and the unbiased
    variance, as nn.BatchNorm2d."""

    family = "resnet"

    def _relu(self, x):
        if self.track:
            rms = float(x.detach().pow(2).mean().sqrt())
            self.margin = min(self.margin, float(x.detach().abs().min()) / rms)
        return F.relu(x)

    def _arch(self):
        depth = self.cfg["depth"]
        counts = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3]}.get(depth, [(depth - 2) // 6] * 3)
        width = self.cfg["channels"] or (64 if depth in (18, 34) else 16)
        out, cin = [], width
        for s, n in enumerate(counts):
            cout = width << s
            for i in range(n):
                stride = 2 if s > 0 and i == 0 else 1
                out.append(("layer%d.%d" % (s + 1, i), stride, stride != 1 or cin != cout))
                cin = cout
        return out

    def blocks(self):
        return [name for name, _, _ in self._arch()]

    def stem(self):
        return ["conv1.weight", "bn1.weight", "bn1.bias"]

    def group_tensors(self, block, group):
        return [(block + ".conv1.weight", 0, 1, 1), (block + ".bn1.weight", 0, 1, 1),
                (block + ".bn1.bias", 0, 1, 1), (block + ".conv2.weight", 1, 1, 1)]

    def is_buffer(self, name):
        return name.endswith(".running_mean") or name.endswith(".running_var")

    def forward(self, p, batch, sub=None, stats=None):
        """stats: None, or a dict of running statistics (float64) that this forward updates."""
        images, labels = batch

        def bn(x, name):
            rm = rv = None
            if stats is not None:
                rm, rv = stats[name + ".running_mean"], stats[name + ".running_var"]
            return F.batch_norm(x, rm, rv, p[name + ".weight"], p[name + ".bias"], True, 0.1, EPS)

        x = self._relu(bn(F.conv2d(images, p["conv1.weight"], padding=1), "bn1"))
        for b, stride, downsample in self._arch():
            keep = _keep(sub, b)
            if keep is not None and keep.drop:
                continue
            s = 1.0 if keep is None else keep.scale
            y = self._relu(bn(F.conv2d(x, p[b + ".conv1.weight"], stride=stride, padding=1), b + ".bn1"))
            ch = _atoms(keep, "ch")
            if ch is not None:
                y = y * ch.to(y.dtype)[None, :, None, None]
            y = bn(F.conv2d(y, p[b + ".conv2.weight"], padding=1), b + ".bn2")
            if downsample:
                x = bn(F.conv2d(x, p[b + ".shortcut.0.weight"], stride=stride), b + ".shortcut.1")
            x = self._relu(x + s * y)
        x = x.mean(dim=(2, 3))
        return F.cross_entropy(F.linear(x, p["fc.weight"], p["fc.bias"]), labels)


FAMILIES = {"gpt": GPT, "llama": Llama, "vit": ViT, "resnet": ResNet}
