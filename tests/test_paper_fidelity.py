"""Paper-fidelity fixes (Hodosh et al. 2013): each test pins one equation where an earlier implementation
did something else (IDF documents, the NN search direction, the Lin vectors, the noun vocabulary,
the codebook source, the system grid)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from corpora.base import Caption, Corpus


def _corpus(captions: dict[str, list[str]], name="fidelity") -> Corpus:
    caps = {im: tuple(Caption(f"{im}#{k}", im, k, t, lemma=t) for k, t in enumerate(ts))
            for im, ts in captions.items()}
    ids = tuple(captions)
    return Corpus(name, ids, caps, {"train": ids})


# ------------------------------------------------------------------ IDF over training images (Eq. 16)
def _idf_corpus() -> Corpus:
    """10 images; "dog" is in all five captions of image 0 only (caption df 5, image df 1); "cat" in one
    caption of images 1 and 2 (df 2 either way)."""
    caps = {}
    for i in range(10):
        ts = [f"man walk {['red', 'blue', 'green', 'big', 'small'][k]}" for k in range(5)]
        if i == 0:
            ts = [t + " dog" for t in ts]
        if i in (1, 2):
            ts[0] += " cat"
        caps[f"im{i}.jpg"] = ts
    return _corpus(caps, "idf_images")


@pytest.mark.parametrize("name", ["TRI5^sqrtidf", "TRI5_D_ic^sqrtidf", "TRI5"])
def test_tri_idf_counts_training_images_not_captions(name):
    from kernels.text import TextKernel

    corpus = _idf_corpus()
    tk = TextKernel.from_name(name, show_progress=False).fit(corpus, corpus.split("train"))
    idf = dict(zip(tk.vocab.words, tk.idf_values))
    n_docs = 10                                         # images, not the 50 (or 10 single) captions
    assert idf["dog"] == pytest.approx(math.log(n_docs / 2))
    assert idf["cat"] == pytest.approx(math.log(n_docs / 3))
    assert tk.idf_unseen == pytest.approx(math.log(n_docs))
    if tk.idf == "sqrt":
        w = dict(zip(tk.vocab.words, tk.omega))
        assert w["dog"] == pytest.approx(math.sqrt(math.log(5.0)))
