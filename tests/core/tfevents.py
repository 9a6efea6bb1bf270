#!/usr/bin/python3
"""tests/core/tfevents.py — a reader of TensorBoard event files, for the tests: it checks the
TFRecord framing of every record (length, masked CRC-32C of the length, data, masked CRC-32C of
the data), decodes each record as a tensorboard.Event with tfevents.proto (compiled by protoc
on the fly) and replays a run's files as TensorBoard does, in name order, dropping what was read
at a step or later when a SessionLog START at that step comes (its purge of orphaned data).

usage: tfevents.py read FILE                    check every record, print how many
       tfevents.py steps FILE                   the steps of train/loss in a file whose writer
                                                was killed (its last record may be cut short)
       tfevents.py sample FILE                  the TensorFlow-written sample, as its SOURCE says
       tfevents.py run DIR METRICS.jsonl STEPS  bora's event files of one run against what the
                                                jsonl tracker logged for it, steps 1..STEPS
"""
import glob
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def load_protos():
    out = tempfile.mkdtemp(prefix="tfevents-")
    subprocess.run(["protoc", f"--proto_path={HERE}", f"--python_out={out}",
                    os.path.join(HERE, "tfevents.proto")], check=True)
    sys.path.insert(0, out)
    import tfevents_pb2
    return tfevents_pb2


pb = load_protos()


def fail(message):
    print(f"tfevents: {message}", file=sys.stderr)
    sys.exit(1)


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def masked_crc(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_events(path, cut_tail=False):
    """Every record of path as an Event; a bad CRC or a cut record is named with its offset.
    With cut_tail a last record cut short (a writer killed mid-write) ends the file, as
    TensorBoard, which reads files still being written, takes it."""
    data = open(path, "rb").read()
    events, off = [], 0
    while off < len(data):
        if cut_tail and (len(data) - off < 12 or
                         struct.unpack_from("<Q", data, off)[0] > len(data) - off - 16):
            print(f"tfevents: {path}: offset {off}: the last record is cut short")
            break
        if len(data) - off < 12:
            fail(f"{path}: offset {off}: a record header cut short ({len(data) - off} bytes)")
        (length,) = struct.unpack_from("<Q", data, off)
        (crc,) = struct.unpack_from("<I", data, off + 8)
        if crc != masked_crc(data[off:off + 8]):
            fail(f"{path}: offset {off}: the length's CRC does not match")
        if length > len(data) - off - 16:
            fail(f"{path}: offset {off}: a record of {length} bytes runs past the end")
        body = data[off + 12:off + 12 + length]
        (crc,) = struct.unpack_from("<I", data, off + 12 + length)
        if crc != masked_crc(body):
            fail(f"{path}: offset {off}: the data's CRC does not match")
        event = pb.Event()
        event.ParseFromString(body)
        events.append(event)
        off += 16 + length
    return events


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def scalar(value, where):
    """The number in a Summary.Value: simple_value, or a rank-0 DT_FLOAT tensor."""
    if value.WhichOneof("value") == "simple_value":
        return value.simple_value
    t = value.tensor
    if t.dtype != 1 or len(t.tensor_shape.dim) or len(t.float_val) != 1:
        fail(f"{where}: {value.tag}: not a rank-0 DT_FLOAT tensor: {t}")
    return t.float_val[0]


def check_sample(path):
    events = read_events(path)
    if len(events) != 105:
        fail(f"{path}: {len(events)} records, want 105")
    first = events[0]
    if first.file_version != "brain.Event:2" or first.wall_time != 1585769947.0:
        fail(f"{path}: record 0 is {first}")
    kinds = [e.WhichOneof("what") for e in events[1:]]
    if kinds.count("graph_def") != 1 or kinds.count("meta_graph_def") != 1 or \
            kinds.count("summary") != 102:
        fail(f"{path}: record kinds {sorted(set(kinds))}")
    tags = {}
    for e in events:
        for v in e.summary.value:
            if v.WhichOneof("value") != "simple_value":
                fail(f"{path}: step {e.step}: {v.tag} has no simple_value")
            tags.setdefault(v.tag, {})[e.step] = v.simple_value
    want = {"batch_loss", "batch_acc", "epoch_acc", "epoch_loss", "epoch_val_acc",
            "epoch_val_loss"}
    if set(tags) != want or any(sorted(v) != list(range(17)) for v in tags.values()):
        fail(f"{path}: tags and steps {({k: sorted(v) for k, v in tags.items()})}")
    if tags["batch_loss"][0] != f32(3.9135773181915283) or tags["epoch_val_acc"][16] != 1.0:
        fail(f"{path}: batch_loss at 0 is {tags['batch_loss'][0]}, epoch_val_acc at 16 is "
             f"{tags['epoch_val_acc'][16]}")
    print(f"tfevents: {path}: 105 records, CRCs valid, 6 tags at steps 0..16, batch_loss "
          f"{tags['batch_loss'][0]:.6g} -> {tags['batch_loss'][16]:.6g}")


def flatten(obj, prefix=""):
    out = {}
    for k, v in obj.items():
        name = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, name))
        elif v is not None:
            out[name] = v
    return out


