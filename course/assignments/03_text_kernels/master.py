# %% [markdown]
# # Assignment 3 — Text kernels
#
# The text side of Hodosh et al. (2013, Sec. 3.4) compares captions. You implement two kernels:
#
# 1. **BoW with IDF** (Sec. 3.4.1): a word's weight is
#    λ_w = log(|D| / (|D(w)| + 1)), clipped at 0, where **the documents D are the training
#    images** — each image's five captions merged into one document — and D(w) the images whose captions
#    use w. A word never seen in training gets log |D|. The kernel is the cosine of idf-weighted
#    term-frequency vectors.
# 2. **TRI** (Eq. 15): a caption's features are all its subsequences u of 1 to 3 words, gaps allowed
#    ("dog … grass" is a feature of "a dog on the grass"); an occurrence of a length-l subsequence
#    weighs λ_m^l with λ_m = 0.5, so
#
#        K(s, s') = Σ_u m(s, u) · m(s', u) · λ_m^(2 l(u)),   normalised: K(s, s') / √(K(s, s) · K(s', s'))
#
#    where m(s, u) counts the occurrences of u in s.
#
# Captions are tokenised with `worlds.tokens` (lower-case words). Your captions come from your own
# teaching world (do not change the seed).

# %% tags=["seed"]
SEED = 2026

# %% tags=["setup"]
import sys, pathlib, corpora
sys.path.insert(0, str(pathlib.Path(corpora.__file__).resolve().parents[1]))   # the repository root (course/)
import itertools
import math
from collections import Counter
import numpy as np
import otter
from course import worlds

grader = otter.Notebook(tests_dir="tests")
corpus = worlds.world(SEED)
train_ids = list(corpus.split("train"))
train_docs = [[w for c in corpus.captions[i] for w in worlds.tokens(c.text)] for i in train_ids]
test_captions = [worlds.tokens(c.text) for c in worlds.pool(SEED, "test").captions]
print(len(train_docs), "training documents; first:", " ".join(train_docs[0][:16]), "…")

# %% [markdown]
# ## Question 1 — IDF over training images
#
# `idf(docs)` takes a list of documents (token lists) and returns `(weights, unseen)`: a dict from
# every word of the documents to λ_w, and the weight log |D| of unseen words.

# %% tags=["q1"]
def idf(docs):
    # BEGIN SOLUTION
    df = Counter(w for d in docs for w in set(d))
    n = len(docs)
    return {w: max(math.log(n / (c + 1)), 0.0) for w, c in df.items()}, max(math.log(n), 0.0)
    # END SOLUTION


# %%
grader.check("q1")

# %% [markdown]
# ## Question 2 — the BoW kernel
#
# `bow_kernel(A, B, weights, unseen)`: `A` and `B` are lists of token lists; return the `(len(A), len(B))`
# matrix of cosines between the vectors x_w = tf(w) · λ_w.

# %% tags=["q2"]
def bow_kernel(A, B, weights, unseen):
    # BEGIN SOLUTION
    def vec(doc):
        v = {w: c * weights.get(w, unseen) for w, c in Counter(doc).items()}
        norm = math.sqrt(sum(x * x for x in v.values()))
        return {w: x / norm for w, x in v.items()} if norm > 0 else {}
    VA, VB = [vec(d) for d in A], [vec(d) for d in B]
    return np.array([[sum(x * b.get(w, 0.0) for w, x in a.items()) for b in VB] for a in VA])
    # END SOLUTION


# %%
grader.check("q2")

# %% [markdown]
# ## Question 3 — the trigram (TRI) kernel
#
# `tri_features(tokens)` returns a `Counter` from subsequences (tuples of 1–3 words, in order, gaps
# allowed) to m(s, u) · λ_m^l(u); `tri_kernel(A, B)` the normalised kernel matrix.

# %% tags=["q3"]
LAMBDA_M = 0.5


def tri_features(tokens):
    # BEGIN SOLUTION
    f = Counter()
    for l in (1, 2, 3):
        for idx in itertools.combinations(range(len(tokens)), l):
            f[tuple(tokens[i] for i in idx)] += LAMBDA_M ** l
    return f
    # END SOLUTION


def tri_kernel(A, B):
    # BEGIN SOLUTION
    FA, FB = [tri_features(d) for d in A], [tri_features(d) for d in B]
    def dot(f, g):
        return sum(x * g.get(u, 0.0) for u, x in f.items())
    na, nb = [math.sqrt(dot(f, f)) or 1.0 for f in FA], [math.sqrt(dot(g, g)) or 1.0 for g in FB]
    return np.array([[dot(f, g) / (x * y) for g, y in zip(FB, nb)] for f, x in zip(FA, na)])
    # END SOLUTION


# %%
grader.check("q3")

# %% [markdown]
# ## Question 4 — your world
#
# With your functions: the BoW kernel (IDF over your training images) between your first 20 test
# captions and your first 40 training documents, and the TRI kernel among the first 20 test captions.
# Which caption pairs does TRI separate that BoW cannot? (Hint: "a green diamond above an orange
# square" vs "an orange diamond above a green square".)

# %% tags=["q4"]
weights, unseen = idf(train_docs)
my_bow = bow_kernel(test_captions[:20], train_docs[:40], weights, unseen)  # SOLUTION
my_tri = tri_kernel(test_captions[:20], test_captions[:20])  # SOLUTION

# %%
grader.check("q4")

# %% [markdown]
# *Your answer (not auto-graded):* …

# %% [markdown]
# ## Optional — the same on real Flickr8k text (not graded)
#
# Point `FLICKR8K` at a Flickr8k folder (the standard text bundle, e.g. `../shared/data/flickr8k`; no
# image is read) and run your `idf` on its training images. Which words get the lowest weights? How do
# they compare with your teaching world's?

# %%
FLICKR8K = None   # e.g. "../shared/data/flickr8k"
if FLICKR8K:
    real = worlds.flickr8k_text(FLICKR8K)
    real_docs = [[w for c in real.captions[i] for w in worlds.tokens(c.text)] for i in real.split("train")]
    real_weights, _ = idf(real_docs)
    print("lowest idf:", sorted(real_weights, key=real_weights.get)[:12])
