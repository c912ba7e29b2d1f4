"""The KCCA affinity of a trained system as a caption metric (Hodosh et al. 2013, Eq. 4).

:class:`KCCACaptionMetric` implements the :class:`~corpora.scoring.PairScorer` contract:
``metric(image_ids, candidates, references) -> scores`` with an explicit :attr:`~KCCACaptionMetric.identity`
(the JSON description under which its scores may be cached).  :func:`pair_scorer` builds one.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from corpora.base import Caption
from corpora.jsondata import jsonable
from kcca.kernel_store import KernelStore
from kcca.selection import CRITERIA
from kcca.systems import SystemRun, get_system
from kernels.image.gram import combine_kernels
from kernels.threads import one_blas_thread

__all__ = ["KCCACaptionMetric", "pair_scorer", "query_caption"]

#: Gathered projection rows per chunk of a call (≤ 32 MB of float64).
_GATHER_ELEMENTS = 1 << 22


def query_caption(text: str, lookup: Mapping[str, Caption]) -> Caption:
    """A :class:`corpora.base.Caption` for a candidate text: the corpus caption with the same text
    (exact, else whitespace/case-normalised) so its corpus lemma / POS are reused, else a fresh caption
    with ``lemma=None`` (the text kernel's preprocessor then tags and lemmatises it with NLTK)."""
    hit = lookup.get(text)
    if hit is None:
        hit = lookup.get(" ".join(text.lower().split()))
    if hit is not None:
        return hit
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]
    return Caption(id=f"query:{digest}", image_id="", index=0, text=text, lemma=None, pos=None)


