#!/usr/bin/python3
"""Kill and resume: a run SIGKILLed at three seeded random moments (after a step, during a
checkpoint save, and one of either) and started again each time ends with a model.safetensors
and a loss and optimizer metrics (optim/*) at every step bitwise equal to a run never interrupted.

With MP (trainer.mp, say p=f32,c=bf16) the runs use that precision: under c=bf16 the resumed
run must multiply bf16 copies of the checkpoint's weights, not of the initial ones.

With MODEL (a YAML flow mapping; "" for the default) the runs train that model instead of the small GPT-2, and with
OPTIMIZER (one too, "" for the default) under that optimizer section instead of AdamW's (Lion;
Muon with AdamW groups): the final optimizer.safetensors must be the same bits too.

With DATA (a flow mapping; "" for the default) the runs read that data section instead of TEXT,
and with EXTRA_PLUGIN_DIR they search it for plugins too (a test model's).

usage: kill_resume.py BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR [MP [MODEL [OPTIMIZER [DATA
       [EXTRA_PLUGIN_DIR]]]]]
       (BORA_KILL_SEED picks the seed)
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

bora, plugin_dir, tokenizer, text, work = sys.argv[1:6]
mp = sys.argv[6] if len(sys.argv) > 6 else "p=f32,c=f32"
model = (sys.argv[7] if len(sys.argv) > 7 and sys.argv[7] else
         "{type: gpt2, seq_len: 32, hidden_dim: 32, num_layers: 2, num_heads: 2}")
optimizer = (sys.argv[8] if len(sys.argv) > 8 and sys.argv[8] else
             "{type: adamw, learning_rate: 3e-3, warmup: 4}")
data = (sys.argv[9] if len(sys.argv) > 9 and sys.argv[9] else
        f"{{train_urls: [{text}], tokenizer: {tokenizer}}}")
extra_plugins = ["--plugin-dir", sys.argv[10]] if len(sys.argv) > 10 else []
# Under ASan, LeakSanitizer's exit-time scan of a process with OpenMP workers sometimes crashes
# in its own tracer ("Tracer caught signal 11"); the leak checks of bora train are made by
# train.cli and train.accumulate, so they are off for the processes of this test.
if "ASAN_OPTIONS" in os.environ:
    os.environ["ASAN_OPTIONS"] += ":detect_leaks=0"
STEPS = 40
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
config = os.path.join(work, "run.yaml")
with open(config, "w") as f:
    f.write(f"""model: {model}
optimizer: {optimizer}
data: {data}
trainer:
  num_train_steps: {STEPS}
  train_batch_size: 8
  per_device_parallelism: 4
  num_threads: 2
  seed: 11
  mp: {mp}
  checkpointer:
    base_path: {work}/ckpt
    save_interval: 0s
    keep: [{{every: 10}}]
