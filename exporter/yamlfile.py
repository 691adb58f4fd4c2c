"""YAML read the same way everywhere: libyaml's parser when PyYAML has it, errors that name the file.

PyYAML is imported on first use (about 10 ms, and most commands read no YAML).
"""

from __future__ import annotations

import io
from typing import Any


class YamlError(ValueError):
    """Not YAML; the message names the file, line and column."""


def safe_load(text: str, name: str, unique_keys: bool = False) -> Any:
    """The one YAML document in ``text``; YamlError naming ``name``. ``unique_keys``: a key given twice in one
    mapping is an error (Go's yaml.UnmarshalStrict, which exporter-toolkit uses), not silently the last value."""
    import yaml

    loader = _unique_loader() if unique_keys else getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    stream = io.StringIO(text)
    stream.name = name  # the marks of an error name the file, not "<unicode string>"
    try:
        return yaml.load(stream, Loader=loader)
    except yaml.YAMLError as exc:
        raise YamlError(str(exc)) from None


_UNIQUE: Any = None


def _unique_loader() -> Any:
    global _UNIQUE
    if _UNIQUE is None:
        import yaml

        base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        class UniqueKeyLoader(base):  # type: ignore[misc]
            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=deep)
                    if isinstance(key, str | int | float | bool) and key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {key!r} is given twice", key_node.start_mark
                        )
                    seen.add(key)
                return super().construct_mapping(node, deep=deep)

        _UNIQUE = UniqueKeyLoader
    return _UNIQUE
