"""bench/kernels/torch_conv1d.py — PyTorch's conv1d on Whisper-tiny's audio stem, the peer of
bench_kernels' conv1d lines: batch 4 of 3000 frames, conv1 80 -> 384 channels (K 3, pad 1),
conv2 384 -> 384 (K 3, stride 2, pad 1), f32, forward and the input and weight gradients
(torch.nn.grad.conv1d_input / conv1d_weight, the two kernels autograd runs), each the median and
the least of RUNS after a warm-up, in ms.
usage: /usr/bin/python3 bench/kernels/torch_conv1d.py [THREADS [RUNS]]
"""
import sys
import time

import torch
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 15
torch.set_num_threads(threads)


def timed(fn):
    fn()
    t = []
    for _ in range(runs):
        a = time.perf_counter()
        fn()
        t.append(1e3 * (time.perf_counter() - a))
    t.sort()
    return t[len(t) // 2], t[0]


for C, stride in ((80, 1), (384, 2)):
    x = torch.randn(4, C, 3000)
    w = torch.randn(384, C, 3) * 0.05
    with torch.no_grad():
        y = F.conv1d(x, w, stride=stride, padding=1)
        dy = torch.randn_like(y)
        f = timed(lambda: F.conv1d(x, w, stride=stride, padding=1))
        i = timed(lambda: torch.nn.grad.conv1d_input(x.shape, w, dy, stride=stride, padding=1))
        g = timed(lambda: torch.nn.grad.conv1d_weight(x, w.shape, dy, stride=stride, padding=1))
    print(f"torch {torch.__version__} conv1d f32 4x{C}x3000 -> 384, K 3 stride {stride}, "
          f"{threads} threads: forward {f[0]:.2f} ms, input gradient {i[0]:.2f} ms, weight "
          f"gradient {g[0]:.2f} ms; least {f[1]:.2f}, {i[1]:.2f} and {g[1]:.2f}")
