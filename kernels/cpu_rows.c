/* y = x @ w.T for a few rows of x: the CPU matrix product of a verify forward.
 *
 * Decoding reads every weight once per forward and multiplies it with 1..~16 rows, so the
 * product is bound by memory bandwidth, not arithmetic, as long as each weight is loaded once
 * for all rows. oneDNN's and MKL's general kernels do not manage that for so few rows (5 rows
 * cost 1.3-1.4x one row); this one does: w is stored as panels of 16 output columns,
 * wp[p][k][0..15] = w[16 p + j][k], streamed once; for each group of up to 6 rows
 * the 16 x 6 outputs of a panel stay in 12 AVX2 registers while k runs over a slice of the
 * panel (the 6 x 16 register block of BLIS's Haswell kernel); more rows reuse the slice from L1.
 * Panels are split across OpenMP threads.
 *
 * Every row is summed in the same order whatever the number of rows, so a row's output is
 * bit-identical whether it is verified alone or with drafts.
 *
 * quant_matmul does the same from weights kept in the GGUF file's own block formats (Q4_1: 4-bit
 * codes q, per 32 inputs an fp16 scale d and offset m, w = d q + m; Q8_0: int8 q, fp16 d,
 * w = d q), 0.625 and 1.06 bytes per weight instead of 4. Each 32 x 16 block of a panel is
 * expanded in registers, 16 weights of one input at a time (one fma per 8 weights: d q is exact
 * in fp32, so fma(q, d, m) rounds once, as d q + m does), and each row's sum runs in the same
 * order as above: the outputs are bit-identical to rows_matmul's on the dequantized weight, at a
 * fifth of the memory traffic. Expanding costs arithmetic, so here rows are not free (a whole
 * forward of 9 rows ~2.5x one row). Two more formats carry llama.cpp's K-quants with fp32 scales
 * per 32 inputs (FMT_Q4_F: Q4_K's; FMT_Q8_F: int8 codes with a scale per 16 inputs and an offset,
 * Q5_K's, Q6_K's, Q5_1's), expanded the same way and as exactly.
 *
 * layers_rows, at the end, runs whole decoder layers around these products in one call.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define PANEL 16
#define ROWS 6
#define K_BLOCK 128 /* a panel slice of 8 KB stays in L1 while every group of rows uses it */
#define PREFETCH 128 /* k steps (cache lines of the panel) ahead */
#define QK 32 /* inputs per quantization block */
#define QPREFETCH 24 /* blocks ahead (~8 KB of Q4_1): 6-10 % faster at one row than 4 */
#define Q4_1_BYTES (4 * PANEL + QK * PANEL / 2) /* d[16], m[16] fp16; 32 x 8 bytes of nibbles */
#define Q8_0_BYTES (2 * PANEL + QK * PANEL)     /* d[16] fp16; 32 x 16 int8 */

/* Rows r < rows of y[., 0..15] (+)= x[r, kb..kb + kn) . wp[kb..kb + kn); row stride k_dim. */
static inline __attribute__((always_inline)) void panel_rows(
    const float *x, const float *wp, float *y, const int rows, int kn, int k_dim, int n_dim,
    int first, const int prefetch) {
    __m256 lo[ROWS], hi[ROWS];
    for (int r = 0; r < rows; r++) {
        lo[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + (size_t)r * n_dim);
        hi[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + (size_t)r * n_dim + 8);
    }
    for (int k = 0; k < kn; k++) {
        if (prefetch)
            _mm_prefetch((const char *)(wp + PANEL * (k + PREFETCH)), _MM_HINT_T0);
        __m256 w_lo = _mm256_loadu_ps(wp + PANEL * k), w_hi = _mm256_loadu_ps(wp + PANEL * k + 8);
        for (int r = 0; r < rows; r++) {
            __m256 b = _mm256_broadcast_ss(x + (size_t)r * k_dim + k);
            lo[r] = _mm256_fmadd_ps(b, w_lo, lo[r]);
            hi[r] = _mm256_fmadd_ps(b, w_hi, hi[r]);
        }
    }
    for (int r = 0; r < rows; r++) {
        _mm256_storeu_ps(y + (size_t)r * n_dim, lo[r]);
        _mm256_storeu_ps(y + (size_t)r * n_dim + 8, hi[r]);
    }
}

/* m rows go in ceil(m / 6) groups of near-equal size (7 rows: 4 + 3, not 6 + 1): a group of
 * r rows has 2 r independent fma chains, and one row alone waits on their latency. */
#define GROUPS(m) (((m) + ROWS - 1) / ROWS)
#define GROUP_ROWS(m, g) ((m) / GROUPS(m) + ((g) < (m) % GROUPS(m)))

/* The next group of min(rows, 6) rows, with constant row counts (registers). */
static inline __attribute__((always_inline)) void all_rows(
    const float *x, const float *wp, float *y, int rows, int kn, int k_dim, int n_dim, int first,
    const int prefetch) {
    switch (rows < ROWS ? rows : ROWS) {
    case 1: panel_rows(x, wp, y, 1, kn, k_dim, n_dim, first, prefetch); break;
    case 2: panel_rows(x, wp, y, 2, kn, k_dim, n_dim, first, prefetch); break;
    case 3: panel_rows(x, wp, y, 3, kn, k_dim, n_dim, first, prefetch); break;
    case 4: panel_rows(x, wp, y, 4, kn, k_dim, n_dim, first, prefetch); break;
    case 5: panel_rows(x, wp, y, 5, kn, k_dim, n_dim, first, prefetch); break;
    default: panel_rows(x, wp, y, 6, kn, k_dim, n_dim, first, prefetch); break;
    }
}

/* The barrier after each step of a parallel region that runs several (the _ws forms below in
 * layers_rows), which sets `ws_spin` for it: one that spins. OpenMP's sleeping
 * waits (OMP_WAIT_POLICY=PASSIVE, so that idle workers leave the cores to speech recognition
 * and TTS) cost ~23 us a barrier on Zen 4, and a forward meets ~400; libgomp's own spinning is
 * process-wide and throttled once a second thread runs a team. This one spins only inside the
 * region that set it and yields the core after SPIN_LIMIT pauses; a wait past LATE_NS means a
 * thread of the team was preempted (another process wants the core), which `late` counts for
 * the caller to take fewer threads (a step's own imbalance is tens of us). */
#define SPIN_LIMIT 2000
#define LATE_NS 3000000L

typedef struct {
    atomic_int arrived;
    atomic_int phase;
    atomic_int late;
    int sleep; /* OpenMP's own barrier instead (several conversations: layers_rows) */
} SpinBarrier;

static _Thread_local SpinBarrier *ws_spin;
static _Thread_local int ws_phase;

static void ws_barrier(void) {
    SpinBarrier *b = ws_spin;
    if (!b) /* one thread, or a region that runs one _ws form: the region's end is the barrier */
        return;
    if (b->sleep) {
#pragma omp barrier
        return;
    }
    const int next = ++ws_phase;
    if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) ==
        omp_get_num_threads() - 1) {
        atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
        atomic_store_explicit(&b->phase, next, memory_order_release);
        return;
    }
    struct timespec t0 = {0, 0}, t1;
    for (long spins = 0; atomic_load_explicit(&b->phase, memory_order_acquire) != next; spins++) {
        if (spins < SPIN_LIMIT) {
            _mm_pause();
            continue;
        }
        if (spins == SPIN_LIMIT)
            clock_gettime(CLOCK_MONOTONIC, &t0);
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) * 1000000000L + t1.tv_nsec - t0.tv_nsec > LATE_NS) {
            atomic_fetch_add_explicit(&b->late, 1, memory_order_relaxed);
            while (atomic_load_explicit(&b->phase, memory_order_acquire) != next)
                sched_yield();
            return;
        }
    }
}

/* x: (m, k) row-major; wp: (n / 16, k, 16); y: (m, n) row-major; n a multiple of 16. The _ws
 * forms share their loop among the threads of the enclosing parallel region (orphaned `omp
 * for`, then ws_barrier): one region can then run several of them. */
static void rows_matmul_ws(const float *x, const float *wp, float *y, int m, int n, int k) {
    const int panels = n / PANEL;
#pragma omp for schedule(static) nowait
    for (int p = 0; p < panels; p++) {
        for (int k0 = 0; k0 < k; k0 += K_BLOCK) {
            const int kn = k - k0 < K_BLOCK ? k - k0 : K_BLOCK;
            const float *w = wp + ((size_t)p * k + k0) * PANEL;
            for (int g = 0, r0 = 0; r0 < m; r0 += GROUP_ROWS(m, g), g++) {
                const float *xr = x + (size_t)r0 * k + k0;
                float *yr = y + (size_t)r0 * n + PANEL * p;
                all_rows(xr, w, yr, GROUP_ROWS(m, g), kn, k, n, k0 == 0, 1);
            }
        }
    }
    ws_barrier();
}

void rows_matmul(const float *x, const float *wp, float *y, int m, int n, int k, int threads) {
#pragma omp parallel num_threads(threads)
    rows_matmul_ws(x, wp, y, m, n, k);
}

/* The block formats of quant_rows / expand_blocks (the fmt codes of quant_matmul): per panel of
 * 16 columns and block of 32 inputs, the scales, then the codes of the 32 inputs, 16 columns
 * each. FMT_Q4_F and FMT_Q8_F hold GGUF's K-quants (Q4_K; Q5_K, Q6_K, Q5_1) in 32-input blocks:
 * their per-32 (Q6_K: per-16) scales d sc are products of an fp16 and a 6- or 8-bit integer,
 * kept exactly in fp32, and q d sc stays exact (at most 24 bits), so fma(q, d, m) still rounds
 * once, as the dequantized weight d q + m does. */
#define FMT_Q4_1 1 /* d[16], m[16] fp16; 32 x 8 bytes, column j low nibble, j + 8 high */
#define FMT_Q8_0 2 /* d[16] fp16; 32 x 16 int8 */
#define FMT_Q4_F 5 /* d[16], m[16] fp32; nibbles as Q4_1 */
#define FMT_Q8_F 6 /* d_lo[16] (inputs 0-15), d_hi[16] (16-31), m[16] fp32; 32 x 16 int8 */
#define FMT_Q4_1_INT 3 /* the integer products' layouts (pack_quant's "_vnni") */
#define FMT_Q8_0_INT 4
#define FMT_Q8_F_INT 7
#define FMT_Q4_F_INT 8 /* q4_f's fp32 d[16], m[16], then codes as FMT_Q4_1_INT's (VNNI) */
#define Q4_INT(fmt) ((fmt) == FMT_Q4_1_INT || (fmt) == FMT_Q4_F_INT)
#define Q4_F_BYTES (8 * PANEL + QK * PANEL / 2)
#define Q8_F_BYTES (12 * PANEL + QK * PANEL)
#define QBYTES(fmt)                                                                                \
    ((fmt) == FMT_Q4_1 ? Q4_1_BYTES : (fmt) == FMT_Q8_0 ? Q8_0_BYTES                             \
     : (fmt) == FMT_Q4_F ? Q4_F_BYTES : Q8_F_BYTES)
