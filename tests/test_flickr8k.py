"""The real Flickr8k text bundle, the 14 shared JPEGs and the checksum list (../shared/data/flickr8k)."""
from __future__ import annotations

import shutil
import warnings
from collections import Counter

import numpy as np
import pytest

from corpora.base import CROWD_RELEVANCE_THRESHOLD, Corpus, CorpusError, MissingImagesError
from corpora.checksums import read_checksum_file, verify_checksums
from corpora.flickr8k import (
    BOGUS_IMAGE_ID,
    load_flickr8k,
    parse_crowd_file,
    parse_expert_file,
    parse_split_file,
    parse_token_file,
)
from corpora.images import read_image
from corpora.protocol import hodosh_pool, relevance_stats, train_items

#: Relevant non-original (image, caption) pairs of the crowd file at fraction-yes >= 0.66 – computed
#: once from the file (test_relevant_extra_pairs recounts it independently).
N_EXTRA_RELEVANT = 1996


@pytest.fixture(scope="module")
def text_dir(flickr8k_dir):
    return flickr8k_dir / "Flickr8k_text"


@pytest.fixture(scope="module")
def corpus(flickr8k_dir) -> Corpus:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_flickr8k(flickr8k_dir)


@pytest.fixture(scope="module")
def test_pool(corpus):
    return hodosh_pool(corpus, "test")


def test_raw_token_counts(text_dir):
    recs = parse_token_file(text_dir / "Flickr8k.token.txt")
    assert len(recs) == 40_460
    ids = Counter(r.image_id for r in recs)
    assert len(ids) == 8_092
    assert BOGUS_IMAGE_ID in ids
    assert set(ids.values()) == {5}
    assert [r.index for r in recs[:5]] == [0, 1, 2, 3, 4]
    assert recs[0].line == 1 and recs[-1].line == 40_460


def test_bogus_id_excluded_with_warning(flickr8k_dir):
    with pytest.warns(UserWarning, match=r"2258277193_586949ec62\.jpg\.1"):
        c = load_flickr8k(flickr8k_dir)
    assert len(c.image_ids) == 8_091
    assert BOGUS_IMAGE_ID not in c.captions
    assert not any(BOGUS_IMAGE_ID in n and "excluded" not in n for n in c.notes)
    assert any(BOGUS_IMAGE_ID in n and "excluded" in n for n in c.notes)
    assert any("40460 caption lines, 8092 image ids" in n for n in c.notes)
    assert c.summary()["captions"] == 40_455


def test_splits(corpus, text_dir):
    tr, dv, te = (set(corpus.split(s)) for s in ("train", "dev", "test"))
    assert (len(tr), len(dv), len(te)) == (6000, 1000, 1000)
    assert len(corpus.split("train")) == 6000  # no duplicates
    assert not (tr & dv) and not (tr & te) and not (dv & te)
    assert [i for i, _ in parse_split_file(text_dir / "Flickr_8k.testImages.txt")] == list(corpus.split("test"))
    assert all(len(corpus.captions_of(i)) == 5 for i in tr | dv | te)


def test_captions_and_lemmas(corpus):
    caps = corpus.captions_of("1000268201_693b08cb0e.jpg")
    assert [c.id for c in caps] == [f"1000268201_693b08cb0e.jpg#{k}" for k in range(5)]
    assert caps[0].text == "A child in a pink dress is climbing up a set of stairs in an entry way ."
    # The lemma file is in a different line order: it must be mapped by caption id.
    assert caps[0].lemma == "A child in a pink dress be climb up a set of stair in an entry way ."
    assert all(c.lemma for im in corpus.image_ids for c in corpus.captions_of(im))


def test_judgment_counts(corpus, text_dir):
    assert len(corpus.expert) == 5_822
    assert len(corpus.crowd) == 47_830
    assert len(parse_expert_file(text_dir / "ExpertAnnotations.txt")) == 5_822
    assert len(parse_crowd_file(text_dir / "CrowdFlowerAnnotations.txt")) == 47_830
    e = corpus.expert[0]
    assert (e.image_id, e.caption_id, e.scores) == (
        "1056338697_4f7d7ce270.jpg", "2549968784_39bfbe44f9.jpg#2", (1, 1, 1))
    c = corpus.crowd[0]
    assert (c.image_id, c.caption_id, c.fraction_yes, c.n_yes, c.n_no) == (
        "1056338697_4f7d7ce270.jpg", "1056338697_4f7d7ce270.jpg#2", 1.0, 3, 0)


