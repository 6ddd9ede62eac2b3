"""The one place that knows which private TRL names `DAPOTrainer` relies on, and for which TRL releases.

TRL has no public hook for advantages or dynamic sampling, so the subclass overrides private methods of
`GRPOTrainer` and reads some of its private state. Every such name is listed here and checked, so that a TRL release
that renames or reshapes one fails loudly, with this module's name in the message, instead of training wrongly:

* at import: the private methods (:data:`PRIVATE_METHODS`) and class attributes (:data:`PRIVATE_CLASS_ATTRIBUTES`),
  TRL's internal helpers (:data:`TRL_HELPERS`), the keys of TRL's batch dict that `dynamic_sampling/assembly.py`
  re-pads (:func:`check_batch_keys`), the metrics that it recomputes (:func:`check_recomputed_metrics`), where
  ``_generate`` returns the tool mask (:func:`generated_tool_mask_position`), the loss types whose denominators
  `core/loss.py` knows (:func:`check_loss_types`) and the progress bar that shows refill
  rounds (:func:`check_progress_bar`);
* at construction of every `DAPOTrainer`: the private attributes (:data:`PRIVATE_ATTRIBUTES`) and the layout of the
  ``_logs`` / ``_metrics`` buffers that dynamic sampling swaps and truncates (:func:`check_log_buffers`).
* when `models.save_dequantized` saves a GGUF-loaded model: the transformers attributes it clears
  (:data:`TRANSFORMERS_GGUF_ATTRIBUTES`, :func:`check_gguf_model`).

What a static check cannot see is tested against every TRL release CI installs (`tests/test_compat.py`): the pad
values of TRL's batch and, in `tests/test_dynamic_sampling.py`, that `dynamic_sampling/assembly.py` reproduces TRL's
numbers.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import warnings
from collections import defaultdict, deque
from typing import Any

import trl
import trl.trainer.utils as trl_utils
from packaging.version import Version
from transformers.trainer_callback import ProgressCallback
from trl import GRPOTrainer

from .core.loss import LOSS_TYPES
from .dynamic_sampling.assembly import (
    COMPLETION_KEYS,
    MULTIMODAL_KEYS,
    PROMPT_KEYS,
    RECOMPUTED_KEYS,
    ROW_KEYS,
    SCALAR_KEYS,
)

# Releases the whole test-suite runs against in CI (Makefile: test-main and test-trl-alt).
TESTED_TRL_RANGE = (Version("1.15.0"), Version("1.17.0"))  # [min, max)

# Private GRPOTrainer methods we override or call, with their parameter names (TRL 1.10 to 1.16 agree); a trailing
# "..." pins only the leading parameters (the ones we pass; later ones vary between releases and keep defaults).
PRIVATE_METHODS: dict[str, tuple[str, ...]] = {
    # one generation round: generate, score, compute advantages, build the batch dict
    "_generate_and_score_completions": ("self", "inputs"),
    # runs every reward function and returns the gathered (N_global, n_funcs) reward matrix
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    # generation backends (transformers, vLLM, tools); returns the ragged completion lists
    "_generate": ("self", "prompts"),
    # buffers one generation batch and hands out steps_per_generation micro-batches
    "_prepare_inputs": ("self", "generation_batch"),
    # transformers' Trainer: writes the RNG state into a checkpoint, on every process (the refill state goes beside)
    "_save_rng_state": ("self", "output_dir"),
    # the log-probabilities of a batch under a model, in chunks: pipelined screening's old log-probabilities of the
    # rows it carries to the next step (DAPOTrainer._record_old_logps), computed as TRL computes its own
    "_get_per_token_logps_and_entropies": (
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "...",
    ),
}

# TRL internals imported from trl.trainer.utils (not exported by `trl`), with their parameter names.
TRL_HELPERS: dict[str, tuple[str, ...]] = {
    # the default output_dir when args=None, as GRPOTrainer builds it
    "get_config_model_id": ("config",),
    # whether TRL awaits a reward function (the reward-error guard must keep a function async)
    "is_async_callable": ("func",),
}

# Private attributes read or extended after GRPOTrainer.__init__.
PRIVATE_ATTRIBUTES: tuple[str, ...] = (
    "reward_funcs",
    "reward_func_names",
    "reward_processing_classes",
    "reward_weights",
    "num_generations",
    "num_generations_eval",
    "_metrics",
    "_logs",
    "_tokenizer",
    "eos_token_ids",
    "log_completions",
    # the KL coefficient _compute_loss reads: scaled with the advantages while masked fill rows leave the
    # per-sequence denominator (DAPOTrainer.compute_loss)
    "beta",
    # _prepare_inputs' micro-step counter and its buffer of the current generation batch's micro-batches: saved
    # and restored with dynamic sampling, so a run resumed mid-generation-cycle trains the rest of the same batch
    "_step",
    "_buffered_inputs",
)

# Private class attributes of GRPOTrainer that DAPOTrainer overrides.
PRIVATE_CLASS_ATTRIBUTES: tuple[str, ...] = (
    "_tag_names",  # the model card's tags: DAPOTrainer adds "dapo"
)

# What GRPOTrainer._generate returns that DAPOTrainer reads: the tool mask (1 for the model's tokens, 0 for tool or
# environment output) as generated, before mask_truncated_completions zeroes truncated rows of it. TRL's own length
# metrics (completions/*_length) count its 1s; the trainer counts lengths the same way (by position in the returned
# tuple, found in _generate's source; the default is TRL 1.16's position).
GENERATE_TOOL_MASK = "tool_mask"
GENERATE_TOOL_MASK_DEFAULT_POSITION = 2

# Keys of GRPOTrainer._logs (the completions table) that dynamic sampling rebuilds for the update batch.
LOG_KEYS: tuple[str, ...] = ("prompt", "completion", "rewards", "advantages", "extra")


class TRLCompatibilityError(RuntimeError):
    """The installed TRL lacks a private seam that trl_dapo_ext overrides."""


def trl_version() -> Version:
    return Version(trl.__version__)


def check_private_methods(trainer_class: type = GRPOTrainer) -> None:
    """Raise `TRLCompatibilityError` if a pinned private method is missing or has other parameters."""
    for name, expected in PRIVATE_METHODS.items():
        method = getattr(trainer_class, name, None)
        if method is None:
            raise TRLCompatibilityError(
                f"trl {trl.__version__}: GRPOTrainer.{name} no longer exists; trl_dapo_ext supports trl "
                f">={TESTED_TRL_RANGE[0]},<{TESTED_TRL_RANGE[1]} (see trl_dapo_ext/compat.py)."
            )
        found = tuple(inspect.signature(inspect.unwrap(method)).parameters)
        if expected[-1] == "...":
            found = (*found[: len(expected) - 1], "...")
        if found != expected:
            raise TRLCompatibilityError(
                f"trl {trl.__version__}: GRPOTrainer.{name}{found} differs from the pinned {expected}; "
                "trl_dapo_ext must be updated for this TRL release (see trl_dapo_ext/compat.py)."
            )


def check_private_class_attributes(trainer_class: type = GRPOTrainer) -> None:
    """Raise `TRLCompatibilityError` if GRPOTrainer lacks a class attribute that DAPOTrainer overrides."""
    missing = [name for name in PRIVATE_CLASS_ATTRIBUTES if not hasattr(trainer_class, name)]
    if missing:
        raise TRLCompatibilityError(
            f"trl {trl.__version__}: GRPOTrainer has no {missing}; trl_dapo_ext must be updated for this TRL "
            "release (see trl_dapo_ext/compat.py)."
        )


def check_trl_helpers() -> None:
    """Raise `TRLCompatibilityError` if a TRL helper we import is missing or has other parameters."""
    for name, expected in TRL_HELPERS.items():
        helper = getattr(trl_utils, name, None)
        found = tuple(inspect.signature(helper).parameters) if helper is not None else None
        if found != expected:
            raise TRLCompatibilityError(
                f"trl {trl.__version__}: trl.trainer.utils.{name} is {'missing' if found is None else found}, "
                f"pinned {expected}; trl_dapo_ext must be updated for this TRL release (see trl_dapo_ext/compat.py)."
            )


def _method_tree(trainer_class: type, name: str) -> ast.AST | None:
    """The parsed source of ``trainer_class.<name>``; None when the installed TRL ships no source."""
    try:
        source = inspect.getsource(inspect.unwrap(getattr(trainer_class, name)))
    except (OSError, TypeError):
        return None
    return ast.parse(textwrap.dedent(source))


def returned_batch_keys(trainer_class: type = GRPOTrainer) -> set[str] | None:
    """The keys ``_generate_and_score_completions`` puts into its ``output`` dict, read from its source."""
    tree = _method_tree(trainer_class, "_generate_and_score_completions")
    if tree is None:
        return None
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            if any(isinstance(t, ast.Name) and t.id == "output" for t in node.targets):
                keys.update(k.value for k in node.value.keys if isinstance(k, ast.Constant))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "output" and isinstance(node.slice, ast.Constant):
                keys.add(node.slice.value)
    return keys


def check_batch_keys(trainer_class: type = GRPOTrainer) -> None:
    """Raise `TRLCompatibilityError` if TRL's batch dict can hold a key that `dynamic_sampling/assembly.py` does not
    classify.

    Dynamic sampling selects rows of every key and re-pads prompt keys on the left, completion keys on the right;
    a key it does not know would be concatenated wrongly. (`assembly.check_keys` also refuses one at run time.)
    """
    keys = returned_batch_keys(trainer_class)
    if keys is None:  # no source to read: assembly.check_keys still refuses an unknown key at the first round
        return
    known = {*PROMPT_KEYS, *COMPLETION_KEYS, *ROW_KEYS, *SCALAR_KEYS, *MULTIMODAL_KEYS}
    unknown = sorted(keys - known)
    if unknown:
        raise TRLCompatibilityError(
            f"trl {trl.__version__}: GRPOTrainer._generate_and_score_completions can return {unknown}, which "
            "trl_dapo_ext/dynamic_sampling/assembly.py does not classify (prompt side, completion side, per row or "
            "scalar); trl_dapo_ext must be updated for this TRL release (see trl_dapo_ext/compat.py)."
        )


def logged_metric_keys(trainer_class: type = GRPOTrainer) -> set[str] | None:
    """The literal metric names ``_generate`` and ``_generate_and_score_completions`` append to ``_metrics``."""
    keys = set()
    for name in ("_generate", "_generate_and_score_completions"):
        tree = _method_tree(trainer_class, name)
        if tree is None:
            return None
        for node in ast.walk(tree):
            # self._metrics[mode]["name"], or an f-string name with "{}" for each placeholder
            inner = node.value if isinstance(node, ast.Subscript) else None
            if isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Attribute):
                if inner.value.attr == "_metrics":
                    keys.add(_literal_template(node.slice))
    keys.discard(None)
    return keys


def _literal_template(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    return None


def check_recomputed_metrics(trainer_class: type = GRPOTrainer) -> None:
    """Raise `TRLCompatibilityError` if TRL no longer logs a metric that dynamic sampling recomputes.

    `dynamic_sampling/assembly.py` replaces TRL's per-call values of these keys by values for the batch actually
    trained on; a renamed key would leave TRL's value (averaged over discarded rounds) and add a stale one beside it.
    """
    keys = logged_metric_keys(trainer_class)
    if keys is None:
        return
    missing = [key for key in (*RECOMPUTED_KEYS, "rewards/{}/mean", "rewards/{}/std") if key not in keys]
    if missing:
        raise TRLCompatibilityError(
            f"trl {trl.__version__}: GRPOTrainer no longer logs {missing}, which "
            "trl_dapo_ext/dynamic_sampling/assembly.py recomputes for dynamic sampling; trl_dapo_ext must be updated for this TRL release (see "
            "trl_dapo_ext/compat.py)."
        )


def generate_returned_names(trainer_class: type = GRPOTrainer) -> list[str | None] | None:
    """The names ``_generate`` returns, in order (None for an expression), read from its last ``return`` of a tuple
    (nested functions excluded); None when there is no source or no such ``return``."""
    tree = _method_tree(trainer_class, "_generate")
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    returns, pending = [], list(tree.body[0].body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
            returns.append(node)
        pending.extend(ast.iter_child_nodes(node))
    if not returns:
        return None
    last = max(returns, key=lambda node: node.lineno)
    return [element.id if isinstance(element, ast.Name) else None for element in last.value.elts]


def generated_tool_mask_position(trainer_class: type = GRPOTrainer) -> int:
    """Where the tool mask is in ``_generate``'s returned tuple; raise `TRLCompatibilityError` if it returns none."""
    names = generate_returned_names(trainer_class)
    if names is None:  # no source (or no tuple returned) to read: TRL 1.16's layout
        return GENERATE_TOOL_MASK_DEFAULT_POSITION
    if GENERATE_TOOL_MASK not in names:
        raise TRLCompatibilityError(
            f"trl {trl.__version__}: GRPOTrainer._generate returns {names}, without {GENERATE_TOOL_MASK!r}, from "
            "which DAPOTrainer counts completion lengths as TRL does; trl_dapo_ext must be updated for this TRL "
            "release (see trl_dapo_ext/compat.py)."
        )
    return names.index(GENERATE_TOOL_MASK)


