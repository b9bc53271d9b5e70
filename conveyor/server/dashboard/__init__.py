"""The dashboard: its routes (routes.py) and the static page they serve (static/)."""
