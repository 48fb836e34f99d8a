"""PyTorch as the outside oracle for sdp runs (tests/test_torch_oracle.sh drives it).

usage: oracle.py CHECK...   where CHECK is RUN_DIR[,init=DIR][,plan=FILE][,control]

For each check it replays the run in RUN_DIR in float64 PyTorch (models.py, sdp_reference.py),
from the initial weights in DIR/model.safetensors (init=DIR; by default RUN_DIR itself, which is
right for a run whose learning rate is 0), on the batches the run's workers drew (batches.py),
under the ownership of the run's plan.json (or of FILE), and compares with what sdp wrote:

- the loss and the gradient norm of every step (metrics.jsonl, which needs --log-every 1);
- every tensor of model.safetensors: the trainable ones, and the batch-norm running statistics of
  a one-worker run;
- every tensor of optim.safetensors (SGD's momentum buffer, AdamW's two moments). After one SGD
  step with momentum the buffer is the synced, clipped gradient itself (torch.optim.SGD's
  convention, which sdp follows), so a run with --lr 0 compares sdp's gradients directly.

It prints one line per check, "ok: ..." or "FAIL: ..." (with the worst tensors below a failure),
and exits 1 when any check failed. A check marked `control` must FAIL to pass: it is a negative
control, e.g. a plan that is not the run's.

Tolerances. sdp computes in float32 (eps = 2^-23 ~ 1.2e-7); the reference computes in float64,
whose own error is negligible here. The models are tiny (widths <= 128, <= 4 blocks, batches of
4 x 32 tokens or 2-4 images per worker), so every compared quantity comes out of a chain of
10-30 kernels whose sums run over tens to a few thousand float32 terms. Each quantity's tolerance
is a fixed part from that error analysis plus CONDITIONING = 10 times the error of the same
replay run by PyTorch in float32 (from the same float32 initial weights), so that a quantity that
float32 itself cannot resolve well (a sum that cancels) is allowed what float32 needs:

- LOSS_RTOL = 2e-6 on each step's loss: a mean of log-softmax terms whose inputs carry about
  sqrt(n) * eps of relative error per product of length n <= 128 (1.4e-6 at worst), shrunk by
  the averaging of independent rounding errors over the B*T terms of the mean.
- NORM_RTOL = 1e-5 on each step's gradient norm, GRAD_RTOL = 1e-4 on each gradient-like tensor
  (SGD's momentum buffer, AdamW's moments, the running statistics), as ||sdp - ref|| / ||ref||:
  the backward adds its own sums over B*T = 128 contributions per weight to the forward's error,
  and gradients cancel (a LayerNorm bias gradient is a sum of terms of both signs), which
  multiplies the relative error by up to 10-100. Below that, a floor of eps times the norm of the
  whole state of the same key (all momentum buffers, say) covers tensors whose exact gradient is
  zero (an attention key bias: softmax ignores a constant shift of its scores), where any float32
  result is pure rounding.
- PARAM_RTOL = 1e-3 on the weights, as ||sdp - ref|| / ||ref - w0||, relative to the update the
  run made (the weights agree far better than that: the update is a small part of them), plus
  2^-24 ||ref|| for storing the result in float32 and eps times the whole model's update as the
  floor above. Over S steps the update's error is the gradients' (GRAD_RTOL) carried through the
  training dynamics, and AdamW's first step divides each gradient element by its own size, which
  turns the rounding of a near-zero element into an error of up to lr in its update.

ReLU (the ResNet) makes the gradient a discontinuous function of the weights: a pre-activation
that float32 rounding moves across 0 changes the gradient by a finite amount that no tolerance
bounds. The float64 replay therefore tracks every ReLU input's distance from 0 relative to its
tensor's RMS, and a failing check whose smallest distance is below KINK_MARGIN = 1e-6 (about 10
eps, the size of float32's perturbation of a pre-activation after a few steps) says so: such a
failure may be no bug, and the run needs another batch size, step count or seed (the data and the
initial weights are deterministic, so a configuration that is well posed stays so). The test's
ResNet runs use batches of 2 per worker, which keeps every ReLU input at least 3e-6 RMS from 0.
"""
import json
import math
import os
import sys

import torch

import batches
import models
import safetensors_reader
from sdp_reference import Plan, Replay

LOSS_RTOL = 2e-6
NORM_RTOL = 1e-5
GRAD_RTOL = 1e-4
PARAM_RTOL = 1e-3
CONDITIONING = 10.0
KINK_MARGIN = 1e-6
STORAGE = 2.0 ** -24  # relative rounding of a float32 stored value
EPS = 2.0 ** -23  # float32 machine epsilon

