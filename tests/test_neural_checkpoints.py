"""Weight files: round trips through every supported format, unsafe pickles refused, offline errors,
architecture mismatches, precision fallback and provenance."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch

from neural.architectures import CUSTOM_MODEL_CONFIGS
from neural.backbone import load_backbone
from neural.checkpoints import (
    MissingDependencyError,
    MissingWeightsError,
    UnsafeCheckpointError,
    WeightsError,
    read_state_dict,
    save_state_dict,
)

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(123)
    return load_backbone("itr-tiny-clip", None, device="cpu", show_progress=False)


@pytest.fixture(scope="module")
def probe():
    rng = np.random.default_rng(5)
    imgs = [rng.integers(0, 256, (120, 160, 3), dtype=np.uint8) for _ in range(3)]
    texts = ["a red circle left of a blue square", "a striped star on the grass", "x"]
    return imgs, texts


def _outputs(bb, probe):
    imgs, texts = probe
    return bb.encode_images(imgs), bb.encode_texts(texts)


@pytest.mark.parametrize("fmt,suffix", [
    ("state_dict", ".pt"),                 # OpenAI-style plain state dict
    ("open_clip-checkpoint", ".pt"),       # open_clip training checkpoint ("module." prefixes)
    ("safetensors", ".safetensors"),       # open_clip_model.safetensors
    ("pacs", ".pth"),                      # PAC-S release: {'state_dict': ...} via torch.save
])
def test_round_trip_identical_outputs(tiny, probe, tmp_path, fmt, suffix):
    p = save_state_dict(tiny.model, tmp_path / f"w{suffix}", fmt)
    sd, got_fmt = read_state_dict(p)
    assert got_fmt == fmt
    assert set(sd) == set(tiny.model.state_dict())
    bb = load_backbone("itr-tiny-clip", p, device="cpu", show_progress=False)
    a_img, a_txt = _outputs(tiny, probe)
    b_img, b_txt = _outputs(bb, probe)
    assert torch.equal(a_img, b_img) and torch.equal(a_txt, b_txt)
    assert len(bb.weights_id) == 16 and bb.name.endswith(p.name)


def test_openai_torchscript_archive_and_extra_keys(tiny, probe, tmp_path, monkeypatch):
    # an OpenAI release .pt is a TorchScript archive: it can carry code, so it is read with
    # torch.jit.load only when trusted (argument or $ITR_TRUST_TORCHSCRIPT), and refused otherwise
    p = tmp_path / "ViT-tiny.pt"
    torch.jit.script(tiny.model).save(str(p))
    monkeypatch.delenv("ITR_TRUST_TORCHSCRIPT", raising=False)
    with pytest.raises(UnsafeCheckpointError, match=r"TorchScript archive.*ITR_TRUST_TORCHSCRIPT=1.*safetensors"):
        read_state_dict(p)
    with pytest.raises(UnsafeCheckpointError, match="ViT-tiny.pt"):
        load_backbone("itr-tiny-clip", p, device="cpu", show_progress=False)
    monkeypatch.setenv("ITR_TRUST_TORCHSCRIPT", "1")
    with pytest.raises(UnsafeCheckpointError):
        read_state_dict(p, trust_torchscript=False)   # the argument wins over the environment
    sd, fmt = read_state_dict(p)
    assert fmt == "torchscript"
    monkeypatch.delenv("ITR_TRUST_TORCHSCRIPT")
    assert read_state_dict(p, trust_torchscript=True)[1] == "torchscript"
    bb = load_backbone("itr-tiny-clip", p, device="cpu", show_progress=False, trust_torchscript=True)
    assert all(torch.equal(x, y) for x, y in zip(_outputs(tiny, probe), _outputs(bb, probe)))
    # OpenAI state dicts carry non-parameter entries, which are dropped
    sd = dict(tiny.model.state_dict())
    sd.update(input_resolution=torch.tensor(48), context_length=torch.tensor(32), vocab_size=torch.tensor(49408))
    q = save_state_dict(sd, tmp_path / "openai_sd.pt", "state_dict")
    bb2 = load_backbone("itr-tiny-clip", q, device="cpu", show_progress=False)
    assert torch.equal(_outputs(tiny, probe)[1], _outputs(bb2, probe)[1])


def test_architecture_inferred_from_openai_layout(tiny, probe, tmp_path):
    p = save_state_dict(tiny.model, tmp_path / "w.pt", "state_dict")
    bb = load_backbone("auto", p, device="cpu", show_progress=False)
    x = tiny.preprocess_images(probe[0])
    with torch.no_grad():
        assert torch.equal(bb.model.encode_image(x), tiny.model.encode_image(x))
        tok = tiny.tokenize(probe[1])
        assert torch.equal(bb.model.encode_text(tok), tiny.model.encode_text(tok))


class Payload:
    """Unpickling this would touch a marker file: proof that nothing was executed."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_pickle_payload_is_refused(tiny, tmp_path):
    marker = tmp_path / "executed"
    p = tmp_path / "evil.pt"
    torch.save({"state_dict": tiny.model.state_dict(), "extra": Payload(marker)}, p)
    with pytest.raises(UnsafeCheckpointError, match="unpickling"):
        read_state_dict(p)
    with pytest.raises(UnsafeCheckpointError, match="safetensors"):
        load_backbone("itr-tiny-clip", p, device="cpu")
    assert not marker.exists()
    # a plain (non-zip) pickle file with a payload is refused as well
    q = tmp_path / "evil.pkl.pt"
    q.write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(WeightsError):
        read_state_dict(q)
    assert not marker.exists()


