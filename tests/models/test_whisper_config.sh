#!/bin/sh
# The whisper plugin's keys at their edges, through bora import --print-config (the model is
# made, so the plugin checks every value): whisper-tiny's config.json maps to whisper-tiny's
# sizes; each bad value is refused with a message naming its key.
# usage: test_whisper_config.sh BORA PLUGIN_DIR CONFIG_JSON WORK_DIR
set -u
bora=$1 plugins=$2 tiny=$3 work=$4
py=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
B() { "$bora" --plugin-dir "$plugins" "$@"; }
mkdir tiny && cp "$tiny" tiny/config.json
out=$(B import tiny --print-config 2>&1) || fail "whisper-tiny: $out"
case $out in *'"d_model":384'*'"max_target_positions":448'*) ;; *) fail "whisper-tiny: $out" ;; esac
n=0
# refused 'python statement on c' 'text the message must hold'
refused() {
    n=$((n + 1))
    mkdir "bad$n" && "$py" - "$tiny" "bad$n/config.json" "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
PY
    if out=$(B import "bad$n" --print-config 2>&1); then
        fail "$1: accepted"
    else
        case $out in *"$2"*) echo "refused ($1): $out" ;; *) fail "$1: '$2' not in: $out" ;; esac
    fi
}
refused "c['d_model'] = 388" "model.d_model 388 does not divide into model.encoder_attention_heads (6) heads"
refused "c['decoder_attention_heads'] = 5" "model.d_model 384 does not divide into model.decoder_attention_heads (5) heads"
refused "c['d_model'] = 2; c['encoder_attention_heads'] = 1; c['decoder_attention_heads'] = 1" "model.d_model: 2; the encoder's sinusoidal positions need an even width"
refused "c['encoder_layers'] = 0" "model.encoder_layers must be at least 1"
refused "c['max_source_positions'] = -3" "model.max_source_positions must be at least 1"
refused "c['vocab_size'] = 2**41" "model.vocab_size must be at least 1 and at most 2^40"
refused "c['vocab_size'] = 2**30; c['d_model'] = 2**12; c['encoder_attention_heads'] = 4; c['decoder_attention_heads'] = 4" "model.vocab_size x model.d_model"
refused "c['activation_function'] = 'tanh'" "model.activation_function: 'tanh' is not one of"
refused "c['init_std'] = -1" "model.init_std: -1 is not a standard deviation"
refused "c['is_encoder_decoder'] = False" "is_encoder_decoder"
refused "c['tie_word_embeddings'] = False" "tie_word_embeddings"
refused "c['use_weighted_layer_sum'] = True" "use_weighted_layer_sum"
refused "c['layer_norm_eps'] = 1e-6" "layer_norm_eps"
[ "$fails" = 0 ] && echo "test_whisper_config: all checks passed"
exit $((fails > 0))
