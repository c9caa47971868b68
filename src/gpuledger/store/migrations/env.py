"""Alembic environment for the gpuledger store.

gpuledger runs migrations itself (``gpuledger.store.migrate``) and hands Alembic an open
connection in ``config.attributes["connection"]``. A developer may also run the ``alembic`` command
with ``-x url=...`` (or ``$GPULEDGER_DB``) to inspect or autogenerate against a store.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from gpuledger.store.engine import make_engine, resolve_url
from gpuledger.store.models import metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    given = context.config.attributes.get("connection")
    if isinstance(given, Connection):
        _run(given)
        return
    url, _ = resolve_url(context.get_x_argument(as_dictionary=True).get("url"))
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
    finally:
        engine.dispose()


_main()
