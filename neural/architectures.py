"""open_clip architectures: which exist (open_clip's registry plus this toolkit's own), building an
untrained one with its eval transform and tokenizer, and loading a state dict into it.

Nothing here knows where weights come from (:mod:`neural.pretrained`) or wraps a model as a
:class:`~neural.backbone.Backbone`.  ``open_clip`` is imported inside the functions that need it: it
takes seconds to import (torchvision, timm), and option checks that only read this module's tables must
stay fast.
"""
from __future__ import annotations

import difflib
import os
import warnings
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import asdict
from typing import Any

import torch

from neural.checkpoints import MissingDependencyError, WeightsError, WeightsLayoutError
from neural.pretrained import offline

#: Architectures defined by this toolkit (not in open_clip's registry).  ``itr-tiny-clip`` is the
#: small CLIP trained on the teaching set (:mod:`neural.tiny_clip`).  Heads are ``width // 64`` so that
#: OpenAI-format files of it can also be rebuilt by ``open_clip.build_model_from_openai_state_dict``.
CUSTOM_MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "itr-tiny-clip": {
        "embed_dim": 128,
        "quick_gelu": True,
        "vision_cfg": {"image_size": 48, "layers": 4, "width": 128, "patch_size": 8, "head_width": 64},
        "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 128, "heads": 2, "layers": 3},
    },
    # The teaching CLIP (neural.teaching_clip): pretrained on a generated stream, shipped as fp16
    # safetensors (<= 10 MB).  96 px input in 12 px patches (an 8 x 8 grid: the same token count as a
    # 64 px / 8 px ViT, with patches wide enough to hold two periods of the fill textures), a rank-32
    # factorised token embedding over open_clip's full 49,408-token BPE vocabulary.
    "itr-teaching-clip": {
        "embed_dim": 128,
        "quick_gelu": True,
        "token_embedding_rank": 32,
        "vision_cfg": {"image_size": 96, "layers": 6, "width": 128, "patch_size": 12, "head_width": 64},
        "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 128, "heads": 2, "layers": 4},
    },
}
#: Preprocessing overrides for custom architectures (the teaching images are 4:3; "squash" keeps the
#: whole scene, including what is left / right of centre).
CUSTOM_PREPROCESS: dict[str, dict[str, Any]] = {"itr-tiny-clip": {"resize_mode": "squash"},
                                                "itr-teaching-clip": {"resize_mode": "squash"}}


class FactorizedTokenEmbedding(torch.nn.Module):
    """Token embedding ``E = A B`` with ``A`` (vocab × r) and ``B`` (r × width), the matrix decomposition
    of L-CLIPScore's student (its factorised token embedding; :class:`neural.lclip.FactorizedEmbedding`
    uses the same ``low`` / ``up`` names, which BRIDGE reads for the text width).

    A token's embedding is ``e_t = A_t B``: ``vocab·r + r·width`` parameters instead of
    ``vocab·width`` (49,408 × 128 = 6.3 M → 1.6 M at r = 32).  Initialised as open_clip initialises its
    token embedding in distribution: ``A ~ N(0, 0.02²)``, ``B`` with orthonormal rows, so ``E`` has the
    same per-entry scale.
    """

    def __init__(self, vocab: int, rank: int, width: int):
        super().__init__()
        self.low = torch.nn.Embedding(vocab, rank)
        self.up = torch.nn.Linear(rank, width, bias=False)
        torch.nn.init.normal_(self.low.weight, std=0.02)
        torch.nn.init.orthogonal_(self.up.weight)

    @property
    def num_embeddings(self) -> int:
        return self.low.num_embeddings

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.up(self.low(tokens))


def token_embedding_matrix(embedding: torch.nn.Module) -> torch.Tensor:
    """The dense vocab × width token-embedding table of ``embedding``: an ``nn.Embedding``'s weight, or
    ``E = A B`` of a factorised one (:class:`FactorizedTokenEmbedding`, and any module with the same
    ``low`` / ``up`` parts), computed without gradient (for initialising other modules from it, e.g. the
    L-CLIPScore student's SVD)."""
    if hasattr(embedding, "weight"):
        return embedding.weight.detach()
    with torch.no_grad():
        return embedding.up(embedding.low.weight)


