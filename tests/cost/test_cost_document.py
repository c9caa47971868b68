"""The cost document is a typed model (cost/pricing/document.py): its dump is ``cost --json``, its money keys
are named from the profile's currency in one place, and a saved evaluation reads back into the same model
(``stored_cost``) — for a text run with its split and price at SLO, a sweep priced at a stage, a training
run with its job, a CPU run under a rental — so what ``show`` prints of it is the model's, not a key found."""

from __future__ import annotations

import json

import pytest
from cost_runs import MakeRun, Stage
from test_training_job_energy import OWNED, training_run

from gpuledger.catalog import Catalog
from gpuledger.cost import CostProfile, cost_of_run
from gpuledger.cost.pricing.document import CostDocument
from gpuledger.cost.pricing.runcost import RunCost, stored_cost
from gpuledger.errors import InvalidInputError
from gpuledger.kinds.text.pricing import TextPricing
from gpuledger.kinds.train.pricing import TrainingJob, TrainingPricing, job_cost
from gpuledger.records import RunInfo
from gpuledger.report.headline import saved_price

RENTAL = CostProfile(name="rent2", rental_per_gpu_hour=2.00, utilisation=0.5)
CNY = CostProfile(name="cny", currency="CNY", rental_per_gpu_hour=14.0, output_to_input_cost_ratio=4.0)


def _through_json(doc: CostDocument) -> dict[str, object]:
    """What ``cost --json`` prints and the store keeps: the dump, through JSON text."""
    loaded: dict[str, object] = json.loads(json.dumps(doc.model_dump(mode="json")))
    return loaded


def _reads_back(cost: RunCost, doc: CostDocument | None = None) -> CostDocument:
    doc = doc if doc is not None else cost.document()
    run_summary = cost.run.summary
    assert run_summary is not None
    back = stored_cost(_through_json(doc), run_summary)
    assert back == doc
    assert back.model_dump(mode="json") == doc.model_dump(mode="json")
    return back


def test_a_text_runs_document_reads_back_with_its_split_and_price_at_slo(
    make_run: MakeRun, catalog: Catalog
) -> None:
    cost = cost_of_run(make_run(), CNY, catalog=catalog)
    back = _reads_back(cost)
    text = back.extra(TextPricing)
    assert isinstance(text, TextPricing)
    split = text.split()
    assert split.rule is not None and "user ratio" in split.rule
    assert [p.unit for p in split.parts] == ["input_token", "output_token"]
    assert back.price("output_token") == pytest.approx(cost.evaluation.cost_per("output_token"))


def test_money_keys_are_named_from_the_currency_by_the_one_serializer(
    make_run: MakeRun, catalog: Catalog
) -> None:
    dumped = cost_of_run(make_run(), CNY, catalog=catalog).document().model_dump(mode="json")
    money = {k for k in dumped if "cny" in k}
    assert money == {"cny_per_hour", "cny_per_1m_output_tokens", "cny_per_1m_tokens", "cny_per_request",
                     "cny_per_good_request", "cny_per_1m_output_tokens_at_slo", "output_tokens_per_cny",
                     "tokens_per_cny"}
    assert not any("usd" in k for k in dumped)
    assert {"cny_per_1m_input_tokens", "cny_per_1m_output_tokens"} <= set(dumped["split"])
    assert "labour_rate_cny_per_hour" in dumped["labour"] and "capex_cny_per_hour" in dumped["hourly"]


def test_a_sweep_priced_at_a_stage_reads_back_with_every_stage(make_run: MakeRun, catalog: Catalog) -> None:
    run = make_run("sweep001", stages=[Stage("c=1", 100.0), Stage("c=4", 350.0), Stage("c=16", 900.0)])
    back = _reads_back(cost_of_run(run, RENTAL, catalog=catalog))
    assert back.operating_point is not None and back.operating_point.stage == "c=16"
    assert [s.stage for s in back.operating_point.stages] == ["c=1", "c=4", "c=16"]
    assert all(s.price.value is not None and s.rate.value is not None for s in back.operating_point.stages)


def test_a_training_runs_document_reads_back_with_its_job(catalog: Catalog) -> None:
    cost = cost_of_run(training_run(), OWNED, catalog=catalog)
    job = job_cost(cost, 4e9)
    back = _reads_back(cost, cost.document().with_extra(job))
    assert isinstance(back.extra(TrainingPricing), TrainingPricing)
    read_job = back.extra(TrainingJob)
    assert isinstance(read_job, TrainingJob) and read_job.total == pytest.approx(job.total)
    dumped = back.model_dump(mode="json")
    assert dumped["training_job"]["usd"] == pytest.approx(job.total)
    assert dumped["training_job"]["usd_by_component"]["energy"] == pytest.approx(job.by_component.energy)


def test_a_cpu_run_under_a_rental_reads_back_with_its_energy_reason(
    make_run: MakeRun, catalog: Catalog
) -> None:
    cpu = {"device": "cpu", "vendor": "cpu", "name": "Test CPU", "unavailable": {"power_w": "no RAPL"}}
    cost = cost_of_run(make_run(devices=[cpu]), CostProfile(rental_per_hour=0.0816), catalog=catalog)
    back = _reads_back(cost)
    assert back.energy.joules is None and back.energy.reason is not None
    assert back.power.serving_w is None and back.hourly.priced_power_w is None


def test_a_saved_evaluation_gives_shows_price_and_another_shape_gives_none(
    make_run: MakeRun, catalog: Catalog
) -> None:
    run: RunInfo = make_run()
    doc = _through_json(cost_of_run(run, RENTAL, catalog=catalog).document())
    price = saved_price(run, doc)
    assert price is not None and price.endswith("USD per 1M output tokens")
    with pytest.raises(InvalidInputError):
        stored_cost({**doc, "surprise": 1}, run.summary)  # type: ignore[arg-type]
    assert saved_price(run, {"currency": "USD", "usd_per_1m_output_tokens": 1.0}) is None
