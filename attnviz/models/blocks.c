/* The products of a few float32 inputs with a GGUF matrix's stored blocks, and the blocks' values, one straight
 * loop per block type (attnviz/models/native.py compiles this file at first use, loads it with ctypes).
 *
 * A row's product is Σ_groups scale·(Σ code·x) + offset·(Σ x): each group's codes are decoded where they lie and
 * multiplied with the inputs they meet (contiguous in x for every type: no reordering), sixteen lanes side by side
 * (the compiler's vectors), the group's scale applied to its lanes after, the lanes summed once a row. Offsets
 * (Q4_1, Q5_1, Q4_K, Q5_K) meet each group's sum of inputs, summed once per token by the caller.
 *
 * Values are made as attnviz/models/quants.py makes them: code·scale, then + offset, each rounded to float32 (this
 * file is compiled with -ffp-contract=off; the products fuse their multiply-adds explicitly, MADD), float16 scales
 * read from the caller's table of all 65,536. */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LANES 16

typedef struct {
    const float *halves; /* every float16 as float32 */
    const float *x;      /* (n, width) */
    const float *sums;   /* (n, groups of a row): each group's sum of inputs (types with offsets) */
    long n, width, groups;
    int offsets; /* whether sums holds the groups' sums */
} Inputs;

/* The stored bytes AHEAD of those read now asked of memory: a row of 8,192 values is 4.5–8.5 KiB, and without it
 * the wide rows of a feed-forward's down matrix took twice the time a weight of the others did. */
#define AHEAD 4096

static inline void prefetch_ahead(const uint8_t *p, long bytes) {
    for (long k = 0; k < bytes; k += 64) __builtin_prefetch(p + AHEAD + k, 0, 3);
}

static inline float half_at(const float *halves, const uint8_t *p) { return halves[p[0] | (p[1] << 8)]; }

/* ggml's get_scale_min_k4 for the eight groups of a Q4_K or Q5_K block. */
static inline void scales_mins_k4(const uint8_t *s, float *scale, float *minimum) {
    for (int j = 0; j < 4; j++) {
        scale[j] = (float)(s[j] & 63);
        minimum[j] = (float)(s[j + 4] & 63);
        scale[j + 4] = (float)((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
        minimum[j + 4] = (float)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* Each type: its block's bytes and values, the code of value i of group g, and the group's scale and offset. */

/* Q4_0: d, 16 bytes; value i of 32: low nibbles then high, less 8 */
#define Q4_0_CODE(b, i) ((float)((int)(((b)[2 + ((i) & 15)] >> (((i) >> 4) * 4)) & 15) - 8))
/* Q4_1: d, m, 16 bytes */
#define Q4_1_CODE(b, i) ((float)(((b)[4 + ((i) & 15)] >> (((i) >> 4) * 4)) & 15))
/* Q5_0: d, qh (4, little-endian: bit i is value i's fifth), 16 bytes; less 16 */
#define Q5_FIFTH(qh, i) ((((qh) >> (i)) & 1u) << 4)
#define Q5_0_CODE(b, qh, i) ((float)((int)((((b)[6 + ((i) & 15)] >> (((i) >> 4) * 4)) & 15) | Q5_FIFTH(qh, i)) - 16))
#define Q5_1_CODE(b, qh, i) ((float)((((b)[8 + ((i) & 15)] >> (((i) >> 4) * 4)) & 15) | Q5_FIFTH(qh, i)))
/* Q8_0: d, 32 × int8 */
#define Q8_0_CODE(b, i) ((float)(int8_t)(b)[2 + (i)])
/* Q4_K: d, dmin, scales (12), qs (128): group g's value i is nibble g & 1 of qs[32·(g/2) + i] */
#define Q4_K_CODE(b, g, i) ((float)(((b)[16 + 32 * ((g) >> 1) + (i)] >> (((g) & 1) * 4)) & 15))
/* Q5_K: d, dmin, scales (12), qh (32), qs (128): bit g of qh[i] is the fifth */
#define Q5_K_CODE(b, g, i) \
    ((float)((((b)[48 + 32 * ((g) >> 1) + (i)] >> (((g) & 1) * 4)) & 15) | ((((b)[16 + (i)] >> (g)) & 1) << 4)))
/* Q6_K: ql (128), qh (64), scales (16 × int8), d. Value v of a half h (128 values): quarter q = v / 32, l = v % 32;
 * 4 bits of ql[64h + 32·(q & 1) + l] (low nibble for q < 2), 2 bits of qh[32h + l] (bits 2q, 2q + 1) above; less 32 */
#define Q6_K_CODE(b, h, q, l)                                                                          \
    ((float)((int)((((b)[64 * (h) + 32 * ((q) & 1) + (l)] >> (((q) >> 1) * 4)) & 15) |                 \
                   ((((b)[128 + 32 * (h) + (l)] >> (2 * (q))) & 3) << 4)) -                             \
             32))

static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Vectors of sixteen lanes in the compiler's own notation (GCC, Clang): its widest registers where the CPU has them
 * (AVX-512: one; AVX2: two; NEON: four), plain loops where it has none. */
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));

static inline f32x16 floats_at(const float *p) {
    f32x16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline u8x16 bytes_at(const uint8_t *p) {
    u8x16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 16 bytes as int32 lanes, unsigned and signed. x86's widening loads where the CPU has them (GCC 12 lowers a
 * vector conversion of bytes one lane at a time, a tenth of the speed), the compiler's conversion elsewhere. */
static inline f32x16 floats(i32x16 v) { return __builtin_convertvector(v, f32x16); }

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

static inline i32x16 widened(const uint8_t *p) {
    i32x16 v;
#if defined(__AVX512F__)
    __m512i wide = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    memcpy(&v, &wide, sizeof v);
#elif defined(__AVX2__)
    __m256i halves[2] = {_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)),
                         _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)))};
    memcpy(&v, halves, sizeof v);
