"""Synthetic two-view data with a planted shared latent variable (tests and benchmarks).

Each item ``i`` has a latent ``z_i ∈ R^q``; view X is ``tanh(z A) + noise`` and view Y is
``(z B)^3/3 + noise`` in a few dimensions, so the relation between the views is nonlinear and only
through ``z``.  RBF kernels (bandwidth = median distance heuristic on the training items) make
PSD Gram matrices; kernel rows of held-out items come from the same function.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corpora.base import Caption, RankingPool

__all__ = ["TwoViewData", "make_two_view", "rbf_kernel", "median_gamma", "toy_pool"]


def rbf_kernel(A: np.ndarray, B: np.ndarray, gamma: float) -> np.ndarray:
    """``exp(−γ ‖a − b‖²)`` (float64), computed blockwise-free with the expansion of the norm."""
    A = np.asarray(A, np.float64)
    B = np.asarray(B, np.float64)
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
    np.maximum(d2, 0.0, out=d2)
    return np.exp(-gamma * d2)


def median_gamma(X: np.ndarray, sample: int = 500, seed: int = 0) -> float:
    """``1 / median(‖x_i − x_j‖²)`` over a seeded sample of training items."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(X), size=min(sample, len(X)), replace=False)
    S = np.asarray(X, np.float64)[idx]
    d2 = (S * S).sum(1)[:, None] + (S * S).sum(1)[None, :] - 2 * S @ S.T
    med = float(np.median(d2[np.triu_indices(len(S), 1)]))
    return 1.0 / max(med, 1e-12)


@dataclass
class TwoViewData:
    X: np.ndarray          # (n, dx)
    Y: np.ndarray          # (n, dy)
    Z: np.ndarray          # (n, q) latent
    gamma_x: float
    gamma_y: float

    def kx(self, A, B) -> np.ndarray:
        return rbf_kernel(A, B, self.gamma_x)

    def ky(self, A, B) -> np.ndarray:
        return rbf_kernel(A, B, self.gamma_y)


def make_two_view(n: int, *, q: int = 3, dx: int = 20, dy: int = 15, noise: float = 0.3,
                  seed: int = 0, n_gamma: int | None = None) -> TwoViewData:
    """``n`` paired items; kernel bandwidths from the first ``n_gamma`` (default all) items."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, q))
    A = rng.standard_normal((q, dx)) / np.sqrt(q)
    B = rng.standard_normal((q, dy)) / np.sqrt(q)
    X = np.tanh(Z @ A) + noise * rng.standard_normal((n, dx))
    Y = (Z @ B) ** 3 / 3.0 + noise * rng.standard_normal((n, dy))
    m = n if n_gamma is None else n_gamma
    return TwoViewData(X=X, Y=Y, Z=Z, gamma_x=median_gamma(X[:m], seed=seed),
                       gamma_y=median_gamma(Y[:m], seed=seed + 1))


def toy_pool(n: int, split: str = "dev"):
    """A Hodosh-protocol :class:`~corpora.base.RankingPool` for ``n`` paired synthetic items (item ``i``'s
    caption is caption ``i``; only originals are relevant)."""
    ids = tuple(f"im{i}" for i in range(n))
    cids = tuple(f"im{i}#0" for i in range(n))
    caps = tuple(Caption(id=c, image_id=i, index=0, text=f"item {i}") for i, c in zip(ids, cids))
    return RankingPool(split=split, image_ids=ids, caption_ids=cids, captions=caps,
                       gold_caption=np.arange(n), gold_image=np.arange(n),
                       relevance=np.eye(n, dtype=bool))