#define NIBBLES(fmt) ((fmt) == FMT_Q4_1 || (fmt) == FMT_Q4_F)
/* The products over panels take `pick`: NULL for every panel of w, or a list of panels of w to
 * compute, whose outputs come side by side (panel pick[u] in columns 16 u..16 u + 15, and n the
 * columns of y): each is computed exactly as in the whole product. */
#define PICKED(pick, p) ((size_t)((pick) ? (pick)[p] : (p)))
/* Where the integer products prefetch from while multiplying a panel's block b (at pf + b
 * bytes): QPREFETCH blocks ahead in the stream of panels, or the next picked panel's block b
 * (with a pick, the panels after this one are seldom the next one read). */
#define PREFETCH_AT(wq, pick, p, panels, pstride, wp, bytes)                                       \
    ((pick) ? (wq) + PICKED(pick, (p) + 1 < (panels) ? (p) + 1 : (p)) * (pstride)                  \
            : (wp) + QPREFETCH * (bytes))

/* The scales of half h (inputs 16 h..16 h + 15) of the block at blk, 8 columns a register: d,
 * and m (none in Q8_0's). */
static inline __attribute__((always_inline)) void block_scales(const uint8_t *blk, const int fmt,
                                                               int h, __m256 d[2], __m256 m[2]) {
    if (fmt == FMT_Q4_1 || fmt == FMT_Q8_0) {
        d[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
        d[1] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)));
        if (fmt == FMT_Q4_1) {
            m[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 32)));
            m[1] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 48)));
        }
        return;
    }
    const float *s = (const float *)blk;
    const int dm = fmt == FMT_Q8_F ? 2 * PANEL : PANEL; /* where m starts */
    d[0] = _mm256_loadu_ps(s + (fmt == FMT_Q8_F ? PANEL * h : 0));
    d[1] = _mm256_loadu_ps(s + (fmt == FMT_Q8_F ? PANEL * h : 0) + 8);
    m[0] = _mm256_loadu_ps(s + dm);
    m[1] = _mm256_loadu_ps(s + dm + 8);
}

/* The 16 weights of input k of a block whose codes start at q, from its scales: w[0] columns
 * 0-7, w[1] 8-15. One fma (Q8_0: one product) per 8, each exact but for its one rounding. */
static inline __attribute__((always_inline)) void input_weights(const uint8_t *q, int k,
                                                                const int fmt, const __m256 d[2],
                                                                const __m256 m[2], __m256 w[2]) {
    if (NIBBLES(fmt)) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * k)));
        w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15))),
                               d[0], m[0]);
        w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), d[1], m[1]);
        return;
    }
    const __m128i v = _mm_loadu_si128((const __m128i *)(q + PANEL * k));
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
    if (fmt == FMT_Q8_0) {
        w[0] = _mm256_mul_ps(lo, d[0]);
        w[1] = _mm256_mul_ps(hi, d[1]);
    } else {
        w[0] = _mm256_fmadd_ps(lo, d[0], m[0]);
        w[1] = _mm256_fmadd_ps(hi, d[1], m[1]);
    }
}

/* Rows r < rows of y[., 0..16 np) = x[r, .] . the np (1, 2) panels at wq, wq + pstride, ...,
 * dequantized on the fly: the 2 np x rows accumulators stay in registers for the whole of k (at one
 * row, 2 panels give the fma chains the independence one panel lacks). fmt: a constant, so the
 * k loop has no branch. */
static inline __attribute__((always_inline)) void quant_rows(
    const float *x, const uint8_t *wq, size_t pstride, float *y, const int rows, const int np,
    int blocks, int k_dim, int n_dim, const int fmt) {
    const size_t bytes = QBYTES(fmt), codes = bytes - QK * PANEL / (NIBBLES(fmt) ? 2 : 1);
    __m256 acc[2][ROWS][2];
    for (int p = 0; p < np; p++)
        for (int r = 0; r < rows; r++)
            acc[p][r][0] = acc[p][r][1] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        __m256 d[2][2], m[2][2];
        const uint8_t *blk[2];
        for (int p = 0; p < np; p++) {
            blk[p] = wq + p * pstride + b * bytes;
            for (size_t line = 0; line < bytes; line += 64)
                _mm_prefetch((const char *)(blk[p] + QPREFETCH * bytes + line), _MM_HINT_T0);
            block_scales(blk[p], fmt, 0, d[p], m[p]);
        }
        const float *xb = x + QK * b;
        for (int h = 0; h < 2; h++) {
            if (fmt == FMT_Q8_F && h) /* inputs 16-31 have their own scale */
                for (int p = 0; p < np; p++)
                    block_scales(blk[p], fmt, 1, d[p], m[p]);
            for (int k = 16 * h; k < 16 * h + 16; k++) {
                __m256 w[2][2];
                for (int p = 0; p < np; p++)
                    input_weights(blk[p] + codes, k, fmt, d[p], m[p], w[p]);
                for (int r = 0; r < rows; r++) {
                    const __m256 bx = _mm256_broadcast_ss(xb + (size_t)r * k_dim + k);
                    for (int p = 0; p < np; p++) {
                        acc[p][r][0] = _mm256_fmadd_ps(bx, w[p][0], acc[p][r][0]);
                        acc[p][r][1] = _mm256_fmadd_ps(bx, w[p][1], acc[p][r][1]);
                    }
                }
            }
        }
    }
    for (int p = 0; p < np; p++)
        for (int r = 0; r < rows; r++) {
            _mm256_storeu_ps(y + (size_t)r * n_dim + PANEL * p, acc[p][r][0]);
            _mm256_storeu_ps(y + (size_t)r * n_dim + PANEL * p + 8, acc[p][r][1]);
        }
}

/* buf[kk][0..15] = the weights of inputs 32 b0 + kk of one panel, for its blocks b0..b0 + nb - 1,
 * dequantized with quant_rows' arithmetic (the same bits). */
static inline __attribute__((always_inline)) void expand_blocks(const uint8_t *wp, int b0, int nb,
                                                                float *buf, const int fmt) {
    const size_t bytes = QBYTES(fmt), codes = bytes - QK * PANEL / (NIBBLES(fmt) ? 2 : 1);
    for (int b = b0; b < b0 + nb; b++) {
        const uint8_t *blk = wp + b * bytes;
        for (size_t line = 0; line < bytes; line += 64)
            _mm_prefetch((const char *)(blk + QPREFETCH * bytes + line), _MM_HINT_T0);
        float *out = buf + (size_t)(b - b0) * QK * PANEL;
        __m256 d[2], m[2], w[2];
        block_scales(blk, fmt, 0, d, m);
        for (int k = 0; k < QK; k++) {
            if (fmt == FMT_Q8_F && k == 16)
                block_scales(blk, fmt, 1, d, m);
            input_weights(blk + codes, k, fmt, d, m, w);
            _mm256_storeu_ps(out + PANEL * k, w[0]);
            _mm256_storeu_ps(out + PANEL * k + 8, w[1]);
        }
    }
}

/* As rows_matmul, from wq: (n / 16, k / 32) blocks of QBYTES(fmt), fmt FMT_Q4_1, FMT_Q8_0,
 * FMT_Q4_F or FMT_Q8_F. Each group of rows dequantizes in registers for itself (quant_rows): a
 * panel's blocks are read from memory once, by the first group, and from cache by the others.
 * From 3 groups on (13+ rows: prefills) that repeated expansion costs more than a store: each
 * K_BLOCK slice of a panel is expanded once into an L1 buffer that every group multiplies like
 * an fp32 panel (panel_rows; whole forwards of 64 rows ~10 % faster). */
static void quant_matmul_ws(const float *x, const uint8_t *wq, float *y, int m, int n, int k,
                            int fmt, const int32_t *pick) {
    const int panels = n / PANEL, blocks = k / QK;
    const size_t pstride = QBYTES(fmt) * (size_t)blocks;
    if (m > 2 * ROWS) {
#pragma omp for schedule(static) nowait
        for (int p = 0; p < panels; p++) {
            float buf[K_BLOCK * PANEL] __attribute__((aligned(32)));
            for (int b0 = 0; b0 < blocks; b0 += K_BLOCK / QK) {
                const int nb = blocks - b0 < K_BLOCK / QK ? blocks - b0 : K_BLOCK / QK;
                const uint8_t *wp = wq + PICKED(pick, p) * pstride;
                switch (fmt) { /* a constant format each: no branch in the loop */
                case FMT_Q4_1: expand_blocks(wp, b0, nb, buf, FMT_Q4_1); break;
                case FMT_Q8_0: expand_blocks(wp, b0, nb, buf, FMT_Q8_0); break;
                case FMT_Q4_F: expand_blocks(wp, b0, nb, buf, FMT_Q4_F); break;
                default: expand_blocks(wp, b0, nb, buf, FMT_Q8_F); break;
                }
                for (int g = 0, r0 = 0; r0 < m; r0 += GROUP_ROWS(m, g), g++)
                    all_rows(x + (size_t)r0 * k + QK * b0, buf, y + (size_t)r0 * n + PANEL * p,
                             GROUP_ROWS(m, g), nb * QK, k, n, b0 == 0, 0);
            }
        }
        ws_barrier();
        return;
    }
    const int np = m == 1 && !pick ? 2 : 1; /* picked panels are not side by side */
#pragma omp for schedule(static) nowait
    for (int u = 0; u < (panels + np - 1) / np; u++) {
        const int p = u * np, two = p + 1 < panels && np == 2;
        const uint8_t *wp = wq + PICKED(pick, p) * pstride;
        for (int g = 0, r0 = 0; r0 < m; r0 += GROUP_ROWS(m, g), g++) {
            const float *xr = x + (size_t)r0 * k;
            float *yr = y + (size_t)r0 * n + PANEL * p;
            /* constant row and panel counts and format: registers, no branch in the k loop */
#define QR(R, NP, F) quant_rows(xr, wp, pstride, yr, R, NP, blocks, k, n, F); break
#define QUANT_ROWS_SWITCH(F)                                                                       \
    switch (GROUP_ROWS(m, g) * 2 + two) {                                                          \
    case 2: QR(1, 1, F); case 3: QR(1, 2, F);                                                      \
    case 4: QR(2, 1, F); case 6: QR(3, 1, F); case 8: QR(4, 1, F); case 10: QR(5, 1, F);           \
    default: QR(6, 1, F);                                                                          \
    }
            switch (fmt) {
            case FMT_Q4_1: QUANT_ROWS_SWITCH(FMT_Q4_1) break;
            case FMT_Q8_0: QUANT_ROWS_SWITCH(FMT_Q8_0) break;
            case FMT_Q4_F: QUANT_ROWS_SWITCH(FMT_Q4_F) break;
            default: QUANT_ROWS_SWITCH(FMT_Q8_F) break;
            }
#undef QUANT_ROWS_SWITCH
#undef QR
        }
    }
    ws_barrier();
}

