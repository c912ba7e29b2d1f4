"""One teaching world per student: the data every assignment, public check and hidden test builds from a seed.

The notebooks and the hidden tests call the same functions here, so the grader rebuilds exactly the
data a student worked on from the student's seed (and, for hidden tests, from seeds no student sees).
Everything uses the toolkit's public API only (``corpora.teaching``, ``corpora.protocol``,
``kernels.image``, ``kernels.text``, ``neural.teaching_clip``, ``neural.clipscore``); sizes are small so
that a notebook runs in well under a minute on a laptop CPU.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from corpora.protocol import hodosh_pool
from corpora.teaching import EVALUATION_SEEDS, make_teaching_set
from kernels.image import global_histogram, pyramid_histogram, pyramid_match_gram
from kernels.text.bow import idf_weights, row_normalise, tf_matrix
from kernels.text.tri import features_to_csr, sparse_gram, subsequence_features

#: Size of every student's world: the main job's ``--quick`` layout shrunk to 300 images
#: (train / dev / test = 200 / 50 / 50; one caption per dev and test image in the pools).
N_IMAGES, N_TRAIN, N_DEV = 300, 200, 50
#: Visual words of the colour quantiser (4 levels per RGB channel).
N_COLOUR_WORDS = 64
#: Seeds the hidden tests use besides the student's own (never handed out: the handout draws from
#: ``[1, 2^31)`` and skips these).
HIDDEN_SEEDS = (1_000_003, 2_000_029)

_WORD = re.compile(r"[a-z]+")


def check_seed(seed: int) -> int:
    """A student's world seed: an integer in the teaching set's evaluation range, never the default 0."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) not in EVALUATION_SEEDS \
            or int(seed) == 0:
        raise ValueError(f"seed {seed!r}: a world seed is an integer in [1, 2^31) (the evaluation range, "
                         f"never the default seed 0)")
    return int(seed)


@lru_cache(maxsize=4)
def world(seed: int):
    """The student's teaching set (``corpora.teaching.make_teaching_set``, 300 images)."""
    return make_teaching_set(n_images=N_IMAGES, n_train=N_TRAIN, n_dev=N_DEV, seed=check_seed(seed))


def pool(seed: int, split: str = "test"):
    """The Hodosh pool (one caption per image, exact relevance) of a split of the student's world (built
    afresh on every call: its arrays are writeable, and a notebook's edits must not reach the tests)."""
    return hodosh_pool(world(seed), split, seed=0)


def tokens(text: str) -> list[str]:
    """Lower-case alphabetic words of a caption (the assignments' tokeniser)."""
    return _WORD.findall(text.lower())


# ------------------------------------------------------------------------------ assignment 1
def overlap_scores(seed: int, split: str = "test") -> np.ndarray:
    """Integer affinity ``(n_images, n_captions)`` of a pool: how many distinct words of caption ``j``
    occur in the four *other* captions of image ``i`` (the pool caption itself left out).  Integer
    scores tie often, which is what the ranking-metrics assignment needs."""
    corpus, p = world(seed), pool(seed, split)
    in_pool = set(p.caption_ids)
    refs = [set(w for c in corpus.captions[i] if c.id not in in_pool for w in tokens(c.text)) for i in p.image_ids]
    caps = [set(tokens(c.text)) for c in p.captions]
    return np.array([[len(r & c) for c in caps] for r in refs], dtype=np.float32)


# ------------------------------------------------------------------------------ assignment 2
def colour_words(image: np.ndarray) -> np.ndarray:
    """Visual word of every pixel, ``(H, W)`` int: RGB quantised to 4 levels per channel,
    ``word = 16·(r // 64) + 4·(g // 64) + b // 64`` (64 words)."""
    q = np.asarray(image, dtype=np.int64) // 64
    return 16 * q[..., 0] + 4 * q[..., 1] + q[..., 2]


