"""``gpuledger import-results``, ``public``, and the re-priced section of ``compare`` (docs/published.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table
from rich.text import Text

from gpuledger.cli.common import DbOpt, JsonOpt, console, err_console, print_json

if TYPE_CHECKING:
    from gpuledger.catalog import Catalog
    from gpuledger.cost.comparison.repricing import Repricing
    from gpuledger.cost.headlines import HeadlineOffer
    from gpuledger.records import RunInfo


def _runs_of(what: str, catalog: Catalog) -> tuple[list[RunInfo], str]:
    """The runs of a file, or of the shipped public set named ``what`` (a file of that name wins)."""
    from gpuledger.cost.published.published import public_points, public_sets, read_points

    path = Path(what).expanduser()
    named = what in public_sets() or not (path.suffix or "/" in what or "\\" in what)
    if path.exists() or not named:
        return read_points(path, catalog), str(path)
    return public_points(what, catalog), f"public set {what}"


class ImportedPoint(BaseModel):
    """One published point as ``import-results`` stored it: the run it became and what was published."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    label: str | None
    model: str
    gpu: str | None
    gpus: int | None
    published_by: str | None
    output_tokens_per_s: float | None
    as_published: str

    @classmethod
    def of(cls, run_id: str, info: RunInfo) -> ImportedPoint:
        summary = info.summary
        origin = summary.origin() if summary is not None else None
        return cls(
            id=run_id,
            label=info.label,
            model=info.model,
            gpu=origin.gpu if origin is not None else None,
            gpus=origin.gpus if origin is not None else None,
            published_by=origin.by if origin is not None else None,
            output_tokens_per_s=summary.rate("output_token") if summary is not None else None,
            as_published=_as_published(summary),
        )


class ImportDocument(BaseModel):
    """``import-results --json``: where the points came from and each point stored."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    source: str = Field(alias="from")
    imported: tuple[ImportedPoint, ...]


def _as_published(summary: object) -> str:
    """``"5,856.9 total tok/s"``: the rate the publisher gave (the others are derived from it)."""
    from gpuledger.kinds.text.published import PublishedSummary

    if not isinstance(summary, PublishedSummary):
        return "—"
    words = {"output_tokens_per_s": "output", "input_tokens_per_s": "input", "total_tokens_per_s": "total"}
    return ", ".join(f"{getattr(summary, k):,.1f} {words[k]} tok/s" for k in summary.published_rates)


def import_results_cmd(
    source: Annotated[
        str,
        typer.Argument(
            help="A CSV, YAML or JSON file of published points, or the name of a shipped set "
            "(`gpuledger public` lists them)."
        ),
    ],
    json_out: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Store published benchmark points as runs (origin: published), priced and compared like measured
    runs and always labelled "published by SOURCE (DATE), not measured here". All rows are checked
    first: one bad row is one error naming its row and column, and nothing is stored."""
    from gpuledger.catalog import load_catalog
    from gpuledger.store import open_store

    catalog = load_catalog()
    infos, where = _runs_of(source, catalog)
    with open_store(db) as store, err_console.status("importing…"):
        ids = store.create_runs(infos)
    points = tuple(ImportedPoint.of(i, info) for i, info in zip(ids, infos, strict=True))
    doc = ImportDocument(source=where, imported=points)
    if json_out:
        print_json(doc.model_dump(mode="json", by_alias=True))
        return
    title = f"Imported {len(doc.imported)} published point(s) from {doc.source}"
    table = Table(title=title, title_justify="left")
    table.add_column("run")
    table.add_column("label", overflow="fold")
    table.add_column("GPUs", justify="right")
    table.add_column("rate as published", justify="right")
    table.add_column("published by", overflow="fold")
    for r in doc.imported:
        table.add_row(Text(r.id), Text(r.label or ""), Text(f"{r.gpus} x {r.gpu}"),
                      Text(r.as_published), Text(str(r.published_by)))
    console.print(table)
    console.print(Text("  not measured here: `gpuledger cost RUN`, `compare A B` price them like measured "
                       "runs, with their origin in every figure"))


