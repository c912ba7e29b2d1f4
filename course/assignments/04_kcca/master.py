# %% [markdown]
# # Assignment 4 — Kernel CCA
#
# KCCA (Hodosh et al. 2013, Sec. 3.2.1, Eq. 3; Hardoon et al. 2004) finds directions α, β in
# the spans of the training images and captions whose projections are maximally correlated:
#
#     ρ = max over α, β of   αᵀ K_X K_Y β / √[ (αᵀ K_X² α + κ αᵀ K_X α) · (βᵀ K_Y² β + κ βᵀ K_Y β) ]
#
# on **centred** Gram matrices (κ ≥ 0 is the regulariser). As a generalised eigenproblem:
#
#     [ 0        K_X K_Y ] [α]       [ K_X² + κ K_X   0            ] [α]
#     [ K_Y K_X  0       ] [β]  = ρ  [ 0              K_Y² + κ K_Y ] [β]
#
# The right-hand matrix is singular (centring leaves the constant vector in the null space), so solve the
# equivalent problem you get by eliminating β (derive it!):
#
#     (K_X + κI)⁻¹ K_Y (K_Y + κI)⁻¹ K_X α = ρ² α,   then   β ∝ (K_Y + κI)⁻¹ K_X α.
#
# A new image is scored against a new caption by Eq. 4: the cosine of their projections onto the
# top n directions.
#
# The Gram matrices of your world are given: image = colour spatial-pyramid match (Assignment 2), squared;
# text = idf-weighted BoW cosine (Assignment 3).

# %% tags=["seed"]
SEED = 2026

# %% tags=["setup"]
import sys, pathlib, corpora
sys.path.insert(0, str(pathlib.Path(corpora.__file__).resolve().parents[1]))   # the repository root (course/)
import numpy as np
import otter
from course import worlds
from evaluation import evaluate

grader = otter.Notebook(tests_dir="tests")
G = worlds.kcca_grams(SEED)
print({k: v.shape for k, v in G.items()})

# %% [markdown]
# ## Question 1 — centring
#
# `center(K)` returns H K H with H = I − 11ᵀ / N (the kernel of the
# mean-centred feature vectors).

# %% tags=["q1"]
def center(K):
    # BEGIN SOLUTION
    K = np.asarray(K, dtype=np.float64)
    n = K.shape[0]
    H = np.eye(n) - np.full((n, n), 1.0 / n)
    return H @ K @ H
    # END SOLUTION


# %%
grader.check("q1")

# %% [markdown]
# ## Question 2 — regularised KCCA
#
# `kcca(Kx, Ky, reg, n_components)` centres both Gram matrices and returns `(rho, alpha, beta)`: the
# `n_components` largest canonical correlations in decreasing order, and the dual directions as columns
# `(N, n_components)`, each normalised so that αᵀ (K_X² + κ K_X) α = 1 (same for β).

# %% tags=["q2"]
def kcca(Kx, Ky, reg, n_components=20):
    # BEGIN SOLUTION
    Kx, Ky = center(Kx), center(Ky)
    N = Kx.shape[0]
    I = np.eye(N)
    M = np.linalg.solve(Kx + reg * I, Ky @ np.linalg.solve(Ky + reg * I, Kx))
    vals, vecs = np.linalg.eig(M)
    order = np.argsort(-vals.real)[:n_components]
    rho = np.sqrt(np.clip(vals.real[order], 0.0, None))
    alpha = vecs.real[:, order]
    beta = np.linalg.solve(Ky + reg * I, Kx @ alpha)
    def normalise(A, K):
        return A / np.sqrt(np.einsum("nk,nk->k", A, (K @ K + reg * K) @ A))
    return rho, normalise(alpha, Kx), normalise(beta, Ky)
    # END SOLUTION


# %%
grader.check("q2")

# %% [markdown]
# ## Question 3 — projection and Eq. 4
#
# New kernel rows (`(m, N)`, against the training items) must be centred with the **training**
# statistics: k̃ = k − (column means of the training Gram) − mean(k) + (grand mean of the training Gram),
# where mean(k) is the mean of the row k itself.
# `affinity(Kx_train, Ky_train, Kx_new, Ky_new, alpha, beta, n)` returns the `(m_x, m_y)` cosines
# between the projections onto the first `n` directions.

# %% tags=["q3"]
def project(K_train, K_new, A):
    # BEGIN SOLUTION
    K_train, K_new = np.asarray(K_train, dtype=np.float64), np.asarray(K_new, dtype=np.float64)
    cols = K_train.mean(axis=0)
    centred = K_new - cols[None, :] - K_new.mean(axis=1, keepdims=True) + K_train.mean()
    return centred @ A
    # END SOLUTION


def affinity(Kx_train, Ky_train, Kx_new, Ky_new, alpha, beta, n):
    # BEGIN SOLUTION
    P = project(Kx_train, Kx_new, alpha[:, :n])
    Q = project(Ky_train, Ky_new, beta[:, :n])
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    return P @ Q.T
    # END SOLUTION


# %%
grader.check("q3")

# %% [markdown]
# ## Question 4 — choosing κ on dev
#
# For each κ in `KAPPAS`, fit KCCA on the training Grams, score the dev pool (annotation: rows = dev
# images, gold = `G["gold_dev"]`) with `n = 20` directions, and keep the κ with the highest dev R@10
# (the smallest κ on a tie; use `evaluate(S, gold).metrics["R@10"]`). Then report the test R@10 of that
# κ. Why does κ → 0 fail, and what does κ trade off?

# %% tags=["q4"]
KAPPAS = (0.05, 0.5, 5.0)


def choose_kappa(G, kappas=KAPPAS, n=20):
    # BEGIN SOLUTION
    best, best_r10 = None, -1.0
    for reg in kappas:
        rho, alpha, beta = kcca(G["Kx_train"], G["Ky_train"], reg, n)
        S = affinity(G["Kx_train"], G["Ky_train"], G["Kx_dev"], G["Ky_dev"], alpha, beta, n)
        r10 = evaluate(S, G["gold_dev"]).metrics["R@10"]
        if r10 > best_r10:
            best, best_r10 = reg, r10
    return best
    # END SOLUTION


my_kappa = choose_kappa(G)
rho, alpha, beta = kcca(G["Kx_train"], G["Ky_train"], my_kappa, 20)
S_test = affinity(G["Kx_train"], G["Ky_train"], G["Kx_test"], G["Ky_test"], alpha, beta, 20)
my_test_r10 = evaluate(S_test, G["gold_test"]).metrics["R@10"]  # SOLUTION
print("kappa", my_kappa, "test R@10", my_test_r10)

# %%
grader.check("q4")

# %% [markdown]
# *Your answer (not auto-graded):* …
