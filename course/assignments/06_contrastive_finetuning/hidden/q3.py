from otter.test_files import test_case

import numpy as np

from course import worlds
from course.checks import answer, assert_close, call
from evaluation import evaluate

OK_FORMAT = False
name = "q3"


@test_case(points=3, hidden=True)
def test_your_loss_trains(pacs_loss, env):
    seed = env["GRADER_SEED"]
    batches, heldout = worlds.contrastive_batches(seed, "train", n=128), worlds.heldout_pairs(seed)
    fv, ft, _ = call(worlds.finetune_adapters, batches, pacs_loss, name="fine-tuning with your pacs_loss")
    scale = float(np.log(1 / 0.07))
    gold = np.arange(len(heldout["v"]))
    ref = {"train_before": worlds.contrastive_loss(batches["v"], batches["t"], scale),
           "train_after": worlds.contrastive_loss(fv(batches["v"]), ft(batches["t"]), scale),
           "heldout_R@1_before": evaluate(heldout["v"] @ heldout["t"].T, gold).metrics["R@1"],
           "heldout_R@1_after": evaluate(fv(heldout["v"]) @ ft(heldout["t"]).T, gold).metrics["R@1"]}
    assert ref["train_after"] < ref["train_before"] - 0.1, "fine-tuning with your loss did not lower the contrastive loss"
    assert ref["heldout_R@1_after"] >= ref["heldout_R@1_before"] - 10, "fine-tuning with your loss broke held-out retrieval"
    r = answer(env, "my_result")
    for key, tol in (("train_before", 1e-3), ("train_after", 0.05), ("heldout_R@1_before", 1e-6), ("heldout_R@1_after", 4.0)):
        assert_close(r.get(key), ref[key], atol=tol, what=f"my_result[{key!r}]")
