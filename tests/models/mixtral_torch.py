"""tests/models/mixtral_torch.py — an independent Mixtral (model_type mixtral), written with
PyTorch the way Hugging Face's MixtralForCausalLM computes it, run in float64 on the weights bora
wrote (model.safetensors, Hugging Face's names and (out, in) layouts) and compared with bora's
logits, loss and every parameter's gradient (outputs.safetensors). The safetensors files, the
case layout, Mistral's attention, the rope frequencies and the tolerances are llama_torch.py's.

What Mixtral puts in place of the Llama MLP, as transformers' modeling_mixtral has it:
- MixtralSparseMoeBlock: router_logits = gate(x) (no bias), softmax over the experts in float,
  torch.topk of num_experts_per_tok, the k weights divided by their sum; each expert
  (MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x)) runs on the tokens that chose it and its
  output, times the token's weight, is index_add_-ed back. Written here as that loop over the
  experts, the tokens of each found with torch.where on the one-hot of the choices.
- load_balancing_loss_func (no attention mask): the routers' logits of all layers concatenated
  into (layers * tokens, experts), softmaxed, their top k one-hot; tokens_per_expert is the mean
  of the one-hot over the rows (k, experts), router_prob_per_expert the mean probability
  (experts); aux = experts * sum(tokens_per_expert * router_prob_per_expert). With
  output_router_logits, transformers' loss is the mean cross-entropy plus
  router_aux_loss_coef * aux.
- router_z_loss_func, ST-MoE's router z-loss (Zoph et al. 2022, eq. 5) as transformers'
  switch_transformers computes it over the routers' logits of all layers concatenated:
  z = sum over the rows of logsumexp(logits)^2, divided by the rows. MixtralConfig has no such
  term; bora's own key router_z_loss_coef (default 0) adds router_z_loss_coef * z to the mean
  loss, whatever output_router_logits says.
- Loss as bora returns it: the summed cross-entropy plus n * router_aux_loss_coef * aux (and
  n * router_z_loss_coef * z), n the targets counted (not -100): bora's host divides the sum by
  n, which gives transformers' loss.
- router_jitter_noise is refused unless 0 (it is noise in training).

The comparison also ablates the load-balancing loss and the z-loss: the reference's loss
without either (where the case has it) must be far from bora's, and without the z-loss so must
the routers' gradients, so the match is owed to them.

usage: /usr/bin/python3 mixtral_torch.py DIR...   each DIR as llama_torch.py's (config.json,
                                                  model.safetensors, inputs.safetensors,
                                                  outputs.safetensors)
       /usr/bin/python3 mixtral_torch.py --hvp DIR...   the same, and hvp.safetensors in each DIR
                                                  (bora's H·v against the double backward)
       /usr/bin/python3 mixtral_torch.py --write-case NAME DIR
                                                  writes one of the self-check's configurations
                                                  (mixtral, mixtral_empty, mixtral_top1,
                                                  mixtral_z; all:
                                                  each as DIR/NAME) as such a DIR
       /usr/bin/python3 mixtral_torch.py --self-check
                                                  checks of the reference itself (see
                                                  self_check)"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt  # noqa: E402  (exits 77 without torch and numpy)
from llama_torch import InputError, linear, loss_sum, rms_norm  # noqa: E402

torch = lt.torch
F = torch.nn.functional

# MixtralConfig's keys and defaults (transformers 4.36 to 4.57)
DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                head_dim=None, hidden_act="silu", max_position_embeddings=4096 * 32,
                rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=1e6,
                sliding_window=None, attention_dropout=0.0, num_experts_per_tok=2,
                num_local_experts=8, output_router_logits=False, router_aux_loss_coef=0.001,
                router_jitter_noise=0.0, rope_scaling=None)


def load_config(cfg, where="config.json"):
    """Mistral's keys through llama_torch (model_type mistral, MixtralConfig's defaults), then
    the experts' keys; errors name the key."""
    if cfg.get("model_type") != "mixtral":
        raise InputError(f"{where}: model_type {cfg.get('model_type')!r} is not mixtral")
    full = dict(DEFAULTS)
    full.update(cfg)
    full["model_type"] = "mistral"
    moe = {k: full.pop(k) for k in ("num_experts_per_tok", "num_local_experts",
                                    "output_router_logits", "router_aux_loss_coef",
                                    "router_jitter_noise", "attention_dropout")}
    moe["router_z_loss_coef"] = full.pop("router_z_loss_coef", 0.0)  # bora's own key
    c = lt.load_config(full, where)
    c.update(moe, model_type="mixtral")
    E, k = c["num_local_experts"], c["num_experts_per_tok"]
    if not isinstance(E, int) or E < 1:
        raise InputError(f"{where}: num_local_experts must be a positive integer (got {E!r})")
    if not isinstance(k, int) or not 1 <= k <= E:
        raise InputError(f"{where}: num_experts_per_tok must be 1 .. num_local_experts {E} "
                         f"(got {k!r})")
    if c["router_jitter_noise"] or c["attention_dropout"]:
        raise InputError(f"{where}: router_jitter_noise and attention_dropout: only 0 is "
                         "modelled")
    return c


