"""Command-line rewriting and checks done before Hydra parses ``sys.argv``.

Bare words become ``key=value`` overrides (:func:`map_positional`); unknown flags, malformed
overrides and renamed keys become one-line :class:`~rewind.config.ConfigError` s (:func:`check_flags`,
:func:`parse_overrides`) instead of Hydra's usage text or parser trace.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import NoReturn

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException

from rewind.config import ConfigError, check_renamed_key

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


def _raise_config_error(message: str) -> NoReturn:
    raise ConfigError(message)


def check_flags(flags: Sequence[str]) -> None:
    """Raise :class:`ConfigError` for a flag Hydra does not know or a flag value it rejects.

    Hydra's own parser would print its usage text and exit; this runs the same parser first.
    """
    from hydra._internal.utils import get_args_parser  # the parser hydra.main uses

    parser: argparse.ArgumentParser = get_args_parser()
    parser.error = _raise_config_error  # type: ignore[method-assign]
    _, unknown = parser.parse_known_args(list(flags))
    if unknown:
        raise ConfigError(f"unknown option '{unknown[0]}' (--help lists the options and keys)")


def parse_overrides(overrides: Sequence[str]) -> list[Override]:
    """Parse ``key=value`` overrides with Hydra's grammar.

    Raises:
        ConfigError: naming the first malformed override (``=x``, ``foo==``, unbalanced brackets), or
            the new name of a renamed key (:data:`rewind.config.RENAMED_KEYS`).
    """
    parser = OverridesParser.create()
    parsed = []
    for word in overrides:
        key = word.split("=", 1)[0].lstrip("+~")
        if not key:
            raise ConfigError(f"malformed override '{word}': no key before '=' (expected key=value)")
        check_renamed_key(key)
        try:
            parsed.extend(parser.parse_overrides([word]))
        except OverrideParseException:
            raise ConfigError(
                f"malformed override '{word}' (expected key=value; quote a value with special "
                f"characters: {key}='...')"
            ) from None
    return parsed