#else
    v = __builtin_convertvector(bytes_at(p), i32x16);
#endif
    return v;
}

static inline i32x16 signed_widened(const uint8_t *p) {
    i32x16 v;
#if defined(__AVX512F__)
    __m512i wide = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p));
    memcpy(&v, &wide, sizeof v);
#elif defined(__AVX2__)
    __m256i halves[2] = {_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)),
                         _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)))};
    memcpy(&v, halves, sizeof v);
#else
    v = __builtin_convertvector(bytes_at(p) ^ 0x80, i32x16) - 128;
#endif
    return v;
}

static inline float lanes_total(f32x16 acc) {
    float total = 0.0f;
    for (int k = 0; k < LANES; k++) total += acc[k];
    return total;
}

static const i32x16 LANE = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

typedef float f32x8 __attribute__((vector_size(32)));

static inline f32x8 floats8_at(const float *p) {
    f32x8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float lanes8_total(f32x8 v) {
    float total = 0.0f;
    for (int k = 0; k < 8; k++) total += v[k];
    return total;
}

#if defined(__AVX2__) && !defined(__AVX512F__)
/* AVX2's sixteen registers hold eight lanes each: a 16-lane vector takes two, and the rows in 16 lanes spilled their
 * sums and codes to memory (twice AVX-512's time a weight). The rows below have eight-lane forms for AVX2. */
#define EIGHT_LANES 1
typedef int32_t i32x8 __attribute__((vector_size(32)));

static inline i32x8 widened8(const uint8_t *p) {
    i32x8 v;
    __m256i wide = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    memcpy(&v, &wide, sizeof v);
    return v;
}

static inline i32x8 signed_widened8(const uint8_t *p) {
    i32x8 v;
    __m256i wide = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
    memcpy(&v, &wide, sizeof v);
    return v;
}

static inline f32x8 floats8(i32x8 v) { return __builtin_convertvector(v, f32x8); }

static const i32x8 LANE8 = {0, 1, 2, 3, 4, 5, 6, 7};

/* nibbles_dot, fifths_dot and Q8_0's in eight lanes: bytes 0–7, then 8–15 (and Q8_0's 16–31) */
static inline f32x8 nibbles_dot8(const uint8_t *q, const float *x) {
    i32x8 first = widened8(q), second = widened8(q + 8);
    return (floats8(first & 15) * floats8_at(x) + floats8(second & 15) * floats8_at(x + 8)) +
           (floats8(first >> 4) * floats8_at(x + 16) + floats8(second >> 4) * floats8_at(x + 24));
}

static inline f32x8 fifths_dot8(const uint8_t *q, uint32_t qh, const float *x) {
    i32x8 first = widened8(q), second = widened8(q + 8), bits = (i32x8){0} + (int32_t)qh;
    i32x8 low0 = (first & 15) | (((bits >> LANE8) & 1) << 4), low1 = (second & 15) | (((bits >> (LANE8 + 8)) & 1) << 4);
    i32x8 high0 = (first >> 4) | (((bits >> (LANE8 + 16)) & 1) << 4);
    i32x8 high1 = (second >> 4) | (((bits >> (LANE8 + 24)) & 1) << 4);
    return (floats8(low0) * floats8_at(x) + floats8(low1) * floats8_at(x + 8)) +
           (floats8(high0) * floats8_at(x + 16) + floats8(high1) * floats8_at(x + 24));
}

static inline f32x8 bytes_dot8(const uint8_t *q, const float *x) {
    return (floats8(signed_widened8(q)) * floats8_at(x) + floats8(signed_widened8(q + 8)) * floats8_at(x + 8)) +
           (floats8(signed_widened8(q + 16)) * floats8_at(x + 16) + floats8(signed_widened8(q + 24)) * floats8_at(x + 24));
}
#endif

/* The 32 codes of a block of 32 (low nibbles, values 0–15; high, 16–31) times their inputs, summed in lanes. */
static inline f32x16 nibbles_dot(const uint8_t *q, const float *x) {
    i32x16 packed = widened(q);
    return floats(packed & 15) * floats_at(x) + floats(packed >> 4) * floats_at(x + 16);
}

/* Q5_0's and Q5_1's: the nibbles with their fifth bits (bit i of qh for value i) as 16. */
static inline f32x16 fifths_dot(const uint8_t *q, uint32_t qh, const float *x) {
    i32x16 packed = widened(q), low_bits = (i32x16){0} + (int32_t)(qh & 0xFFFFu), high_bits = (i32x16){0} + (int32_t)(qh >> 16);
    i32x16 low = (packed & 15) | (((low_bits >> LANE) & 1) << 4);
    i32x16 high = (packed >> 4) | (((high_bits >> LANE) & 1) << 4);
    return floats(low) * floats_at(x) + floats(high) * floats_at(x + 16);
}

/* Blocks of 32 values and one scale, four at a time into four sums (a multiply-add waits for the one before it
 * on the same sum: one sum would leave the vector units idle), the rest one at a time. DOT(blk, xb): a block's
 * codes times its inputs in lanes; SCALE(blk): its scale; OFFSET(blk): the scale of its inputs' sum. */
#define SMALL_BLOCKS_ROW(BYTES, DOT, SCALE, OFFSET)                                                 \
    ROW_LANES acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};                                       \
    float offsets = 0.0f;                                                                           \
    long blocks = in->width / 32, b = 0;                                                            \
    for (; b + 4 <= blocks; b += 4) {                                                               \
        const uint8_t *blk = row + BYTES * b;                                                       \
        const float *xb = x + 32 * b;                                                               \
        prefetch_ahead(blk, 4 * BYTES);                                                             \
        acc0 += SCALE(blk) * DOT(blk, xb);                                                          \
        acc1 += SCALE(blk + BYTES) * DOT(blk + BYTES, xb + 32);                                     \
        acc2 += SCALE(blk + 2 * BYTES) * DOT(blk + 2 * BYTES, xb + 64);                             \
        acc3 += SCALE(blk + 3 * BYTES) * DOT(blk + 3 * BYTES, xb + 96);                             \
    }                                                                                               \
    for (; b < blocks; b++) acc0 += SCALE(row + BYTES * b) * DOT(row + BYTES * b, x + 32 * b);      \
    if (in->offsets)                                                                                \
        for (b = 0; b < blocks; b++) offsets += OFFSET(row + BYTES * b) * sums[b];                  \
    return ROW_TOTAL((acc0 + acc1) + (acc2 + acc3)) + offsets;