def test_offline_missing_weights_error_names_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(MissingWeightsError) as e:
        load_backbone("ViT-B-32", "openai", allow_download=False, cache_dir=str(tmp_path))
    msg = str(e.value)
    assert "ViT-B-32/openai" in msg and "--clip-pretrained" in msg
    monkeypatch.setenv("ITR_OFFLINE", "1")   # the environment switch works the same way
    with pytest.raises(MissingWeightsError):
        load_backbone("ViT-B-32", "openai", cache_dir=str(tmp_path))
    with pytest.raises(MissingWeightsError, match="not found"):
        load_backbone("ViT-B-32", str(tmp_path / "nope.pt"))
    with pytest.raises(ValueError, match="known tag"):
        load_backbone("ViT-B-32", "no-such-tag", allow_download=False)


def test_unreachable_download_host_fails_fast_and_an_unknown_architecture_is_named(tmp_path, monkeypatch):
    """Downloads allowed but no network: one connection probe, then MissingWeightsError (no minute of
    huggingface_hub retries); the download itself is never attempted.  An unknown model name is reported
    as such (with close matches), before any tag lookup."""
    import socket

    import open_clip.pretrained

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for v in ("ITR_OFFLINE", "HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(v, raising=False)
    probed = []

    def no_network(address, timeout=None, *a, **k):
        probed.append(address)
        raise OSError("network is unreachable")

    def never(*a, **k):
        raise AssertionError("download attempted")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(open_clip.pretrained, "download_pretrained", never)
    with pytest.raises(MissingWeightsError, match=r"no network: cannot reach huggingface.co:443"):
        load_backbone("ViT-B-32", "openai", cache_dir=str(tmp_path))
    assert probed == [("huggingface.co", 443)]
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example:8443")
    with pytest.raises(MissingWeightsError, match=r"hf-mirror.example:8443"):
        load_backbone("ViT-B-32", "openai", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"unknown CLIP architecture 'ViT-B-23' \(did you mean \['ViT-B-32'"):
        load_backbone("ViT-B-23", "openai", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="unknown CLIP architecture 'NoSuchModel'"):
        load_backbone("NoSuchModel", "openai", cache_dir=str(tmp_path))


def test_hugging_face_text_tower_without_transformers_names_the_package(tmp_path, monkeypatch):
    """SigLIP-style architectures tokenise through transformers: its absence is reported by name, before
    any weight download, by load_backbone and create_architecture alike; CLIP-BPE ones are unaffected."""
    import sys

    from neural.architectures import create_architecture, hf_text_requirements

    assert hf_text_requirements("ViT-B-16-SigLIP") == ["timm/ViT-B-16-SigLIP"]
    assert hf_text_requirements("ViT-B-32") == [] and hf_text_requirements("itr-tiny-clip") == []
    monkeypatch.setitem(sys.modules, "transformers", None)   # as if not installed
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    calls = []
    import open_clip.pretrained

    monkeypatch.setattr(open_clip.pretrained, "download_pretrained", lambda *a, **k: calls.append(a))
    for call in (lambda: load_backbone("ViT-B-16-SigLIP", "webli", allow_download=True, cache_dir=str(tmp_path)),
                 lambda: create_architecture("ViT-B-16-SigLIP")):
        with pytest.raises(MissingDependencyError, match="pip install transformers") as e:
            call()
        assert "ViT-B-16-SigLIP" in str(e.value)
    assert calls == []                                         # nothing was fetched first
    with pytest.raises(MissingWeightsError) as e:              # a CLIP-BPE architecture: the weights error
        load_backbone("ViT-B-32", "openai", allow_download=False, cache_dir=str(tmp_path))
    assert not isinstance(e.value, MissingDependencyError)


def test_hugging_face_tokenizer_is_not_fetched_when_downloads_are_off(tiny, monkeypatch):
    """With $ITR_OFFLINE (or allow_download=False) a SigLIP-style HF tokenizer is loaded with
    local_files_only=True (transformers then never contacts the Hub); with downloads allowed it is not."""
    import sys
    import types

    import open_clip

    from neural.architectures import create_architecture

    calls = []

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(name, *args, **kwargs):
            calls.append((name, dict(kwargs)))
            if kwargs.get("local_files_only"):
                raise OSError(f"{name} is not in the local cache")
            return types.SimpleNamespace()

    stub = types.ModuleType("transformers")
    stub.AutoTokenizer = AutoTokenizer
    monkeypatch.setitem(sys.modules, "transformers", stub)
    # only the tokenizer matters: skip building the (large) SigLIP towers
    monkeypatch.setattr(open_clip, "create_model", lambda *a, **k: tiny.model)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    monkeypatch.setenv("ITR_OFFLINE", "1")
    with pytest.raises(MissingDependencyError, match="downloads are off"):
        create_architecture("ViT-B-16-SigLIP")
    assert calls[-1] == ("timm/ViT-B-16-SigLIP", {"cache_dir": None, "local_files_only": True})

    monkeypatch.delenv("ITR_OFFLINE")
    with pytest.raises(MissingDependencyError, match="ViT-B-16-SigLIP"):
        create_architecture("ViT-B-16-SigLIP", allow_download=False)
    assert calls[-1][1].get("local_files_only") is True

    create_architecture("ViT-B-16-SigLIP", allow_download=True)
    assert "local_files_only" not in calls[-1][1]
    # load_backbone passes its own allow_download on (random init: no weights involved)
    with pytest.raises(MissingDependencyError):
        load_backbone("ViT-B-16-SigLIP", None, allow_download=False, device="cpu", show_progress=False)
    assert calls[-1][1].get("local_files_only") is True
    # CLIP-BPE architectures never get the HF-only keyword (SimpleTokenizer would reject it)
    _, _, tok = create_architecture("ViT-B-32", allow_download=False)
    assert type(tok).__name__ == "SimpleTokenizer" and len(calls) == 4


def test_weights_file_of_an_openai_architecture_warns_about_the_activation(tiny, tmp_path, monkeypatch):
    """A bare file for an architecture OpenAI released cannot tell QuickGELU from GELU: say so, unless the
    caller chose (quick_gelu given, a *-quickgelu name) or the file is known (PAC-S names, TorchScript)."""
    import warnings

    import neural.backbone as nb

    hint = nb.activation_hint("ViT-B-32")
    assert "quick_gelu=True" in hint and "ViT-B-32-quickgelu" in hint
    for quiet in ("ViT-B-32-quickgelu", "ViT-H-14", "itr-tiny-clip", "no-such-arch"):
        assert nb.activation_hint(quiet) is None, quiet
    p = save_state_dict(tiny.model, tmp_path / "renamed.safetensors")
    monkeypatch.setattr(nb, "activation_hint", lambda arch: f"{arch}: activation unknown")
    with pytest.warns(UserWarning, match=r"renamed\.safetensors: itr-tiny-clip: activation unknown"):
        load_backbone("itr-tiny-clip", p, device="cpu", show_progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for qg in (True, False):                               # an explicit choice is never second-guessed
            load_backbone("itr-tiny-clip", p, device="cpu", quick_gelu=qg, show_progress=False)


def test_architecture_mismatch_is_explained(tiny, tmp_path, monkeypatch):
    import copy

    cfg = copy.deepcopy(CUSTOM_MODEL_CONFIGS["itr-tiny-clip"])
    cfg["text_cfg"]["width"] = 64
    cfg["text_cfg"]["heads"] = 1
    monkeypatch.setitem(CUSTOM_MODEL_CONFIGS, "itr-tiny-clip-narrow", cfg)
    p = save_state_dict(tiny.model, tmp_path / "w.safetensors")
    with pytest.raises(WeightsError, match="do not match the architecture"):
        load_backbone("itr-tiny-clip-narrow", p, device="cpu")


def test_precision_and_provenance(tiny):
    with pytest.warns(UserWarning, match="fp16"):
        bb = load_backbone("itr-tiny-clip", None, device="cpu", precision="fp16", show_progress=False)
    assert bb.precision == "fp32"
    prov = tiny.provenance()
    for k in ("torch", "open_clip", "numpy", "device", "precision", "backbone", "weights_id"):
        assert k in prov
    assert prov["precision"] == "fp32" and prov["device"] == "cpu"
    with pytest.raises(ValueError, match="train_tiny_clip"):
        load_backbone("tiny", None)


def test_same_weights_other_activation_never_share_cached_embeddings(tiny, probe, tmp_path):
    """QuickGELU vs GELU over the same weights file: different encoders, so different cache identities
    and text tables (a shared key would hand one model's embeddings to the other)."""
    p = save_state_dict(tiny.model, tmp_path / "w.safetensors", "safetensors")
    quick = load_backbone("itr-tiny-clip", p, device="cpu", show_progress=False, quick_gelu=True)
    plain = load_backbone("itr-tiny-clip", p, device="cpu", show_progress=False, quick_gelu=False)
    assert quick.weights_id == plain.weights_id
    assert quick.cache_identity() != plain.cache_identity()
    q_txt = quick.encode_texts(probe[1])
    p_txt = plain.encode_texts(probe[1])
    assert plain.n_text_encodes == len(probe[1])               # not served from quick's table
    with torch.inference_mode():                                  # the reference: each model run directly
        direct = plain.model.encode_text(plain.tokenize(probe[1]))
    assert torch.allclose(p_txt, torch.nn.functional.normalize(direct.float(), dim=-1), atol=1e-6)
    assert not torch.allclose(q_txt, p_txt, atol=1e-5)
    same = load_backbone("itr-tiny-clip", p, device="cpu", show_progress=False, quick_gelu=True)
    assert same.cache_identity() == quick.cache_identity()     # equal settings still share


def test_documented_pacs_weight_files_get_quickgelu():
    """Every documented PAC-S weights file (``--clip-model X --clip-pretrained FILE`` or
    ``load_backbone("X", "FILE")``) builds the activation the weights were trained with: the file keeps
    its release name (:data:`PACS_CHECKPOINTS` sets QuickGELU / GELU), or X says it (*-quickgelu).  A
    renamed ViT-B/32 file with plain ViT-B-32 would build GELU and change every score."""
    import re
    from pathlib import Path

    from neural.pretrained import PACS_CHECKPOINTS

    root = Path(__file__).resolve().parent.parent
    pats = (re.compile(r"--clip-model\s+(\S+)\s+--clip-pretrained\s+(\S+\.(?:pth|pt|bin|ckpt|safetensors))\b"),
            re.compile(r"load_backbone\(\s*[\"']([^\"']+)[\"']\s*,\s*[\"']([^\"']+\.(?:pth|pt))[\"']"))
    found = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8").replace("\\\n", " ")
        for pat in pats:
            for model, file in pat.findall(text):
                name = Path(file).name
                if "pacs" not in name.lower() and name not in PACS_CHECKPOINTS:
                    continue
                found.append((doc.name, model, name))
                if name in PACS_CHECKPOINTS:
                    assert PACS_CHECKPOINTS[name]["model"] == model.replace("-quickgelu", ""), (doc.name, file)
                else:
                    assert model.endswith("-quickgelu"), f"{doc.name}: {model} with {file} builds GELU"
    assert any(doc == "README.md" for doc, _, _ in found), found


def test_clear_text_memo_makes_the_next_call_encode_again(tiny):
    tiny.clear_text_memo()                                    # texts other tests may have encoded
    n0 = tiny.n_text_encodes
    a = tiny.encode_texts(["a red square", "a blue circle"])
    tiny.encode_texts(["a red square", "a blue circle"])
    assert tiny.n_text_encodes - n0 == 2                      # the second call is served from the table
    tiny.clear_text_memo()
    b = tiny.encode_texts(["a red square", "a blue circle"])
    assert tiny.n_text_encodes - n0 == 4
    torch.testing.assert_close(a, b)


def test_hugging_face_text_tower_config_is_read_with_the_hub_off_when_downloads_are_off(monkeypatch):
    """open_clip reads an HF text tower's config with AutoConfig.from_pretrained and none of our keywords:
    with downloads off the Hub is switched off around create_model (environment and huggingface_hub's
    constant), restored afterwards; a config that is not cached is a MissingDependencyError saying so."""
    import huggingface_hub.constants as hub_constants
    import open_clip

    import neural.architectures as na

    arch = "xlm-roberta-base-ViT-B-32"
    assert na.text_config(arch).get("hf_model_name")
    monkeypatch.setattr(na, "require_architecture_dependencies", lambda a: None)   # as if installed
    for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "ITR_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    seen = []

    def create_model(name, **kw):
        seen.append((os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"),
                     hub_constants.HF_HUB_OFFLINE))
        raise OSError(f"We couldn't connect to 'https://huggingface.co' to load the config of {name}")

    monkeypatch.setattr(open_clip, "create_model", create_model)
    before = hub_constants.HF_HUB_OFFLINE
    with pytest.raises(MissingDependencyError, match=r"text-tower configuration .* downloads are off"):
        na.create_architecture(arch, allow_download=False)
    assert seen == [("1", "1", True)]
    assert hub_constants.HF_HUB_OFFLINE == before and "HF_HUB_OFFLINE" not in os.environ
    assert "TRANSFORMERS_OFFLINE" not in os.environ
    with pytest.raises(MissingDependencyError, match="could not be downloaded"):
        na.create_architecture(arch, allow_download=True)
    assert seen[1] == (None, None, before)                     # downloads allowed: nothing switched off


def test_a_tags_torchscript_file_is_trusted_only_with_the_checksum_its_url_names(tiny, probe, tmp_path,
                                                                                    monkeypatch):
    """A pretrained tag's file found in the cache is loaded as TorchScript only when its SHA-256 is the
    one the tag's OpenAI URL names (as open_clip checks on download); another file at that path is
    ignored with a warning, so it is never deserialised."""
    import open_clip

    from neural.checkpoints import file_sha256

    monkeypatch.delenv("ITR_TRUST_TORCHSCRIPT", raising=False)
    cache = tmp_path / "clip"
    cache.mkdir()
    p = cache / "ViT-tiny.pt"
    torch.jit.script(tiny.model).save(str(p))
    real = open_clip.get_pretrained_cfg

    def tag_cfg(sha):
        url = f"https://openaipublic.azureedge.net/clip/models/{sha}/ViT-tiny.pt"
        return lambda model, tag: ({"url": url, "quick_gelu": True} if tag == "test-tag" else real(model, tag))

    genuine = file_sha256(p)
    monkeypatch.setattr(open_clip, "get_pretrained_cfg", tag_cfg(genuine))
    bb = load_backbone("itr-tiny-clip", "test-tag", cache_dir=str(cache), allow_download=False, device="cpu",
                       show_progress=False)
    assert all(torch.equal(x, y) for x, y in zip(_outputs(tiny, probe), _outputs(bb, probe)))
    assert bb.weights_id == genuine[:16]
    # the bytes loaded are the bytes checked: another archive is refused even when its name, size and
    # modification time are the genuine file's (nothing remembers an earlier hash)
    other = tmp_path / "other.pt"
    original = p.read_bytes()
    tampered = bytearray(original)
    tampered[len(tampered) // 2] ^= 0xFF      # same size, one byte of the weights changed
    other.write_bytes(bytes(tampered))
    with pytest.raises(UnsafeCheckpointError, match="TorchScript archive"):
        read_state_dict(other, torchscript_sha256=genuine)
    assert read_state_dict(p, torchscript_sha256=genuine)[1] == "torchscript"
    st = p.stat()
    p.write_bytes(other.read_bytes())
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.warns(UserWarning, match="SHA-256 does not match"):
        with pytest.raises(MissingWeightsError, match="not in the local cache"):
            load_backbone("itr-tiny-clip", "test-tag", cache_dir=str(cache), allow_download=False, device="cpu",
                          show_progress=False)
    p.write_bytes(original)
    assert file_sha256(p) == genuine            # the genuine file back
    monkeypatch.setattr(open_clip, "get_pretrained_cfg", tag_cfg("0" * 64))
    with pytest.warns(UserWarning, match="SHA-256 does not match"):
        with pytest.raises(MissingWeightsError, match="not in the local cache"):
            load_backbone("itr-tiny-clip", "test-tag", cache_dir=str(cache), allow_download=False, device="cpu",
                          show_progress=False)
    # a tag whose file comes without an OpenAI checksum (a local "file" entry, an 8-digit mlfoundations
    # suffix) is found but, being TorchScript, refused
    for cfg in ({"file": str(p), "quick_gelu": True},
                {"url": "https://github.com/mlfoundations/open_clip/releases/download/v0.2/ViT-tiny-"
                        f"{file_sha256(p)[:8]}.pt", "quick_gelu": True}):
        if "url" in cfg:
            q = cache / cfg["url"].rsplit("/", 1)[1]
            q.write_bytes(p.read_bytes())
        monkeypatch.setattr(open_clip, "get_pretrained_cfg",
                            lambda model, tag, _c=cfg: _c if tag == "test-tag" else real(model, tag))
        with pytest.raises(UnsafeCheckpointError, match="TorchScript archive"):
            load_backbone("itr-tiny-clip", "test-tag", cache_dir=str(cache), allow_download=False, device="cpu",
                          show_progress=False)


def test_safetensors_is_recognised_by_its_header_and_torch_advice_is_not_quoted(tiny, tmp_path):
    from neural.checkpoints import is_safetensors_file

    p = save_state_dict(tiny.model, tmp_path / "w.safetensors", "safetensors")
    renamed = tmp_path / "w.pt"
    renamed.write_bytes(p.read_bytes())
    assert is_safetensors_file(renamed) and read_state_dict(renamed)[1] == "safetensors"
    q = save_state_dict(tiny.model, tmp_path / "sd.pt", "state_dict")
    assert not is_safetensors_file(q) and read_state_dict(q)[1] == "state_dict"
    evil = tmp_path / "evil.pt"
    torch.save({"x": Payload(tmp_path / "marker")}, evil)
    with pytest.raises(UnsafeCheckpointError) as e:
        read_state_dict(evil)
    assert "Unsupported global" in str(e.value) and "weights_only` set to `False`" not in str(e.value)


@pytest.mark.parametrize("fmt", ["safetensors", "state_dict"])
def test_weights_that_cannot_score_are_refused_naming_the_file_and_tensor(fmt, tmp_path):
    """int8 weights (every score 0) and a NaN or infinity (every score nan) are refused when read, whatever
    the file format; integer scalars (OpenAI's ``context_length`` …) are not weights and pass."""
    from neural.checkpoints import WeightsError, read_state_dict, save_state_dict
    from neural.weights_check import safetensors_problem

    good = {"visual.proj": torch.randn(4, 3), "context_length": torch.tensor(77)}
    ext = "safetensors" if fmt == "safetensors" else "pt"
    p = save_state_dict(good, tmp_path / f"good.{ext}", fmt=fmt)
    assert "visual.proj" in read_state_dict(p)[0]
    cases = {"int8": {**good, "visual.proj": good["visual.proj"].to(torch.int8)},
             "nan": {**good, "visual.proj": good["visual.proj"].clone().fill_(float("nan"))},
             "inf": {**good, "visual.proj": good["visual.proj"].clone().fill_(float("-inf"))}}
    for name, sd in cases.items():
        bad = save_state_dict(sd, tmp_path / f"{name}.{ext}", fmt=fmt)
        needle = "must be floating point" if name == "int8" else "holds NaN or infinite values"
        with pytest.raises(WeightsError, match=rf"{bad.name}: tensor 'visual.proj' .*{needle}"):
            read_state_dict(bad)
        if fmt == "safetensors":
            assert needle in safetensors_problem(bad)
