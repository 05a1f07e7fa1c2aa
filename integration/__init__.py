"""integration package."""
