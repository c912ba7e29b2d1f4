"""Neural caption scorers on open_clip backbones.

From the bottom of the import graph up (the shared modules before :mod:`neural.tiny_clip` import no
scorer; no module imports another's private helpers):

* :mod:`neural.names` — backbone names the command lines accept (no torch);
* :mod:`neural.checkpoints` — safe reading / writing of weight files;
* :mod:`neural.pretrained` — where weights come from (pretrained tags, files, the offline switch);
* :mod:`neural.architectures` — open_clip architectures (built-in and this toolkit's own);
* :mod:`neural.training` — AdamW, determinism, progress bars, state dicts as arrays;
* :mod:`neural.text_tower` — a CLIP text tower taken apart (pooling, embeddings in, cut at end-of-text);
* :mod:`neural.losses` — the one symmetric InfoNCE every trainer uses;
* :mod:`neural.backbone` — :class:`~neural.backbone.Backbone` and :func:`~neural.backbone.load_backbone`;
* :mod:`neural.base` — the :class:`~neural.base.CaptionScorer` protocol, shared formulas and the
  corpus pair scorer of the human-correlation protocols;
* :mod:`neural.tiny_clip` — the small CLIP trained here on the teaching set (offline default);
* :mod:`neural.factory` — :func:`~neural.factory.backbone_for`: the tiny CLIP or an open_clip model by name;
* scorers: :mod:`neural.clipscore` (CLIP-S / RefCLIP-S, Hessel et al. 2021), :mod:`neural.pacs`
  (PAC-S / RefPAC-S, Sarto et al. 2023; user positives read by :mod:`neural.positives`), :mod:`neural.lclip` (L-CLIPScore), :mod:`neural.bridge`
  (BRIDGE, with :mod:`neural.bridge_templates`), :mod:`neural.specs` (SPECS, with
  :mod:`neural.specificity` and :mod:`neural.text_units`);
* :mod:`neural.family` — :class:`~neural.family.ScorerFamily`, the contract of one metric (names,
  recipes, training, saving and loading, shipped copy); :mod:`neural.families` — the built-in families,
  one module each; :mod:`neural.registry` — the families the command lines and the main job iterate over
  (:func:`~neural.registry.register_family` adds one);
* :mod:`neural.saved` — trained scorers saved (safetensors + ``scorer.json``) and loaded back, with the
  parts the families share in :mod:`neural.saved_parts`;
* :mod:`neural.train_scorer` — ``python -m neural.train_scorer``: train one on the teaching set and save it;
* :mod:`neural.score` — ``python -m neural.score`` command line (any metric; ``--scorer`` for saved ones).

Submodules are imported on demand (``from neural.backbone import load_backbone``) so that importing
``neural`` stays cheap.
"""
