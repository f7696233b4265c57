"""``segmentstore completion bash|zsh``: a shell completion script made from the argparse
parser itself, so every subcommand, option and choice a module registers is completed
without a list kept by hand.

The script holds three tables keyed by the command path ("segmentstore segment tail"): its
subcommands, its options, and the choices of an option; the shell function walks the
words typed so far to find the path. Anything else (file names) falls back to the shell's
default completion. zsh runs the same script through ``bashcompinit``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from ._cli import examples

_FUNCTION = r"""
_segmentstore() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" path="segmentstore" w i
    (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"
    for (( i = 1; i < COMP_CWORD; i++ )); do
        w="${COMP_WORDS[i]}"
        if [[ " ${_segmentstore_subs[$path]-} " == *" $w "* ]]; then
            path="$path $w"
        fi
    done
    COMPREPLY=()
    if [[ -n "${_segmentstore_choices[$path $prev]+set}" ]]; then
        COMPREPLY=( $(compgen -W "${_segmentstore_choices[$path $prev]}" -- "$cur") )
    elif [[ "$cur" == -* ]]; then
        COMPREPLY=( $(compgen -W "${_segmentstore_opts[$path]-}" -- "$cur") )
    elif [[ -n "${_segmentstore_subs[$path]-}" ]]; then
        COMPREPLY=( $(compgen -W "${_segmentstore_subs[$path]}" -- "$cur") )
    fi
}
complete -o default -F _segmentstore segmentstore
"""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for bash or zsh. Load it in the current "
        "shell with eval, or save it where your shell looks for completions.",
        epilog=examples(
            'eval "$(segmentstore completion bash)"   # in ~/.bashrc',
            'eval "$(segmentstore completion zsh)"    # in ~/.zshrc',
            "segmentstore completion bash > /etc/bash_completion.d/segmentstore",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(func=_handler)


def tables(
    parser: argparse.ArgumentParser, path: str = "segmentstore"
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(subcommands by path, options by path, choices by "path option")."""
    subs: dict[str, str] = {}
    opts: dict[str, str] = {}
    choices: dict[str, str] = {}
    names: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                names.append(name)
                s, o, c = tables(child, f"{path} {name}")
                subs.update(s)
                opts.update(o)
                choices.update(c)
        elif action.option_strings:
            opts[path] = " ".join(filter(None, [opts.get(path), *action.option_strings]))
            if action.choices:
                for flag in action.option_strings:
                    choices[f"{path} {flag}"] = " ".join(map(str, action.choices))
        elif action.choices:  # a positional with choices (completion's shell)
            subs[path] = " ".join(map(str, action.choices))
    if names:
        subs[path] = " ".join(names)
    return subs, opts, choices


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    subs, opts, choices = tables(parser)
    out = [f'# segmentstore completion; load with: eval "$(segmentstore completion {shell})"']
    if shell == "zsh":
        out.append("autoload -U +X bashcompinit && bashcompinit")
    for name, table in (("subs", subs), ("opts", opts), ("choices", choices)):
        out.append(f"declare -gA _segmentstore_{name}=(")
        out.extend(f"    [{shlex.quote(k)}]={shlex.quote(v)}" for k, v in sorted(table.items()))
        out.append(")")
    return "\n".join(out) + _FUNCTION


def _handler(args: argparse.Namespace) -> int:
    from ..cli import _parser

    sys.stdout.write(script(_parser(), args.shell))
    return 0
