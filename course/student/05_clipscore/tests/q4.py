from otter.test_files import test_case

from course.checks import answer

OK_FORMAT = False
name = "q4"


@test_case(points=0)
def test_filled_in(env):
    taus = answer(env, "my_taus")
    for key in ("CLIP-S", "RefCLIP-S", "BLEU-4", "CIDEr-D"):
        v = taus.get(key)
        assert v not in (None, Ellipsis) and -100 <= float(v) <= 100, f"my_taus[{key!r}]: fill in τ-c × 100"
