#!/bin/sh
# The float64 PyTorch reference of the Llama family checks itself (KV cache, GQA, gradients,
# sliding window, rope frequencies, Qwen3's q/k norm, documents) on six tiny configurations.
# usage: check_llama_torch.sh SCRIPT
set -eu
exec /usr/bin/python3 "$1" --self-check
