/* rng.c - xoshiro256** with splitmix64 seeding; splittable into independent streams. */
#include "llmsys/core.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void ls_rng_seed(ls_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

/* A child stream is seeded from a hash of the parent's state and the stream id, so
 * splitting is a pure function of (parent, stream) and children do not overlap in
 * practice (2^256 period, independently seeded). */
ls_rng ls_rng_split(const ls_rng *r, uint64_t stream) {
    uint64_t x = r->s[0] ^ rotl(r->s[1], 17) ^ rotl(r->s[2], 31) ^ rotl(r->s[3], 47);
    x ^= splitmix64(&stream);
    ls_rng c;
    ls_rng_seed(&c, x);
    return c;
}

uint64_t ls_rng_u64(ls_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t ls_rng_below(ls_rng *r, uint64_t n) {
    LS_ASSERT(n > 0);
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do v = ls_rng_u64(r);
    while (v >= lim);
    return v % n;
}

float ls_rng_uniform(ls_rng *r) { return (float)(ls_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

double ls_rng_uniform_f64(ls_rng *r) { return (double)(ls_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

float ls_rng_normal(ls_rng *r) {
    double u1 = ls_rng_uniform_f64(r), u2 = ls_rng_uniform_f64(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void ls_rng_shuffle_int(ls_rng *r, int *a, size_t n) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)ls_rng_below(r, i);
        int t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}
