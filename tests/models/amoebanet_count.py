#!/usr/bin/env python3
"""Parameter count of AmoebaNet-D(L, D) straight from the specification
(/work/shared/reference/amoebanet-d.md, summarized in docs/amoebanet-d.md), independent of
models/amoebanet-d.yaml: the numbers test_amoebanet_counts.c expects exactly.

    python3 tests/models/amoebanet_count.py            # the table of the tests
    python3 tests/models/amoebanet_count.py 72 512 1000

Trainable parameters only: convolutions have no bias, batch norm has a weight and a bias per
channel (running statistics are buffers), the classifier is a linear layer with a bias.
"""
import sys

NORMAL = [(1, "conv_1x1"), (1, "max_pool_3x3"), (1, "none"), (0, "conv_1x7_7x1"),
          (0, "conv_1x1"), (0, "conv_1x7_7x1"), (2, "max_pool_3x3"), (2, "none"),
          (1, "avg_pool_3x3"), (5, "conv_1x1")]
NORMAL_CONCAT = [0, 3, 4, 6]
REDUCTION = [(0, "max_pool_2x2"), (0, "max_pool_3x3"), (2, "none"), (1, "conv_3x3"),
             (2, "conv_1x7_7x1"), (2, "max_pool_3x3"), (3, "none"), (1, "max_pool_2x2"),
             (2, "avg_pool_3x3"), (3, "conv_1x1")]
REDUCTION_CONCAT = [4, 5, 6]


def bn(c):
    return 2 * c


def relu_conv_bn(cin, cout, k=1):
    return cin * cout * k + bn(cout)


def factorized_reduce(cin, cout):
    return 2 * cin * (cout // 2) + bn(cout)


def op(name, c, stride):
    q = c // 4
    if name == "none":
        return factorized_reduce(c, c) if stride == 2 else 0
    if name.startswith(("max_pool", "avg_pool")):
        return 0
    if name == "conv_1x1":
        return relu_conv_bn(c, c)
    if name == "conv_3x3":
        return relu_conv_bn(c, q) + relu_conv_bn(q, q, 9) + relu_conv_bn(q, c)
    if name == "conv_1x7_7x1":
        return relu_conv_bn(c, q) + 2 * relu_conv_bn(q, q, 7) + relu_conv_bn(q, c)
    raise ValueError(name)


def count(L, D, classes):
    n = L // 3
    c = D // 4
    total = relu_conv_bn(3, c, 9)  # stem
    c_prev_prev = c_prev = c
    reduction_prev = False
    for reduction in [True, True] + [False] * n + [True] + [False] * n + [True] + [False] * n:
        if reduction:
            c *= 2
        total += relu_conv_bn(c_prev, c)  # s1'
        if reduction_prev:
            total += factorized_reduce(c_prev_prev, c)  # s0', from twice the resolution
        elif c_prev_prev != c:
            total += relu_conv_bn(c_prev_prev, c)
        ops, concat = (REDUCTION, REDUCTION_CONCAT) if reduction else (NORMAL, NORMAL_CONCAT)
        for index, name in ops:
            total += op(name, c, 2 if reduction and index < 2 else 1)
        c_prev_prev, c_prev = c_prev, c * len(concat)
        reduction_prev = reduction
    return total + c_prev * classes + classes  # classifier


if __name__ == "__main__":
    if len(sys.argv) == 4:
        print(count(*map(int, sys.argv[1:])))
    else:
        for L, D, k in [(18, 208, 1000), (18, 416, 1000), (18, 544, 1000), (36, 544, 1000),
                        (72, 512, 1000), (6, 16, 10), (6, 8, 5)]:
            print(f"({L}, {D}) {k} classes: {count(L, D, k)}")
