"""Errors of platform profiles."""

from __future__ import annotations

from ratc.errors import LocatedError, RatcError


class PlatformError(RatcError):
    """A platform profile that is missing, malformed or inconsistent."""


class LocatedPlatformError(LocatedError, PlatformError):
    """A platform profile error at a line of its text (a host profile's)."""


class KindError(PlatformError, AttributeError):
    """A section asked of a platform of the other kind (a DSP's [vliw] of a host); an
    AttributeError too, so hasattr() says the platform has none."""
