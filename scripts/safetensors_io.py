"""Minimal safetensors reader / writer (numpy only), shared by the two independent reference
implementations, scripts/reference_model.py and scripts/reference_optim.py.

Format: an 8-byte little-endian unsigned header length n, then n bytes of JSON header
({"__metadata__": {str: str}, "<name>": {"dtype", "shape", "data_offsets": [begin, end]}, ...};
the writer pads it with spaces to a multiple of 8 bytes), then the raw little-endian tensor data,
offsets relative to the end of the header. Only F32 and F64 tensors are handled.
"""

import json
import os
import struct

import numpy as np

_DTYPES = {"F32": ("<f4", 4), "F64": ("<f8", 8)}


def read_safetensors(path, dtypes=("F32", "F64"), error=ValueError):
    """Returns ({name: float64 array}, metadata dict). A tensor whose dtype is not in `dtypes`, or
    a malformed file, raises `error` (an exception class taking one message)."""
    with open(path, "rb") as fh:
        buf = fh.read()
    if len(buf) < 8:
        raise error("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise error("%s: header length %d exceeds the file size" % (path, n))
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, info in header.items():
        dtype = info.get("dtype")
        if dtype not in dtypes or dtype not in _DTYPES:
            raise error("tensor %s has dtype %s, the contract says %s" % (name, dtype, " or ".join(dtypes)))
        np_dtype, size = _DTYPES[dtype]
        shape = [int(s) for s in info.get("shape", [])]
        begin, end = [int(v) for v in info["data_offsets"]]
        count = int(np.prod(shape)) if shape else 1
        if end - begin != size * count:
            raise error("tensor %s: data_offsets span %d bytes, shape %s needs %d"
                        % (name, end - begin, shape, size * count))
        if base + end > len(buf):
            raise error("tensor %s: data runs past the end of the file" % name)
        arr = np.frombuffer(buf, dtype=np_dtype, count=count, offset=base + begin)
        tensors[name] = arr.astype(np.float64).reshape(shape)
    return tensors, meta


def write_safetensors(path, tensors, metadata, dtype="F32"):
    """Writes every tensor as `dtype` (F32 or F64), in sorted name order, metadata values as strings;
    atomically (a temporary file in the same folder, then os.replace)."""
    if dtype not in _DTYPES:
        raise ValueError("write_safetensors: dtype %s (F32 or F64 expected)" % dtype)
    np_dtype, _ = _DTYPES[dtype]
    header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    chunks = []
    off = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(np.asarray(tensors[name]).astype(np_dtype))
        b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    tmp = "%s.tmp%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as fh:
            fh.write(struct.pack("<Q", len(hb)))
            fh.write(hb)
            for b in chunks:
                fh.write(b)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
