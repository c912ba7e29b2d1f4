"""The main job's human-correlation stage: Kendall τ-b / τ-c and Spearman ρ (×100) of every pair scorer
(n-gram caption metrics, neural scorers, the KCCA affinity) with the Flickr8k-Expert and Flickr8k-CF
judgments, each scorer's scores cached under its ``identity``."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from corpora.base import Corpus
from corpora.cache import DiskCache
from corpora.scoring import PairScorer
from evaluation.caption_metrics import bleu, cider_d, rouge_l
from evaluation.correlation import (
    flickr8k_cf_rows,
    flickr8k_expert_rows,
    human_correlation,
    score_rows,
    text_metric,
)
from experiments.errors import PipelineError

NGRAM_METRICS = ("BLEU-1", "BLEU-4", "ROUGE-L", "CIDEr-D")
#: Fewest judgment rows a correlation is computed on (a scorer that sees fewer gets only its row count).
MIN_JUDGED_ROWS = 3


def cached_row_scores(cache: DiskCache | None, corpus: Corpus, name: str, fn: PairScorer, tag: str, rows,
                       image_based: bool = False):
    """Per-row scores of one scorer on one protocol, cached under the scorer's identity
    (``fn.identity``, :class:`~corpora.scoring.PairScorer`) + the rows, their candidates and references included
    (:meth:`~evaluation.correlation.JudgmentRows.items_digest`) (+ the signatures of the rows' image files
    for an image-based scorer); scorers without an identity are recomputed.

    Returns
    -------
    numpy.ndarray
        One score per row.
    """
    ident = fn.identity
    if cache is None or ident is None:
        return score_rows(rows, fn)
    key = {"what": "human_rows", "scorer": name, "identity": ident, "corpus": corpus.fingerprint,
           "protocol": tag, "rows": rows.items_digest(), "n": len(rows),
           "images": corpus.images_fingerprint(dict.fromkeys(rows.image_ids)) if image_based else None}
    return cache.get_or_compute("human_scores", key, lambda: {"s": score_rows(rows, fn)})["s"]


def human_correlation_table(corpus: Corpus, scorers: Mapping[str, PairScorer],
                            image_based: set[str] | frozenset = frozenset(),
                            cache: DiskCache | None = None, keep: dict | None = None) -> dict:
    """Flickr8k-Expert and Flickr8k-CF correlations (×100) for every pair scorer.

    ``scorers`` maps a name to ``score_fn(image_ids, candidates, references) -> scores``.  Scorers named in
    ``image_based`` only see the rows whose image is on disk; ``n_expert`` / ``n_cf`` report the rows used.
    With ``keep`` (a dict) the per-row scores are kept for paired tests: ``keep[tag] = {"rows": rows,
    "scores": {name: array}}`` (``tag`` ``"expert"`` / ``"cf"``; one score per protocol row, NaN on the rows
    a scorer did not see).
    """
    if not corpus.expert and not corpus.crowd:
        return {}
    protocols = judgment_protocols(corpus)
    on_disk = {tag: images_on_disk(corpus, rows) for tag, rows in protocols}
    restricted = {tag: restrict_rows(rows, on_disk[tag]) for tag, rows in protocols}
    out: dict[str, dict] = {}
    if keep is not None:
        keep.update({tag: {"rows": rows, "scores": {}} for tag, rows in protocols})
    for name, fn in scorers.items():
        row: dict = {}
        for tag, rows in protocols:
            use = restricted[tag] if name in image_based else rows
            if len(use) < MIN_JUDGED_ROWS:
                row[f"n_{tag}"] = len(use)
                continue
            scores = cached_row_scores(cache, corpus, name, fn, tag, use, image_based=name in image_based)
            if keep is not None:
                full = np.full(len(rows), np.nan)
                full[on_disk[tag] if use is not rows else slice(None)] = scores
                keep[tag]["scores"][name] = full
            hc = human_correlation(use, scores)
            # 4 decimals: the report rounds once, to 1 (2-decimal values rounded again would go both ways)
            row[f"{tag}_tau_b"] = round(100 * hc["tau_b"], 4)
            row[f"{tag}_tau_c"] = round(100 * hc["tau_c"], 4)
            row[f"{tag}_rho"] = round(100 * hc["spearman"], 4)
            row[f"n_{tag}"] = int(hc["n"])
        out[name] = row
    return out


def judgment_protocols(corpus: Corpus, *, skip_bad_cf: bool = False) -> list[tuple[str, object]]:
    """``[(tag, rows)]``: the corpus' Flickr8k-Expert (``"expert"``) and Flickr8k-CF (``"cf"``) judgment rows
    (:func:`evaluation.correlation.flickr8k_expert_rows` / ``flickr8k_cf_rows``), those it has.

    A CF file the protocol cannot use (e.g. an image whose every caption is judged for it: no references
    left) is a :class:`PipelineError`, or with ``skip_bad_cf`` left out (the stage that raises it reports it).
    """
    protocols = []
    if getattr(corpus, "expert", None):
        protocols.append(("expert", flickr8k_expert_rows(corpus)))
    if getattr(corpus, "crowd", None):
        try:
            protocols.append(("cf", flickr8k_cf_rows(corpus)))
        except ValueError as exc:
            if not skip_bad_cf:
                raise PipelineError(f"human correlation, Flickr8k-CF protocol: {exc}") from exc
    return protocols


def images_on_disk(corpus: Corpus, rows) -> np.ndarray:
    """Per judgment row, whether its image is on disk (an image-based scorer sees only those rows)."""
    return np.array([corpus.has_image(i) for i in rows.image_ids], dtype=bool)


def restrict_rows(rows, keep: Sequence[bool]):
    """The judgment rows whose ``keep`` flag is true (``pair_index`` renumbered)."""

    keep = np.asarray(keep, dtype=bool)
    if keep.all():
        return rows
    idx = np.flatnonzero(keep)
    _, new_pair = np.unique(rows.pair_index[idx], return_inverse=True)
    return dataclasses.replace(
        rows, image_ids=[rows.image_ids[i] for i in idx], candidate_ids=[rows.candidate_ids[i] for i in idx],
        candidates=[rows.candidates[i] for i in idx], references=[rows.references[i] for i in idx],
        human=rows.human[idx], pair_index=new_pair.astype(np.int64),
        notes=list(rows.notes) + [f"restricted to {len(idx)} of {len(keep)} rows whose image is on disk"])


class _BleuOrders:
    """``bleu(candidates, references, n)`` remembered for the last few inputs, so BLEU-1 and BLEU-4 of the
    same rows count their n-grams once: column ``m − 1`` depends on the orders ``≤ m`` only, so BLEU-1 taken
    from the 4-order computation is the same number as from a 1-order one."""

    def __init__(self, n: int, keep: int = 4):
        self.n, self.keep = n, keep
        self.memo: dict = {}

    def __call__(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        key = (tuple(candidates), tuple(tuple(r) for r in references))
        if key not in self.memo:
            if len(self.memo) >= self.keep:
                self.memo.pop(next(iter(self.memo)))
            self.memo[key] = bleu(candidates, references, n=self.n)
        return self.memo[key]


def ngram_scorers(names: Sequence[str] = NGRAM_METRICS) -> dict[str, PairScorer]:
    """Reference-based n-gram caption metrics as pair scorers (no images needed).

    Parameters
    ----------
    names : sequence of str, optional
        Among :data:`NGRAM_METRICS` (default: all).

    Returns
    -------
    dict
        ``{name: score_fn(image_ids, candidates, references)}``, each with an ``identity``.
    """
    orders = _BleuOrders(4 if "BLEU-4" in names else 1)
    metrics = {
        # bleu(...) returns one column per order m (column m − 1 is BLEU-m).
        "BLEU-1": lambda c, r: orders(c, r)[:, 0],
        "BLEU-4": lambda c, r: orders(c, r)[:, 3],
        "ROUGE-L": rouge_l,
        "CIDEr-D": cider_d,
    }
    return {k: text_metric(metrics[k], identity={"metric": k, "implementation": "evaluation.caption_metrics"})
            for k in names}


def human_stage(corpus: Corpus, image_scorers: Mapping[str, PairScorer], cache: DiskCache | None,
                keep: dict | None = None) -> dict:
    """The human-correlation table of the n-gram caption metrics and the image-based pair scorers.

    Parameters
    ----------
    corpus : Corpus
        Its expert and crowd judgments (none: an empty table).
    image_scorers : mapping
        ``{name: score_fn(image_ids, candidates, references)}`` that look at images (the neural scorers,
        the KCCA affinity): they are correlated on the rows whose image is on disk.
    cache : DiskCache or None
        Where the scores are cached (under each scorer's ``identity``).
    keep : dict, optional
        Filled with the per-row scores (see :func:`human_correlation_table`).

    Returns
    -------
    dict
        What :func:`human_correlation_table` returns.
    """
    scorers = {**ngram_scorers(), **image_scorers}
    return human_correlation_table(corpus, scorers, image_based=set(image_scorers), cache=cache, keep=keep)
