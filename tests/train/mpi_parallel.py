#!/usr/bin/python3
"""Data parallel over MPI gives the bits of one process.

mode bitwise: `mpirun -np 2 bora train` with micro-batches of 4 ends with a model.safetensors and
an optimizer.safetensors bitwise equal to one plain process (no mpirun) accumulating the same
micro-batches, and logs the same train/* (the loss, a model's own metrics) and optim/* at every
step (exact text): with one
micro-batch per rank (train_batch_size 8) and with two (16, where the order in which the four
gradients are added shows).

mode kill: rank 1 is SIGKILLed mid-run; mpirun must end the other rank within 60 s, naming rank
1. The run resumes at 2 ranks, is killed again, and is finished by one plain process: the final
checkpoint equals an uninterrupted one-process run's, bitwise. So does a run killed on one
process and finished by 2 ranks. Then rank 1 is stopped (SIGSTOP)
under BORA_DIST_TIMEOUT_S=2: rank 0 must give up within 60 s with a message naming rank 1.
Last (mode kill, not kill-shard), a 2-rank run under BORA_DIST_TIMEOUT_S=2 whose rank 0
evaluates for longer than that (10,000 validation batches; 1,000 under a sanitizer) must
finish: the others wait for rank 0's evaluation without it.

Skipped (exit 77) where mpirun is absent. Runs as root with --allow-run-as-root, and always with
--oversubscribe (2 ranks of 1 thread on a 2-core machine).

Modes bitwise-shard and kill-shard are the same with the 2-rank runs under
trainer.shard_optimizer (ZeRO-1: each rank keeps and updates its share of the optimizer state,
then the parameters are gathered; the bitwise mode's one process takes the key too and must say
it has nothing to share) and optimizer.max_grad_norm 0.05, so that every step clips
(the global gradient norm made from every rank's parts): the same bits again, and a sharded run
killed resumes sharded at 2 ranks and unsharded at 1 process (and one process's run sharded at
2), the checkpoints holding the whole state once.

With DATA (a data: section) the runs read it instead of TEXT with TOKENIZER (an audio
dataset: each rank reads its micro-batches' clips), and with EXTRA_PLUGIN_DIR bora searches it
for plugins too (a test model's).

MPI_OPTIMIZER in the environment replaces the optimizer's keys (a Muon with AdamW groups: whole
matrices per rank under sharding).

usage: mpi_parallel.py MODE BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR [MP [MODEL [DATA
                       [EXTRA_PLUGIN_DIR]]]]
"""
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time

mode, bora, plugin_dir, tokenizer, text, work = sys.argv[1:7]
shard = mode.endswith("-shard")
mode = mode.removesuffix("-shard")
mp = sys.argv[7] if len(sys.argv) > 7 and sys.argv[7] else "p=f32,c=f32"
model = (sys.argv[8] if len(sys.argv) > 8 and sys.argv[8] else
         "{type: gpt2, seq_len: 32, hidden_dim: 32, num_layers: 2, num_heads: 2}")
data = (sys.argv[9] if len(sys.argv) > 9 and sys.argv[9] else
        f"{{train_urls: [{text}], tokenizer: {tokenizer}}}")
# MPI_OPTIMIZER: the optimizer: section's keys (AdamW's by default)
optimizer = os.environ.get("MPI_OPTIMIZER", "type: adamw, learning_rate: 3e-3, warmup: 4")
extra_plugins = ["--plugin-dir", sys.argv[10]] if len(sys.argv) > 10 else []
mpirun = shutil.which("mpirun")
if not mpirun:
    print("skipped: no mpirun (apt-get install openmpi-bin)")
    sys.exit(77)
if "ASAN_OPTIONS" in os.environ:
    os.environ["ASAN_OPTIONS"] += ":detect_leaks=0"
