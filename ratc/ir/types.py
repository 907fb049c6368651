"""IR types: ranked tensor types with a dtype, and opaque dialect types such as !life.grad."""

from __future__ import annotations

import math
import re

# Bytes per element of each element type ratc knows.
# Element types by their IR names (i1 is a bool), and their sizes: the one dtype table.
DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "u8": 1, "i32": 4, "i64": 8}

_TENSOR_RE = re.compile(r"tensor<((?:\d+x)*)([a-z][a-z0-9]*)>")


class Type:
    """Base of all IR types; types are immutable and compare by value."""

    __slots__ = ()


class TensorType(Type):
    """A statically shaped tensor, printed as tensor<2048x4096xf16>."""

    __slots__ = ("shape", "dtype", "_text")

    def __init__(self, shape, dtype: str):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        dims = "".join(f"{d}x" for d in self.shape)
        self._text = f"tensor<{dims}{dtype}>"

    @classmethod
    def parse(cls, text: str) -> "TensorType":
        m = _TENSOR_RE.fullmatch(text)
        if not m:
            raise ValueError(f"malformed tensor type {text!r}")
        dims = [int(d) for d in m.group(1).split("x") if d]
        return cls(dims, m.group(2))

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]

    def __str__(self) -> str:
        return self._text

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorType) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)


class OpaqueType(Type):
    """A dialect-defined type without structure, printed as !dialect.name."""

    __slots__ = ("dialect", "name", "_text")

    def __init__(self, dialect: str, name: str):
        self.dialect, self.name = dialect, name
        self._text = f"!{dialect}.{name}"    # printed and compared often (verifier, printer)

    @classmethod
    def parse(cls, text: str) -> "OpaqueType":
        dialect, _, name = text[1:].partition(".")
        return cls(dialect, name)

    def __str__(self) -> str:
        return self._text

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, OpaqueType) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)


def parse_type(text: str) -> Type:
    """Parse a type from its printed form."""
    return OpaqueType.parse(text) if text.startswith("!") else TensorType.parse(text)
