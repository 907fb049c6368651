"""The dialects shipped with ratc; importing this package registers all of them.

The graph dialect is the IR's own; the life dialect belongs to ratc.lifecycle, whose
verifier it calls. Naming the modules here (as data, imported on first lookup) is how the
IR core loads them without importing a layer above it, as MLIR tools register dialects."""

import importlib

DIALECT_MODULES = ["ratc.ir.dialects.graph", "ratc.lifecycle.dialect"]

for _name in DIALECT_MODULES:
    importlib.import_module(_name)
