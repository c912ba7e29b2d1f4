# %% [markdown]
# # Assignment 5 — CLIPScore and human judgments
#
# CLIPScore (Hessel et al. 2021) rates a caption c of an image v without references:
#
#     CLIP-S(c, v) = w · max(cos(c, v), 0),   w = 2.5,
#
# where c is the embedding of "A photo depicts " + caption. RefCLIP-S adds the references R through a
# harmonic mean, RefCLIP-S = H-Mean(CLIP-S(c, v), max_{r ∈ R} cos(c, r))
# — with the reference term **as in the authors' code**: neither scaled by w nor clipped at 0.
#
# You compute both on the toolkit's **teaching CLIP** (shipped with the package, used zero-shot), then
# measure how well they agree with the simulated Flickr8k-Expert judgments of your world (grades 1–4),
# with **Kendall's τ-c**, against BLEU-4 and CIDEr-D.

# %% tags=["seed"]
SEED = 2026

# %% tags=["setup"]
import sys, pathlib, corpora
sys.path.insert(0, str(pathlib.Path(corpora.__file__).resolve().parents[1]))   # the repository root (course/)
import numpy as np
import otter
from course import worlds
from evaluation import bleu, cider_d

grader = otter.Notebook(tests_dir="tests")
image_ids, candidates, references, human = worlds.expert_items(SEED, limit=120)
V = worlds.image_embeddings(SEED, image_ids)                  # (120, D), L2-normalised
C = worlds.text_embeddings(candidates)                        # (120, D)
R = worlds.grouped_text_embeddings(references)                # per candidate: (n_refs, D)
print(len(candidates), "judged captions; e.g.", repr(candidates[0]), "graded", human[0])

# %% [markdown]
# ## Question 1 — CLIP-S
#
# `clip_s(V, C, w=2.5)`: rows of `V` and `C` are paired, L2-normalised embeddings; return the `(n,)`
# scores.

# %% tags=["q1"]
def clip_s(V, C, w=2.5):
    # BEGIN SOLUTION
    cos = np.einsum("nd,nd->n", np.asarray(V, dtype=np.float64), np.asarray(C, dtype=np.float64))
    return w * np.maximum(cos, 0.0)
    # END SOLUTION


# %%
grader.check("q1")

# %% [markdown]
# ## Question 2 — RefCLIP-S
#
# `ref_clip_s(V, C, R, w=2.5)`: `R[i]` holds the reference embeddings of candidate `i`. The harmonic mean
# of a, b is 2ab / (a + b) (0 when a + b = 0).

# %% tags=["q2"]
def ref_clip_s(V, C, R, w=2.5):
    # BEGIN SOLUTION
    a = clip_s(V, C, w)
    b = np.array([float(np.max(np.asarray(r) @ np.asarray(c))) for c, r in zip(C, R)])
    s = a + b
    return np.where(s != 0, 2 * a * b / np.where(s != 0, s, 1), 0.0)
    # END SOLUTION


# %%
grader.check("q2")

# %% [markdown]
# ## Question 3 — Kendall's τ-c
#
# For n pairs (x_i, y_i), let P / Q be the numbers of concordant / discordant pairs i < j
# (pairs tied in x or in y count as neither) and m = min(#distinct x, #distinct y).
# Stuart's τ-c is τ_c = 2m(P − Q) / (n² (m − 1)). Human grades tie a lot, which is why the
# CLIPScore paper reports τ-c on Flickr8k-Expert.

# %% tags=["q3"]
def kendall_tau_c(x, y):
    # BEGIN SOLUTION
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = len(x)
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    s = np.triu(dx * dy, 1).sum()
    m = min(len(np.unique(x)), len(np.unique(y)))
    return float(2 * m * s / (n ** 2 * (m - 1)))
    # END SOLUTION


# %%
grader.check("q3")

# %% [markdown]
# ## Question 4 — which metric agrees with the judges?
#
# Fill in τ-c (× 100) between each metric and the mean expert grade of your 120 judged captions. Which
# metric agrees best with the judges here, and does the reference-based score help? What do the simulated
# judges reward (docs/teaching_set.md), and why do n-gram metrics miss it?

# %% tags=["q4"]
bleu4 = bleu(candidates, references)[:, 3]
cider = cider_d(candidates, references)
my_taus = {
    "CLIP-S": 100 * kendall_tau_c(clip_s(V, C), human),  # SOLUTION
    "RefCLIP-S": 100 * kendall_tau_c(ref_clip_s(V, C, R), human),  # SOLUTION
    "BLEU-4": 100 * kendall_tau_c(bleu4, human),  # SOLUTION
    "CIDEr-D": 100 * kendall_tau_c(cider, human),  # SOLUTION
}
my_taus

# %%
grader.check("q4")

# %% [markdown]
# *Your answer (not auto-graded):* …

# %% [markdown]
# ## Optional — n-gram metrics against the real Flickr8k-Expert judgments (not graded)
#
# Point `FLICKR8K` at a Flickr8k folder (text only; no image is read) to compute τ-c of BLEU-4 and
# CIDEr-D against the real expert grades (the first 1,500 judged pairs, to keep your O(n²) τ-c fast).
# Compare with the CLIPScore paper's Table 1 and with your teaching world.

# %%
FLICKR8K = None   # e.g. "../shared/data/flickr8k"
if FLICKR8K:
    from evaluation import flickr8k_expert_rows
    rows = flickr8k_expert_rows(worlds.flickr8k_text(FLICKR8K))
    _, real_cands, real_refs = rows.unique_items()
    real_human = np.bincount(rows.pair_index, weights=rows.human) / np.bincount(rows.pair_index)
    n = 1500
    print("BLEU-4 τ-c:", 100 * kendall_tau_c(bleu(real_cands[:n], real_refs[:n])[:, 3], real_human[:n]))
    print("CIDEr-D τ-c:", 100 * kendall_tau_c(cider_d(real_cands[:n], real_refs[:n]), real_human[:n]))