/* --- Integer products (AVX-512 VNNI) -------------------------------------------------------
 *
 * On CPUs with AVX-512 VNNI (Zen 4/5, Intel server parts since Ice Lake) a verify row need not
 * pay the fp32 expansion above: each row of x is rounded to int16 per block of 32 inputs, all
 * but the block's largest input, which stays fp32 (dx = the others' max |x| / 32767, xq =
 * round(x / dx)), and multiplied with the weight's own codes in exact int32 sums; each block's
 * sum is finished in fp32:
 * Q4_1  y += d (dx sum(q xq) + out q_out) + m sum(x),  Q8_0  the same without m.
 * A row's result depends on nothing but the row (integer sums are exact, the fp32 steps run in
 * block order), so verify rows stay bit-identical to `ar`'s. Against the fp32 products the
 * bundled model's logits move by < 0.01 (int8 activations, llama.cpp's choice with twice the
 * products an instruction, moved them by 5 and changed every benchmark answer; int16 without
 * the fp32 outlier moved them by 0.02 and flipped a near-tie in one of four reference answers).
 *
 * Q8_0 codes widen to int16 for vpdpwssd (32 products an instruction). Q4_1 codes stay bytes
 * for vpdpbusd (64 byte products an instruction) against x's int16 codes split into bytes,
 * xq = 256 hi + lo: as many instructions as vpdpwssd on widened codes, the same integer sums,
 * and no widening, a cross-lane shuffle that took ~40 % of a 1-row product on Zen 4 (3072 x 576
 * in L2: 44.8 -> 37.9 us; extra rows cost what they did, 16 instructions a row per 512 codes).
 *
 * Panel layouts (pack_quant): per panel of 16 columns and block of 32 inputs, the scales as
 * before, then the codes. Q4_1: d[16], m[16] fp16, 4 chunks of 64 bytes, byte 4 j + i of chunk
 * c holding input 8 c + i of column j in its low nibble and input 8 c + 4 + i in its high one
 * (vpdpbusd's 4 products a lane); Q8_0: d[16] fp16, 16 chunks of 32 int8, 16-bit lane 2 j + i
 * of chunk c being input 2 c + i of column j (vpdpwssd's order). */
#define VROWS 5 /* rows summed in registers together (6 spill: 6 rows 2.3x one row, not 2.0x) */
#define VQ4_1_BYTES (4 * PANEL + 8 * 32) /* 320: as Q4_1_BYTES */
#define VQ8_0_BYTES (2 * PANEL + 16 * 32) /* 544: as Q8_0_BYTES */
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

int vnni_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

/* x rounded to int16 per block of 32 inputs, for the products below: codes (m, k), and per row
 * and block the scale dx, the sum of the fp32 inputs, and the block's largest input (`out`, at
 * `at`), which is kept in fp32 and coded 0: a few channels of a model's activations run tens to
 * thousands of times larger than the rest of their block (SmolLM2: in 10 % of the q/k/v
 * product's blocks the largest input is over 4x the next), and scaling the block by them
 * would round the others coarsely. */
typedef struct {
    int16_t *q;
    int8_t *hi; /* the codes' high bytes, q >> 8 (for the Q4_1 products) */
    uint8_t *lo; /* and their low bytes, q & 255: q = 256 hi + lo */
    float *d, *sum, *out;
    int32_t *at;
} XRows;

/* One allocation, released by free(xr.d). */
static XRows xrows_alloc(int m, int k) {
    const size_t blocks = (size_t)m * (k / QK), codes = (size_t)m * k;
    float *mem = malloc(blocks * 4 * sizeof(float) + codes * (sizeof(int16_t) + 2));
    int16_t *q = (int16_t *)(mem + 4 * blocks);
    XRows r = {q, (int8_t *)(q + codes), (uint8_t *)(q + codes) + codes, mem, mem + blocks,
               mem + 2 * blocks, (int32_t *)(mem + 3 * blocks)};
    return r;
}

VNNI static void quantize_rows(const float *x, int m, int k, XRows xr, int q4) {
    const int blocks = k / QK;
    for (int r = 0; r < m; r++)
        for (int b = 0; b < blocks; b++) {
            const float *xb = x + (size_t)r * k + QK * b;
            const size_t at = (size_t)r * blocks + b;
            __m512 a = _mm512_loadu_ps(xb), c = _mm512_loadu_ps(xb + 16);
            xr.sum[at] = _mm512_reduce_add_ps(_mm512_add_ps(a, c));
            const __m512 abs_a = _mm512_abs_ps(a), abs_c = _mm512_abs_ps(c);
            const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(abs_a, abs_c)));
            const uint32_t hit = _mm512_cmp_ps_mask(abs_a, top, _CMP_EQ_OQ) |
                                 (uint32_t)_mm512_cmp_ps_mask(abs_c, top, _CMP_EQ_OQ) << 16;
            const int i = hit ? __builtin_ctz(hit) : 0; /* the first largest input */
            xr.at[at] = i;
            xr.out[at] = xb[i];
            a = _mm512_mask_mov_ps(a, i < 16 ? (__mmask16)(1u << i) : 0, _mm512_setzero_ps());
            c = _mm512_mask_mov_ps(c, i >= 16 ? (__mmask16)(1u << (i - 16)) : 0,
                                   _mm512_setzero_ps());
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a),
                                                                  _mm512_abs_ps(c)));
            const float dx = amax / 32767.0f, inv = amax > 0.0f ? 1.0f / dx : 0.0f;
            const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(inv)));
            const __m512i qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, _mm512_set1_ps(inv)));
            const size_t o = (size_t)r * k + QK * b;
            xr.d[at] = dx;
            if (!q4) { /* Q8_0's products read the int16 codes, Q4_1's their bytes */
                _mm256_storeu_si256((__m256i *)(xr.q + o), _mm512_cvtsepi32_epi16(qa));
                _mm256_storeu_si256((__m256i *)(xr.q + o + 16), _mm512_cvtsepi32_epi16(qc));
                continue;
            }
            const __m512i lo16 = _mm512_set1_epi32(-32768), hi16 = _mm512_set1_epi32(32767);
            const __m512i sa = _mm512_min_epi32(_mm512_max_epi32(qa, lo16), hi16);
            const __m512i sc = _mm512_min_epi32(_mm512_max_epi32(qc, lo16), hi16);
            _mm_storeu_si128((__m128i *)(xr.hi + o),
                             _mm512_cvtepi32_epi8(_mm512_srai_epi32(sa, 8)));
            _mm_storeu_si128((__m128i *)(xr.hi + o + 16),
                             _mm512_cvtepi32_epi8(_mm512_srai_epi32(sc, 8)));
            _mm_storeu_si128((__m128i *)(xr.lo + o), _mm512_cvtepi32_epi8(sa));
            _mm_storeu_si128((__m128i *)(xr.lo + o + 16), _mm512_cvtepi32_epi8(sc));
        }
}

/* The 16 columns' codes of input i of a block (codes: its VQ4_1 / VQ8_0 chunks), as floats. */
VNNI static inline __attribute__((always_inline)) __m512 input_codes(const uint8_t *codes, int i,
                                                                     const int q4) {
    if (q4) { /* byte 4 j + (i & 3) of chunk i >> 3, the high nibble for i & 4 */
        const __m512i v = _mm512_loadu_si512((const void *)(codes + 64 * (i >> 3)));
        const __m128i shift = _mm_cvtsi32_si128(8 * (i & 3) + (i & 4));
        return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srl_epi32(v, shift),
                                                   _mm512_set1_epi32(15)));
    }
    const int lane = i & 1; /* byte 2 j + lane of its chunk */
    const __m256i v = _mm256_loadu_si256((const __m256i *)(codes + 32 * (i >> 1)));
    const __m256i u = _mm256_sra_epi16(_mm256_sll_epi16(v, _mm_cvtsi32_si128(8 - 8 * lane)),
                                       _mm_cvtsi32_si128(8));
    return _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(u));
}

/* The bytes of a 32 x 16 block in the VNNI layouts: q4 nibbles with fp16 (Q4_1) or fp32 (q4_f,
 * f32) scales, else int8 codes after Q8_0's fp16 scale or q8_f's three fp32 ones (f8). */
#define VBYTES(q4, f32, f8)                                                                        \
    ((q4) ? ((f32) ? Q4_F_BYTES : VQ4_1_BYTES) : (f8) ? Q8_F_BYTES : VQ8_0_BYTES)

/* Rows r < rows of y[., 0..15] = x[r] . one panel, from its blocks at wp (VQ4_1 / VQ8_0 layout;
 * f32: q4_f's fp32 scales before the VQ4_1 codes; f8: q8_f's d_lo, d_hi, m before the VQ8_0
 * codes, the sums of inputs 0-15 and 16-31 finished apart as int_rows finishes them); xr: the
 * rows' codes from row 0 of the group, k inputs a row; pf: what to prefetch while block b is
 * multiplied, from pf + b bytes on (PREFETCH_AT). */