def colour_pyramids(seed: int, image_ids, levels: int = 3) -> np.ndarray:
    """Cell-normalised colour pyramid histograms ``(n, cells · 64)`` (``kernels.image.pyramid_histogram``)."""
    corpus = world(seed)
    out = []
    for i in image_ids:
        w = colour_words(corpus.load_image(i))
        out.append(pyramid_histogram(w.ravel(), w.shape, N_COLOUR_WORDS, levels))
    return np.stack(out)


def colour_histograms(seed: int, image_ids) -> np.ndarray:
    """Global colour histograms ``(n, 64)`` (``kernels.image.global_histogram``, Hodosh Eq. 5)."""
    corpus = world(seed)
    return np.stack([global_histogram(colour_words(corpus.load_image(i)).ravel(), N_COLOUR_WORDS)
                     for i in image_ids])


# ------------------------------------------------------------------------------ assignment 3
def image_documents(seed: int, split: str = "train") -> list[list[str]]:
    """One document per image of a split: its five captions' tokens merged (Hodosh Sec. 3.4.1)."""
    corpus = world(seed)
    return [[w for c in corpus.captions[i] for w in tokens(c.text)] for i in corpus.split(split)]


def reference_idf(docs: list[list[str]]) -> tuple[dict[str, float], float]:
    """IDF of every word of ``docs`` and the value for unseen words (``kernels.text.bow.idf_weights``)."""
    vocab = sorted({w for d in docs for w in d})
    index = {w: k for k, w in enumerate(vocab)}
    lam, unseen = idf_weights([[index[w] for w in d] for d in docs], len(vocab))
    return dict(zip(vocab, lam.tolist())), unseen


def reference_bow_gram(a_docs, b_docs, idf: dict[str, float], unseen: float) -> np.ndarray:
    """Cosine of idf-weighted term-frequency vectors (``kernels.text.bow``), ``(len(a), len(b))``."""
    vocab = sorted(set(idf) | {w for d in list(a_docs) + list(b_docs) for w in d})
    index = {w: k for k, w in enumerate(vocab)}
    weights = np.array([idf.get(w, unseen) for w in vocab])
    A = row_normalise(tf_matrix([[index[w] for w in d] for d in a_docs], len(vocab), weights))
    B = row_normalise(tf_matrix([[index[w] for w in d] for d in b_docs], len(vocab), weights))
    return np.asarray((A @ B.T).todense(), dtype=np.float64)


def reference_tri_gram(a_docs, b_docs, max_len: int = 3, lambda_m: float = 0.5) -> np.ndarray:
    """Normalised TRI kernel (Hodosh Eq. 15: gapped subsequences of length ≤ 3, λ_m = 0.5) between token
    lists (``kernels.text.tri``), ``(len(a), len(b))``."""
    vocab = sorted({w for d in list(a_docs) + list(b_docs) for w in d})
    index = {w: k for k, w in enumerate(vocab)}
    mats = []
    for docs in (a_docs, b_docs):
        ids = [[index[w] for w in d] for d in docs]
        mats.append(subsequence_features(ids, max_len=max_len, lambda_m=lambda_m))
    cols = np.unique(np.concatenate([m[1] for m in mats]))
    (XA, _, na), (XB, _, nb) = (features_to_csr(*m, n_rows=len(d), columns=cols)
                                for m, d in zip(mats, (a_docs, b_docs)))
    G = np.asarray(sparse_gram(XA, XB), dtype=np.float64)
    return G / np.outer(np.where(na > 0, na, 1), np.where(nb > 0, nb, 1))


def flickr8k_text(path):
    """Real Flickr8k, text only (captions, splits, expert and crowd judgments; no image is read):
    ``corpora.flickr8k.load_flickr8k(path, with_images=False)``.  For the assignments' optional cells."""
    from corpora.flickr8k import load_flickr8k   # only the optional real-data cells read Flickr8k
    return load_flickr8k(path, with_images=False)


