"""Command-line rewriting done before Hydra parses ``sys.argv``: bare words -> ``key=value`` overrides."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rewind.config import ConfigError

# Hydra flags whose next word is their value (not a positional argument).
_FLAGS_WITH_VALUE = frozenset(
    {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn"}
    | {"--config-dir", "-cd", "--experimental-rerun"}
)
_INFO_FLAGS = frozenset({"--info", "-i"})
_INFO_CHOICES = frozenset({"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"})


def quote_override_value(value: str) -> str:
    """Quote ``value`` for Hydra's override grammar so commas, spaces, brackets etc. stay literal.

    Inside single quotes Hydra un-escapes ``\\'`` and backslashes that precede a quote or the end.
    """
    escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value)
    return "'" + escaped.replace("'", "\\'") + "'"


def is_override(word: str) -> bool:
    """True for a Hydra override (``k=v``, ``+k=v``, ``~k``) or a flag, false for a bare word."""
    return "=" in word or word.startswith(("-", "~", "+"))


def override_keys(args: Sequence[str]) -> set[str]:
    """Keys set by ``key=value`` overrides in ``args`` (prefixes ``+``/``++`` stripped)."""
    return {a.split("=", 1)[0].lstrip("+") for a in args if "=" in a and not a.startswith("-")}


def _classify(args: Sequence[str]) -> list[str]:
    """Label each word of ``args``: ``flag`` (a Hydra flag or its value), ``override`` or ``word``."""
    kinds: list[str] = []
    expect_value = False
    for i, arg in enumerate(args):
        if expect_value:
            kinds.append("flag")
            expect_value = False
            continue
        if arg in _FLAGS_WITH_VALUE:
            expect_value = True
        elif arg in _INFO_FLAGS:
            expect_value = i + 1 < len(args) and args[i + 1] in _INFO_CHOICES
        kinds.append("flag" if arg.startswith("-") else "override" if is_override(arg) else "word")
    return kinds


def split_flags(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(flags, overrides)``: Hydra's parser needs every flag before the overrides it is given."""
    kinds = _classify(args)
    flags = [a for a, k in zip(args, kinds, strict=True) if k == "flag"]
    return flags, [a for a, k in zip(args, kinds, strict=True) if k != "flag"]


def map_positional(args: Sequence[str], positional: Sequence[str], prog: str = "command") -> list[str]:
    """Replace bare words in ``args`` (``sys.argv[1:]``) by ``key=value`` for the keys in ``positional``.

    Raises:
        ConfigError: for more bare words than declared keys, or a key given both ways.
    """
    out = list(args)
    words = [(i, a) for i, (a, k) in enumerate(zip(args, _classify(args), strict=True)) if k == "word"]
    if len(words) > len(positional):
        extra = " ".join(w for _, w in words[len(positional) :])
        takes = " ".join(k.upper() for k in positional) if positional else "no positional arguments"
        raise ConfigError(f"unexpected argument(s): {extra} (usage: {prog} {takes} [key=value ...])")
    explicit = override_keys(args)
    for (index, word), key in zip(words, positional, strict=False):
        if key in explicit:
            raise ConfigError(f"'{key}' given twice: as argument '{word}' and as {key}=...")
        out[index] = f"{key}={quote_override_value(word)}"
    return out
