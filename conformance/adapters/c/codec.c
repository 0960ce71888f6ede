/* codec.c: the quantised layouts of codec.md, read side only: AWQ v1 unpacking, the Marlin
 * qweight inverse map, the scale and zero-point unpermutations, and dequantisation. */
#include "awq2.h"

#include <stdlib.h>
#include <string.h>

static const unsigned INV4[8] = {0, 4, 1, 5, 2, 6, 3, 7}; /* codec.md, AWQ v1 packing */
static const unsigned INV8[4] = {0, 2, 1, 3};

static uint32_t word_at(const uint8_t *payload, uint64_t index)
{
    const uint8_t *p = payload + 4 * index; /* I32, little-endian (ENT-8) */
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* binary16 -> binary32, exact (subnormals included). */
static uint32_t f16_to_f32_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
    if (exp == 0x1F)
        return sign | 0x7F800000u | frac << 13;
    if (exp == 0) {
        if (frac == 0)
            return sign;
        int e = -1; /* normalise the subnormal */
        do {
            e++;
            frac <<= 1;
        } while (!(frac & 0x400));
        return sign | (uint32_t)(127 - 15 - e) << 23 | (frac & 0x3FF) << 13;
    }
    return sign | (exp + 127 - 15) << 23 | frac << 13;
}

static float bits_to_float(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Column of the plain scales row that stored column `col` holds; both maps are involutions
 * (codec.md, Marlin scales). */
static uint64_t scale_source(uint64_t col, int channelwise)
{
    if (channelwise) { /* out[32b + 8a + 2p + r] = in[32b + 8p + 2a + r] */
        uint64_t b = col / 32, x = col % 32, a = x / 8, p = (x % 8) / 2, r = x % 2;
        return 32 * b + 8 * p + 2 * a + r;
    }
    uint64_t b = col / 64, x = col % 64, i = x / 8, j = x % 8; /* out[64b+8i+j] = in[64b+8j+i] */
    return 64 * b + 8 * j + i;
}

int awq2_decode_layer(const awq2_file *f, const awq2_entry *qw, const awq2_entry *sc,
                      const awq2_entry *qz, awq2_layer_hashes *out, awq2_error *err)
{
    const uint64_t k = qw->k, n = qw->n, bits = qw->bits, pf = 32 / bits, mask = (1u << bits) - 1;
    const int64_t gs = qw->group_size;
    const uint64_t groups = gs == -1 ? 1 : k / (uint64_t)gs;
    const int marlin = qw->layout == AWQ2_MARLIN_QWEIGHT;
    const unsigned *inv = bits == 4 ? INV4 : INV8;
    const unsigned itemsize = awq2_dtype_size(sc->dtype);
    const uint8_t *pw = f->data + qw->data_offset, *ps = f->data + sc->data_offset,
                  *pz = f->data + qz->data_offset;
    /* sizes are bounded by the payloads, which lie in the file */
    uint8_t *z = malloc(groups * n), *srow = malloc(n * itemsize), *row = malloc(n);
    float *s = malloc(groups * n * sizeof *s);
    uint8_t *wrow = malloc(n * 4);
    if (!z || !srow || !row || !s || !wrow) {
        free(z), free(srow), free(row), free(s), free(wrow);
        return awq2_fail(err, "BAD_QUANT_FIELDS", qw->at, "out of memory decoding the layer");
    }
    awq2_sha256 hz, hs, hq, hw;
    awq2_sha256_init(&hz);
    awq2_sha256_init(&hs);
    awq2_sha256_init(&hq);
    awq2_sha256_init(&hw);
    /* zero points z[G][n] and plain scales s[G][n] */
    int channelwise = gs == -1 || (uint64_t)gs >= k;
    for (uint64_t g = 0; g < groups; g++) {
        for (uint64_t c = 0; c < n; c++) {
            /* MARLIN_QZEROS: the 64-column transpose before the AWQ packing, always */
            uint64_t m = marlin ? 64 * (c / 64) + 8 * (c % 8) + (c % 64) / 8 : c;
            uint32_t word = word_at(pz, g * (n / pf) + m / pf);
            z[g * n + c] = (uint8_t)((word >> (bits * inv[m % pf])) & mask);
            uint64_t src = marlin ? scale_source(c, channelwise) : c; /* stored column */
            const uint8_t *e = ps + (g * n + src) * itemsize;
            memcpy(srow + c * itemsize, e, itemsize);
            uint32_t b32;
            if (sc->dtype == AWQ2_F32)
                b32 = (uint32_t)e[0] | (uint32_t)e[1] << 8 | (uint32_t)e[2] << 16 |
                      (uint32_t)e[3] << 24;
            else if (sc->dtype == AWQ2_BF16)
                b32 = ((uint32_t)e[0] | (uint32_t)e[1] << 8) << 16;
            else
                b32 = f16_to_f32_bits((uint16_t)(e[0] | e[1] << 8));
            s[g * n + c] = bits_to_float(b32);
        }
        awq2_sha256_update(&hz, z + g * n, n);
        awq2_sha256_update(&hs, srow, n * itemsize);
    }
    /* codes q[k][n], row by row, and w = (float(q) - float(z)) * float(s) in binary32 */
    const uint64_t words_per_row = marlin ? n * 16 / pf : n / pf;
    for (uint64_t kk = 0; kk < k; kk++) {
        uint64_t g = gs == -1 ? 0 : kk / (uint64_t)gs;
        for (uint64_t c = 0; c < n; c++) {
            uint32_t word;
            unsigned field;
            if (marlin) { /* codec.md, Marlin qweight, inverse map */
                uint64_t R = kk / 16, kr = kk % 16, hk = kr / 8, l = (kr % 8) / 2, dk = kr % 2;
                uint64_t T = c / 64, nr = c % 64, S = nr / 16, blk = (nr % 16) / 8, cc = nr % 8;
                uint64_t L = 4 * cc + l, j;
                if (bits == 4) {
                    j = 128 * T + 4 * L + S;
                    field = (unsigned)(4 * dk + 2 * blk + hk);
                } else {
                    j = 256 * T + 8 * L + 2 * S + blk;
                    field = (unsigned)(2 * dk + hk);
                }
                word = word_at(pw, R * words_per_row + j);
            } else {
                word = word_at(pw, kk * words_per_row + c / pf);
                field = inv[c % pf];
            }
            uint8_t q = (uint8_t)((word >> (bits * field)) & mask);
            row[c] = q;
            float diff = (float)q - (float)z[g * n + c]; /* exact */
            float w = diff * s[g * n + c];                 /* the only rounding */
            uint32_t wb;
            memcpy(&wb, &w, sizeof wb);
            put_le32(wrow + 4 * c, wb);
        }
        awq2_sha256_update(&hq, row, n);
        awq2_sha256_update(&hw, wrow, n * 4);
    }
    awq2_sha256_hex(&hq, out->codes);
    awq2_sha256_hex(&hz, out->zeros);
    awq2_sha256_hex(&hs, out->scales);
    awq2_sha256_hex(&hw, out->dequantized);
    free(z), free(srow), free(row), free(s), free(wrow);
    return 0;
}
