"""benchmarks/cgrpo_peer.py's pure parts (the arm itself runs in trl-cgrpo's own venv, with TRL < 1.15)."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from helpers import load_benchmark

peer = load_benchmark("cgrpo_peer")


def test_as_answer_is_the_verifiers_extraction_as_an_integer():
    assert peer.as_answer("#### 081") == "81"
    assert peer.as_answer("#### 1,000") == "1000"
    assert peer.as_answer("##") is None


def test_reward_watch_counts_padded_rows_apart_and_measures_real_groups():
    def reward(completions, **kwargs):
        return [1.0 if c == "right" else 0.0 for c in completions]

    watch = peer.RewardWatch(reward, group=4, max_length=3)
    # Group 1: 2 real (one right, one wrong: mixed) + 2 padded; group 2: 4 real, all wrong, one cut off at 3 tokens.
    watch.trainer = SimpleNamespace(
        _padded_rows=[False, False, True, True, False, False, False, False],
        processing_class=SimpleNamespace(eos_token_id=9),
        model=SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list)},
    )
    texts = ["right", "wrong", "", "", "wrong", "wrong", "wrong", "wrong"]
    ids = [[1, 9], [2, 9], [9], [9], [1, 9], [1, 2, 3], [1, 9], [1, 9]]
    assert watch(texts, completion_ids=ids) == reward(texts)
    assert (watch.rows, watch.padded, watch.real, watch.truncated) == (8, 2, 6, 1)
    assert (watch.groups, watch.mixed) == (2, 1)
    assert watch.trainer._metrics["train"]["groups/frac_mixed"] == [0.5]
