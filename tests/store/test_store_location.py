"""Where the store lives: --db URL > $GPULEDGER_DB > a SQLite file in the user's data directory."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest
from store_factories import make_run

from gpuledger.store import default_db_url, open_store
from gpuledger.store.engine import resolve_url


def test_an_explicit_url_beats_the_environment_which_beats_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPULEDGER_DB", f"sqlite:///{tmp_path / 'env.sqlite'}")
    assert resolve_url(f"sqlite:///{tmp_path / 'flag.sqlite'}")[0].database == str(tmp_path / "flag.sqlite")
    assert resolve_url(None) == (resolve_url(f"sqlite:///{tmp_path / 'env.sqlite'}")[0], False)
    monkeypatch.setenv("GPULEDGER_DB", "  ")
    url, is_default = resolve_url(None)
    assert is_default and url.render_as_string() == default_db_url()


def test_the_default_is_gpuledger_sqlite_in_the_platform_data_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GPULEDGER_DATA_DIR")
    expected = Path(platformdirs.user_data_dir("gpuledger")) / "gpuledger.sqlite"
    assert default_db_url() == f"sqlite:///{expected}"


def test_gpuledger_data_dir_overrides_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPULEDGER_DB")
    data = tmp_path / "data" / "gpuledger"
    monkeypatch.setenv("GPULEDGER_DATA_DIR", str(data))
    with open_store(None) as store:  # the default location is created on first use
        run_id = store.create_run(make_run())
        assert store.url == f"sqlite:///{data / 'gpuledger.sqlite'}"
    with open_store(None) as again:
        assert again.get_run(run_id).id == run_id


@pytest.mark.parametrize(
    "given",
    ["postgresql://u:pw@db.example:5433/results", "postgres://u:pw@db.example:5433/results",
     "postgresql+psycopg://u:pw@db.example:5433/results"],
)
def test_postgresql_urls_all_mean_psycopg_3(given: str) -> None:
    url, _ = resolve_url(given)
    assert url.drivername == "postgresql+psycopg"
    assert (url.host, url.port, url.database, url.username) == ("db.example", 5433, "results", "u")
