"""The built-in scorer families, one module each (:class:`neural.family.ScorerFamily`): CLIP-S / RefCLIP-S
(:mod:`neural.families.clipscore`), PAC-S / RefPAC-S (:mod:`neural.families.pacs`), L-CLIPScore /
RefL-CLIPScore (:mod:`neural.families.lclip`), BRIDGE (:mod:`neural.families.bridge`) and SPECS
(:mod:`neural.families.specs`).  Each declares its names, recipes, training, saving and loading and its
shipped copy; :mod:`neural.registry` registers them.  None imports torch at import time (the names are
read on a warm re-run of the main job): the methods import the scorer's own module when called.
"""
