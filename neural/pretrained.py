"""Where CLIP weights come from: open_clip pretrained tags (found in the local cache, or downloadable
when the network and the ``$ITR_OFFLINE`` / ``$HF_HUB_OFFLINE`` switches allow), weights files named by
path, and the PAC-S release files — all checked without downloading anything, so that a job can fail
before any work.

Reading a file safely is :mod:`neural.checkpoints`' concern; building the architecture
:mod:`neural.architectures`'; :func:`neural.backbone.load_backbone` puts them together.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from urllib.parse import urlsplit

from corpora.paths import network_problem
from neural.checkpoints import MissingWeightsError, file_sha256

#: Environment variable: set to ``1`` to forbid any weight download (also honoured: ``HF_HUB_OFFLINE``).
OFFLINE_ENV = "ITR_OFFLINE"

#: The PAC-S release checkpoints (Sarto et al. 2023, aimagelab/pacscore ``compute_metrics.py``) and the
#: open_clip architecture each loads onto: ViT-B/32 is fine-tuned from OpenAI ViT-B/32 (QuickGELU),
#: ViT-L/14 from open_clip ``ViT-L-14`` / ``laion2b_s32b_b82k`` (GELU).
PACS_CHECKPOINTS = {
    "clip_ViT-B-32.pth": {"model": "ViT-B-32", "quick_gelu": True},
    "openClip_ViT-L-14.pth": {"model": "ViT-L-14", "quick_gelu": False},
}


#: Suffixes that make a ``pretrained`` value a weights file rather than an open_clip tag.
WEIGHTS_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


def looks_like_weights_file(pretrained: str | Path) -> bool:
    """Whether ``pretrained`` names a weights file (a known suffix or a path separator) rather than an
    open_clip pretrained tag, so that a missing one is reported as a missing file."""
    return Path(str(pretrained)).suffix in WEIGHTS_SUFFIXES or os.sep in str(pretrained)


def offline() -> bool:
    """Whether downloads are switched off (``$ITR_OFFLINE`` or ``$HF_HUB_OFFLINE`` set to anything but 0)."""
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0") or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")


def _url_sha256(url: str) -> str:
    """The SHA-256 (or its prefix) that open_clip expects of the file at a pretrained tag's ``url``, as
    ``open_clip.pretrained.download_pretrained_from_url`` reads it: the folder name of an OpenAI URL, the
    file-name suffix of an mlfoundations release; ``""`` when the URL names none."""
    if "openaipublic" in url:
        return url.rstrip("/").split("/")[-2]
    if "mlfoundations" in url:
        return os.path.splitext(os.path.basename(url))[0].split("-")[-1]
    return ""


def tag_torchscript_sha256(tag_cfg: dict, path: Path) -> str | None:
    """The full SHA-256 that the tag's OpenAI release URL names when ``path`` is that URL's file, else
    ``None``: a TorchScript archive with exactly these bytes comes from the tag's official source and may
    be loaded (:func:`neural.checkpoints.read_state_dict` checks the bytes it loads).  Only OpenAI's URLs
    carry a full 64-digit checksum, and only OpenAI's releases are TorchScript archives."""
    url = tag_cfg.get("url", "")
    expected = _url_sha256(url)   # an mlfoundations suffix is 8 digits: never taken for a full checksum
    return expected if len(expected) == 64 and path.name == os.path.basename(url) else None


