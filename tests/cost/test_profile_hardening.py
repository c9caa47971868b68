"""Cost profiles from outside are checked before a number is computed: every figure finite and
plausible, the file text, a mapping of profile fields; errors name the file and why, never what else
it holds. A profile that ``extends`` one in another currency converts the inherited money fields at a
stated exchange rate, or is refused (issue 15: 30,000 USD silently became 30,000 CNY)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuledger.cli.main import main
from gpuledger.cost.pricing.presets import load_profile
from gpuledger.cost.pricing.profile import MONEY_FIELDS
from gpuledger.errors import InvalidInputError
from gpuledger.store import open_store

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
RUN = json.loads((GOLDEN / "ids.json").read_text())["h200"]

NUMBERS = ("gpu_price", "electricity_per_kwh", "pue", "amortisation_months", "utilisation", "power_w",
           "labour_rate_per_hour", "setup_hours", "host_power_w", "idle_power_w", "hosting_per_month")


def _write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _refused(path: Path) -> str:
    with pytest.raises(InvalidInputError) as info:
        load_profile(str(path))
    message = info.value.message
    assert "\n" not in message
    return message


# ---- numbers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
@pytest.mark.parametrize("field", NUMBERS)
def test_a_non_finite_figure_is_refused_naming_its_field(tmp_path: Path, field: str, value: str) -> None:
    message = _refused(_write(tmp_path, f"extends: h100-sxm-own\n{field}: {value}\n"))
    assert field in message and "finite" in message


def test_an_absurdly_large_figure_is_refused(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path, "extends: h100-sxm-own\ngpu_price: 1.0e+300\n"))
    assert "gpu_price" in message and "at most" in message


@pytest.fixture
def golden_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    shutil.copy(GOLDEN / "store-v1.sqlite", tmp_path / "golden.sqlite")
    url = f"sqlite:///{tmp_path / 'golden.sqlite'}"
    monkeypatch.setenv("GPULEDGER_DB", url)
    return url


def test_an_inf_price_is_neither_printed_nor_saved(
    golden_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue: a price of .inf printed "inf USD" and "nan%" and was saved with the run."""
    store = open_store(golden_db)
    try:
        before = len(store.list_cost_evaluations(RUN))
    finally:
        store.close()
    profile = _write(tmp_path, "extends: h200-own\ngpu_price: .inf\n")
    assert main(["cost", RUN, "--profile", str(profile)]) == 4
    captured = capsys.readouterr()
    assert captured.out == "" and "inf USD" not in captured.err and "nan" not in captured.err
    store = open_store(golden_db)
    try:
        assert len(store.list_cost_evaluations(RUN)) == before
    finally:
        store.close()


# ---- files that are not profiles --------------------------------------------------------------------

SHADOW = "root:$6$S3CRETsalt$S3CREThash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"


def test_extends_of_a_password_file_names_the_path_and_never_its_content(tmp_path: Path) -> None:
    shadow = _write(tmp_path, SHADOW, "shadow")
    message = _refused(_write(tmp_path, f"extends: {shadow}\n"))
    assert str(shadow) in message and "not a cost profile" in message
    assert "S3CRET" not in message and "root:" not in message and "daemon" not in message


def test_a_file_of_other_keys_is_not_a_profile_and_its_values_are_not_shown(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path, "password: hunter2\ntoken: abc123\n"))
    assert "not a cost profile" in message and "hunter2" not in message and "abc123" not in message


def test_a_key_that_is_no_field_name_is_not_echoed(tmp_path: Path) -> None:
    path = _write(tmp_path, 'extends: h100-sxm-own\n"root:*:19000:0:99999:7::": x\n')
    message = _refused(path)
    assert "not a field name" in message and ":19000" not in message


def test_a_mistyped_field_is_still_named_with_a_suggestion(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path, "extends: h100-sxm-own\ngpu_prce: 1\n"))
    assert "'gpu_prce'" in message and "did you mean 'gpu_price'" in message


def test_a_bad_value_is_shown_shortened(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path, f"extends: h100-sxm-own\ngpu_price: {'z' * 10_000}\n"))
    assert "gpu_price" in message and len(message) < 400


def test_a_binary_file_is_refused_as_such(tmp_path: Path) -> None:
    path = tmp_path / "blob.yaml"
    path.write_bytes(bytes(range(256)))
    assert "not UTF-8 text" in _refused(path)


def test_a_file_with_nul_bytes_is_refused_as_binary(tmp_path: Path) -> None:
    path = tmp_path / "nul.yaml"
    path.write_bytes(b"extends: h100-sxm-own\n\x00\x00\n")
    assert "NUL" in _refused(path)


def test_a_huge_file_is_refused_without_being_parsed(tmp_path: Path) -> None:
    path = _write(tmp_path, "extends: h100-sxm-own\ndescription: " + "d" * 2_000_000 + "\n")
    assert "larger than 1,000,000 bytes" in _refused(path)