""")


def command(run_id):
    return [bora, "--plugin-dir", plugin_dir, *extra_plugins, "train", config,
            f"--trainer.id={run_id}",
            f"--trainer.tracker={{type: jsonl, path: {work}/{run_id}.jsonl}}"]


def run_to_end(run_id):
    r = subprocess.run(command(run_id), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        sys.exit(f"{run_id}: bora train failed ({r.returncode}):\n{r.stdout}")
    return r.stdout


def losses(run_id):
    """Every train/loss and optimizer metric (optim/*: the learning rate, the gradient's norm,
    Sophia's Hessian norms) logged, by step, as its exact text (17 significant digits): a dict
    per step for each time the step ran."""
    seen = {}
    with open(f"{work}/{run_id}.jsonl") as f:
        for line in f:
            rec = json.loads(line, parse_float=str)
            if "step" not in rec:
                continue
            kept = {k: v for k, v in rec["metrics"].items()
                    if k == "train/loss" or k.startswith("optim/")}
            runs = seen.setdefault(rec["step"], [])
            if "train/loss" in kept or not runs:  # a step's first record starts another run
                runs.append(kept)
            else:
                runs[-1].update(kept)
    return seen


seed = int(os.environ.get("BORA_KILL_SEED", time.time_ns() % 1000000))
rng = random.Random(seed)
steps = sorted(rng.sample(range(3, STEPS - 2), 3))
kinds = ["step", "save", rng.choice(["step", "save"])]
delays = [rng.uniform(0, 0.02) if k == "step" else 0.0 for k in kinds]
print(f"seed {seed} (BORA_KILL_SEED={seed} repeats it); kill points: " +
      ", ".join(f"{k} {s}" + (f" +{d * 1000:.1f} ms" if k == "step" else "")
                for k, s, d in zip(kinds, steps, delays)))

run_to_end("reference")

resume_from = 0  # the step the next start resumes after
for kind, step, delay in zip(kinds, steps, delays):
    # A kill's delay may let the run save a few more steps than the kill point; a later point
    # the next start would never reach moves to its first step.
    if step <= resume_from:
        print(f"{kind} {step} is behind the resumed run's start: {kind} {resume_from + 1}")
        step = resume_from + 1
    p = subprocess.Popen(command("killed"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, bufsize=1)
    marker = f"step {step}/{STEPS} " if kind == "step" else f"checkpoint: saving step {step} "
    killed = False
    log = []
    for line in p.stdout:
        log.append(line)
        if line.startswith(marker):
            if delay:
                time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            killed = True
            break
    p.stdout.close()
    rc = p.wait()
    if not killed:
        sys.exit(f"the run ended before the kill point ({kind} {step}):\n" + "".join(log))
    if rc != -signal.SIGKILL:
        sys.exit(f"expected the run to die of SIGKILL, got {rc}")
    run_dir = f"{work}/ckpt/killed"
    partial = [d for d in os.listdir(run_dir) if d.startswith(".tmp-")]
    done = sorted(int(d[5:]) for d in os.listdir(run_dir) if d.startswith("step-"))
    print(f"killed at {kind} {step}: complete checkpoints {done}" +
          (f"; a save was cut short ({partial[0]})" if partial else ""))
    resume_from = max(done, default=0)

out = run_to_end("killed")
if "resuming run killed from" not in out:
    sys.exit("the last start did not resume:\n" + out)
if "removing" in out:
    print("the last start removed a partial checkpoint left by a kill")

ref = open(f"{work}/ckpt/reference/step-{STEPS}/model.safetensors", "rb").read()
got = open(f"{work}/ckpt/killed/step-{STEPS}/model.safetensors", "rb").read()
failures = 0
if ref != got:
    print("FAIL: the final model.safetensors differs from the uninterrupted run's")
    failures += 1
ref_opt = open(f"{work}/ckpt/reference/step-{STEPS}/optimizer.safetensors", "rb").read()
got_opt = open(f"{work}/ckpt/killed/step-{STEPS}/optimizer.safetensors", "rb").read()
if ref_opt != got_opt:
    print("FAIL: the final optimizer.safetensors differs from the uninterrupted run's")
    failures += 1
want, have = losses("reference"), losses("killed")
for s in range(1, STEPS + 1):
    if s not in have or any("train/loss" not in v for v in have[s]):
        print(f"FAIL: no loss logged for step {s}")
        failures += 1
    # a run killed between a step's records logged part of them; the last run logged all
    elif have[s][-1] != want[s][0] or any(v[k] != want[s][0].get(k) for v in have[s] for k in v):
        print(f"FAIL: step {s}: {have[s]} after kills, {want[s][0]} uninterrupted")
        failures += 1
kept = sorted(int(d[5:]) for d in os.listdir(f"{work}/ckpt/killed") if d.startswith("step-"))
if kept != [10, 20, 30, 40]:
    print(f"FAIL: checkpoints kept {kept}, want [10, 20, 30, 40]")
    failures += 1
if failures:
    sys.exit(f"kill_resume: {failures} failures (seed {seed})")
print(f"kill_resume: final model.safetensors ({len(ref)} bytes), optimizer.safetensors and all "
      f"{STEPS} losses and optimizer metrics bitwise equal after three kills")
