"""Dynamic sampling with refill (DAPO Sec. 3.2), used only by `DAPOTrainer`.

* `rounds`: the round loop (generate, score, keep informative groups, stop or ask for more);
* `planner`: how large the next round is (the round-cost model, retention estimates, the budget);
* `history`: prompt-history skipping with an exploration floor;
* `stream`: the rank-consistent, checkpointable refill prompt stream;
* `assembly`: whole groups across rounds into one update batch, and TRL's batch metrics recomputed on it;
* `state`: what a checkpoint saves and restores.

The pure modules (`planner`, `history`, `stream`) import neither trl nor transformers, and this package re-exports
nothing, so importing one of them does not import the trainer's side. Import names from their modules.
"""