def text_of(value, where):
    t = value.tensor
    if value.metadata.plugin_data.plugin_name != "text" or t.dtype != 7 or \
            len(t.string_val) != 1:
        fail(f"{where}: {value.tag} is not a text summary: {value}")
    md = t.string_val[0].decode()
    if any(line and not line.startswith("    ") for line in md.split("\n")):
        fail(f"{where}: {value.tag}: not a Markdown code block:\n{md}")
    return "\n".join(line[4:] for line in md.split("\n"))


def check_run(run_dir, jsonl_path, steps):
    files = sorted(glob.glob(os.path.join(run_dir, "*")))
    if not files:
        fail(f"{run_dir}: no event files")
    hparams_json, logged, summary = None, {}, {}
    for line in open(jsonl_path):
        rec = json.loads(line)
        if "hparams" in rec:
            hparams_json = rec["hparams"]
        if "summary" in rec:
            summary = rec["summary"]
        if "step" in rec:  # a step logged again (a resume) keeps its latest values
            for name, v in rec["metrics"].items():
                logged[(name, rec["step"])] = v
    shown = {}  # (tag, step) -> [values]: what TensorBoard shows after its purges
    records, last = 0, None
    for path in files:
        name = os.path.basename(path)
        if not re.fullmatch(r"events\.out\.tfevents\.\d{10}\.[^/]+", name):
            fail(f"{path}: not named events.out.tfevents.TIME.HOST")
        events = read_events(path)
        records += len(events)
        if events[0].file_version != "brain.Event:2" or \
                events[0].source_metadata.writer != "bora":
            fail(f"{path}: the first record is {events[0]}")
        config = start = None
        for e in events:
            where = f"{name}: step {e.step}"
            if e.WhichOneof("what") == "session_log" and e.session_log.status == 1:
                shown = {k: v for k, v in shown.items() if k[1] < e.step}
                start = e.step
            for v in e.summary.value:
                plugin = v.metadata.plugin_data.plugin_name
                if plugin == "scalars":
                    if v.metadata.data_class != 1:
                        fail(f"{where}: {v.tag}: data_class {v.metadata.data_class}, want 1")
                    if start is None:
                        fail(f"{where}: {v.tag} logged before the SessionLog START")
                    shown.setdefault((v.tag, e.step), []).append(scalar(v, where))
                elif plugin == "text" and v.tag == "config":
                    config = json.loads(text_of(v, where))
                elif plugin == "text" and v.tag == "environment":
                    if "record" not in json.loads(text_of(v, where)):
                        fail(f"{where}: the environment has no record")
                elif plugin == "hparams":
                    data = pb.HParamsPluginData()
                    data.ParseFromString(v.metadata.plugin_data.content)
                    if v.tag == "_hparams_/session_start_info":
                        hp = {k: getattr(x, x.WhichOneof("kind"))
                              for k, x in data.session_start_info.hparams.items()}
                        want = {k: json.dumps(x, separators=(",", ":")) if isinstance(x, list)
                                else x for k, x in flatten(hparams_json).items()}
                        got = {k: json.dumps(json.loads(x), separators=(",", ":"))
                               if isinstance(want.get(k), str) and want[k].startswith("[")
                               else x for k, x in hp.items()}
                        if got != want:
                            diff = sorted(set(got.items()) ^ set(want.items()), key=str)
                            fail(f"{where}: hparams differ from the configuration: {diff[:6]}")
                    elif v.tag == "_hparams_/session_end_info":
                        last = data.session_end_info.status
        if config != hparams_json:
            fail(f"{path}: the text summary 'config' is not the run's configuration")
    if last != 1:
        fail(f"{run_dir}: the last session_end_info has status {last}, want 1 (success)")
    loss_steps = sorted(s for (tag, s) in shown if tag == "train/loss")
    if loss_steps != list(range(1, steps + 1)):
        fail(f"{run_dir}: train/loss shown at steps {loss_steps}, want 1..{steps}")
    for (tag, step), values in shown.items():
        if len(values) != 1:
            fail(f"{run_dir}: {tag} shown {len(values)} times at step {step}: {values}")
        want = logged.get((tag, step))
        if want is not None and values[-1] != f32(want):
            fail(f"{run_dir}: {tag} at step {step} is {values[-1]}, the run logged {want}")
    for name, v in summary.items():
        if shown.get((name, steps)) != [f32(v)]:
            fail(f"{run_dir}: the summary's {name} at step {steps} is "
                 f"{shown.get((name, steps))}, the run logged {v}")
    for key in logged:
        if logged[key] is not None and key not in shown:
            fail(f"{run_dir}: {key[0]} at step {key[1]} was logged but is not shown")
    print(f"tfevents: {run_dir}: {len(files)} files, {records} records, CRCs valid; steps "
          f"1..{steps} shown once each, equal to what the run logged, the summary at {steps}; config and hparams match")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "read":
        print(f"tfevents: {sys.argv[2]}: {len(read_events(sys.argv[2]))} records, CRCs valid")
    elif len(sys.argv) == 3 and sys.argv[1] == "steps":
        steps = {e.step for e in read_events(sys.argv[2], cut_tail=True)
                 for v in e.summary.value if v.tag == "train/loss"}
        print(" ".join(str(s) for s in sorted(steps)))
    elif len(sys.argv) == 3 and sys.argv[1] == "sample":
        check_sample(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "run":
        check_run(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
