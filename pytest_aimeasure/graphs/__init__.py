"""The structural toolkit: graph gates, the walker and self-healing generation (networkx)."""