# ------------------------------------------------------------------------------ assignment 4
def kcca_grams(seed: int) -> dict[str, np.ndarray]:
    """The KCCA assignment's Gram matrices of the student's world.

    Image: colour spatial-pyramid match (``kernels.image.pyramid_match_gram``) squared (Eq. 6 with one
    feature, p = 2).  Text: idf-weighted BoW cosine of one document per image (its five captions for
    training images, its pool caption for dev / test images).  Keys: ``Kx_train`` (N × N), ``Ky_train``,
    ``Kx_dev`` / ``Kx_test`` (images × training), ``Ky_dev`` / ``Ky_test`` (pool captions × training),
    and ``gold_dev`` / ``gold_test`` (annotation gold column of each pool image).
    """
    corpus = world(seed)
    train = list(corpus.split("train"))
    P = {"train": colour_pyramids(seed, train)}
    docs = {"train": image_documents(seed, "train")}
    idf, unseen = reference_idf(docs["train"])
    out = {"Kx_train": pyramid_match_gram(P["train"]) ** 2,
           "Ky_train": reference_bow_gram(docs["train"], docs["train"], idf, unseen)}
    for split in ("dev", "test"):
        p = pool(seed, split)
        out[f"Kx_{split}"] = pyramid_match_gram(colour_pyramids(seed, p.image_ids), P["train"]) ** 2
        out[f"Ky_{split}"] = reference_bow_gram([tokens(c.text) for c in p.captions], docs["train"], idf, unseen)
        out[f"gold_{split}"] = np.asarray(p.gold_caption)
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


# ------------------------------------------------------------------------------ assignments 5 and 6
@lru_cache(maxsize=1)
def teaching_clip():
    """The shipped teaching CLIP on the CPU (``neural.teaching_clip.load_teaching_clip``)."""
    from neural.teaching_clip import load_teaching_clip   # torch: only the CLIP assignments need it
    return load_teaching_clip(device="cpu", show_progress=False)


def clip_scorer(reference_based: bool = False):
    """``neural.clipscore.CLIPScore`` / ``RefCLIPScore`` on the teaching CLIP (w = 2.5, prompt
    "A photo depicts")."""
    from neural.clipscore import CLIPScore, RefCLIPScore   # torch, as above
    return (RefCLIPScore if reference_based else CLIPScore)(teaching_clip())


def image_embeddings(seed: int, image_ids) -> np.ndarray:
    """L2-normalised teaching-CLIP embeddings of images of the student's world, ``(n, D)`` (a fresh
    copy of a memoised result: the notebook and the tests encode each image once)."""
    return _image_embeddings(seed, tuple(image_ids)).copy()


@lru_cache(maxsize=16)
def _image_embeddings(seed: int, image_ids: tuple) -> np.ndarray:
    corpus = world(seed)
    return clip_scorer().image_embeddings([corpus.load_image(i) for i in image_ids]).astype(np.float64)


def text_embeddings(texts) -> np.ndarray:
    """L2-normalised teaching-CLIP embeddings of ``"A photo depicts " + text``, ``(n, D)``."""
    return clip_scorer().text_embeddings(list(texts)).astype(np.float64)


def grouped_text_embeddings(groups) -> list[np.ndarray]:
    """:func:`text_embeddings` of every group of texts (e.g. each candidate's references), encoded in
    one batch: a list of ``(len(group), D)`` arrays."""
    groups = [list(g) for g in groups]
    flat = text_embeddings([t for g in groups for t in g])
    bounds = np.cumsum([0] + [len(g) for g in groups])
    return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def expert_items(seed: int, limit: int = 120):
    """The first ``limit`` judged pairs of the simulated Flickr8k-Expert judgments of the student's world:
    ``(image_ids, candidates, references, mean expert grade)`` (``evaluation.flickr8k_expert_rows``)."""
    from evaluation.correlation import flickr8k_expert_rows
    rows = flickr8k_expert_rows(world(seed))
    ims, cands, refs = rows.unique_items()
    human = np.bincount(rows.pair_index, weights=rows.human) / np.bincount(rows.pair_index)
    return ims[:limit], cands[:limit], refs[:limit], human[:limit]


