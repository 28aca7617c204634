"""edged: an on-device inference daemon."""

__version__ = "0.1.0"
