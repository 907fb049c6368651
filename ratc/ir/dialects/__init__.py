"""The dialects shipped with ratc; importing this package registers all of them."""

import importlib

# Each name is a module of this package that declares one dialect.
DIALECT_MODULES = ["graph", "life"]

for _name in DIALECT_MODULES:
    importlib.import_module(f"{__name__}.{_name}")
