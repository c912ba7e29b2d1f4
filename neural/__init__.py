"""neural package."""
