"""The compositionality table on contrast twins: :func:`evaluation.compositionality.twin_preference`,
its block in the main job's ``results.json`` (generated corpora only) and its report section."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from corpora.base import Caption, RankingPool
from corpora.protocol import hodosh_pool
from corpora.scoring import ScoreMatrices
from evaluation.compositionality import twin_pairs, twin_preference
from experiments.evaluation_stage import compositionality_table
from experiments.outputs import SystemOutput
from experiments.report import compositionality_rows, write_report

REPO = Path(__file__).resolve().parent.parent
TITLE = "Compositionality: true caption vs its contrast twin's"

# Four scenes: 0/1 are a colour-swapped pair, 2/3 a place-swapped pair (same words, other order).
TEXTS = ("a red ball left of a blue cube", "a blue ball left of a red cube",
         "a dog on the grass near a tree", "a tree on the grass near a dog")
TWINS = {"im1": "im0", "im3": "im2"}


def _pool(order=(0, 1, 2, 3)) -> RankingPool:
    ids = tuple(f"im{k}" for k in order)
    caps = tuple(Caption(id=f"im{k}#0", image_id=f"im{k}", index=0, text=TEXTS[k]) for k in order)
    n = len(order)
    return RankingPool(split="test", image_ids=ids, caption_ids=tuple(c.id for c in caps), captions=caps,
                       gold_caption=np.arange(n), gold_image=np.arange(n), relevance=np.eye(n, dtype=bool))


def _affinity(pool: RankingPool, feature) -> ScoreMatrices:
    """Image ``i`` is represented by its own caption's text; ``S[i, c]`` = shared features (counts)."""
    img = [feature(pool.captions[int(g)].text) for g in pool.gold_caption]
    cap = [feature(c.text) for c in pool.captions]
    S = np.array([[sum((a & b).values()) for b in cap] for a in img], dtype=np.float64)
    return ScoreMatrices.from_affinity(S)


def _bag_of_words(text: str) -> Counter:
    return Counter(text.split())


def _bigrams(text: str) -> Counter:
    w = text.split()
    return Counter(zip(w, w[1:]))


def test_word_order_blind_scorer_ties_at_chance_and_order_aware_scorer_wins():
    pool = _pool()
    blind = twin_preference(_affinity(pool, _bag_of_words), pool, TWINS)
    assert blind["n_pairs"] == 2
    assert blind["annotation"] == blind["search"] == 50.0        # every trial a tie: ½ each
    assert np.all(blind["per_pair"]["annotation"] == 0.5)
    aware = twin_preference(_affinity(pool, _bigrams), pool, TWINS)
    assert aware["annotation"] == aware["search"] == 100.0
    assert aware["per_pair"]["search"].shape == (2, 2)
    assert sorted(aware["pairs"]) == [("im0", "im1"), ("im2", "im3")]


def test_a_scorer_that_prefers_the_twin_scores_zero_and_search_is_read_from_its_own_matrix():
    pool = _pool()
    good = _affinity(pool, _bigrams)
    inverted = ScoreMatrices(annotation=-good.annotation, search=good.search)
    res = twin_preference(inverted, pool, TWINS)
    assert res["annotation"] == 0.0 and res["search"] == 100.0


def test_pairs_outside_the_pool_are_left_out_and_a_pair_counts_once():
    pool = _pool(order=(2, 0, 1))                       # im3 not in the pool
    pairs = twin_pairs(pool, {**TWINS, "im0": "im1"})   # the pair given in both directions
    assert pairs == [(1, 2)]
    res = twin_preference(_affinity(pool, _bigrams), pool, TWINS)
    assert res["n_pairs"] == 1 and res["annotation"] == 100.0
    empty = twin_preference(_affinity(pool, _bigrams), pool, {})
    assert empty["n_pairs"] == 0 and np.isnan(empty["annotation"])


def test_scores_of_another_shape_are_refused():
    with pytest.raises(ValueError, match="do not match the pool"):
        twin_preference(ScoreMatrices.from_affinity(np.zeros((3, 3))), _pool(), TWINS)


def test_table_only_for_a_generated_corpus_with_twins_in_the_test_pool(small_teaching_set):
    pool = hodosh_pool(small_teaching_set, "test", seed=0)
    n = pool.n_images
    rng = np.random.default_rng(0)
    outputs = {"RAND": SystemOutput("RAND", "baseline", ScoreMatrices.from_affinity(rng.normal(size=(n, n)))),
               "CONST": SystemOutput("CONST", "neural", ScoreMatrices.from_affinity(np.zeros((n, n))))}
    table = compositionality_table(small_teaching_set, outputs, pool)
    expected = len(twin_pairs(pool, small_teaching_set.twins))
    assert expected > 0
    assert table["CONST"] == {"annotation": 50.0, "search": 50.0, "n_pairs": expected}
    assert set(table) == {"RAND", "CONST"}

    class NotGenerated:            # a plain corpus (Flickr8k): no twins, no generator
        twins = small_teaching_set.twins

    assert compositionality_table(NotGenerated(), outputs, pool) == {}


def test_report_section_lists_every_system_and_is_absent_without_the_block(tmp_path):
    results = {"corpus": {"name": "teaching"},
               "systems": {"BoW1": {"family": "classical"}, "CLIP-S": {"family": "neural"}},
               "compositionality": {"CLIP-S": {"annotation": 55.0, "search": 48.5, "n_pairs": 7},
                                    "BoW1": {"annotation": 50.0, "search": 50.0, "n_pairs": 7}}}
    header, rows = compositionality_rows(results)
    assert [r[0] for r in rows] == ["BoW1", "CLIP-S"]            # classical before neural
    assert rows[1][1:] == ["neural", "55.0", "48.5", "7"]
    md = write_report(results, tmp_path / "with")["md"].read_text(encoding="utf-8")
    assert f"## {TITLE}" in md and "50 % is chance" in md and "| CLIP-S | neural | 55.0 | 48.5 | 7 |" in md
    del results["compositionality"]
    md = write_report(results, tmp_path / "without")["md"].read_text(encoding="utf-8")
    assert "Compositionality" not in md


def test_main_job_writes_the_block_and_the_table_on_the_teaching_set(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "out"
    env = dict(os.environ, ITR_CACHE_DIR=str(cache))
    cmd = [sys.executable, "-m", "experiments.flickr8k_kcca", "--teaching-size", "120", "--systems", "BoW1",
           "--metrics", "none", "--permutations", "20", "--no-progress", "--seed", "0",
           "--cache-dir", str(cache), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    block = results["compositionality"]
    assert set(block) == set(results["systems"]) == {"BoW1"}
    assert block["BoW1"]["n_pairs"] > 0
    assert 0.0 <= block["BoW1"]["annotation"] <= 100.0 and 0.0 <= block["BoW1"]["search"] <= 100.0
    md = (out / "report.md").read_text(encoding="utf-8")
    html = (out / "report.html").read_text(encoding="utf-8")
    assert f"## {TITLE}" in md and "| BoW1 | classical |" in md
    assert "Compositionality: true caption vs its contrast twin&#x27;s" in html
