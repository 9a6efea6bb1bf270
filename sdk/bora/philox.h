/* bora/philox.h — Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011), the one counter-based generator of the host and its plugins: a draw is a pure
 * function of its key and counter, so results do not depend on threads, devices or the order in
 * which draws are made, and a resumed run draws the same numbers. A worked example, draw k of
 * a stream of uniforms, and a standard normal from two of them (Box-Muller):
 *
 *     #include <bora/philox.h>
 *
 *     #include <math.h>
 *
 *     // the same number wherever and whenever it is drawn
 *     static double uniform_at(uint64_t seed, uint32_t stream, uint64_t k)
 *     {
 *         return bora_philox_uniform(seed, (uint32_t)k, (uint32_t)(k >> 32), stream, 0);
 *     }
 *     static double normal_at(uint64_t seed, uint32_t stream, uint64_t k)
 *     {
 *         double u1 = 1.0 - uniform_at(seed, stream, 2 * k);
 *         double u2 = uniform_at(seed, stream, 2 * k + 1);
 *         return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
 *     }
 */
#ifndef BORA_PHILOX_H
#define BORA_PHILOX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Under nvcc the same functions compile for the device too (the CUDA backend's sample kernel). */
#ifdef __CUDACC__
#define BORA_PHILOX_FN static inline __host__ __device__
#else
#define BORA_PHILOX_FN static inline
#endif

/* Ten rounds over ctr in place, under key. */
BORA_PHILOX_FN void bora_philox4x32(uint32_t ctr[4], const uint32_t key_in[2])
{
    uint32_t key[2] = {key_in[0], key_in[1]};
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * ctr[0], p1 = (uint64_t)0xCD9E8D57u * ctr[2];
        uint32_t c0 = (uint32_t)(p1 >> 32) ^ ctr[1] ^ key[0];
        uint32_t c1 = (uint32_t)p1;
        uint32_t c2 = (uint32_t)(p0 >> 32) ^ ctr[3] ^ key[1];
        uint32_t c3 = (uint32_t)p0;
        ctr[0] = c0, ctr[1] = c1, ctr[2] = c2, ctr[3] = c3;
        key[0] += 0x9E3779B9u;
        key[1] += 0xBB67AE85u;
    }
}

/* A uniform double in [0, 1) with 53 random bits, from the first two words of the block that
 * key (seed) and the counter words give. */
BORA_PHILOX_FN double bora_philox_uniform(uint64_t seed, uint32_t c0, uint32_t c1, uint32_t c2,
                                          uint32_t c3)
{
    uint32_t ctr[4] = {c0, c1, c2, c3}, key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    bora_philox4x32(ctr, key);
    return (double)(((uint64_t)(ctr[0] >> 5) << 26) | (ctr[1] >> 6)) * 0x1p-53;
}

#ifdef __cplusplus
}
#endif
#endif /* BORA_PHILOX_H */
