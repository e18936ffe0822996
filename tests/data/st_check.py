#!/usr/bin/env python3
"""Checks that a safetensors file written by gpipe (tests/data/st_tool) reads in Python the
way the reference reader (huggingface safetensors) reads it: header length, JSON, dtypes,
offsets that start at 0 and cover the data section without gaps or overlaps, and the values.
Standard library only. Usage: st_check.py ST_TOOL
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1}
FORMATS = {"F32": "f", "F16": "e", "I32": "i", "I64": "q", "U8": "B"}
EXPECT = {
    "bytes": ("U8", [2, 2], [0, 1, 254, 255]),
    "conv.weight": ("F32", [2, 3], [0.5, -1.25, 3.0, struct.unpack("<f", struct.pack("<f", 1e-3))[0], -0.0, 65504.0]),
    "conv.bias": ("F32", [2], [1.5, -2.5]),
    "half": ("F16", [2], [1.0, -2.0]),
    "step": ("I64", [], [1234567890123]),
    "ids": ("I32", [3], [-7, 0, 2147483647]),
    "empty": ("F32", [0, 4], []),
    "name \"with\" \\ escapes \u00e9": ("U8", [], [0]),
}
ORDER = list(EXPECT)
METADATA = {"format": "pt", "note": "quote \" and \u00e9\n"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.safetensors")
        subprocess.run([tool, path], check=True)
        raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    if n % 8:
        fail("header length %d is not a multiple of 8" % n)
    text = raw[8:8 + n].decode("utf-8")
    if not text.rstrip(" ").endswith("}") or len(text) - len(text.rstrip(" ")) > 7:
        fail("header is not JSON followed by at most 7 spaces of padding")
    header = json.loads(text)
    data = raw[8 + n:]
    if header.pop("__metadata__", None) != METADATA:
        fail("metadata differs")
    names = list(header)
    if names != ORDER:
        fail("order %s, expected %s" % (names, ORDER))
    pos = 0
    for name in names:
        entry = header[name]
        if sorted(entry) != ["data_offsets", "dtype", "shape"]:
            fail("%s: keys %s" % (name, sorted(entry)))
        dtype, shape, values = EXPECT[name]
        if entry["dtype"] != dtype or entry["shape"] != shape:
            fail("%s: %s %s" % (name, entry["dtype"], entry["shape"]))
        b, e = entry["data_offsets"]
        numel = 1
        for s in shape:
            numel *= s
        if b != pos or e - b != numel * SIZES[dtype]:
            fail("%s: offsets [%d, %d], expected to start at %d" % (name, b, e, pos))
        got = list(struct.unpack("<%d%s" % (numel, FORMATS[dtype]), data[b:e]))
        if got != values:
            fail("%s: values %s, expected %s" % (name, got, values))
        pos = e
    if pos != len(data):
        fail("data section is %d bytes, tensors cover %d" % (len(data), pos))
    print("st_check: ok")


if __name__ == "__main__":
    main()
