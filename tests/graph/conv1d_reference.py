"""tests/graph/conv1d_reference.py — an independent float64 reference for bora's conv1d.

Reads `test_conv1d PLUGIN_DIR --dump` (per case: x's and w's named axes in their order, the
options, the values of x, w and the upstream gradient u, and what the C computed: y and the
gradients of sum(y * u) to x and w) and recomputes all three with PyTorch's
torch.nn.functional.conv1d (stride, padding, no bias) and autograd in float64, the axes brought
to PyTorch's (N, C, L) and (out, in, kernel) by name. Under trainer.mp c=bf16 ("bf16") the C
multiplies bf16 copies of x, w and dy = u, so the reference rounds those to bf16 first; the sums
stay f32 there, f64 here.

Tolerances, against each element's scale (the same computation on |x|, |w|, |u|, which bounds
the rounding error of any summation order): f64 1e-12, f32 and bf16 2e-6 (about 32 f32 ulps).
usage: conv1d_reference.py DUMP
"""
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch is not installed: skipped")
    sys.exit(77)

TOL = {"f64": 1e-12, "f32": 2e-6, "bf16": 2e-6}


def parse(path):
    cases, cur = [], None
    for line in open(path):
        parts = line.split()
        if not parts:
            continue
        key, rest = parts[0], parts[1:]
        if key == "case":
            cur = {"name": rest[0], "kind": rest[1], "path": rest[2]}
            it = iter(rest[3:])
            for k in it:
                cur[k] = next(it)
            cases.append(cur)
        elif key.endswith("axes"):
            cur[key] = [(a.split(":")[0], int(a.split(":")[1])) for a in rest]
        else:
            cur[key] = torch.tensor([float(v) for v in rest], dtype=torch.float64)
    return cases


def named(values, axes):
    return values.reshape([s for _, s in axes])


def to_order(t, axes, order):
    names = [n for n, _ in axes]
    return t.permute([names.index(n) for n in order])


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float64)


def reference(c, x, w, u):
    """y, dx, dw in the C's axis orders for x (xaxes), w (waxes) and u (yaxes)."""
    length, cin, kernel = c["length"], c["in"], c["kernel"]
    xaxes, waxes, yaxes = c["xaxes"], c["waxes"], c["yaxes"]
    out = [n for n, _ in waxes if n not in (cin, kernel)][0]
    batch = [n for n, _ in xaxes if n not in (length, cin)]
    sizes = dict(xaxes)
    bsizes = [sizes[n] for n in batch]
    nb = 1
    for s in bsizes:
        nb *= s
    xc = to_order(named(x, xaxes), xaxes, batch + [cin, length]).reshape(nb, sizes[cin], sizes[length])
    wc = to_order(named(w, waxes), waxes, [out, cin, kernel]).contiguous()
    ycanon = batch + [out, length]
    uc = to_order(named(u, yaxes), yaxes, ycanon).reshape(nb, dict(waxes)[out], -1)
    xc = xc.clone().requires_grad_(True)
    wc = wc.clone().requires_grad_(True)
    y = F.conv1d(xc, wc, stride=int(c["stride"]) or 1, padding=int(c["padding"]))
    (y * uc).sum().backward()
    ybatch = y.detach().reshape(bsizes + [y.shape[1], y.shape[2]])
    y_out = ybatch.permute([ycanon.index(n) for n, _ in yaxes]).reshape(-1)
    dx = xc.grad.reshape(bsizes + [sizes[cin], sizes[length]])
    xcanon = batch + [cin, length]
    dx_out = dx.permute([xcanon.index(n) for n, _ in xaxes]).reshape(-1)
    wcanon = [out, cin, kernel]
    dw_out = wc.grad.permute([wcanon.index(n) for n, _ in waxes]).reshape(-1)
    return y_out, dx_out, dw_out


def main():
    cases = parse(sys.argv[1])
    if not cases:
        print("no cases in the dump")
        return 1
    failures = 0
    seen = set()
    for c in cases:
        x, w, u = c["x"], c["w"], c["u"]
        if c["kind"] == "bf16":
            x, w, u = bf16(x), bf16(w), bf16(u)
        want = reference(c, x, w, u)
        scale = reference(c, x.abs(), w.abs(), u.abs())
        tol = TOL[c["kind"]]
        for what, got, ref, sc in zip(("y", "dx", "dw"), (c["y"], c["dx"], c["dw"]), want, scale):
            if got.shape != ref.shape:
                print(f"{c['name']} {c['kind']} {c['path']}: {what} has {got.numel()} values, want {ref.numel()}")
                failures += 1
                continue
            err = (got - ref).abs()
            bad = err > tol * sc + 1e-300
            if bool(bad.any()):
                i = int(bad.nonzero()[0][0])
                print(f"{c['name']} {c['kind']} {c['path']}: {what}[{i}] = {got[i].item():.17g}, "
                      f"want {ref[i].item():.17g} (scale {sc[i].item():.3g})")
                failures += 1
        seen.add((c["name"], c["kind"], c["path"]))
    print(f"conv1d_reference: {len(cases)} cases ({len({n for n, _, _ in seen})} shapes, "
          f"f64/f32/bf16, kernels and decomposition), {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
