"""The scorer registry (neural/registry.py, neural/family.py): a metric defined here, in the test, and
registered through the public API runs through the main job (``--metrics``), ``neural.score --metric``,
``neural.train_scorer --metric``, save and reload (bit-identical scores), and appears in every ``--help``.

The toy metric, TOY-S = σ(a · cos(c, v) + b), learns its two numbers by logistic regression of each
training image's caption against a shuffled one (a few gradient steps of its recipe): trained from a
parent backbone, saved as two tensors beside the parent (needed to load it, checked by hash).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from neural.family import ScorerFamily
from neural.recipes import Recipe
from neural.registry import family_for, metric_names, register_family, scorer_names, unregister_family

TOY_SMALL = Recipe("toy-small", "TOY-S", batch_size=12, lr=0.5, weight_decay=0.0, steps=20)
TOY_PAPER = Recipe("toy-paper", "TOY-S", batch_size=12, lr=0.5, weight_decay=0.0, steps=40)


class ToyScore:
    """σ(a · cos(c, v) + b) on a CLIP backbone (cos through CLIP-S with w = 1 and its prompt)."""

    name = "TOY-S"

    def __init__(self, backbone, a: float, b: float):
        from neural.clipscore import CLIPScore

        self.backbone, self.a, self.b = backbone, float(a), float(b)
        self.clip = CLIPScore(backbone, w=1.0)
        self.prompt = self.clip.prompt

    def cache_identity(self) -> dict:
        return {"scorer": self.name, "a": self.a, "b": self.b, "backbone": self.backbone.cache_identity()}

    def _map(self, cos):
        return (1.0 / (1.0 + np.exp(-(self.a * np.asarray(cos, np.float64) + self.b)))).astype(np.float32)

    def score(self, images, candidates, references=None):
        return self._map(self.clip.compute(images, candidates)["cos"])

    def score_matrix(self, images, captions):
        return self._map(self.clip.image_embeddings(images) @ self.clip.text_embeddings(list(captions)).T)


class ToyFamily(ScorerFamily):
    name, metric = "TOY-S", "toy-s"
    help = "TOY-S = sigmoid(a cos(c, v) + b), a and b fitted on the training split  (this test)"
    recipes = {"small": TOY_SMALL, "paper": TOY_PAPER}
    needs_parent = True
    weights_in_backbone = False

    def train(self, parent, corpus, recipe, settings):
        from neural.clipscore import CLIPScore

        ids = list(settings.image_ids or corpus.split("train"))[:recipe.batch_size]
        images = [corpus.load_image(i) for i in ids]
        caps = [corpus.captions[i][0].text for i in ids]
        clip = CLIPScore(parent, w=1.0)
        pos = clip.compute(images, caps)["cos"].astype(np.float64)
        neg = clip.compute(images, caps[1:] + caps[:1])["cos"].astype(np.float64)
        x, y = np.concatenate([pos, neg]), np.concatenate([np.ones_like(pos), np.zeros_like(neg)])
        a = b = 0.0
        for _ in range(recipe.steps):   # logistic regression, full-batch gradient descent
            p = 1.0 / (1.0 + np.exp(-(a * x + b)))
            a -= recipe.lr * float(np.mean((p - y) * x)) * 10.0
            b -= recipe.lr * float(np.mean(p - y))
        return ToyScore(parent, np.float32(a), np.float32(b))

    def owns(self, scorer):
        return isinstance(scorer, ToyScore)

    def parts(self, scorer):
        import torch

        from neural.saved_parts import backbone_record

        return ({"a": torch.tensor([scorer.a]), "b": torch.tensor([scorer.b])},
                {"scorer": {"name": scorer.name, "prompt": scorer.prompt},
                 "architecture": {"kind": "two numbers beside a frozen CLIP"},
                 "backbone": backbone_record(scorer.backbone), "parent": backbone_record(scorer.backbone),
                 "recipe": {"steps": TOY_SMALL.steps}})

    def load(self, cfg_path, config, tensors, parent, device):
        return ToyScore(parent, float(tensors["a"][0]), float(tensors["b"][0]))


@pytest.fixture()
def toy():
    family = register_family(ToyFamily())
    yield family
    unregister_family(family.name)


@pytest.fixture()
def tiny_everywhere(monkeypatch, random_tiny_backbone, small_teaching_set):
    """The small teaching set and the random tiny CLIP wherever a command line would build them."""
    monkeypatch.setattr("corpora.teaching.make_teaching_set", lambda *a, seed=0, **k: small_teaching_set)
    monkeypatch.setattr("neural.factory.backbone_for", lambda *a, **k: random_tiny_backbone)
    monkeypatch.setattr("neural.tiny_clip.train_tiny_clip", lambda *a, **k: random_tiny_backbone)
    monkeypatch.setattr("experiments.neural_stage.load_neural_backbone", lambda *a, **k: random_tiny_backbone)
    return random_tiny_backbone


def test_registry_lists_the_built_in_families_in_order():
    assert scorer_names() == ("CLIP-S", "RefCLIP-S", "PAC-S", "RefPAC-S", "L-CLIPScore", "RefL-CLIPScore",
                              "BRIDGE", "SPECS")
    assert family_for("refpac-s") is family_for("PAC-S") and family_for("RefL-CLIPScore").name == "L-CLIPScore"
    with pytest.raises(KeyError, match="unknown scorer 'TOY-S'"):
        family_for("TOY-S")


def test_registration_refuses_taken_names_and_bad_declarations(toy):
    with pytest.raises(ValueError, match="registered already"):
        register_family(ToyFamily())

    class Clash(ScorerFamily):
        name, metric = "TOY-2", "clip-s"

    with pytest.raises(ValueError, match="clip-s are another family's"):
        register_family(Clash())

    class WrongRecipe(ToyFamily):
        name, metric = "TOY-3", "toy-3"

    with pytest.raises(ValueError, match="toy-small, toy-paper are for another scorer"):
        register_family(WrongRecipe())


def test_a_registered_metric_is_in_every_help(toy, capsys):
    from experiments.flickr8k_kcca import build_parser as job_parser
    from neural.score import build_parser as score_parser
    from neural.train_scorer import build_parser as train_parser

    assert "TOY-S" in scorer_names() and "toy-s" in metric_names()
    assert "TOY-S" in job_parser().format_help()
    assert "  toy-s " in score_parser().format_help() and "sigmoid(a cos(c, v) + b)" in score_parser().format_help()
    assert "toy-s" in train_parser().format_help()


def test_a_registered_metric_trains_saves_and_scores_through_the_command_lines(toy, tiny_everywhere, tmp_path,
                                                                            write_score_inputs, capsys):
    from neural.saved import load_scorer, save_scorer
    from neural.score import main as score_main
    from neural.train_scorer import main as train_main

    imgs, cands = write_score_inputs(tmp_path)
    cache = ["--cache-dir", str(tmp_path / "cache"), "--quiet", "--device", "cpu"]
    # neural.train_scorer --metric toy-s: trained on the teaching set and saved
    assert train_main(["--metric", "toy-s", "--out", str(tmp_path / "toy"), *cache]) == 0
    cfg = json.loads((tmp_path / "toy" / "scorer.json").read_text())
    assert cfg["metric"] == "TOY-S" and cfg["needs_parent"] is True
    # neural.score --metric toy-s: trained in the run on the tiny CLIP, then the saved one with its parent
    out_live, out_saved = tmp_path / "live.json", tmp_path / "saved.json"
    assert score_main(["--candidates", str(cands), "--images", str(imgs), "--metric", "toy-s",
                       "--clip-model", "tiny", "--out", str(out_live), *cache]) == 0
    assert score_main(["--candidates", str(cands), "--images", str(imgs), "--scorer", str(tmp_path / "toy"),
                       "--clip-model", "tiny", "--out", str(out_saved), *cache]) == 0
    live, saved = json.loads(out_live.read_text()), json.loads(out_saved.read_text())
    assert live["score"] == saved["score"] == "TOY-S" and live["per_instance"] == saved["per_instance"]
    assert saved["scorer"]["metric"] == "TOY-S" and 0.0 < saved["mean"] < 1.0
    # save and reload: bit-identical scores; the parent is checked
    scorer = load_scorer(tmp_path / "toy", tiny_everywhere)
    images = [np.full((32, 32, 3), 40 * k, np.uint8) for k in range(3)]
    texts = ["a red ball", "two cubes", "a dog"]
    again = load_scorer(save_scorer(scorer, tmp_path / "toy2"), tiny_everywhere)
    assert np.array_equal(scorer.score(images, texts), again.score(images, texts))
    assert (scorer.a, scorer.b) == (again.a, again.b)


def test_a_registered_metric_runs_through_the_main_job(toy, tiny_everywhere, tmp_path, capsys):
    from experiments.flickr8k_kcca import main

    out = tmp_path / "out"
    assert main(["--teaching-size", "60", "--systems", "none", "--metrics", "toy-s,CLIP-S", "--clip-model", "tiny",
                 "--no-progress", "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]) == 0
    results = (out / "results.json").read_text()
    assert "TOY-S" in results and "toy-small" in results   # its retrieval row and its recipe


def test_an_unregistered_metric_is_refused_by_the_main_job(tmp_path, capsys):
    from experiments.flickr8k_kcca import main

    assert main(["--teaching-size", "60", "--systems", "none", "--metrics", "toy-s", "--no-progress",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]) == 2
    assert "unknown metrics: toy-s" in capsys.readouterr().err
