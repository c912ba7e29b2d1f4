"""Saved scorers (neural.saved): PAC-S, L-CLIPScore, BRIDGE and SPECS saved to safetensors + JSON, loaded
back with exactly the same scores; damaged files and wrong parents refused with the file named; and
``python -m neural.score --scorer`` on each."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from neural.saved import (
    CONFIG_NAME,
    FORMAT_VERSION,
    WEIGHTS_NAME,
    ScorerFormatError,
    load_scorer,
    read_scorer_config,
    save_scorer,
)

METRICS = ("PAC-S", "L-CLIPScore", "BRIDGE", "SPECS")


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def trained(random_tiny_backbone, small_teaching_set):
    """One very small trained scorer of each kind on the tiny architecture (random weights) and the small
    teaching set (a few steps each)."""
    from neural.bridge import BRIDGE, BridgeConfig
    from neural.lclip import LCLIPConfig, LCLIPScore, train_lclip
    from neural.pacs import PACScore, PACSFinetuneConfig, finetune_pacs, teaching_tuples
    from neural.specs import SPECSConfig, SPECSScore, train_specs

    torch.set_num_threads(1)
    bb, ts = random_tiny_backbone, small_teaching_set
    pacs = finetune_pacs(bb, teaching_tuples(ts, "train", max_images=16), teaching_tuples(ts, "dev", max_images=6),
                         PACSFinetuneConfig(max_iters=3, eval_every=3, batch_size=8, lr=1e-2, restore_best=False),
                         show_progress=False)
    ids = list(ts.split("train"))[:12]
    caps = [c for i in ids for c in ts.captions_of(i)]
    student = train_lclip(bb, [ts.load_image(i) for i in ids], [c.text for c in caps],
                          [(ids.index(c.image_id), j) for j, c in enumerate(caps)],
                          LCLIPConfig(stage1_steps=2, stage2_steps=2, batch_size=6), show_progress=False)
    bridge = BRIDGE(bb, BridgeConfig(steps=2, batch_size=6, max_images=12)).fit(ts, show_progress=False)
    specs = train_specs(bb, ts, config=SPECSConfig.for_tiny(steps=2, batch_size=6, max_images=12),
                        show_progress=False)
    return {"PAC-S": PACScore(pacs, reference_based=True), "L-CLIPScore": LCLIPScore(student),
            "BRIDGE": bridge, "SPECS": SPECSScore(specs)}


def _cosines(backbone, images, captions) -> np.ndarray:
    """Image–caption cosines (captions with CLIP-S's prompt), before any clipping."""
    from neural.base import image_embeddings, with_prompt

    return image_embeddings(backbone, images) @ backbone.encode_texts(with_prompt(captions)).numpy().T


@pytest.fixture(scope="module")
def saved(trained, tmp_path_factory):
    root = tmp_path_factory.mktemp("saved")
    return {m: save_scorer(s, root / m.lower()) for m, s in trained.items()}


@pytest.fixture(scope="module")
def probe(small_teaching_set):
    ts = small_teaching_set
    ids = list(ts.split("test"))[:3]
    images = [ts.load_image(i) for i in ids]
    cands = [ts.captions_of(i)[0].text for i in ids]
    refs = [[c.text for c in ts.captions_of(i)[1:3]] for i in ids]
    return ids, images, cands, refs


@pytest.mark.parametrize("metric", METRICS)
def test_reload_gives_identical_scores(metric, trained, saved, probe, random_tiny_backbone):
    _, images, cands, refs = probe
    original = trained[metric]
    parent = random_tiny_backbone if metric in ("PAC-S", "BRIDGE") else None
    loaded = load_scorer(saved[metric], parent, device="cpu")
    assert type(loaded) is type(original) and loaded.name == original.name
    if metric == "PAC-S":   # saved as RefPAC-S (Sarto et al. Eq. 4): references needed
        assert np.array_equal(loaded.score_matrix(images, cands, refs), original.score_matrix(images, cands, refs))
    else:
        assert np.array_equal(loaded.score(images, cands), original.score(images, cands))
        assert np.array_equal(loaded.score_matrix(images, cands), original.score_matrix(images, cands))
    if metric in ("PAC-S", "L-CLIPScore"):   # RefL-CLIPScore: Li et al. Eq. 4
        assert np.array_equal(loaded.score(images, cands, refs), original.score(images, cands, refs))
    bb_new = loaded.clip if metric == "BRIDGE" else loaded.backbone
    bb_old = original.clip if metric == "BRIDGE" else original.backbone
    for k, v in bb_old.model.state_dict().items():
        assert torch.equal(bb_new.model.state_dict()[k], v), k
    assert loaded.cache_identity() == original.cache_identity()
    if metric in ("L-CLIPScore", "SPECS"):   # the parent may also be given (and is then verified)
        again = load_scorer(saved[metric], random_tiny_backbone)
        assert np.array_equal(again.score(images, cands), original.score(images, cands))
    assert bb_new.saved["metric"] == metric and bb_new.saved["path"] == str(saved[metric])


@pytest.mark.parametrize("metric", METRICS)
def test_fp16_storage_halves_the_file_and_loads_the_rounded_weights(metric, trained, saved, probe,
                                                                     random_tiny_backbone, tmp_path):
    """``save_scorer(dtype="float16")``: floating tensors stored as fp16 (about half the bytes), the
    loaded scorer holds exactly the fp16-rounded values (its recorded backbone hash is that state's),
    and its scores stay within fp16 rounding of the fp32 scorer's."""
    from neural.checkpoints import state_dict_sha256
    from safetensors.torch import load_file

    _, images, cands, refs = probe
    folder = save_scorer(trained[metric], tmp_path / "half", dtype="float16")
    cfg = read_scorer_config(folder)
    assert cfg["weights"]["dtype"] == "float16" and read_scorer_config(saved[metric])["weights"]["dtype"] == "float32"
    stored = load_file(str(folder / WEIGHTS_NAME))
    assert all(t.dtype == torch.float16 for t in stored.values() if t.is_floating_point())
    full = (saved[metric] / WEIGHTS_NAME).stat().st_size
    assert (folder / WEIGHTS_NAME).stat().st_size < 0.6 * full
    parent = random_tiny_backbone if metric in ("PAC-S", "BRIDGE") else None
    loaded = load_scorer(folder, parent, device="cpu")
    trainable = loaded.trainable_modules() if metric == "BRIDGE" else loaded.backbone.model
    own = trainable.state_dict()
    for k, v in stored.items():
        assert torch.equal(own[k], v.to(own[k].dtype)), k
    if metric != "BRIDGE":
        assert state_dict_sha256(own) == cfg["backbone"]["state_dict_sha256"]
        assert cfg["backbone"]["state_dict_sha256"] != read_scorer_config(saved[metric])["backbone"]["state_dict_sha256"]
    args = (images, cands, refs) if metric == "PAC-S" else (images, cands)
    half, exact = loaded.score_matrix(*args), trained[metric].score_matrix(*args)
    assert np.allclose(half, exact, atol=2e-2)
    if metric == "L-CLIPScore":   # w·max(cos, 0): a random tiny student's cosines can all be ≤ 0 (every score
        half, exact = (_cosines(s.backbone, images, cands) for s in (loaded, trained[metric]))   # 0): compare them
        assert np.allclose(half, exact, atol=2e-2)
    assert not np.array_equal(half, exact)
    with pytest.raises(ValueError, match="dtype must be one of"):
        save_scorer(trained[metric], tmp_path / "bad", dtype="bfloat16")


def test_a_killed_save_leaves_the_previous_scorer_whole(trained, probe, tmp_path, monkeypatch):
    """Both files are written beside their final names and renamed: a save that dies while writing the
    weights leaves the folder's earlier scorer loadable, with its own scores."""
    import neural.checkpoints

    _, images, cands, _ = probe
    folder = save_scorer(trained["SPECS"], tmp_path / "specs")
    before = (folder / WEIGHTS_NAME).read_bytes()

    def dies(tensors, path, *a, **k):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(neural.checkpoints, "save_file", dies)
    with pytest.raises(KeyboardInterrupt):
        save_scorer(trained["SPECS"], folder, dtype="float16")
    assert (folder / WEIGHTS_NAME).read_bytes() == before
    assert read_scorer_config(folder)["weights"]["dtype"] == "float32"
    assert np.array_equal(load_scorer(folder).score(images, cands), trained["SPECS"].score(images, cands))


@pytest.mark.parametrize("metric", METRICS)
def test_config_records_recipe_data_and_parent(metric, saved, random_tiny_backbone):
    from neural.checkpoints import state_dict_sha256

    cfg = json.loads((saved[metric] / CONFIG_NAME).read_text())
    assert cfg["metric"] == metric and cfg["format_version"] == FORMAT_VERSION == read_scorer_config(saved[metric])["format_version"]
    for key in ("scorer", "architecture", "recipe", "training_data", "backbone", "parent", "weights", "versions"):
        assert cfg[key], key
    assert cfg["parent"]["state_dict_sha256"] == state_dict_sha256(random_tiny_backbone.model.state_dict())
    assert cfg["parent"]["arch"] == "itr-tiny-clip" and cfg["weights"]["file"] == WEIGHTS_NAME
    assert cfg["needs_parent"] is (metric in ("PAC-S", "BRIDGE"))
    if metric == "PAC-S":   # the delta: the trained projections and temperature only
        assert set(cfg["architecture"]["delta_keys"]) <= {"visual.proj", "text_projection", "logit_scale"}
        assert cfg["architecture"]["delta_keys"] and cfg["recipe"]["lambda_v"] == 0.05
        assert cfg["scorer"]["reference_based"] is True and cfg["training_data"]["n_train"] == 16
    if metric == "BRIDGE":
        assert cfg["bridge"]["template_source"] == "describe" and len(cfg["bridge"]["bank_texts"]) > 12
    if metric == "SPECS":
        assert cfg["architecture"]["stretch"] == {"from": 32, "to": 103, "keep": 8}


def _copy(folder, tmp_path):
    import shutil

    dst = tmp_path / folder.name
    shutil.copytree(folder, dst)
    return dst


@pytest.mark.parametrize("metric", METRICS)
def test_damaged_files_and_wrong_parents_are_refused_naming_the_file(metric, saved, tmp_path,
                                                                    random_tiny_backbone):
    from neural.architectures import create_architecture
    from neural.backbone import backbone_from_model

    parent = random_tiny_backbone
    bad = _copy(saved[metric], tmp_path)
    good = (bad / CONFIG_NAME).read_text()
    cfg = json.loads(good)
    cfg["weights"]["file"] = "../" + WEIGHTS_NAME   # only a file of the scorer's own folder is read
    (bad / CONFIG_NAME).write_text(json.dumps(cfg))
    with pytest.raises(ScorerFormatError, match=rf"{CONFIG_NAME}: weights file '\.\./{WEIGHTS_NAME}' must be a file name"):
        load_scorer(bad, parent)
    (bad / CONFIG_NAME).write_text(good)
    w = bad / WEIGHTS_NAME
    data = bytearray(w.read_bytes())
    data[-3] ^= 0xFF   # one tensor value changed: safetensors reads it, the recorded SHA-256 refuses it
    w.write_bytes(bytes(data))
    with pytest.raises(ScorerFormatError, match=rf"{WEIGHTS_NAME}: the tensors do not have the SHA-256"):
        load_scorer(bad, parent)
    w.write_bytes(b"\x00" * 20)
    with pytest.raises(ScorerFormatError, match=rf"{WEIGHTS_NAME}: not a readable safetensors"):
        load_scorer(bad, parent)
    (bad / CONFIG_NAME).write_text('{"format": "itr-saved-scorer",\n "format_version": }')
    with pytest.raises(ScorerFormatError, match=rf"{CONFIG_NAME}:2: not valid JSON"):
        load_scorer(bad, parent)
    torch.manual_seed(1)
    m, p, t = create_architecture("itr-tiny-clip")
    other = backbone_from_model(m, p, t, name="other", arch="itr-tiny-clip", device="cpu", show_progress=False)
    with pytest.raises(ScorerFormatError, match=rf"{CONFIG_NAME}: the backbone given \(other.*is not the parent"):
        load_scorer(saved[metric], other)
    if metric in ("PAC-S", "BRIDGE"):
        with pytest.raises(ScorerFormatError, match=rf"{CONFIG_NAME}: this {metric} scorer needs the backbone"):
            load_scorer(saved[metric])


def test_only_trained_scorers_save(random_tiny_backbone, tmp_path):
    from neural.clipscore import CLIPScore
    from neural.pacs import PACScore

    with pytest.raises(TypeError, match="cannot save a CLIPScore"):
        save_scorer(CLIPScore(random_tiny_backbone), tmp_path / "x")
    with pytest.raises(ValueError, match="records no parent"):
        save_scorer(PACScore(random_tiny_backbone), tmp_path / "y")
    cfg = tmp_path / "v" / CONFIG_NAME
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"format": "itr-saved-scorer", "format_version": 99}))
    with pytest.raises(ScorerFormatError, match=r"scorer.json: format version 99"):
        read_scorer_config(cfg.parent)