VNNI static inline __attribute__((always_inline)) void vnni_rows(
    XRows xr, const uint8_t *wp, const uint8_t *pf, float *y, const int rows, int blocks, int k,
    int n_dim, const int q4, const int f32, const int f8) {
    const size_t bytes = VBYTES(q4, f32, f8);
    const __m512i low = _mm512_set1_epi8(15);
    __m512 acc[VROWS];
    for (int r = 0; r < rows; r++)
        acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const uint8_t *blk = wp + b * bytes;
        /* into L2, not L1: 2 rows 6.4 -> 5.6 ms a forward, 1 row 5.1 -> 4.8 (Zen 4, rows.py) */
        for (size_t line = 0; line < bytes; line += 64)
            _mm_prefetch((const char *)(pf + b * bytes + line), _MM_HINT_T1);
        const uint8_t *codes = blk + (q4 ? (f32 ? 8 : 4) : f8 ? 12 : 2) * PANEL;
        __m512i s0[VROWS], s1[VROWS];
        for (int r = 0; r < rows; r++)
            s0[r] = s1[r] = _mm512_setzero_si512();
        if (q4) {
            /* the codes of inputs 8 c .. 8 c + 3 (low nibbles) and 8 c + 4 .. 8 c + 7 (high) as
             * bytes: sum(q xq) = 256 sum(q hi) + sum(q lo), in vpdpbusd's 4 products a lane */
            for (int c = 0; c < 4; c++) {
                const __m512i v = _mm512_loadu_si512((const void *)(codes + 64 * c));
                const __m512i w0 = _mm512_and_si512(v, low);
                const __m512i w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                for (int r = 0; r < rows; r++) {
                    const size_t o = (size_t)r * k + QK * b;
                    const int32_t *hi = (const int32_t *)(xr.hi + o);
                    const int32_t *lo = (const int32_t *)(xr.lo + o);
                    s0[r] = _mm512_dpbusd_epi32(s0[r], w0, _mm512_set1_epi32(hi[2 * c]));
                    s1[r] = _mm512_dpbusd_epi32(s1[r], _mm512_set1_epi32(lo[2 * c]), w0);
                    s0[r] = _mm512_dpbusd_epi32(s0[r], w1, _mm512_set1_epi32(hi[2 * c + 1]));
                    s1[r] = _mm512_dpbusd_epi32(s1[r], _mm512_set1_epi32(lo[2 * c + 1]), w1);
                }
            }
            for (int r = 0; r < rows; r++)
                s0[r] = _mm512_slli_epi32(s0[r], 8);
        } else {
            for (int c = 0; c < 8; c++) { /* the weights of input pairs c and 8 + c */
                const __m512i w0 = _mm512_cvtepi8_epi16(
                    _mm256_loadu_si256((const __m256i *)(codes + 32 * c)));
                const __m512i w1 = _mm512_cvtepi8_epi16(
                    _mm256_loadu_si256((const __m256i *)(codes + 32 * (8 + c))));
                for (int r = 0; r < rows; r++) {
                    const int32_t *q = (const int32_t *)(xr.q + (size_t)r * k + QK * b);
                    s0[r] = _mm512_dpwssd_epi32(s0[r], w0, _mm512_set1_epi32(q[c]));
                    s1[r] = _mm512_dpwssd_epi32(s1[r], w1, _mm512_set1_epi32(q[8 + c]));
                }
            }
        }
        if (f8) { /* d_lo (dx s0 + its outlier) + d_hi (dx s1 + its outlier) + m sum(x) */
            const __m512 d_lo = _mm512_loadu_ps(blk), d_hi = _mm512_loadu_ps(blk + 64);
            const __m512 m = _mm512_loadu_ps(blk + 128);
            for (int r = 0; r < rows; r++) {
                const size_t at = (size_t)r * blocks + b;
                const int i = xr.at[at];
                const __m512 o = _mm512_mul_ps(_mm512_set1_ps(xr.out[at]),
                                               input_codes(codes, i, 0));
                const __m512 zero = _mm512_setzero_ps(), dx = _mm512_set1_ps(xr.d[at]);
                const __m512 t0 = _mm512_fmadd_ps(dx, _mm512_cvtepi32_ps(s0[r]), i < 16 ? o : zero);
                const __m512 t1 = _mm512_fmadd_ps(dx, _mm512_cvtepi32_ps(s1[r]), i < 16 ? zero : o);
                acc[r] = _mm512_fmadd_ps(d_hi, t1, _mm512_fmadd_ps(d_lo, t0, acc[r]));
                acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(xr.sum[at]), acc[r]);
            }
            continue;
        }
        const __m512 d = f32 ? _mm512_loadu_ps(blk)
                             : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
        const __m512 m = !q4 ? _mm512_setzero_ps()
                         : f32 ? _mm512_loadu_ps(blk + 64)
                               : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)));
        for (int r = 0; r < rows; r++) {
            const size_t at = (size_t)r * blocks + b;
            /* dx sum(q xq) + out q[at], then the block's scale (and offset) */
            const __m512 s = _mm512_fmadd_ps(
                _mm512_set1_ps(xr.d[at]), _mm512_cvtepi32_ps(_mm512_add_epi32(s0[r], s1[r])),
                _mm512_mul_ps(_mm512_set1_ps(xr.out[at]), input_codes(codes, xr.at[at], q4)));
            if (q4)
                acc[r] = _mm512_add_ps(
                    acc[r], _mm512_fmadd_ps(d, s, _mm512_mul_ps(m, _mm512_set1_ps(xr.sum[at]))));
            else
                acc[r] = _mm512_fmadd_ps(d, s, acc[r]);
        }
    }
    for (int r = 0; r < rows; r++)
        _mm512_storeu_ps(y + (size_t)r * n_dim, acc[r]);
}

#define VGROUPS(m) (((m) + VROWS - 1) / VROWS)
#define VGROUP_ROWS(m, g) ((m) / VGROUPS(m) + ((g) < (m) % VGROUPS(m)))

/* As quant_matmul_ws, for weights in the VNNI layouts and x already rounded (quantize_rows). */
VNNI static void vnni_matmul_ws(XRows xr, const uint8_t *wq, float *y, int m, int n, int k,
                                int q4, int f32, int f8, const int32_t *pick) {
    const int panels = n / PANEL, blocks = k / QK;
    const size_t bytes = VBYTES(q4, f32, f8), pstride = bytes * (size_t)blocks;
#pragma omp for schedule(static) nowait
    for (int p = 0; p < panels; p++)
        for (int g = 0, r0 = 0; r0 < m; r0 += VGROUP_ROWS(m, g), g++) {
            const size_t rb = (size_t)r0 * blocks;
            const size_t rk = (size_t)r0 * k;
            XRows xg = {xr.q + rk, xr.hi + rk, xr.lo + rk, xr.d + rb, xr.sum + rb, xr.out + rb,
                        xr.at + rb};
            const uint8_t *wp = wq + PICKED(pick, p) * pstride;
            const uint8_t *pf = PREFETCH_AT(wq, pick, p, panels, pstride, wp, bytes);
            float *yr = y + (size_t)r0 * n + PANEL * p;
            /* constant row counts and format: registers, no branch in the block loop */
#define VR(R, Q4, F32, F8) vnni_rows(xg, wp, pf, yr, R, blocks, k, n, Q4, F32, F8); break
#define VNNI_ROWS_SWITCH(Q4, F32, F8)                                                              \
    switch (VGROUP_ROWS(m, g)) {                                                                   \
    case 1: VR(1, Q4, F32, F8); case 2: VR(2, Q4, F32, F8); case 3: VR(3, Q4, F32, F8);            \
    case 4: VR(4, Q4, F32, F8); default: VR(5, Q4, F32, F8);                                       \
    }
            if (q4 && f32) {
                VNNI_ROWS_SWITCH(1, 1, 0)
            } else if (q4) {
                VNNI_ROWS_SWITCH(1, 0, 0)
            } else if (f8) {
                VNNI_ROWS_SWITCH(0, 0, 1)
            } else {
                VNNI_ROWS_SWITCH(0, 0, 0)
            }
#undef VNNI_ROWS_SWITCH
#undef VR
        }
    ws_barrier();
}

/* --- Integer products on AVX2 (Q8_0, Q8_F) -------------------------------------------------
 *
 * Without AVX-512 VNNI (Zen 1-3, Intel client parts) the Q8_0 products are the same integer
 * arithmetic in 256-bit registers: x rounded as quantize_rows rounds it (quantize_rows_avx2: the
 * same codes, scales and outliers bit for bit), each 32-byte chunk of the q8_0_vnni layout
 * widened to int16 in two halves (columns 0-7, 8-15) and multiplied with the broadcast int16
 * pair of x by vpmaddwd into exact int32 sums, each block finished in fp32 exactly as vnni_rows
 * finishes it, lane for lane: the outputs equal the VNNI path's and `vnni_reference`'s, and a
 * row's still depend on the row alone. Against the fp32 expansion a row drops the per-weight
 * convert and scale: 2048 x 2048 at 1 thread on Zen 1, 1 row 0.57 ms instead of 0.97, 5 rows
 * 1.80 instead of 1.94 (Zen 1 issues one 256-bit vpmaddwd per 2 cycles, so extra rows cost what
 * the fp32 fmas cost). Q4_1 keeps the fp32 products here: its nibbles would need widening to
 * int16 as well, for no fewer instructions than the expansion. FMT_Q8_F_INT (q8_f's scales, then
 * the codes as q8_0_vnni's) runs here without VNNI (vnni_rows takes it with VNNI; x's codes are
 * the same): the sums of inputs 0-15 and 16-31 finished apart with d_lo, d_hi, then + m sum(x);
 * a 640 x 2048 row 0.19 ms instead of 0.30. From ~5 rows (Q8_F) or ~12 (Q8_0) on, the fp32
 * expansion into an L1 buffer shared by all rows is faster on Zen 1 (16 rows 2048 x 2048:
 * 4.9 ms; here 5.5 Q8_0, 7.0 Q8_F): prefills pay that. */
#define IROWS 5 /* rows a group (2 int32 sums each in registers): 5 rows 1.80 ms, in 3 + 2 1.92 */

static int cpu_has_vnni = -1; /* vnni_supported(), read once */

static int use_vnni(void) {
    if (cpu_has_vnni < 0)
        cpu_has_vnni = vnni_supported();
    return cpu_has_vnni;
}

/* quantize_rows' Q8_0 codes, scales, sums and outliers (the same bits) in AVX2. */
static void quantize_rows_avx2(const float *x, int m, int k, XRows xr) {
    const int blocks = k / QK;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int r = 0; r < m; r++)
        for (int b = 0; b < blocks; b++) {
            const float *xb = x + (size_t)r * k + QK * b;
            const size_t at = (size_t)r * blocks + b;
            float v[QK];
            __m256 a[4], top = _mm256_setzero_ps();
            for (int i = 0; i < 4; i++) {
                a[i] = _mm256_loadu_ps(xb + 8 * i);
                top = _mm256_max_ps(top, _mm256_andnot_ps(sign, a[i]));
            }
            /* the sum in _mm512_reduce_add_ps's order (inputs i + 16, then halves in turn) */
            const __m256 s8 = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
            __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
            s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            xr.sum[at] = _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
            __m128 t4 = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
            t4 = _mm_max_ps(t4, _mm_movehl_ps(t4, t4));
            t4 = _mm_max_ss(t4, _mm_movehdup_ps(t4));
            const __m256 big = _mm256_set1_ps(_mm_cvtss_f32(t4));
            uint32_t hit = 0;
            for (int i = 0; i < 4; i++)
                hit |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(
                           _mm256_andnot_ps(sign, a[i]), big, _CMP_EQ_OQ)) << (8 * i);
            const int i = hit ? __builtin_ctz(hit) : 0; /* the first largest input */
            xr.at[at] = i;
            xr.out[at] = xb[i];
            for (int j = 0; j < 4; j++)
                _mm256_storeu_ps(v + 8 * j, a[j]);
            v[i] = 0.0f;
            __m256 rest = _mm256_setzero_ps();
            for (int j = 0; j < 4; j++) {
                a[j] = _mm256_loadu_ps(v + 8 * j);
                rest = _mm256_max_ps(rest, _mm256_andnot_ps(sign, a[j]));
            }
            __m128 r4 = _mm_max_ps(_mm256_castps256_ps128(rest), _mm256_extractf128_ps(rest, 1));
            r4 = _mm_max_ps(r4, _mm_movehl_ps(r4, r4));
            const float amax = _mm_cvtss_f32(_mm_max_ss(r4, _mm_movehdup_ps(r4)));
            const float dx = amax / 32767.0f, inv = amax > 0.0f ? 1.0f / dx : 0.0f;
            xr.d[at] = dx;
            const __m256 inv8 = _mm256_set1_ps(inv);
            for (int j = 0; j < 4; j += 2) { /* packs saturates as cvtsepi32_epi16 does */
                const __m256i q = _mm256_packs_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(a[j], inv8)),
                    _mm256_cvtps_epi32(_mm256_mul_ps(a[j + 1], inv8)));
                _mm256_storeu_si256((__m256i *)(xr.q + (size_t)r * k + QK * b + 8 * j),
                                    _mm256_permute4x64_epi64(q, 0xD8));
            }
        }
}

