#!/bin/sh
# bora train on a tiny Whisper over three espeak-ng clips (data.type: audio): the run's
# parameter line counts every parameter, the frozen encoder positions among them ("of them
# frozen"), its model FLOPs leave only those out (6·(N - frozen) + 12·L·d·T with the decoder's
# layers and width), and after three AdamW steps the checkpoint holds the table unchanged
# (transformers' sinusoids' float32 steps, correctly rounded, within one ulp) with no optimizer
# state for it, while every trained tensor has both of AdamW's.
# usage: check_whisper_train.sh BORA PLUGIN_DIR TOKENIZER SCRIPT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 script=$4 work=$5
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
command -v espeak-ng > /dev/null || { echo "skipped: no espeak-ng (scripts/setup)"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
i=0
for text in "hello world" "the cat sat on the mat" "speech to text"; do
    i=$((i + 1))
    espeak-ng -w "c$i.wav" "$text" 2> /dev/null || { echo "espeak-ng failed"; exit 1; }
    echo "{\"audio\": \"c$i.wav\", \"text\": \"$text\"}" >> train.jsonl
done
cat > run.yaml <<YAML
model: {type: whisper, d_model: 64, encoder_layers: 2, decoder_layers: 2,
        encoder_attention_heads: 4, decoder_attention_heads: 4, encoder_ffn_dim: 128,
        decoder_ffn_dim: 96, max_source_positions: 1500, max_target_positions: 16}
optimizer: {type: adamw, learning_rate: 3e-3, warmup: 1}
data: {type: audio, train_urls: [$work/train.jsonl], validation_urls: [$work/train.jsonl],
       tokenizer: $tok, cache_dir: $work/cache}
trainer: {num_train_steps: 3, train_batch_size: 3, num_threads: 2, id: w, steps_per_eval: 2,
          tracker: {type: jsonl, path: $work/w.jsonl},
          checkpointer: {base_path: $work/ckpt, save_interval: 0s}}
YAML
BORA_NO_PROGRESS=1 "$bora" --plugin-dir "$plugins" train run.yaml > train.log 2>&1 ||
    { cat train.log; exit 1; }
"$py" - "$script" train.log ckpt/w/step-3 <<'PY' || fail "counts or checkpoint"
import json, math, re, struct, sys
import numpy as np
sys.path.insert(0, sys.argv[1].rsplit("/", 1)[0])
sys.argv = sys.argv[:1] + sys.argv[2:]
import whisper_torch as w
log, step = open(sys.argv[1]).read(), sys.argv[2]
c = dict(w.DEFAULTS, vocab_size=51864, d_model=64, encoder_layers=2, decoder_layers=2,
         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
         decoder_ffn_dim=96, max_target_positions=16)
shapes = w.param_shapes(c)
total, frozen = sum(math.prod(s) for s in shapes.values()), 1500 * 64
want = f"model whisper: {total} parameters ({frozen} of them frozen) in {len(shapes)} tensors"
assert want in log, f"no '{want}' in the log"
flops = 6.0 * (total - frozen) + 12.0 * 2 * 64 * 16
want = f"model FLOPs: {flops:.4g} per token (6N + 12·L·d·T: model.decoder_layers 2, model.d_model 64)"
assert want in log, f"no '{want}' in the log"
def names(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return [k for k in json.loads(data[8:8 + n]) if k != "__metadata__"]
table = w.read_safetensors(f"{step}/model.safetensors")[w.FROZEN].numpy()
inc = np.log(10000) / (64 // 2 - 1)
expo = np.float32(-inc) * np.arange(32).astype(np.float32)
freq = np.exp(expo.astype(np.float64)).astype(np.float32)
angle = (np.arange(1500).astype(np.float32)[:, None] * freq[None, :]).astype(np.float32)
steps = np.concatenate([np.sin(angle.astype(np.float64)), np.cos(angle.astype(np.float64))], 1)
d = np.abs(table - steps.astype(np.float32)).max()
assert d <= 1.2e-7, f"the frozen table moved: {d}"
state = names(f"{step}/optimizer.safetensors")
assert not [k for k in state if k.endswith(w.FROZEN)], "optimizer state for the frozen table"
assert len(state) == 2 * (len(shapes) - 1), f"{len(state)} optimizer tensors for {len(shapes) - 1}"
print(f"parameters {total} ({frozen} frozen), model FLOPs {flops:.4g} per token; after 3 steps "
      f"the frozen table is its initial value ({d:.3g}) with no optimizer state")
PY
# the trainer's evaluations transcribe the validation clips too (trainer.eval_wer_clips): at
# step 3 the same word error rate, edit for edit, as bora eval of the step-3 checkpoint
"$bora" --plugin-dir "$plugins" eval run.yaml --checkpoint ckpt/w/step-3 > eval.log 2>&1 ||
    { cat eval.log; exit 1; }
"$py" - train.log eval.log w.jsonl <<'PY' || fail "the trainer's word error rate"
import json, re, sys
train, ev = open(sys.argv[1]).read(), open(sys.argv[2]).read()
pat = r"WER ([0-9.]+)%  \((\d+) edits over (\d+) reference words, (\d+) clips"
at = {int(m.group(1)): m.group(2, 3, 4, 5)
      for m in re.finditer(r"eval at step (\d+): " + pat, train)}
assert sorted(at) == [2, 3], f"WER at steps {sorted(at)} of the run, not 2 and 3:\n{train}"
m = re.search(r"eval of ckpt/w/step-3: " + pat, ev)
assert m, f"no WER from bora eval:\n{ev}"
assert at[3] == m.group(1, 2, 3, 4), f"the run's WER at step 3 {at[3]}, bora eval's {m.group(1, 2, 3, 4)}"
assert at[3][3] == "3", "not every validation clip transcribed"
logged = {}
for line in open(sys.argv[3]):
    r = json.loads(line)
    if "eval/wer" in r.get("metrics", {}):
        logged[r["step"]] = r["metrics"]["eval/wer"]
words = int(at[3][2])
assert sorted(logged) == [2, 3] and abs(logged[3] - int(at[3][1]) / words) < 1e-12, \
    f"eval/wer logged {logged}"
print(f"the trainer's WER at step 3 ({at[3][0]}%, {at[3][1]} edits over {words} words) is bora eval's")
PY
[ "$fails" = 0 ] && echo "check_whisper_train: all checks passed"
exit $((fails > 0))
