"""Several neural backbones in one run of the main job (``--backbone NAME=ARCH[:WEIGHTS]`` and
``SCORER@NAME`` in ``--metrics``): the option syntax and its errors (one ``error:`` line per problem), and
one small run with CLIP-S, PAC-S and SPECS on three backbones given as random-weight checkpoint files of
the tiny architecture in the real layouts (an OpenAI-layout state dict ``.pt``; the PAC-S release format
``{'state_dict': …}`` ``.pth``, scored as it is; an OpenAI-layout ``.pt`` that SPECS fine-tunes from).
The run is in-process so that backbone loads can be counted and their release checked."""
from __future__ import annotations

import gc
import json
import weakref

import numpy as np
import pytest
import torch

from experiments import neural_stage as stage
from experiments.backbone_specs import (
    DEFAULT_BACKBONE,
    BackboneSpec,
    parse_backbone,
    parse_backbones,
    qualify_scorers,
    scorer_groups,
    scorer_label,
    split_scorer,
)
from experiments.flickr8k_kcca import build_parser, main, parse_options
from experiments.options import OptionError
from neural.registry import scorer_names

torch.set_num_threads(2)


# ------------------------------------------------------------------------------------------ option syntax
@pytest.mark.parametrize("value,expected", [
    ("openai=ViT-B-32:openai", BackboneSpec("openai", "ViT-B-32", "openai")),
    ("b32=ViT-B-32", BackboneSpec("b32", "ViT-B-32", None)),            # the openai tag, as --clip-model alone
    ("pacs=ViT-B-32-quickgelu:/data/run:3/clip_ViT-B-32.pth",           # the first ':' splits; the path keeps its own
     BackboneSpec("pacs", "ViT-B-32-quickgelu", "/data/run:3/clip_ViT-B-32.pth")),
    ("t=tiny", BackboneSpec("t", "tiny", None)),
    ("teach=teaching:/w/teaching.safetensors", BackboneSpec("teach", "teaching", "/w/teaching.safetensors")),
    (" sp = auto:/x/specs.pt ", BackboneSpec("sp", "auto", "/x/specs.pt")),
])
def test_backbone_values_split_on_the_first_equals_and_the_first_colon(value, expected):
    assert parse_backbone(value) == expected


@pytest.mark.parametrize("value,match", [
    ("ViT-B-32", "expected NAME=ARCH"),
    ("=ViT-B-32", "the name ''"),
    ("a b=ViT-B-32", "the name 'a b'"),
    ("default=ViT-B-32", "'default' is the backbone of --clip-model"),
    ("x=", "no architecture"),
    ("x=ViT-B-32:", "nothing after ':'"),
    ("x=tiny:/w.pt", "always trained here"),
])
def test_malformed_backbone_values_are_refused(value, match):
    with pytest.raises(ValueError, match=match):
        parse_backbone(value)


def test_names_labels_and_groups():
    specs, problems = parse_backbones(["A=ViT-B-32", "a=ViT-B-16", "b=tiny"])
    assert [s.name for s in specs] == ["A", "b"] and len(problems) == 1 and "already given" in problems[0]
    labels, problems = qualify_scorers(["clip-s@a", "PAC-S", "pac-s@default", "SPECS@B", "CLIP-S@A", "BLEU"],
                                       scorer_names(), specs)
    # case-insensitive, canonical spelling, @default is the unqualified label, each label once
    assert labels == ["CLIP-S@A", "PAC-S", "SPECS@b"]
    assert problems == ["unknown metrics: BLEU (choose from " + ", ".join(scorer_names()) + ")"]
    assert split_scorer("CLIP-S@A") == ("CLIP-S", "A") and split_scorer("BRIDGE") == ("BRIDGE", DEFAULT_BACKBONE)
    assert scorer_label("PAC-S", DEFAULT_BACKBONE) == "PAC-S" and scorer_label("PAC-S", "x") == "PAC-S@x"
    assert scorer_groups(["CLIP-S@A", "PAC-S", "SPECS@A"]) == {"A": ["CLIP-S", "SPECS"], DEFAULT_BACKBONE: ["PAC-S"]}


