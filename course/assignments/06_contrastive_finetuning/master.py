# %% [markdown]
# # Assignment 6 — Contrastive fine-tuning with positive augmentation (PAC-S)
#
# PAC-S (Sarto et al. 2023) fine-tunes CLIP with its symmetric contrastive loss (Eq. 2) on image–caption
# pairs **plus generated positives**: a generated image V′ for each caption and a generated caption
# T′ for each image (Eq. 3):
#
#     L = L(V, T) + λ_v · L(V′, T) + λ_t · L(V, T′),   λ_v = 0.05, λ_t = 0.1,
#
# where L(A, B) is the **sum** of the two cross-entropies of the logits z_ij = e^s · a_i · b_j
# (rows A → B and columns B → A, each averaged over the batch; the matching pair is the target).
#
# The teaching world's generator provides the positives: the same scene re-rendered with another layout
# (V′) and a paraphrase with the same facts (T′). You implement the loss, then fine-tune two small
# adapters on top of the frozen teaching CLIP with it and check on held-out pairs that it helped.

# %% tags=["seed"]
SEED = 2026

# %% tags=["setup"]
import sys, pathlib, corpora
sys.path.insert(0, str(pathlib.Path(corpora.__file__).resolve().parents[1]))   # the repository root (course/)
import numpy as np
import torch
import torch.nn.functional as F
import otter
from course import worlds
from evaluation import evaluate

grader = otter.Notebook(tests_dir="tests")
batches = worlds.contrastive_batches(SEED, "train", n=128)      # v, t, v_gen, t_gen: (128, D) each
heldout = worlds.heldout_pairs(SEED)                             # v, t of the test pool: (50, D)
print({k: v.shape for k, v in batches.items()})

# %% [markdown]
# ## Question 1 — the symmetric InfoNCE loss (PAC-S Eq. 2)
#
# `info_nce(a, b, logit_scale)`: `a`, `b` are `(B, D)` L2-normalised torch tensors (row `i` of each is a
# matching pair), `logit_scale` a scalar tensor s. Return the scalar L(A, B) (use
# `F.cross_entropy`).

# %% tags=["q1"]
def info_nce(a, b, logit_scale):
    # BEGIN SOLUTION
    logits = logit_scale.exp() * a @ b.T
    target = torch.arange(a.shape[0])
    return F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)
    # END SOLUTION


# %%
grader.check("q1")

# %% [markdown]
# ## Question 2 — the PAC-S loss (Eq. 3)

# %% tags=["q2"]
LAMBDA_V, LAMBDA_T = 0.05, 0.1


def pacs_loss(v, t, v_gen, t_gen, logit_scale):
    # BEGIN SOLUTION
    return (info_nce(v, t, logit_scale) + LAMBDA_V * info_nce(v_gen, t, logit_scale)
            + LAMBDA_T * info_nce(v, t_gen, logit_scale))
    # END SOLUTION


# %%
grader.check("q2")

# %% [markdown]
# ## Question 3 — fine-tune, and check what it did
#
# `worlds.finetune_adapters` trains a linear adapter on each side (initialised to the identity) and the
# temperature with your loss (60 Adam steps on your 128 training pairs). Measure CLIP's contrastive loss
# on the training pairs (at the initial temperature 1/0.07) and the held-out R@1 (annotation on your
# test pool, with `evaluate`) before and after. A correct loss lowers the training loss a lot and keeps
# the held-out R@1 where it was. Then: the teaching CLIP was pretrained on 400,000 pairs of this very
# world — why can 128 pairs not improve it on held-out data, and what would PAC-S's generated positives
# add on a real corpus? Why are λ_v and λ_t small?

# %% tags=["q3"]
embed_images, embed_texts, learnt_scale = worlds.finetune_adapters(batches, pacs_loss)
SCALE = float(np.log(1 / 0.07))
gold = np.arange(len(heldout["v"]))
my_result = {
    "train_before": worlds.contrastive_loss(batches["v"], batches["t"], SCALE),  # SOLUTION
    "train_after": worlds.contrastive_loss(embed_images(batches["v"]), embed_texts(batches["t"]), SCALE),  # SOLUTION
    "heldout_R@1_before": evaluate(heldout["v"] @ heldout["t"].T, gold).metrics["R@1"],  # SOLUTION
    "heldout_R@1_after": evaluate(embed_images(heldout["v"]) @ embed_texts(heldout["t"]).T, gold).metrics["R@1"],  # SOLUTION
}
my_result

# %%
grader.check("q3")

# %% [markdown]
# *Your answer (not auto-graded):* …
