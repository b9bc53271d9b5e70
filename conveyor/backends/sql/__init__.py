"""The SQL stores: ``sqlite://`` (embedded, the default), ``postgresql://`` and ``mysql://``.

One implementation of every contract (`store.SQLStore`), over a `Dialect` per database
(`sqlite.py`, `postgres.py`, `mysql.py`: where messages live, the hot path) and a
`Connections` object per database (how operations reach it; SQLite's in
`sqlite_connections.py`). Every statement is named once in `statements.py` (those of the
bulk access in `pipeline_statements.py`, PostgreSQL's and MySQL's own in
`server_statements.py`, the schema's versions in `schema.py`) and compiled by each dialect
for its driver (`statement.py`). Nothing here is imported until a URL names the store
(`conveyor.urls`).
"""
