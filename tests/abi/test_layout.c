/* tests/abi/test_layout.c — pins the size and every member offset of every SDK struct.
 *
 * A change to an SDK struct fails this file at compile time. That is the moment to decide: an
 * appended optional member is a minor ABI bump, anything else a major one (a plugin built for another major is refused).
 * Bump BORA_ABI_MAJOR/MINOR in sdk/bora/plugin.h in the same commit, then update the numbers
 * here (print them with sizeof and offsetof) and the pinned version below.
 * check_layout_coverage.sh makes sure no struct is missed.
 * The numbers are for LP64 targets (x86-64, AArch64). */
#include <bora/backend.h>
#include <bora/model.h>
#include <bora/optimizer.h>
#include <bora/tracker.h>

#include <stdio.h>

#if defined(__LP64__)
_Static_assert(BORA_ABI_MAJOR == 1 && BORA_ABI_MINOR == 15,
               "the ABI version changed: check the pinned layouts below, then update this line");
/* op ids are ABI: appended, never renumbered */
_Static_assert(BORA_OP_XENT == 27 && BORA_OP_XENT_GRAD == 28 && BORA_OP_WRITE_SLICE == 37 &&
                   BORA_OP_XENT_FUSED == 38 && BORA_OP_SUM_SQUARES == 39 && BORA_OP_SIN == 40 &&
                   BORA_OP_WHERE == 50 && BORA_OP_IOTA == 51 && BORA_OP_RMS_NORM == 52 &&
                   BORA_OP_RMS_NORM_GRAD == 53 && BORA_OP_ROPE == 54 && BORA_OP_SAMPLE == 55 &&
                   BORA_OP_TOP_K == 56 && BORA_OP_ARGSORT == 57 && BORA_OP_BINCOUNT == 58 &&
                   BORA_OP_GROUPED_MATMUL == 59 && BORA_OP_GROUPED_MATMUL_GRAD == 60 &&
                   BORA_OP_CONV1D == 61 && BORA_OP_CONV1D_GRAD_INPUT == 62 &&
                   BORA_OP_CONV1D_GRAD_WEIGHT == 63 && BORA_OP_COUNT_ == 64,
               "op ids changed");
/* parameter flags are stored in checkpoints' parameter slots and passed to optimizers */
_Static_assert(BORA_PARAM_NO_DECAY == 1u && BORA_PARAM_IN_OUT == 2u, "parameter flags changed");

