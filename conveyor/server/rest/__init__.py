"""The REST API: the routes of the REST queue service Conveyor replaces, plus receipts and
admin (routes.py)."""