#define D(blk) half_at(in->halves, (blk))
#define M(blk) half_at(in->halves, (blk) + 2)
#define LESS_8(blk) (-8.0f * D(blk)) /* Q4_0's codes less 8: −8·d times the block's inputs */
#define LESS_16(blk) (-16.0f * D(blk))
#ifdef EIGHT_LANES
#define ROW_LANES f32x8
#define ROW_TOTAL lanes8_total
#define Q4_0_DOT(blk, xb) nibbles_dot8((blk) + 2, (xb))
#define Q4_1_DOT(blk, xb) nibbles_dot8((blk) + 4, (xb))
#define Q5_0_DOT(blk, xb) fifths_dot8((blk) + 6, le32((blk) + 2), (xb))
#define Q5_1_DOT(blk, xb) fifths_dot8((blk) + 8, le32((blk) + 4), (xb))
#define Q8_0_DOT(blk, xb) bytes_dot8((blk) + 2, (xb))
#else
#define ROW_LANES f32x16
#define ROW_TOTAL lanes_total
#define Q4_0_DOT(blk, xb) nibbles_dot((blk) + 2, (xb))
#define Q4_1_DOT(blk, xb) nibbles_dot((blk) + 4, (xb))
#define Q5_0_DOT(blk, xb) fifths_dot((blk) + 6, le32((blk) + 2), (xb))
#define Q5_1_DOT(blk, xb) fifths_dot((blk) + 8, le32((blk) + 4), (xb))
#define Q8_0_DOT(blk, xb) (floats(signed_widened((blk) + 2)) * floats_at(xb) + floats(signed_widened((blk) + 18)) * floats_at((xb) + 16))
#endif
#define NONE(blk) 0.0f

