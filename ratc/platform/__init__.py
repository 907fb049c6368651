"""Platform profiles: documented TOML files of every physical parameter ratc models."""

from ratc.platform.loader import Platform, PlatformError, list_platforms, load_platform, parse_platform

__all__ = ["Platform", "PlatformError", "list_platforms", "load_platform", "parse_platform"]
