# %% [markdown]
# # Assignment 1 — Ranking metrics
#
# Image annotation and image search are **ranking** tasks (Hodosh, Young & Hockenmaier 2013, Sec. 4.3):
# a system gives every (query, candidate) pair a score, and we look at where the *original* item of the
# query lands. In this assignment you implement the evaluator's metrics from a score matrix:
#
# * the rank of the gold item, with the **pessimistic tie policy** (an item tied with the gold item is
#   ranked above it), then **R@k** and the **median rank**;
# * **S@k** (at least one *relevant* item in the top k) and **R-precision** (precision at rank r, r =
#   the number of relevant items of the query), both with ties broken pessimistically.
#
# Your data is your own teaching world (the seed below). Do not change the seed: the grader rebuilds
# your world from it. Run `grader.check("q1")` etc. to run the public checks; the grader also runs
# hidden tests on other score matrices.

# %% tags=["seed"]
SEED = 2026

# %% tags=["setup"]
import sys, pathlib, corpora
sys.path.insert(0, str(pathlib.Path(corpora.__file__).resolve().parents[1]))   # the repository root (course/)
import numpy as np
import otter
from course import worlds

grader = otter.Notebook(tests_dir="tests")
corpus = worlds.world(SEED)
pool = worlds.pool(SEED, "test")
S = worlds.overlap_scores(SEED, "test")     # (images, captions): shared words, integer → many ties
print(f"{pool.n_images} test images × {pool.n_captions} pool captions; "
      f"{int(pool.relevance.sum())} relevant pairs")
print("first caption:", pool.captions[0].text)

# %% [markdown]
# ## Question 1 — the gold item's rank (pessimistic ties)
#
# `scores` is a `(Q, N)` matrix: row `q` scores the `N` candidates of query `q` (higher is better), and
# `gold[q]` is the column of query `q`'s original item. Return the 1-based rank of every gold item,
# counting **every other candidate with a score ≥ the gold score** as ranked above it:
#
#     rank_q = 1 + |{ j : s_qj > s_qg }| + |{ j ≠ g : s_qj = s_qg }|   (g = the gold column)
#
# A constant scorer must get rank N for every query. Then `recall_at_k(ranks, k)` (in %) and
# `median_rank(ranks)`.

# %% tags=["q1"]
def gold_rank(scores, gold):
    """1-based pessimistic rank of each query's gold item, int array (Q,)."""
    # BEGIN SOLUTION
    scores = np.asarray(scores, dtype=np.float64)
    g = scores[np.arange(len(gold)), gold][:, None]
    return (scores >= g).sum(axis=1).astype(np.int64)
    # END SOLUTION


def recall_at_k(ranks, k):
    """R@k in %: share of queries whose gold item is in the top k."""
    # BEGIN SOLUTION
    return 100.0 * float(np.mean(np.asarray(ranks) <= k))
    # END SOLUTION


def median_rank(ranks):
    # BEGIN SOLUTION
    return float(np.median(ranks))
    # END SOLUTION


# %%
grader.check("q1")

# %% [markdown]
# ## Question 2 — S@k
#
# `relevance` is a boolean `(Q, N)` matrix (`relevance[q, j]`: candidate `j` is a correct answer for
# query `q`; the gold item is always relevant). S@k is the percentage of queries with at least one
# relevant item in the top k. Ties: a relevant item tied with a non-relevant one comes **after** it.

# %% tags=["q2"]
def success_at_k(scores, relevance, k):
    """S@k in %."""
    # BEGIN SOLUTION
    scores = np.asarray(scores, dtype=np.float64)
    relevance = np.asarray(relevance, dtype=bool)
    best = np.where(relevance, scores, -np.inf).max(axis=1)[:, None]
    first = 1 + (scores > best).sum(axis=1) + ((scores == best) & ~relevance).sum(axis=1)
    return 100.0 * float(np.mean(first <= k))
    # END SOLUTION


# %%
grader.check("q2")

# %% [markdown]
# ## Question 3 — R-precision
#
# For query `q` with `r_q` relevant candidates, R-precision is the fraction of relevant items among the
# top `r_q` — with ties at the cut-off filled by **non-relevant items first**. Return the mean over
# queries, in %.

# %% tags=["q3"]
def r_precision(scores, relevance):
    """Mean R-precision in %."""
    # BEGIN SOLUTION
    scores = np.asarray(scores, dtype=np.float64)
    relevance = np.asarray(relevance, dtype=bool)
    out = []
    for s, rel in zip(scores, relevance):
        r = int(rel.sum())
        t = np.sort(s)[len(s) - r]                 # the r-th largest score
        above, at = s > t, s == t
        slots = r - int(above.sum())
        from_ties = min(max(slots - int((at & ~rel).sum()), 0), int((at & rel).sum()))
        out.append((int((above & rel).sum()) + from_ties) / r)
    return 100.0 * float(np.mean(out))
    # END SOLUTION


# %%
grader.check("q3")

# %% [markdown]
# ## Question 4 — your world
#
# `S` (computed above) scores your test pool: entry `(i, j)` counts the distinct words of caption `j`
# that also occur in the other captions of image `i`. Fill in the annotation results (rows = images,
# gold = `pool.gold_caption`) with your functions, then answer in the markdown cell: how many queries
# have their gold caption tied with another caption, and what would an *optimistic* tie policy do to
# R@1 here?

# %% tags=["q4"]
ranks = gold_rank(S, pool.gold_caption)
my_annotation = {
    "R@1": recall_at_k(ranks, 1),  # SOLUTION
    "R@10": recall_at_k(ranks, 10),  # SOLUTION
    "median_rank": median_rank(ranks),  # SOLUTION
}
my_annotation

# %%
grader.check("q4")

# %% [markdown]
# *Your answer (not auto-graded):* …