static float row_q4_0(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    SMALL_BLOCKS_ROW(18, Q4_0_DOT, D, LESS_8)
}

static float row_q4_1(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    SMALL_BLOCKS_ROW(20, Q4_1_DOT, D, M)
}

static float row_q5_0(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    SMALL_BLOCKS_ROW(22, Q5_0_DOT, D, LESS_16)
}

static float row_q5_1(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    SMALL_BLOCKS_ROW(24, Q5_1_DOT, D, M)
}

static float row_q8_0(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    (void)sums;
    SMALL_BLOCKS_ROW(34, Q8_0_DOT, D, NONE)
}

/* ggml's get_scale_min_k4 for all eight groups at once, on three 32-bit words (as llama.cpp does): the scales'
 * bytes then the mins', as float32 (16 lanes) */
static inline f32x16 k4_scales_mins(const uint8_t *s) {
    uint32_t w[4] = {le32(s), le32(s + 4), le32(s + 8), 0};
    w[3] = ((w[2] >> 4) & 0x0F0F0F0Fu) | (((w[1] >> 6) & 0x03030303u) << 4);
    uint32_t mins_low = w[1] & 0x3F3F3F3Fu;
    w[1] = (w[2] & 0x0F0F0F0Fu) | (((w[0] >> 6) & 0x03030303u) << 4);
    w[2] = mins_low;
    w[0] &= 0x3F3F3F3Fu;
    uint8_t bytes[16];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(bytes, w, sizeof bytes); /* the words' bytes in order (one store, not sixteen) */
#else
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 4; i++) bytes[4 * k + i] = (uint8_t)(w[k] >> (8 * i));
#endif
    return floats(widened(bytes));
}

/* Q4_K and Q5_K: eight groups of 32 a block, each d·scale and −dmin·min (as quants.py makes them); a group's 32
 * bytes give its codes in their low nibbles (g even) or high ones (g odd), Q5_K's bit g of qh[i] above. */
#ifdef EIGHT_LANES
static inline float k_quant_row(const uint8_t *row, const float *x, const float *sums, const Inputs *in, long bytes,
                                int fifths) {
    f32x8 acc[4] = {{0}}, offsets = {0};
    for (long b = 0; b < in->width / 256; b++) {
        const uint8_t *blk = row + bytes * b, *qs = blk + (fifths ? 48 : 16);
        const float *xb = x + 256 * b;
        prefetch_ahead(blk, bytes);
        float d = half_at(in->halves, blk), dmin = half_at(in->halves, blk + 2), scaled[16];
        f32x16 factor = {d, d, d, d, d, d, d, d, dmin, dmin, dmin, dmin, dmin, dmin, dmin, dmin};
        f32x16 scales_mins = factor * k4_scales_mins(blk + 4);
        memcpy(scaled, &scales_mins, sizeof scaled);
        for (int j = 0; j < 4; j++) {
            const float *xg = xb + 64 * j;
            f32x8 low = {0}, high = {0};
            for (int k = 0; k < 4; k++) {
                i32x8 q = widened8(qs + 32 * j + 8 * k), lo = q & 15, hi = q >> 4;
                if (fifths) {
                    i32x8 top = widened8(blk + 16 + 8 * k);
                    lo |= ((top >> (2 * j)) & 1) << 4;
                    hi |= ((top >> (2 * j + 1)) & 1) << 4;
                }
                low += floats8(lo) * floats8_at(xg + 8 * k);
                high += floats8(hi) * floats8_at(xg + 32 + 8 * k);
            }
            acc[j] += scaled[2 * j] * low + scaled[2 * j + 1] * high;
        }
        offsets += floats8_at(scaled + 8) * floats8_at(sums + 8 * b);
    }
    return lanes8_total((acc[0] + acc[1]) + (acc[2] + acc[3])) - lanes8_total(offsets);
}
#else
static inline float k_quant_row(const uint8_t *row, const float *x, const float *sums, const Inputs *in, long bytes,
                                int fifths) {
    f32x16 acc[4] = {{0}};
    f32x8 offsets = {0};
    for (long b = 0; b < in->width / 256; b++) {
        const uint8_t *blk = row + bytes * b, *qs = blk + (fifths ? 48 : 16);
        const float *xb = x + 256 * b;
        prefetch_ahead(blk, bytes);
        float d = half_at(in->halves, blk), dmin = half_at(in->halves, blk + 2), scaled[16];
        f32x16 factor = {d, d, d, d, d, d, d, d, dmin, dmin, dmin, dmin, dmin, dmin, dmin, dmin};
        f32x16 scales_mins = factor * k4_scales_mins(blk + 4); /* d·scale, dmin·min: each one rounding */
        memcpy(scaled, &scales_mins, sizeof scaled);
        i32x16 top0 = fifths ? widened(blk + 16) : (i32x16){0}, top1 = fifths ? widened(blk + 32) : (i32x16){0};
        for (int j = 0; j < 4; j++) {
            i32x16 q0 = widened(qs + 32 * j), q1 = widened(qs + 32 * j + 16);
            i32x16 low0 = q0 & 15, low1 = q1 & 15, high0 = q0 >> 4, high1 = q1 >> 4;
            if (fifths) {
                low0 |= ((top0 >> (2 * j)) & 1) << 4;
                low1 |= ((top1 >> (2 * j)) & 1) << 4;
                high0 |= ((top0 >> (2 * j + 1)) & 1) << 4;
                high1 |= ((top1 >> (2 * j + 1)) & 1) << 4;
            }
            const float *xg = xb + 64 * j;
            f32x16 low = floats(low0) * floats_at(xg) + floats(low1) * floats_at(xg + 16);
            f32x16 high = floats(high0) * floats_at(xg + 32) + floats(high1) * floats_at(xg + 48);
            acc[j] += scaled[2 * j] * low + scaled[2 * j + 1] * high;
        }
        offsets += floats8_at(scaled + 8) * floats8_at(sums + 8 * b);
    }
    return lanes_total((acc[0] + acc[1]) + (acc[2] + acc[3])) - lanes8_total(offsets);
}
#endif