def contrastive_batches(seed: int, split: str = "train", n: int = 128) -> dict[str, np.ndarray]:
    """Teaching-CLIP embeddings for PAC-S-style fine-tuning: ``v`` (images), ``t`` (one caption each),
    ``v_gen`` (the same scene re-rendered with another layout, ``corpus.rerender``) and ``t_gen`` (a
    paraphrase with the same facts, ``corpus.paraphrase``) — the generated positives of Sarto et al.
    (2023), Sec. 3.2 — for the first ``n`` images of a split (fresh copies of a memoised result)."""
    return {k: v.copy() for k, v in _contrastive_batches(seed, split, n).items()}


@lru_cache(maxsize=4)
def _contrastive_batches(seed: int, split: str, n: int) -> dict[str, np.ndarray]:
    corpus = world(seed)
    ids = list(corpus.split(split))[:n]
    caps = [corpus.captions[i][0] for i in ids]
    scorer = clip_scorer()
    return {"v": scorer.image_embeddings([corpus.load_image(i) for i in ids]).astype(np.float32),
            "t": scorer.text_embeddings([c.text for c in caps]).astype(np.float32),
            "v_gen": scorer.image_embeddings([corpus.rerender(i, seed=1) for i in ids]).astype(np.float32),
            "t_gen": scorer.text_embeddings([corpus.paraphrase(c.id, seed=1).text for c in caps]).astype(np.float32)}


def heldout_pairs(seed: int) -> dict[str, np.ndarray]:
    """Teaching-CLIP embeddings of the test pool's images ``v`` and their pool captions ``t`` (paired rows)."""
    p = pool(seed, "test")
    return {"v": image_embeddings(seed, p.image_ids).astype(np.float32),
            "t": text_embeddings([c.text for c in p.captions]).astype(np.float32)}


def finetune_adapters(batches: dict[str, np.ndarray], loss_fn, *, steps: int = 60, lr: float = 1e-4,
                      seed: int = 0):
    """Fine-tune two linear adapters (image and text side, initialised to the identity) and the logit
    scale on top of the frozen teaching-CLIP embeddings with ``loss_fn(v, t, v_gen, t_gen, logit_scale)``
    (a PAC-S-style loss on L2-normalised adapted embeddings): full-batch Adam, ``steps`` steps.

    Returns ``(embed_images, embed_texts, logit_scale)``: functions mapping embeddings to adapted,
    normalised ones (no gradient), and the learnt log inverse temperature.
    """
    import torch   # only the fine-tuning assignment needs torch here

    torch.manual_seed(seed)
    D = batches["v"].shape[1]
    Wv, Wt = (torch.nn.Linear(D, D, bias=False) for _ in range(2))
    for W in (Wv, Wt):
        torch.nn.init.eye_(W.weight)
    logit_scale = torch.nn.Parameter(torch.tensor(float(np.log(1 / 0.07))))
    opt = torch.optim.Adam([*Wv.parameters(), *Wt.parameters(), logit_scale], lr=lr)
    data = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in batches.items()}
    norm = torch.nn.functional.normalize
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(norm(Wv(data["v"]), dim=-1), norm(Wt(data["t"]), dim=-1),
                       norm(Wv(data["v_gen"]), dim=-1), norm(Wt(data["t_gen"]), dim=-1), logit_scale)
        loss = loss[0] if isinstance(loss, tuple) else loss
        loss.backward()
        opt.step()

    def adapt(W):
        def f(x):
            with torch.no_grad():
                return norm(W(torch.as_tensor(np.asarray(x), dtype=torch.float32)), dim=-1).numpy()
        return f
    return adapt(Wv), adapt(Wt), float(logit_scale.detach())


def contrastive_loss(v: np.ndarray, t: np.ndarray, logit_scale: float) -> float:
    """CLIP's symmetric InfoNCE (the mean of both directions) of paired embeddings, through
    ``neural.losses.info_nce``."""
    import torch   # as above
    from neural.losses import info_nce
    return float(info_nce(torch.as_tensor(v), torch.as_tensor(t), logit_scale=torch.tensor(float(logit_scale))))
