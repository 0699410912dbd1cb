/*
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by Kafka
 * RecordBatch v2 over attributes..end of batch.
 *
 * Two implementations behind one entry point, chosen once at run time:
 *  - hardware: the SSE4.2 `crc32` instruction, three independent streams
 *    interleaved so the instruction's 3-cycle latency is hidden, the streams
 *    joined with precomputed "shift by N zero bytes" tables;
 *  - software: slicing-by-8 tables, for CPUs without SSE4.2 (and as the
 *    reference the hardware path is tested against).
 *
 * Every .pyx that includes this header gets its own static tables; call
 * kl_crc32c_init() from module init before the first kl_crc32c().
 *
 * The "raw" functions operate on the CRC register without the pre/post
 * inversion; the public ones take and return finished CRCs, so that
 * crc(a + b) == kl_crc32c(kl_crc32c(0, a), b).
 */
#ifndef KAFKALITE_CRC32C_IMPL_H
#define KAFKALITE_CRC32C_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KL_CRC32C_POLY 0x82F63B78u

/* Block lengths for the three-stream hardware loop: LONG amortises the
 * joining cost over big inputs, SHORT keeps mid-sized ones (a few KB, the
 * typical batch) on the interleaved path too. */
#define KL_CRC_LONG 8192
#define KL_CRC_SHORT 256

static uint32_t kl_crc_table[8][256];
static uint32_t kl_crc_long_shift[4][256];
static uint32_t kl_crc_short_shift[4][256];
static int kl_crc_initialised = 0;
static int kl_crc_hw = 0;

/* Multiply a by b modulo the polynomial (reflected bit order: bit 31 is x^0). */
static uint32_t kl_crc_multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ KL_CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x^(8 * nbytes) modulo the polynomial: the operator that appends nbytes zero bytes. */
static uint32_t kl_crc_zeros_operator(size_t nbytes) {
    uint32_t result = 1u << 31;        /* x^0 */
    uint32_t square = 1u << 30;        /* x^1 */
    size_t nbits = nbytes * 8;
    while (nbits) {
        if (nbits & 1) result = kl_crc_multmodp(square, result);
        square = kl_crc_multmodp(square, square);
        nbits >>= 1;
    }
    return result;
}

static void kl_crc_fill_shift_table(uint32_t table[4][256], size_t nbytes) {
    uint32_t op = kl_crc_zeros_operator(nbytes);
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++)
            table[k][n] = kl_crc_multmodp(op, n << (8 * k));
}

static inline uint32_t kl_crc_shift(uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^
           table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

static inline uint64_t kl_load_le64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* ---- software: slicing-by-8 ---------------------------------------------- */

static uint32_t kl_crc32c_sw_raw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = kl_crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w = kl_load_le64(p) ^ crc;
        crc = kl_crc_table[7][w & 0xff] ^ kl_crc_table[6][(w >> 8) & 0xff] ^
              kl_crc_table[5][(w >> 16) & 0xff] ^ kl_crc_table[4][(w >> 24) & 0xff] ^
              kl_crc_table[3][(w >> 32) & 0xff] ^ kl_crc_table[2][(w >> 40) & 0xff] ^
              kl_crc_table[1][(w >> 48) & 0xff] ^ kl_crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = kl_crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

/* ---- hardware: SSE4.2, three interleaved streams --------------------------- */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KL_CRC_HAVE_X86 1
#include <nmmintrin.h>

__attribute__((target("sse4.2")))
static uint32_t kl_crc32c_hw_raw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c0 = crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    while (n >= 3 * KL_CRC_LONG) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + KL_CRC_LONG;
        do {
            c0 = _mm_crc32_u64(c0, kl_load_le64(p));
            c1 = _mm_crc32_u64(c1, kl_load_le64(p + KL_CRC_LONG));
            c2 = _mm_crc32_u64(c2, kl_load_le64(p + 2 * KL_CRC_LONG));
            p += 8;
        } while (p < end);
        c0 = kl_crc_shift(kl_crc_long_shift, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = kl_crc_shift(kl_crc_long_shift, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * KL_CRC_LONG;
        n -= 3 * KL_CRC_LONG;
    }
    while (n >= 3 * KL_CRC_SHORT) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + KL_CRC_SHORT;
        do {
            c0 = _mm_crc32_u64(c0, kl_load_le64(p));
            c1 = _mm_crc32_u64(c1, kl_load_le64(p + KL_CRC_SHORT));
            c2 = _mm_crc32_u64(c2, kl_load_le64(p + 2 * KL_CRC_SHORT));
            p += 8;
        } while (p < end);
        c0 = kl_crc_shift(kl_crc_short_shift, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = kl_crc_shift(kl_crc_short_shift, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * KL_CRC_SHORT;
        n -= 3 * KL_CRC_SHORT;
    }
    while (n >= 8) {
        c0 = _mm_crc32_u64(c0, kl_load_le64(p));
        p += 8;
        n -= 8;
    }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#else
#define KL_CRC_HAVE_X86 0
static uint32_t kl_crc32c_hw_raw(uint32_t crc, const unsigned char *p, size_t n) {
    return kl_crc32c_sw_raw(crc, p, n);
}
#endif

/* ---- public --------------------------------------------------------------- */

static void kl_crc32c_init(void) {
    if (kl_crc_initialised) return;
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ KL_CRC32C_POLY : c >> 1;
        kl_crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = kl_crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = kl_crc_table[0][c & 0xff] ^ (c >> 8);
            kl_crc_table[k][n] = c;
        }
    }
    kl_crc_fill_shift_table(kl_crc_long_shift, KL_CRC_LONG);
    kl_crc_fill_shift_table(kl_crc_short_shift, KL_CRC_SHORT);
#if KL_CRC_HAVE_X86
    __builtin_cpu_init();
    kl_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    kl_crc_initialised = 1;
}

static inline int kl_crc32c_has_hw(void) { return kl_crc_hw; }

static inline uint32_t kl_crc32c_sw(uint32_t crc, const unsigned char *p, size_t n) {
    return ~kl_crc32c_sw_raw(~crc, p, n);
}

static inline uint32_t kl_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    return ~kl_crc32c_hw_raw(~crc, p, n);
}

static inline uint32_t kl_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    return kl_crc_hw ? kl_crc32c_hw(crc, p, n) : kl_crc32c_sw(crc, p, n);
}

#endif /* KAFKALITE_CRC32C_IMPL_H */