static float row_q4_k(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    return k_quant_row(row, x, sums, in, 144, 0);
}

static float row_q5_k(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    return k_quant_row(row, x, sums, in, 176, 1);
}

/* Q6_K: sixteen groups of 16, each d·scale (int8): one group a vector of lanes. Its codes less 32 are the codes
 * with −32·scale times the group's inputs (as quants.times sums them), the codes made 64 at a time in bytes. */
typedef uint8_t u8x32 __attribute__((vector_size(32)));

static inline u8x32 bytes32_at(const uint8_t *p) {
    u8x32 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A half's 128 codes (0–63, not yet less 32) in order, made 32 bytes at a time: qh's two bits of each quarter moved to
 * bits 4–5 by shifts of 16-bit lanes, masked (x86 has no shift of bytes) */
static inline void q6_k_codes(const uint8_t *blk, int h, uint8_t codes[128]) {
    u8x32 ql0 = bytes32_at(blk + 64 * h), ql1 = bytes32_at(blk + 64 * h + 32), qh = bytes32_at(blk + 128 + 32 * h);
    u16x16 qh16 = (u16x16)qh;
    u8x32 none = {0}, top = none + (uint8_t)0x30;
    u8x32 quarters[4] = {(ql0 & 15) | ((u8x32)(qh16 << 4) & top), (ql1 & 15) | ((u8x32)(qh16 << 2) & top),
                         (ql0 >> 4) | (qh & top), (ql1 >> 4) | ((u8x32)(qh16 >> 2) & top)};
    memcpy(codes, quarters, 128);
}

/* Sums kept apart (a multiply-add waits for the one before it on the same sum): eight in AVX-512's 32 registers;
 * two elsewhere, where a 16-lane vector takes several registers and eight spilled to memory (AVX2 has rows of its
 * own, in eight lanes, below) */
#if defined(__AVX512F__)
#define Q6_K_SUMS 8
#else
#define Q6_K_SUMS 2
#endif

#ifdef EIGHT_LANES
/* As k_quant_row: eight lanes, four sums. */
static float row_q6_k(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    f32x8 acc[4] = {{0}}, offsets = {0};
    for (long b = 0; b < in->width / 256; b++) {
        const uint8_t *blk = row + 210 * b;
        const float *xb = x + 256 * b;
        prefetch_ahead(blk, 210);
        float scaled[16];
        f32x16 scales = half_at(in->halves, blk + 208) * floats(signed_widened(blk + 192));
        memcpy(scaled, &scales, sizeof scaled);
        offsets += floats8_at(scaled) * floats8_at(sums + 16 * b) + floats8_at(scaled + 8) * floats8_at(sums + 16 * b + 8);
        for (int h = 0; h < 2; h++) {
            uint8_t codes[128];
            q6_k_codes(blk, h, codes);
            for (int q = 0; q < 4; q++) {
                const uint8_t *c = codes + 32 * q;
                const float *xg = xb + 128 * h + 32 * q;
                f32x8 group = floats8(widened8(c)) * floats8_at(xg) + floats8(widened8(c + 8)) * floats8_at(xg + 8);
                f32x8 next = floats8(widened8(c + 16)) * floats8_at(xg + 16) + floats8(widened8(c + 24)) * floats8_at(xg + 24);
                acc[(2 * q) % 4] += scaled[8 * h + 2 * q] * group;
                acc[(2 * q + 1) % 4] += scaled[8 * h + 2 * q + 1] * next;
            }
        }
    }
    return lanes8_total((acc[0] + acc[1]) + (acc[2] + acc[3])) - 32.0f * lanes8_total(offsets);
}
#else
static float row_q6_k(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    f32x16 acc[8] = {{0}}, offsets = {0};
    for (long b = 0; b < in->width / 256; b++) {
        const uint8_t *blk = row + 210 * b;
        const float *xb = x + 256 * b;
        prefetch_ahead(blk, 210);
        float scaled[16];
        f32x16 scales = half_at(in->halves, blk + 208) * floats(signed_widened(blk + 192));
        memcpy(scaled, &scales, sizeof scaled);
        offsets += scales * floats_at(sums + 16 * b);
        for (int h = 0; h < 2; h++) {
            uint8_t codes[128];
            q6_k_codes(blk, h, codes);
            for (int q = 0; q < 4; q++) {
                const float *xg = xb + 128 * h + 32 * q;
                f32x16 group = floats(widened(codes + 32 * q)) * floats_at(xg);
                f32x16 next = floats(widened(codes + 32 * q + 16)) * floats_at(xg + 16);
                acc[(2 * q) % Q6_K_SUMS] += scaled[8 * h + 2 * q] * group;
                acc[(2 * q + 1) % Q6_K_SUMS] += scaled[8 * h + 2 * q + 1] * next;
            }
        }
    }
    f32x16 total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    return lanes_total(total) - 32.0f * lanes_total(offsets);
}
#endif

/* float16 bits as float32, exactly (subnormals too; NaN stays NaN), without a table: vectorises. */
static inline float half_bits(uint32_t h) {
    uint32_t magnitude = (h & 0x7FFFu) << 13, sign = (h & 0x8000u) << 16;
    float scaled;
    memcpy(&scaled, &magnitude, 4);
    scaled *= 0x1p112f; /* the exponent's bias: exact, subnormals included */
    uint32_t bits;
    memcpy(&bits, &scaled, 4);
    if ((h & 0x7C00u) == 0x7C00u) bits = magnitude | 0x7F800000u; /* infinity, NaN */
    bits |= sign;
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

/* 16 float16 values as float32: the CPU's conversion where it has one (exact; a NaN stays a NaN), else bits. */
static inline f32x16 halves_widened(const uint8_t *p) {
#if defined(__AVX512F__)
    __m512 wide = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    f32x16 v;
    memcpy(&v, &wide, sizeof v);
    return v;
#elif defined(__F16C__)
    __m256 halves[2] = {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                        _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)))};
    f32x16 v;
    memcpy(&v, halves, sizeof v);
    return v;
