"""A safetensors reader for the PyTorch oracle (there is no safetensors package on the machine).

The format (docs/checkpoints.md): an 8-byte little-endian header length n, n bytes of JSON that
name each tensor's dtype, shape and [begin, end) byte range in the data section, then the data
section. sdp writes every tensor as F32, little-endian, row-major.
"""
import json
import struct

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read(path):
    """Returns ({name: float array}, metadata dict) for the file at path."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    n = struct.unpack("<Q", raw[:8])[0]
    if 8 + n > len(raw):
        raise ValueError("%s: header length %d runs past the end of the file" % (path, n))
    header = json.loads(raw[8 : 8 + n])
    data = memoryview(raw)[8 + n :]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        dtype = np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * dtype.itemsize or end > len(data):
            raise ValueError("%s: tensor %s has a byte range that does not fit its shape" % (path, name))
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).copy()
    return tensors, meta
