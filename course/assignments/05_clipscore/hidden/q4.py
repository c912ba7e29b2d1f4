from otter.test_files import test_case

from course import worlds
from course.checks import answer, assert_close
from evaluation import bleu, cider_d, kendall_tau

OK_FORMAT = False
name = "q4"


@test_case(points=3, hidden=True)
def test_your_world(env):
    seed = env["GRADER_SEED"]
    ims, cands, refs, human = worlds.expert_items(seed, limit=120)
    images = worlds.image_embeddings(seed, ims)          # CLIPScore re-normalises given embeddings
    scores = {"CLIP-S": worlds.clip_scorer().score(images, cands),
              "RefCLIP-S": worlds.clip_scorer(reference_based=True).score(images, cands, refs),
              "BLEU-4": bleu(cands, refs)[:, 3], "CIDEr-D": cider_d(cands, refs)}
    taus = answer(env, "my_taus")
    for key, s in scores.items():
        assert_close(taus.get(key), 100 * kendall_tau(s, human, "c"), atol=0.5, what=f"my_taus[{key!r}] on your world")
