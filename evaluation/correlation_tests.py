"""Paired significance test of the difference of two scorers' correlations with the same human judgments.

Two caption scorers ``a`` and ``b`` are correlated with the same human scores ``h`` (Flickr8k-Expert:
Kendall τ-c; Flickr8k-CF: τ-b; :mod:`evaluation.correlation`).  The observed effect is
``Δ = τ(a, h) − τ(b, h)``; its sampling distribution is estimated by a **paired bootstrap over judged
images** (Efron & Tibshirani 1993, ch. 13, percentile interval; the paired design as Koehn 2004,
"Statistical significance tests for machine translation evaluation", Sec. 4, for BLEU differences):

* each of ``R`` resamples draws the judged *images* with replacement (as many as there are) and keeps
  every judged row of each drawn image, as often as the image was drawn; both scorers see the same
  resample (paired);
* ``Δ*_r = τ(a, h) − τ(b, h)`` on resample ``r``;
* 95 % CI: the 2.5 and 97.5 percentiles of ``Δ*`` (percentile interval);
* two-sided p-value: the share of resamples on the other side of zero from ``Δ`` — ``Δ* ≤ 0`` when
  ``Δ > 0``, ``Δ* ≥ 0`` when ``Δ < 0``; a resample where a τ is undefined (a constant scorer there)
  counts as one — doubled, with the add-one correction of the paired randomisation test
  (:func:`evaluation.significance.paired_randomization_test`) so that no p is 0:
  ``p = min(1, 2 (1 + #flips) / (R + 1))``; ``Δ = 0`` gives ``p = 1``.

**Why images, not rows.**  The rows of one image are not independent observations: the three Expert
rows of a judged pair share one candidate (and so one score of every scorer), the rows of one image
share its image and its reference captions, and on Flickr8k-CF an image's own captions are judged as
candidates for it while the others are its references.  Resampling rows would treat these correlated
rows as independent draws and make the interval too narrow; the image is the unit that was sampled.

**Computation.**  Kendall's statistics are sums over pairs of rows.  With rows grouped by image
``g = 1 … G`` and ``c_g`` the number of times image ``g`` is drawn, every pair sum of the resample is a
quadratic form ``½ cᵀ M c`` in the counts (pairs of copies of one image included: a row paired with its
own copy is tied in both variables and adds nothing), where ``M_gk`` is the sum over the rows ``i`` of
``g`` and ``j`` of ``k`` of

* ``sign(a_i − a_j) · sign(h_i − h_j)`` (concordant minus discordant pairs, ``P − Q``),
* ``|sign(a_i − a_j)|`` (pairs not tied in ``a``; likewise for ``h``).

So ``M`` (``G × G``) is computed once per scorer, in exact integers: the untied counts as ``n_g n_k`` minus
the tied pairs (a sparse product), the concordance by divide and conquer over the distinct human values
(``O(n G log L)`` for ``L`` of them, at most the ``O(n²)`` of all pairs; memory in bounded chunks), and
all ``R`` resamples are a few ``(R × G) @ (G × G)`` products.  τ-b = ``(P − Q) / sqrt(N_a N_h)`` with
``N`` the pairs not tied in each variable; τ-c (Stuart) = ``2 m (P − Q) / (n² (m − 1))`` with ``n`` the
rows of the resample and ``m`` the smaller number of distinct values of ``a`` and ``h`` among them — both
as :func:`scipy.stats.kendalltau`, which the full sample (every ``c_g = 1``) reproduces exactly.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from evaluation.significance import significance_marker

__all__ = ["BootstrapResult", "GroupedKendall", "KendallBlocks", "paired_bootstrap_correlation",
           "bootstrap_pvalue"]

#: Cells of the integer work arrays computed at once (at most 4 bytes each, a few arrays): bounds the
#: memory of :meth:`GroupedKendall.blocks` to some tens of MB whatever the number of rows.
_CHUNK_CELLS = 4_000_000


@dataclass(frozen=True)
class BootstrapResult:
    """Outcome of :func:`paired_bootstrap_correlation` (correlations raw, not × 100).

    Attributes
    ----------
    delta : float
        ``τ(a, h) − τ(b, h)`` on all rows.
    tau_a, tau_b : float
        The two correlations on all rows.
    ci : tuple of float
        Percentile interval of the resampled differences (level ``1 − alpha``).
    pvalue : float
        Two-sided, see the module docstring.
    marker : str
        :func:`~evaluation.significance.significance_marker` of ``pvalue``.
    n_rows, n_images, n_resamples : int
    n_undefined : int
        Resamples where a τ was undefined (counted as sign flips, left out of the interval).
    variant : str
        ``"b"`` or ``"c"``.
    """

    delta: float
    tau_a: float
    tau_b: float
    ci: tuple[float, float]
    pvalue: float
    marker: str
    n_rows: int
    n_images: int
    n_resamples: int
    n_undefined: int
    variant: str

    @property
    def method(self) -> str:
        return (f"paired bootstrap over {self.n_images} judged images ({self.n_resamples} resamples, "
                f"Kendall τ-{self.variant})")


@dataclass(frozen=True)
class KendallBlocks:
    """One scorer's per-image pair sums (see the module docstring): ``concordance`` (``M`` of
    ``sign(x_i − x_j) sign(h_i − h_j)``), ``untied`` (``M`` of ``|sign(x_i − x_j)|``), and the distinct
    values: ``own_distinct[g]`` values held by image ``g`` alone, ``shared`` (``G × K`` bool) which
    image holds each value held by several."""

    concordance: np.ndarray
    untied: np.ndarray
    own_distinct: np.ndarray
    shared: np.ndarray


def _distinct_parts(x: np.ndarray, group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(values held by one image only, counted per image; incidence of the values held by several)."""
    _, code = np.unique(x, return_inverse=True)
    pairs = np.unique(np.stack([code, group]), axis=1)          # distinct (value, image) pairs
    holders = np.bincount(pairs[0], minlength=code.max() + 1)
    alone = holders[pairs[0]] == 1
    own = np.bincount(pairs[1][alone], minlength=n_groups).astype(np.float64)
    shared_vals = np.flatnonzero(holders > 1)
    col = np.full(holders.size, -1, dtype=np.int64)
    col[shared_vals] = np.arange(shared_vals.size)
    inc = np.zeros((n_groups, shared_vals.size), dtype=np.float64)
    keep = ~alone
    inc[pairs[1][keep], col[pairs[0][keep]]] = 1.0
    return own, inc


