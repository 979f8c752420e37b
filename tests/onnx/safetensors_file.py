"""The safetensors files the ONNX tests' Python side reads and writes, with
numpy only (check_export.py runs without torch): F32 and I32 tensors, as
`pipedream` writes them, and I64 (a PyTorch state_dict's BatchNorm counters)."""
import json
import struct

import numpy as np

DTYPES = {"F32": "<f4", "I32": "<i4", "I64": "<i8"}


def read_safetensors(path):
    """name -> numpy array (read-only view of the file's bytes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def write_safetensors(path, arrays):
    """Writes name -> numpy array (float32, int32 or int64), in the order given."""
    header, blobs, offset = {}, [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        dtype = {np.dtype("float32"): "F32", np.dtype("int32"): "I32", np.dtype("int64"): "I64"}[a.dtype]
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a)
        offset += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
