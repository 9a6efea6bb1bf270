/* core/train/peak.h — the denominator of throughput/mfu: the backend's peak matmul rate at its
 * thread count in the run's compute dtype (f32, or bf16 operands under trainer.mp c=bf16),
 * measured once by a short probe (the best of five 1024^3 matmuls through the backend's own
 * kernels) and cached per machine in ${XDG_CACHE_HOME:-~/.cache}/bora/peak.tsv, keyed by the
 * CPU, the backend's description (threads, ISA, library) and the dtype. */
#ifndef BORA_CORE_PEAK_H
#define BORA_CORE_PEAK_H

#include "../graph/graph.h"

/* GFLOP/s for dtype (BORA_DTYPE_F32 or BORA_DTYPE_BF16), or 0 when the probe could not run;
 * *measured says whether it ran now. */
double bora_peak_gflops(const bora_backend_ops *ops, bora_backend *be, const char *name,
                        const char *cpu, int dtype, int *measured);

#endif