def _tie_sums(x: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """``T[g, k]``: the row pairs (``i`` of image ``g``, ``j`` of ``k``, ``i = j`` included) with ``x_i = x_j``,
    as ``A Aᵀ`` of the (image × distinct value) count matrix ``A`` (sparse, exact integers)."""
    _, code = np.unique(x, return_inverse=True)
    a = sp.csr_matrix((np.ones(x.size, dtype=np.int64), (group, code.ravel())),
                      shape=(n_groups, int(code.max()) + 1))
    return (a @ a.T).toarray().astype(np.int64)


def _concordance_sums(x: np.ndarray, level: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """``M[g, k] = Σ_{i ∈ g, j ∈ k} sign(x_i − x_j) sign(h_i − h_j)`` in integers, ``h`` given by its
    ``level`` codes (``np.unique`` inverse, so ``sign(h_i − h_j) = sign(level_i − level_j)``).

    With ``Z[g, k] = Σ_{i ∈ g, j ∈ k, level_i > level_j} sign(x_i − x_j)``, ``M = Z + Zᵀ`` (a pair tied in
    ``h`` adds nothing; ``sign`` is odd).  ``Z`` is summed by divide and conquer over the levels (the
    offline dominance counting of Bentley 1980, "Multidimensional divide-and-conquer", CACM 23(4)): the
    rows of the upper half of a level range meet those of the lower half in one pass
    (:func:`_add_cross_pairs`, ``O((rows + G) · G)`` counting instead of ``O(rows²)`` pairs), then each
    half recurses; a range whose rows are fewer than ``G · log₂(levels)`` sums its pairs directly
    (:func:`_add_level_pairs`).  ``O(n G log L)`` for ``L`` human levels — Flickr8k-Expert has 4, -CF 12 —
    and never more than the ``O(n²)`` pairs.
    """
    z = np.zeros((n_groups, n_groups), dtype=np.int64)
    stack = [(np.arange(x.size), 0, int(level.max()) + 1)]
    while stack:
        rows, lo, hi = stack.pop()
        if hi - lo < 2 or rows.size < 2:
            continue
        if rows.size <= n_groups * int(np.ceil(np.log2(hi - lo))):
            _add_level_pairs(z, x, level, group, rows)
            continue
        mid = (lo + hi) // 2
        upper = level[rows] >= mid
        low, high = rows[~upper], rows[upper]
        _add_cross_pairs(z, x, group, high, low)
        stack += [(low, lo, mid), (high, mid, hi)]
    return z + z.T


def _add_cross_pairs(z: np.ndarray, x: np.ndarray, group: np.ndarray, q: np.ndarray, d: np.ndarray) -> None:
    """``z[g, k] += Σ_{i ∈ q ∩ g, j ∈ d ∩ k} sign(x_i − x_j)`` by counting: with the rows ``d`` sorted by
    ``x`` and ``C[m, k]`` the rows of image ``k`` among the first ``m``,
    ``Σ_{j ∈ d ∩ k} sign(x_i − x_j) = C[lt_i, k] + C[le_i, k] − N_k`` (``lt_i`` / ``le_i``: rows of ``d``
    with ``x < x_i`` / ``x ≤ x_i``; ``N_k``: rows of ``d`` in ``k``); images in column chunks."""
    if q.size == 0 or d.size == 0:
        return
    d = d[np.argsort(x[d], kind="stable")]
    q = q[np.argsort(group[q], kind="stable")]
    xd, xq, gq = x[d], x[q], group[q]
    lt, le = np.searchsorted(xd, xq, side="left"), np.searchsorted(xd, xq, side="right")
    starts = np.flatnonzero(np.r_[True, gq[1:] != gq[:-1]])
    cols, col = np.unique(group[d], return_inverse=True)
    n_per = np.bincount(col, minlength=cols.size).astype(np.int32)
    width = max(1, _CHUNK_CELLS // (d.size + 1 + 2 * q.size))
    for c0 in range(0, cols.size, width):
        c1 = min(cols.size, c0 + width)
        hit = np.flatnonzero((col >= c0) & (col < c1))
        cum = np.zeros((d.size + 1, c1 - c0), dtype=np.int32)
        cum[hit + 1, col[hit] - c0] = 1
        np.cumsum(cum, axis=0, out=cum)
        signed = cum[lt]
        signed += cum[le]
        signed -= n_per[c0:c1]
        z[np.ix_(gq[starts], cols[c0:c1])] += np.add.reduceat(signed, starts, axis=0, dtype=np.int64)


def _add_level_pairs(z: np.ndarray, x: np.ndarray, level: np.ndarray, group: np.ndarray, rows: np.ndarray) -> None:
    """``z[g, k] += Σ_{i, j ∈ rows, i ∈ g, j ∈ k, level_i > level_j} sign(x_i − x_j)`` pair by pair (int8
    signs, int32 sums per image, row chunks)."""
    r = rows[np.argsort(group[rows], kind="stable")]
    xr, lr, gr = x[r], level[r], group[r]
    starts = np.flatnonzero(np.r_[True, gr[1:] != gr[:-1]])
    per = max(1, _CHUNK_CELLS // r.size)
    for a in range(0, r.size, per):
        b = min(r.size, a + per)
        s = (xr[a:b, None] > xr).view(np.int8) - (xr[a:b, None] < xr).view(np.int8)
        s *= lr[a:b, None] > lr
        part = np.add.reduceat(s, starts, axis=1, dtype=np.int32)
        gi = gr[a:b]
        local = np.flatnonzero(np.r_[True, gi[1:] != gi[:-1]])
        z[np.ix_(gi[local], gr[starts])] += np.add.reduceat(part, local, axis=0)


class GroupedKendall:
    """Kendall τ-b / τ-c of any scorer with fixed human scores, on image-bootstrap resamples.

    Parameters
    ----------
    human : array of shape (n,)
        The human score of each judged row.
    groups : sequence of hashable, length n
        The judged image of each row (the resampling unit).
    variant : ``"b"`` or ``"c"``

    Notes
    -----
    :meth:`blocks` costs ``O(n G log L)`` once per scorer (``L`` distinct human scores; on the 47,830
    Flickr8k-CF rows of 1,000 images, 12 values: about 2 s and 60 MB of work arrays, instead of 2·10⁹
    row pairs); keep its result to compare one scorer with several.
    """

    def __init__(self, human, groups: Sequence, variant: str = "c"):
        if variant not in ("b", "c"):
            raise ValueError(f"GroupedKendall: variant must be 'b' or 'c', got {variant!r}")
        h = np.asarray(human, dtype=np.float64).ravel()
        if len(groups) != h.size:
            raise ValueError(f"GroupedKendall: {h.size} human scores but {len(groups)} group labels")
        if h.size < 2 or not np.isfinite(h).all():
            raise ValueError("GroupedKendall: need at least 2 finite human scores")
        _, g = np.unique(np.asarray([str(x) for x in groups]), return_inverse=True)
        self.variant = variant
        self.order = np.argsort(g, kind="stable")                    # rows sorted by image
        self.group = g[self.order]
        self.n_groups = int(self.group.max()) + 1
        if self.n_groups < 2:
            raise ValueError("GroupedKendall: the rows belong to one image; the bootstrap needs at least 2")
        self.starts = np.flatnonzero(np.r_[True, self.group[1:] != self.group[:-1]])
        self.rows_per_group = np.diff(np.r_[self.starts, self.group.size]).astype(np.float64)
        self.h = h[self.order]
        self.h_code = np.unique(self.h, return_inverse=True)[1].ravel()
        self.human_blocks = self._blocks_sorted(self.h)
        self._last_draws: tuple | None = None

    def blocks(self, scores) -> KendallBlocks:
        """The per-image pair sums of one scorer's per-row ``scores`` (in the rows' original order)."""
        x = np.asarray(scores, dtype=np.float64).ravel()
        if x.size != self.h.size:
            raise ValueError(f"GroupedKendall: {x.size} scores for {self.h.size} rows")
        if not np.isfinite(x).all():
            raise ValueError("GroupedKendall: scores must be finite")
        return self._blocks_sorted(x[self.order])

    def _blocks_sorted(self, x: np.ndarray) -> KendallBlocks:
        G = self.n_groups
        conc = _concordance_sums(x, self.h_code, self.group, G)
        sizes = self.rows_per_group.astype(np.int64)
        untied = np.outer(sizes, sizes) - _tie_sums(x, self.group, G)
        own, shared = _distinct_parts(x, self.group, G)
        return KendallBlocks(conc.astype(np.float64), untied.astype(np.float64), own, shared)

    def taus(self, b: KendallBlocks, counts: np.ndarray) -> np.ndarray:
        """τ on each resample; ``counts`` (R × G): how often each image is drawn.  NaN where undefined."""
        c = np.asarray(counts, dtype=np.float64)
        return self._taus(b, c, self._human_terms(c))

    def _human_terms(self, c: np.ndarray) -> tuple[np.ndarray, ...]:
        """What :meth:`taus` needs of the human scores on the resamples ``c``, the same for every scorer:
        τ-b's untied human pairs; τ-c's rows and distinct human values."""
        if self.variant == "b":
            return (0.5 * np.einsum("rg,rg->r", c @ self.human_blocks.untied, c),)
        return c @ self.rows_per_group, self._distinct(self.human_blocks, c)

    def _taus(self, b: KendallBlocks, c: np.ndarray, human: tuple[np.ndarray, ...]) -> np.ndarray:
        s = 0.5 * np.einsum("rg,rg->r", c @ b.concordance, c)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.variant == "b":
                nx = 0.5 * np.einsum("rg,rg->r", c @ b.untied, c)
                return s / np.sqrt(nx * human[0])
            n, m_h = human
            m = np.minimum(self._distinct(b, c), m_h)
            return np.where(m > 1, 2.0 * m * s / (n ** 2 * (m - 1.0)), np.nan)

    @staticmethod
    def _distinct(b: KendallBlocks, c: np.ndarray) -> np.ndarray:
        present = (c > 0).astype(np.float64)
        shared = ((present @ b.shared) > 0).sum(axis=1) if b.shared.shape[1] else 0.0
        return present @ b.own_distinct + shared

    def resample_counts(self, n_resamples: int, seed: int) -> np.ndarray:
        """``(n_resamples, G)`` draw counts of the images (seeded; each row sums to ``G``)."""
        rng = np.random.default_rng(seed)
        return rng.multinomial(self.n_groups, np.full(self.n_groups, 1.0 / self.n_groups), size=n_resamples)

    def _resampled_taus(self, b: KendallBlocks, n_resamples: int, seed: int) -> np.ndarray:
        """:meth:`taus` of ``b`` on :meth:`resample_counts`: the draws, their human terms and each scorer's
        τs are kept for the next comparison with the same resamples (a scorer compared with several is
        resampled once)."""
        if self._last_draws is None or self._last_draws[0] != (n_resamples, seed):
            c = self.resample_counts(n_resamples, seed).astype(np.float64)
            self._last_draws = ((n_resamples, seed), c, self._human_terms(c), {})
        _, c, human, done = self._last_draws
        if id(b) not in done:
            done[id(b)] = (b, self._taus(b, c, human))      # b kept: its id stays its own
        return done[id(b)][1]

    def compare(self, a: KendallBlocks, b: KendallBlocks, *, n_resamples: int = 1000, seed: int = 0,
                alpha: float = 0.05) -> BootstrapResult:
        """The paired image bootstrap of ``τ(a) − τ(b)`` (module docstring)."""
        if not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
            raise ValueError(f"n_resamples must be an integer ≥ 1, got {n_resamples!r}")
        full = np.ones((1, self.n_groups))
        ta, tb = float(self.taus(a, full)[0]), float(self.taus(b, full)[0])
        delta = ta - tb
        d = self._resampled_taus(a, int(n_resamples), seed) - self._resampled_taus(b, int(n_resamples), seed)
        undefined = ~np.isfinite(d)
        p = bootstrap_pvalue(delta, d)
        ok = d[~undefined]
        lo, hi = (np.percentile(ok, [100 * alpha / 2, 100 * (1 - alpha / 2)]) if ok.size else (np.nan, np.nan))
        return BootstrapResult(delta=delta, tau_a=ta, tau_b=tb, ci=(float(lo), float(hi)), pvalue=p,
                               marker=significance_marker(p), n_rows=int(self.h.size), n_images=self.n_groups,
                               n_resamples=int(n_resamples), n_undefined=int(undefined.sum()), variant=self.variant)


def bootstrap_pvalue(delta: float, resampled: np.ndarray, tol: float = 1e-12) -> float:
    """Two-sided bootstrap p-value of an observed difference: ``min(1, 2 (1 + #flips) / (R + 1))``, a
    flip being a resampled difference on the other side of zero (or at zero, or undefined); 1 when
    ``|delta| ≤ tol``."""
    d = np.asarray(resampled, dtype=np.float64)
    if not np.isfinite(delta) or abs(delta) <= tol:
        return 1.0
    bad = ~np.isfinite(d)
    flips = int(np.sum(bad | ((d <= 0) if delta > 0 else (d >= 0))))
    return float(min(1.0, 2.0 * (1 + flips) / (d.size + 1)))


def paired_bootstrap_correlation(scores_a, scores_b, human, groups: Sequence, *, variant: str = "c",
                                 n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05) -> BootstrapResult:
    """Paired image-bootstrap test of ``τ(a, h) − τ(b, h)`` (see the module docstring).

    Parameters
    ----------
    scores_a, scores_b : array of shape (n,)
        Two scorers' scores of the same judged rows.
    human : array of shape (n,)
        The rows' human scores.
    groups : sequence of length n
        Each row's judged image (rows of one image are resampled together).
    variant : ``"b"`` or ``"c"``
        Kendall τ-b (Flickr8k-CF) or τ-c (Flickr8k-Expert, Composite).
    n_resamples, seed, alpha
        Resamples, their seed, and the interval's level ``1 − alpha``.

    Returns
    -------
    BootstrapResult
    """
    gk = GroupedKendall(human, groups, variant)
    return gk.compare(gk.blocks(scores_a), gk.blocks(scores_b), n_resamples=n_resamples, seed=seed, alpha=alpha)
