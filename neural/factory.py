"""The backbone a job asks for, by name: the shipped pretrained teaching CLIP (the offline default), the
tiny CLIP trained here, or an open_clip model with pretrained weights.

:func:`backbone_for` is the one place that turns the command lines' ``--clip-model`` /
``--clip-pretrained`` into a :class:`~neural.backbone.Backbone`; :mod:`neural.tiny_clip` trains the
tiny CLIP and :func:`neural.backbone.load_backbone` loads open_clip weights.
"""
from __future__ import annotations

from corpora.teaching import make_teaching_set
from neural.backbone import Backbone, load_backbone
from neural.names import is_teaching_model, is_tiny_model
from neural.teaching_clip import load_teaching_clip
from neural.tiny_clip import train_tiny_clip

__all__ = ["backbone_for"]


def backbone_for(corpus=None, clip_model: str | None = None, clip_pretrained=None, *, seed: int = 0,
                 cache=None, device: str = "auto", precision: str = "fp32", show_progress: bool = True,
                 **train_kwargs) -> Backbone:
    """The backbone a job should use: ``clip_model`` None (the offline default) or one of
    :data:`neural.names.TEACHING_MODEL_NAMES` (``"teaching"``, ``"teaching-clip"``) → the shipped
    pretrained teaching CLIP, used zero-shot (:func:`neural.teaching_clip.load_teaching_clip`;
    ``clip_pretrained`` may name another weights file of it); one of
    :data:`neural.names.TINY_MODEL_NAMES` (``"tiny"``, ``"tiny-clip"``, ``"tiny-trained"``;
    :func:`~neural.names.is_tiny_model`) → the tiny CLIP trained on ``corpus``' training split (on the
    teaching set when ``corpus`` has no usable one: no ``train`` split, or images missing); otherwise :func:`neural.backbone.load_backbone` (``clip_pretrained``: tag or file, default
    ``"openai"``).  ``train_kwargs`` go to :func:`neural.tiny_clip.train_tiny_clip`."""
    if is_teaching_model(clip_model, default=True):
        return load_teaching_clip(clip_pretrained, device=device, show_progress=show_progress)
    if is_tiny_model(clip_model):
        usable = corpus is not None and "train" in getattr(corpus, "splits", {}) and \
            not corpus.missing_images(corpus.split("train"))
        if not usable:  # e.g. Flickr8k with only a few images on disk: train on the teaching set
            corpus = make_teaching_set(seed=seed)
        return train_tiny_clip(corpus, seed=seed, cache=cache, show_progress=show_progress, device=device,
                               **train_kwargs)
    return load_backbone(clip_model, clip_pretrained or "openai", device=device, precision=precision,
                         show_progress=show_progress)
