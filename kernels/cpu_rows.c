/* y = x @ w.T for a few rows of x: the CPU matrix product of a verify forward.
 *
 * Decoding reads every weight once per forward and multiplies it with 1..~16 rows, so the
 * product is bound by memory bandwidth, not arithmetic, as long as each weight is loaded once
 * for all rows. oneDNN's and MKL's general kernels do not manage that for so few rows (on the
 * 2-core dev box, 5 rows cost 1.3-1.4x one row); this one does: w is stored as panels of 16
 * output columns, wp[p][k][0..15] = w[16 p + j][k], streamed once; for each group of up to 6 rows
 * the 16 x 6 outputs of a panel stay in 12 AVX2 registers while k runs over a slice of the
 * panel (the 6 x 16 register block of BLIS's Haswell kernel); more rows reuse the slice from L1.
 * Panels are split across OpenMP threads.
 *
 * Every row is summed in the same order whatever the number of rows, so a row's output is
 * bit-identical whether it is verified alone or with drafts.
 */
#include <immintrin.h>
#include <stddef.h>

#define PANEL 16
#define ROWS 6
#define K_BLOCK 128 /* a panel slice of 8 KB stays in L1 while every group of rows uses it */
#define PREFETCH 128 /* k steps (cache lines of the panel) ahead */

/* Rows r < rows of y[., 0..15] (+)= x[r, kb..kb + kn) . wp[kb..kb + kn); row stride k_dim. */
static inline __attribute__((always_inline)) void panel_rows(
    const float *x, const float *wp, float *y, const int rows, int kn, int k_dim, int n_dim,
    int first) {
    __m256 lo[ROWS], hi[ROWS];
    for (int r = 0; r < rows; r++) {
        lo[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + (size_t)r * n_dim);
        hi[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + (size_t)r * n_dim + 8);
    }
    for (int k = 0; k < kn; k++) {
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

/* x: (m, k) row-major; wp: (n / 16, k, 16); y: (m, n) row-major; n a multiple of 16. */
void rows_matmul(const float *x, const float *wp, float *y, int m, int n, int k, int threads) {
    const int panels = n / PANEL;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int p = 0; p < panels; p++) {
        for (int k0 = 0; k0 < k; k0 += K_BLOCK) {
            const int kn = k - k0 < K_BLOCK ? k - k0 : K_BLOCK;
            const float *w = wp + ((size_t)p * k + k0) * PANEL;
            for (int r0 = 0; r0 < m; r0 += ROWS) {
                const float *xr = x + (size_t)r0 * k + k0;
                float *yr = y + (size_t)r0 * n + PANEL * p;
                switch (m - r0 < ROWS ? m - r0 : ROWS) { /* constant row counts: registers */
                case 1: panel_rows(xr, w, yr, 1, kn, k, n, k0 == 0); break;
                case 2: panel_rows(xr, w, yr, 2, kn, k, n, k0 == 0); break;
                case 3: panel_rows(xr, w, yr, 3, kn, k, n, k0 == 0); break;
                case 4: panel_rows(xr, w, yr, 4, kn, k, n, k0 == 0); break;
                case 5: panel_rows(xr, w, yr, 5, kn, k, n, k0 == 0); break;
                default: panel_rows(xr, w, yr, 6, kn, k, n, k0 == 0); break;
                }
            }
        }
    }
}
