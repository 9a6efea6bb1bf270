#!/bin/sh
# Whisper through bora import and bora export: a Hugging Face folder the reference wrote
# (tests/models/whisper_torch.py, the tiny case) imports into a checkpoint, which exports back
# to the same tensors bit for bit under Hugging Face's names (proj_out.weight left out, as
# transformers saves the tied head, the frozen encoder positions in) and a config.json that
# imports to the same model section and the same checkpoint, bit for bit; the exported folder
# gives the original's logits bit for bit. A folder that also holds proj_out.weight imports when
# it equals the embedding and is refused, by name, when it differs.
# usage: check_whisper_hf.sh BORA PLUGIN_DIR WHISPER_DUMP SCRIPT WORK_DIR
set -u
bora=$1 plugins=$2 dump=$3 script=$4 work=$5
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
B() { "$bora" --plugin-dir "$plugins" "$@"; }
"$py" "$script" --write-case tiny case > /dev/null || exit 1
B import case --out ck > import.log 2>&1 || fail "import: $(cat import.log)"
B export --checkpoint ck --out hf > export.log 2>&1 || fail "export: $(cat export.log)"
B import hf --out ck2 > import2.log 2>&1 || fail "import of the export: $(cat import2.log)"
cmp -s ck/model.safetensors ck2/model.safetensors || fail "export then import changed the checkpoint"
B import case --print-config > case.section 2>&1 || fail "$(cat case.section)"
B import hf --print-config > hf.section 2>&1 || fail "$(cat hf.section)"
cmp -s case.section hf.section || fail "the exported config.json maps to $(cat hf.section), not $(cat case.section)"
"$py" - case/model.safetensors hf/model.safetensors <<'PY' || fail "exported tensors"
import json, struct, sys
def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__"}
a, b = read(sys.argv[1]), read(sys.argv[2])
assert "proj_out.weight" not in b, "proj_out.weight exported"
assert "model.encoder.embed_positions.weight" in b, "the frozen positions not exported"
assert a.keys() == b.keys(), sorted(a.keys() ^ b.keys())
bad = [k for k in a if a[k] != b[k]]
assert not bad, f"{len(bad)} tensors differ, first {bad[0]}"
print(f"export: {len(a)} tensors bitwise the reference's")
PY
# the exported folder's logits: its model section (as config.json) and the case's inputs
mkdir -p run_case run_hf
for d in case hf; do
    "$py" -c "import json,sys; s=json.load(open('$d.section')); s['model_type']=s.pop('type'); json.dump(s, open('run_$d/config.json','w'))"
    cp $d/model.safetensors case/inputs.safetensors run_$d/
    "$dump" "$plugins" run_$d > run_$d.log 2>&1 || fail "whisper_dump $d: $(cat run_$d.log)"
done
"$py" - run_case/outputs.safetensors run_hf/outputs.safetensors <<'PY' || fail "logits of the exported folder"
import json, struct, sys
def logits(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    v = json.loads(data[8:8 + n])["logits"]
    return data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
assert logits(sys.argv[1]) == logits(sys.argv[2]), "logits differ"
print("logits of the exported folder: bitwise the original's")
PY
# a file holding the tied head too: the same matrix imports, another is refused by name
"$py" - hf <<'PY'
import json, os, shutil, struct, sys
src = sys.argv[1]
data = open(f"{src}/model.safetensors", "rb").read()
n = struct.unpack("<Q", data[:8])[0]
head = json.loads(data[8:8 + n])
emb = head["model.decoder.embed_tokens.weight"]
blob = bytearray(data[8 + n + emb["data_offsets"][0]:8 + n + emb["data_offsets"][1]])
for name, change in (("tied_same", False), ("tied_other", True)):
    os.makedirs(name, exist_ok=True)
    shutil.copy(f"{src}/config.json", name)
    h = {k: v for k, v in head.items()}
    end = max(v["data_offsets"][1] for k, v in head.items() if k != "__metadata__")
    h["proj_out.weight"] = dict(emb, data_offsets=[end, end + len(blob)])
    extra = bytearray(blob)
    if change:
        extra[0] ^= 1
    text = json.dumps(h).encode()
    text += b" " * (-len(text) % 8)
    with open(f"{name}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data[8 + n:8 + n + end] + bytes(extra))
PY
B import tied_same --out ck3 > tied.log 2>&1 || fail "a file with proj_out.weight equal to the embedding: $(cat tied.log)"
cmp -s ck/model.safetensors ck3/model.safetensors || fail "proj_out.weight changed the import"
if B import tied_other --out ck4 > other.log 2>&1; then
    fail "a file whose proj_out.weight differs from the embedding was imported"
else
    grep -q "tensor 'proj_out.weight' differs from 'model.decoder.embed_tokens.weight'" other.log ||
        fail "refusal: $(cat other.log)"
fi
[ "$fails" = 0 ] && echo "check_whisper_hf: all checks passed"
exit $((fails > 0))