#else
    u16x16 stored;
    memcpy(&stored, p, sizeof stored);
    u32x16 h = __builtin_convertvector(stored, u32x16);
    u32x16 magnitude = (h & 0x7FFFu) << 13, special = (u32x16)((h & 0x7C00u) == 0x7C00u);
    f32x16 scaled = (f32x16)magnitude * 0x1p112f;
    u32x16 bits = ((u32x16)scaled & ~special) | ((magnitude | 0x7F800000u) & special);
    return (f32x16)(bits | ((h & 0x8000u) << 16));
#endif
}

static inline float bfloat_bits(uint32_t h) {
    uint32_t bits = h << 16;
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

static inline f32x16 bfloats_widened(const uint8_t *p) {
    u16x16 stored;
    memcpy(&stored, p, sizeof stored);
    return (f32x16)(__builtin_convertvector(stored, u32x16) << 16);
}

#define FLOAT_ROW(WIDEN, CONVERT)                                                        \
    (void)sums;                                                                          \
    f32x16 acc = {0};                                                                    \
    float rest = 0.0f;                                                                   \
    long whole = in->width / LANES * LANES;                                              \
    for (long i = 0; i < whole; i += LANES) {                                            \
        if (i % 32 == 0) prefetch_ahead(row + 2 * i, 64);                                \
        acc += WIDEN(row + 2 * i) * floats_at(x + i);                                    \
    }                                                                                    \
    for (long i = whole; i < in->width; i++)                                             \
        rest += CONVERT((uint32_t)row[2 * i] | ((uint32_t)row[2 * i + 1] << 8)) * x[i]; \
    return lanes_total(acc) + rest;

static float row_f16(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    FLOAT_ROW(halves_widened, half_bits)
}

static float row_bf16(const uint8_t *row, const float *x, const float *sums, const Inputs *in) {
    FLOAT_ROW(bfloats_widened, bfloat_bits)
}

typedef float (*RowFunction)(const uint8_t *, const float *, const float *, const Inputs *);

static RowFunction row_function(int kind) {
    switch (kind) {
    case 1: return row_f16;
    case 30: return row_bf16;
    case 2: return row_q4_0;
    case 3: return row_q4_1;
    case 6: return row_q5_0;
    case 7: return row_q5_1;
    case 8: return row_q8_0;
    case 12: return row_q4_k;
    case 13: return row_q5_k;
    case 14: return row_q6_k;
    default: return NULL;
    }
}

/* A product's rows shared among threads: each takes the next run of rows until none is left, every row summed by one
 * call of its type's function whatever thread runs it (the same bits on any number of threads). The helpers are
 * kept between products (a generated token makes a hundred or more); after one they spin for SPIN_NS before
 * sleeping, as the next product follows within some microseconds, and waking a sleeping thread takes tens. Taken
 * so rather than by Python's threads, a 1B model's token took 0.07 s, not 0.09 (AMD EPYC, 2 cores). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#define PIECES 4 /* a product's rows come in PIECES long runs a thread (contiguous: the prefetchers follow them) */
#define MOST_HELPERS 15
#define SPIN_NS 2000000L

typedef struct {
    RowFunction row;
    const uint8_t *raw;
    long row_bytes, rows, out_stride, chunk;
    float *out;
    Inputs in;
} Product;

static struct {
    pthread_mutex_t caller, lock;
    pthread_cond_t wake, done;
    int helpers;
    atomic_long round, working;
    Product product;
    _Alignas(64) atomic_long next; /* a cache line of its own: taking rows does not move the others' */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, {0}, 0};

static void product_rows(const Product *shared, atomic_long *next) {
    const Product p = *shared;
    long first;
    while ((first = atomic_fetch_add(next, p.chunk)) < p.rows) {
        long last = first + p.chunk < p.rows ? first + p.chunk : p.rows;
        for (long r = first; r < last; r++)
            for (long t = 0; t < p.in.n; t++)
                p.out[t * p.out_stride + r] =
                    p.row(p.raw + r * p.row_bytes, p.in.x + t * p.in.width, p.in.sums + t * p.in.groups, &p.in);
    }
}

static long nanoseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000000000L + now.tv_nsec;
}

