"""The Pass base class, typed pass options and the pass registry."""

from __future__ import annotations

import dataclasses
import importlib
import re
import typing
from dataclasses import dataclass, field

from ratc.errors import RatcError
from ratc.ir.core import Module


def option(default, help: str):
    """A pass option: a typed dataclass field with a default and a one-line help."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


class PassError(RatcError):
    """A pass that cannot do its work on this module (the message says why)."""


@dataclass
class PassContext:
    """What passes share beyond the module: the platform and named artifacts (plans, kernels)."""

    platform: object = None
    artifacts: dict = field(default_factory=dict)


@dataclass
class Pass:
    """Base of all passes: subclasses set `name` and declare options as dataclass fields."""

    name: typing.ClassVar[str] = ""
    # False for a pass that only annotates ops (no op moved, added to a region or rewired):
    # the structure check after it would see what it saw before, so the pass manager's
    # default mode leaves its ops to the check at the pipeline's end (--verify-each still
    # verifies everything after it).
    changes_structure: typing.ClassVar[bool] = True

    def run(self, module: Module, ctx: PassContext) -> Module | None:
        """Transform the module in place (return None) or return a new module."""
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0]

    @classmethod
    def option_fields(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls)]

    def spec(self) -> str:
        """This pass with all its option values, in pipeline syntax: name{k=v,...}."""
        opts = ",".join(f"{f.name.replace('_', '-')}={format_option(getattr(self, f.name))}"
                        for f in self.option_fields())
        return f"{self.name}{{{opts}}}" if opts else self.name


def format_option(value) -> str:
    """An option value in pipeline syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    # Values with separators (or none at all) are quoted, as the pipeline parser reads them.
    if not text or re.search(r'[,{}=\s;:]', text):
        return f'"{text}"'
    return text


def parse_option(cls: type[Pass], key: str, text: str):
    """Convert an option's text to the field's declared type; raises ValueError with the reason."""
    fields = {f.name: f for f in cls.option_fields()}
    name = key.replace("-", "_")
    if name not in fields:
        known = ", ".join(f.name.replace("_", "-") for f in fields.values()) or "none"
        raise KeyError(f"pass '{cls.name}' has no option '{key}' (options: {known})")
    hint = typing.get_type_hints(cls)[name]
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        if text not in choices:
            raise ValueError(f"option '{key}' must be one of {', '.join(choices)}, got '{text}'")
        return text
    if hint is bool:
        if text not in ("true", "false"):
            raise ValueError(f"option '{key}' must be true or false, got '{text}'")
        return text == "true"
    if hint is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"option '{key}' must be an integer, got '{text}'") from None
    if hint is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"option '{key}' must be a number, got '{text}'") from None
    return text


def type_name(cls: type[Pass], f: dataclasses.Field) -> str:
    """A readable name of an option's type for `ratc passes`."""
    hint = typing.get_type_hints(cls)[f.name]
    if typing.get_origin(hint) is typing.Literal:
        return "|".join(typing.get_args(hint))
    return getattr(hint, "__name__", str(hint))


PASSES: dict[str, type[Pass]] = {}

# Modules whose import registers passes; later components append theirs.
PASS_MODULES = ["ratc.passes.generic", "ratc.passes.lifecycle"]


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make a pass available by its kebab-case name."""
    if not cls.name or cls.name in PASSES:
        raise ValueError(f"pass {cls.__name__} needs a unique name, got {cls.name!r}")
    # Every subclass is (re)made a dataclass so its own option fields are collected.
    PASSES[cls.name] = dataclass(cls)
    return PASSES[cls.name]


def load_passes() -> dict[str, type[Pass]]:
    """Import every pass module and return the registry."""
    for mod in PASS_MODULES:
        importlib.import_module(mod)
    return PASSES
