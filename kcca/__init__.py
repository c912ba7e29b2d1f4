"""kcca package."""
