"""Reads a table that sluice committed, with PyIceberg over the same SQLite catalog, and prints
its row count and a checksum of its rows (see tests/pyiceberg.rs, which computes the same)."""

import sys

from pyiceberg.catalog.sql import SqlCatalog

warehouse, name, table = sys.argv[1], sys.argv[2], sys.argv[3]
catalog = SqlCatalog(
    name,
    uri=f"sqlite:///{warehouse}/catalog.db",
    warehouse=f"file://{warehouse}",
)
rows = catalog.load_table(table).scan(selected_fields=("id", "key")).to_arrow()
checksum = 0
for i, k in zip(rows.column("id").to_pylist(), rows.column("key").to_pylist()):
    checksum = (checksum + i * 31 + sum(k.encode())) % ((1 << 61) - 1)
print(rows.num_rows, checksum)