@pytest.mark.parametrize(("field", "size"), [("name", 201), ("description", 2_001)])
def test_texts_are_bounded(tmp_path: Path, field: str, size: int) -> None:
    message = _refused(_write(tmp_path, f"extends: h100-sxm-own\n{field}: {'t' * size}\n"))
    assert field in message and "at most" in message


# ---- currency ---------------------------------------------------------------------------------------

RATE = "exchange_rate: {from: USD, rate: 7.1, source: 'PBOC central parity rate', date: 2026-11-30}\n"


def test_a_change_of_currency_over_inherited_prices_is_refused_naming_them(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path, "extends: h100-sxm-own\ncurrency: CNY\n"))
    base = load_profile("h100-sxm-own")
    inherited = [f for f in MONEY_FIELDS if getattr(base, f)]
    assert {"gpu_price", "electricity_per_kwh", "labour_rate_per_hour"} <= set(inherited)
    for name in inherited:
        assert name in message
    assert "CNY" in message and "USD" in message and f"{base.gpu_price:,g} USD" in message


def test_an_exchange_rate_converts_every_inherited_price_and_says_so(tmp_path: Path) -> None:
    base = load_profile("h100-sxm-own")
    prof = load_profile(str(_write(tmp_path, "extends: h100-sxm-own\ncurrency: CNY\n" + RATE)))
    assert prof.currency == "CNY"
    for name in ("gpu_price", "electricity_per_kwh", "labour_rate_per_hour"):
        assert getattr(prof, name) == pytest.approx(getattr(base, name) * 7.1)
        assert "at 7.1 CNY per USD (PBOC central parity rate, 2026-11-30)" in prof.sources[name]
        assert prof.sources[name].startswith(base.sources[name])
    assert prof.pue == base.pue and prof.amortisation_months == base.amortisation_months


def test_a_price_the_file_gives_itself_is_not_converted(tmp_path: Path) -> None:
    prof = load_profile(str(_write(
        tmp_path, "extends: h100-sxm-own\ncurrency: CNY\nelectricity_per_kwh: 0.65\n" + RATE)))
    assert prof.electricity_per_kwh == 0.65
    assert "converted" not in prof.source_of("electricity_per_kwh")


def test_a_file_that_gives_every_inherited_price_needs_no_rate(tmp_path: Path) -> None:
    text = "extends: h100-sxm-rent\ncurrency: CNY\nrental_per_gpu_hour: 15\nlabour_rate_per_hour: 300\n"
    prof = load_profile(str(_write(tmp_path, text)))
    assert prof.currency == "CNY" and prof.rental_per_gpu_hour == 15


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("extends: h100-sxm-own\ncurrency: CNY\nexchange_rate: {from: EUR, rate: 7.1, source: x, "
         "date: 2026-11-30}\n", "h100-sxm-own is in USD"),
        ("extends: h100-sxm-own\n" + RATE, "applies only when this file's currency differs"),
        ("currency: CNY\ngpu_price: 1\nelectricity_per_kwh: 1\n" + RATE, "applies only with extends"),
        ("extends: h100-sxm-own\ncurrency: CNY\nexchange_rate: {from: USD, rate: .inf, source: x, "
         "date: 2026-11-30}\n", "rate"),
        ("extends: h100-sxm-own\ncurrency: CNY\nexchange_rate: {from: USD, rate: 7.1, date: 2026-11-30}\n",
         "source"),
        ("extends: h100-sxm-own\ncurrency: CNY\nexchange_rate: {from: USD, rate: 7.1, source: x}\n", "date"),
    ],
)
def test_an_exchange_rate_must_fit_and_be_sourced(tmp_path: Path, text: str, needle: str) -> None:
    assert needle in _refused(_write(tmp_path, text))


def test_cost_in_another_currency_prices_in_it(
    golden_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = _write(tmp_path, "extends: h200-own\ncurrency: CNY\n", "plain.yaml")
    assert main(["cost", RUN, "--profile", str(plain), "--no-save"]) == 4
    assert "inherited from h200-own in USD" in capsys.readouterr().err
    converted = _write(tmp_path, "extends: h200-own\ncurrency: CNY\n" + RATE, "cny.yaml")
    assert main(["cost", RUN, "--profile", str(converted), "--no-save", "--json"]) == 0
    cny = json.loads(capsys.readouterr().out)
    assert main(["cost", RUN, "--profile", "h200-own", "--no-save", "--json"]) == 0
    usd = json.loads(capsys.readouterr().out)
    assert cny["currency"] == "CNY" and usd["currency"] == "USD"
    assert cny["cny_per_hour"] == pytest.approx(usd["usd_per_hour"] * 7.1)  # every price converted
