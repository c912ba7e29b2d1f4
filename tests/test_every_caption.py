"""Retrieval with every test caption (the CLIP_benchmark protocol): the evaluator's figures equal
CLIP_benchmark's recall@k definition (``clip_benchmark/metrics/zeroshot_retrieval.py``: top-k indices of
each query, a query counts when at least one positive is among them), and the report shows the table."""
from __future__ import annotations

import numpy as np

from corpora.base import Caption, Corpus, caption_id
from corpora.protocol import every_caption_pool
from experiments.evaluation_stage import every_caption_json
from experiments.report import write_report


def _corpus(n_images: int, rng) -> Corpus:
    ids = [f"im{i:03d}.jpg" for i in range(n_images)]
    counts = rng.integers(4, 8, size=n_images)          # COCO has 5 to 7 captions per image
    caps = {im: [Caption(caption_id(im, k), im, k, f"caption {k} of {im}") for k in range(int(n))]
            for im, n in zip(ids, counts)}
    return Corpus(name="toy", image_ids=ids, captions=caps, splits={"train": [], "dev": [], "test": ids})


def _clip_benchmark_recall(scores_text_image: np.ndarray, positive: np.ndarray, k: int) -> float:
    """CLIP_benchmark's recall@k as it computes it: for each row, the top-k columns; the row counts when
    the number of positives among them is above 0; averaged (×100 here)."""
    top = np.argsort(-scores_text_image, axis=1, kind="stable")[:, :k]
    hits = np.take_along_axis(positive, top, axis=1).sum(axis=1) > 0
    return 100.0 * float(hits.mean())


def test_every_caption_metrics_are_clip_benchmarks_recall_at_k():
    rng = np.random.default_rng(0)
    corpus = _corpus(60, rng)
    pool = every_caption_pool(corpus, "test")
    S = rng.standard_normal((pool.n_images, pool.n_captions)).astype(np.float32)
    S[pool.gold_image, np.arange(pool.n_captions)] += 1.5    # better than chance, far from perfect
    got = every_caption_json(pool, S)
    positive = pool.relevance.T                                # (texts, images), CLIP_benchmark's layout
    for k in (1, 5, 10):
        # image_retrieval_recall@k: texts rank images; text_retrieval_recall@k: images rank texts
        assert got["text_to_image"][f"R@{k}"] == round(_clip_benchmark_recall(S.T, positive, k), 4)
        assert got["image_to_text"][f"R@{k}"] == round(_clip_benchmark_recall(S, positive.T, k), 4)
    assert 0 < got["image_to_text"]["R@1"] < 100 and got["n_captions"] == pool.n_captions
    # an image with several captions is found by any of them: image→text beats text→image at k = 1 here
    assert got["image_to_text"]["R@1"] > got["text_to_image"]["R@1"]


def test_report_has_the_every_caption_table(tmp_path):
    ec = {"n_images": 5000, "n_captions": 25010, "image_to_text": {"R@1": 50.1, "R@5": 75.0, "R@10": 83.5},
          "text_to_image": {"R@1": 30.4, "R@5": 56.0, "R@10": 66.9, "median_rank": 4.0}}
    metrics = {"R@1": 1.0, "R@5": 2.0, "R@10": 3.0, "median_rank": 9.0, "n_queries": 5000, "n_ties": 0}
    results = {"corpus": {"name": "coco", "pools": {"test": {"images": 5000, "captions": 5000,
                                                             "relevant_pairs": 5000},
                                                    "test_every_caption": {"images": 5000, "captions": 25010,
                                                                           "relevant_pairs": 25010}}},
               "systems": {"CLIP-S": {"family": "neural", "annotation": metrics, "search": metrics,
                                      "every_caption": ec},
                           "BoW1": {"family": "classical", "annotation": metrics, "search": metrics}}}
    md = write_report(results, tmp_path)["md"].read_text(encoding="utf-8")
    section = md[md.index("## Retrieval with every test caption"):]
    assert "5000 images × 25010 captions" in section and "CLIP_benchmark" in section
    row = next(line for line in section.splitlines() if line.startswith("| CLIP-S"))
    assert [c.strip() for c in row.strip("|").split("|")] == ["CLIP-S", "50.1", "75.0", "83.5", "30.4", "56.0",
                                                               "66.9", "4.0"]
    assert "| BoW1" not in section.split("\n## ")[0]           # classical systems are not ranked this way
    assert "test every caption pool: 5000 images × 25010 captions" in md
