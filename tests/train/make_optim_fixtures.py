#!/usr/bin/env python3
"""Writes tests/fixtures/optim.safetensors: PyTorch's SGD (momentum, Nesterov, weight decay),
AdamW and RMSprop (with and without momentum) run for 5 steps on fixed weights and gradients,
and torch's LR schedules, for tests/train/test_optim.c. Needs torch; CI uses the committed file."""
import json, struct, sys, os
import torch

torch.manual_seed(0)
n = 37
w0 = torch.randn(n)
grads = [torch.randn(n) for _ in range(5)]
cases = {
    "sgd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "sgd_plain": (torch.optim.SGD, dict(lr=0.05, momentum=0.0, weight_decay=0.0)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.05, momentum=0.8, weight_decay=0.001)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.05)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.01)),
    "rmsprop_momentum": (torch.optim.RMSprop, dict(lr=0.01, alpha=0.95, eps=1e-6, momentum=0.9)),
}
tensors = {"w0": w0}
for i, g in enumerate(grads):
    tensors[f"g{i}"] = g
meta = {}
for name, (cls, kw) in cases.items():
    w = torch.nn.Parameter(w0.clone())
    opt = cls([w], **kw)
    for g in grads:
        w.grad = g.clone()
        opt.step()
    tensors[f"{name}.w"] = w.detach().clone()
    meta[name] = json.dumps({k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()})

# schedules: linear warm-up (LinearLR from 1/w) then cosine to 0 over the rest, as gpipe's
total, warm, lr = 50, 10, 0.1
p = torch.nn.Parameter(torch.zeros(1))
o = torch.optim.SGD([p], lr=lr)
s = torch.optim.lr_scheduler.SequentialLR(o, [
    torch.optim.lr_scheduler.LinearLR(o, start_factor=1.0 / warm, total_iters=warm - 1),
    torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total - warm)], milestones=[warm])
lrs = []
for _ in range(total):
    lrs.append(o.param_groups[0]["lr"])
    o.step(); s.step()
tensors["lr.cosine_warmup"] = torch.tensor(lrs, dtype=torch.float32)
o = torch.optim.SGD([p], lr=lr)
s = torch.optim.lr_scheduler.StepLR(o, step_size=7, gamma=0.5)
lrs = []
for _ in range(total):
    lrs.append(o.param_groups[0]["lr"])
    o.step(); s.step()
tensors["lr.step"] = torch.tensor(lrs, dtype=torch.float32)

header, data, off = {}, b"", 0
for k, t in tensors.items():
    b = t.contiguous().numpy().astype("<f4").tobytes()
    header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    data += b
    off += len(b)
header["__metadata__"] = meta
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "optim.safetensors")
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
print("wrote", out)
