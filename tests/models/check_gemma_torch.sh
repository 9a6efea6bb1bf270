#!/bin/sh
# The float64 PyTorch reference of the Gemma family checks itself (KV cache, GQA, gradients,
# sliding window reach, rope frequencies, Gemma 3's q/k norm, documents, soft-caps, and that each
# feature it ablates moves the logits) on its four configurations.
# usage: check_gemma_torch.sh SCRIPT
set -eu
exec /usr/bin/python3 "$1" --self-check