def test_hodosh_test_pool(corpus, test_pool, text_dir):
    fixed = corpus.fixed_pools["test"]
    assert len(fixed) == len(set(fixed)) == 1000
    # Straight from the file: the distinct caption ids of the crowd file's second column.
    col2 = {line.split("\t")[1] for line in (text_dir / "CrowdFlowerAnnotations.txt").read_text().splitlines()}
    assert set(fixed) == col2
    assert test_pool.image_ids == corpus.split("test")
    assert [cid.rpartition("#")[0] for cid in test_pool.caption_ids] == list(test_pool.image_ids)
    assert test_pool.relevance.shape == (1000, 1000)
    np.testing.assert_array_equal(test_pool.gold_caption, np.arange(1000))
    assert test_pool.relevance[np.arange(1000), test_pool.gold_caption].all()


def test_relevant_extra_pairs(test_pool, text_dir):
    # Independent count straight from the file: fraction yes >= 0.66, caption not written for the image.
    n_file = 0
    for line in (text_dir / "CrowdFlowerAnnotations.txt").read_text().splitlines():
        im, cid, frac, *_ = line.split("\t")
        if float(frac) >= 0.66 and cid.split("#")[0] != im:
            n_file += 1
    assert n_file == N_EXTRA_RELEVANT
    stats = relevance_stats(test_pool)
    assert stats["n_extra_pairs"] == N_EXTRA_RELEVANT
    assert stats["n_original_pairs"] == 1000
    assert stats["n_relevant_pairs"] == int(test_pool.relevance.sum()) == 1000 + N_EXTRA_RELEVANT
    hist = stats["captions_by_n_images"]
    assert hist["0"] == 0 and sum(hist.values()) == 1000
    assert sum(k * hist[str(k)] for k in (1, 2, 3)) + 4 * hist[">=4"] <= stats["n_relevant_pairs"]
    assert CROWD_RELEVANCE_THRESHOLD == 0.66


def test_fourteen_images_load_rgb(corpus, flickr8k_dir):
    files = sorted((flickr8k_dir / "Flicker8k_Dataset").glob("*.jpg"))
    assert len(files) == 14
    present = [i for i in corpus.image_ids if corpus.has_image(i)]
    assert sorted(present) == sorted(f.name for f in files)
    for im in present:
        a = corpus.load_image(im)
        assert a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] == 3
        assert 100 <= min(a.shape[:2]) and max(a.shape[:2]) <= 500
        assert a.std() > 5  # real photo content, not a blank array
    small = read_image(files[0], max_side=128)
    assert max(small.shape[:2]) == 128 and small.shape[2] == 3


def test_missing_images_error(corpus):
    with pytest.raises(MissingImagesError) as ei:
        hodosh_pool(corpus, "test", require_images=True)
    msg = str(ei.value)
    assert "1000 are missing" in msg and "Flicker8k_Dataset/3385593926_d3e9c21170.jpg" in msg
    assert "995 more" in msg and "skip_missing_images=True" in msg
    with pytest.raises(MissingImagesError, match="5987 are missing"):
        train_items(corpus, require_images=True)


def test_skip_missing_images(corpus):
    with pytest.warns(UserWarning, match="skipped 5987 of 6000"):
        ti = train_items(corpus, skip_missing_images=True)
    assert len(ti.image_ids) == 13 and ti.n_skipped == 5987
    assert all(corpus.has_image(i) for i in ti.image_ids)
    assert [len(c) for c in ti.captions] == [5] * 13
    with pytest.warns(UserWarning, match="skipped 999 of 1000"):
        dev = hodosh_pool(corpus, "dev", skip_missing_images=True)
    assert dev.image_ids == ("23445819_3a458716c1.jpg",) and dev.n_skipped == 999
    assert relevance_stats(dev)["n_skipped_images"] == 999
    assert any("skipped 999 of 1000" in n for n in corpus.notes)
    with pytest.warns(UserWarning):
        test = hodosh_pool(corpus, "test", skip_missing_images=True)
    assert test.n_images == 0 and test.n_skipped == 1000


