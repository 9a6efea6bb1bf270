#!/bin/sh
# The in-tree jsonl tracker, driven through the registry, writes every call as a JSON line.
# usage: test_jsonl.sh DRIVE_TRACKER PLUGIN_DIR
set -eu
drive=$1 plugins=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
"$drive" "$plugins" jsonl run-42
f=runs/run-42/metrics.jsonl
cat "$f"
expect() { grep -qxF "$1" "$f" || { echo "missing line: $1" >&2; exit 1; }; }
expect '{"hparams":{"model":{"type":"gpt2"}}}'
expect '{"step":0,"metrics":{"train/loss":4,"optim/learning_rate":0.001}}'
expect '{"step":2,"metrics":{"train/loss":3,"optim/learning_rate":0.001}}'
expect '{"summary":{"eval/loss":2.25}}'
expect '{"artifact":{"path":"ckpt/step-3","name":"step-3","type":"checkpoint"}}'
expect '{"finish":"finished"}'
[ "$(wc -l < "$f")" -eq 7 ] || { echo "expected 7 lines" >&2; exit 1; }
# A second run with the same id appends rather than losing the first.
"$drive" "$plugins" jsonl run-42
[ "$(wc -l < "$f")" -eq 14 ] || { echo "expected 14 lines after a second run" >&2; exit 1; }
# Configured through the host's getters: the path key is read, {run_id} expanded.
printf 'path: custom/{run_id}.jsonl\n' > cfg.yaml
"$drive" "$plugins" jsonl run-7 cfg.yaml
grep -qxF '{"finish":"finished"}' custom/run-7.jsonl
# A wrong type and an unknown key are reported with their positions.
printf 'path: [a, b]\n' > bad.yaml
if "$drive" "$plugins" jsonl x bad.yaml 2> err; then echo "expected a failure" >&2; exit 1; fi
grep -qxF "bad.yaml:1:7: path: expected a string, got a list" err
printf 'pth: x.jsonl\n' > typo.yaml
if "$drive" "$plugins" jsonl x typo.yaml 2> err; then echo "expected a failure" >&2; exit 1; fi
grep -qxF "typo.yaml:1:1: unknown key 'pth' in tracker; did you mean 'path'?" err
# An unwritable location is an error with the path, not a crash.
mkdir ro && chmod 500 ro && cd ro
if [ "$(id -u)" != 0 ]; then
    if "$drive" "$plugins" jsonl x 2> err; then echo "expected a failure" >&2; exit 1; fi
    grep -q "jsonl: cannot create directory 'runs'" err
fi
echo "test_jsonl: ok"
