"""Long-CLIP and SPECS release files: the layout detected, loaded into an open_clip CLIP with a 248-token
context whose text forward is Long-CLIP's, and every layout that would need resizing or dropping refused.

The release layout is written here from the release code (beichenzbc/Long-CLIP ``model/model_longclip.py``:
``CLIP.__init__`` with ``load_from_clip=False``, ``build_model``; SPECS saves the same class's
``state_dict()`` in ``train/train_spec.py``): OpenAI key names plus ``positional_embedding_res``, both
positional tables ``(248, text width)``.  The tiny files use the key structure with small widths; the
real ViT-B/16, ViT-L/14 (Long-CLIP-B / -L) and ViT-B/32 (SPECS) layouts are checked as shapes on the
``meta`` device, without allocating them.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from neural.architectures import create_architecture, load_weights_into
from neural.backbone import load_backbone
from neural.checkpoints import (
    LONGCLIP_CONTEXT,
    WeightsLayoutError,
    longclip_positional_table,
    longclip_to_open_clip,
    read_state_dict,
)

torch.set_num_threads(2)

#: (vision width, vision layers, patch, grid, text width, text layers, embed dim) of the releases.
RELEASES = {
    "longclip-B.pt": ("ViT-B-16", (768, 12, 16, 14, 512, 12, 512)),
    "longclip-L.pt": ("ViT-L-14", (1024, 24, 14, 16, 768, 12, 768)),
    "spec.pt": ("ViT-B-32", (768, 12, 32, 7, 512, 12, 512)),
}
#: The tiny layout: itr-tiny-clip's sizes (heads = width // 64, as Long-CLIP's build_model derives them).
TINY = (128, 4, 8, 6, 128, 3, 128)


def release_shapes(vw, vl, patch, grid, tw, tl, embed, vocab=49408, ctx=248) -> dict[str, tuple]:
    """Key -> shape of Long-CLIP's ``CLIP.state_dict()`` for a ViT image tower (from its model code)."""
    def blocks(prefix, w, n):
        out = {}
        for i in range(n):
            p = f"{prefix}transformer.resblocks.{i}."
            out.update({p + "attn.in_proj_weight": (3 * w, w), p + "attn.in_proj_bias": (3 * w,),
                        p + "attn.out_proj.weight": (w, w), p + "attn.out_proj.bias": (w,),
                        p + "ln_1.weight": (w,), p + "ln_1.bias": (w,),
                        p + "mlp.c_fc.weight": (4 * w, w), p + "mlp.c_fc.bias": (4 * w,),
                        p + "mlp.c_proj.weight": (w, 4 * w), p + "mlp.c_proj.bias": (w,),
                        p + "ln_2.weight": (w,), p + "ln_2.bias": (w,)})
        return out
    s = {"visual.class_embedding": (vw,), "visual.positional_embedding": (grid * grid + 1, vw),
         "visual.proj": (vw, embed), "visual.conv1.weight": (vw, 3, patch, patch),
         "visual.ln_pre.weight": (vw,), "visual.ln_pre.bias": (vw,),
         "visual.ln_post.weight": (vw,), "visual.ln_post.bias": (vw,),
         "token_embedding.weight": (vocab, tw), "positional_embedding": (ctx, tw),
         "positional_embedding_res": (ctx, tw), "ln_final.weight": (tw,), "ln_final.bias": (tw,),
         "text_projection": (tw, embed), "logit_scale": ()}
    s.update(blocks("visual.", vw, vl))
    s.update(blocks("", tw, tl))
    return s