@pytest.fixture(scope="module")
def cli_inputs(tmp_path_factory, random_tiny_backbone, write_score_inputs):
    from neural.checkpoints import save_state_dict

    d = tmp_path_factory.mktemp("cli")
    imgs, _ = write_score_inputs(d, 3, "a red ball next to a cube {k}", (48, 64))
    (d / "refs.json").write_text(json.dumps({f"im{k}": [f"a ball {k}", "a cube"] for k in range(3)}))
    parent = save_state_dict(random_tiny_backbone.model, d / "parent.safetensors")
    return d, imgs, parent


@pytest.mark.parametrize("metric", METRICS)
def test_score_command_with_a_saved_scorer(metric, saved, cli_inputs, trained, tmp_path):
    from corpora.images import read_image
    from neural.score import main

    d, imgs, parent = cli_inputs
    out, summary = tmp_path / "scores.json", tmp_path / "summary.json"
    argv = ["--candidates", str(d / "cands.json"), "--images", str(imgs), "--scorer", str(saved[metric]),
            "--device", "cpu", "--out", str(out), "--summary", str(summary), "--no-cache", "--quiet"]
    if metric in ("PAC-S", "L-CLIPScore"):   # a saved RefPAC-S defaults to refpac-s; L-CLIPScore is asked
        argv += ["--references", str(d / "refs.json")] + (["--metric", "refl-clipscore"] if metric != "PAC-S" else [])
    if metric in ("PAC-S", "BRIDGE"):
        argv += ["--clip-model", "itr-tiny-clip", "--clip-pretrained", str(parent)]
    assert main(argv) == 0
    res, summ = json.loads(out.read_text()), json.loads(summary.read_text())
    key = {"PAC-S": "RefPAC-S", "L-CLIPScore": "RefL-CLIPScore", "BRIDGE": "BRIDGE", "SPECS": "SPECS"}[metric]
    metric_name = {"PAC-S": "refpac-s", "L-CLIPScore": "refl-clipscore", "BRIDGE": "bridge", "SPECS": "specs"}[metric]
    assert summ["metric"] == metric_name and summ["score"] == key and summ["n"] == 3 and "per_instance" not in summ
    assert summ["scorer"]["metric"] == metric and summ["scorer"]["weights_sha256"]
    assert summ["truncated"]["candidates"] == 0
    images = [read_image(imgs / f"im{k}.png") for k in range(3)]
    cands = [f"a red ball next to a cube {k}" for k in range(3)]
    refs = [[f"a ball {k}", "a cube"] for k in range(3)] if metric in ("PAC-S", "L-CLIPScore") else None
    want = trained[metric].score(images, cands, refs)
    got = [res["per_instance"][f"im{k}"][key] for k in range(3)]
    assert np.array_equal(np.float32(got), want)
    assert summ["mean"] == pytest.approx(float(np.mean(want)))