def build_custom_clip(arch: str, quick_gelu: bool | None = None, context_length: int | None = None):
    """An untrained open_clip ``CLIP`` of custom architecture ``arch`` (:data:`CUSTOM_MODEL_CONFIGS`);
    a ``token_embedding_rank`` entry replaces the token embedding by a
    :class:`FactorizedTokenEmbedding` of that rank; ``context_length`` overrides the text context."""
    import open_clip  # lazy: seconds to import (torchvision, timm)

    cfg = deepcopy(CUSTOM_MODEL_CONFIGS[arch])
    rank = cfg.pop("token_embedding_rank", None)
    if quick_gelu is not None:
        cfg["quick_gelu"] = quick_gelu
    if context_length is not None:
        cfg["text_cfg"]["context_length"] = int(context_length)
    model = open_clip.CLIP(**cfg)
    if rank:
        t = cfg["text_cfg"]
        model.token_embedding = FactorizedTokenEmbedding(t["vocab_size"], int(rank), t["width"])
    return model


def preprocess_for(model, overrides: dict | None = None):
    """open_clip's eval transform from the preprocess config attached to ``model``."""
    # lazy: open_clip takes seconds to import (torchvision, timm)
    from open_clip.model import get_model_preprocess_cfg, set_model_preprocess_cfg
    from open_clip.transform import PreprocessCfg, image_transform_v2, merge_preprocess_dict


    cfg = merge_preprocess_dict(asdict(PreprocessCfg()), get_model_preprocess_cfg(model) or {})
    cfg = merge_preprocess_dict(cfg, overrides or {})
    cfg["size"] = model.visual.image_size
    set_model_preprocess_cfg(model, cfg)
    return image_transform_v2(PreprocessCfg(**cfg), is_train=False)


def hf_text_requirements(arch: str) -> list[str]:
    """Hugging Face names (tokenizer and / or text model) that open_clip architecture ``arch`` loads
    through ``transformers`` (SigLIP, NLLB-CLIP, XLM-R / RoBERTa text towers …); empty for the CLIP BPE
    tokenizer and for this toolkit's own architectures."""
    text_cfg = text_config(arch)
    names = [text_cfg[k] for k in ("hf_tokenizer_name", "hf_model_name") if text_cfg.get(k)]
    return list(dict.fromkeys(names))


def text_config(arch: str) -> dict:
    """open_clip's ``text_cfg`` of built-in architecture ``arch`` (empty for custom or unknown ones)."""
    if arch in CUSTOM_MODEL_CONFIGS:
        return {}
    import open_clip  # lazy: seconds to import (torchvision, timm)

    return (open_clip.get_model_config(arch) or {}).get("text_cfg", {}) or {}


def activation_hint(arch: str) -> str | None:
    """Why a weights *file* for ``arch`` may need ``quick_gelu=True``, or ``None`` when there is no doubt.

    OpenAI trained CLIP with QuickGELU (x·σ(1.702x)); open_clip's plain ``ViT-B-32`` etc. build GELU.
    For a pretrained tag, the OpenAI TorchScript format and the PAC-S release names the activation is
    known; a renamed or converted file of an architecture that OpenAI released gives no sign of it, and
    the wrong choice changes every embedding without any error.  Returns ``None`` for ``*-quickgelu``
    names and for architectures without an OpenAI release."""
    if arch in CUSTOM_MODEL_CONFIGS or arch.lower().endswith("quickgelu"):
        return None
    import open_clip  # lazy: seconds to import (torchvision, timm)

    try:
        tags = open_clip.list_pretrained_tags_by_model(arch)
    except Exception:  # noqa: BLE001 - unknown names are reported by create_architecture
        return None
    if "openai" not in tags:
        return None
    return (f"building {arch} with GELU; if these weights are OpenAI's or fine-tuned from them (as PAC-S's "
            f"ViT-B/32), they need QuickGELU: pass quick_gelu=True or use the architecture {arch}-quickgelu "
            f"(command line: --clip-model {arch}-quickgelu); pass quick_gelu=False if they were trained with "
            "GELU (open_clip's LAION / DataComp weights)")


