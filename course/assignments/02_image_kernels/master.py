# %% [markdown]
# # Assignment 2 — Image kernels
#
# Hodosh et al. (2013, Sec. 3.3) compare images through **histograms of visual words**. Here the visual
# words are colours: every pixel's RGB value is quantised to 4 levels per channel,
#
#     word(r, g, b) = 16·⌊r / 64⌋ + 4·⌊g / 64⌋ + ⌊b / 64⌋   ∈ {0, …, 63}
#
# You implement
#
# 1. the normalised **colour histogram** H_i(v) (the fraction of the image's pixels with word v, Eq. 5);
# 2. the **histogram intersection** kernel K(i, j) = Σ_v min(H_i(v), H_j(v)) (Eq. 5);
# 3. the **spatial pyramid**: level l cuts the image into 2^l × 2^l cells, each with its own
#    normalised histogram;
# 4. the **pyramid match** kernel with the paper's level weights (Eqs. 7–8, Lazebnik et al. 2006).
#
# Your images come from your own teaching world (the seed below; do not change it).

# %% tags=["seed"]
SEED = 2026

# %% tags=["setup"]
# %matplotlib inline
import sys, pathlib, textwrap, corpora
sys.path.insert(0, str(pathlib.Path(corpora.__file__).resolve().parents[1]))   # the repository root (course/)
import numpy as np
import matplotlib.pyplot as plt
import otter
from course import worlds

grader = otter.Notebook(tests_dir="tests")
corpus = worlds.world(SEED)
train = list(corpus.split("train"))
images = [corpus.load_image(i) for i in train[:4]]
fig, axes = plt.subplots(1, 4, figsize=(12, 2.6))
for ax, img, i in zip(axes, images, train):
    ax.imshow(img)
    ax.set_axis_off()
    ax.set_title(textwrap.fill(corpus.captions[i][0].text, 34), fontsize=8)
plt.show()

# %% [markdown]
# ## Question 1 — colour histogram
#
# `colour_histogram(image)` takes an `(H, W, 3)` uint8 RGB image and returns a float array of shape
# `(64,)` that sums to 1: entry `v` is the fraction of pixels whose word is `v`.

# %% tags=["q1"]
N_WORDS = 64


def colour_words(image):
    """Visual word of every pixel, (H, W) int (given)."""
    q = np.asarray(image, dtype=np.int64) // 64
    return 16 * q[..., 0] + 4 * q[..., 1] + q[..., 2]


def colour_histogram(image):
    # BEGIN SOLUTION
    words = colour_words(image).ravel()
    return np.bincount(words, minlength=N_WORDS) / words.size
    # END SOLUTION


# %%
grader.check("q1")

# %% [markdown]
# ## Question 2 — histogram intersection
#
# `intersection_kernel(HX, HY)` takes histograms as rows, `(n, D)` and `(m, D)`, and returns the
# `(n, m)` matrix `K[i, j] = Σ_v min(HX[i, v], HY[j, v])`. Avoid a Python loop over `v`.

# %% tags=["q2"]
def intersection_kernel(HX, HY):
    # BEGIN SOLUTION
    HX, HY = np.asarray(HX, dtype=np.float64), np.asarray(HY, dtype=np.float64)
    return np.minimum(HX[:, None, :], HY[None, :, :]).sum(axis=2)
    # END SOLUTION


# %%
grader.check("q2")

# %% [markdown]
# ## Question 3 — spatial pyramid histogram
#
# `pyramid_histogram(image, levels=3)` returns the concatenation, level by level (l = 0, 1, …,
# `levels − 1`), of the normalised colour histograms of the 4^l cells of level l, cells in
# row-major order (top-left first). A pixel at row `y`, column `x` of an `H × W` image lies in cell
# `(y · 2^l // H, x · 2^l // W)` of level l. Length: (1 + 4 + 16) · 64 for 3 levels.

# %% tags=["q3"]
def pyramid_histogram(image, levels=3):
    # BEGIN SOLUTION
    words = colour_words(image)
    H, W = words.shape
    ys, xs = np.mgrid[0:H, 0:W]
    parts = []
    for l in range(levels):
        k = 2 ** l
        cell = (ys * k // H) * k + (xs * k // W)
        for c in range(k * k):
            w = words[cell == c]
            parts.append(np.bincount(w, minlength=N_WORDS) / w.size)
    return np.concatenate(parts)
    # END SOLUTION


# %%
grader.check("q3")

# %% [markdown]
# ## Question 4 — pyramid match kernel
#
# With I^l the intersection of the level-l histograms (each cell histogram divided by the number of
# cells 4^l, so that I^l ≤ 1), the pyramid match of L + 1 levels is (Hodosh Eqs. 7–8)
#
#     K^PY = I^L + Σ_{l < L} (I^l − I^{l+1}) / 2^(L − l)
#
# Work out the weight w_l of each I^l (for L = 2 they are 1/4, 1/4, 1/2) and implement
# `pyramid_match(PX, PY, levels=3)` on rows of pyramid histograms.

# %% tags=["q4"]
def pyramid_match(PX, PY, levels=3):
    # BEGIN SOLUTION
    PX, PY = np.asarray(PX, dtype=np.float64), np.asarray(PY, dtype=np.float64)
    L = levels - 1
    weights = [1 / 2 ** L] + [1 / 2 ** (L - l + 1) for l in range(1, L + 1)]
    K, start = 0.0, 0
    for l in range(levels):
        stop = start + 4 ** l * N_WORDS
        K = K + weights[l] * intersection_kernel(PX[:, start:stop] / 4 ** l, PY[:, start:stop] / 4 ** l)
        start = stop
    return K
    # END SOLUTION


# %%
grader.check("q4")

# %% [markdown]
# ## Question 5 — your world
#
# Compute the pyramid-match Gram matrix of your first 30 training images, and the global-histogram
# intersection Gram of the same images. Then look at the two images the pyramid finds most alike
# (off the diagonal) and explain in the markdown cell below why the pyramid and the global histogram
# disagree on some pairs.

# %% tags=["q5"]
first30 = [corpus.load_image(i) for i in train[:30]]
my_pyramid_gram = pyramid_match([pyramid_histogram(im) for im in first30], [pyramid_histogram(im) for im in first30])  # SOLUTION
my_histogram_gram = intersection_kernel([colour_histogram(im) for im in first30], [colour_histogram(im) for im in first30])  # SOLUTION

# %%
grader.check("q5")

# %% [markdown]
# *Your answer (not auto-graded):* …
