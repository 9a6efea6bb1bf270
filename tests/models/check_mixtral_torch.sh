#!/bin/sh
# The float64 PyTorch reference of Mixtral checks itself (KV cache, the sparse block against a
# dense one, gradients of the loss with load balancing against central differences, the
# load-balancing loss on hand-made routers, each case's routing, the window's reach, documents)
# on its three configurations.
# usage: check_mixtral_torch.sh SCRIPT
set -eu
exec /usr/bin/python3 "$1" --self-check
