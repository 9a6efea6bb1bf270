# tests/models/generate_same.sh — sourced by test_llama_generate.sh and test_gemma_generate.sh:
# same_ids TYPE MODEL STEPS trains MODEL (a YAML flow mapping) for STEPS steps on small.txt,
# then generates 60 tokens after a prompt with the KV cache and with --no-cache (the whole
# window recomputed per token), greedy and sampled, and fails unless the ids are the same and
# the cache ran decode steps. The caller sets bora, plugins, tok, work and fail().
same_ids() {
    type=$1 model=$2 steps=$3
    cat > $type.yaml <<YAML
model: $model
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 5}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: $steps
  train_batch_size: 8
  num_threads: 1
  id: $type
  checkpointer: {base_path: $work/ckpt}
  tracker: []
YAML
    out=$("$bora" --plugin-dir "$plugins" train $type.yaml 2>&1) || { echo "$out"; fail "$type: train"; return; }
    for how in "--temperature 0" "--temperature 0.9 --seed 5"; do
        # shellcheck disable=SC2086
        a=$("$bora" --plugin-dir "$plugins" generate --checkpoint ckpt/$type/step-$steps \
            --prompt "The jury said" --max-tokens 60 --ids $how 2>&1) || fail "$type: generate: $a"
        # shellcheck disable=SC2086
        b=$("$bora" --plugin-dir "$plugins" generate --checkpoint ckpt/$type/step-$steps \
            --prompt "The jury said" --max-tokens 60 --ids --no-cache $how 2>&1) ||
            fail "$type: generate --no-cache: $b"
        ia=$(echo "$a" | sed -n 's/^ids: //p') ib=$(echo "$b" | sed -n 's/^ids: //p')
        case $a in *"one-position steps"*) ;; *) fail "$type: the cache did not run: $a" ;; esac
        case $a in *" 0 one-position steps"*) fail "$type: no decode step ran: $a" ;; esac
        [ -n "$ia" ] && [ "$ia" = "$ib" ] || fail "$type ($how): the cache's ids
$ia
differ from the recomputed window's
$ib"
        echo "$type ($how): $(echo "$a" | tail -n 1)"
    done
}