def require_architecture_dependencies(arch: str) -> None:
    """Raise :class:`~neural.checkpoints.MissingDependencyError` naming the package to install when
    ``arch`` needs ``transformers`` and it is not installed.  Called before any weight download, so a
    missing package is reported before hundreds of megabytes are fetched."""
    names = hf_text_requirements(arch)
    if not names:
        return
    try:
        import transformers  # noqa: F401  (optional dependency: only probed)
    except ImportError as exc:
        raise MissingDependencyError(
            f"CLIP architecture {arch!r} uses the Hugging Face text components {names}, which need the "
            "'transformers' package: pip install transformers.  Offline, their tokenizer / model files "
            "must also be in the Hugging Face cache (run open_clip.get_tokenizer"
            f"({arch!r}) once on a networked machine and copy ~/.cache/huggingface, or set HF_HOME).  "
            "Architectures with the CLIP tokenizer (ViT-B-32, ViT-L-14 …) need neither.") from exc


@contextmanager
def _hub_offline(active: bool):
    """While ``active``: Hugging Face Hub access off for code that does not take ``local_files_only``
    (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` in the environment and huggingface_hub's constant,
    which it reads at import); everything is restored afterwards."""
    if not active:
        yield
        return
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved_env = {k: os.environ.get(k) for k in names}
    try:
        import huggingface_hub.constants as hub_constants  # optional: only with a Hugging Face text tower
    except ImportError:
        hub_constants = None
    saved_const = getattr(hub_constants, "HF_HUB_OFFLINE", None)
    os.environ.update({k: "1" for k in names})
    if hub_constants is not None:
        hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if hub_constants is not None:
            hub_constants.HF_HUB_OFFLINE = saved_const


def check_architecture(arch: str) -> None:
    """Raise ``ValueError`` naming the valid choices unless ``arch`` is an open_clip model name
    (``open_clip.list_models()``) or a key of :data:`CUSTOM_MODEL_CONFIGS`."""
    import open_clip  # lazy: seconds to import (torchvision, timm)

    if arch in CUSTOM_MODEL_CONFIGS or arch in open_clip.list_models():
        return
    close = difflib.get_close_matches(arch, open_clip.list_models(), n=3, cutoff=0.6)
    raise ValueError(
        f"unknown CLIP architecture {arch!r}{f' (did you mean {close}?)' if close else ''}: use an open_clip "
        f"model name (e.g. 'ViT-B-32', 'ViT-L-14'; see open_clip.list_models()) or one of "
        f"{sorted(CUSTOM_MODEL_CONFIGS)}; 'tiny' trains the small CLIP here (neural.tiny_clip: on the "
        f"run's training split, or on the teaching set)")


