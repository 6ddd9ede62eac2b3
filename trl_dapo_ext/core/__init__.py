"""The pure math of the package: torch only, no trl, no transformers (a test imports each module and checks).

* `advantages`: group baselines (GRPO / leave-one-out, scale group|batch|none, sample|population std, NaN-aware);
* `overlong`: DAPO's soft overlong punishment (Eq. 13) on token lengths;
* `groups`: a group's outcome (informative, all-max, all-min, other) and the spreads behind it;
* `metrics`: diagnostics metric values from one batch (pass@k, lengths, padding, timings).
"""
