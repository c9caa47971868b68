"""Schema changes never break an existing store: Alembic migrations, applied on open."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from store_factories import make_run

from gpuledger.errors import StoreError
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.records import DoctorRunRecord, RequestRecord, TelemetrySample, dump_summary
from gpuledger.store import open_store
from gpuledger.store.codec import pack_f64
from gpuledger.store.engine import make_engine, resolve_url
from gpuledger.store.migrate import HEAD, MIGRATIONS_DIR, REVISIONS, alembic_config, current_revision, upgrade
from gpuledger.store.models import metadata

CREATED = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)


def _engine(db_url: str) -> tuple[sa.Engine, sa.URL]:
    url, _ = resolve_url(db_url)
    return make_engine(url), url


def _fill_first_schema(engine: sa.Engine) -> None:
    """Rows as gpuledger's first schema (revision 0001) stored them, written with plain SQL."""
    ts = sa.DateTime(timezone=True)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO runs (id, label, created_at, status, engine, model, unit, workload, config, "
                "environment, server, summary, telemetry_summary, client, num_requests, updated_at) VALUES "
                "(:id, 'may-baseline', :created, 'complete', 'vllm', 'llama-8b', 'token', :workload, :empty, "
                ":env, :empty, :summary, :tsum, :empty, 2, :created)"
            ).bindparams(
                sa.bindparam("created", type_=ts),
                *(sa.bindparam(k, type_=sa.JSON()) for k in ("workload", "empty", "env", "summary", "tsum")),
            ),
            {"id": "oldrun01", "created": CREATED, "workload": {"dataset": "sharegpt"}, "empty": {},
             "env": {"hash": "sha256:0ld", "driver": "550"}, "summary": {"output_tokens_per_s": 812.5},
             "tsum": [{"device": "nvidia:0", "energy_j": 9000.0}]},
        )
        for idx, times in ((0, [0.05, 0.06, 0.07]), (1, [0.15])):
            conn.execute(
                sa.text(
                    "INSERT INTO requests (run_id, idx, stage, t_send, t_first, t_end, chunk_times, "
                    "input_tokens, output_tokens, token_source, output_chars) VALUES "
                    "('oldrun01', :idx, '', :send, :first, :end, :times, 16, :n, 'server_usage', 12)"
                ),
                {"idx": idx, "send": idx / 10, "first": times[0], "end": times[-1], "times": pack_f64(times),
                 "n": len(times)},
            )
        conn.execute(
            sa.text("INSERT INTO telemetry (run_id, t, device, metric, value, source) "
                    "VALUES ('oldrun01', 0.5, 'nvidia:0', 'power_w', 312.0, 'nvml')")
        )
        conn.execute(
            sa.text("INSERT INTO doctor_runs (machine, created_at, errors, warnings, findings, facts) "
                    "VALUES ('box-a', :created, 0, 1, :findings, :facts)").bindparams(
                sa.bindparam("created", type_=ts), sa.bindparam("findings", type_=sa.JSON()),
                sa.bindparam("facts", type_=sa.JSON())),
            {"created": CREATED, "findings": [{"id": "x", "severity": "warning"}], "facts": {"gpus": 1}},
        )


def test_a_store_created_by_the_first_schema_upgrades_to_head_with_its_data_intact(db_url: str) -> None:
    engine, url = _engine(db_url)
    upgrade(engine, url, "0001")
    _fill_first_schema(engine)
    with engine.connect() as conn:
        assert current_revision(conn) == "0001"
    engine.dispose()

    with open_store(db_url) as store:
        run = store.get_run("oldrun01")
        assert (run.label, run.status, run.created_at) == ("may-baseline", "complete", CREATED)
        assert run.num_requests == 2
        assert isinstance(run.summary, TextGenerationSummary)  # the untyped summary of schema 1, upgraded
        assert run.summary.output_tokens_per_s == 812.5
        assert dump_summary(run.summary) == {"output_tokens_per_s": 812.5}
        assert run.environment.to_dict() == {"hash": "sha256:0ld", "driver": "550"}
        assert store.env_hash("oldrun01") == "sha256:0ld"  # revision 0002 filled it for the old run
        assert store.get_requests("oldrun01") == [
            RequestRecord(0, 0.0, 0.05, 0.07, [0.05, 0.06, 0.07], None, 16, 3, "server_usage", None, None, "",
                          None, 12),
            RequestRecord(1, 0.1, 0.15, 0.15, [0.15], None, 16, 1, "server_usage", None, None, "", None, 12),
        ]
        assert store.get_telemetry("oldrun01") == [TelemetrySample(0.5, "nvidia:0", "power_w", 312.0, "nvml")]
        (doctor,) = store.list_doctor_runs()
        assert doctor == DoctorRunRecord("box-a", CREATED, 0, 1, [{"id": "x", "severity": "warning"}],
                                         {"gpus": 1}, id=doctor.id)
    engine, _ = _engine(db_url)
    with engine.connect() as conn:
        assert current_revision(conn) == HEAD
    engine.dispose()


def test_the_known_revisions_are_exactly_the_migration_scripts_in_order() -> None:
    scripts = ScriptDirectory(str(MIGRATIONS_DIR))
    chain = [s.revision for s in scripts.walk_revisions()][::-1]
    assert tuple(chain) == REVISIONS
    assert scripts.get_current_head() == HEAD


def test_the_migrated_schema_is_exactly_the_models(db_url: str) -> None:
    open_store(db_url).close()
    engine, _ = _engine(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    engine.dispose()
    assert diff == []


def test_downgrading_and_upgrading_again_keeps_the_data(db_url: str) -> None:
    with open_store(db_url) as store:
        run_id = store.create_run(make_run(environment={"hash": "h-1"}))
    engine, _ = _engine(db_url)
    with engine.connect() as conn:
        conn.execution_options(gpuledger_write=True)
        with conn.begin():
            command.downgrade(alembic_config(conn), "0001")
        assert "env_hash" not in {c["name"] for c in sa.inspect(conn).get_columns("runs")}
    engine.dispose()
    with open_store(db_url) as store:
        assert store.env_hash(run_id) == "h-1"


def test_opening_a_store_at_head_does_not_run_alembic(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    open_store(db_url).close()

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("alembic upgrade ran on a store already at head")

    monkeypatch.setattr(command, "upgrade", refuse)
    open_store(db_url).close()


def test_an_unknown_revision_in_the_store_is_refused(db_url: str) -> None:
    open_store(db_url).close()
    engine, _ = _engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'f00dcafe'"))
    engine.dispose()
    with pytest.raises(StoreError, match="newer gpuledger"):
        open_store(db_url)
