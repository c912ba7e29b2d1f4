"""When do √idf word weights help?  Caption word statistics and text-only retrieval, teaching set vs Flickr8k.

Usage::

    python benchmarks/idf_statistics.py                               # default teaching set (seed 0), ~30 s
    python benchmarks/idf_statistics.py --data ../shared/data/flickr8k  # the real Flickr8k captions, ~1 min
    python benchmarks/idf_statistics.py --seed 1 --json                 # one JSON object on stdout

IDF weighting (Hodosh et al. 2013, Sec. 3.4.1, and the √idf TRI kernel of Eq. 16) assumes that a rarer word
is better evidence that two texts are about the same thing.  This script measures that assumption on a
corpus's captions, with no images and no KCCA, in two ways.

**Word evidence.**  On the training captions, preprocessed as the text kernels do (stop words removed,
lemmas), for every word ``w`` seen at least ``--min-count`` times:

* ``df(w)``: the fraction of captions containing ``w``;
* the *consistency* ``c(w)``: among the captions containing ``w``, the fraction of the *other* captions of
  the same image that contain it too, pooled over captions
  (``Σ_s [w ∈ s] (n_w(image(s)) − 1) / Σ_s [w ∈ s] (n(image(s)) − 1)``, with ``n_w`` the image's captions
  containing ``w`` and ``n`` all its captions; add-½ smoothed);
* the *evidence* ``e(w) = log(c(w) / df(w))``: how much more likely another caption of the same image
  contains ``w`` than a random caption does (a log-likelihood ratio).

IDF is the right weight when ``e(w)`` grows like ``−log df(w)``, i.e. when the consistency does not fall
with rarity.  Printed: the token-weighted Pearson correlation of ``e`` with ``−log df``, and the token share
and mean consistency of words by ``df`` band (most of Flickr8k's tokens come from words in under 3 % of
the captions; most of the teaching set's from words in over 10 %).

**Text-only own-image retrieval.**  On the images of ``--split`` (teaching set: train; Flickr8k: dev and
test), caption 0 of every image is a query and the image's captions 1..4 form its item; each query ranks
all items by the text kernel (fitted on the items, so IDF comes from them).  Printed for BoW5 and for the
TRI kernel at maximum subsequence length 1, 2 and 3, each without and with √idf: R@1, R@10, mean
reciprocal rank and median rank of the query's own image, ranked by :func:`evaluation.ranking.evaluate`
(the toolkit's evaluator, pessimistic ties).  The difference
"√idf − none" per kernel is the text-side effect of the weights, apart from any image features.

JSON keys: ``corpus``, ``seed``, ``n_words``, ``evidence_idf_corr``, ``mean_consistency``, ``bands``
(list of ``{"df_lo", "df_hi", "n_words", "token_share", "consistency"}``), ``retrieval`` (kernel name ->
``{"R@1", "R@10", "MRR", "median_rank"}``), ``n_items``, ``wall_s``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: ``df`` bands of the word table (fractions of the training captions).
BANDS = ((0.1, 1.0), (0.03, 0.1), (0.01, 0.03), (0.003, 0.01), (0.0, 0.003))
#: Text kernels of the retrieval table: (label, TextKernel.from_name base, extra kwargs).
RETRIEVAL_KERNELS = (
    ("BoW5", "BoW5", {}), ("BoW5^sqrtidf", "BoW5^sqrtidf", {}),
    ("TRI5 (k<=1)", "TRI5", {"max_len": 1}), ("TRI5^sqrtidf (k<=1)", "TRI5^sqrtidf", {"max_len": 1}),
    ("TRI5 (k<=2)", "TRI5", {"max_len": 2}), ("TRI5^sqrtidf (k<=2)", "TRI5^sqrtidf", {"max_len": 2}),
    ("TRI5", "TRI5", {}), ("TRI5^sqrtidf", "TRI5^sqrtidf", {}),
)


def word_statistics(docs, item_of, min_count: int = 5) -> dict:
    """Word evidence of the module docstring.

    Parameters
    ----------
    docs : sequence of int arrays
        Word ids of every caption (any vocabulary of size ``max id + 1``).
    item_of : int array
        The image (item) index of every caption.
    min_count : int
        Words in fewer captions are left out of the correlation and the bands.

    Returns
    -------
    dict with ``df``, ``consistency``, ``evidence`` (per word id, NaN where not computed), ``n_captions``
    (per word: captions containing it), ``corr`` (token-weighted Pearson correlation of evidence with
    ``−log df`` over the kept words), ``mean_consistency`` (token-weighted) and ``bands``.
    """
    item_of = np.asarray(item_of, np.int64)
    n = len(docs)
    if n != len(item_of):
        raise ValueError(f"word_statistics: {n} documents but {len(item_of)} item indices")
    V = 1 + max((int(d.max()) for d in docs if len(d)), default=-1)
    present = [np.unique(np.asarray(d, np.int64)) for d in docs]   # each word once per caption
    rows = np.repeat(np.arange(n), [len(u) for u in present])
    cols = np.concatenate(present) if n else np.zeros(0, np.int64)
    n_items = int(item_of.max()) + 1 if n else 0
    per_item = np.bincount(item_of, minlength=n_items)
    # captions of each item containing each word, then, over captions s containing w:
    # num[w] = Σ (n_w(item(s)) − 1), den[w] = Σ (n(item(s)) − 1)
    pair = item_of[rows] * V + cols
    _, inv, cnt = np.unique(pair, return_inverse=True, return_counts=True)
    nw = cnt[inv]
    num = np.bincount(cols, weights=nw - 1, minlength=V)
    den = np.bincount(cols, weights=per_item[item_of[rows]] - 1, minlength=V)
    n_with = np.bincount(cols, minlength=V).astype(np.float64)
    df = n_with / max(n, 1)
    cons = (num + 0.5) / (den + 1.0)
    keep = n_with >= min_count
    evidence = np.full(V, np.nan)
    evidence[keep] = np.log(cons[keep] / df[keep])
    w = n_with[keep]
    out = {"df": df, "consistency": np.where(keep, cons, np.nan), "evidence": evidence,
           "n_captions": n_with, "n_words": int(keep.sum())}
    if keep.sum() >= 2:
        a, b = evidence[keep], -np.log(df[keep])
        a, b = a - np.average(a, weights=w), b - np.average(b, weights=w)
        out["corr"] = float(np.average(a * b, weights=w)
                            / np.sqrt(np.average(a * a, weights=w) * np.average(b * b, weights=w)))
        out["mean_consistency"] = float(np.average(cons[keep], weights=w))
    else:
        out["corr"] = out["mean_consistency"] = float("nan")
    total = float(n_with[keep].sum())
    bands = []
    for lo, hi in BANDS:
        m = keep & (df >= lo) & (df < hi)
        bands.append({"df_lo": lo, "df_hi": hi, "n_words": int(m.sum()),
                      "token_share": float(n_with[m].sum() / total) if total else 0.0,
                      "consistency": float(np.average(cons[m], weights=n_with[m])) if m.any() else None})
    out["bands"] = bands
    return out


def heldout_items(corpus, image_ids):
    """``(queries, items_corpus)``: caption 0 of every image, and a corpus whose images keep captions 1.."""
    from corpora.base import Corpus

    ims = [im for im in image_ids if len(corpus.captions_of(im)) >= 2]
    if len(ims) < 2:
        raise ValueError(f"heldout_items: need at least 2 images with 2+ captions in {corpus.name!r}")
    items = Corpus(name=f"{corpus.name}-heldout", image_ids=tuple(ims),
                   captions={im: corpus.captions_of(im)[1:] for im in ims}, splits={"items": tuple(ims)})
    return [corpus.captions_of(im)[0] for im in ims], items


def text_only_retrieval(corpus, image_ids, kernels=RETRIEVAL_KERNELS, progress: bool = True) -> dict:
    """Own-image retrieval by the text kernels alone (module docstring); kernel label -> metrics."""
    from tqdm.auto import tqdm

    from evaluation.ranking import evaluate
    from kernels.text import TextKernel

    queries, items = heldout_items(corpus, image_ids)
    ims = items.split("items")
    out = {}
    for label, base, kw in tqdm(kernels, desc="text-only retrieval", disable=not progress):
        tk = TextKernel.from_name(base, show_progress=False, **kw).fit(items, ims)
        res = evaluate(tk.gram_queries(queries), gold=np.arange(len(ims)), ks=(1, 10))
        out[label] = {"R@1": res["R@1"] / 100, "R@10": res["R@10"] / 100,
                      "MRR": float(np.mean(1.0 / res.ranks)), "median_rank": res["median_rank"]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None,
                    help="a Flickr8k folder (standard text bundle); default: the built-in teaching set")
    ap.add_argument("--seed", type=int, default=0, help="teaching-set seed (ignored with --data); default 0")
    ap.add_argument("--split", default=None,
                    help="images of the retrieval table: a split name, or 'dev+test'; default: 'train' on the "
                         "teaching set (1,400 images), 'dev+test' on Flickr8k (2,000 images)")
    ap.add_argument("--min-count", type=int, default=5, help="words in fewer captions are left out; default 5")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args(argv)

    t0 = time.time()
    if args.data:
        from corpora.base import CorpusError
        from corpora.flickr8k import load_flickr8k

        if not Path(args.data).is_dir():
            ap.error(f"--data {args.data}: no such folder")
        try:
            corpus = load_flickr8k(args.data, with_images=False)
        except (CorpusError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        split = args.split or "dev+test"
    else:
        from corpora.teaching import make_teaching_set

        corpus = make_teaching_set(seed=args.seed)
        split = args.split or "train"
    from kernels.text import TextKernel

    unknown = [part for part in split.split("+") if part not in corpus.splits]
    if unknown:
        ap.error(f"--split {split}: no split {unknown[0]!r} in {corpus.name} (splits: {', '.join(corpus.splits)})")
    train = corpus.split("train")
    tk = TextKernel.from_name("BoW5", show_progress=False).fit(corpus, train)
    stats = word_statistics(tk.docs, tk.item_of, args.min_count)
    image_ids = [im for part in split.split("+") for im in corpus.split(part)]
    retrieval = text_only_retrieval(corpus, image_ids, progress=not args.json)
    res = {"corpus": corpus.name, "seed": None if args.data else args.seed, "n_words": stats["n_words"],
           "evidence_idf_corr": stats["corr"], "mean_consistency": stats["mean_consistency"],
           "bands": stats["bands"], "retrieval": retrieval, "n_items": len(image_ids),
           "wall_s": round(time.time() - t0, 1)}
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"{corpus.name}: {len(train)} training images, {stats['n_words']} words seen >= {args.min_count} times")
    print(f"token-weighted corr(evidence, -log df) = {stats['corr']:.3f}; mean consistency {stats['mean_consistency']:.3f}")
    print(f"{'df band':>16} {'words':>6} {'tokens':>7} {'consistency':>12}")
    for b in stats["bands"]:
        c = "-" if b["consistency"] is None else f"{b['consistency']:.2f}"
        print(f"  [{b['df_lo']:.3f}, {b['df_hi']:.3f}) {b['n_words']:6d} {100 * b['token_share']:6.1f}% {c:>12}")
    print(f"\ntext-only own-image retrieval over {len(image_ids)} images ({split}): caption 0 vs captions 1..4")
    print(f"{'kernel':>22} {'R@1':>6} {'R@10':>6} {'MRR':>6} {'med r':>6}")
    for k, m in retrieval.items():
        print(f"{k:>22} {100 * m['R@1']:6.1f} {100 * m['R@10']:6.1f} {m['MRR']:6.3f} {m['median_rank']:6.1f}")
    print("\n√idf - none (MRR): " + ", ".join(
        f"{a}: {retrieval[b]['MRR'] - retrieval[a]['MRR']:+.3f}"
        for a, b in (("BoW5", "BoW5^sqrtidf"), ("TRI5 (k<=1)", "TRI5^sqrtidf (k<=1)"),
                     ("TRI5 (k<=2)", "TRI5^sqrtidf (k<=2)"), ("TRI5", "TRI5^sqrtidf"))))
    print(f"wall {res['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