IMAGE_DIR = "/usr/share/datasets/fashion-mnist"
MODEL_OPTIONS = ("model", "layers", "heads", "width", "d-ff", "seq-len", "vocab", "rope-theta", "depth",
                 "channels", "patch", "data", "dataset", "seed")


def load_json(path):
    with open(path) as f:
        return json.load(f)


def load_metrics(path):
    rows = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if "loss" in row:
                rows.append(row)
    return rows


def data_for(cfg, world):
    if cfg["model"] in ("gpt", "llama"):
        return batches.TextBatches(cfg["data"], cfg["val-frac"], cfg["batch"], cfg["seq-len"], world,
                                   cfg["seed"])
    if cfg["dataset"] not in ("fashion-mnist", "mnist") or cfg["crop-pad"] != 0 or cfg["flip"]:
        raise ValueError("the reference reads IDX images without augmentation: use --crop-pad 0, no --flip")
    return batches.ImageBatches(cfg["data"] or IMAGE_DIR, cfg["batch"], world, cfg["seed"])


class Check:
    def __init__(self, spec):
        parts = spec.split(",")
        self.run, self.init, self.plan, self.control = parts[0], parts[0], None, False
        for p in parts[1:]:
            if p.startswith("init="):
                self.init = p[5:]
            elif p.startswith("plan="):
                self.plan = p[5:]
            elif p == "control":
                self.control = True
            else:
                raise ValueError("unknown check option '%s'" % p)
        self.failures = []
        self.worst = {}
        self.margin = math.inf

    def note(self, kind, name, err, tol, err32):
        """Records one compared quantity: sdp's error err against the float64 reference, its fixed
        tolerance tol, and the error err32 of PyTorch's own float32 replay."""
        tol = tol + CONDITIONING * err32
        ratio = err / tol if tol > 0 else (0.0 if err == 0 else math.inf)
        if os.environ.get("ORACLE_DEBUG"):
            print("    %-9s %-60s err %.3g tol %.3g f32 %.3g ratio %.3g"
                  % (kind, name, err, tol, err32, ratio))
        if ratio > 1.0:
            self.failures.append((ratio, kind, name))
        if ratio >= self.worst.get(kind, (-1.0, ""))[0]:
            self.worst[kind] = (ratio, name)

    def label(self, cfg, plan):
        mode = "ddp" if plan.mask == "none" else "%s/%s k=%d" % (plan.mask, plan.unit, plan.raw["owners"])
        return "%s N=%d %s, %s, %d step%s" % (cfg["model"], plan.world, mode, cfg["optimizer"], cfg["steps"],
                                              "s" if cfg["steps"] > 1 else "")

    def run_check(self):
        cfg = load_json(os.path.join(self.run, "config.json"))
        plan = Plan(load_json(self.plan or os.path.join(self.run, "plan.json")))
        init_cfg = load_json(os.path.join(self.init, "config.json"))
        for k in MODEL_OPTIONS:
            if init_cfg[k] != cfg[k]:
                raise ValueError("init run %s differs in --%s" % (self.init, k))
        if cfg["log-every"] != 1 or cfg["stop-after"] or cfg["resume"]:
            raise ValueError("the run must log every step (--log-every 1) and run in one go")
        if cfg.get("dropout", 0) != 0:
            raise ValueError("the reference has no dropout: replay runs with --dropout 0")
        w0, meta = safetensors_reader.read(os.path.join(self.init, "model.safetensors"))
        model_out, _ = safetensors_reader.read(os.path.join(self.run, "model.safetensors"))
        optim_out, _ = safetensors_reader.read(os.path.join(self.run, "optim.safetensors"))
        metrics = load_metrics(os.path.join(self.run, "metrics.jsonl"))
        shapes = {n: w.shape for n, w in w0.items()}
        model = models.FAMILIES[cfg["model"]](cfg, shapes, int(meta["sdp.vocab"]))
        data = data_for(cfg, plan.world)
        ref = Replay(model, cfg, plan, w0, data, torch.float64)
        model.track = model.family == "resnet"  # ReLU margins, in the float64 replay only
        f32 = Replay(model, cfg, plan, w0, data, torch.float32)
        if len(metrics) != cfg["steps"]:
            raise ValueError("metrics.jsonl has %d training rows for %d steps" % (len(metrics), cfg["steps"]))
        for s in range(cfg["steps"]):
            loss, norm = ref.train_step()
            model.track = False
            loss32, norm32 = f32.train_step()
            model.track = model.family == "resnet"
            self.note("loss", "step %d" % (s + 1), abs(metrics[s]["loss"] - loss),
                      LOSS_RTOL * abs(loss), abs(loss32 - loss))
            self.note("grad norm", "step %d" % (s + 1), abs(metrics[s]["grad_norm"] - norm),
                      NORM_RTOL * norm, abs(norm32 - norm))
        compared = 0
        f64 = lambda a: torch.as_tensor(a, dtype=torch.float64)
        size = lambda t: float(torch.linalg.vector_norm(t))
        dist = lambda a, b: size(f64(a) - f64(b))
        # Weights: relative to the update, plus float32 storage, plus a floor of eps times the
        # whole model's update (for a tensor whose update is zero in exact arithmetic, such as an
        # attention key bias: softmax ignores a constant shift, so its gradient vanishes).
        weights = {n: ref.params[n].detach() for n in ref.trainable}
        updates = {n: weights[n] - f64(w0[n]) for n in ref.trainable}
        whole = math.sqrt(sum(size(u) ** 2 for u in updates.values()))
        for n, w in weights.items():
            tol = PARAM_RTOL * size(updates[n]) + STORAGE * size(w) + EPS * whole
            self.note("weights", n, dist(model_out[n], w), tol, dist(f32.params[n].detach(), w))
            compared += 1
        if plan.world == 1:
            for n, s in ref.stats.items():
                self.note("bn stats", n, dist(model_out[n], s), GRAD_RTOL * size(s), dist(f32.stats[n], s))
                compared += 1
        # Gradient-like state, per state key: relative to the tensor, with a floor of eps times the
        # norm of the whole state of that key (see the weights).
        state, state32 = ref.optimizer_state(), f32.optimizer_state()
        buffers = {n for n in optim_out if model.is_buffer(n.rsplit(".", 1)[0])}
        if set(state) != set(optim_out) - buffers:
            differ = sorted(set(state) ^ (set(optim_out) - buffers))
            raise ValueError("optimizer state names differ: %s" % differ[:4])
        for n in buffers:  # batch-norm statistics get no gradient: their state stays zero
            self.note("optimizer", n, size(f64(optim_out[n])), 0.0, 0.0)
        wholes = {}
        for n, s in state.items():
            key = n.rsplit(".", 1)[1]
            wholes[key] = wholes.get(key, 0.0) + size(s) ** 2
        for n, s in state.items():
            self.note("optimizer", n, dist(optim_out[n], s),
                      GRAD_RTOL * size(s) + EPS * math.sqrt(wholes[n.rsplit(".", 1)[1]]), dist(state32[n], s))
            compared += 1
        self.margin = model.margin
        return self.label(cfg, plan), compared

    def report(self):
        try:
            what, compared = self.run_check()
        except Exception as e:  # a check that cannot run fails, with the reason
            print("FAIL: %s: %s: %s" % (self.run, type(e).__name__, e))
            return False
        worst = ", ".join("%s %.2g (%s)" % (k, r, n) for k, (r, n) in self.worst.items())
        if self.margin < math.inf:
            worst += "; smallest ReLU input %.2g RMS from 0" % self.margin
        ok = not self.failures
        if self.control:
            plan = self.plan or "the run's own plan"
            if ok:
                print("FAIL: control: the oracle accepts %s with %s, which it must reject" % (what, plan))
            else:
                print("ok: control: the oracle rejects %s with %s (%d quantities out of tolerance)"
                      % (what, plan, len(self.failures)))
            return not ok
        if ok:
            print("ok: torch oracle: %s: %d tensors, losses and norms match (worst error/tolerance: %s)"
                  % (what, compared, worst))
        else:
            print("FAIL: torch oracle: %s: %d quantities out of tolerance (error/tolerance):"
                  % (what, len(self.failures)))
            for ratio, kind, name in sorted(self.failures, reverse=True)[:8]:
                print("    %s %s: %.3g" % (kind, name, ratio))
            if self.margin < KINK_MARGIN:
                print("    note: a ReLU input lies %.2g RMS from 0 in the float64 replay, closer than float32 "
                      "resolves (%g): float32 may have put it on the other side, which no tolerance covers; "
                      "if so, change the run's batch, steps or seed" % (self.margin, KINK_MARGIN))
        return ok


def main(argv):
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    results = [Check(spec).report() for spec in argv[1:]]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
