"""Holders: an allocation queued once and kept, that attempts run inside (docs/hold.md)."""
