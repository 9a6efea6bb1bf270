#!/bin/sh
# Mixtral's configuration as a user meets it (bora graph and bora train): each bad key is refused
# naming it and what would be right; MixtralConfig's own spellings (null head_dim and window) are
# taken and bora graph counts each expert's parameters; training runs with the load-balancing
# loss, gradient_checkpointing and 2 threads give bitwise the losses of a plain run, and
# trainer.mp c=bf16 trains (the grouped products in bf16); export writes
# config.json with MixtralConfig's keys and each expert's weights under its Hugging Face name,
# and import reads that folder back.
# usage: test_mixtral_config.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 2000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
size="type: mixtral, seq_len: 16, hidden_size: 32, intermediate_size: 24, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2"
# expect STATUS NEEDLE MODEL [ARGS]: bora graph (or ARGS) on MODEL exits STATUS and says NEEDLE
expect() {
    want=$1 needle=$2 model=$3
    shift 3
    cat > run.yaml <<YAML
model: $model
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer: {num_train_steps: 3, train_batch_size: 4, num_threads: 1, tracker: [], checkpointer: {base_path: $work/ckpt}}
YAML
    [ $# -gt 0 ] || set -- graph run.yaml
    out=$("$bora" --plugin-dir "$plugins" "$@" 2>&1)
    got=$?
    [ "$got" -eq "$want" ] || fail "$model: exit $got, want $want; output:
$out"
    case $out in *"$needle"*) ;; *) fail "$model: no '$needle' in:
$out" ;; esac
}
expect 1 "model.num_experts_per_tok: 3; give 1 to num_local_experts (2)" \
    "{$size, num_local_experts: 2, num_experts_per_tok: 3}"
expect 1 "model.num_local_experts: 0; give at least 1 expert" "{$size, num_local_experts: 0}"
expect 1 "model.router_jitter_noise: 0.01; bora routes without jitter (give 0)" \
    "{$size, router_jitter_noise: 0.01}"
expect 1 "model.router_aux_loss_coef: nan is not a number" "{$size, router_aux_loss_coef: .nan}"
expect 1 "model.router_z_loss_coef: -1; give 0 (off) or a positive weight" \
    "{$size, router_z_loss_coef: -1}"
expect 1 "model.hidden_act: 'gelu' is not supported" "{$size, hidden_act: gelu}"
expect 1 "model.attention_dropout: 0.1; bora trains without dropout" "{$size, attention_dropout: 0.1}"
expect 1 "unknown key 'mlp_bias' in model (mixtral)" "{$size, mlp_bias: false}"
# config.json's own spellings; 2 layers of 2 norms, q/k/v/o, the router and 4 x 3 expert
# matrices, and the embedding, final norm and head: 41
expect 0 "parameters: 41 tensors" "{$size, num_local_experts: 4, head_dim: null, sliding_window: null}"
# training with the load-balancing loss; gradient checkpointing: the same losses, bitwise
# run ID CHECKPOINTING [ARGS]: trains 3 steps with the load-balancing loss into ID.jsonl
run() {
    id=$1 ck=$2
    shift 2
    expect 0 "trained 3 steps" "{$size, num_local_experts: 4, output_router_logits: true, router_aux_loss_coef: 0.05, gradient_checkpointing: $ck}" \
        train run.yaml --trainer.id="$id" "--trainer.tracker={type: jsonl, path: $work/$id.jsonl}" "$@"
}
losses() { sed -n 's/.*"train\/loss": *\([-0-9.e]*\).*/\1/p' "$1.jsonl"; }
run ck-false false
run ck-true true
run threads-2 false --trainer.num_threads=2
run bf16 false --trainer.mp=p=f32,c=bf16
run micro false --trainer.per_device_parallelism=2
a=$(losses ck-false) b=$(losses ck-true) c=$(losses threads-2) d=$(losses bf16)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "gradient_checkpointing changed the losses: '$a' against '$b'"
[ "$a" = "$c" ] || fail "2 threads changed the losses: '$a' against '$c'"
# the model's metrics (aux, z, each layer's expert load): logged every step, bitwise the same
# with checkpointing and 2 threads, and each layer's loads sum to 1
metrics() { grep '"train/aux_loss"' "$1.jsonl"; }
[ "$(metrics ck-false | wc -l)" = 3 ] || fail "metrics: $(cat ck-false.jsonl)"
[ "$(metrics ck-false)" = "$(metrics ck-true)" ] && [ "$(metrics ck-false)" = "$(metrics threads-2)" ] ||
    fail "metrics differ with checkpointing or threads: $(metrics ck-false) / $(metrics threads-2)"
