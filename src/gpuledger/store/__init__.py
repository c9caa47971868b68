"""The results store: runs, requests, telemetry, doctor runs, cost evaluations (SQLite or PostgreSQL).

    store = open_store(url)   # --db URL > $GPULEDGER_DB > default_db_url(); migrates on open

See docs/store.md and docs/contracts.md "Store".
"""

from gpuledger.store.engine import default_db_url
from gpuledger.store.repository import Store, open_store

__all__ = ["Store", "default_db_url", "open_store"]