static void *helper(void *started_in) {
    long seen = (long)(intptr_t)started_in; /* the round before the first it takes part in */
    for (;;) {
        long since = nanoseconds();
        for (int k = 1; atomic_load(&pool.round) == seen; k++) {
            if (k % 64 == 0) {
                if (nanoseconds() - since > SPIN_NS) break;
                sched_yield();
            }
        }
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.round) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
        seen = atomic_load(&pool.round);
        pthread_mutex_unlock(&pool.lock);
        product_rows(&pool.product, &pool.next);
        if (atomic_fetch_sub(&pool.working, 1) == 1) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
    return NULL;
}

/* A forked child has none of its parent's threads: it starts its own. */
static void forget_helpers(void) {
    pthread_mutex_init(&pool.caller, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.helpers = 0;
    atomic_store(&pool.working, 0);
}

static int helpers_started(int wanted) {
    static int registered = 0;
    if (!registered) {
        pthread_atfork(NULL, NULL, forget_helpers);
        registered = 1;
    }
    wanted = wanted < MOST_HELPERS ? wanted : MOST_HELPERS;
    while (pool.helpers < wanted) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attr, helper, (void *)(intptr_t)atomic_load(&pool.round));
        pthread_attr_destroy(&attr);
        if (failed) break;
        pool.helpers++;
    }
    return pool.helpers;
}

/* out[t, r] (row stride out_stride) = x[t] · row r of the rows raw (row_bytes apart), for t < n, r < rows: each row
 * read once for every input, on ``threads`` threads (the caller's among them; a second caller while the helpers
 * serve a first takes its rows alone). Returns 0, or -1 for a type this file does not know. */
