"""``trl-dapo recipes``: list the recipes shipped inside the package, print where one is, copy one out for editing.

Examples::

    trl-dapo recipes                              # the names, what each is for, and the installed folder
    trl-dapo train --config tiny_cpu              # a shipped recipe by name (a path works as before)
    trl-dapo recipes copy gsm8k_lora_1gpu my.yaml # edit my.yaml, then: trl-dapo train --config my.yaml
    accelerate launch --config_file "$(trl-dapo recipes path accelerate/zero2)" -m trl_dapo_ext.cli.main train ...
"""

from __future__ import annotations

import argparse
import sys

from trl_dapo_ext import recipes


def listing() -> str:
    """The text of ``trl-dapo recipes``."""
    training, accelerate = recipes.names(), recipes.names(accelerate=True)
    width = max(map(len, training + accelerate), default=0)

    def rows(names: list[str]) -> list[str]:
        return [f"  {name:<{width}}  {recipes.DESCRIPTIONS.get(name, '')}".rstrip() for name in names]

    return "\n".join(
        [
            "recipes (trl-dapo train --config NAME; trl-dapo recipes copy NAME [DEST] to edit one):",
            *rows(training),
            'accelerate configs (accelerate launch --config_file "$(trl-dapo recipes path NAME)"):',
            *rows(accelerate),
            f"installed in {recipes.RECIPES_DIR}",
        ]
    )


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The recipes shipped with trl-dapo-ext: list them (no arguments, or list), print one's path, "
        "or copy one out for editing (with the data file it trains on).",
        epilog="trl-dapo train --config NAME runs a shipped recipe; --config PATH runs your own.",
    )
    commands = parser.add_subparsers(dest="action", metavar="{list,path,copy}")
    commands.add_parser("list", help="list the shipped recipes and accelerate configs (the default)")
    path = commands.add_parser("path", help="print the installed file of a recipe or accelerate config")
    path.add_argument("name", metavar="NAME")
    copy = commands.add_parser("copy", help="copy a recipe (and its data file) out for editing")
    copy.add_argument("name", metavar="NAME", help="a name from trl-dapo recipes")
    copy.add_argument(
        "destination",
        metavar="DEST",
        nargs="?",
        default=".",
        help="a folder, or a file name ending in .yaml (default .)",
    )
    copy.add_argument("--force", action="store_true", help="overwrite files that differ")
    return parser


def main(argv: list[str] | None = None, prog: str = "trl-dapo recipes") -> int:
    """Run ``trl-dapo recipes``; 0, or 2 with one line on stderr (an unknown name lists the names)."""
    options = _parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if options.action in (None, "list"):
            print(listing())
        elif options.action == "path":
            print(recipes.recipe_path(options.name))
        else:
            written = recipes.copy_recipe(options.name, options.destination, force=options.force)
            print(f"wrote {', '.join(map(str, written))}")
            if not options.name.startswith("accelerate/"):
                print(f"run it with: trl-dapo train --config {written[0]}")
    except (recipes.RecipeNotFound, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    return 0