def create_architecture(arch: str, *, quick_gelu: bool | None = None,
                        preprocess_overrides: dict | None = None, allow_download: bool | None = None,
                        context_length: int | None = None):
    """Instantiate an (untrained) open_clip CLIP of architecture ``arch`` and its eval transform.

    ``arch``: an open_clip built-in name (``open_clip.list_models()``) or a key of
    :data:`CUSTOM_MODEL_CONFIGS`.  Returns ``(model, preprocess, tokenizer)``; the model is fp32 on CPU.
    ``allow_download``: whether a Hugging Face tokenizer (SigLIP, XLM-R … text towers) may be fetched
    from the Hub when it is not in the local cache.  Default: yes unless ``$ITR_OFFLINE`` or
    ``$HF_HUB_OFFLINE`` is set; when not allowed, it is loaded with ``local_files_only=True``.
    ``context_length``: the text context (positional table rows, causal mask and tokenizer), e.g. 248 for
    Long-CLIP weights; default the architecture's own (77 for OpenAI's).
    """
    # lazy: open_clip takes seconds to import (torchvision, timm)
    import open_clip
    from open_clip.tokenizer import SimpleTokenizer

    if arch in CUSTOM_MODEL_CONFIGS:
        cfg = CUSTOM_MODEL_CONFIGS[arch]
        model = build_custom_clip(arch, quick_gelu, context_length)
        over = dict(CUSTOM_PREPROCESS.get(arch, {}))
        over.update(preprocess_overrides or {})
        preprocess = preprocess_for(model, over)
        tokenizer = SimpleTokenizer(context_length=int(context_length or cfg["text_cfg"]["context_length"]))
        return model.eval(), preprocess, tokenizer
    check_architecture(arch)
    require_architecture_dependencies(arch)
    allow = (not offline()) if allow_download is None else bool(allow_download)
    text_cfg = text_config(arch)
    ctx_kw = ({"text_cfg": dict(text_cfg, context_length=int(context_length))}
              if context_length is not None and context_length != text_cfg.get("context_length", 77) else {})
    try:
        # a Hugging Face text tower reads its config with AutoConfig.from_pretrained, which open_clip
        # calls without our keywords: with downloads off, the Hub is switched off around the call
        with warnings.catch_warnings(), _hub_offline(not allow and bool(text_cfg.get("hf_model_name"))):
            warnings.simplefilter("ignore")
            model = open_clip.create_model(arch, pretrained=None, load_weights=False,
                                           force_quick_gelu=bool(quick_gelu), pretrained_text=False,
                                           device="cpu", precision="fp32", **ctx_kw)
    except OSError as exc:  # transformers installed, the text tower's config neither cached nor fetchable
        if not text_cfg.get("hf_model_name"):
            raise
        why = ("downloads are off ($ITR_OFFLINE / $HF_HUB_OFFLINE or allow_download=False)" if not allow
               else "could not be downloaded")
        raise MissingDependencyError(
            f"the text-tower configuration of CLIP architecture {arch!r} ({hf_text_requirements(arch)}) is "
            f"not in the Hugging Face cache and {why} ({exc}); run open_clip.create_model({arch!r}) once on "
            "a networked machine and copy ~/.cache/huggingface (or set HF_HOME)") from exc
    preprocess = preprocess_for(model, preprocess_overrides)
    # open_clip's get_tokenizer forwards extra kwargs to AutoTokenizer.from_pretrained (HFTokenizer);
    # only HF tokenizers take them (SimpleTokenizer would reject local_files_only).
    tok_kwargs = {"local_files_only": True} if (not allow and text_cfg.get("hf_tokenizer_name")) else {}
    if ctx_kw:
        tok_kwargs["context_length"] = int(context_length)
    try:
        tokenizer = open_clip.get_tokenizer(arch, **tok_kwargs)
    except OSError as exc:  # transformers installed, tokenizer files neither cached nor downloadable
        why = ("downloads are off ($ITR_OFFLINE / $HF_HUB_OFFLINE or allow_download=False)" if not allow
               else "could not be downloaded")
        raise MissingDependencyError(
            f"the tokenizer of CLIP architecture {arch!r} ({hf_text_requirements(arch)}) is not in the "
            f"Hugging Face cache and {why} ({exc}); run open_clip.get_tokenizer({arch!r}) "
            "once on a networked machine and copy ~/.cache/huggingface (or set HF_HOME)") from exc
    return model.eval(), preprocess, tokenizer


def load_weights_into(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], *, source: str = "") -> None:
    """Load a (normalised) CLIP state dict into ``model`` strictly, after open_clip's layout fixes that
    change no value (custom-text key names, a ``logit_scale`` stored with another number of dimensions).

    Nothing is resized: unlike open_clip's own loader, positional embeddings whose number of positions
    differs from the model's (a 248-position Long-CLIP file in a 77-context model, a 336 px image grid in
    a 224 px one) are *not* interpolated, and no key is dropped or left at its initial value.

    Raises
    ------
    WeightsLayoutError
        Keys missing or unexpected, or shapes that differ; the message names ``source`` and the keys
        (with both shapes).
    """
    # lazy: open_clip takes seconds to import (torchvision, timm)
    from open_clip.model import convert_to_custom_text_state_dict

    sd = dict(state_dict)
    if "positional_embedding" in sd and not hasattr(model, "positional_embedding"):
        sd = convert_to_custom_text_state_dict(sd)
    if "logit_scale" in sd and model.logit_scale.ndim != sd["logit_scale"].ndim:
        sd["logit_scale"] = sd["logit_scale"].reshape(model.logit_scale.shape)
    if getattr(model, "logit_bias", None) is None:
        sd.pop("logit_bias", None)
    own = model.state_dict()
    # non-persistent buffers (e.g. the text causal ``attn_mask``) appear in TorchScript state dicts
    for name, _ in model.named_buffers():
        if name not in own:
            sd.pop(name, None)
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    bad_shape = sorted(k for k in set(own) & set(sd) if tuple(own[k].shape) != tuple(sd[k].shape))
    if missing or unexpected or bad_shape:
        raise WeightsLayoutError(_mismatch_message(source, missing, unexpected,
                                                   [f"{k} {tuple(sd[k].shape)} vs {tuple(own[k].shape)}"
                                                    for k in bad_shape]))
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in sd.items()}, strict=True)


