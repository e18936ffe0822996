#!/usr/bin/env python3
"""Largest absolute difference between the tensors of two safetensors weights, each a single
file or a Hugging Face index (X.safetensors.index.json) with its shards. Exit 0 when every
tensor of A is in B with the same shape and the difference is within TOL, else 1 (printed).
Usage: st_diff.py A B TOL"""
import array, json, os, struct, sys


def read_one(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        if e["dtype"] != "F32":
            continue
        v = array.array("f")
        v.frombytes(data[a:b])
        out[name] = (tuple(e["shape"]), v)
    return out


def read(path):
    if os.path.exists(path) and not path.endswith(".json"):
        return read_one(path)
    idx = path if path.endswith(".json") else path + ".index.json"
    wm = json.load(open(idx))["weight_map"]
    out = {}
    for shard in sorted(set(wm.values())):
        t = read_one(os.path.join(os.path.dirname(idx), shard))
        for name in t:
            assert wm.get(name) == shard, (name, shard)
        out.update(t)
    assert set(out) == set(wm), sorted(set(wm) ^ set(out))
    return out


a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
worst, where = 0.0, None
for name, (shape, v) in a.items():
    if name not in b or b[name][0] != shape:
        print(f"{name}: missing or of another shape in {sys.argv[2]}")
        sys.exit(1)
    w = b[name][1]
    for x, y in zip(v, w):
        d = abs(x - y)
        if d > worst or d != d:
            worst, where = d, name
if set(b) - set(a):
    print(f"{sys.argv[2]} has tensors {sorted(set(b) - set(a))[:3]} that {sys.argv[1]} has not")
    sys.exit(1)
print(f"{len(a)} tensors, largest difference {worst:.3g}" + (f" ({where})" if where else ""))
sys.exit(0 if worst <= tol else 1)