def test_run_options_carry_the_backbones(tmp_path):
    opts = parse_options(["--backbone", "t=tiny", "--backbone", "u=tiny", "--metrics", "CLIP-S,CLIP-S@t,PAC-S@u",
                          "--systems", "none", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")])
    assert opts.neural == ("CLIP-S", "CLIP-S@t", "PAC-S@u")
    assert [b.name for b in opts.backbones] == ["t", "u"]
    assert list(opts.backbone_specs()) == [DEFAULT_BACKBONE, "t", "u"] and opts.uses_default_backbone
    # a --reference may name a qualified scorer
    opts = parse_options(["--backbone", "t=tiny", "--metrics", "CLIP-S@t", "--systems", "none", "--reference",
                          "clip-s@t", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")])
    assert opts.reference == "CLIP-S@t" and not opts.uses_default_backbone
    assert "--backbone" in build_parser().format_help()


def test_every_problem_is_one_error_line(tmp_path, capsys):
    rc = main(["--backbone", "a=tiny", "--backbone", "a=tiny", "--backbone", "b", "--backbone", "c=tiny:/w.pt",
               "--backbone", "unused=tiny", "--metrics", "CLIP-S@a,PAC-S@zz,SPECS@b,FOO",
               "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")])
    assert rc == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert all(ln.startswith("error: ") for ln in lines), lines
    assert len(lines) == 5, lines
    text = "\n".join(lines)
    for part in ("'a' is already given", "'b': expected NAME=ARCH", "always trained here",
                 "no backbone named 'zz'", "unknown metrics: FOO"):
        assert part in text, (part, text)
    assert "SPECS@b" not in text      # a malformed --backbone b is reported once, not again by the scorer
    # a backbone no scorer uses, on its own
    with pytest.raises(OptionError, match="--backbone unused: no scorer uses it"):
        parse_options(["--backbone", "unused=tiny", "--metrics", "CLIP-S", "--out", str(tmp_path / "o"),
                       "--cache-dir", str(tmp_path / "c")])


def test_missing_weights_file_names_the_backbone(tmp_path):
    with pytest.raises(OptionError, match=r"--backbone w .*missing\.pt: weights file not found"):
        parse_options(["--backbone", f"w=itr-tiny-clip:{tmp_path}/missing.pt", "--metrics", "CLIP-S@w",
                       "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")])


# ------------------------------------------------------------------------------------------- the main job
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Three random-weight tiny-architecture files: OpenAI-layout ``.pt``, PAC-S release ``.pth`` (in a
    folder whose name holds a ':'), OpenAI-layout ``.pt``."""
    from neural.backbone import load_backbone
    from neural.checkpoints import save_state_dict

    d = tmp_path_factory.mktemp("ckpt")
    files = {}
    for seed, name, path, fmt in ((1, "clip", "clip_tiny.pt", "state_dict"),
                                  (2, "pacs", "pacs:release/pacs_tiny.pth", "pacs"),
                                  (3, "specs", "specs_tiny.pt", "state_dict")):
        torch.manual_seed(seed)
        bb = load_backbone("itr-tiny-clip", None, device="cpu", show_progress=False)
        files[name] = save_state_dict(bb.model, d / path, fmt)
    return files


@pytest.fixture()
def counted_loads(monkeypatch):
    """Every backbone load by name; each earlier backbone must be garbage by the time the next loads."""
    import neural.specs

    real = stage.load_neural_backbone
    loads: list[str] = []
    alive: list[weakref.ref] = []

    def load(corpus, options, cache, spec=None):
        gc.collect()
        assert all(r() is None for r in alive), f"a backbone is still referenced when {spec} loads"
        bb = real(corpus, options, cache, spec)
        loads.append(spec.name if spec is not None else DEFAULT_BACKBONE)
        alive.append(weakref.ref(bb))
        return bb

    monkeypatch.setattr(stage, "load_neural_backbone", load)
    real_init = neural.specs.SPECSConfig.__init__

    def short_specs(self, *a, **kw):   # a few SPECS steps on few images: the test checks plumbing
        kw.setdefault("steps", 2)
        kw.setdefault("max_images", 24)
        real_init(self, *a, **kw)

    monkeypatch.setattr(neural.specs.SPECSConfig, "__init__", short_specs)
    return loads


def _run(tmp_path, files, out: str) -> dict:
    argv = ["--teaching-size", "60", "--systems", "none", "--permutations", "20", "--no-progress", "--seed", "0",
            "--backbone", f"clip=itr-tiny-clip:{files['clip']}",
            "--backbone", f"pacs=itr-tiny-clip:{files['pacs']}",
            "--backbone", f"specs=itr-tiny-clip:{files['specs']}",
            "--metrics", "CLIP-S@clip,PAC-S@pacs,SPECS@specs",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / out)]
    assert main(argv) == 0
    return json.loads((tmp_path / out / "results.json").read_text(encoding="utf-8"))


def test_three_backbones_in_one_run(tmp_path, checkpoints, counted_loads, capsys):
    labels = ["CLIP-S@clip", "PAC-S@pacs", "SPECS@specs"]
    r = _run(tmp_path, checkpoints, "first")
    assert counted_loads == ["clip", "pacs", "specs"]           # each loaded exactly once, one at a time

    # every table names the backbone of each neural row
    assert {s for s, v in r["systems"].items() if v["family"] == "neural"} == set(labels)
    assert set(labels) <= set(r["human_correlation"]) and set(labels) == set(r["specificity"])
    assert set(labels) <= set(r["compositionality"])
    bbs = r["backbones"]
    assert list(bbs) == ["clip", "pacs", "specs"] and DEFAULT_BACKBONE not in bbs
    assert [bbs[n]["scorers"] for n in bbs] == [[lb] for lb in labels]
    hashes = [bbs[n]["sha256_12"] for n in bbs]
    assert len(set(hashes)) == 3 and all(len(h) == 12 for h in hashes)
    assert bbs["pacs"]["weights_format"] == "pacs" and bbs["clip"]["weights_format"] == "state_dict"
    assert str(checkpoints["pacs"]) in bbs["pacs"]["weights_source"]
    assert all(bbs[n]["parameters"] > 0 and bbs[n]["architecture"] == "itr-tiny-clip" for n in bbs)
    # a PAC-S release file is PAC-S already: scored as it is; SPECS fine-tunes from its backbone
    named = r["provenance"]["named_backbones"]
    assert named["pacs"]["pacs_backbone"]["weights_id"] == named["pacs"]["backbone"]["weights_id"]
    assert named["specs"]["specs_backbone"]["weights_id"] != named["specs"]["backbone"]["weights_id"]
    md = (tmp_path / "first" / "report.md").read_text(encoding="utf-8")
    assert "## Neural backbones" in md
    for n, h in zip(bbs, hashes):
        assert f"| {n} | itr-tiny-clip |" in md and h in md
    for lb in labels:
        assert f"| {lb} | neural |" in md and f"| {lb} |" in md.split("## Correlation with human judgments")[1]

    # the per-scorer caches are keyed by each backbone's weights
    from corpora import cache as cache_mod

    def keys(namespace):
        return [str(np.load(f)[cache_mod._KEY_FIELD]) for f in sorted((tmp_path / "cache" / namespace).glob("*.npz"))]

    affinity = keys("neural_affinity")
    ids = {n: named[n]["backbone"]["weights_id"] for n in named}
    assert any(ids["clip"] in k for k in affinity) and any(ids["pacs"] in k for k in affinity)
    assert any(ids["specs"] in k for k in keys("specs"))         # SPECS was fine-tuned from the specs file

    # a second run is warm: the neural stage comes from its cache, no backbone is loaded, same numbers
    counted_loads.clear()
    r2 = _run(tmp_path, checkpoints, "second")
    assert counted_loads == []
    for block in ("systems", "human_correlation", "specificity", "backbones"):
        assert r2[block] == r[block], block

    # another scorer list re-runs the stage: each backbone is loaded once more, its scorers come from the
    # per-backbone caches (the same numbers)
    counted_loads.clear()
    argv_r = ["--teaching-size", "60", "--systems", "none", "--permutations", "20", "--no-progress", "--seed", "0",
              "--backbone", f"clip=itr-tiny-clip:{checkpoints['clip']}",
              "--backbone", f"pacs=itr-tiny-clip:{checkpoints['pacs']}",
              "--metrics", "PAC-S@pacs,CLIP-S@clip", "--cache-dir", str(tmp_path / "cache"),
              "--out", str(tmp_path / "third")]
    assert main(argv_r) == 0
    assert counted_loads == ["pacs", "clip"]
    r3 = json.loads((tmp_path / "third" / "results.json").read_text(encoding="utf-8"))
    for lb in ("CLIP-S@clip", "PAC-S@pacs"):
        assert r3["systems"][lb]["annotation"] == r["systems"][lb]["annotation"]
        assert r3["human_correlation"][lb] == r["human_correlation"][lb]


def test_answered_pair_scorer_serves_its_calls_and_rebuilds_otherwise():
    calls = []

    def live(image_ids, candidates, references):
        calls.append(list(candidates))
        return np.arange(len(candidates), dtype=np.float64)

    answers = {stage.call_digest(["i"], ["a cat"], [["x"]]): np.array([7.0])}
    sc = stage.AnsweredPairScorer("CLIP-S@x", {"id": 1}, answers, lambda: {"CLIP-S@x": live})
    assert sc(["i"], ["a cat"], [["x"]])[0] == 7.0 and calls == []
    assert list(sc(["i", "j"], ["a", "b"], [["x"], ["y"]])) == [0.0, 1.0] and calls == [["a", "b"]]


def test_specs_release_file_in_longclip_layout_scores_as_it_is(tmp_path, checkpoints, counted_loads):
    """SPECS@NAME on a SPECS release file (``spec.pt``: Long-CLIP layout, 248 positions, the stretched table
    with its kept first 20 rows) scores with the released weights as they are — no fine-tuning, the 248-token
    context intact — beside CLIP-S on another backbone."""
    from test_longclip_layout import tiny_release

    release = tmp_path / "release"
    release.mkdir()
    spec = release / "spec.pt"
    torch.save(tiny_release(seed=3), spec)       # as the release: torch.save(model.module.state_dict())
    argv = ["--teaching-size", "60", "--systems", "none", "--permutations", "20", "--no-progress", "--seed", "0",
            "--backbone", f"clip=itr-tiny-clip:{checkpoints['clip']}",
            "--backbone", f"specs=itr-tiny-clip:{spec}",
            "--metrics", "CLIP-S@clip,SPECS@specs",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    r = json.loads((tmp_path / "o" / "results.json").read_text(encoding="utf-8"))
    assert counted_loads == ["clip", "specs"]
    bbs = r["backbones"]
    assert bbs["specs"]["weights_format"] == "specs" and bbs["specs"]["scorers"] == ["SPECS@specs"]
    named = r["provenance"]["named_backbones"]["specs"]
    assert named["specs_backbone"]["weights_id"] == named["backbone"]["weights_id"]   # used as released
    assert named["backbone"]["context_length"] == 248
    assert "SPECS@specs" in r["specificity"] and "SPECS@specs" in r["systems"]
