"""The main job on Karpathy split files (``--data dataset_flickr30k.json|dataset_coco.json --images DIR``):
a small fixture in Karpathy's real schema (images rendered from the teaching world, written as JPEG
files), run end to end with a quick system list; ``--workers 2`` gives the in-process numbers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import pytest

REPO = Path(__file__).resolve().parent.parent
SPLITS = ["train"] * 20 + ["restval"] * 8 + ["val"] * 6 + ["test"] * 6
QUICK = ["--systems", "NN5_F1^idf,BoW1,TagRank", "--metrics", "none", "--permutations", "200", "--no-progress"]


def write_karpathy_fixture(root: Path, dataset: str) -> tuple[Path, Path]:
    """``root/dataset_<dataset>.json`` in Karpathy's schema and its images (COCO: under ``filepath``
    sub-folders ``train2014`` / ``val2014``, as the real release); returns ``(json, images folder)``."""
    from corpora.teaching import make_teaching_set

    world = make_teaching_set(n_images=len(SPLITS), n_train=28, n_dev=6, seed=5)
    images_dir = root / "images"
    entries, sentid = [], 0
    for imgid, (image_id, split) in enumerate(zip(world.image_ids, SPLITS)):
        coco = dataset == "coco"
        folder = ("train2014" if split in ("train", "restval") else "val2014") if coco else ""
        filename = (f"COCO_{folder}_{imgid:012d}.jpg" if coco else f"{1000 + imgid}.jpg")
        (images_dir / folder).mkdir(parents=True, exist_ok=True)
        rgb = world.load_image(image_id)
        assert cv2.imwrite(str(images_dir / folder / filename), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        sentences = []
        for cap in world.captions[image_id]:
            raw = cap.text
            sentences.append({"tokens": raw.lower().rstrip(".").split(), "raw": raw, "imgid": imgid,
                              "sentid": sentid})
            sentid += 1
        entry = {"filename": filename, "imgid": imgid, "split": split,
                 "sentids": [s["sentid"] for s in sentences], "sentences": sentences}
        if coco:
            entry = {"filepath": folder, **entry, "cocoid": 100000 + imgid}
        entries.append(entry)
    path = root / f"dataset_{dataset}.json"
    path.write_text(json.dumps({"images": entries, "dataset": dataset}), encoding="utf-8")
    return path, images_dir


def run_job(args, tmp: Path, name: str) -> dict:
    cache, out = tmp / f"cache-{name}", tmp / f"out-{name}"
    env = {**os.environ, "ITR_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-m", "experiments.flickr8k_kcca", *args, "--cache-dir", str(cache),
                           "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    results["_report"] = (out / "report.md").read_text(encoding="utf-8")
    results["_log"] = (out / "run.log").read_text(encoding="utf-8")
    return results


@pytest.mark.parametrize("dataset", ["flickr30k", "coco"])
def test_karpathy_file_runs_end_to_end(dataset, tmp_path, nltk_data_dir):
    data, images = write_karpathy_fixture(tmp_path, dataset)
    res = run_job(["--data", str(data), "--images", str(images), *QUICK], tmp_path, "in-process")
    assert set(res["systems"]) == {"NN5_F1^idf", "BoW1", "TagRank"}
    assert res["corpus"]["name"] == dataset
    assert "relevance is the original pairing" in res["_report"]
    assert list(res["provenance"]["data_checksums"]) == [data.name]
    assert res["provenance"]["parallelism"]["mode"] == "in-process"
    assert "KCCA solver: exact (28 training images; low-rank above" in res["_log"]
    if dataset == "coco":   # the same numbers on a local Dask cluster of 2 worker processes
        dask = run_job(["--data", str(data), "--images", str(images), *QUICK, "--workers", "2"], tmp_path,
                       "workers")
        assert dask["systems"] == res["systems"]
        assert dask["provenance"]["parallelism"]["mode"] == "local cluster"
        assert dask["provenance"]["parallelism"]["workers"] == 2
        assert list((tmp_path / "cache-workers" / "image_gram_rows").glob("*.npz"))   # Gram row blocks ran there
        assert list((tmp_path / "cache-workers" / "pos_tags").glob("*.npz"))   # so did the tagger (no corpus POS)
        for rows in ("text_gram_rows", "text_query_rows"):                  # and TagRank's Gram and query rows
            assert list((tmp_path / "cache-workers" / rows).glob("*.npz"))


def test_karpathy_file_ranks_the_clip_family_with_every_test_caption(tmp_path, nltk_data_dir):
    """A Karpathy file also ranks the test split with every caption, as CLIP_benchmark does (its
    flickr30k / mscoco_captions sets): the CLIP family's figures there, in results.json and the report."""
    data, images = write_karpathy_fixture(tmp_path, "flickr30k")
    res = run_job(["--data", str(data), "--images", str(images), "--systems", "NN5_F1^idf", "--metrics", "CLIP-S",
                   "--permutations", "200", "--no-progress"], tmp_path, "every-caption")
    n_test = SPLITS.count("test")
    pool = res["corpus"]["pools"]["test_every_caption"]
    assert pool["images"] == n_test and pool["captions"] == pool["relevant_pairs"] > n_test
    ec = res["systems"]["CLIP-S"]["every_caption"]
    assert ec["n_images"] == n_test and ec["n_captions"] == pool["captions"]
    for direction in ("image_to_text", "text_to_image"):
        assert 0 <= ec[direction]["R@1"] <= ec[direction]["R@5"] <= ec[direction]["R@10"] <= 100
    assert ec["text_to_image"]["R@10"] == 100.0          # six test images: every caption's image is in its top 10
    assert "every_caption" not in res["systems"]["NN5_F1^idf"]
    assert "## Retrieval with every test caption (CLIP_benchmark protocol)" in res["_report"]
    assert res["corpus"]["skipped_images_by_split"] == {"train": 0, "dev": 0, "test": 0}
    # with --workers 2 the CLIP family's corpus images are encoded by the workers: the same numbers
    dask = run_job(["--data", str(data), "--images", str(images), "--systems", "NN5_F1^idf", "--metrics", "CLIP-S",
                    "--permutations", "200", "--no-progress", "--workers", "2"], tmp_path, "every-caption-workers")
    assert "CLIP image features (" in dask["_log"] and "on the Dask cluster" in dask["_log"]
    assert dask["systems"] == res["systems"]