def public_cmd(json_out: JsonOpt = False) -> None:
    """The public points shipped with gpuledger (a dated snapshot, each set with its page and how it
    was read), and next to each headline pair that is not like for like the closest like-for-like pair;
    `gpuledger import-results NAME` stores a set."""
    from gpuledger.cost.headlines import headline_offers
    from gpuledger.cost.published.published import public_file

    doc = public_file()
    offers = headline_offers()
    if json_out:
        print_json({
            "snapshot": doc.snapshot.isoformat(),
            "about": doc.about,
            "sets": [
                {"name": name, **s.model_dump(mode="json")} for name, s in doc.sets.items()
            ],
            "offers": [o.model_dump(mode="json") for o in offers],
        })
        return
    table = Table(title=f"Public results shipped with gpuledger (snapshot {doc.snapshot.isoformat()})",
                  title_justify="left")
    for col in ("name", "what", "points", "date", "source"):
        table.add_column(col, justify="right" if col == "points" else "left", overflow="fold")
    for name, s in doc.sets.items():
        table.add_row(Text(name), Text(s.title), Text(str(len(s.points))), Text(s.date.isoformat()),
                      Text(s.url))
    console.print(table)
    render_offers(offers)
    console.print(Text("  gpuledger import-results NAME stores a set; how each figure was read, and what "
                       "each set lacks: gpuledger public --json"))


def render_offers(offers: list[HeadlineOffer]) -> None:
    """Each headline pair that is not like for like, what differs, and the like-for-like pair next to it."""
    from gpuledger.report.layout import paragraph

    if not offers:
        return
    console.print()
    paragraph(console, Text("Headline pairs and the like-for-like pair next to each (output tok/s per GPU, "
                            "A ÷ B)", style="bold"))
    for o in offers:
        printed = (f"; {o.published_cost_ratio:.3g}x per token at the publisher's printed costs"
                   if o.published_cost_ratio is not None else "")
        paragraph(console, f"{o.a.label} vs {o.b.label}: {o.throughput_ratio_per_gpu:.3g}x{printed}",
                  lead=f"  {o.set}, at {o.operating_point}: ", indent=4)
        for d in o.likeness.counted:
            mark = "not known" if d.status == "unknown" else "differs"
            paragraph(console, f"{d.a} vs {d.b}", lead=f"    {d.aspect} ({mark}): ", indent=6)
        c = o.like_for_like
        if c is None:
            paragraph(console, "no shipped pair of these two vendors", lead="    like for like: ", indent=6)
            continue
        t = o.like_for_like_cost
        tier = (f"; {t.ratio:.3g}x per token at the publisher's {t.tier} tier ({t.profile_a}, {t.profile_b})"
                if t is not None else "")
        paragraph(console, f"{c.label_a} vs {c.label_b}: {c.throughput_ratio_per_gpu:.3g}x{tier} — "
                           f"{c.likeness.summary}", lead="    next to it: ", indent=6)


# ---- the re-priced comparison (compare) ------------------------------------------------------------
def render_repricing(found: list[Repricing]) -> None:
    """For each pair of published points: the published ratio (the publisher's tiers), the user's, and
    the parts of the pricing that moved it."""
    from gpuledger.report.layout import paragraph  # fitted to the terminal's width

    for r in found:
        a, b = r.pair.a, r.pair.b
        words = r.pair.words()
        cur = r.publisher_a.currency
        console.print()
        paragraph(console, Text(f"Published comparison re-priced: {a.run.id} vs {b.run.id} ({words} per "
                                "currency unit, A ÷ B)", style="bold"))
        origin = a.summary.origin()
        if origin is not None:
            paragraph(console, f"rates {origin.label}; the same in both pricings", lead="  ", indent=4)
        printed = "" if r.as_published_ratio is None else f" (as printed: {r.as_published_ratio:.3g}x)"
        paragraph(console, f"publisher's tiers ({r.publisher_a.profile.name}, {r.publisher_b.profile.name}; "
                           f"{cur}): {r.published_ratio:.3g}x{printed}", lead="  ", indent=4)
        paragraph(console, f"your profiles ({a.profile.name}, {b.profile.name}; {a.currency}): "
                           f"{r.user_ratio:.3g}x = {r.change:.3g} x the published ratio", lead="  ", indent=4)
        if not r.steps:
            paragraph(console, r.steps_note, lead="  ", indent=4)
            continue
        table = Table(title="What moved it (publisher's pricing -> yours, one part at a time)",
                      title_justify="left")
        table.add_column("part")
        table.add_column("publisher -> you", overflow="fold")
        table.add_column("factor", justify="right")
        table.add_column("ratio after", justify="right")
        for s in r.steps:
            table.add_row(Text(s.part), Text(s.what), Text(f"x{s.factor:.3g}"), Text(f"{s.ratio:.3g}x"))
        console.print(table)
        paragraph(console, Text(r.steps_note, style="dim"), lead="  ", indent=4)


def register(app: typer.Typer) -> None:
    """Add ``import-results`` and ``public``."""
    app.command("import-results")(import_results_cmd)
    app.command("public")(public_cmd)
