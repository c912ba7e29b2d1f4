"""benchmarks/idf_statistics.py: word evidence (consistency vs document frequency) and text-only retrieval.

The real-data test pins the finding of docs/teaching_set.md ("Where the √idf penalty lives"): on the
Flickr8k captions a word's evidence follows its idf and √idf weights help the bag of words even without
images; on the default teaching set neither holds.
"""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def idfs(benchmark_module):
    return benchmark_module("idf_statistics")


def test_consistency_and_evidence_by_hand(idfs):
    # two images with three captions each; word 0 in every caption of image 0 and one caption of image 1,
    # word 1 in one caption of each image, word 2 in two captions of image 1 (and twice in one caption)
    docs = [np.array([0]), np.array([0, 1]), np.array([0]),
            np.array([0, 2, 2]), np.array([1, 2]), np.array([3])]
    item_of = np.array([0, 0, 0, 1, 1, 1])
    st = idfs.word_statistics(docs, item_of, min_count=1)
    # word 0: captions containing it: 3 in image 0 (each: 2 of 2 others contain it), 1 in image 1 (0 of 2)
    assert st["df"][0] == pytest.approx(4 / 6)
    assert st["consistency"][0] == pytest.approx((3 * 2 + 0 + 0.5) / (4 * 2 + 1.0))
    # word 1: one caption per image, never repeated within an image
    assert st["consistency"][1] == pytest.approx(0.5 / (2 * 2 + 1.0))
    # word 2: two captions of image 1, each sees the other (counted once per caption, not per token)
    assert st["df"][2] == pytest.approx(2 / 6)
    assert st["consistency"][2] == pytest.approx((2 * 1 + 0.5) / (2 * 2 + 1.0))
    assert st["evidence"][2] == pytest.approx(np.log(st["consistency"][2] / st["df"][2]))
    assert sum(b["token_share"] for b in st["bands"]) == pytest.approx(1.0)
    # min_count leaves rare words out of the statistics
    st2 = idfs.word_statistics(docs, item_of, min_count=3)
    assert st2["n_words"] == 1 and np.isnan(st2["evidence"][1]) and np.isnan(st2["corr"])
    with pytest.raises(ValueError, match="item indices"):
        idfs.word_statistics(docs, item_of[:-1])


def test_text_only_retrieval_on_a_small_teaching_set(idfs, small_teaching_set):
    ts = small_teaching_set
    ims = ts.split("train")
    queries, items = idfs.heldout_items(ts, ims)
    assert [q.id for q in queries] == [ts.captions_of(im)[0].id for im in ims]
    assert all(len(items.captions_of(im)) == 4 for im in ims)
    kernels = (("BoW5", "BoW5", {}), ("TRI5 (k<=1)", "TRI5", {"max_len": 1}))
    res = idfs.text_only_retrieval(ts, ims, kernels=kernels, progress=False)
    for m in res.values():
        # far above chance (1/60 at R@1, median rank 30)
        assert m["R@1"] > 0.1 and m["median_rank"] < 15 and 0 < m["MRR"] <= 1


def test_flickr8k_words_follow_idf_and_sqrt_idf_helps_without_images(idfs, flickr8k_dir, nltk_data_dir):
    from corpora.flickr8k import load_flickr8k
    from kernels.text import TextKernel

    c = load_flickr8k(flickr8k_dir, with_images=False)
    tk = TextKernel.from_name("BoW5", show_progress=False).fit(c, c.split("train"))
    st = idfs.word_statistics(tk.docs, tk.item_of)
    print(f"Flickr8k: corr(evidence, -log df) {st['corr']:.3f}, bands {st['bands']}")
    assert st["corr"] > 0.7
    assert sum(b["token_share"] for b in st["bands"] if b["df_hi"] <= 0.03) > 0.4
    kernels = (("BoW5", "BoW5", {}), ("BoW5^sqrtidf", "BoW5^sqrtidf", {}))
    res = idfs.text_only_retrieval(c, c.split("dev") + c.split("test"), kernels=kernels, progress=False)
    print(res)
    assert res["BoW5^sqrtidf"]["MRR"] > res["BoW5"]["MRR"] + 0.01


def test_teaching_set_words_do_not_follow_idf(idfs):
    """The default teaching set (the measured contrast): most tokens from frequent words, evidence only
    weakly tied to idf, and √idf does not help the bag of words without images."""
    from corpora.teaching import make_teaching_set
    from kernels.text import TextKernel

    ts = make_teaching_set()
    tk = TextKernel.from_name("BoW5", show_progress=False).fit(ts, ts.split("train"))
    st = idfs.word_statistics(tk.docs, tk.item_of)
    assert st["corr"] < 0.5
    assert st["bands"][0]["token_share"] > 0.4
    kernels = (("BoW5", "BoW5", {}), ("BoW5^sqrtidf", "BoW5^sqrtidf", {}))
    res = idfs.text_only_retrieval(ts, ts.split("train"), kernels=kernels, progress=False)
    assert res["BoW5^sqrtidf"]["MRR"] <= res["BoW5"]["MRR"]


def test_bad_data_and_split_are_one_error_line(idfs, flickr8k_dir, tmp_path, capsys):
    """A malformed caption file names the file and line, an unknown split lists the splits; no traceback."""
    (tmp_path / "Flickr8k.token.txt").write_text("x.jpg#0\tA dog.\nbroken line\n", encoding="utf-8")
    assert idfs.main(["--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {tmp_path / 'Flickr8k.token.txt'}:2: no TAB" in err, err
    with pytest.raises(SystemExit) as exc:
        idfs.main(["--data", str(flickr8k_dir), "--split", "bogus"])
    assert exc.value.code == 2
    assert "--split bogus: no split 'bogus' in flickr8k (splits: train, dev, test)" in capsys.readouterr().err