def test_score_command_scorer_mistakes_are_one_error_line(saved, cli_inputs, tmp_path, capsys):
    from neural.score import main, run

    d, imgs, parent = cli_inputs
    base = ["--candidates", str(d / "cands.json"), "--images", str(imgs), "--device", "cpu", "--no-cache", "--quiet"]
    cases = [
        (["--scorer", str(saved["SPECS"]), "--metric", "pac-s"],
         r"^error: --metric pac-s does not fit --scorer .*a saved SPECS scorer \(use specs\)"),
        (["--scorer", str(saved["SPECS"]), "--prompt", "A photo of"], r"^error: --prompt does not apply to --scorer"),
        (["--scorer", str(saved["BRIDGE"])], r"^error: --scorer .*scorer.json: this BRIDGE scorer needs the backbone"),
        (["--scorer", str(tmp_path / "nothing")], r"^error: --scorer .*nothing: saved scorer not found"),
        (["--scorer", str(saved["SPECS"]), "--out", str(saved["SPECS"] / "scorer.json")],
         r"^error: --out .*scorer.json is the --scorer file"),
        (["--scorer", str(saved["SPECS"]), "--out", str(tmp_path / "a.json"), "--summary", str(tmp_path / "a.json")],
         r"^error: --summary .* is the --out file"),
        (["--metric", "bridge", "--clip-model", "itr-tiny-clip", "--clip-pretrained", str(parent)],
         r"^error: --metric bridge is a trained metric: pass a saved scorer"),
    ]
    for extra, pattern in cases:
        with pytest.raises(SystemExit, match=pattern):
            main(base + extra)
    assert run(base + cases[0][0]) == 2 and capsys.readouterr().err.startswith("error: --metric pac-s")
    # BRIDGE is reference-free: references are not used, and the output says so
    out = tmp_path / "b.json"
    assert main(base + ["--scorer", str(saved["BRIDGE"]), "--references", str(d / "refs.json"), "--clip-model",
                        "itr-tiny-clip", "--clip-pretrained", str(parent), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["averages"]) == {"BRIDGE"} and any("reference-free" in n for n in res["notes"])


def test_help_lists_every_metric(capsys):
    from neural.registry import metric_names
    from neural.score import build_parser

    text = build_parser().format_help()
    for m in metric_names():
        assert f"  {m} " in text, m
    assert "no reference-based variant" in text and "--scorer" in text


def test_train_scorer_command_saves_a_loadable_scorer(small_teaching_set, random_tiny_backbone, tmp_path,
                                                      monkeypatch, capsys):
    """``python -m neural.train_scorer`` on the small teaching set and the random tiny CLIP (both patched in:
    the real command trains the tiny CLIP on the full teaching set), then scored from the saved folder."""
    import neural.bridge as bridge_mod
    import neural.train_scorer as ts_mod

    monkeypatch.setattr("corpora.teaching.make_teaching_set", lambda seed=0: small_teaching_set)
    monkeypatch.setattr("neural.factory.backbone_for", lambda *a, **k: random_tiny_backbone)
    small = bridge_mod.BridgeConfig(steps=2, batch_size=6, max_images=12)   # the small recipe: 60 steps
    monkeypatch.setattr(bridge_mod.BridgeConfig, "from_recipe", classmethod(lambda cls, recipe, **kw: small))
    out = tmp_path / "bridge"
    assert ts_mod.main(["--metric", "bridge", "--out", str(out), "--no-cache", "--quiet"]) == 0
    assert "saved BRIDGE" in capsys.readouterr().out
    loaded = load_scorer(out, random_tiny_backbone)
    assert loaded.config.steps == 2 and read_scorer_config(out)["recipe"]["steps"] == 2
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    with pytest.raises(SystemExit, match=r"^error: --out .*busy is a folder with other files \(notes.txt\)"):
        ts_mod.main(["--metric", "specs", "--out", str(tmp_path / "busy")])


@pytest.mark.parametrize("edit, field", [
    (lambda c: c["scorer"].update(w=1e308), "scorer.w"),        # would give Infinity
    (lambda c: c["scorer"].update(w=-5), "scorer.w"),           # would give negative scores
    (lambda c: c["scorer"].update(w=float("nan")), "scorer.w"),
    (lambda c: c["scorer"].update(w="2"), "scorer.w"),
    (lambda c: c["scorer"].update(prompt=7), "scorer.prompt"),
    (lambda c: c["scorer"].update(prompt="A drawing of"), "scorer.prompt"),   # in range: refused by its hash
    (lambda c: c["scorer"].update(w=2.5), "scorer.w"),                        # in range: refused by its hash
    (lambda c: c["architecture"].update(delta_keys=[]), "architecture.delta_keys"),
    (lambda c: c.pop("fields_sha256"), "fields_sha256"),
])
def test_edited_settings_are_refused_naming_the_file_and_the_field(edit, field, saved, tmp_path, random_tiny_backbone):
    """Every scorer.json entry that changes a score is checked: out of range (``w`` not a finite number in
    (0, 100], a prompt that is not text) or changed after saving (its recorded SHA-256); the error names
    the file and the field, for ``read_scorer_config``, ``load_scorer`` and ``neural.score --scorer``."""
    bad = _copy(saved["PAC-S"], tmp_path)
    cfg = json.loads((bad / CONFIG_NAME).read_text())
    edit(cfg)
    (bad / CONFIG_NAME).write_text(json.dumps(cfg))
    pattern = rf"{CONFIG_NAME}: field .*'{field}'"
    with pytest.raises(ScorerFormatError, match=pattern):
        read_scorer_config(bad)
    with pytest.raises(ScorerFormatError, match=pattern):
        load_scorer(bad, random_tiny_backbone)


def test_an_unedited_config_records_the_hash_of_every_scored_field(saved):
    from neural.saved import SCORED_FIELDS, fields_sha256, scorer_identity

    for folder in saved.values():
        cfg = json.loads((folder / CONFIG_NAME).read_text())
        assert cfg["fields_sha256"] == fields_sha256(cfg)
        assert {f for f in SCORED_FIELDS if f in cfg} <= set(cfg["fields_sha256"])
        assert len(scorer_identity(cfg)["config_sha256"]) == 64


@pytest.mark.parametrize("damage", ["nan", "int8"])
def test_weights_that_cannot_score_are_refused_even_with_matching_hashes(damage, saved, tmp_path,
                                                                        random_tiny_backbone):
    """A consistently re-hashed weights file holding NaN or integer weights loads without a hash mismatch,
    and would score nan or 0 everywhere: the content check refuses it, naming the file and the tensor."""
    from safetensors.torch import load_file, save_file

    from neural.checkpoints import state_dict_sha256

    bad = _copy(saved["SPECS"], tmp_path)
    tensors = load_file(str(bad / WEIGHTS_NAME))
    name = next(k for k, t in tensors.items() if t.is_floating_point() and t.ndim >= 2)
    t = tensors[name].clone()
    if damage == "nan":
        t.view(-1)[0] = float("nan")
    else:
        t = t.round().to(torch.int8)
    tensors[name] = t
    save_file(tensors, str(bad / WEIGHTS_NAME))
    cfg = json.loads((bad / CONFIG_NAME).read_text())
    cfg["weights"]["sha256"] = state_dict_sha256(tensors)   # the record made to match the damaged file
    (bad / CONFIG_NAME).write_text(json.dumps(cfg))
    with pytest.raises(ScorerFormatError, match=rf"{WEIGHTS_NAME}: .*{name.split('.')[0]}"):
        load_scorer(bad, random_tiny_backbone)
