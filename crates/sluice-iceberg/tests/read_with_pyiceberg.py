"""Reads a table that sluice committed, with PyIceberg over the same SQLite catalog, and prints
its row count and a checksum of its rows (see tests/pyiceberg.rs, which computes the same).

Arguments: the directory of catalog.db, the catalog name, the table; for a warehouse in S3 also
the warehouse location (s3://bucket/prefix) and the S3 endpoint (tests/s3.rs)."""

import sys

from pyiceberg.catalog.sql import SqlCatalog

warehouse, name, table = sys.argv[1], sys.argv[2], sys.argv[3]
if len(sys.argv) > 5:
    location, endpoint = sys.argv[4], sys.argv[5]
    catalog = SqlCatalog(
        name,
        uri=f"sqlite:///{warehouse}/catalog.db",
        warehouse=location,
        **{
            "s3.endpoint": endpoint,
            "s3.region": "us-east-1",
            "s3.access-key-id": "testing",
            "s3.secret-access-key": "testing",
        },
    )
else:
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
