"""tests/graph/sample_reference.py — an independent reference for BORA_OP_SAMPLE's tokens.

Philox4x32-10 is written here from Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"
(SC 2011), section 4.2 and Random123's philox.h conventions: each round maps the counter
(L0, R0, L1, R1) through two 32x32 -> 64-bit products, with the key bumped by the Weyl constants
before every round after the first. It must reproduce the paper's known-answer vectors (Random123's
kat_vectors, "philox4x32 10" lines) before any token is compared. The draw follows the contract in
sdk/bora/graph.h: u from 53 bits of the first two output words for counter (row low, row high,
stream, step) under key (seed low, seed high); weights exp(l - max l) summed in order in float64;
the first v whose running sum exceeds u * total; -1 for a row with a non-finite logit.

Reads `test_sample PLUGIN_DIR --dump`; every token must match exactly.
usage: sample_reference.py DUMP
"""
import math
import sys

MASK32 = 0xFFFFFFFF
M0, M1 = 0xD2511F53, 0xCD9E8D57  # the paper's multipliers for Philox4x32
W0, W1 = 0x9E3779B9, 0xBB67AE85  # the Weyl sequence's increments (golden ratio, sqrt(3) - 1)


def mulhilo(a, b):
    p = a * b
    return (p >> 32) & MASK32, p & MASK32


def philox4x32(ctr, key, rounds=10):
    x0, x1, x2, x3 = ctr
    k0, k1 = key
    for i in range(rounds):
        if i > 0:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        hi0, lo0 = mulhilo(M0, x0)
        hi1, lo1 = mulhilo(M1, x2)
        x0, x1, x2, x3 = hi1 ^ x1 ^ k0, lo1, hi0 ^ x3 ^ k1, lo0
    return x0, x1, x2, x3


# Random123's kat_vectors: counter (4 words), key (2 words) -> output (4 words)
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK32,) * 4, (MASK32, MASK32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def uniform(seed, row, stream, step):
    out = philox4x32((row & MASK32, row >> 32, stream, step), (seed & MASK32, seed >> 32))
    bits = ((out[0] >> 5) << 26) | (out[1] >> 6)  # 27 + 26 = 53 bits
    return bits / float(1 << 53)


def token(logits, u):
    if not logits or not all(math.isfinite(l) for l in logits):
        return -1
    top = max(logits)
    weights = [math.exp(l - top) for l in logits]
    total = 0.0
    for w in weights:
        total += w
    target, run, last = u * total, 0.0, -1
    for v, w in enumerate(weights):
        run += w
        if run > target:
            return v
        if w > 0:
            last = v
    return last


def parse(path):
    cases, cur = [], None
    with open(path) as f:
        for line in f:
            head, _, rest = line.rstrip("\n").partition(" ")
            if head == "case":
                name, _, nums = rest.partition("|")
                dtype, seed, stream, step, first = nums.split()
                cur = {"name": name, "dtype": dtype, "seed": int(seed), "stream": int(stream),
                       "step": int(step), "first": int(first)}
                cases.append(cur)
            elif head == "axes":
                cur["axes"] = [(a.split("=")[0], int(a.split("=")[1])) for a in rest.split()]
            elif head == "vocab":
                cur["vocab"] = rest
            elif head == "logits":
                cur["logits"] = [float.fromhex(v) for v in rest.split()]
            elif head == "tokens":
                cur["tokens"] = [int(v) for v in rest.split()]
    return cases


def rows_of(case):
    """The rows' logits, rows numbered row-major over the axes other than the vocab axis."""
    names = [a[0] for a in case["axes"]]
    dims = [a[1] for a in case["axes"]]
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    vi = names.index(case["vocab"])
    others = [i for i in range(len(dims)) if i != vi]
    n_rows = 1
    for i in others:
        n_rows *= dims[i]
    x = case["logits"]
    for r in range(n_rows):
        off, rem = 0, r
        for i in reversed(others):
            off += (rem % dims[i]) * strides[i]
            rem //= dims[i]
        yield [x[off + v * strides[vi]] for v in range(dims[vi])]


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    for ctr, key, want in KAT:
        got = philox4x32(ctr, key)
        if got != want:
            print("philox4x32-10 known answer failed: %s %s -> %s, want %s" % (
                [hex(c) for c in ctr], [hex(k) for k in key], [hex(g) for g in got],
                [hex(w) for w in want]))
            return 1
    failures = checked = 0
    for case in parse(sys.argv[1]):
        rows = list(rows_of(case))
        if len(rows) != len(case["tokens"]):
            print("%s: %d rows, %d tokens" % (case["name"], len(rows), len(case["tokens"])))
            failures += 1
            continue
        for r, (logits, got) in enumerate(zip(rows, case["tokens"])):
            u = uniform(case["seed"], case["first"] + r, case["stream"], case["step"])
            want = token(logits, u)
            checked += 1
            if got != want:
                failures += 1
                if failures <= 10:
                    print("%s: row %d (u = %.17g): C drew %d, the reference %d" % (
                        case["name"], r, u, got, want))
    print("sample_reference: %d tokens, %d differ" % (checked, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
