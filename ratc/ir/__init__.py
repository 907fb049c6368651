"""ratc's IR: SSA values, ops with regions, an op registry per dialect, text format, verifier."""

from ratc.ir.attributes import ByteSize, SymbolRef
from ratc.ir.core import Block, Module, Operation, Value, uses
from ratc.ir.parser import parse_file, parse_module
from ratc.ir.printer import print_module, print_op
from ratc.ir.registry import DIALECTS, REGISTRY, Dialect, OpDef, load_dialects, lookup
from ratc.ir.types import DTYPE_BYTES, OpaqueType, TensorType, Type, parse_type
from ratc.ir.verifier import VerifyError, verify, verify_op

__all__ = [
    "Block", "ByteSize", "DIALECTS", "DTYPE_BYTES", "Dialect", "Module", "OpDef", "OpaqueType",
    "Operation", "REGISTRY", "SymbolRef", "TensorType", "Type", "Value", "VerifyError",
    "load_dialects", "lookup", "parse_file", "parse_module", "parse_type", "print_module",
    "print_op", "uses", "verify", "verify_op",
]
