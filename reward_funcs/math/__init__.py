"""Math rewards: grade a completion's final answer against the gold answer, exactly, without being gamed.

Modules: ``extract`` (the final answer: anchors, boxes, hedged boxes, ``<think>`` blocks), ``normalize``
(string normalisation, splitting into values, exact numbers), ``forms`` (kinds of answers: could it be a value,
words, inequalities), ``compare`` (equivalence of prepared answers: named values, hedges, unordered lists),
``answers`` (verdict caches and the TRL reward functions), ``pool`` (killable worker processes for symbolic
comparison) and ``worker`` (one such process: math-verify / sympy).
"""