/* Rows r < rows of y[., 0..15] = x[r] . one panel of q8_0_vnni blocks at wp, as vnni_rows; f8:
 * q8_f_vnni blocks instead (FMT_Q8_F's fp32 d_lo, d_hi, m, then the codes as q8_0_vnni's): the
 * sums of inputs 0-15 and 16-31 finished apart, each with its own scale, then m sum(x). */
static inline __attribute__((always_inline)) void int_rows(XRows xr, const uint8_t *wp,
                                                           const uint8_t *pf, float *y,
                                                           const int rows, int blocks, int k,
                                                           int n_dim, const int f8) {
    const size_t bytes = f8 ? Q8_F_BYTES : VQ8_0_BYTES;
    __m256 acc[IROWS][2];
    for (int r = 0; r < rows; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const uint8_t *blk = wp + b * bytes, *codes = blk + (f8 ? 12 : 2) * PANEL;
        for (size_t line = 0; line < bytes; line += 64)
            _mm_prefetch((const char *)(pf + b * bytes + line), _MM_HINT_T0);
        for (int h = 0; h < (f8 ? 2 : 1); h++) {
            __m256i s[IROWS][2];
            for (int r = 0; r < rows; r++)
                s[r][0] = s[r][1] = _mm256_setzero_si256();
            for (int c = f8 ? 8 * h : 0; c < (f8 ? 8 * h + 8 : 16); c++) {
                /* inputs 2 c, 2 c + 1 of the 16 columns */
                const __m256i v = _mm256_loadu_si256((const __m256i *)(codes + 32 * c));
                const __m256i w0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
                const __m256i w1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
                for (int r = 0; r < rows; r++) {
                    const int32_t *q = (const int32_t *)(xr.q + (size_t)r * k + QK * b);
                    const __m256i pair = _mm256_set1_epi32(q[c]);
                    s[r][0] = _mm256_add_epi32(s[r][0], _mm256_madd_epi16(w0, pair));
                    s[r][1] = _mm256_add_epi32(s[r][1], _mm256_madd_epi16(w1, pair));
                }
            }
            __m256 d0, d1;
            if (f8) {
                d0 = _mm256_loadu_ps((const float *)blk + PANEL * h);
                d1 = _mm256_loadu_ps((const float *)blk + PANEL * h + 8);
            } else {
                d0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
                d1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)));
            }
            for (int r = 0; r < rows; r++) {
                const size_t at = (size_t)r * blocks + b;
                const int i = xr.at[at], lane = i & 1; /* the outlier's codes: byte 2 j + lane */
                __m256 o0 = _mm256_setzero_ps(), o1 = o0;
                if (!f8 || (i >> 4) == h) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(codes + 32 * (i >> 1)));
                    const __m256i u = _mm256_sra_epi16(
                        _mm256_sll_epi16(v, _mm_cvtsi32_si128(8 - 8 * lane)),
                        _mm_cvtsi32_si128(8));
                    const __m256 out = _mm256_set1_ps(xr.out[at]);
                    o0 = _mm256_mul_ps(out, _mm256_cvtepi32_ps(
                                                _mm256_cvtepi16_epi32(_mm256_castsi256_si128(u))));
                    o1 = _mm256_mul_ps(out, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(
                                                _mm256_extracti128_si256(u, 1))));
                }
                const __m256 dx = _mm256_set1_ps(xr.d[at]);
                const __m256 t0 = _mm256_fmadd_ps(dx, _mm256_cvtepi32_ps(s[r][0]), o0);
                const __m256 t1 = _mm256_fmadd_ps(dx, _mm256_cvtepi32_ps(s[r][1]), o1);
                acc[r][0] = _mm256_fmadd_ps(d0, t0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(d1, t1, acc[r][1]);
            }
        }
        if (f8) { /* + m sum(x) */
            const __m256 m0 = _mm256_loadu_ps((const float *)blk + 2 * PANEL);
            const __m256 m1 = _mm256_loadu_ps((const float *)blk + 2 * PANEL + 8);
            for (int r = 0; r < rows; r++) {
                const __m256 sum = _mm256_set1_ps(xr.sum[(size_t)r * blocks + b]);
                acc[r][0] = _mm256_fmadd_ps(m0, sum, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(m1, sum, acc[r][1]);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        _mm256_storeu_ps(y + (size_t)r * n_dim, acc[r][0]);
        _mm256_storeu_ps(y + (size_t)r * n_dim + 8, acc[r][1]);
    }
}

#define IGROUPS(m) (((m) + IROWS - 1) / IROWS)
#define IGROUP_ROWS(m, g) ((m) / IGROUPS(m) + ((g) < (m) % IGROUPS(m)))

/* As vnni_matmul_ws for Q8_0 (f8: q8_f_vnni), on AVX2. */
static void int_matmul_ws(XRows xr, const uint8_t *wq, float *y, int m, int n, int k, int f8,
                          const int32_t *pick) {
    const int panels = n / PANEL, blocks = k / QK;
    const size_t bytes = f8 ? Q8_F_BYTES : VQ8_0_BYTES, pstride = bytes * (size_t)blocks;
#pragma omp for schedule(static) nowait
    for (int p = 0; p < panels; p++)
        for (int g = 0, r0 = 0; r0 < m; r0 += IGROUP_ROWS(m, g), g++) {
            const size_t rb = (size_t)r0 * blocks, rk = (size_t)r0 * k;
            XRows xg = {xr.q + rk, xr.hi + rk, xr.lo + rk, xr.d + rb, xr.sum + rb, xr.out + rb,
                        xr.at + rb};
            const uint8_t *wp = wq + PICKED(pick, p) * pstride;
            const uint8_t *pf = PREFETCH_AT(wq, pick, p, panels, pstride, wp, bytes);
            float *yr = y + (size_t)r0 * n + PANEL * p;
#define IR(R, F) int_rows(xg, wp, pf, yr, R, blocks, k, n, F); break
#define INT_ROWS_SWITCH(F)                                                                         \
    switch (IGROUP_ROWS(m, g)) {                                                                   \
    case 1: IR(1, F); case 2: IR(2, F); case 3: IR(3 < IROWS ? 3 : IROWS, F);                      \
    case 4: IR(4 < IROWS ? 4 : IROWS, F); case 5: IR(5 < IROWS ? 5 : IROWS, F);                    \
    default: IR(IROWS, F);                                                                         \
    }
            if (f8) {
                INT_ROWS_SWITCH(1)
            } else {
                INT_ROWS_SWITCH(0)
            }
#undef INT_ROWS_SWITCH
#undef IR
        }
    ws_barrier();
}

/* x rounded for the integer products (one thread) and the product from those codes: VNNI where
 * the CPU has it, else AVX2 (Q8_0 only: pack_quant gives Q4_1 the VNNI layout nowhere else). */
static void quantize_x(const float *x, int m, int k, XRows xr, int q4) {
    if (use_vnni())
        quantize_rows(x, m, k, xr, q4);
    else
        quantize_rows_avx2(x, m, k, xr);
}

static void int_products_ws(XRows xr, const uint8_t *wq, float *y, int m, int n, int k, int fmt,
                            const int32_t *pick) {
    if (use_vnni())
        vnni_matmul_ws(xr, wq, y, m, n, k, Q4_INT(fmt), fmt == FMT_Q4_F_INT, fmt == FMT_Q8_F_INT,
                       pick);
    else if (fmt == FMT_Q8_F_INT)
        int_matmul_ws(xr, wq, y, m, n, k, 1, pick);
    else
        int_matmul_ws(xr, wq, y, m, n, k, 0, pick);
}

#define VNNI_FMT(fmt) (Q4_INT(fmt) || (fmt) == FMT_Q8_0_INT || (fmt) == FMT_Q8_F_INT)

/* y = x @ w.T from GGUF blocks in fmt 1 Q4_1, 2 Q8_0, 5 Q4_F, 6 Q8_F (fp32 products) or 3 Q4_1,
 * 4 Q8_0, 7 Q8_F, 8 Q4_F (the VNNI layouts, integer products: VNNI, or for 4 and 7 AVX2 where
 * VNNI is absent). */
void quant_matmul(const float *x, const uint8_t *wq, float *y, int m, int n, int k, int threads,
                  int fmt, const int32_t *pick) {
    if (!VNNI_FMT(fmt)) {
#pragma omp parallel num_threads(threads)
        quant_matmul_ws(x, wq, y, m, n, k, fmt, pick);
        return;
    }
    const XRows xr = xrows_alloc(m, k);
    quantize_x(x, m, k, xr, Q4_INT(fmt));
#pragma omp parallel num_threads(threads)
    int_products_ws(xr, wq, y, m, n, k, fmt, pick);
    free(xr.d);
}

/* RMSNorm of m rows of length k, y = x / sqrt(mean(x^2) + eps) * g: one call where torch runs
 * ~8 small ops. The sum of squares runs in a fixed order (8 lanes, then the lanes in turn), so a
 * row's result never depends on the other rows. */
void rms_norm_rows(const float *x, const float *g, float *y, int m, int k, float eps) {
    for (int r = 0; r < m; r++) {
        const float *xr = x + (size_t)r * k;
        float *yr = y + (size_t)r * k;
        __m256 acc = _mm256_setzero_ps();
        int i = 0;
        for (; i + 8 <= k; i += 8) {
            const __m256 v = _mm256_loadu_ps(xr + i);
            acc = _mm256_fmadd_ps(v, v, acc);
        }
        float lanes[8], ss = 0.0f;
        _mm256_storeu_ps(lanes, acc);
        for (int j = 0; j < 8; j++)
            ss += lanes[j];
        for (; i < k; i++)
            ss += xr[i] * xr[i];
        const float inv = 1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ss / k + eps)));
        const __m256 inv8 = _mm256_set1_ps(inv);
        for (i = 0; i + 8 <= k; i += 8)
            _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), inv8),
                                                   _mm256_loadu_ps(g + i)));
        for (; i < k; i++)
            yr[i] = xr[i] * inv * g[i];
    }
}

/* The index of each row's largest value (the first of equal ones, as torch.argmax; rows free
 * of NaN), m rows of length k: torch's argmax takes ~40 us for a 49152-logit row here, this ~9
 * with the ctypes call. 8 lanes keep their best value and its index; ties keep the earlier one. */
void argmax_rows(const float *x, int m, int k, int64_t *out) {
    for (int r = 0; r < m; r++) {
        const float *xr = x + (size_t)r * k;
        int i = 0, best = 0;
        if (k >= 8) {
            __m256 top = _mm256_loadu_ps(xr);
            __m256i at = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), idx = at;
            const __m256i step = _mm256_set1_epi32(8);
            for (i = 8; i + 8 <= k; i += 8) {
                idx = _mm256_add_epi32(idx, step);
                const __m256 v = _mm256_loadu_ps(xr + i);
                const __m256 more = _mm256_cmp_ps(v, top, _CMP_GT_OQ);
                top = _mm256_blendv_ps(top, v, more);
                at = _mm256_castps_si256(_mm256_blendv_ps(
                    _mm256_castsi256_ps(at), _mm256_castsi256_ps(idx), more));
            }
            float vals[8];
            int32_t ids[8];
            _mm256_storeu_ps(vals, top);
            _mm256_storeu_si256((__m256i *)ids, at);
            best = ids[0];
            for (int j = 1; j < 8; j++)
                if (vals[j] > xr[best] || (vals[j] == xr[best] && ids[j] < best))
                    best = ids[j];
        }
        for (; i < k; i++)
            if (xr[i] > xr[best])
                best = i;
        out[r] = best;
    }
}