def _cached_tag_file(tag_cfg: dict, cache_dir: str | None) -> str | None:
    """The local file of an open_clip pretrained tag if it is already on disk, else ``None``
    (never touches the network).  A file at the tag URL's cache path whose SHA-256 differs from the one
    the URL names is ignored with a warning (open_clip would download it again)."""
    if tag_cfg.get("file"):
        return tag_cfg["file"] if os.path.isfile(tag_cfg["file"]) else None
    hf = tag_cfg.get("hf_hub", "")
    if hf:
        try:
            # optional (only for Hugging Face hosted tags); open_clip's own file-name rule, private there
            from huggingface_hub import try_to_load_from_cache
            from open_clip.constants import HF_WEIGHTS_NAME
            from open_clip.pretrained import _get_safe_alternatives

            model_id, filename = os.path.split(hf)
            filename = filename or HF_WEIGHTS_NAME
            for fn in [*_get_safe_alternatives(filename), filename]:
                p = try_to_load_from_cache(repo_id=model_id, filename=fn, cache_dir=cache_dir)
                if isinstance(p, str) and os.path.isfile(p):
                    return p
        except ImportError:
            pass
    url = tag_cfg.get("url", "")
    if url:
        p = os.path.join(cache_dir or os.path.expanduser("~/.cache/clip"), os.path.basename(url))
        if os.path.isfile(p):
            expected = _url_sha256(url)
            if not expected or file_sha256(p).startswith(expected):
                return p
            warnings.warn(f"{p}: its SHA-256 does not match the one its download URL names ({expected[:16]}…); "
                          "ignored (delete it; open_clip downloads it again on a networked machine)", stacklevel=3)
    return None


def _unreachable_download_host(tag_cfg: dict, timeout: float = 5.0) -> str | None:
    """Why the download source of an open_clip tag cannot be reached, or ``None`` when it can (or when a
    proxy is configured, which a direct probe cannot judge).

    One TCP connection attempt (``timeout`` seconds) to the host that would serve the file (the Hugging
    Face endpoint, ``$HF_ENDPOINT`` if set, or the tag's URL host).  Without it, an offline machine waits
    through huggingface_hub's retries (about a minute) and prints a warning per retry before failing.
    """
    if tag_cfg.get("hf_hub"):
        url = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    else:
        url = tag_cfg.get("url", "")
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    problem = network_problem(host, parts.port or (80 if parts.scheme == "http" else 443), timeout)
    return None if problem is None else (f"no network: {problem}; set {OFFLINE_ENV}=1 to skip this check "
                                         "on an offline machine")


def check_pretrained_tag(model: str, tag: str, *, allow_download: bool | None = None,
                         cache_dir: str | None = None) -> tuple[dict, str | None]:
    """Check, without downloading anything, that open_clip pretrained ``tag`` of ``model`` can be had.

    Returns ``(tag config, local file or None)``: the file when it is already in the local cache, else
    ``None`` (a download is allowed and its host answers).  Raises ``ValueError`` for a tag open_clip
    does not know for ``model`` and :class:`~neural.checkpoints.MissingWeightsError` when the weights are
    not cached and downloads are off or the host cannot be reached — so a job can fail before any work.
    """
    import open_clip  # lazy: seconds to import (torchvision, timm)

    allow = (not offline()) if allow_download is None else allow_download
    arch_for_tag = model.replace("/", "-")
    tag_cfg = open_clip.get_pretrained_cfg(arch_for_tag, tag) if model != "auto" else {}
    if not tag_cfg:
        tags = open_clip.list_pretrained_tags_by_model(arch_for_tag) if model != "auto" else []
        raise ValueError(f"pretrained={tag!r} is neither a file nor a known tag for {model!r} "
                         f"(known tags: {tags})")
    local = _cached_tag_file(tag_cfg, cache_dir)
    if local is None:
        if not allow:
            raise MissingWeightsError(missing_weights_message(model, tag,
                                                               "not in the local cache and downloads are off"))
        unreachable = _unreachable_download_host(tag_cfg)
        if unreachable:
            raise MissingWeightsError(missing_weights_message(model, tag, unreachable))
    return tag_cfg, local


def missing_weights_message(model: str, pretrained: str, why: str) -> str:
    return (f"CLIP weights {model}/{pretrained} are not available ({why}). On a networked machine they are "
            f"downloaded automatically; offline, download them elsewhere (e.g. open_clip.create_model('{model}', "
            f"pretrained='{pretrained}') fills ~/.cache/huggingface or ~/.cache/clip) and pass the file with "
            f"--clip-pretrained /path/to/file (load_backbone('{model}', '/path/to/file')), or use "
            "--clip-model tiny for the small CLIP trained here on the teaching set.")


__all__ = [
    "OFFLINE_ENV", "offline", "PACS_CHECKPOINTS", "WEIGHTS_SUFFIXES", "looks_like_weights_file",
    "tag_torchscript_sha256", "check_pretrained_tag", "missing_weights_message",
]