def tiny_release(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights in the release layout (tiny sizes); LayerNorm gains near 1, logit scale log(100)."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for k, shape in release_shapes(*TINY).items():
        if k == "logit_scale":
            sd[k] = torch.tensor(4.6052)
        elif ".ln_" in k or k.startswith("ln_") or "ln_final" in k:
            base = 1.0 if k.endswith("weight") else 0.0
            sd[k] = base + 0.05 * torch.randn(shape, generator=g)
        else:
            sd[k] = 0.02 * torch.randn(shape, generator=g)
    sd["positional_embedding"] *= 5           # two clearly different tables
    sd["positional_embedding_res"] *= -3
    return sd


def longclip_encode_text(sd: dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Long-CLIP's ``CLIP.encode_text`` written out from its code, fp32: token embedding + pos ⊙ mask1 +
    pos_res ⊙ mask2, LND residual blocks (nn.MultiheadAttention maths, QuickGELU MLP) under the 248 × 248
    causal mask, ln_final, the output at argmax(token id), times text_projection."""
    w = sd["ln_final.weight"].shape[0]
    heads = w // 64
    mask1 = torch.zeros(248, 1)
    mask1[:20] = 1
    mask2 = torch.zeros(248, 1)
    mask2[20:] = 1
    x = F.embedding(tokens, sd["token_embedding.weight"])
    x = x + sd["positional_embedding"] * mask1 + sd["positional_embedding_res"] * mask2
    x = x.permute(1, 0, 2)
    causal = torch.empty(248, 248).fill_(float("-inf")).triu_(1)
    n_layers = len({k.split(".")[2] for k in sd if k.startswith("transformer.resblocks.")})
    for i in range(n_layers):
        p = f"transformer.resblocks.{i}."
        h = F.layer_norm(x, (w,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"])
        a = F.multi_head_attention_forward(
            h, h, h, w, heads, sd[p + "attn.in_proj_weight"], sd[p + "attn.in_proj_bias"], None, None, False,
            0.0, sd[p + "attn.out_proj.weight"], sd[p + "attn.out_proj.bias"], training=False,
            need_weights=False, attn_mask=causal)[0]
        x = x + a
        h = F.layer_norm(x, (w,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"])
        h = F.linear(h, sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"])
        h = h * torch.sigmoid(1.702 * h)
        x = x + F.linear(h, sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x.permute(1, 0, 2), (w,), sd["ln_final.weight"], sd["ln_final.bias"])
    return x[torch.arange(x.shape[0]), tokens.argmax(dim=-1)] @ sd["text_projection"]


def longclip_tokenize(texts: list[str]) -> torch.Tensor:
    """Long-CLIP's ``tokenize(texts, context_length=77*4-60, truncate=True)``: SOT + BPE + EOT, cut to 248
    with the last kept token replaced by EOT, zero padding."""
    from open_clip.tokenizer import SimpleTokenizer

    tok = SimpleTokenizer()
    out = torch.zeros(len(texts), 77 * 4 - 60, dtype=torch.long)
    for i, t in enumerate(texts):
        ids = [tok.sot_token_id] + tok.encode(t) + [tok.eot_token_id]
        if len(ids) > out.shape[1]:
            ids = ids[:out.shape[1]]
            ids[-1] = tok.eot_token_id
        out[i, :len(ids)] = torch.tensor(ids)
    return out


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    d = tmp_path_factory.mktemp("longclip")
    sd = tiny_release()
    p = d / "longclip-T.pt"
    torch.save(sd, p)                     # as the release: torch.save(model.module.state_dict())
    return sd, p


def test_effective_table_is_the_released_formula(release):
    sd, p = release
    table = longclip_positional_table(sd["positional_embedding"], sd["positional_embedding_res"])
    assert torch.equal(table[:20], sd["positional_embedding"][:20])
    assert torch.equal(table[20:], sd["positional_embedding_res"][20:])
    got, fmt = read_state_dict(p)
    assert fmt == "longclip" and "positional_embedding_res" not in got
    assert torch.equal(got["positional_embedding"], table) and got["positional_embedding"].shape == (248, 128)


@pytest.mark.parametrize("model", ["itr-tiny-clip", "auto"])
def test_release_file_loads_with_248_positions_and_longclip_text_features(release, model):
    sd, p = release
    bb = load_backbone(model, p, device="cpu", show_progress=False)
    assert bb.context_length == LONGCLIP_CONTEXT == 248
    table = sd["positional_embedding"] * (torch.arange(248) < 20)[:, None].float() \
        + sd["positional_embedding_res"] * (torch.arange(248) >= 20)[:, None].float()
    assert torch.equal(bb.model.positional_embedding.detach(), table)        # bit for bit
    assert bb.model.attn_mask.shape == (248, 248)
    texts = ["a dog runs on the grass", "two red cars parked next to a tall building at night"]
    tokens = bb.tokenize(texts)
    assert tokens.shape == (2, 248) and torch.equal(tokens, longclip_tokenize(texts))
    with torch.no_grad():
        ref = longclip_encode_text(sd, tokens)
        ours = bb.model.encode_text(tokens)
    torch.testing.assert_close(ours, ref, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(bb.encode_texts(texts), F.normalize(ref, dim=-1), atol=2e-5, rtol=1e-5)
    # a caption past 248 tokens is cut as Long-CLIP's tokenize(truncate=True) cuts it
    long = " ".join(["word"] * 300)
    assert torch.equal(bb.tokenize([long]), longclip_tokenize([long]))
    assert bb.tokenize([long])[0, 247] == bb.tokenizer.eot_token_id
    assert bb.token_lengths([long]) == [302]


def test_specs_release_on_top_of_longclip(release, tmp_path):
    from neural.specs import SPECSScore

    sd, _ = release
    spec = tmp_path / "spec.pt"
    torch.save({k: v.clone() for k, v in tiny_release(seed=1).items()}, spec)
    got, fmt = read_state_dict(spec)
    assert fmt == "specs" and got["positional_embedding"].shape == (248, 128)
    bb = load_backbone("itr-tiny-clip", spec, device="cpu", show_progress=False)
    assert bb.context_length == 248 and "(specs)" in bb.source
    img = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    s = SPECSScore(bb).score([img], ["a long caption about a cat on a green sofa under a woven blanket"])
    v = bb.encode_images([img])[0]
    t = bb.encode_texts(["a long caption about a cat on a green sofa under a woven blanket"])[0]
    np.testing.assert_allclose(s, [max((float(v @ t) + 1) / 2, 0.0)], atol=1e-6)
    # the same weights wrapped by DistributedDataParallel or under 'state_dict' load identically
    ddp = tmp_path / "ddp.pt"
    torch.save({"module." + k: v for k, v in sd.items()}, ddp)
    wrapped = tmp_path / "wrapped.pth"
    torch.save({"state_dict": sd}, wrapped)
    for q in (ddp, wrapped):
        got, fmt = read_state_dict(q)
        assert fmt == "longclip" and torch.equal(got["positional_embedding"],
                                                 longclip_positional_table(sd["positional_embedding"],
                                                                           sd["positional_embedding_res"]))


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_real_release_layouts_are_detected_without_allocating(name):
    import open_clip

    arch, dims = RELEASES[name]
    sd = {k: torch.empty(s, device="meta") for k, s in release_shapes(*dims).items()}
    conv = longclip_to_open_clip(sd, name)
    cfg = open_clip.get_model_config(arch)
    cfg["text_cfg"] = dict(cfg["text_cfg"], context_length=248)
    with torch.device("meta"):
        model = open_clip.CLIP(**cfg, quick_gelu=True)
    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert own == {k: tuple(v.shape) for k, v in conv.items()}
    # the same file in the architecture's own 77-token context: refused, naming the file and the table
    with torch.device("meta"):
        short = open_clip.CLIP(**open_clip.get_model_config(arch), quick_gelu=True)
    with pytest.raises(WeightsLayoutError, match=rf"{name}: .*positional_embedding \(248, \d+\) vs \(77, \d+\)"):
        load_weights_into(short, conv, source=name)
    if name == "longclip-B.pt":   # Long-CLIP-B is a ViT-B/16: as ViT-B-32 its patch embedding is refused
        with torch.device("meta"):
            b32 = open_clip.CLIP(**dict(open_clip.get_model_config("ViT-B-32"), text_cfg=cfg["text_cfg"]))
        with pytest.raises(WeightsLayoutError, match=r"longclip-B\.pt: .*visual\.conv1\.weight "
                                                     r"\(768, 3, 16, 16\) vs \(768, 3, 32, 32\)"):
            load_weights_into(b32, conv, source=name)


def test_layouts_that_would_be_resized_or_dropped_are_refused(release, tmp_path):
    sd, p = release
    # a 248-position file in a 32-context model: never interpolated
    short, _, _ = create_architecture("itr-tiny-clip")
    with pytest.raises(WeightsLayoutError, match=r"longclip-T\.pt: .*positional_embedding \(248, 128\) vs "
                                                 r"\(32, 128\).*never interpolated"):
        load_weights_into(short, read_state_dict(p)[0], source=str(p))
    # unexpected extra keys / missing keys: one error naming the file and the keys, for any --clip-model
    extra = tmp_path / "extra.pt"
    torch.save(dict(sd, mask1=torch.zeros(248, 1)), extra)
    missing = tmp_path / "missing.pt"
    torch.save({k: v for k, v in sd.items() if k != "ln_final.bias"}, missing)
    for model in ("itr-tiny-clip", "auto"):
        with pytest.raises(WeightsLayoutError, match=r"extra\.pt.*mask1"):
            load_backbone(model, extra, device="cpu", show_progress=False)
        with pytest.raises(WeightsLayoutError, match=r"missing\.pt.*ln_final\.bias"):
            load_backbone(model, missing, device="cpu", show_progress=False)
    # the two tables must both be (248, width): a 77-row first table is not stretched
    odd = tmp_path / "odd.pt"
    torch.save(dict(sd, positional_embedding=sd["positional_embedding"][:77]), odd)
    with pytest.raises(WeightsLayoutError, match=r"odd\.pt: .*positional_embedding \(77, 128\), "
                                                 r"positional_embedding_res \(248, 128\)"):
        read_state_dict(odd)
    # an image grid other than the architecture's: no silent interpolation either
    grid = tmp_path / "grid.pt"
    torch.save(dict(sd, **{"visual.positional_embedding": torch.zeros(50, 128)}), grid)
    with pytest.raises(WeightsLayoutError, match=r"grid\.pt.*: .*visual\.positional_embedding \(50, 128\) vs "
                                                 r"\(37, 128\)"):
        load_backbone("itr-tiny-clip", grid, device="cpu", show_progress=False)


def test_score_command_line_takes_the_release_file(release, tmp_path):
    from neural.score import main

    _, p = release
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    rng = np.random.default_rng(0)
    for k in range(2):
        Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(imgs / f"im{k}.png")
    cands = tmp_path / "cands.json"
    cands.write_text(json.dumps({"im0": "a cat", "im1": " ".join(["word"] * 100)}))
    out = tmp_path / "out.json"
    assert main(["--candidates", str(cands), "--images", str(imgs), "--clip-model", "auto",
                 "--clip-pretrained", str(p), "--device", "cpu", "--no-cache", "--quiet", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["backbone"]["context_length"] == 248
    assert res["truncated"]["candidates"] == 0      # 100 words fit the 248-token context