static void layout(void)
{
    _Static_assert(sizeof(bora_key) == 32, "size of bora_key");
    _Static_assert(offsetof(bora_key, name) == 0, "bora_key.name");
    _Static_assert(offsetof(bora_key, type) == 8, "bora_key.type");
    _Static_assert(offsetof(bora_key, reserved) == 12, "bora_key.reserved");
    _Static_assert(offsetof(bora_key, default_value) == 16, "bora_key.default_value");
    _Static_assert(offsetof(bora_key, doc) == 24, "bora_key.doc");
    _Static_assert(sizeof(bora_component) == 32, "size of bora_component");
    _Static_assert(offsetof(bora_component, struct_size) == 0, "bora_component.struct_size");
    _Static_assert(offsetof(bora_component, kind) == 4, "bora_component.kind");
    _Static_assert(offsetof(bora_component, name) == 8, "bora_component.name");
    _Static_assert(offsetof(bora_component, summary) == 16, "bora_component.summary");
    _Static_assert(offsetof(bora_component, keys) == 24, "bora_component.keys");
    _Static_assert(sizeof(bora_plugin) == 48, "size of bora_plugin");
    _Static_assert(offsetof(bora_plugin, abi_major) == 0, "bora_plugin.abi_major");
    _Static_assert(offsetof(bora_plugin, abi_minor) == 4, "bora_plugin.abi_minor");
    _Static_assert(offsetof(bora_plugin, struct_size) == 8, "bora_plugin.struct_size");
    _Static_assert(offsetof(bora_plugin, reserved) == 12, "bora_plugin.reserved");
    _Static_assert(offsetof(bora_plugin, name) == 16, "bora_plugin.name");
    _Static_assert(offsetof(bora_plugin, version) == 24, "bora_plugin.version");
    _Static_assert(offsetof(bora_plugin, init) == 32, "bora_plugin.init");
    _Static_assert(offsetof(bora_plugin, fini) == 40, "bora_plugin.fini");
    _Static_assert(sizeof(bora_host) == 144, "size of bora_host");
    _Static_assert(offsetof(bora_host, struct_size) == 0, "bora_host.struct_size");
    _Static_assert(offsetof(bora_host, abi_major) == 4, "bora_host.abi_major");
    _Static_assert(offsetof(bora_host, abi_minor) == 8, "bora_host.abi_minor");
    _Static_assert(offsetof(bora_host, reserved) == 12, "bora_host.reserved");
    _Static_assert(offsetof(bora_host, ctx) == 16, "bora_host.ctx");
    _Static_assert(offsetof(bora_host, add) == 24, "bora_host.add");
    _Static_assert(offsetof(bora_host, log) == 32, "bora_host.log");
    _Static_assert(offsetof(bora_host, fail) == 40, "bora_host.fail");
    _Static_assert(offsetof(bora_host, alloc) == 48, "bora_host.alloc");
    _Static_assert(offsetof(bora_host, free) == 56, "bora_host.free");
    _Static_assert(offsetof(bora_host, config_child) == 64, "bora_host.config_child");
    _Static_assert(offsetof(bora_host, config_int) == 72, "bora_host.config_int");
    _Static_assert(offsetof(bora_host, config_float) == 80, "bora_host.config_float");
    _Static_assert(offsetof(bora_host, config_bool) == 88, "bora_host.config_bool");
    _Static_assert(offsetof(bora_host, config_string) == 96, "bora_host.config_string");
    _Static_assert(offsetof(bora_host, config_duration) == 104, "bora_host.config_duration");
    _Static_assert(offsetof(bora_host, config_bytes) == 112, "bora_host.config_bytes");
    _Static_assert(offsetof(bora_host, config_list_len) == 120, "bora_host.config_list_len");
    _Static_assert(offsetof(bora_host, config_list_at) == 128, "bora_host.config_list_at");
    _Static_assert(offsetof(bora_host, config_component) == 136, "bora_host.config_component");
    _Static_assert(sizeof(bora_axis) == 16, "size of bora_axis");
    _Static_assert(offsetof(bora_axis, name) == 0, "bora_axis.name");
    _Static_assert(offsetof(bora_axis, size) == 8, "bora_axis.size");
    _Static_assert(sizeof(bora_init) == 16, "size of bora_init");
    _Static_assert(offsetof(bora_init, kind) == 0, "bora_init.kind");
    _Static_assert(offsetof(bora_init, reserved) == 4, "bora_init.reserved");
    _Static_assert(offsetof(bora_init, value) == 8, "bora_init.value");
    _Static_assert(sizeof(bora_opt_scalar) == 16, "size of bora_opt_scalar");
    _Static_assert(offsetof(bora_opt_scalar, struct_size) == 0, "bora_opt_scalar.struct_size");
    _Static_assert(offsetof(bora_opt_scalar, reserved) == 4, "bora_opt_scalar.reserved");
    _Static_assert(offsetof(bora_opt_scalar, value) == 8, "bora_opt_scalar.value");
    _Static_assert(sizeof(bora_opt_act) == 8, "size of bora_opt_act");
    _Static_assert(offsetof(bora_opt_act, struct_size) == 0, "bora_opt_act.struct_size");
    _Static_assert(offsetof(bora_opt_act, op) == 4, "bora_opt_act.op");
    _Static_assert(sizeof(bora_opt_reduce) == 8, "size of bora_opt_reduce");
    _Static_assert(offsetof(bora_opt_reduce, struct_size) == 0, "bora_opt_reduce.struct_size");
    _Static_assert(offsetof(bora_opt_reduce, n_reduced) == 4, "bora_opt_reduce.n_reduced");
    _Static_assert(sizeof(bora_opt_norm) == 16, "size of bora_opt_norm");
    _Static_assert(offsetof(bora_opt_norm, struct_size) == 0, "bora_opt_norm.struct_size");
    _Static_assert(offsetof(bora_opt_norm, reserved) == 4, "bora_opt_norm.reserved");
    _Static_assert(offsetof(bora_opt_norm, eps) == 8, "bora_opt_norm.eps");
    _Static_assert(sizeof(bora_opt_rms_norm) == 24, "size of bora_opt_rms_norm");
    _Static_assert(offsetof(bora_opt_rms_norm, struct_size) == 0, "bora_opt_rms_norm.struct_size");
    _Static_assert(offsetof(bora_opt_rms_norm, reserved) == 4, "bora_opt_rms_norm.reserved");
    _Static_assert(offsetof(bora_opt_rms_norm, eps) == 8, "bora_opt_rms_norm.eps");
    _Static_assert(offsetof(bora_opt_rms_norm, weight_offset) == 16,
                   "bora_opt_rms_norm.weight_offset");
    _Static_assert(sizeof(bora_opt_xent) == 16, "size of bora_opt_xent");
    _Static_assert(offsetof(bora_opt_xent, struct_size) == 0, "bora_opt_xent.struct_size");
    _Static_assert(offsetof(bora_opt_xent, ignore_index) == 4, "bora_opt_xent.ignore_index");
    _Static_assert(offsetof(bora_opt_xent, z_loss) == 8, "bora_opt_xent.z_loss");
    _Static_assert(sizeof(bora_opt_attention) == 48, "size of bora_opt_attention");
    _Static_assert(offsetof(bora_opt_attention, struct_size) == 0,
                   "bora_opt_attention.struct_size");
    _Static_assert(offsetof(bora_opt_attention, causal) == 4, "bora_opt_attention.causal");
    _Static_assert(offsetof(bora_opt_attention, scale) == 8, "bora_opt_attention.scale");
    _Static_assert(offsetof(bora_opt_attention, segments) == 16, "bora_opt_attention.segments");
    _Static_assert(offsetof(bora_opt_attention, key_length) == 20, "bora_opt_attention.key_length");
    _Static_assert(offsetof(bora_opt_attention, product_dtype) == 24,
                   "bora_opt_attention.product_dtype");
    _Static_assert(offsetof(bora_opt_attention, sliding_window) == 32,
                   "bora_opt_attention.sliding_window (ABI 1.9)");
    _Static_assert(offsetof(bora_opt_attention, softcap) == 40,
                   "bora_opt_attention.softcap (ABI 1.12)");
    _Static_assert(sizeof(bora_opt_pad) == 16, "size of bora_opt_pad");
    _Static_assert(offsetof(bora_opt_pad, struct_size) == 0, "bora_opt_pad.struct_size");
    _Static_assert(offsetof(bora_opt_pad, axis) == 4, "bora_opt_pad.axis");
    _Static_assert(offsetof(bora_opt_pad, start) == 8, "bora_opt_pad.start");
    _Static_assert(sizeof(bora_opt_iota) == 24, "size of bora_opt_iota");
    _Static_assert(offsetof(bora_opt_iota, start) == 8, "bora_opt_iota.start");
    _Static_assert(offsetof(bora_opt_iota, step) == 16, "bora_opt_iota.step");
    _Static_assert(sizeof(bora_opt_rope) == 40, "size of bora_opt_rope");
    _Static_assert(offsetof(bora_opt_rope, position_axis) == 4, "bora_opt_rope.position_axis");
    _Static_assert(offsetof(bora_opt_rope, dim_axis) == 8, "bora_opt_rope.dim_axis");
    _Static_assert(offsetof(bora_opt_rope, layout) == 12, "bora_opt_rope.layout");
    _Static_assert(offsetof(bora_opt_rope, rotary_dims) == 16, "bora_opt_rope.rotary_dims");
    _Static_assert(offsetof(bora_opt_rope, offset) == 24, "bora_opt_rope.offset");
    _Static_assert(offsetof(bora_opt_rope, inverse) == 32, "bora_opt_rope.inverse");
    _Static_assert(offsetof(bora_opt_rope, reserved) == 36, "bora_opt_rope.reserved");
    _Static_assert(sizeof(bora_rope_spec) == 112, "size of bora_rope_spec");
    _Static_assert(offsetof(bora_rope_spec, kind) == 4, "bora_rope_spec.kind");
    _Static_assert(offsetof(bora_rope_spec, theta) == 8, "bora_rope_spec.theta");
    _Static_assert(offsetof(bora_rope_spec, rotary_dims) == 16, "bora_rope_spec.rotary_dims");
    _Static_assert(offsetof(bora_rope_spec, factor) == 24, "bora_rope_spec.factor");
    _Static_assert(offsetof(bora_rope_spec, original_max_position_embeddings) == 32,
                   "bora_rope_spec.original_max_position_embeddings");
    _Static_assert(offsetof(bora_rope_spec, low_freq_factor) == 40, "bora_rope_spec.low_freq");
    _Static_assert(offsetof(bora_rope_spec, high_freq_factor) == 48, "bora_rope_spec.high_freq");
    _Static_assert(offsetof(bora_rope_spec, beta_fast) == 56, "bora_rope_spec.beta_fast");
    _Static_assert(offsetof(bora_rope_spec, beta_slow) == 64, "bora_rope_spec.beta_slow");
    _Static_assert(offsetof(bora_rope_spec, mscale) == 72, "bora_rope_spec.mscale");
    _Static_assert(offsetof(bora_rope_spec, mscale_all_dim) == 80, "bora_rope_spec.mscale_all");
    _Static_assert(offsetof(bora_rope_spec, attention_factor) == 88, "bora_rope_spec.attn");
    _Static_assert(offsetof(bora_rope_spec, truncate) == 96, "bora_rope_spec.truncate");
    _Static_assert(offsetof(bora_rope_spec, reserved) == 100, "bora_rope_spec.reserved");
    _Static_assert(offsetof(bora_rope_spec, seq_len) == 104, "bora_rope_spec.seq_len");
    _Static_assert(sizeof(bora_rope_opts) == 48, "size of bora_rope_opts");
    _Static_assert(offsetof(bora_rope_opts, layout) == 4, "bora_rope_opts.layout");
    _Static_assert(offsetof(bora_rope_opts, position_axis) == 8, "bora_rope_opts.position_axis");
    _Static_assert(offsetof(bora_rope_opts, head_dim_axis) == 16, "bora_rope_opts.head_dim_axis");
    _Static_assert(offsetof(bora_rope_opts, spec) == 24, "bora_rope_opts.spec");
    _Static_assert(offsetof(bora_rope_opts, offset) == 32, "bora_rope_opts.offset");
    _Static_assert(offsetof(bora_rope_opts, position) == 40, "bora_rope_opts.position");
    _Static_assert(sizeof(bora_dot_opts) == 16, "size of bora_dot_opts");
    _Static_assert(offsetof(bora_dot_opts, struct_size) == 0, "bora_dot_opts.struct_size");
    _Static_assert(offsetof(bora_dot_opts, activation) == 4, "bora_dot_opts.activation");
    _Static_assert(offsetof(bora_dot_opts, bias) == 8, "bora_dot_opts.bias");
    _Static_assert(sizeof(bora_xent_opts) == 16, "size of bora_xent_opts");
    _Static_assert(offsetof(bora_xent_opts, struct_size) == 0, "bora_xent_opts.struct_size");
    _Static_assert(offsetof(bora_xent_opts, ignore_index) == 4, "bora_xent_opts.ignore_index");
    _Static_assert(offsetof(bora_xent_opts, z_loss) == 8, "bora_xent_opts.z_loss");
    _Static_assert(sizeof(bora_attention_opts) == 96, "size of bora_attention_opts");
    _Static_assert(offsetof(bora_attention_opts, struct_size) == 0,
                   "bora_attention_opts.struct_size");
    _Static_assert(offsetof(bora_attention_opts, causal) == 4, "bora_attention_opts.causal");
    _Static_assert(offsetof(bora_attention_opts, scale) == 8, "bora_attention_opts.scale");
    _Static_assert(offsetof(bora_attention_opts, segment_ids) == 16,
                   "bora_attention_opts.segment_ids");
    _Static_assert(offsetof(bora_attention_opts, query_axis) == 24,
                   "bora_attention_opts.query_axis");
    _Static_assert(offsetof(bora_attention_opts, key_axis) == 32, "bora_attention_opts.key_axis");
    _Static_assert(offsetof(bora_attention_opts, head_dim_axis) == 40,
                   "bora_attention_opts.head_dim_axis");
    _Static_assert(offsetof(bora_attention_opts, key_length) == 48,
                   "bora_attention_opts.key_length");
    _Static_assert(offsetof(bora_attention_opts, upcast) == 56, "bora_attention_opts.upcast");
    /* ABI 1.9: grouped-query heads and the sliding window, after a 1.8 struct's 64 bytes */
    _Static_assert(offsetof(bora_attention_opts, head_axis) == 64, "bora_attention_opts.head_axis");
    _Static_assert(offsetof(bora_attention_opts, kv_head_axis) == 72,
                   "bora_attention_opts.kv_head_axis");
    _Static_assert(offsetof(bora_attention_opts, sliding_window) == 80,
                   "bora_attention_opts.sliding_window");
    _Static_assert(offsetof(bora_attention_opts, softcap) == 88,
                   "bora_attention_opts.softcap (ABI 1.12)");
    _Static_assert(sizeof(bora_graph_api) == 384, "size of bora_graph_api");
    /* ABI 1.11 */
    _Static_assert(offsetof(bora_graph_api, sample) == 328, "bora_graph_api.sample");
    /* ABI 1.13 */
    _Static_assert(offsetof(bora_graph_api, top_k) == 336, "bora_graph_api.top_k");
    _Static_assert(offsetof(bora_graph_api, argsort) == 344, "bora_graph_api.argsort");
    _Static_assert(offsetof(bora_graph_api, bincount) == 352, "bora_graph_api.bincount");
    _Static_assert(offsetof(bora_graph_api, grouped_matmul) == 360,
                   "bora_graph_api.grouped_matmul");
    /* ABI 1.14 */
    _Static_assert(offsetof(bora_graph_api, metric) == 368, "bora_graph_api.metric");
    /* ABI 1.15 */
    _Static_assert(offsetof(bora_graph_api, conv1d) == 376, "bora_graph_api.conv1d");
    _Static_assert(sizeof(bora_conv1d_opts) == 40, "size of bora_conv1d_opts");
    _Static_assert(offsetof(bora_conv1d_opts, struct_size) == 0, "bora_conv1d_opts.struct_size");
    _Static_assert(offsetof(bora_conv1d_opts, stride) == 4, "bora_conv1d_opts.stride");
    _Static_assert(offsetof(bora_conv1d_opts, padding) == 8, "bora_conv1d_opts.padding");
    _Static_assert(offsetof(bora_conv1d_opts, length_axis) == 16, "bora_conv1d_opts.length_axis");
    _Static_assert(offsetof(bora_conv1d_opts, in_axis) == 24, "bora_conv1d_opts.in_axis");
    _Static_assert(offsetof(bora_conv1d_opts, kernel_axis) == 32, "bora_conv1d_opts.kernel_axis");
    _Static_assert(sizeof(bora_opt_conv1d) == 16, "size of bora_opt_conv1d");
    _Static_assert(offsetof(bora_opt_conv1d, struct_size) == 0, "bora_opt_conv1d.struct_size");
    _Static_assert(offsetof(bora_opt_conv1d, stride) == 4, "bora_opt_conv1d.stride");
    _Static_assert(offsetof(bora_opt_conv1d, padding) == 8, "bora_opt_conv1d.padding");
    _Static_assert(offsetof(bora_graph_api, struct_size) == 0, "bora_graph_api.struct_size");
    _Static_assert(offsetof(bora_graph_api, reserved) == 4, "bora_graph_api.reserved");
    _Static_assert(offsetof(bora_graph_api, mode) == 8, "bora_graph_api.mode");
    _Static_assert(offsetof(bora_graph_api, status) == 16, "bora_graph_api.status");
    _Static_assert(offsetof(bora_graph_api, param) == 24, "bora_graph_api.param");
    _Static_assert(offsetof(bora_graph_api, input) == 32, "bora_graph_api.input");
    _Static_assert(offsetof(bora_graph_api, name) == 40, "bora_graph_api.name");
    _Static_assert(offsetof(bora_graph_api, slice) == 48, "bora_graph_api.slice");
    _Static_assert(offsetof(bora_graph_api, permute) == 56, "bora_graph_api.permute");
    _Static_assert(offsetof(bora_graph_api, rename) == 64, "bora_graph_api.rename");
    _Static_assert(offsetof(bora_graph_api, split) == 72, "bora_graph_api.split");
    _Static_assert(offsetof(bora_graph_api, merge) == 80, "bora_graph_api.merge");
    _Static_assert(offsetof(bora_graph_api, broadcast) == 88, "bora_graph_api.broadcast");
    _Static_assert(offsetof(bora_graph_api, unary) == 96, "bora_graph_api.unary");
    _Static_assert(offsetof(bora_graph_api, binary) == 104, "bora_graph_api.binary");
    _Static_assert(offsetof(bora_graph_api, scale) == 112, "bora_graph_api.scale");
    _Static_assert(offsetof(bora_graph_api, dot) == 120, "bora_graph_api.dot");
    _Static_assert(offsetof(bora_graph_api, reduce) == 128, "bora_graph_api.reduce");
    _Static_assert(offsetof(bora_graph_api, layernorm) == 136, "bora_graph_api.layernorm");
    _Static_assert(offsetof(bora_graph_api, softmax) == 144, "bora_graph_api.softmax");
    _Static_assert(offsetof(bora_graph_api, log_softmax) == 152, "bora_graph_api.log_softmax");
    _Static_assert(offsetof(bora_graph_api, cross_entropy) == 160, "bora_graph_api.cross_entropy");
    _Static_assert(offsetof(bora_graph_api, embedding) == 168, "bora_graph_api.embedding");
    _Static_assert(offsetof(bora_graph_api, attention) == 176, "bora_graph_api.attention");
    _Static_assert(offsetof(bora_graph_api, cast) == 184, "bora_graph_api.cast");
    _Static_assert(offsetof(bora_graph_api, contiguous) == 192, "bora_graph_api.contiguous");
    _Static_assert(offsetof(bora_graph_api, concat) == 200, "bora_graph_api.concat");
    _Static_assert(offsetof(bora_graph_api, ndim) == 208, "bora_graph_api.ndim");
    _Static_assert(offsetof(bora_graph_api, axis) == 216, "bora_graph_api.axis");
    _Static_assert(offsetof(bora_graph_api, dtype) == 224, "bora_graph_api.dtype");
    _Static_assert(offsetof(bora_graph_api, checkpoint) == 232, "bora_graph_api.checkpoint");
    _Static_assert(offsetof(bora_graph_api, extent) == 240, "bora_graph_api.extent");
    _Static_assert(offsetof(bora_graph_api, batch) == 248, "bora_graph_api.batch");
    _Static_assert(offsetof(bora_graph_api, assign) == 256, "bora_graph_api.assign");
    _Static_assert(offsetof(bora_graph_api, state) == 264, "bora_graph_api.state");
    _Static_assert(offsetof(bora_graph_api, write_slice) == 272, "bora_graph_api.write_slice");
    _Static_assert(offsetof(bora_graph_api, residual) == 280, "bora_graph_api.residual");
    _Static_assert(offsetof(bora_graph_api, full) == 288, "bora_graph_api.full");
    _Static_assert(offsetof(bora_graph_api, iota) == 296, "bora_graph_api.iota");
    _Static_assert(offsetof(bora_graph_api, where) == 304, "bora_graph_api.where");
    _Static_assert(offsetof(bora_graph_api, rms_norm) == 312, "bora_graph_api.rms_norm");
    _Static_assert(offsetof(bora_graph_api, rope) == 320, "bora_graph_api.rope");
    _Static_assert(sizeof(bora_graph) == 8, "size of bora_graph");
    _Static_assert(offsetof(bora_graph, api) == 0, "bora_graph.api");
    _Static_assert(sizeof(bora_tensor_desc) == 112, "size of bora_tensor_desc");
    _Static_assert(offsetof(bora_tensor_desc, data) == 0, "bora_tensor_desc.data");
    _Static_assert(offsetof(bora_tensor_desc, dtype) == 8, "bora_tensor_desc.dtype");
    _Static_assert(offsetof(bora_tensor_desc, ndim) == 12, "bora_tensor_desc.ndim");
    _Static_assert(offsetof(bora_tensor_desc, dims) == 16, "bora_tensor_desc.dims");
    _Static_assert(offsetof(bora_tensor_desc, strides) == 64, "bora_tensor_desc.strides");
    _Static_assert(sizeof(bora_kernel_args) == 56, "size of bora_kernel_args");
    _Static_assert(offsetof(bora_kernel_args, struct_size) == 0, "bora_kernel_args.struct_size");
    _Static_assert(offsetof(bora_kernel_args, op) == 4, "bora_kernel_args.op");
    _Static_assert(offsetof(bora_kernel_args, options) == 8, "bora_kernel_args.options");
    _Static_assert(offsetof(bora_kernel_args, n_inputs) == 16, "bora_kernel_args.n_inputs");
    _Static_assert(offsetof(bora_kernel_args, n_outputs) == 20, "bora_kernel_args.n_outputs");
    _Static_assert(offsetof(bora_kernel_args, inputs) == 24, "bora_kernel_args.inputs");
    _Static_assert(offsetof(bora_kernel_args, outputs) == 32, "bora_kernel_args.outputs");
    _Static_assert(offsetof(bora_kernel_args, workspace) == 40, "bora_kernel_args.workspace");
    _Static_assert(offsetof(bora_kernel_args, workspace_size) == 48,
                   "bora_kernel_args.workspace_size");
    _Static_assert(sizeof(bora_fused) == 40, "size of bora_fused");
    _Static_assert(offsetof(bora_fused, struct_size) == 0, "bora_fused.struct_size");
    _Static_assert(offsetof(bora_fused, n_steps) == 4, "bora_fused.n_steps");
    _Static_assert(offsetof(bora_fused, n_segments) == 8, "bora_fused.n_segments");
    _Static_assert(offsetof(bora_fused, n_scratch) == 12, "bora_fused.n_scratch");
    _Static_assert(offsetof(bora_fused, count) == 16, "bora_fused.count");
    _Static_assert(offsetof(bora_fused, args) == 24, "bora_fused.args");
    _Static_assert(offsetof(bora_fused, scratch) == 32, "bora_fused.scratch");
    _Static_assert(sizeof(bora_backend_ops) == 152, "size of bora_backend_ops");
    _Static_assert(offsetof(bora_backend_ops, hdr) == 0, "bora_backend_ops.hdr");
    _Static_assert(offsetof(bora_backend_ops, probe) == 32, "bora_backend_ops.probe");
    _Static_assert(offsetof(bora_backend_ops, create) == 40, "bora_backend_ops.create");
    _Static_assert(offsetof(bora_backend_ops, destroy) == 48, "bora_backend_ops.destroy");
    _Static_assert(offsetof(bora_backend_ops, buffer_alloc) == 56, "bora_backend_ops.buffer_alloc");
    _Static_assert(offsetof(bora_backend_ops, buffer_free) == 64, "bora_backend_ops.buffer_free");
    _Static_assert(offsetof(bora_backend_ops, buffer_ptr) == 72, "bora_backend_ops.buffer_ptr");
    _Static_assert(offsetof(bora_backend_ops, copy_in) == 80, "bora_backend_ops.copy_in");
    _Static_assert(offsetof(bora_backend_ops, copy_out) == 88, "bora_backend_ops.copy_out");
    _Static_assert(offsetof(bora_backend_ops, kernel) == 96, "bora_backend_ops.kernel");
    _Static_assert(offsetof(bora_backend_ops, synchronize) == 104, "bora_backend_ops.synchronize");
    _Static_assert(offsetof(bora_backend_ops, all_reduce) == 112, "bora_backend_ops.all_reduce");
    _Static_assert(offsetof(bora_backend_ops, broadcast) == 120, "bora_backend_ops.broadcast");
    _Static_assert(offsetof(bora_backend_ops, describe) == 128, "bora_backend_ops.describe");
    _Static_assert(offsetof(bora_backend_ops, run_fused) == 136, "bora_backend_ops.run_fused");
    _Static_assert(offsetof(bora_backend_ops, prepare) == 144, "bora_backend_ops.prepare");
    _Static_assert(sizeof(bora_hf_key) == 48, "size of bora_hf_key");
    _Static_assert(offsetof(bora_hf_key, hf_name) == 0, "bora_hf_key.hf_name");
    _Static_assert(offsetof(bora_hf_key, rule) == 8, "bora_hf_key.rule");
    _Static_assert(offsetof(bora_hf_key, reserved) == 12, "bora_hf_key.reserved");
    _Static_assert(offsetof(bora_hf_key, key) == 16, "bora_hf_key.key");
    _Static_assert(offsetof(bora_hf_key, of) == 24, "bora_hf_key.of");
    _Static_assert(offsetof(bora_hf_key, value) == 32, "bora_hf_key.value");
    _Static_assert(offsetof(bora_hf_key, doc) == 40, "bora_hf_key.doc");
    _Static_assert(sizeof(bora_model_ops) == 72, "size of bora_model_ops");
    _Static_assert(offsetof(bora_model_ops, hdr) == 0, "bora_model_ops.hdr");
    _Static_assert(offsetof(bora_model_ops, create) == 32, "bora_model_ops.create");
    _Static_assert(offsetof(bora_model_ops, build) == 40, "bora_model_ops.build");
    _Static_assert(offsetof(bora_model_ops, destroy) == 48, "bora_model_ops.destroy");
    _Static_assert(offsetof(bora_model_ops, hf_config) == 56, "bora_model_ops.hf_config");
    _Static_assert(offsetof(bora_model_ops, hf_keys) == 64, "bora_model_ops.hf_keys");
    _Static_assert(sizeof(bora_param_update) == 72, "size of bora_param_update");
    _Static_assert(offsetof(bora_param_update, flags) == 64, "bora_param_update.flags");
    _Static_assert(offsetof(bora_param_update, report) == 48, "bora_param_update.report");
    _Static_assert(offsetof(bora_param_update, host_private) == 56,
                   "bora_param_update.host_private");
    _Static_assert(offsetof(bora_param_update, struct_size) == 0, "bora_param_update.struct_size");
    _Static_assert(offsetof(bora_param_update, weight_decay) == 4,
                   "bora_param_update.weight_decay");
    _Static_assert(offsetof(bora_param_update, name) == 8, "bora_param_update.name");
    _Static_assert(offsetof(bora_param_update, param) == 16, "bora_param_update.param");
    _Static_assert(offsetof(bora_param_update, grad) == 24, "bora_param_update.grad");
    _Static_assert(offsetof(bora_param_update, state) == 32, "bora_param_update.state");
    _Static_assert(offsetof(bora_param_update, scalars) == 40, "bora_param_update.scalars");
    _Static_assert(sizeof(bora_optimizer_ops) == 112, "size of bora_optimizer_ops");
    _Static_assert(offsetof(bora_optimizer_ops, build_metrics) == 104,
                   "bora_optimizer_ops.build_metrics");
    _Static_assert(offsetof(bora_optimizer_ops, hessian) == 80, "bora_optimizer_ops.hessian");
    _Static_assert(offsetof(bora_optimizer_ops, build_hessian_update) == 88,
                   "bora_optimizer_ops.build_hessian_update");
    _Static_assert(offsetof(bora_optimizer_ops, metrics) == 96, "bora_optimizer_ops.metrics");
    _Static_assert(sizeof(bora_hessian_spec) == 24, "size of bora_hessian_spec");
    _Static_assert(offsetof(bora_hessian_spec, kind) == 4, "bora_hessian_spec.kind");
    _Static_assert(offsetof(bora_hessian_spec, interval) == 8, "bora_hessian_spec.interval");
    _Static_assert(offsetof(bora_hessian_spec, micro_batches) == 16,
                   "bora_hessian_spec.micro_batches");
    _Static_assert(sizeof(bora_optimizer_metric) == 16, "size of bora_optimizer_metric");
    _Static_assert(sizeof(bora_opt_sample) == 24, "size of bora_opt_sample");
    _Static_assert(offsetof(bora_opt_sample, seed) == 8, "bora_opt_sample.seed");
    _Static_assert(offsetof(bora_opt_sample, stream) == 16, "bora_opt_sample.stream");
    _Static_assert(sizeof(bora_opt_top_k) == 16, "size of bora_opt_top_k");
    _Static_assert(offsetof(bora_opt_top_k, struct_size) == 0, "bora_opt_top_k.struct_size");
    _Static_assert(offsetof(bora_opt_top_k, row_offsets) == 4, "bora_opt_top_k.row_offsets");
    _Static_assert(offsetof(bora_opt_top_k, k) == 8, "bora_opt_top_k.k");
    _Static_assert(offsetof(bora_optimizer_ops, hdr) == 0, "bora_optimizer_ops.hdr");
    _Static_assert(offsetof(bora_optimizer_ops, create) == 32, "bora_optimizer_ops.create");
    _Static_assert(offsetof(bora_optimizer_ops, slots) == 40, "bora_optimizer_ops.slots");
    _Static_assert(offsetof(bora_optimizer_ops, scalars) == 48, "bora_optimizer_ops.scalars");
    _Static_assert(offsetof(bora_optimizer_ops, step_scalars) == 56,
                   "bora_optimizer_ops.step_scalars");
    _Static_assert(offsetof(bora_optimizer_ops, build_update) == 64,
                   "bora_optimizer_ops.build_update");
    _Static_assert(offsetof(bora_optimizer_ops, destroy) == 72, "bora_optimizer_ops.destroy");
    _Static_assert(sizeof(bora_metric) == 16, "size of bora_metric");
    _Static_assert(offsetof(bora_metric, name) == 0, "bora_metric.name");
    _Static_assert(offsetof(bora_metric, value) == 8, "bora_metric.value");
    _Static_assert(sizeof(bora_tracker_ops) == 104, "size of bora_tracker_ops");
    _Static_assert(offsetof(bora_tracker_ops, hdr) == 0, "bora_tracker_ops.hdr");
    _Static_assert(offsetof(bora_tracker_ops, create) == 32, "bora_tracker_ops.create");
    _Static_assert(offsetof(bora_tracker_ops, log_hparams) == 40, "bora_tracker_ops.log_hparams");
    _Static_assert(offsetof(bora_tracker_ops, log) == 48, "bora_tracker_ops.log");
    _Static_assert(offsetof(bora_tracker_ops, log_summary) == 56, "bora_tracker_ops.log_summary");
    _Static_assert(offsetof(bora_tracker_ops, log_artifact) == 64, "bora_tracker_ops.log_artifact");
    _Static_assert(offsetof(bora_tracker_ops, finish) == 72, "bora_tracker_ops.finish");
    _Static_assert(offsetof(bora_tracker_ops, destroy) == 80, "bora_tracker_ops.destroy");
    _Static_assert(offsetof(bora_tracker_ops, log_environment) == 88,
                   "bora_tracker_ops.log_environment");
    _Static_assert(offsetof(bora_tracker_ops, flush) == 96, "bora_tracker_ops.flush");
}
#endif

int main(void)
{
#if defined(__LP64__)
    layout();
    printf("test_layout: SDK %d.%d layouts as pinned\n", BORA_ABI_MAJOR, BORA_ABI_MINOR);
    return 0;
#else
    printf("test_layout: skipped: layouts are pinned for LP64 targets only\n");
    return 0;
#endif
}
