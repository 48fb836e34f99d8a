"""The batches an sdp run trains on, rebuilt from the data order that docs/design.md ("Data
order") documents, so that the reference sees exactly the examples each worker saw.

- Random numbers: splitmix64. A stream (seed, s) starts from state seed ^ (s * 0xd1b54a32d192ed03)
  advanced once; below(n) rejects draws >= 2^64 - 1 - (2^64 - 1) % n and returns x % n.
- Epoch order: Fisher-Yates over the identity, i from n-1 down to 1 swapping i with below(i+1),
  drawn from stream (seed, epoch).
- Draw p of the loader (micro-batch a of optimizer step s is draw s*A + a) is step p mod E of
  epoch p div E, where E = n div (world * B); rank r takes the B examples at positions
  ((p mod E) * world + r) * B onwards of that epoch's order.
- Text: sequence j is tokens [j*T, j*T + T] of the training split (the first n - floor(f*n)
  bytes for --val-frac f); its first T tokens are the inputs, its last T the targets.
- Images: pixel p of channel c becomes p * a + b in float32, where a = fl(1/(255*std)) and
  b = fl(-mean/std), with mean and std (population) of the channel over the training split,
  each rounded to float32.
"""
import gzip
import os

import numpy as np

MASK = (1 << 64) - 1


def _splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def rng_stream(seed, stream):
    """A generator of the 64-bit draws of stream (seed, stream)."""
    _, state = _splitmix64((seed ^ (stream * 0xD1B54A32D192ED03)) & MASK)
    while True:
        state, x = _splitmix64(state)
        yield x


def _below(draws, n):
    limit = MASK - MASK % n
    while True:
        x = next(draws)
        if x < limit:
            return x % n


_ORDERS = {}


def epoch_order(n, seed, epoch, shuffle=True):
    key = (n, seed, epoch, shuffle)
    if key not in _ORDERS:
        perm = list(range(n))
        if shuffle:
            draws = rng_stream(seed, epoch)
            for i in range(n - 1, 0, -1):
                j = _below(draws, i + 1)
                perm[i], perm[j] = perm[j], perm[i]
        _ORDERS[key] = np.array(perm, dtype=np.int64)
    return _ORDERS[key]


class _Loader:
    """Hands rank `rank` of `world` its indices for draw p, over n examples."""

    def __init__(self, n, B, world, seed):
        self.n, self.B, self.world, self.seed = n, B, world, seed
        self.per_epoch = n // (world * B)
        if self.per_epoch < 1:
            raise ValueError("%d examples are fewer than world*B = %d" % (n, world * B))

    def indices(self, draw, rank):
        epoch, step = divmod(draw, self.per_epoch)
        order = epoch_order(self.n, self.seed, epoch)
        first = (step * self.world + rank) * self.B
        return order[first : first + self.B]


class TextBatches:
    def __init__(self, path, val_frac, B, T, world, seed):
        raw = np.fromfile(path, dtype=np.uint8)
        n = len(raw)
        ntrain = n - int(val_frac * float(n))
        self.tokens = raw[:ntrain].astype(np.int64)
        self.T = T
        nseq = (ntrain - 1) // T if ntrain > T else 0
        self.loader = _Loader(nseq, B, world, seed)

    def batch(self, draw, rank):
        """(inputs [B, T], targets [B, T]) as int64 arrays."""
        T = self.T
        seqs = [self.tokens[j * T : j * T + T + 1] for j in self.loader.indices(draw, rank)]
        seqs = np.stack(seqs)
        return seqs[:, :T], seqs[:, 1:]


def _read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _idx_path(directory, name):
    gz = os.path.join(directory, name + ".gz")
    return gz if os.path.exists(gz) else os.path.join(directory, name)


class ImageBatches:
    """Fashion-MNIST (or MNIST) in IDX format, without augmentation (--crop-pad 0, no --flip)."""

    def __init__(self, directory, B, world, seed):
        images = _read_idx(_idx_path(directory, "train-images-idx3-ubyte"))
        self.labels = _read_idx(_idx_path(directory, "train-labels-idx1-ubyte")).astype(np.int64)
        self.images = images.reshape(images.shape[0], 1, images.shape[1], images.shape[2])
        # Per-channel statistics over the training split, in double, then rounded to float32.
        counts = np.bincount(self.images.reshape(-1), minlength=256).astype(np.float64)
        values = np.arange(256) / 255.0
        total = counts.sum()
        mean = (counts * values).sum() / total
        var = (counts * (values - mean) ** 2).sum() / total
        mean32, std32 = np.float32(mean), np.float32(np.sqrt(var))
        self.scale = np.float32(1.0 / (255.0 * float(std32)))
        self.shift = np.float32(-float(mean32) / float(std32))
        self.loader = _Loader(self.images.shape[0], B, world, seed)

    def batch(self, draw, rank):
        """(images [B, 1, H, W] float32, labels [B] int64)."""
        idx = self.loader.indices(draw, rank)
        x = self.images[idx].astype(np.float32) * self.scale + self.shift
        return x.astype(np.float32), self.labels[idx]