class KCCACaptionMetric:
    """The KCCA affinity of a trained system as a caption metric (Hodosh et al. 2013, Eq. 4).

    .. math::

        f_{KCCA}(i, s) = \\cos\\big(\\alpha_{1..n}^\\top K_I(i),\\; \\beta_{1..n}^\\top K_S(s)\\big)

    where ``K_I(i)`` is the combined image kernel (Eq. 6, the system's chosen power ``p``) of image ``i``
    against the training images and ``K_S(s)`` the text kernel of caption ``s`` against the training
    items (the chosen diagonal factor ``d`` only scales the *training* Gram, so it lives in the fitted
    model, not in the query rows).  Kernel centring uses the training statistics (as in retrieval).

    Which model: Borda ensembles (Sec. 4.1.3) fuse *rankings* of a pool and give no per-pair score, so
    the metric uses the **single best (n, κ) model chosen on dev for the annotation task** (ranking
    captions for an image, i.e. what a caption metric does) under ``criterion`` — the top model of
    :func:`kcca.selection.select_top` (ties: lower mean rank, smaller n, smaller κ).

    Parameters
    ----------
    run : SystemRun of a KCCA system from :func:`kcca.systems.run_system` (``run.models`` gives the
        fitted models, refitting one that was released or never fitted)
    corpus : the corpus the system was trained on (candidate texts are looked up in its captions)
    store : the :class:`~kcca.kernel_store.KernelStore` that was passed to ``run_system``
    criterion : ``"R@1"``, ``"R@5"`` or ``"R@10"`` (dev criterion picking the single model)

    Calling it, ``metric(image_ids, candidates, references=None)`` returns float32 scores in
    ``[-1, 1]``, one per pair; ``references`` are ignored.  Image ids are corpus image ids (words
    extracted on demand through the system's :class:`~kernels.image.ImageKernel`, disk-cached);
    candidates are caption texts: a text equal to a corpus caption reuses that caption's lemma/POS, any
    other text is lemmatised with NLTK (:func:`query_caption`).  Kernel rows are computed once per
    distinct image / text and kept in the store's entries (metrics of other systems over the same
    kernels reuse them); each call projects the distinct items once and takes the per-pair cosine.  The
    model itself is fitted (or taken from ``run.models``) on the first call: a caller whose scores are
    cached under :attr:`identity` never needs it.

    Attributes
    ----------
    name : ``"KCCA[<system>]"``
    model : dict describing the model used (system, task, criterion, κ, n, dev value, p, d, kernels)

    Raises
    ------
    ValueError
        for NN systems (no KCCA affinity), an unknown ``criterion``, a run without models, or a store
        that does not hold this system's kernels.
    """

    def __init__(self, run: SystemRun, corpus, *, store: KernelStore, criterion: str = "R@1"):
        cfg = get_system(run.name)
        if cfg.model != "kcca":
            raise ValueError(f"pair_scorer: system {run.name!r} is a nearest-neighbour baseline (model "
                             f"{cfg.model!r}); it has no KCCA affinity f(i, s) to score pairs with")
        if criterion not in CRITERIA:
            raise ValueError(f"pair_scorer: criterion must be one of {CRITERIA}, got {criterion!r}")
        if run.selection is None or not run.models:
            raise ValueError(f"pair_scorer: SystemRun {run.name!r} keeps no fitted KCCA models (run.models); "
                             "re-run it with kcca.systems.run_system")
        if not store.has_image(cfg.image_kind):
            raise ValueError(f"pair_scorer: the kernel store has no {cfg.image_kind!r} image kernel; pass the "
                             f"store given to run_system for {run.name!r}")
        if not store.has_text(cfg.text):
            raise ValueError(f"pair_scorer: the kernel store has no {cfg.text!r} text kernel; pass the store "
                             f"given to run_system for {run.name!r}")
        self._image, self._text = store.image_entry(cfg.image_kind), store.text_entry(cfg.text)
        if self._text.train_ids != self._image.train_ids:
            raise ValueError(f"pair_scorer: the image and text kernels of {run.name!r} in the store describe "
                             "different training sets")
        best = run.selection.table.best("annotation", criterion)
        self._run, self._corpus, self._cfg = run, corpus, cfg
        self.kappa, self.n = float(best["kappa"]), int(best["n"])
        self.power, self.diag = int(run.config["image_power"]), float(run.config["text_diag"])
        self.name = f"KCCA[{run.name}]"
        self.model = {"system": run.name, "task": "annotation", "criterion": criterion, "kappa": self.kappa,
                      "n": self.n, "dev_value": float(best["dev_value"]), "image_power": self.power,
                      "text_diag": self.diag, "image_kind": cfg.image_kind, "text_kernel": cfg.text}
        self._codebooks = self._image.codebook_digests()
        self._fitted = None
        self._image_rows: dict[str, np.ndarray] = {}     # at this metric's power p
        self._lookup: dict[str, Caption] = {}

    @property
    def identity(self) -> dict:
        """What the scores depend on, JSON-serialisable (cached human-judgment scores are keyed by it):
        ``{"kcca": model, "config": run config, "train": training image ids, "codebooks": visual-word
        codebook digests}``."""
        return {"kcca": jsonable(self.model), "config": jsonable(self._run.config),
                "train": list(self._corpus.split("train")), "codebooks": self._codebooks}

    # ------------------------------------------------------------------------------ steps
    def fitted_model(self):
        """The KCCA model of the chosen κ (fitted on first use)."""
        if self._fitted is None:
            m = self._run.models[self.kappa]
            if len(self._image.train_ids) != m.n_train_:
                raise ValueError(f"pair_scorer: the kernel store describes a training set of "
                                 f"{len(self._image.train_ids)} images, the {self._run.name!r} model was "
                                 f"trained on {m.n_train_}")
            self._fitted = m
        return self._fitted

    def _caption_lookup(self) -> Mapping[str, Caption]:
        if not self._lookup:
            for caps in self._corpus.captions.values():
                for c in caps:
                    self._lookup.setdefault(c.text, c)
                    self._lookup.setdefault(" ".join(c.text.lower().split()), c)
        return self._lookup

    def image_rows(self, image_ids: Sequence[str]) -> np.ndarray:
        """Combined image kernel rows (Eq. 6, power ``p``) of distinct ``image_ids``."""
        new = [i for i in image_ids if i not in self._image_rows]
        if new:
            K = combine_kernels(self._image.image_feature_rows(new), self.power)
            self._image_rows.update(zip(new, K))
        return np.stack([self._image_rows[i] for i in image_ids])

    def text_rows(self, texts: Sequence[str]) -> np.ndarray:
        """Text kernel rows of distinct candidate ``texts`` (kept in the store's text entry)."""
        rows = self._text.pair_rows
        new = [t for t in texts if t not in rows]
        if new:
            look = self._caption_lookup()
            K = self._text.kernel.gram_queries([query_caption(t, look) for t in new])
            rows.update(zip(new, K))
        return np.stack([rows[t] for t in texts])

    def __call__(self, image_ids: Sequence[str], candidates: Sequence[str],
                 references: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        # BLAS on one thread, as the systems' own runs (kcca.runner): the refitted model and the scores
        # do not depend on the machine's cores
        with one_blas_thread():
            return self._scores(image_ids, candidates)

    def _scores(self, image_ids: Sequence[str], candidates: Sequence[str]) -> np.ndarray:
        image_ids, candidates = [str(i) for i in image_ids], [str(c) for c in candidates]
        if len(image_ids) != len(candidates):
            raise ValueError(f"score_fn: {len(image_ids)} image ids but {len(candidates)} candidates")
        if not candidates:
            return np.zeros(0, dtype=np.float32)
        u_img = list(dict.fromkeys(image_ids))
        u_txt = list(dict.fromkeys(candidates))
        Kx, Ky = self.image_rows(u_img), self.text_rows(u_txt)
        model = self.fitted_model()
        P = model.transform_x(Kx, self.n).astype(np.float64)
        Q = model.transform_y(Ky, self.n).astype(np.float64)
        P /= np.maximum(np.linalg.norm(P, axis=1), 1e-30)[:, None]   # zero vectors → affinity 0
        Q /= np.maximum(np.linalg.norm(Q, axis=1), 1e-30)[:, None]
        pos_i = {x: k for k, x in enumerate(u_img)}
        pos_t = {x: k for k, x in enumerate(u_txt)}
        ii = np.array([pos_i[x] for x in image_ids], dtype=np.int64)
        jj = np.array([pos_t[x] for x in candidates], dtype=np.int64)
        out = np.empty(len(candidates), dtype=np.float32)
        step = max(1, _GATHER_ELEMENTS // max(P.shape[1], 1))
        for s in range(0, len(out), step):
            e = min(s + step, len(out))
            out[s:e] = np.einsum("ij,ij->i", P[ii[s:e]], Q[jj[s:e]])
        return out

    def __repr__(self) -> str:
        return f"KCCACaptionMetric({self._run.name!r}, kappa={self.kappa:g}, n={self.n})"


def pair_scorer(run: SystemRun, corpus, *, store: KernelStore, criterion: str = "R@1") -> KCCACaptionMetric:
    """:class:`KCCACaptionMetric` of a trained KCCA system (see there)."""
    return KCCACaptionMetric(run, corpus, store=store, criterion=criterion)