def _mismatch_message(source: str, missing: list[str], unexpected: list[str], bad_shape: list[str]) -> str:
    """The one message of :class:`WeightsLayoutError` from :func:`load_weights_into`."""
    def few(xs):
        return ", ".join(xs[:5]) + (f" … (+{len(xs) - 5})" if len(xs) > 5 else "")
    pos = [b for b in bad_shape if b.split(" ", 1)[0].endswith("positional_embedding")]
    parts = ([f"missing: {few(missing)}"] if missing else []) \
        + ([f"unexpected: {few(unexpected)}"] if unexpected else []) \
        + ([f"wrong shape (file vs model): {few(bad_shape)}"] if bad_shape else []) \
        + (["positional embeddings are never interpolated here (that would change every feature)"] if pos else [])
    return (f"{source}: weights do not match the architecture — " + "; ".join(parts)
            + " — pass the matching --clip-model (e.g. ViT-B-32 for OpenAI / PAC-S / SPECS ViT-B/32, "
              "ViT-B-16 for Long-CLIP-B, ViT-L-14 for PAC-S ViT-L/14 and Long-CLIP-L), or 'auto' to infer it "
              "from an OpenAI-layout state dict")


def file_context_length(state_dict: dict[str, torch.Tensor] | None) -> int | None:
    """The text context of a state dict: rows of its ``positional_embedding`` (``text.positional_embedding``
    in open_clip's custom-text layout), or ``None`` when it has neither (e.g. a Hugging Face text tower)."""
    if not state_dict:
        return None
    for key in ("positional_embedding", "text.positional_embedding"):
        t = state_dict.get(key)
        if isinstance(t, torch.Tensor) and t.ndim == 2:
            return int(t.shape[0])
    return None


def infer_openai_arch(state_dict: dict[str, torch.Tensor], quick_gelu: bool, *, source: str = ""):
    """Rebuild the architecture of an OpenAI-layout state dict (open_clip's
    ``build_model_from_openai_state_dict``; text context = rows of ``positional_embedding``), fp32.

    Raises :class:`WeightsLayoutError` (naming ``source`` and the keys) when the state dict has keys the
    rebuilt CLIP lacks or lacks some it has, and :class:`WeightsError` when no architecture can be read
    from it at all."""
    # lazy: open_clip takes seconds to import (torchvision, timm)
    from open_clip.model import build_model_from_openai_state_dict

    try:
        model = build_model_from_openai_state_dict(dict(state_dict), quick_gelu=quick_gelu, cast_dtype=None)
    except RuntimeError as exc:   # torch's strict load_state_dict: missing / unexpected keys, wrong shapes
        said = " ".join(str(exc).split())
        raise WeightsLayoutError(f"{source}: weights do not fit the CLIP architecture inferred from them "
                                 f"({said[:600]}{' …' if len(said) > 600 else ''}); pass --clip-model "
                                 "explicitly") from exc
    except Exception as exc:
        raise WeightsError(f"{source}: cannot infer a CLIP architecture from this state dict ({exc}); "
                           "pass --clip-model explicitly") from exc
    model = model.float()
    # open_clip casts to fp16 before loading (OpenAI layout); reload so fp32 files stay bit-exact
    load_weights_into(model, state_dict, source=source)
    return model.eval()


__all__ = [
    "CUSTOM_MODEL_CONFIGS", "CUSTOM_PREPROCESS", "preprocess_for", "hf_text_requirements", "text_config",
    "activation_hint", "require_architecture_dependencies", "check_architecture", "create_architecture",
    "load_weights_into", "infer_openai_arch", "FactorizedTokenEmbedding", "build_custom_clip",
    "token_embedding_matrix", "file_context_length",
]
