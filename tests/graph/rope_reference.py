"""tests/graph/rope_reference.py — an independent float64 reference for the host's rotary tables.

Reads `test_rope --dump` (each case's config and what core/graph/rope.c computed) and recomputes
inv_freq, the attention factor and the cos/sin tables with the formulas of Hugging Face
transformers' modeling_rope_utils (_compute_default_rope_parameters, _linear_scaling_,
_dynamic_ntk_, _llama3_, _yarn_), written here from those functions in numpy float64 rather than
torch float32. Tolerances: inv_freq and the attention factor to 1e-12 relative; a table entry to
1e-12 * (1 + |angle|) absolute, as one ulp of a frequency moves the angle p * inv_freq by that much.
usage: rope_reference.py DUMP
"""
import math
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is not installed: skipped")
    sys.exit(77)

REL = 1e-12


def default_inv_freq(base, dim):
    return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))


def compute(cfg):
    kind = cfg["rope_type"]
    base = cfg["rope_theta"]
    dim = int(int(cfg["head_dim"]) * cfg["partial_rotary_factor"])
    factor = cfg["factor"]
    if kind == "default":
        return default_inv_freq(base, dim), 1.0
    if kind == "linear":
        return default_inv_freq(base, dim) / factor, 1.0
    if kind == "dynamic":
        max_pos = cfg["original_max_position_embeddings"]
        seq_len = cfg["seq_len"]
        seq_len = seq_len if seq_len > max_pos else max_pos
        base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        return default_inv_freq(base, dim), 1.0
    if kind == "llama3":
        inv_freq = default_inv_freq(base, dim)
        low, high = cfg["low_freq_factor"], cfg["high_freq_factor"]
        old_context_len = cfg["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low
        high_freq_wavelen = old_context_len / high
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
        medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        return np.where(medium, smoothed, inv_freq_llama), 1.0
    if kind == "yarn":
        original = cfg["original_max_position_embeddings"]
        attention_factor = cfg["attention_factor_given"] or None
        mscale, mscale_all_dim = cfg["mscale"], cfg["mscale_all_dim"]

        def get_mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
            else:
                attention_factor = get_mscale(factor)
        beta_fast = cfg["beta_fast"] or 32
        beta_slow = cfg["beta_slow"] or 1

        def correction_dim(rotations):
            return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if cfg["truncate"]:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        pos_freqs = base ** (np.arange(0, dim, 2).astype(np.float64) / dim)
        extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
        extrapolation_factor = 1 - ramp
        inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
        return inv_freq, attention_factor
    raise ValueError("unknown rope_type " + kind)


def parse(path):
    cases, cur, first = [], None, None
    for line in open(path):
        key, _, rest = line.strip().partition(" ")
        if key == "case":
            cur = {"name": rest, "tables": []}
        elif key == "end":
            cases.append(cur)
        elif key == "rope_type":
            cur[key] = rest
        elif key == "first":
            first = int(rest)
        elif key in ("cos", "sin"):
            if key == "cos":
                cur["tables"].append([first, None, None])
            cur["tables"][-1][1 if key == "cos" else 2] = np.array(rest.split(), dtype=np.float64)
        elif key in ("inv_freq", "attention_factor"):
            cur[key] = np.array(rest.split(), dtype=np.float64)
        else:
            cur[key] = float(rest)
    return cases


def main():
    cases = parse(sys.argv[1])
    fails = 0
    for c in cases:
        inv_freq, af = compute(c)
        errs, rel = [], float("nan")
        if inv_freq.shape != c["inv_freq"].shape:
            errs.append("inv_freq has %d values, want %d" % (c["inv_freq"].size, inv_freq.size))
        else:
            rel = float(np.max(np.abs(c["inv_freq"] - inv_freq) / np.abs(inv_freq)))
            if rel > REL:
                errs.append("inv_freq off by %.3g relative" % rel)
        if abs(c["attention_factor"][0] - af) > REL * abs(af):
            errs.append("attention_factor %.17g, want %.17g" % (c["attention_factor"][0], af))
        worst = 0.0
        for first, cos, sin in c["tables"]:
            pos = np.arange(first, first + cos.size // inv_freq.size, dtype=np.float64)
            angle = np.outer(pos, inv_freq)
            tol = REL * (1 + np.abs(angle)) * af
            for got, want in ((cos, af * np.cos(angle)), (sin, af * np.sin(angle))):
                err = np.abs(got.reshape(angle.shape) - want)
                worst = max(worst, float(np.max(err / tol)))
        if worst > 1:
            errs.append("a table entry is off by %.3g x its tolerance" % worst)
        print("%-16s %-7s dims %3d  attention_factor %.6f  inv_freq rel error %.2g  worst table "
              "error %.2g of tolerance%s" % (c["name"], c["rope_type"], inv_freq.size * 2, af, rel,
                                             worst,
                 "" if not errs else "  FAIL: " + "; ".join(errs)))
        fails += bool(errs)
    if len(cases) < 11:
        print("FAIL: only %d cases in the dump" % len(cases))
        fails += 1
    sys.exit(1 if fails else 0)


if __name__ == "__main__":  # importable by tests/models/llama_torch.py
    main()
