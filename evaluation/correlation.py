"""Correlation of caption scorers with human judgments.

A *scorer* is any callable

    ``score_fn(image_ids: list[str], candidates: list[str], references: list[list[str]]) -> ndarray``

returning one score per candidate (higher = better); n-gram metrics ignore ``image_ids``, reference-free
scorers (CLIP-S) ignore ``references``, and a KCCA affinity can look both up.  :func:`text_metric`
adapts a ``f(candidates, references)`` metric.

Protocols
---------
* **Flickr8k-Expert** (:func:`flickr8k_expert_rows`; as computed for CLIPScore, Hessel et al. 2021,
  and PAC-S, Sarto et al. 2023): each of the three expert scores of a judged (image, caption) pair is
  its own row; a pair whose candidate is one of the image's own reference captions is skipped;
  references = the image's five captions.  Primary statistic Kendall τ-c.
* **Flickr8k-CF** (:func:`flickr8k_cf_rows`): one row per judged pair, human score = fraction of
  "yes"; a candidate that is one of its image's captions is removed from that image's references.  By
  default (``references="image"``) it is removed for *every* row of the image, as in the
  ``crowdflower_flickr8k.json`` of CLIPScore (Hessel et al. 2021, App. A), on which CLIPScore, PAC-S and
  later metrics report their Flickr8k-CF numbers; ``references="row"`` removes it from its own row only.
  Primary statistic Kendall τ-b.
* **Pairwise preference** (Pascal-50S style, :func:`pairwise_accuracy`) and **hallucination
  detection** (FOIL style, :func:`foil_accuracy`) on simple records.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from corpora.scoring import FunctionScorer, ScoreFn

__all__ = [
    "ScoreFn", "JudgmentRows", "kendall_tau", "correlations", "flickr8k_expert_rows",
    "flickr8k_cf_rows", "score_rows", "human_correlation", "text_metric", "PairwiseRecord",
    "pairwise_accuracy", "FoilRecord", "foil_accuracy", "kappa_sweep", "CF_REFERENCE_RULES",
]

def _check_xy(x, y, name: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"{name}: x and y differ in length ({x.size} vs {y.size})")
    if x.size < 2:
        raise ValueError(f"{name}: need at least 2 observations, got {x.size}")
    for label, v in (("x", x), ("y", y)):
        if not np.isfinite(v).all():
            i = int(np.flatnonzero(~np.isfinite(v))[0])
            what = "NaN" if np.isnan(v[i]) else ("+inf" if v[i] > 0 else "-inf")
            raise ValueError(f"{name}: {label}[{i}] is {what} (scores must be finite)")
    return x, y


def kendall_tau(x, y, variant: str = "b") -> float:
    """Kendall's τ-b or τ-c (Stuart's τ-c) via :func:`scipy.stats.kendalltau`.

    τ-b = (P − Q) / sqrt((P + Q + T_x)(P + Q + T_y)); τ-c = 2 m (P − Q) / (n² (m − 1)), m = min(#distinct x,
    #distinct y).  ``P``/``Q``: concordant/discordant pairs, ``T``: pairs tied in one variable only.
    """
    if variant not in ("b", "c"):
        raise ValueError(f"kendall_tau: variant must be 'b' or 'c', got {variant!r}")
    x, y = _check_xy(x, y, "kendall_tau")
    return float(stats.kendalltau(x, y, variant=variant).statistic)


def correlations(x, y) -> dict[str, float]:
    """Kendall τ-b, τ-c, Spearman ρ and Pearson r between two score vectors (raw, not ×100)."""
    x, y = _check_xy(x, y, "correlations")
    return {
        "tau_b": float(stats.kendalltau(x, y, variant="b").statistic),
        "tau_c": float(stats.kendalltau(x, y, variant="c").statistic),
        "spearman": float(stats.spearmanr(x, y).statistic),
        "pearson": float(stats.pearsonr(x, y).statistic),
    }


@dataclass
class JudgmentRows:
    """Rows of a human-judgment protocol.

    Attributes
    ----------
    protocol : str
    image_ids, candidate_ids, candidates : list of str, length n_rows
    references : list of list of str, length n_rows
    human : ndarray of float, shape (n_rows,)
    pair_index : ndarray of int, shape (n_rows,)
        Row -> index of its distinct (image, candidate, references) item, so a scorer runs once per
        item (:func:`score_rows`).
    n_skipped_pairs : int
        Judged pairs dropped by the protocol.
    notes : list of str

    Rows are built once by a protocol function and not changed afterwards (:func:`restrict_rows`-style
    selections make new objects), so :meth:`items_digest` is computed once per object.
    """

    protocol: str
    image_ids: list[str]
    candidate_ids: list[str]
    candidates: list[str]
    references: list[list[str]]
    human: np.ndarray
    pair_index: np.ndarray
    n_skipped_pairs: int = 0
    notes: list[str] = field(default_factory=list)
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.candidates)

    @property
    def n_pairs(self) -> int:
        return int(self.pair_index.max()) + 1 if len(self.pair_index) else 0

    def unique_items(self) -> tuple[list[str], list[str], list[list[str]]]:
        """(image_ids, candidates, references) of the distinct items, in ``pair_index`` order."""
        first = np.full(self.n_pairs, -1, dtype=np.int64)
        for r in range(len(self.pair_index) - 1, -1, -1):
            first[self.pair_index[r]] = r
        return ([self.image_ids[r] for r in first], [self.candidates[r] for r in first],
                [self.references[r] for r in first])

    def items_digest(self) -> str:
        """SHA-256 of every row's (image id, candidate id, candidate, references), in row order: a cache
        key for per-row scores that changes whenever a protocol rule changes a row's references.
        Computed on the first call (47,830 CF rows: ≈ 40 ms), then remembered."""
        if self._digest is None:
            h = hashlib.sha256()
            for row in zip(self.image_ids, self.candidate_ids, self.candidates, self.references):
                h.update("\x1f".join([*row[:3], *row[3]]).encode("utf-8"))
                h.update(b"\x1e")
            self._digest = h.hexdigest()
        return self._digest


def _image_refs(corpus, image_id: str) -> tuple[list[str], list[str]]:
    caps = corpus.captions_of(image_id) if hasattr(corpus, "captions_of") else corpus.captions.get(image_id, ())
    return [c.id for c in caps], [c.text for c in caps]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _own_caption_index(text_norm: str, refs_norm: Sequence[str], taken: Sequence[bool] | None = None) -> int | None:
    """Which of an image's captions (their normalised texts ``refs_norm``) a judged candidate *is*: the
    first one not yet ``taken`` with the candidate's text (whitespace / case normalised; the candidate's
    own caption always matches itself), or ``None``.  One caption per judgment, as ``list.remove`` in
    CLIPScore's ``flickr8k_example/download.py``, so an image's second caption with the same text stays a
    reference."""
    for k, r in enumerate(refs_norm):
        if r == text_norm and not (taken is not None and taken[k]):
            return k
    return None


def flickr8k_expert_rows(corpus) -> JudgmentRows:
    """Flickr8k-Expert rows (see module docstring): one row per expert score.

    A judged pair is skipped when its candidate is one of the judged image's own captions (same id, or
    identical text after whitespace/case normalisation).  Needs ``corpus.expert``.
    """
    if not getattr(corpus, "expert", None):
        raise ValueError(f"corpus {getattr(corpus, 'name', '?')!r} has no expert judgments (corpus.expert)")
    rows = JudgmentRows("flickr8k-expert", [], [], [], [], np.zeros(0), np.zeros(0, dtype=np.int64))
    human, pidx = [], []
    skipped = 0
    n_pairs = 0
    for j in corpus.expert:
        _, refs = _image_refs(corpus, j.image_id)
        if not refs:
            raise ValueError(f"expert judgment for image {j.image_id!r}: the image has no captions in the corpus")
        cand = corpus.caption(j.caption_id).text
        if _own_caption_index(_norm(cand), [_norm(r) for r in refs]) is not None:
            skipped += 1
            continue
        for s in j.scores:
            rows.image_ids.append(j.image_id)
            rows.candidate_ids.append(j.caption_id)
            rows.candidates.append(cand)
            rows.references.append(refs)
            human.append(float(s))
            pidx.append(n_pairs)
        n_pairs += 1
    rows.human = np.asarray(human, dtype=np.float64)
    rows.pair_index = np.asarray(pidx, dtype=np.int64)
    rows.n_skipped_pairs = skipped
    rows.notes.append(f"{len(corpus.expert)} judged pairs, {skipped} skipped (candidate is one of the "
                      f"image's own captions), {n_pairs} kept × 3 expert scores = {len(human)} rows")
    return rows


#: How :func:`flickr8k_cf_rows` removes a judged own caption from the references.
CF_REFERENCE_RULES = ("image", "row")


def flickr8k_cf_rows(corpus, references: str = "image") -> JudgmentRows:
    """Flickr8k-CF rows: one row per judged pair, human score = fraction of "yes" (the file's third
    column, ``n_yes / (n_yes + n_no)``).  Needs ``corpus.crowd``.

    A judged candidate *is one of its image's captions* when one has its text (whitespace / case
    normalised, as for :func:`flickr8k_expert_rows`; a caption of the image itself always matches); that
    one caption — the first match not already removed, when two captions share the text — is removed
    from the references:

    ``references="image"`` (default)
        from the references of *every* row of that image.  This is the protocol of the published
        Flickr8k-CF correlations: CLIPScore's preprocessing (Hessel et al. 2021, App. A;
        ``flickr8k_example/download.py`` writing ``crowdflower_flickr8k.json``, also used by PAC-S,
        Sarto et al. 2023) keeps one reference list per image and removes (``list.remove``) each judged
        own caption from it.  The rows' references equal that file's on the real data, and the n-gram
        metrics reproduce CLIPScore's Table 1 to the decimal (BLEU-1 / BLEU-4 / ROUGE-L / CIDEr-D τ-b
        17.9 / 16.9 / 19.9 / 24.6; tested on the real files).  (The script matches exact text only; the
        normalised match finds the same 723 judgments there.)
    ``references="row"``
        from the references of the row that judges it only; every other row of the image keeps all its
        captions (τ-b 18.8 / 17.3 / 20.4 / 25.5 with the same metrics).

    Raises ``ValueError`` for another rule, a corpus without crowd judgments, or an image left without
    references.
    """
    if references not in CF_REFERENCE_RULES:
        raise ValueError(f"flickr8k_cf_rows: references must be one of {CF_REFERENCE_RULES}, got {references!r}")
    if not getattr(corpus, "crowd", None):
        raise ValueError(f"corpus {getattr(corpus, 'name', '?')!r} has no crowd judgments (corpus.crowd)")
    refs_of: dict[str, tuple[list[str], list[str], list[str], list[bool]]] = {}  # ids, texts, normalised, removed
    owns, cands = [], []
    for j in corpus.crowd:
        if j.image_id not in refs_of:
            ids, texts = _image_refs(corpus, j.image_id)
            refs_of[j.image_id] = (ids, texts, [_norm(t) for t in texts], [False] * len(ids))
        ids, texts, norms, removed = refs_of[j.image_id]
        cands.append(corpus.caption(j.caption_id).text)
        own = _own_caption_index(_norm(cands[-1]), norms, removed if references == "image" else None)
        owns.append(own)
        if own is not None:
            removed[own] = True
    rows = JudgmentRows("flickr8k-cf", [], [], [], [], np.zeros(0), np.zeros(0, dtype=np.int64))
    for j, own, cand in zip(corpus.crowd, owns, cands):
        ids, texts, _, removed = refs_of[j.image_id]
        drop = removed if references == "image" else [k == own for k in range(len(ids))]
        refs = [t for t, d in zip(texts, drop) if not d]
        if not refs:
            hint = ""
            if references == "image" and len(ids) > 1:
                hint = (" – every caption of the image is judged as a candidate; the per-row rule keeps the "
                        "others (references='row', --cf-references row of experiments.caption_metrics_vs_humans)")
            raise ValueError(f"crowd judgment for image {j.image_id!r} (candidate {j.caption_id!r}): no references "
                             f"left{hint}")
        rows.image_ids.append(j.image_id)
        rows.candidate_ids.append(j.caption_id)
        rows.candidates.append(cand)
        rows.references.append(refs)
    rows.human = np.asarray([float(j.fraction_yes) for j in corpus.crowd], dtype=np.float64)
    rows.pair_index = np.arange(len(rows.human), dtype=np.int64)
    n_own = sum(o is not None for o in owns)
    n_short = sum(len(r) < len(refs_of[i][0]) for i, r in zip(rows.image_ids, rows.references))
    rows.notes.append(f"{len(rows)} rows; {n_own} judge one of their image's own captions; references "
                      f"per {references}: {n_short} rows have fewer than all of their image's captions")
    return rows


def score_rows(rows: JudgmentRows, score_fn: ScoreFn) -> np.ndarray:
    """Run ``score_fn`` once per distinct item of ``rows`` and expand to one score per row."""
    ims, cands, refs = rows.unique_items()
    scores = np.asarray(score_fn(ims, cands, refs), dtype=np.float64).ravel()
    if scores.shape[0] != len(cands):
        raise ValueError(f"score_fn returned {scores.shape[0]} scores for {len(cands)} candidates")
    bad = ~np.isfinite(scores)
    if bad.any():
        raise ValueError(f"score_fn returned {int(bad.sum())} non-finite (NaN/inf) score(s) (first for "
                         f"candidate {int(np.flatnonzero(bad)[0])}: {cands[int(np.flatnonzero(bad)[0])]!r})")
    return scores[rows.pair_index]


def human_correlation(rows: JudgmentRows, score_fn_or_scores) -> dict:
    """τ-b, τ-c, Spearman, Pearson between a scorer and the human scores of ``rows``, plus ``n``.

    ``score_fn_or_scores``: a scorer (see module docstring) or precomputed per-row scores.
    """
    if callable(score_fn_or_scores):
        scores = score_rows(rows, score_fn_or_scores)
    else:
        scores = np.asarray(score_fn_or_scores, dtype=np.float64)
        if scores.shape != (len(rows),):
            raise ValueError(f"scores must have shape ({len(rows)},), got {scores.shape}")
    out = correlations(scores, rows.human)
    out["n"] = len(rows)
    return out


def text_metric(metric: Callable[[Sequence[str], Sequence[Sequence[str]]], np.ndarray],
                identity: dict | None = None) -> FunctionScorer:
    """Adapt a reference-based text metric ``metric(candidates, references)`` to a
    :class:`~corpora.scoring.PairScorer` (the images are ignored); ``identity`` as there."""

    def score_fn(image_ids, candidates, references):
        return metric(candidates, references)

    return FunctionScorer(score_fn, identity=identity, name=getattr(metric, "__name__", "text_metric"))


# ---------------------------------------------------------------------------------------------- pairwise
@dataclass(frozen=True)
class PairwiseRecord:
    """Two candidates for one image and which one humans preferred (0 = ``candidate_a``, 1 = ``b``)."""

    image_id: str
    candidate_a: str
    candidate_b: str
    references: tuple[str, ...]
    preferred: int
    category: str = ""


def _sample_refs(refs: Sequence[str], k: int | None, rng: np.random.Generator) -> list[str]:
    refs = list(refs)
    if k is None or k >= len(refs):
        return refs
    idx = rng.choice(len(refs), size=k, replace=False)
    return [refs[i] for i in sorted(idx)]


def _scorer_output(score_fn: ScoreFn, ims, cands, refs, name: str, what: str) -> np.ndarray:
    """``score_fn(ims, cands, refs)`` as a float vector, checked: one finite score per candidate."""
    scores = np.asarray(score_fn(ims, cands, refs), dtype=np.float64).ravel()
    if scores.shape[0] != len(cands):
        raise ValueError(f"{name}: score_fn returned {scores.shape[0]} score(s) for {len(cands)} {what} "
                         f"candidates (need one per record)")
    bad = ~np.isfinite(scores)
    if bad.any():
        raise ValueError(f"{name}: score_fn returned {int(bad.sum())} non-finite (NaN/inf) score(s) for the "
                         f"{what} candidates (first at record {int(np.flatnonzero(bad)[0])})")
    return scores


def _check_sampling(name: str, n_refs, n_draws) -> None:
    if n_refs is not None and (not isinstance(n_refs, (int, np.integer)) or n_refs < 1):
        raise ValueError(f"{name}: n_refs must be None (all references) or an integer ≥ 1, got {n_refs!r}")
    if not isinstance(n_draws, (int, np.integer)) or n_draws < 1:
        raise ValueError(f"{name}: n_draws must be an integer ≥ 1, got {n_draws!r}")


def pairwise_accuracy(records: Sequence[PairwiseRecord], score_fn: ScoreFn, *, n_refs: int | None = None,
                      n_draws: int = 1, seed: int = 0) -> dict:
    """Pascal-50S-style accuracy: share of pairs where the scorer prefers the human-preferred candidate.

    Both candidates of a pair are scored against the same references; with ``n_refs`` each draw samples
    ``n_refs`` of the record's references (seeded, without replacement) and the accuracy is averaged over
    ``n_draws`` draws.  A tie (equal scores) counts ½.

    Returns ``{"accuracy": %, "per_category": {category: %}, "n": int, "per_draw": [%...]}``.

    Raises ``ValueError`` when there are no records, a ``preferred`` is not 0 or 1, or ``score_fn`` does
    not return one finite score per record.
    """
    if not records:
        raise ValueError("pairwise_accuracy: no records")
    _check_sampling("pairwise_accuracy", n_refs, n_draws)
    for i, r in enumerate(records):
        if r.preferred not in (0, 1):
            raise ValueError(f"pairwise_accuracy: record {i} has preferred={r.preferred!r} (must be 0 or 1)")
    rng = np.random.default_rng(seed)
    n = len(records)
    correct_all = np.zeros((n_draws, n))
    for d in range(n_draws if n_refs is not None else 1):
        refs = [_sample_refs(r.references, n_refs, rng) for r in records]
        ims = [r.image_id for r in records]
        sa = _scorer_output(score_fn, ims, [r.candidate_a for r in records], refs, "pairwise_accuracy",
                            "candidate_a")
        sb = _scorer_output(score_fn, ims, [r.candidate_b for r in records], refs, "pairwise_accuracy",
                            "candidate_b")
        pref = np.array([r.preferred for r in records])
        win_a = np.where(sa > sb, 1.0, np.where(sa < sb, 0.0, 0.5))
        correct_all[d] = np.where(pref == 0, win_a, 1.0 - win_a)
    if n_refs is None:
        correct_all = correct_all[:1]
    cats = np.array([r.category for r in records])
    per_cat = {c: 100.0 * float(correct_all[:, cats == c].mean()) for c in sorted(set(cats.tolist()))}
    return {"accuracy": 100.0 * float(correct_all.mean()), "per_category": per_cat, "n": n,
            "per_draw": [100.0 * float(x) for x in correct_all.mean(axis=1)]}


@dataclass(frozen=True)
class FoilRecord:
    """A correct caption and its foil (one word replaced by a hallucinated object) for one image."""

    image_id: str
    correct: str
    foil: str
    references: tuple[str, ...] = ()


def foil_accuracy(records: Sequence[FoilRecord], score_fn: ScoreFn, *, n_refs: int | None = None,
                  seed: int = 0) -> dict:
    """FOIL-style hallucination accuracy: share of records with ``score(correct) > score(foil)`` (strict;
    a tie is a failure).  With ``n_refs`` the references are subsampled (seeded).  Returns
    ``{"accuracy": %, "n": int}``.  Raises ``ValueError`` when there are no records or ``score_fn`` does
    not return one finite score per record."""
    if not records:
        raise ValueError("foil_accuracy: no records")
    _check_sampling("foil_accuracy", n_refs, 1)
    rng = np.random.default_rng(seed)
    refs = [_sample_refs(r.references, n_refs, rng) for r in records]
    ims = [r.image_id for r in records]
    sc = _scorer_output(score_fn, ims, [r.correct for r in records], refs, "foil_accuracy", "correct")
    sf = _scorer_output(score_fn, ims, [r.foil for r in records], refs, "foil_accuracy", "foil")
    return {"accuracy": 100.0 * float(np.mean(sc > sf)), "n": len(records)}


# ---------------------------------------------------------------------------------------------- κ sweep
def kappa_sweep(metric_scores, human_scores, *, human_threshold: float,
                metric_thresholds: Sequence[float] | None = None) -> list[dict]:
    """Cohen's κ between ``metric ≥ θ`` and ``human ≥ human_threshold`` for several θ
    (Hodosh et al. 2013, Tables 8–10: agreement of binarised metrics with binarised expert scores).

    With ``metric_thresholds=None`` a single *rate-matched* θ is used: the metric quantile that labels the
    same share of rows positive as the human binarisation (exactly when the metric has no ties at θ;
    rows tied at θ are all positive, so ``metric_positive_rate`` reports the share actually reached).
    When every row is human-positive θ is the metric's minimum, when none is the next float above its
    maximum, so the rates match there too.
    Returns one dict per θ:
    ``{"threshold", "kappa", "metric_positive_rate", "human_positive_rate"}``.
    """
    from evaluation.caption_metrics import cohen_kappa

    m, h = _check_xy(metric_scores, human_scores, "kappa_sweep")
    hb = h >= human_threshold
    if metric_thresholds is None:
        rate = float(hb.mean())
        if rate == 1.0:
            metric_thresholds = [float(m.min())]
        elif rate == 0.0:
            metric_thresholds = [float(np.nextafter(m.max(), np.inf))]
        else:
            metric_thresholds = [float(np.quantile(m, 1.0 - rate))]
    out = []
    for th in metric_thresholds:
        mb = m >= th
        out.append({"threshold": float(th), "kappa": cohen_kappa(mb, hb),
                    "metric_positive_rate": float(mb.mean()), "human_positive_rate": float(hb.mean())})
    return out