# (with 2 micro-batches a step too: their mean)
for id in ck-false micro; do
    sums=$(metrics $id | tr ',{}' '\n\n\n' |
        sed -n 's/"train\/expert_load\/layer\([0-9]*\)\/[0-9]*":\(.*\)/\1 \2/p' |
        awk '{t[$1] += $2; n[$1]++} END {for (l in t) printf "%d:%d:%.6f\n", l, n[l], t[l]}' | sort | tr '\n' ' ')
    [ "$sums" = "0:12:3.000000 1:12:3.000000 " ] ||
        fail "$id: expert loads: 3 steps x 4 experts per layer should sum to 3 per layer: '$sums'"
done
metrics ck-false | grep -q '"train/router_z_loss"' || fail "no train/router_z_loss: $(metrics ck-false)"
# MFU on the active parameters: 2 layers x 4 experts x 3 x 32 x 24 = 18432 in the experts, of
# which a token uses 2 of 4: 41440 - 18432 / 2
expect 0 "N_active = 32224 of N = 41440" "{$size, num_local_experts: 4}" train run.yaml \
    --trainer.id=flops
# the router z-loss: in the loss (other losses than without it), left out of config.json by
# export, with a warning
zrun() {
    expect 0 "trained 3 steps" "{$size, num_local_experts: 4, router_z_loss_coef: $1}" \
        train run.yaml --trainer.id="z$1" "--trainer.tracker={type: jsonl, path: $work/z$1.jsonl}"
}
zrun 0
zrun 0.5
[ -n "$(losses z0)" ] && [ "$(losses z0)" != "$(losses z0.5)" ] ||
    fail "router_z_loss_coef 0.5 left the losses as they were: $(losses z0)"
out=$("$bora" --plugin-dir "$plugins" export --checkpoint ckpt/z0.5/step-3 --out hf-z 2>&1) ||
    fail "export with the z-loss: $out"
case $out in *"model.router_z_loss_coef 0.5 is not written to config.json"*) ;;
*) fail "export with the z-loss: no warning in: $out" ;; esac
! grep -q router_z_loss hf-z/config.json || fail "export wrote router_z_loss: $(cat hf-z/config.json)"
[ "$(echo "$d" | wc -l)" = 3 ] && [ "$d" != "$a" ] || fail "c=bf16: losses '$d' (f32: '$a')"
# export: config.json with MixtralConfig's keys, each expert under Hugging Face's name
"$bora" --plugin-dir "$plugins" export --checkpoint ckpt/ck-true/step-3 --out hf > export.log 2>&1 ||
    fail "export: $(cat export.log)"
for key in '"architectures": \[ *"MixtralForCausalLM"' '"num_local_experts": 4,' \
    '"num_experts_per_tok": 2,' '"output_router_logits": true,' '"router_aux_loss_coef": 0.05' \
    '"rope_theta": 1000000,' '"sliding_window": null,'; do
    tr -d '\n' < hf/config.json | grep -q "$key" || fail "export: no $key in $(cat hf/config.json)"
done
grep -q "model.layers.1.block_sparse_moe.experts.3.w2.weight" hf/model.safetensors ||
    fail "export: no model.layers.1.block_sparse_moe.experts.3.w2.weight in model.safetensors"
# and import reads the folder back: the same type, keys and tensors
out=$("$bora" --plugin-dir "$plugins" import hf --out imported 2>&1)
case $out in *"imported hf (model mixtral, 41440 parameters in 41 tensors)"*) ;;
*) fail "import: $out" ;; esac
out=$("$bora" --plugin-dir "$plugins" import hf --print-config 2>&1)
case $out in *'"type":"mixtral"'*'"num_local_experts":4,"num_experts_per_tok":2,"output_router_logits":true,"router_aux_loss_coef":0.05'*) ;;
*) fail "import --print-config: $out" ;; esac
[ $fails = 0 ] && echo "mixtral config: refusals name the key; config.json's spellings taken; checkpointing and threads bitwise; bf16; export and import"
exit $((fails > 0))
