"""tests/ckpt/st_edit.py — damage a bora checkpoint the ways a disk, a copy or a hand can, for
tests/ckpt/test_integrity.sh.

  st_edit.py flip DIR FILE TENSOR N          invert N bytes in the middle of TENSOR's data
  st_edit.py swap DIR FILE TENSOR_A TENSOR_B swap two same-sized tensors' data_offsets
  st_edit.py set DIR FILE TENSOR VALUE       element 0 of an F32 TENSOR := VALUE, and its digest
                                             in trainer.json rewritten to match (xxh3-64)
  st_edit.py step DIR N                      trainer.json's step := N
  st_edit.py nodigests DIR                   drop trainer.json's digests (an older checkpoint)
"""
import json
import struct
import sys


def header(path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    (n,) = struct.unpack("<Q", data[:8])
    return data, n, json.loads(data[8:8 + n])


def write_header(path, data, n, hdr):
    text = json.dumps(hdr, separators=(",", ":")).encode()
    assert len(text) <= n, "the new header is longer than the old"
    data[8:8 + n] = text + b" " * (n - len(text))
    open(path, "wb").write(data)


def xxh3_64(b):
    # the digest bora records: XXH3-64 from libxxhash, the library bora links
    import ctypes
    import ctypes.util
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return "xxh3-64:%016x" % lib.XXH3_64bits(bytes(b), len(b))


def main():
    op, d = sys.argv[1], sys.argv[2]
    tj = d + "/trainer.json"
    if op == "step":
        rec = json.load(open(tj))
        rec["step"] = int(sys.argv[3])
        json.dump(rec, open(tj, "w"), indent=2)
        return
    if op == "nodigests":
        rec = json.load(open(tj))
        del rec["digests"]
        json.dump(rec, open(tj, "w"), indent=2)
        return
    file = sys.argv[3]
    path = d + "/" + file
    data, n, hdr = header(path)
    base = 8 + n
    if op == "flip":
        b, e = hdr[sys.argv[4]]["data_offsets"]
        at = base + (b + e) // 2
        for i in range(at, at + int(sys.argv[5])):
            data[i] ^= 0xFF
        open(path, "wb").write(data)
    elif op == "swap":
        a, b = hdr[sys.argv[4]], hdr[sys.argv[5]]
        a["data_offsets"], b["data_offsets"] = b["data_offsets"], a["data_offsets"]
        write_header(path, data, n, hdr)
    elif op == "set":
        t = hdr[sys.argv[4]]
        assert t["dtype"] == "F32"
        b, e = t["data_offsets"]
        data[base + b:base + b + 4] = struct.pack("<f", float(sys.argv[5]))
        open(path, "wb").write(data)
        rec = json.load(open(tj))
        rec["digests"][file][sys.argv[4]] = xxh3_64(data[base + b:base + e])
        json.dump(rec, open(tj, "w"), indent=2)
    else:
        sys.exit("unknown operation " + op)


main()
