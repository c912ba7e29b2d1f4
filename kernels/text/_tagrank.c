/* TagRank's common-word sums (Hodosh et al. 2013, Sec. 3.4.2, Eq. 11; kernels/text/tagrank.py).
 *
 * chi2(x, y) = |x|_1 + |y|_1 - 4 sum_{i in x and y} x_i y_i / (x_i + y_i); this file computes the last
 * sum, for the relative-rank (r) and absolute-rank (a) vectors, between a block of row captions and the
 * column captions from c0 on:
 *
 *   com_r[i][j] += r_i(w) r_j(w) / (r_i(w) + r_j(w))   (0 where the denominator is 0), same for a,
 *
 * for every word w the two captions share, word by word in ascending word id: each entry receives the
 * same additions in the same order as the numpy loop in tagrank.py (the fallback), so the result is the
 * same bit for bit.  Postings are grouped by word (ascending), each group's captions ascending.
 *
 * Built at first use by kernels/text/tagrank_native.py (cc -O3 -ffp-contract=off -shared -fPIC);
 * ctypes releases the GIL for the call.
 */
#include <stdint.h>

static int64_t lower_bound(const int64_t *a, int64_t lo, int64_t hi, int64_t v) {
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static inline double f(double x, double y) {
    double s = x + y;
    return s > 0.0 ? x * y / s : 0.0;
}

/* Row postings: n_words groups, group k in [row_ptr[k], row_ptr[k+1]) of (row_cap, row_r, row_a);
 * its word's column postings are [col_lo[k], col_hi[k]) of (col_cap, col_r, col_a) (empty: no column
 * caption has the word).  Rows s <= row_cap < e go to output row row_cap - s; columns col_cap >= c0 to
 * output column col_cap - c0; com_r, com_a: (e - s) x nc, row-major, accumulated into. */
int tagrank_common(int64_t n_words, const int64_t *row_ptr, const int64_t *row_cap, const double *row_r,
                   const double *row_a, const int64_t *col_lo, const int64_t *col_hi, const int64_t *col_cap,
                   const double *col_r, const double *col_a, int64_t s, int64_t e, int64_t c0, int64_t nc,
                   double *com_r, double *com_a) {
    for (int64_t k = 0; k < n_words; ++k) {
        int64_t r0 = lower_bound(row_cap, row_ptr[k], row_ptr[k + 1], s);
        int64_t r1 = lower_bound(row_cap, r0, row_ptr[k + 1], e);
        if (r1 <= r0 || col_hi[k] <= col_lo[k]) continue;
        int64_t k0 = lower_bound(col_cap, col_lo[k], col_hi[k], c0);
        for (int64_t p = r0; p < r1; ++p) {
            const double xr = row_r[p], xa = row_a[p];
            double *out_r = com_r + (row_cap[p] - s) * nc;
            double *out_a = com_a + (row_cap[p] - s) * nc;
            for (int64_t q = k0; q < col_hi[k]; ++q) {
                const int64_t j = col_cap[q] - c0;
                out_r[j] += f(xr, col_r[q]);
                out_a[j] += f(xa, col_a[q]);
            }
        }
    }
    return 0;
}
