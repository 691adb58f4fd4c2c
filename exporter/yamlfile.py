"""YAML read the same way everywhere: libyaml's parser when PyYAML has it, errors that name the file.

PyYAML is imported on first use (about 10 ms, and most commands read no YAML).
"""

from __future__ import annotations

import io
from typing import Any


class YamlError(ValueError):
    """Not YAML; the message names the file, line and column."""


def safe_load(text: str, name: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    stream = io.StringIO(text)
    stream.name = name  # the marks of an error name the file, not "<unicode string>"
    try:
        return yaml.load(stream, Loader=loader)
    except yaml.YAMLError as exc:
        raise YamlError(str(exc)) from None