def test_karpathy_options_go_together(tmp_path):
    from experiments.errors import PipelineError
    from experiments.flickr8k_kcca import parse_options

    data, images = tmp_path / "dataset_coco.json", tmp_path
    data.write_text("{}", encoding="utf-8")
    with pytest.raises(PipelineError, match="--images"):
        parse_options(["--data", str(data), "--out", str(tmp_path / "o"), "--no-cache"])
    with pytest.raises(PipelineError, match="--images"):
        parse_options(["--images", str(images), "--out", str(tmp_path / "o"), "--no-cache"])
    with pytest.raises(PipelineError, match="one of the two"):
        parse_options(["--workers", "2", "--scheduler", "tcp://h:1", "--out", str(tmp_path / "o"), "--no-cache"])


def test_karpathy_paths_cannot_leave_the_images_folder(tmp_path):
    from corpora.base import CorpusError
    from corpora.karpathy import load_karpathy

    bad = {"images": [{"filename": "x.jpg", "filepath": "../..", "split": "test",
                       "sentences": [{"raw": "a dog", "tokens": ["a", "dog"]}]}]}
    p = tmp_path / "dataset_coco.json"
    p.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(CorpusError, match="would leave the images folder"):
        load_karpathy(p, tmp_path)


def test_lowrank_solver_above_the_documented_size():
    from experiments.classical_stage import LOWRANK_ABOVE, LOWRANK_MAX_RANK, kcca_solver

    assert kcca_solver(6000) == ("exact", {})                   # Flickr8k: exact, as in the paper
    assert kcca_solver(LOWRANK_ABOVE) == ("exact", {})
    assert kcca_solver(LOWRANK_ABOVE + 1) == ("lowrank", {"max_rank": LOWRANK_MAX_RANK})
    assert kcca_solver(113_287)[0] == "lowrank"                  # COCO's Karpathy training split