int attnviz_times(int kind, const uint8_t *raw, long row_bytes, long rows, const float *x, const float *sums,
                  long n, long width, long groups, const float *halves, float *out, long out_stride, int threads) {
    RowFunction row = row_function(kind);
    if (row == NULL) return -1;
    Inputs in = {halves, x, sums, n, width, groups, kind == 2 || kind == 3 || kind == 6 || kind == 7 || kind == 14};
    /* the helpers serve one product at a time: a second caller meanwhile (another thread's) takes its rows alone */
    int shared = threads > 1 && rows >= 2 * PIECES && pthread_mutex_trylock(&pool.caller) == 0;
    int helpers = shared ? helpers_started(threads - 1) : 0;
    Product product = {row, raw, row_bytes, rows, out_stride, 0, out, in};
    product.chunk = (rows + PIECES * (helpers + 1) - 1) / (PIECES * (helpers + 1));
    if (helpers == 0) {
        atomic_long next = 0;
        product_rows(&product, &next);
        if (shared) pthread_mutex_unlock(&pool.caller);
        return 0;
    }
    pthread_mutex_lock(&pool.lock);
    pool.product = product;
    atomic_store(&pool.next, 0);
    atomic_store(&pool.working, helpers);
    atomic_fetch_add(&pool.round, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    product_rows(&product, &pool.next);
    for (int k = 1; atomic_load(&pool.working) > 0 && k < 1 << 20; k++)
        if (k % 64 == 0) sched_yield();
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.working) > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.caller);
    return 0;
}

/* The rows raw as float32 values (rows, width), as quants.dequantise makes them: code·scale and + offset each
 * rounded, never fused into one multiply-add (GCC fuses across statements unless told not to; Clang never does). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
int attnviz_dequantise(int kind, const uint8_t *raw, long row_bytes, long rows, long width, const float *halves,
                       float *out) {
    for (long r = 0; r < rows; r++) {
        const uint8_t *row = raw + r * row_bytes;
        float *values = out + r * width;
        if (kind == 1 || kind == 30) {
            for (long i = 0; i < width; i++) {
                uint32_t bits = (uint32_t)row[2 * i] | ((uint32_t)row[2 * i + 1] << 8);
                values[i] = kind == 1 ? halves[bits] : bfloat_bits(bits);
            }
            continue;
        }
        if (kind == 2 || kind == 3 || kind == 6 || kind == 7 || kind == 8) {
            long bytes = kind == 2 ? 18 : kind == 3 ? 20 : kind == 6 ? 22 : kind == 7 ? 24 : 34;
            for (long b = 0; b < width / 32; b++) {
                const uint8_t *blk = row + bytes * b;
                float d = half_at(halves, blk), m = kind == 3 || kind == 7 ? half_at(halves, blk + 2) : 0.0f;
                uint32_t qh = kind == 6 ? le32(blk + 2) : kind == 7 ? le32(blk + 4) : 0;
                for (int i = 0; i < 32; i++) {
                    float code = kind == 2   ? Q4_0_CODE(blk, i)
                                 : kind == 3 ? Q4_1_CODE(blk, i)
                                 : kind == 6 ? Q5_0_CODE(blk, qh, i)
                                 : kind == 7 ? Q5_1_CODE(blk, qh, i)
                                             : Q8_0_CODE(blk, i);
                    float value = code * d;
                    values[32 * b + i] = kind == 3 || kind == 7 ? value + m : value;
                }
            }
            continue;
        }
        if (kind == 12 || kind == 13) {
            long bytes = kind == 12 ? 144 : 176;
            for (long b = 0; b < width / 256; b++) {
                const uint8_t *blk = row + bytes * b;
                float d = half_at(halves, blk), dmin = half_at(halves, blk + 2), scale[8], minimum[8];
                scales_mins_k4(blk + 4, scale, minimum);
                for (int g = 0; g < 8; g++) {
                    float s = d * scale[g], offset = -(dmin * minimum[g]);
                    for (int i = 0; i < 32; i++) {
                        float code = kind == 12 ? Q4_K_CODE(blk, g, i) : Q5_K_CODE(blk, g, i);
                        float value = code * s;
                        values[256 * b + 32 * g + i] = value + offset;
                    }
                }
            }
            continue;
        }
        if (kind == 14) {
            for (long b = 0; b < width / 256; b++) {
                const uint8_t *blk = row + 210 * b;
                float d = half_at(halves, blk + 208);
                for (int v = 0; v < 256; v++) {
                    int h = v / 128, q = (v % 128) / 32, l = v % 32;
                    float scale = d * (float)(int8_t)blk[192 + v / 16];
                    values[256 * b + v] = Q6_K_CODE(blk, h, q, l) * scale;
                }
            }
            continue;
        }
        return -1;
    }
    return 0;
}
