"""Neural caption scorers on open_clip backbones.

* :mod:`neural.backbone` — :class:`~neural.backbone.Backbone` and :func:`~neural.backbone.load_backbone`
  (open_clip name + tag, or local OpenAI / open_clip / PAC-S files);
* :mod:`neural.checkpoints` — safe reading / writing of weight files;
* :mod:`neural.base` — the :class:`~neural.base.CaptionScorer` protocol and shared formulas;
* :mod:`neural.tiny_clip` — the small CLIP trained here on the teaching set (offline default);
* :mod:`neural.clipscore` — CLIP-S / RefCLIP-S (Hessel et al. 2021);
* :mod:`neural.pacs` — PAC-S / RefPAC-S and positive-augmented contrastive fine-tuning (Sarto et al. 2023);
* :mod:`neural.score` — ``python -m neural.score`` command line.

Submodules are imported on demand (``from neural.backbone import load_backbone``) so that importing
``neural`` stays cheap.
"""