def trl_loss_types(trainer_class: type = GRPOTrainer) -> set[str] | None:
    """The ``loss_type`` values ``_compute_loss`` branches on, read from its source (None without source)."""
    if getattr(trainer_class, "_compute_loss", None) is None:
        raise TRLCompatibilityError(
            f"trl {trl.__version__}: GRPOTrainer._compute_loss no longer exists, whose loss normalisation "
            "trl_dapo_ext/core/loss.py describes; trl_dapo_ext must be updated for this TRL release (see "
            "trl_dapo_ext/compat.py)."
        )
    tree = _method_tree(trainer_class, "_compute_loss")
    if tree is None:
        return None
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "loss_type":
            for comparator in node.comparators:
                values = comparator.elts if isinstance(comparator, (ast.List, ast.Tuple, ast.Set)) else [comparator]
                found.update(v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return found


def check_loss_types(trainer_class: type = GRPOTrainer) -> None:
    """Raise `TRLCompatibilityError` if TRL has a loss type whose denominator `core/loss.py` does not classify.

    Dynamic sampling's masked fill rows must leave every loss type's denominator; a new loss type that divides by
    its rows would silently shrink the updates of filled batches.
    """
    found = trl_loss_types(trainer_class)
    unknown = sorted((found or set()) - set(LOSS_TYPES))
    if unknown:
        raise TRLCompatibilityError(
            f"trl {trl.__version__}: GRPOTrainer._compute_loss has loss types {unknown}, whose denominators "
            "trl_dapo_ext/core/loss.py does not classify; trl_dapo_ext must be updated for this TRL release (see "
            "trl_dapo_ext/compat.py)."
        )


def check_progress_bar(callback_class: type = ProgressCallback) -> None:
    """Raise `TRLCompatibilityError` if transformers' progress callback has no ``training_bar`` attribute."""
    if not hasattr(callback_class(), "training_bar"):
        raise TRLCompatibilityError(
            f"{callback_class.__name__} has no training_bar attribute, where dynamic sampling shows its refill "
            "rounds; trl_dapo_ext must be updated for this transformers release (see trl_dapo_ext/compat.py)."
        )


def check_log_buffers(trainer: Any) -> None:
    """Raise `TRLCompatibilityError` unless ``_logs`` and ``_metrics`` have the layout dynamic sampling relies on.

    Dynamic sampling swaps ``_logs`` for unbounded buffers of the same shape during its rounds and rebuilds it for
    the update batch, and truncates the per-call values in ``_metrics["train"][key]`` lists in place.
    """
    logs, metrics = getattr(trainer, "_logs", None), getattr(trainer, "_metrics", None)
    problems = []
    if not isinstance(logs, dict) or not set(LOG_KEYS) <= set(logs):
        problems.append(f"_logs lacks {sorted(set(LOG_KEYS) - set(logs or {}))}")
    else:
        for key in LOG_KEYS:
            expected = defaultdict if key in ("rewards", "extra") else deque
            if not isinstance(logs[key], expected):
                problems.append(f"_logs[{key!r}] is a {type(logs[key]).__name__}, not a {expected.__name__}")
    train = metrics.get("train") if isinstance(metrics, dict) else None
    if not isinstance(train, defaultdict) or train.default_factory is not list:
        problems.append('_metrics["train"] is not a defaultdict(list)')
    if problems:
        raise TRLCompatibilityError(
            f"trl {trl.__version__}: {'; '.join(problems)}; trl_dapo_ext must be updated for this TRL release "
            "(see trl_dapo_ext/compat.py)."
        )


def check_private_attributes(trainer: GRPOTrainer) -> None:
    """Raise `TRLCompatibilityError` if a constructed trainer lacks an attribute we read or extend."""
    missing = [name for name in PRIVATE_ATTRIBUTES if not hasattr(trainer, name)]
    if missing:
        raise TRLCompatibilityError(
            f"trl {trl.__version__}: GRPOTrainer instances lack {missing}; trl_dapo_ext must be updated for this "
            "TRL release (see trl_dapo_ext/compat.py)."
        )


def warn_if_untested() -> None:
    low, high = TESTED_TRL_RANGE
    if not low <= trl_version() < high:
        warnings.warn(
            f"trl {trl.__version__} is outside the range trl_dapo_ext is tested against (>={low},<{high}).",
            stacklevel=3,
        )


check_private_methods()
check_private_class_attributes()
check_trl_helpers()
check_batch_keys()
check_recomputed_metrics()
check_loss_types()
check_progress_bar()
warn_if_untested()
_GENERATE_TOOL_MASK_POSITION = generated_tool_mask_position()

get_config_model_id = trl_utils.get_config_model_id
is_async_callable = trl_utils.is_async_callable


def generated_tool_mask(generated: tuple) -> list | None:
    """The tool mask in what ``GRPOTrainer._generate`` returned (per row, 1 = model token), or None without tools."""
    return generated[_GENERATE_TOOL_MASK_POSITION]


# ----------------------------------------------------------------------------------------------------------------
# transformers
# ----------------------------------------------------------------------------------------------------------------

# Undocumented attributes transformers sets on a model loaded with ``from_pretrained(..., gguf_file=...)``: the
# model is dequantised to float tensors, but while these are set ``save_pretrained`` refuses to write it.
# `models.save_dequantized` (the only code that touches them) checks them with :func:`check_gguf_model` and clears
# them; `tests/test_models.py` checks that on every transformers release CI installs, on a small GGUF it writes.
TRANSFORMERS_GGUF_ATTRIBUTES: dict[str, str] = {
    "hf_quantizer": "the model's quantizer, a transformers.quantizers.quantizer_gguf.GgufHfQuantizer (set to None)",
    "config.quantization_config": "the config's GgufConfig, quant_method 'gguf' (deleted from the config)",
}


def check_gguf_model(model: Any) -> None:
    """Raise `TRLCompatibilityError` unless ``model`` carries the GGUF quantizer attributes as listed in
    :data:`TRANSFORMERS_GGUF_ATTRIBUTES` (a GGUF-loaded model of the transformers releases CI tests)."""
    import transformers

    quantizer = getattr(model, "hf_quantizer", None)
    config = getattr(getattr(model, "config", None), "quantization_config", None)
    method = config.get("quant_method") if isinstance(config, dict) else getattr(config, "quant_method", None)
    problems = []
    if type(quantizer).__name__ != "GgufHfQuantizer":
        problems.append(f"model.hf_quantizer is {type(quantizer).__name__}, not a GgufHfQuantizer")
    if str(getattr(method, "value", method)) != "gguf":
        problems.append(f"model.config.quantization_config is {config!r}, not a GgufConfig")
    if problems:
        raise TRLCompatibilityError(
            f"transformers {transformers.__version__}: {'; '.join(problems)}: saving a GGUF-loaded model relies on "
            "them (trl_dapo_ext/models.py: save_dequantized); trl_dapo_ext must be updated for this transformers "
            "release (see trl_dapo_ext/compat.py)."
        )
