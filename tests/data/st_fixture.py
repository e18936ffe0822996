#!/usr/bin/env python3
"""Writes tests/data/fixtures/ref.safetensors with only the standard library, laid out the
way the reference writer (huggingface safetensors) lays files out: __metadata__ first,
tensors ordered by dtype alignment (largest first) then name, header padded with spaces to
a multiple of 8 (checked: byte-identical to safetensors 0.8.0 save_file with the same
tensors). test_safetensors reads it and checks every value listed here.

Usage: python3 st_fixture.py OUT.safetensors
"""
import json
import struct
import sys

# name -> (dtype, shape, struct format char, values)
TENSORS = {
    "conv.weight": ("F32", [2, 3], "f", [0.5, -1.25, 3.0, 1e-3, -0.0, 65504.0]),
    "conv.bias": ("F32", [2], "f", [1.5, -2.5]),
    "step": ("I64", [], "q", [1234567890123]),
    "ids": ("I32", [3], "i", [-7, 0, 2147483647]),
    "half": ("F16", [2], "e", [1.0, -2.0]),
    "bytes": ("U8", [2, 2], "B", [0, 1, 254, 255]),
    "empty": ("F32", [0, 4], "f", []),
}
SIZES = {"F32": 4, "I64": 8, "I32": 4, "F16": 2, "BF16": 2, "U8": 1}
METADATA = {"format": "pt", "note": "quote \" and \u00e9"}


def main():
    order = sorted(TENSORS, key=lambda n: (-SIZES[TENSORS[n][0]], n))
    header = {"__metadata__": METADATA}
    data = b""
    for name in order:
        dtype, shape, fmt, values = TENSORS[name]
        raw = struct.pack("<%d%s" % (len(values), fmt), *values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    with open(sys.argv[1], "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


if __name__ == "__main__":
    main()
