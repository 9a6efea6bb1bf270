"""bench/data/np_loader.py — the peer for loader throughput: the memory-mapped token file and
random windows of nanoGPT's get_batch (numpy memmap, torch int64 inputs and targets), the way
PyTorch training scripts commonly read a tokenized corpus.
usage: /usr/bin/python3 np_loader.py TOKENS_U16 SEQ_LEN BATCH N"""
import sys
import time

import numpy as np
import torch

path, L, B, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
data = np.memmap(path, dtype=np.uint16, mode="r")
rng = np.random.default_rng(1)
check = 0
t0 = time.perf_counter()
for k in range(N):
    ix = rng.integers(0, len(data) - L - 1, size=B)
    x = torch.stack([torch.from_numpy(data[i:i + L].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + L].astype(np.int64)) for i in ix])
    check += int(x[0, 0]) + int(y[0, 0])
s = time.perf_counter() - t0
print("seq_len=%d batch=%d batches=%d tokens=%d seconds=%.3f tokens_per_s=%.0f check=%d"
      % (L, B, N, N * B * L, s, N * B * L / s, check))