/* --- The head's sketch: greedy decoding without the whole head -------------------------------
 *
 * A greedy step needs the argmax of the logits, not the logits. Gemma 3's head is 262144 x 640
 * (Q8_0: 178 MB, 10 of a 17 ms step at one thread on Zen 3), read whole every step. The sketch
 * is a 4-bit copy S of the head W (per row and 32 inputs an fp16 scale, codes 0..15 standing for
 * -8..7: 0.53 of Q8_0's bytes) with, per row i, rn_i = |W_i - S_i| and sn_i = |S_i|. One pass
 * over it (int8 x, vpmaddubsw) gives each row an estimate a_i = S_i . x8 and an upper bound
 * u_i = a_i + rn_i |x| + sn_i |x - x8| (+ the slack of the int16 rounding of x in the exact
 * product and of fp32 sums): by Cauchy-Schwarz no exact logit exceeds its bound. The caller
 * (kernels/cpu_rows.py `head_argmax`) then computes exactly, with the product's own code and so
 * its own bits, the panel of the best estimate and every panel whose bound reaches that panel's
 * best logit: the argmax among them is the whole head's, ties included. On Gemma 3's answers
 * the bound leaves a median 4 % of the panels to compute, but most of them where the model is
 * unsure of its next token (model/transformer.py HeadSketch decides when to sketch). x is
 * rounded per 16 inputs (per 32 the bound's x term left 1.1x the panels).
 *
 * Layout (pack_sketch): per panel of 16 rows and block of 32 inputs, d[16] fp16, then 8 chunks
 * of 32 bytes whose byte 2 j + i holds input 2 c + i of row j in its low nibble and input
 * 16 + 2 c + i in its high one (vpmaddubsw's pairs); the bounds (panels, 2, 16) fp32: rn[16],
 * sn[16], rn -inf for padding rows. */
#define SK_BYTES (2 * PANEL + QK * PANEL / 2)
#define SK_ROWS 3 /* rows of x a pass over a block keeps in registers (4 per row) */

/* The block QPREFETCH blocks after blk into L1 (issued before blk's products). */
static inline __attribute__((always_inline)) void sketch_prefetch(const uint8_t *blk) {
    for (size_t line = 0; line < SK_BYTES; line += 64)
        _mm_prefetch((const char *)(blk + QPREFETCH * SK_BYTES + line), _MM_HINT_T0);
}

/* A block's int16 sums (s[r][h]: 16 rows' products with inputs 16 h..16 h + 15 of row r of x, of
 * 8 pairs each, |.| <= 8 * 2 * 15 * 127 < 32768) into the fp32 estimates acc: codes - 8, so
 * 8 sum(x8) apart (xs), each half scaled by d and x's scale. */
static inline __attribute__((always_inline)) void sketch_block_finish(
    __m256i s[SK_ROWS][2], __m256 acc[SK_ROWS][2], const uint8_t *blk, const float *xd,
    const int32_t *xs, int b, int blocks, const int rows) {
    const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
    const __m256 d1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)));
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < 2; h++) { /* inputs 16 h..16 h + 15, with their own scale */
            const size_t at = 2 * ((size_t)r * blocks + b) + h;
            const __m256i off = _mm256_set1_epi32(xs[at]);
            const __m256i t0 = _mm256_sub_epi32(
                _mm256_cvtepi16_epi32(_mm256_castsi256_si128(s[r][h])), off);
            const __m256i t1 = _mm256_sub_epi32(
                _mm256_cvtepi16_epi32(_mm256_extracti128_si256(s[r][h], 1)), off);
            const __m256 dx = _mm256_set1_ps(xd[at]);
            acc[r][0] = _mm256_fmadd_ps(_mm256_mul_ps(d0, dx), _mm256_cvtepi32_ps(t0), acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(_mm256_mul_ps(d1, dx), _mm256_cvtepi32_ps(t1), acc[r][1]);
        }
}

/* The panel's largest estimate top[r] and largest upper bound upper[r] from its estimates acc
 * and bounds bd; ab: each row's (a, b) of u = est + rn a + sn b. */
static inline __attribute__((always_inline)) void sketch_panel_finish(
    __m256 acc[SK_ROWS][2], const float *ab, const float *bd, const int rows, float *top,
    float *upper, int panels) {
    for (int r = 0; r < rows; r++) {
        const __m256 a = _mm256_set1_ps(ab[2 * r]), bb = _mm256_set1_ps(ab[2 * r + 1]);
        __m256 u[2], e[2];
        for (int h = 0; h < 2; h++) { /* padding rows: rn -inf, so u -inf and e = min(a, u) */
            u[h] = _mm256_fmadd_ps(_mm256_loadu_ps(bd + 8 * h), a,
                                   _mm256_fmadd_ps(_mm256_loadu_ps(bd + PANEL + 8 * h), bb,
                                                   acc[r][h]));
            e[h] = _mm256_min_ps(acc[r][h], u[h]);
        }
        float vu[8], ve[8];
        _mm256_storeu_ps(vu, _mm256_max_ps(u[0], u[1]));
        _mm256_storeu_ps(ve, _mm256_max_ps(e[0], e[1]));
        float mu = vu[0], me = ve[0];
        for (int j = 1; j < 8; j++) {
            mu = vu[j] > mu ? vu[j] : mu;
            me = ve[j] > me ? ve[j] : me;
        }
        upper[(size_t)r * panels] = mu;
        top[(size_t)r * panels] = me;
    }
}

/* Rows r < rows: for the panel at wp with bounds bd, its largest estimate top[r] and its largest
 * upper bound upper[r]; xq: int8 codes (k a row), xd: their scales, xs: 8 sum(codes), each per
 * 16 inputs; ab: each row's (a, b) of u = est + rn a + sn b. */
static inline __attribute__((always_inline)) void sketch_rows(
    const int8_t *xq, const float *xd, const int32_t *xs, const float *ab, const uint8_t *wp,
    const float *bd, int blocks, int k, const int rows, float *top, float *upper, int panels) {
    const __m256i low = _mm256_set1_epi8(15);
    __m256 acc[SK_ROWS][2];
    for (int r = 0; r < rows; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const uint8_t *blk = wp + (size_t)b * SK_BYTES, *codes = blk + 2 * PANEL;
        sketch_prefetch(blk);
        __m256i s[SK_ROWS][2];
        for (int r = 0; r < rows; r++)
            s[r][0] = s[r][1] = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(codes + 32 * c));
            const __m256i lo = _mm256_and_si256(v, low);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            for (int r = 0; r < rows; r++) {
                const int16_t *xp = (const int16_t *)(xq + (size_t)r * k + QK * b);
                s[r][0] = _mm256_add_epi16(s[r][0],
                                           _mm256_maddubs_epi16(lo, _mm256_set1_epi16(xp[c])));
                s[r][1] = _mm256_add_epi16(s[r][1],
                                           _mm256_maddubs_epi16(hi, _mm256_set1_epi16(xp[8 + c])));
            }
        }
        sketch_block_finish(s, acc, blk, xd, xs, b, blocks, rows);
    }
    sketch_panel_finish(acc, ab, bd, rows, top, upper, panels);
}

/* As sketch_rows, two chunks of codes a 512-bit vpmaddubsw: the same integer sums (exact), so
 * the same bits, for half the instructions: on an AVX-512 Xeon the 256-bit pass over Gemma 3's
 * sketch read 9.3 GB/s, the whole head's products 12.7. */
VNNI static inline __attribute__((always_inline)) void sketch_rows_512(
    const int8_t *xq, const float *xd, const int32_t *xs, const float *ab, const uint8_t *wp,
    const float *bd, int blocks, int k, const int rows, float *top, float *upper, int panels) {
    const __m512i low = _mm512_set1_epi8(15);
    __m256 acc[SK_ROWS][2];
    for (int r = 0; r < rows; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const uint8_t *blk = wp + (size_t)b * SK_BYTES, *codes = blk + 2 * PANEL;
        sketch_prefetch(blk);
        __m512i w[SK_ROWS][2];
        for (int r = 0; r < rows; r++)
            w[r][0] = w[r][1] = _mm512_setzero_si512();
        for (int c = 0; c < 8; c += 2) { /* chunks c and c + 1 */
            const __m512i v = _mm512_loadu_si512((const void *)(codes + 32 * c));
            const __m512i lo = _mm512_and_si512(v, low);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
            for (int r = 0; r < rows; r++) {
                const int16_t *xp = (const int16_t *)(xq + (size_t)r * k + QK * b);
                const __m512i xl = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_set1_epi16(xp[c])), _mm256_set1_epi16(xp[c + 1]),
                    1);
                const __m512i xh = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_set1_epi16(xp[8 + c])),
                    _mm256_set1_epi16(xp[9 + c]), 1);
                w[r][0] = _mm512_add_epi16(w[r][0], _mm512_maddubs_epi16(lo, xl));
                w[r][1] = _mm512_add_epi16(w[r][1], _mm512_maddubs_epi16(hi, xh));
            }
        }
        __m256i s[SK_ROWS][2]; /* the two chunks' halves summed: the same 16 rows */
        for (int r = 0; r < rows; r++)
            for (int h = 0; h < 2; h++)
                s[r][h] = _mm256_add_epi16(_mm512_castsi512_si256(w[r][h]),
                                           _mm512_extracti64x4_epi64(w[r][h], 1));
        sketch_block_finish(s, acc, blk, xd, xs, b, blocks, rows);
    }
    sketch_panel_finish(acc, ab, bd, rows, top, upper, panels);
}

/* sketch_rows_512 for a group of 1..3 rows (constant counts: registers). */
VNNI static void sketch_panel_512(const int8_t *xq, const float *xd, const int32_t *xs,
                                  const float *ab, const uint8_t *wp, const float *bd, int blocks,
                                  int k, int rows, float *top, float *upper, int panels) {
    switch (rows) {
    case 1: sketch_rows_512(xq, xd, xs, ab, wp, bd, blocks, k, 1, top, upper, panels); break;
    case 2: sketch_rows_512(xq, xd, xs, ab, wp, bd, blocks, k, 2, top, upper, panels); break;
    default: sketch_rows_512(xq, xd, xs, ab, wp, bd, blocks, k, SK_ROWS, top, upper, panels);
    }
}

/* x (m, k) against the sketch (panels of 16 rows, k / 32 blocks of SK_BYTES) and its bounds:
 * top and upper (m, panels), as sketch_rows gives them; wide: by sketch_rows_512 (AVX-512BW),
 * the same bits. */