os.environ["BORA_NO_PROGRESS"] = "1"
os.environ.pop("BORA_DIST_TIMEOUT_S", None)
launch = [mpirun, "--oversubscribe"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
STEPS = 24 if mode == "bitwise" else 40
config = os.path.join(work, "run.yaml")
with open(config, "w") as f:
    f.write(f"""model: {model}
optimizer: {{{optimizer}{", max_grad_norm: 0.05" if shard else ""}}}
data: {data}
trainer:
  num_train_steps: {STEPS}
  train_batch_size: 8
  per_device_parallelism: 4
  num_threads: 1
  seed: 11
  mp: {mp}
  checkpointer:
    base_path: {work}/ckpt
    save_interval: 0s
    keep: [{{every: 10}}]
""")


def command(run_id, ranks, *extra):
    cmd = [bora, "--plugin-dir", plugin_dir, *extra_plugins, "train", config, f"--trainer.id={run_id}",
           f"--trainer.tracker={{type: jsonl, path: {work}/{run_id}.jsonl}}", *extra]
    # ranks 0: a plain process, no mpirun at all
    # sharded at 2 ranks; the bitwise mode's one process has the key too (nothing to share), the
    # kill mode's has not (a checkpoint is the same either way)
    if shard and (ranks > 1 or mode == "bitwise"):
        cmd.append("--trainer.shard_optimizer=true")
    return cmd if ranks == 0 else launch + ["-np", str(ranks), "-x", "BORA_NO_PROGRESS",
                                            "-x", "BORA_TEST_TAG"] + cmd


def run_to_end(run_id, ranks, *extra):
    env = dict(os.environ, BORA_TEST_TAG=f"{work}:{run_id}")
    r = subprocess.run(command(run_id, ranks, *extra), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, timeout=600)
    if r.returncode != 0:
        sys.exit(f"{run_id} ({ranks} ranks): bora train failed ({r.returncode}):\n{r.stdout}")
    return r.stdout


def metrics(run_id):
    """train/* (the loss, a model's own metrics) and optim/* of each step's last run, as exact
    text."""
    seen = {}
    with open(f"{work}/{run_id}.jsonl") as f:
        for line in f:
            rec = json.loads(line, parse_float=str)
            if "step" in rec:
                kept = {k: v for k, v in rec["metrics"].items()
                        if k.startswith("train/") or k.startswith("optim/")}
                seen.setdefault(rec["step"], {}).update(kept)
    return seen


failures = 0


def same_checkpoint(a, b, step=STEPS):
    global failures
    for name in ("model.safetensors", "optimizer.safetensors"):
        x = open(f"{work}/ckpt/{a}/step-{step}/{name}", "rb").read()
        y = open(f"{work}/ckpt/{b}/step-{step}/{name}", "rb").read()
        if x != y:
            print(f"FAIL: {b}'s {name} at step {step} differs from {a}'s")
            failures += 1


def rank_pids(run_id, rank):
    """The pids of the given rank of run_id's processes (found by their environment)."""
    tag, pids = f"BORA_TEST_TAG={work}:{run_id}", []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if tag.encode() in env and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            pids.append(int(p))
    return pids


def lock_free(run_id):
    """Whether no process holds run_id's run directory lock (a dying rank may, for a moment)."""
    try:
        fd = os.open(f"{work}/ckpt/{run_id}/.lock", os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing it lets the lock go


def hit_rank(run_id, ranks, marker, sig, timeout_env=None):
    """Start run_id on `ranks` ranks, send sig to rank 1 when rank 0 prints marker; the
    output and how long mpirun took to end after the signal."""
    env = dict(os.environ, BORA_TEST_TAG=f"{work}:{run_id}")
    cmd = command(run_id, ranks)
    if timeout_env:
        env["BORA_DIST_TIMEOUT_S"] = timeout_env
        cmd = cmd[:len(launch)] + ["-x", "BORA_DIST_TIMEOUT_S"] + cmd[len(launch):]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env, bufsize=1)
    log, hit = [], None
    for line in p.stdout:
        log.append(line)
        if hit is None and line.startswith(marker):
            pids = rank_pids(run_id, 1)
            if not pids:
                p.kill()
                sys.exit(f"no process of rank 1 found for {run_id}")
            for pid in pids:
                os.kill(pid, sig)
            hit = time.monotonic()
            break
    if hit is None:
        sys.exit(f"{run_id} ended before {marker!r}:\n" + "".join(log))
    try:
        rest, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        for pid in rank_pids(run_id, 0) + rank_pids(run_id, 1):
            os.kill(pid, signal.SIGKILL)
        sys.exit(f"FAIL: {run_id}: the group did not end within 60 s of the signal to rank 1")
    waited = time.monotonic() - hit
    for pid in rank_pids(run_id, 1):  # a stopped rank that outlived the others
        os.kill(pid, signal.SIGKILL)
    # mpirun may return while the launcher's last SIGKILL to a rank is still on its way, and a
    # rank that is exiting has no environment left to find it by while it still holds its files
    # open: the next start must not find a dying rank holding the run's lock
    for _ in range(300):
        if not rank_pids(run_id, 0) + rank_pids(run_id, 1) and lock_free(run_id):
            break
        time.sleep(0.1)
    else:
        sys.exit(f"FAIL: {run_id}: ranks still alive 30 s after mpirun ended")
    return "".join(log) + rest, p.returncode, waited


if mode == "bitwise":
    for batch in (8, 16):
        one, two = f"one-{batch}", f"two-{batch}"
        out = run_to_end(one, 0, f"--trainer.train_batch_size={batch}")
        if shard and "one process, nothing to share" not in out:
            sys.exit(f"{one} did not say that one process has nothing to share:\n{out}")
        out = run_to_end(two, 2, f"--trainer.train_batch_size={batch}")
        if "data parallel: 2 processes" not in out:
            sys.exit(f"{two} did not run as 2 processes:\n{out}")
        if shard and "zero: optimizer state sharded over 2 ranks" not in out:
            sys.exit(f"{two} did not shard its optimizer state:\n{out}")
        if shard:
            norms = [float(m["optim/grad_norm"]) for m in metrics(one).values()]
            if min(norms) <= 0.05:
                sys.exit(f"{one}: a step did not clip (gradient norms {norms})")
        same_checkpoint(one, two)
        a, b = metrics(one), metrics(two)
        if sorted(a) != list(range(1, STEPS + 1)) or a != b:
            bad = [s for s in sorted(a) if a.get(s) != b.get(s)]
            print(f"FAIL: batch {batch}: the logged loss or optimizer metrics differ at steps "
                  f"{bad[:5]}: {a.get(bad[0]) if bad else None} vs {b.get(bad[0]) if bad else None}")
            failures += 1
        optim = sorted({k for m in a.values() for k in m if k.startswith("optim/")})
        print(f"batch {batch} ({batch // 8} micro-batch(es) per rank): 2 ranks = 1 process "
              f"({', '.join(optim)})")
elif mode == "kill":
    run_to_end("reference", 0)
    out, rc, waited = hit_rank("killed", 2, "step 12/", signal.SIGKILL)
    if rc == 0 or "rank 1" not in out:
        print(f"FAIL: after rank 1 died, mpirun ended with {rc} and no word of rank 1:\n{out}")
        failures += 1
    print(f"rank 1 killed at step 12: the group ended in {waited:.1f} s (status {rc})")
    out, rc, waited = hit_rank("killed", 2, "step 30/", signal.SIGKILL)
    if "resuming run killed from" not in out:
        sys.exit("the 2-rank restart did not resume:\n" + out)
    out = run_to_end("killed", 0)
    if "resuming run killed from" not in out:
        sys.exit("the 1-process restart did not resume:\n" + out)
    same_checkpoint("reference", "killed")
    a, b = metrics("reference"), metrics("killed")
    if a != b:
        print("FAIL: the resumed runs logged other losses than the uninterrupted one")
        failures += 1
    print("resumed at 2 ranks and then at 1 process: the same bits as the uninterrupted run")
    # and the other way: one plain process killed, the run finished by 2 ranks
    p = subprocess.Popen(command("grown", 0), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, bufsize=1)
    for line in p.stdout:
        if line.startswith("step 15/"):
            p.send_signal(signal.SIGKILL)
            break
    p.stdout.close()
    if p.wait() != -signal.SIGKILL:
        sys.exit("the one-process run of grown was not killed at step 15")
    out = run_to_end("grown", 2)
    if "resuming run grown from" not in out:
        sys.exit("the 2-rank restart of grown did not resume:\n" + out)
    same_checkpoint("reference", "grown")
    print("killed at 1 process, resumed at 2 ranks: the same bits as the uninterrupted run")
    out, rc, waited = hit_rank("stopped", 2, "step 5/", signal.SIGSTOP, timeout_env="2")
    if rc == 0 or "no answer from rank 1" not in out:
        print(f"FAIL: rank 0 did not name the stopped rank 1 (status {rc}):\n{out}")
        failures += 1
    print(f"rank 1 stopped: rank 0 gave up after {waited:.1f} s naming it")
    if not shard:
        # rank 0 evaluating for longer than BORA_DIST_TIMEOUT_S: the others wait for it
        # without that deadline, and the run goes on (the same code with the optimizer
        # sharded; a sanitizer build evaluates ten times fewer batches, each many times slower)
        batches = 1000 if "ASAN_OPTIONS" in os.environ else 10000
        env = dict(os.environ, BORA_TEST_TAG=f"{work}:evaluated", BORA_DIST_TIMEOUT_S="2")
        cmd = command("evaluated", 2, "--trainer.num_train_steps=12",
                      "--trainer.steps_per_eval=10", f"--data.validation_urls=[{text}]",
                      f"--trainer.max_eval_batches={batches}")
        cmd = cmd[:len(launch)] + ["-x", "BORA_DIST_TIMEOUT_S"] + cmd[len(launch):]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env, timeout=600)
        took = [float(line.rsplit("(", 1)[1].split()[-2]) for line in r.stdout.splitlines()
                if line.startswith("eval at step 10:")]
        if r.returncode != 0 or not took:
            print(f"FAIL: a run whose rank 0 evaluates for long ended ({r.returncode}):\n"
                  f"{r.stdout}")
            failures += 1
        elif took[0] <= 2:
            print(f"note: the evaluation took {took[0]} s, within BORA_DIST_TIMEOUT_S=2: the wait "
                  "for it was not tested on this machine")
        else:
            print(f"rank 0 evaluated for {took[0]} s under BORA_DIST_TIMEOUT_S=2: the others "
                  "waited")
else:
    sys.exit(f"unknown mode {mode}")
if failures:
    sys.exit(f"{failures} failure(s)")
print("mpi_parallel: all checks passed")
