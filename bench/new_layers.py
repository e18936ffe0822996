#!/usr/bin/env python3
"""Every layer issue 51 added, on the CPU against PyTorch's, in one run and one table:
bench/llama_layers.py's cases (rmsnorm, silu, mul, attention with rope and kv_heads at
models/llama.yaml's shapes), bench/unet_layers.py's (conv_transpose2d, upsample nearest and
bilinear, conv1d) and bench/shape_layers.py's (reshape, permute, groupnorm, mse, l1,
bce_with_logits, softmax_cross_entropy over axis 0), U-Net cases at batch 64 on 28x28
Fashion-MNIST. Forward + backward, torch.set_num_threads(2) against gpipe's CPU backend on 2
threads; in each round the three programs and their PyTorch cases alternate (--rounds
rounds), so a load that comes and goes hits both sides. Prints each side's median and best
and PyTorch's time over ours (above 1: ours is faster). Needs `ninja -C build`.

    /work/torchenv/bin/python bench/new_layers.py [--build build] [--rounds 5] [--reps 30]
        [--threads 2] [--cases NAME,NAME]

--cases repeats a few (the lowest ratios of a run, say): each case, then PyTorch's, in turn.
"""
import llama_layers
import shape_layers
import unet_layers
from torch_vs_gpipe import compare_all

if __name__ == "__main__":
    compare_all([("bench-llama-layers", llama_layers.torch_cases),
                 ("bench-unet-layers", unet_layers.torch_cases),
                 ("bench-shape-layers", shape_layers.torch_cases)],
                "llama.yaml's shapes (32 x 64 tokens); U-Net batch 64 at 28x28")