void sketch_pass(const float *x, int m, int k, const uint8_t *sk, const float *bounds, int panels,
                 float *top, float *upper, int threads, int wide) {
    const int blocks = k / QK;
    int8_t *xq = malloc((size_t)m * k);
    const int halves = 2 * blocks; /* x's scales per 16 inputs */
    float *xd = malloc(sizeof(float) * ((size_t)m * halves + 2 * (size_t)m));
    int32_t *xs = malloc(sizeof(int32_t) * (size_t)m * halves);
    float *ab = xd + (size_t)m * halves;
    /* the slack: the exact product's int16 rounding of x (|x~ - x| <= sqrt(k) |x| / 65534) and
     * the fp32 sums of both products (~(k / 32 + 8) roundings), over |x| */
    const double slack = sqrt((double)k) / 65534.0 + (k / QK + 8) * 1.2e-7 + 1e-6;
    for (int r = 0; r < m; r++) {
        double xx = 0.0, ee = 0.0;
        for (int b = 0; b < halves; b++) {
            const float *xb = x + (size_t)r * k + QK / 2 * b;
            float amax = 0.0f;
            for (int i = 0; i < QK / 2; i++)
                amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
            const float dx = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            int32_t sum = 0;
            for (int i = 0; i < QK / 2; i++) {
                const int q = (int)lrintf(xb[i] * inv);
                const int c = q > 127 ? 127 : q < -127 ? -127 : q;
                xq[(size_t)r * k + QK / 2 * b + i] = (int8_t)c;
                sum += c;
                const double err = (double)xb[i] - (double)dx * c;
                xx += (double)xb[i] * xb[i];
                ee += err * err;
            }
            xd[(size_t)r * halves + b] = dx;
            xs[(size_t)r * halves + b] = 8 * sum;
        }
        const double nx = sqrt(xx), e = sqrt(ee);
        ab[2 * r] = (float)(nx * (1.0 + slack) + 1e-30);
        ab[2 * r + 1] = (float)(e * (1.0 + 1e-6) + nx * slack);
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int p = 0; p < panels; p++) {
        const uint8_t *wp = sk + (size_t)p * blocks * SK_BYTES;
        const float *bd = bounds + (size_t)p * 2 * PANEL;
        for (int r0 = 0; r0 < m; r0 += SK_ROWS) {
            const int rows = m - r0 < SK_ROWS ? m - r0 : SK_ROWS;
            const size_t rb = (size_t)r0 * halves;
            float *t = top + (size_t)r0 * panels + p, *u = upper + (size_t)r0 * panels + p;
            if (wide && use_vnni()) { /* never 512-bit code on a CPU without it */
                sketch_panel_512(xq + (size_t)r0 * k, xd + rb, xs + rb, ab + 2 * r0, wp, bd,
                                 blocks, k, rows, t, u, panels);
                continue;
            }
#define SKR(R) sketch_rows(xq + (size_t)r0 * k, xd + rb, xs + rb, ab + 2 * r0, wp, bd, blocks, k, \
                           R, t, u, panels); break
            switch (rows) {
            case 1: SKR(1); case 2: SKR(2); default: SKR(SK_ROWS);
            }
#undef SKR
        }
    }
    free(xq);
    free(xd);
    free(xs);
}

/* e^x for x <= 0, 8 at a time: 2^n e^r with n = round(x / ln 2), |r| <= ln 2 / 2, e^r by a
 * degree-7 polynomial (Cephes' expf coefficients); below -87.3 (2^-126) it stops falling. */
static inline __m256 exp_ps(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x); /* ln 2 in two parts */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                         _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float hsum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

/* One query row against the m keys `seen` (positions, in order); s: room for m + 8 scores. */
static inline __attribute__((always_inline)) void attend_one(
    const float *qr, const float *kh, const float *vh, const int *seen, int m, float *s,
    float *o, float scale, const int d) {
    /* scores, four keys at a time; each dot product in the same order */
    int c = 0;
    for (; c + 4 <= m; c += 4) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        const float *k0 = kh + (long)seen[c] * d, *k1 = kh + (long)seen[c + 1] * d;
        const float *k2 = kh + (long)seen[c + 2] * d, *k3 = kh + (long)seen[c + 3] * d;
        for (int i = 0; i < d; i += 8) {
            const __m256 qi = _mm256_loadu_ps(qr + i);
            a0 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k0 + i), a0);
            a1 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k1 + i), a1);
            a2 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k2 + i), a2);
            a3 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k3 + i), a3);
        }
        s[c] = hsum(a0) * scale;
        s[c + 1] = hsum(a1) * scale;
        s[c + 2] = hsum(a2) * scale;
        s[c + 3] = hsum(a3) * scale;
    }
    for (; c < m; c++) {
        __m256 a = _mm256_setzero_ps();
        const float *kj = kh + (long)seen[c] * d;
        for (int i = 0; i < d; i += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(qr + i), _mm256_loadu_ps(kj + i), a);
        s[c] = hsum(a) * scale;
    }
    float top = -INFINITY;
    for (c = 0; c < m; c++)
        top = s[c] > top ? s[c] : top;
    /* weights e^(s - top), 8 at a time; lanes past the last key get 0 */
    __m256 total = _mm256_setzero_ps();
    for (c = 0; c < m; c += 8) {
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + c), _mm256_set1_ps(top)));
        if (c + 8 > m)
            e = _mm256_and_ps(e, _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                _mm256_set1_epi32(m - c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))));
        _mm256_storeu_ps(s + c, e);
        total = _mm256_add_ps(total, e);
    }
    __m256 acc[32]; /* d <= 256 */
    for (int i = 0; i < d / 8; i++)
        acc[i] = _mm256_setzero_ps();
    for (c = 0; c < m; c++) {
        const __m256 w = _mm256_set1_ps(s[c]);
        const float *vj = vh + (long)seen[c] * d;
        for (int i = 0; i < d / 8; i++)
            acc[i] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + 8 * i), acc[i]);
    }
    const __m256 inv = _mm256_set1_ps(m ? 1.0f / hsum(total) : 0.0f);
    for (int i = 0; i < d / 8; i++)
        _mm256_storeu_ps(o + 8 * i, _mm256_mul_ps(acc[i], inv));
}

/* The sequences a batch of rows belongs to: sequence b owns rows row0[b]..row0[b + 1] - 1
 * (seq_of[r] = b) and sees past[b] positions of its own cache k[b], v[b] (head stride kv_head,
 * position stride d) followed by its rows' keys, as mask[b] (its rows x (past[b] + its rows),
 * row-major, nonzero = visible) says or, where there is none, every key (causal = 0) or key
 * j <= past[b] + i for its row i (causal = 1). Sessions of different lengths share a forward so:
 * each row still sees its own sequence's keys only. Sliding-window layers (attend_ws' window)
 * see lmask[b] instead where a sequence has one, else the above less the keys j <= past[b] + i
 * - window (a row at position past[b] + i sees the window behind it: model/layers.py
 * window_mask's rule; rows at other positions, draft trees, come with their lmask). */
typedef struct {
    const int *row0, *seq_of, *past;
    float *const *k, *const *v;
    const uint8_t *const *mask; /* NULL: no sequence has one */
    int causal;
    const uint8_t *const *lmask; /* the sliding-window layers' masks; NULL: none has one */
} Seqs;

/* Attention of t query rows of the sequences `seqs`, at `layer` floats into each cache:
 * out[r][h] = sum_j softmax_j(scale q[r][h] . k[g][j]) v[g][j], g = h / (heads / kv_heads), over
 * the keys row r sees. q: row stride q_row, head stride d; out: (t, heads, d); head_dim d a
 * multiple of 8.
 *
 * A row's result depends on nothing but its query and the keys it sees, taken in order: the same
 * row gives the same bits alone, among draft rows or among other sessions' rows, with any tree
 * mask that shows it the same keys - which makes a verify row exactly the row `ar` computes.
 * attend_ws shares the (row, head) items among the enclosing region's threads; seen, s: this
 * thread's room for the longest sequence's keys + 8. */
static void attend_ws(const float *q, Seqs seqs, long layer, float *out, int t, int heads,
                      int kv_heads, int d, long q_row, long kv_head, float scale, int window,
                      int *seen, float *s) {
    const int group = heads / kv_heads;
#pragma omp for schedule(static) nowait
    for (int item = 0; item < t * heads; item++) {
        const int r = item / heads, h = item % heads, b = seqs.seq_of[r];
        const int i = r - seqs.row0[b], past = seqs.past[b];
        const int n = past + seqs.row0[b + 1] - seqs.row0[b];
        const long kv = layer + (long)(h / group) * kv_head;
        const float *kh = seqs.k[b] + kv, *vh = seqs.v[b] + kv;
        const uint8_t *mask = seqs.mask ? seqs.mask[b] : NULL;
        int lo = -1; /* keys j <= lo are out of the window */
        if (window && seqs.lmask && seqs.lmask[b])
            mask = seqs.lmask[b];
        else if (window && past + i - window > lo)
            lo = past + i - window;
        int m = 0;
        for (int j = lo + 1; j < n; j++)
            if (mask ? mask[(long)i * n + j] : !seqs.causal || j <= past + i)
                seen[m++] = j;
        float *o = out + ((long)r * heads + h) * d;
        if (d == 64) /* SmolLM2's: the loops over d unrolled, the output in registers */
            attend_one(q + r * q_row + (long)h * d, kh, vh, seen, m, s, o, scale, 64);
        else
            attend_one(q + r * q_row + (long)h * d, kh, vh, seen, m, s, o, scale, d);
    }
    ws_barrier();
}

/* Decode attention of t rows of one sequence over n keys (keys n - t.. are the rows' own):
 * mask (t x n) or causal as Seqs says. */
void attend_rows(const float *q, float *k, float *v, float *out, const uint8_t *mask, int t,
                 int n, int heads, int kv_heads, int d, long q_row, long kv_head, float scale,
                 int causal, int threads) {
    int *seq_of = calloc((size_t)t, sizeof(int));
    const int row0[2] = {0, t}, past = n - t;
    const Seqs seqs = {row0, seq_of, &past, &k, &v, mask ? &mask : NULL, causal, NULL};
#pragma omp parallel num_threads(threads)
    {
        int *seen = malloc(sizeof(int) * (size_t)n);
        float *s = malloc(sizeof(float) * ((size_t)n + 8));
        attend_ws(q, seqs, 0, out, t, heads, kv_heads, d, q_row, kv_head, scale, 0, seen, s);
        free(seen);
        free(s);
    }
    free(seq_of);
}

/* y = x @ w.T through the kernel w's format asks for: fmt 0 fp32 panels, 1 Q4_1, 2 Q8_0, 5 Q4_F,
 * 6 Q8_F, 3 Q4_1, 4 Q8_0, 7 Q8_F and 8 Q4_F in the VNNI layouts (integer products, 4 and 7 on
 * AVX2 where the CPU lacks VNNI; x rounded into xr first, by one thread); y:
 * (m, n) with n a multiple of 16; shared among the enclosing region's threads. */
