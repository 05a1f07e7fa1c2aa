"""connectors package."""