def test_text_only_corpus(flickr8k_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = load_flickr8k(flickr8k_dir, with_images=False)
    assert c.image_paths is None and not c.has_image(c.image_ids[0])
    with pytest.raises(MissingImagesError):
        hodosh_pool(c, "dev", require_images=True)


def test_checksums_verify_fourteen(flickr8k_dir):
    ck = flickr8k_dir / "checksums" / "flickr8k_checksum.txt"
    assert len(read_checksum_file(ck)) == 8091
    rep = verify_checksums(flickr8k_dir, ck)
    assert len(rep.ok) == 14 and rep.all_ok and rep.n_not_present == 8091 - 14
    assert "14 ok, 0 mismatched" in str(rep)
    # The image folder itself works as root too.
    assert len(verify_checksums(flickr8k_dir / "Flicker8k_Dataset", ck).ok) == 14
    full = verify_checksums(flickr8k_dir, ck, only_present=False)
    assert len(full.missing) == 8077 and not full.all_ok


def test_checksum_corrupted_copy(flickr8k_dir, tmp_path):
    ck = flickr8k_dir / "checksums" / "flickr8k_checksum.txt"
    dst = tmp_path / "Flicker8k_Dataset"
    dst.mkdir()
    names = sorted(p.name for p in (flickr8k_dir / "Flicker8k_Dataset").glob("*.jpg"))
    for n in names[:3]:
        shutil.copy(flickr8k_dir / "Flicker8k_Dataset" / n, dst / n)
    data = bytearray((dst / names[1]).read_bytes())
    data[len(data) // 2] ^= 0xFF  # flip one byte
    (dst / names[1]).write_bytes(bytes(data))
    rep = verify_checksums(tmp_path, ck, image_ids=names[:3] + ["not_a_flickr_image.jpg"])
    assert sorted(rep.ok) == sorted([names[0], names[2]])
    assert [m[0] for m in rep.mismatched] == [names[1]]
    assert rep.not_listed == ["not_a_flickr_image.jpg"]
    assert not rep.all_ok
    s = str(rep)
    assert "1 mismatched" in s and f"MISMATCH {names[1]}" in s
    with pytest.raises(ValueError, match="MISMATCH"):
        rep.raise_for_errors()


def test_checksums_refuse_a_wrong_folder_and_find_kaggle_images(flickr8k_dir, tmp_path):
    """A mistyped root is an error, not "0 checked, all fine"; the Kaggle layout's Images/ is searched."""
    ck = flickr8k_dir / "checksums" / "flickr8k_checksum.txt"
    with pytest.raises(FileNotFoundError, match="no such folder"):
        verify_checksums(tmp_path / "typo", ck)
    empty = tmp_path / "empty"
    empty.mkdir()
    rep = verify_checksums(empty, ck)
    assert not rep.ok and not rep.all_ok            # nothing verified
    assert rep.n_requested == 8091 and "wrong folder?" in str(rep)
    with pytest.raises(CorpusError, match="wrong folder"):
        rep.raise_for_errors()
    kaggle = tmp_path / "kaggle" / "Images"
    kaggle.mkdir(parents=True)
    names = sorted(p.name for p in (flickr8k_dir / "Flicker8k_Dataset").glob("*.jpg"))[:2]
    for n in names:
        shutil.copy(flickr8k_dir / "Flicker8k_Dataset" / n, kaggle / n)
    rep = verify_checksums(kaggle.parent, ck)
    assert sorted(rep.ok) == names and rep.all_ok


def test_judgment_files_refuse_a_repeated_pair(text_dir, tmp_path):
    """A duplicated expert or crowd row would count twice in the correlations: an error naming both lines."""
    for name, parse in (("ExpertAnnotations.txt", parse_expert_file), ("CrowdFlowerAnnotations.txt",
                                                                        parse_crowd_file)):
        lines = (text_dir / name).read_text(encoding="utf-8").splitlines()
        bad = tmp_path / name
        bad.write_text("\n".join(lines[:5] + [lines[2]]) + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=r":6: pair .* is judged again \(first on line 3\)"):
            parse(bad)


def test_caption_files_line_ends_csv_ids_and_unclosed_quotes(tmp_path):
    from corpora.flickr8k import parse_captions_csv

    tok = tmp_path / "Flickr8k.token.txt"
    tok.write_bytes(b"a.jpg#0\tA dog .\rb.jpg#0\tA cat .\r")          # old-Mac line ends
    assert [(r.caption_id, r.text) for r in parse_token_file(tok)] == [("a.jpg#0", "A dog ."),
                                                                        ("b.jpg#0", "A cat .")]
    csv_file = tmp_path / "captions.txt"
    csv_file.write_text('image,caption\na.jpg#0,"A dog, running"\na.jpg#1,A dog\nb.jpg,A cat\n', encoding="utf-8")
    assert [r.caption_id for r in parse_captions_csv(csv_file)] == ["a.jpg#0", "a.jpg#1", "b.jpg#0"]
    csv_file.write_text('image,caption\na.jpg,"A dog\na.jpg,A dog\nb.jpg,A cat\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"captions.txt:2: a record spans lines 2-4"):
        parse_captions_csv(csv_file)
    # a stated caption number is the caption's index, whatever the row order; stated twice is an error
    csv_file.write_text('image,caption\na.jpg#1,A cat\na.jpg#0,A dog\na.jpg,A third\n', encoding="utf-8")
    assert [(r.caption_id, r.text) for r in parse_captions_csv(csv_file)] == [
        ("a.jpg#1", "A cat"), ("a.jpg#0", "A dog"), ("a.jpg#2", "A third")]
    csv_file.write_text('image,caption\na.jpg#0,A cat\na.jpg#0,A dog\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"captions.txt:3: duplicate caption id a.jpg#0 \(first on line 2\)"):
        parse_captions_csv(csv_file)
    # a caption number is ASCII digits, as in the token file: '#٣' is not read as #3
    csv_file.write_text('image,caption\na.jpg#\u0663,A dog\n', encoding="utf-8")
    assert [r.caption_id for r in parse_captions_csv(csv_file)] == ["a.jpg#\u0663#0"]
    # a bad byte is placed on its line whatever the line ends
    split = tmp_path / "Flickr_8k.testImages.txt"
    split.write_bytes(b"1_a.jpg\r2_a.jpg\r3_\xffa.jpg\r")
    with pytest.raises(CorpusError, match=r"testImages.txt:3: not valid UTF-8"):
        parse_split_file(split)


def test_caption_files_without_usable_images_fail_before_warning_per_id(tmp_path):
    for name, content, message in (("empty", "", "no caption lines"),
                                   ("bogus", "".join(f"x{i}.jpg.1#0\tA dog .\n" for i in range(50)),
                                    "no image ids that name an image file")):
        root = tmp_path / name
        root.mkdir()
        (root / "Flickr8k.token.txt").write_text(content, encoding="utf-8")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(CorpusError, match=message):
                load_flickr8k(root, with_images=False)
        assert not [w for w in caught if "names no image file" in str(w.message)]


def test_missing_crowd_file_is_announced_and_the_readme_lemma_name_is_read(flickr8k_dir, tmp_path):
    root = tmp_path / "f8k"
    text = root / "Flickr8k_text"
    text.mkdir(parents=True)
    src = flickr8k_dir / "Flickr8k_text"
    for name in ("Flickr8k.token.txt", "Flickr_8k.trainImages.txt", "Flickr_8k.devImages.txt",
                 "Flickr_8k.testImages.txt"):
        (text / name).symlink_to(src / name)
    (text / "Flickr8k.lemma.txt").symlink_to(src / "Flickr8k.lemma.token.txt")   # readme.txt's name
    with pytest.warns(UserWarning, match="CrowdFlowerAnnotations.txt not found: the test pool is one seeded"):
        c = load_flickr8k(root, with_images=False)
    assert c.captions_of(c.split("train")[0])[0].lemma is not None
