"""Independent safetensors reader/writer and FP4 decoder in plain Python (stdlib only), used by
the CLI tests to check fp4lab's files from outside: layouts, dtypes and the nibble order."""
import json
import math
import random
import struct
import sys

FORMATS = {"F32": ("f", 4), "I64": ("q", 8), "U8": ("B", 1)}


def bf16_bytes(values):
    out = bytearray()
    for v in values:
        out += struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:4]
    return bytes(out)


def write(path, tensors):
    """tensors: name -> (dtype, shape, raw bytes)"""
    header, data = {"__metadata__": {"format": "pt"}}, bytearray()
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], blob[base + b : base + e])
    return meta, out


def floats(raw):
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e2m1(code):
    v = E2M1[code & 7]
    return -v if code & 8 else v


def e4m3(code):
    e, m = (code >> 3) & 15, code & 7
    if e == 15 and m == 7:
        return math.nan
    v = math.ldexp(m, -9) if e == 0 else math.ldexp(1 + m / 8, e - 7)
    return -v if code & 0x80 else v


def decode(codes, scales, cols, fmt, global_scale):
    """Decode packed codes (low nibble = even element) with per-row block scales."""
    block = 32 if fmt == "mxfp4" else 16
    out = []
    for i in range(len(codes) * 2):
        byte = codes[i // 2]
        code = byte & 15 if i % 2 == 0 else byte >> 4
        row, col = divmod(i, cols)
        s = scales[row * (cols // block) + col // block]
        if fmt == "mxfp4":
            scale = math.nan if s == 255 else math.ldexp(1.0, s - 127)
        else:
            scale = struct.unpack("<f", struct.pack("<f", e4m3(s) * global_scale))[0]
        out.append(struct.unpack("<f", struct.pack("<f", e2m1(code) * scale))[0])
    return out


def make_input(path, seed):
    rng = random.Random(seed)
    w = [rng.gauss(0, 1) for _ in range(64 * 128)]
    w[5] = 40.0  # an outlier
    tensors = {
        "model.w": ("F32", [64, 128], struct.pack("<%df" % len(w), *w)),
        "model.b": ("BF16", [3, 32], bf16_bytes([rng.gauss(0, 0.1) for _ in range(96)])),
        "model.odd": ("F32", [5, 10], struct.pack("<50f", *[1.0] * 50)),
        "model.ids": ("I64", [4], struct.pack("<4q", 1, 2, 3, 4)),
        "model.scalar": ("F32", [], struct.pack("<f", 2.5)),
    }
    write(path, tensors)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make_input(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit("unknown command " + cmd)
