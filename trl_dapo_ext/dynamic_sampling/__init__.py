"""Dynamic sampling with refill (DAPO Sec. 3.2), used only by `DAPOTrainer`.

* `sampler`: `DynamicSampler`, the one object the trainer owns (``trainer.dynamic_sampling``): the refill stream,
  the planner, the prompt history and the reward range, one state dict, and each round's decision from gathered
  counts;
* `rounds`: one step's round loop through TRL (generate, score, keep informative groups, stop or refill);
* `planner`: how large the next round is (`fixed_factor`, `fill_chance` and `cost_search` are its three rules;
  `round_cost`, `retention` and `scoring` its cost model, estimates and fast search);
* `history`: prompt-history skipping with an exploration floor; `profile_table`: the profile that can seed it;
* `stream`: the rank-consistent, checkpointable refill prompt stream;
* `assembly`: whole groups across rounds into one update batch, and TRL's batch metrics recomputed on it;
* `state`: what a checkpoint saves and restores; `counts` and `messages`: a step's tallies and what they tell the user.

`sampler` and everything it uses import neither trl nor transformers (a test checks), and this package re-exports
nothing, so importing one of them does not import the trainer's side. Import names from their modules.
"""
