/* Soft-matching TRI kernel (Hodosh et al. 2013, Eqs. 17-21), fused dynamic programme.
 *
 * For a caption pair (a: n tokens, b: m tokens) and the weighted word kernel W ((Vp x Vp), row-major,
 * W[u, v] = lambda_m^2 omega_u kappa(u, v) omega_v):
 *   M[i][j] = W[a_i, b_j],  C = inclusive 2-D prefix sum of M,  tot = C[n-1][m-1]
 *   K = tot + sum_{i>=1, j>=1} M[i][j] * C[i-1][j-1] * (1 + A[i][j])   (max_len = 3)
 *   A[i][j] = tot - C[i][m-1] - C[n-1][j] + C[i][j]                    (strictly after (i, j))
 * max_len = 2 drops the (A) factor, max_len = 1 keeps only tot.  pair_kernel() expands the A term
 * so that one pass over the rows of M suffices (two rows of C kept).
 *
 * Built at first use by kernels/text/native.py (gcc -O3 -shared -fPIC [-fopenmp]); the torch
 * implementation in tri.py computes exactly the same quantity and is the fallback.
 */
#include <stdint.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MAXL 64   /* longest caption (content words) handled; longer -> torch fallback */

static double pair_kernel(const float *W, int64_t Vp, const int64_t *ta, int n, const int64_t *tb, int m,
                          int max_len, double *buf) {
    /* One pass over the rows of M keeping two rows of C and the column sums T of MB = M[i][j] C[i-1][j-1]:
     *   sum_ij MB (1 + A) = S + tot S - sum_i C[i][m-1] S_i - sum_j C[n-1][j] T_j + sum_ij MB C[i][j]. */
    int i, j;
    double *prev = buf, *cur = buf + m, *T = buf + 2 * m, *tmp;
    if (n == 0 || m == 0) return 0.0;
    const float *row = W + ta[0] * Vp;
    double run = 0.0;
    for (j = 0; j < m; j++) {
        run += (double)row[tb[j]];
        prev[j] = run;
        T[j] = 0.0;
    }
    double S = 0.0, RS = 0.0, X = 0.0;
    for (i = 1; i < n; i++) {
        row = W + ta[i] * Vp;
        double v = (double)row[tb[0]];
        double Si = 0.0;
        run = v;
        cur[0] = prev[0] + run;
        for (j = 1; j < m; j++) {
            v = (double)row[tb[j]];
            run += v;
            double c = prev[j] + run;
            cur[j] = c;
            double mb = v * prev[j - 1];
            Si += mb;
            T[j] += mb;
            X += mb * c;
        }
        S += Si;
        RS += cur[m - 1] * Si;
        tmp = prev; prev = cur; cur = tmp;
    }
    double tot = prev[m - 1];
    if (max_len == 1) return tot;
    if (max_len == 2) return tot + S;
    double CT = 0.0;
    for (j = 1; j < m; j++) CT += prev[j] * T[j];
    return tot + S + tot * S - RS - CT + X;
}

/* Item Gram, symmetric, rows item_lo..item_hi-1: for every caption pair a <= b (captions ordered by item,
 * item_of non-decreasing) with a in those items, add scale[a] scale[b] K(a, b) to
 * out[item_of[a] - item_lo, item_of[b]] (weight 1/2 when a == b): `out` holds those rows only.  The caller
 * symmetrises the whole Gram out + out^T.  A row of `out` is owned by the item of `a` and its entries are
 * summed in caption order, so the OpenMP loop over items is race-free and a row does not depend on which
 * other rows are computed with it. */
int soft_tri_gram(const float *W, int64_t Vp, const int64_t *tokens, const int64_t *offsets, int64_t n_caps,
                  const double *scale, const int64_t *item_start, int64_t n_items, int max_len, double *out,
                  int n_threads, int64_t item_lo, int64_t item_hi) {
    int64_t I;
    int bad = 0;
    for (int64_t a = 0; a < n_caps; a++)
        if (offsets[a + 1] - offsets[a] > MAXL) bad = 1;
    if (bad) return -1;
#ifdef _OPENMP
    /* num_threads clause: this loop only, the process-wide OpenMP setting stays as it was */
#pragma omp parallel for schedule(dynamic, 4) num_threads(n_threads > 0 ? n_threads : omp_get_max_threads())
#endif
    for (I = item_lo; I < item_hi; I++) {
        double buf[3 * MAXL];
        double *orow = out + (I - item_lo) * n_items;
        for (int64_t a = item_start[I]; a < item_start[I + 1]; a++) {
            int n = (int)(offsets[a + 1] - offsets[a]);
            const int64_t *ta = tokens + offsets[a];
            if (n == 0 || scale[a] == 0.0) continue;
            int64_t J = I;
            for (int64_t b = a; b < n_caps; b++) {
                while (b >= item_start[J + 1]) J++;
                int m = (int)(offsets[b + 1] - offsets[b]);
                if (m == 0 || scale[b] == 0.0) continue;
                double k = pair_kernel(W, Vp, ta, n, tokens + offsets[b], m, max_len, buf);
                double v = k * scale[a] * scale[b];
                if (a == b) v *= 0.5;
                orow[J] += v;
            }
        }
    }
    return 0;
}

/* Queries x items: out[q, J] += qscale[q] scale[b] K(q, b) for every training caption b of item J. */
int soft_tri_cross(const float *W, int64_t Vp, const int64_t *qtokens, const int64_t *qoffsets, int64_t n_q,
                   const double *qscale, const int64_t *tokens, const int64_t *offsets, int64_t n_caps,
                   const double *scale, const int64_t *item_start, int64_t n_items, int max_len, double *out,
                   int n_threads) {
    int64_t q;
    for (int64_t a = 0; a < n_q; a++)
        if (qoffsets[a + 1] - qoffsets[a] > MAXL) return -1;
    for (int64_t a = 0; a < n_caps; a++)
        if (offsets[a + 1] - offsets[a] > MAXL) return -1;
#ifdef _OPENMP
    /* num_threads clause: this loop only, the process-wide OpenMP setting stays as it was */
#pragma omp parallel for schedule(dynamic, 4) num_threads(n_threads > 0 ? n_threads : omp_get_max_threads())
#endif
    for (q = 0; q < n_q; q++) {
        double buf[3 * MAXL];
        int n = (int)(qoffsets[q + 1] - qoffsets[q]);
        const int64_t *ta = qtokens + qoffsets[q];
        double *orow = out + q * n_items;
        if (n == 0 || qscale[q] == 0.0) continue;
        for (int64_t J = 0; J < n_items; J++) {
            double s = 0.0;
            for (int64_t b = item_start[J]; b < item_start[J + 1]; b++) {
                int m = (int)(offsets[b + 1] - offsets[b]);
                if (m == 0 || scale[b] == 0.0) continue;
                s += pair_kernel(W, Vp, ta, n, tokens + offsets[b], m, max_len, buf) * scale[b];
            }
            orow[J] += s * qscale[q];
        }
    }
    return 0;
}
