"""The REST API: the routes of the REST queue service Conveyor replaces, plus receipts and
admin: the routes (routes.py) and what they read and write (bodies.py)."""