def param_shapes(c):
    """llama_torch's names without the MLP, and each layer's router and experts."""
    D, Fd, E = c["hidden_size"], c["intermediate_size"], c["num_local_experts"]
    s = {k: v for k, v in lt.param_shapes(c).items() if ".mlp." not in k}
    for l in range(c["num_hidden_layers"]):
        pre = f"model.layers.{l}.block_sparse_moe."
        s[pre + "gate.weight"] = (E, D)
        for e in range(E):
            for w, shape in (("w1", (Fd, D)), ("w2", (D, Fd)), ("w3", (Fd, D))):
                s[pre + f"experts.{e}.{w}.weight"] = shape
    return s


def check_params(p, c, where="model.safetensors"):
    want = param_shapes(c)
    for name, shape in want.items():
        if name not in p:
            raise InputError(f"{where}: tensor {name} is missing (the config wants it, {shape})")
        if tuple(p[name].shape) != shape:
            raise InputError(f"{where}: tensor {name} is {tuple(p[name].shape)}, the config "
                             f"wants {shape}")
    for name in p:
        if name not in want:
            raise InputError(f"{where}: tensor {name} is not a parameter of this config")


# ---- the model -----------------------------------------------------------------------------------
def sparse_moe(p, c, l, h):
    """MixtralSparseMoeBlock over h (B, T, D): (output (B, T, D), router logits (B*T, E))."""
    pre = f"model.layers.{l}.block_sparse_moe."
    B, T, D = h.shape
    E, k = c["num_local_experts"], c["num_experts_per_tok"]
    x = h.reshape(-1, D)
    router_logits = linear(p, pre + "gate", x)
    weights = F.softmax(router_logits, dim=1)
    weights, selected = torch.topk(weights, k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    mask = F.one_hot(selected, num_classes=E).permute(2, 1, 0)  # (expert, choice, token)
    for e in range(E):
        idx, top_x = torch.where(mask[e])
        if top_x.numel() == 0:
            continue
        cur = x[top_x]
        w = f"{pre}experts.{e}."
        y = linear(p, w + "w2", F.silu(linear(p, w + "w1", cur)) * linear(p, w + "w3", cur))
        out = out.index_add(0, top_x, y * weights[top_x, idx, None])
    return out.reshape(B, T, D), router_logits


def forward_routed(p, c, ids, segments=None, cache=None, start=0):
    """Logits (B, T, vocab) of ids at positions start.., and each layer's router logits."""
    eps = c["rms_norm_eps"]
    T = ids.shape[1]
    pos = torch.arange(start, start + T)
    inv_freq, scale = lt.rope_inv_freq(c, start + T)
    freqs = pos[:, None].double() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * scale, emb.sin() * scale
    x = p["model.embed_tokens.weight"][ids]
    routers = []
    for l in range(c["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        x = x + lt.attention(p, c, l, rms_norm(x, p[pre + "input_layernorm.weight"], eps), pos,
                             cos, sin, segments, cache)
        y, r = sparse_moe(p, c, l, rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps))
        x = x + y
        routers.append(r)
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight" if c["tie_word_embeddings"] else "lm_head.weight"]
    return x @ head.T, tuple(routers)


def forward(p, c, ids, segments=None, cache=None, start=0):
    return forward_routed(p, c, ids, segments, cache, start)[0]


def load_balancing_loss(routers, E, k):
    """transformers' load_balancing_loss_func without an attention mask."""
    logits = torch.cat(routers, dim=0)
    weights = F.softmax(logits, dim=-1)
    _, selected = torch.topk(weights, k, dim=-1)
    expert_mask = F.one_hot(selected, E)
    tokens_per_expert = torch.mean(expert_mask.double(), dim=0)  # (k, E)
    router_prob_per_expert = torch.mean(weights, dim=0)  # (E,)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * E


def router_z_loss(routers):
    """transformers' router_z_loss_func (switch_transformers) over the layers' router logits
    concatenated: the mean over the rows of logsumexp(logits)^2."""
    logits = torch.cat(routers, dim=0)
    log_z = torch.logsumexp(logits, dim=-1)
    return torch.sum(log_z ** 2) / logits.shape[0]


def total_loss(c, logits, routers, targets, aux=True, z=True):
    """transformers' loss (mean cross-entropy, plus coef * aux with output_router_logits), plus
    router_z_loss_coef * z, times the targets counted: what bora's train graph returns."""
    n = (targets != -100).sum()
    loss = loss_sum(logits, targets) / n
    if aux and c["output_router_logits"]:
        loss = loss + c["router_aux_loss_coef"] * load_balancing_loss(
            routers, c["num_local_experts"], c["num_experts_per_tok"])
    if z and c["router_z_loss_coef"]:
        loss = loss + c["router_z_loss_coef"] * router_z_loss(routers)
    return loss * n


def routed_counts(c, routers):
    """Per layer, the rows each expert gets, and the smallest gap between the k-th and the
    next probability (bora's float32 routing picks the same experts when it is wide)."""
    counts, gap = [], math.inf
    k, E = c["num_experts_per_tok"], c["num_local_experts"]
    for r in routers:
        probs = F.softmax(r.detach(), dim=-1)
        top = torch.topk(probs, min(k + 1, E), dim=-1)
        counts.append(torch.bincount(top.indices[:, :k].reshape(-1), minlength=E).tolist())
        if k < E:
            gap = min(gap, (top.values[:, k - 1] - top.values[:, k]).min().item())
    return counts, gap


# ---- against bora --------------------------------------------------------------------------------
def compare(d, hvp=False):
    print(f"{d}:")
    c, params, ids, targets, seg, ours = lt.read_case(d, load_config, check_params)
    logits, routers = forward_routed(params, c, ids, seg)
    counts, gap = routed_counts(c, routers)
    print(f"rows per expert, per layer: {counts}; narrowest top-k gap {gap:.3g}")
    loss = total_loss(c, logits, routers, targets)
    for t in params.values():  # an expert no token reaches has a zero gradient, not none
        t.grad = torch.zeros_like(t)
    ok = lt.check_outputs(d, params, logits, loss, ours, hvp)
    if c["output_router_logits"]:  # the load-balancing loss must be what makes the match
        bare = total_loss(c, logits, routers, targets, aux=False).item()
        rel = abs(bare - ours["loss_sum"].item()) / abs(bare)
        print(f"ablation: without the load-balancing loss the loss is {rel:.3g} from bora's "
              "(> 1e-3)")
        ok &= rel > 1e-3
    if c["router_z_loss_coef"]:  # so must the z-loss, in the loss and the routers' gradients
        logits, routers = forward_routed(params, c, ids, seg)  # the first graph is spent
        bare = total_loss(c, logits, routers, targets, z=False)
        rel = abs(bare.item() - ours["loss_sum"].item()) / abs(bare.item())
        gates = [k for k in params if k.endswith("gate.weight")]
        grads = torch.autograd.grad(bare, [params[k] for k in gates])
        far = min((g - ours["grad." + k].double()).abs().max().item() / g.abs().max().item()
                  for k, g in zip(gates, grads))
        print(f"ablation: without the z-loss the loss is {rel:.3g} from bora's (> 1e-3), the "
              f"routers' gradients at least {far:.3g} of their scale (> 2e-2)")
        ok &= rel > 1e-3 and far > 2e-2
    print("mixtral_torch: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


# ---- checks of the reference itself --------------------------------------------------------------
# The three configurations bora is compared on, tiny: two layers, batch 2, 16 positions,
# vocabulary 50, heads 4 over 2 kv heads, seeds fixed.
# mixtral: 4 experts, top 2, a window of 5, every expert routed rows in every layer, documents
#   (segment_ids) in the written case, no load-balancing loss.
# mixtral_empty: 5 experts, top 2, no window, tied head: the routers of experts 0/1 and 2/3 are
#   opposite (one of each pair has a positive logit for every token) and expert 4's is zero, so
#   expert 4 gets no row in any layer; coefficient 0.3; bora's gradient_checkpointing on (the
#   reference ignores that key).
# mixtral_top1: 3 experts, top 1 (each token's weight renormalises to 1), so the routers'
#   gradient is the load-balancing loss's alone (coefficient 0.2).
# mixtral_z: 4 experts, top 2, no load-balancing loss, the router z-loss (coefficient 0.05,
#   large enough that its share of the routers' gradient shows).
# Without the load-balancing loss a router row gets a gradient only through the chosen experts'
# renormalised weights: zero with top 1, and zero for an expert no token chooses (its
# probability cancels in the renormalisation), which the comparison could only match as noise
# against noise; so the two cases with such rows have it.
BASE = dict(model_type="mixtral", vocab_size=50, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, hidden_size=32, intermediate_size=24, rms_norm_eps=1e-5)
CONFIGS = {
    "mixtral": dict(BASE, num_local_experts=4, num_experts_per_tok=2, sliding_window=5,
                    output_router_logits=False),
    "mixtral_empty": dict(BASE, num_local_experts=5, num_experts_per_tok=2,
                          tie_word_embeddings=True, output_router_logits=True,
                          router_aux_loss_coef=0.3, gradient_checkpointing=True),
    "mixtral_top1": dict(BASE, num_local_experts=3, num_experts_per_tok=1,
                         output_router_logits=True, router_aux_loss_coef=0.2),
    "mixtral_z": dict(BASE, num_local_experts=4, num_experts_per_tok=2,
                      output_router_logits=False, router_z_loss_coef=0.05),
}
SEEDS = dict(mixtral=0, mixtral_empty=2, mixtral_top1=1, mixtral_z=3)  # routing passes (e)
B, T = 2, 16
DOC = 6  # the written mixtral case's second document starts here


def random_params(c, gen, empty):
    p = {}
    for name, shape in param_shapes(c).items():
        r = torch.randn(shape, generator=gen)
        if name.endswith("norm.weight"):
            p[name] = 1 + 0.2 * r
        elif "embed" in name or "lm_head" in name:
            p[name] = 0.5 * r
        elif name.endswith("gate.weight"):  # router logits of order 1
            p[name] = 2 * r / math.sqrt(shape[1])
            if empty:  # experts 1 and 3 opposite 0 and 2, expert 4 zero: 4 never in the top 2
                p[name][1], p[name][3], p[name][4] = -p[name][0], -p[name][2], 0
        else:
            p[name] = r / math.sqrt(shape[1])
    return p


def make_case(name):
    cfg = CONFIGS[name]
    c = load_config(cfg, f"self-check {name}")
    gen = torch.Generator().manual_seed(SEEDS[name])
    p = random_params(c, gen, name == "mixtral_empty")
    ids = torch.randint(c["vocab_size"], (B, T), generator=gen)
    targets = torch.roll(ids, -1, 1)
    targets[:, -1] = -100  # nothing follows the last position
    targets[1, 3] = -100
    return cfg, c, p, ids, targets, gen


def write_case(name, d):
    if name == "all":
        return max(write_case(n, f"{d}/{n}") for n in CONFIGS)
    if name not in CONFIGS:
        raise InputError(f"--write-case: {name!r} is not one of {', '.join(CONFIGS)}")
    cfg, c, p, ids, targets, _ = make_case(name)
    p = {k: v.float().double().requires_grad_(True) for k, v in p.items()}  # as stored
    seg = case_segments(name)
    logits, routers = forward_routed(p, c, ids, seg)
    loss = total_loss(c, logits, routers, targets)
    for t in p.values():  # an expert no token reaches has a zero gradient, not none
        t.grad = torch.zeros_like(t)
    loss.backward()
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    lt.write_safetensors(f"{d}/model.safetensors", p)
    inputs = dict(input_ids=ids, targets=targets)
    if seg is not None:
        inputs["segment_ids"] = seg
    lt.write_safetensors(f"{d}/inputs.safetensors", inputs)
    outputs = dict(logits=logits, loss_sum=loss.reshape(()))
    outputs.update({"grad." + k: v.grad for k, v in p.items()})
    lt.write_safetensors(f"{d}/outputs.safetensors", outputs)
    print(f"mixtral_torch: wrote {name} to {d}")
    return 0


def dense_moe(p, c, l, h):
    """The block computed densely: every expert on every token, times the token's renormalised
    weight for it (0 where the expert is not among its top k)."""
    pre = f"model.layers.{l}.block_sparse_moe."
    x = h.reshape(-1, h.shape[-1])
    probs = F.softmax(linear(p, pre + "gate", x), dim=-1)
    keep = probs >= torch.topk(probs, c["num_experts_per_tok"], dim=-1).values[:, -1:]
    w = probs * keep
    w = w / w.sum(-1, keepdim=True)
    out = 0
    for e in range(c["num_local_experts"]):
        s = f"{pre}experts.{e}."
        y = linear(p, s + "w2", F.silu(linear(p, s + "w1", x)) * linear(p, s + "w3", x))
        out = out + w[:, e:e + 1] * y
    return out.reshape(h.shape)


def check_dense(p, c, ids):
    """(b) the sparse block (index_add_ per expert) equals the dense one on every layer's input."""
    x, worst = torch.randn(B, T, c["hidden_size"], generator=torch.Generator().manual_seed(7)), 0
    for l in range(c["num_hidden_layers"]):
        worst = max(worst, lt.diff(sparse_moe(p, c, l, x)[0], dense_moe(p, c, l, x)))
    return worst < 1e-12, f"largest difference {worst:.2g} (< 1e-12)"


def check_gradients(p, c, ids, targets, gen):
    """(c) autograd of the whole loss (load balancing included) against central differences
    (step 1e-5), two elements of every parameter: |fd - ag| <= 1e-7 + 1e-6 |ag|. The routing
    stays put under so small a step (its narrowest gap is far wider)."""
    def loss_of(q):
        logits, routers = forward_routed(q, c, ids)
        return total_loss(c, logits, routers, targets)
    leaves = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    for t in leaves.values():  # an expert no token reaches has a zero gradient, not none
        t.grad = torch.zeros_like(t)
    loss_of(leaves).backward()
    worst, h = 0.0, 1e-5
    with torch.no_grad():
        for name, t in p.items():
            for _ in range(2):
                i = torch.randint(t.numel(), (1,), generator=gen).item()
                x = t.view(-1)
                old = x[i].item()
                x[i] = old + h
                up = loss_of(p).item()
                x[i] = old - h
                down = loss_of(p).item()
                x[i] = old
                ag = leaves[name].grad.view(-1)[i].item()
                worst = max(worst, abs((up - down) / (2 * h) - ag) / (1e-7 + 1e-6 * abs(ag)))
    return worst < 1, f"{len(p)} tensors, worst difference {worst:.2g} of its tolerance"


def check_aux(c):
    """(d) the load-balancing loss on hand-made routers: uniform probabilities give k (every
    expert gets k/E of the rows, probability 1/E each: E * E * (k/E) * (1/E)); all rows sent to
    the same k experts with probability near 1/k each give about E (E * k * 1 * (1/k))."""
    E, k = c["num_local_experts"], c["num_experts_per_tok"]
    uniform = load_balancing_loss((torch.zeros(6, E), torch.zeros(4, E)), E, k).item()
    skew = torch.full((10, E), -30.0)
    skew[:, :k] = 0
    lopsided = load_balancing_loss((skew,), E, k).item()
    ok = abs(uniform - k) < 1e-12 and abs(lopsided - E) < 1e-9
    return ok, f"uniform {uniform:.6g} (want {k}), lopsided {lopsided:.6g} (want {E})"


def check_z(c):
    """(h) the router z-loss on hand-made routers: equal logits a give (a + log E)^2 per row; a
    row with one logit far above the rest gives that logit squared; rows of both kinds in two
    layers, their mean."""
    E = c["num_local_experts"]
    flat = router_z_loss((torch.full((3, E), 0.5), torch.full((5, E), 0.5))).item()
    peak = torch.full((2, E), -40.0)
    peak[:, 1] = 3.0
    mixed = router_z_loss((torch.zeros(2, E), peak)).item()
    want_flat, want_mixed = (0.5 + math.log(E)) ** 2, (math.log(E) ** 2 + 9) / 2
    ok = abs(flat - want_flat) < 1e-12 and abs(mixed - want_mixed) < 1e-12
    return ok, f"equal {flat:.6g} (want {want_flat:.6g}), mixed {mixed:.6g} (want {want_mixed:.6g})"


def case_segments(name):
    """The written case's segment_ids: two documents per row in mixtral, none elsewhere."""
    return (torch.arange(T) >= DOC).long().expand(B, T).clone() if name == "mixtral" else None


def check_routing(name, p, c, ids):
    """(e) the routing the written case means to test: every expert gets rows in every layer
    (mixtral, mixtral_top1), or expert 4 none (mixtral_empty); and the k-th and next
    probabilities are at least 2e-4 apart, so float32 (errors near 1e-6) picks the same
    experts."""
    with torch.no_grad():
        counts, gap = routed_counts(c, forward_routed(p, c, ids, case_segments(name))[1])
    if name == "mixtral_empty":
        ok = all(r[4] == 0 and min(r[:4]) > 0 for r in counts)
    else:
        ok = all(min(r) > 0 for r in counts)
    return ok and gap > 2e-4, f"rows per expert {counts}, narrowest gap {gap:.3g} (> 2e-4)"


def self_check():
    """Each configuration through (a)-(h): what can be checked of the reference without bora."""
    ok = True
    for name in CONFIGS:
        _, c, p, ids, targets, gen = make_case(name)
        check_params(p, c)
        results = [("(a) kv cache", lt.check_cache(p, c, ids, fwd=forward)),
                   ("(b) sparse = dense", check_dense(p, c, ids)),
                   ("(c) gradients", check_gradients(p, c, ids, targets, gen)),
                   ("(d) balance loss", check_aux(c)),
                   ("(e) routing", check_routing(name, p, c, ids)),
                   ("(f) window", lt.check_window(p, c, ids, fwd=forward)),
                   ("(g) documents", lt.check_segments(p, c, ids, fwd=forward)),
                   ("(h) z-loss", check_z(c))]
        for what, (good, text) in results:
            print(f"{name:13s} {what:20s} {'ok  ' if good else 'FAIL'} {text}")
            ok &= good
    print("mixtral_torch --self-check: " + ("all checks passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    lt.main("mixtral_torch", __doc__, write_case, self_check, compare)
