#!/bin/sh
# The mixtral plugin against the independent PyTorch reference (tests/models/mixtral_torch.py,
# float64), on its three cases of 16 positions: 4 experts, top 2, every expert routed rows, a
# window of 5, two documents per row, no load-balancing loss; 5 experts, top 2, expert 4 routed
# no row in any layer (an empty group), the load-balancing loss, bora's recomputation
# (gradient_checkpointing); 3 experts, top 1, the load-balancing loss; 4 experts, top 2, the
# router z-loss (router_z_loss_coef) alone. bora's logits, summed loss (load balancing and z-loss
# included) and every gradient (routers and experts) must match within the reference's
# tolerances. On each case bora's KV cache (prefill + decode, the window's layers on
# ring caches) must give the whole window's logits.
# With --hvp: bora's Hessian-vector products against PyTorch's double backward instead.
# usage: check_mixtral_bora.sh MODEL_DUMP PLUGIN_DIR SCRIPT [--hvp]
set -eu
dump=$1 plugins=$2 script=$3 hvp=${4:-}
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$script" --write-case all "$tmp" > /dev/null
rm "$tmp"/*/outputs.safetensors # what is compared below is bora's
set --
for c in mixtral mixtral_empty mixtral_top1 mixtral_z; do
    # shellcheck disable=SC2086
    "$dump" "$plugins" "$tmp/$c" $hvp
    set -- "$@" "$tmp/$c"
done
# shellcheck disable=SC2086
"$py" "$script" $hvp "$@"