static void matmul_fmt_ws(const float *x, const void *w, int fmt, float *y, int m, int n, int k,
                          XRows xr) {
    if (fmt == 0) {
        rows_matmul_ws(x, (const float *)w, y, m, n, k);
    } else if (!VNNI_FMT(fmt)) {
        quant_matmul_ws(x, (const uint8_t *)w, y, m, n, k, fmt, NULL);
    } else {
#pragma omp single nowait
        quantize_x(x, m, k, xr, Q4_INT(fmt));
        ws_barrier();
        int_products_ws(xr, (const uint8_t *)w, y, m, n, k, fmt, NULL);
    }
}

/* x * sigmoid(x) * u, 8 at a time: e = e^-|x|, sigmoid = 1 / (1 + e) or e / (1 + e). */
static inline __m256 silu_mul(__m256 x, __m256 u) {
    const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 e = exp_ps(_mm256_or_ps(x, _mm256_set1_ps(-0.0f))); /* e^-|x| */
    const __m256 sig = _mm256_div_ps(_mm256_blendv_ps(_mm256_set1_ps(1.0f), e, neg),
                                     _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    return _mm256_mul_ps(_mm256_mul_ps(x, sig), u);
}

/* GELU(x) * u with GELU's tanh form (torch's approximate="tanh"), 8 at a time:
 * 0.5 x (1 + tanh(z)) = x sigmoid(2 z), z = sqrt(2 / pi) (x + 0.044715 x^3), the sigmoid as
 * silu_mul's. */
static inline __m256 gelu_mul(__m256 x, __m256 u) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 z2 = _mm256_mul_ps(_mm256_set1_ps(2.0f * 0.7978845608028654f),
                                    _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    const __m256 neg = _mm256_cmp_ps(z2, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 e = exp_ps(_mm256_or_ps(z2, _mm256_set1_ps(-0.0f))); /* e^-|2 z| */
    const __m256 sig = _mm256_div_ps(_mm256_blendv_ps(_mm256_set1_ps(1.0f), e, neg),
                                     _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    return _mm256_mul_ps(_mm256_mul_ps(x, sig), u);
}

/* What a stack's layers add to a plain Llama layer (ModelArgs' extras; NULL: none): q_norm /
 * k_norm, RMSNorm gains (d) of each q and k head before rope (Qwen3, Gemma 3); post_norms, of
 * the attention's and the MLP's outputs (dim) before their residuals (Gemma 3); gelu, the
 * tanh-GELU gate instead of SiLU; local[l] != 0: layer l is a sliding-window layer, with its own
 * rope rows cos_local, sin_local (t, d) and keys as Seqs says for `window`, lmask per sequence
 * (NULL: none has one). */
typedef struct {
    int qk_norm, post_norms, gelu, window;
    const uint8_t *local;
    const float *cos_local, *sin_local;
    const uint8_t *const *lmask;
} LayerExtras;

/* A stack of pre-norm decoder layers (each: RMSNorm, fused q/k/v product, rotate-half rope, GQA
 * attention over the KV cache, output product, residual; RMSNorm, fused gate/up product, SiLU
 * gate, down product, residual; with `ex`, LayerExtras' additions) for t rows of x (t, dim), in
 * place, in one call and one OpenMP region instead of ~25 torch ops and 7 kernel calls a layer
 * from Python. The region's threads share each product's panels and the attention's (row,
 * head) items (the _ws kernels) and meet at a spinning barrier after each step (ws_barrier,
 * well under a us), where starting the region costs 15-40 us (a sleeping worker to wake:
 * OMP_WAIT_POLICY=PASSIVE), once a forward.
 * Layer l: panels w[4 l + 0..3] = qkv, o, gate_up, down in formats fmt[4 l + 0..3]
 * (matmul_fmt_ws), output widths n[0..3] rounded up to 16 (alike in every layer); norm gains
 * norms[c l + 0..c - 1]: attention, MLP, then q and k (ex->qk_norm), then the attention's and
 * the MLP's output (ex->post_norms); c = 2 + 2 qk_norm + 2 post_norms. The rows belong to
 * `seqs` sequences (Seqs: row0, past, k, v,
 * mask, causal; seq_of is built here): layer l of sequence b's cache starts l kv_layer floats
 * into k[b], v[b]; a row's key and value are written at position past[b] + its index in its
 * sequence, then it attends as Seqs says. cos, sin: (t, d) rope rows, sin with the rotate-half
 * sign in its first half. scratch: room for t (max(dim, ffn) + n[0] + heads d + max(n[1], n[3])
 * + n[2]) floats. Every step computes each row on its own, like the kernels it calls, so a row's
 * bits do not depend on which other rows, of its sequence or another, share the call. Its
 * threads meet at spinning barriers, or with spin_waits 0 at OpenMP's. Returns how many barrier
 * waits ran late (a thread preempted: ws_barrier). */
int layers_rows(int layers, float *x, int t, int dim, const void *const *w, const int *fmt,
                 const int *n, const float *const *norms, float eps, const float *cos,
                 const float *sin, int nseq, const int *row0, const int *past, float *const *kc,
                 float *const *vc, const uint8_t *const *mask, int causal, long kv_layer,
                 long kv_head, int heads, int kv_heads, int d, int ffn, float scale,
                 float *scratch, int threads, int spin_waits, const LayerExtras *ex) {
    const LayerExtras none = {0, 0, 0, 0, NULL, NULL, NULL, NULL};
    const LayerExtras e = ex ? *ex : none;
    const int hd = heads * d, half = d / 2, per = 2 + 2 * e.qk_norm + 2 * e.post_norms;
    const int post = 2 + 2 * e.qk_norm; /* where the output norms start */
    float *xn = scratch;
    float *qkv = xn + (size_t)t * (dim > ffn ? dim : ffn);
    float *att = qkv + (size_t)t * n[0];
    float *out = att + (size_t)t * hd;
    float *gu = out + (size_t)t * (n[1] > n[3] ? n[1] : n[3]);
    const int widest = dim > ffn ? (dim > hd ? dim : hd) : (ffn > hd ? ffn : hd);
    const XRows xr = xrows_alloc(t, widest);
    int *seq_of = malloc(sizeof(int) * (size_t)t);
    int keys = 0;
    for (int b = 0; b < nseq; b++) {
        for (int r = row0[b]; r < row0[b + 1]; r++)
            seq_of[r] = b;
        const int nb = past[b] + row0[b + 1] - row0[b];
        keys = nb > keys ? nb : keys;
    }
    const Seqs seqs = {row0, seq_of, past, kc, vc, mask, causal, e.lmask};
    SpinBarrier spin = {0, 0, 0, !spin_waits};
#pragma omp parallel num_threads(threads)
    {
        ws_spin = threads > 1 ? &spin : NULL;
        ws_phase = 0;
        int *seen = malloc(sizeof(int) * (size_t)keys);
        float *sc = malloc(sizeof(float) * ((size_t)keys + 8));
#pragma omp single nowait
        rms_norm_rows(x, norms[0], xn, t, dim, eps);
        ws_barrier();
        for (int l = 0; l < layers; l++) {
            const void *const *wl = w + 4 * l;
            const int *fl = fmt + 4 * l;
            const float *const *nl = norms + (size_t)per * l;
            const int local = e.local && e.local[l];
            const float *cl = local ? e.cos_local : cos, *sl = local ? e.sin_local : sin;
            matmul_fmt_ws(xn, wl[0], fl[0], qkv, t, n[0], dim, xr);
#pragma omp single nowait
            for (int r = 0; r < t; r++) {
                const float *c = cl + (size_t)r * d, *sn = sl + (size_t)r * d;
                float *row = qkv + (size_t)r * n[0];
                if (e.qk_norm) { /* each head of q, then of k, on its own */
                    rms_norm_rows(row, nl[2], row, heads, d, eps);
                    rms_norm_rows(row + hd, nl[3], row + hd, kv_heads, d, eps);
                }
                float tmp[512]; /* d <= 256: one head's rotation */
                for (int h = 0; h < heads + kv_heads; h++) {
                    float *v = row + (size_t)h * d;
                    for (int i = 0; i < d; i++)
                        tmp[i] = v[i] * c[i] + v[(i + half) % d] * sn[i];
                    for (int i = 0; i < d; i++)
                        v[i] = tmp[i];
                }
                const int b = seq_of[r];
                float *kl = kc[b] + l * kv_layer, *vl = vc[b] + l * kv_layer;
                for (int g = 0; g < kv_heads; g++) {
                    const size_t at = (size_t)g * kv_head + (size_t)(past[b] + r - row0[b]) * d;
                    for (int i = 0; i < d; i++) {
                        kl[at + i] = row[(size_t)(heads + g) * d + i];
                        vl[at + i] = row[(size_t)(heads + kv_heads + g) * d + i];
                    }
                }
            }
            ws_barrier();
            attend_ws(qkv, seqs, l * kv_layer, att, t, heads, kv_heads, d, n[0], kv_head, scale,
                      local ? e.window : 0, seen, sc);
            matmul_fmt_ws(att, wl[1], fl[1], out, t, n[1], hd, xr);
#pragma omp single nowait
            {
                for (int r = 0; r < t; r++) {
                    float *o = out + (size_t)r * n[1];
                    if (e.post_norms)
                        rms_norm_rows(o, nl[post], o, 1, dim, eps);
                    for (int i = 0; i < dim; i++)
                        x[(size_t)r * dim + i] += o[i];
                }
                rms_norm_rows(x, nl[1], xn, t, dim, eps);
            }
            ws_barrier();
            matmul_fmt_ws(xn, wl[2], fl[2], gu, t, n[2], dim, xr);
#pragma omp for schedule(static) nowait
            for (int r = 0; r < t; r++) {
                const float *g = gu + (size_t)r * n[2], *u = g + ffn;
                float *a = xn + (size_t)r * ffn;
                int i = 0;
                if (e.gelu) {
                    for (; i + 8 <= ffn; i += 8)
                        _mm256_storeu_ps(
                            a + i, gelu_mul(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
                    for (; i < ffn; i++)
                        a[i] = 0.5f * g[i] *
                               (1.0f + tanhf(0.7978845608028654f *
                                             (g[i] + 0.044715f * g[i] * g[i] * g[i]))) *
                               u[i];
                }
                for (; i + 8 <= ffn; i += 8)
                    _mm256_storeu_ps(a + i,
                                     silu_mul(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
                for (; i < ffn; i++)
                    a[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
            }
            ws_barrier();
            matmul_fmt_ws(xn, wl[3], fl[3], out, t, n[3], ffn, xr);
#pragma omp single nowait
            {
                for (int r = 0; r < t; r++) {
                    float *o = out + (size_t)r * n[3];
                    if (e.post_norms)
                        rms_norm_rows(o, nl[post + 1], o, 1, dim, eps);
                    for (int i = 0; i < dim; i++)
                        x[(size_t)r * dim + i] += o[i];
                }
                if (l + 1 < layers)
                    rms_norm_rows(x, nl[per], xn, t, dim, eps);
            }
            ws_barrier();
        }
        free(seen);
        free(sc);
        ws_spin = NULL;
    }
    free(seq_of);
    free(xr.d);
    return atomic_load(&spin.late);
}
