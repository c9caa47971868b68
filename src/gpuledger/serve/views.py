"""The dashboard's report-like pages as ``report.model.ReportData`` (laid out by ``report.html.report_main``):
a comparison (``compare``'s answer and tables), a matrix (``report --matrix``'s page), a trend (``report
--trend``'s page)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from gpuledger.cost.comparison.compare import PairComparison
from gpuledger.cost.stored import StoredComparison
from gpuledger.records import RunInfo
from gpuledger.report.costs import _comparison_tables, parts_figure, throughput_tables
from gpuledger.report.fmt import num
from gpuledger.report.groups import group_comparison_answer, group_table
from gpuledger.report.headline import ratio_answer
from gpuledger.report.matrix_model import MatrixReport
from gpuledger.report.matrix_page import matrix_page
from gpuledger.report.model import Answer, ReportData, RunRef, Section, Table
from gpuledger.report.trend import Trend, trend_report
from gpuledger.serve.dashboard import TREND_MAX_RUNS
from gpuledger.serve.params import CompareParams


def _ref(run: RunInfo, name: str) -> RunRef:
    return RunRef(id=run.id, name=name, label=run.label, model=run.model, engine=run.engine,
                  status=run.status, started_at=run.started_at)


def _names(runs: Mapping[str, RunInfo]) -> dict[str, str]:
    """How the page calls each run: its label when no other run has it, else ``label (id)``, else its id."""
    labels = [r.label.strip() for r in runs.values()]
    out = {}
    for rid, run in runs.items():
        label = run.label.strip()
        out[rid] = label if label and labels.count(label) == 1 else (f"{label} ({rid})" if label else rid)
    return out


def comparison_page(
    result: StoredComparison, runs: Mapping[str, RunInfo], params: CompareParams
) -> tuple[ReportData, float | None]:
    """``compare A B`` as a page — the ratio first, then what it is made of — and the ratio itself."""
    names = _names(runs)
    refs = tuple(_ref(run, names[rid]) for rid, run in runs.items())
    now = datetime.now(UTC)
    if result.groups is not None:
        gc = result.groups
        answer = group_comparison_answer(gc)
        sections = (
            Section(key="answer", title="Answer", answers=(answer,)),
            Section(key="groups", title="The groups' runs",
                    intro="Each run of each group, to the precision of its group's interval.",
                    tables=(group_table(gc.a), group_table(gc.b))),
        )
        title = f"Compare {gc.a.name} ÷ {gc.b.name}"
        ratio = gc.ratio.ratio if gc.ratio is not None else None
        return ReportData(title=title, generated_at=now, runs=refs, sections=sections), ratio
    comp = result.comparison
    if comp is None:
        raise ValueError("a comparison of runs or of groups")
    first = comp.pairs[0] if comp.pairs else None
    found = ratio_answer(comp, names)
    answers: tuple[Answer, ...] = (found,) if found is not None else ()
    parts, likeness = throughput_tables(comp, names)
    one = params_profile(comp)
    priced = f"every run with the profile {one}" if one else "each run with its own profile"
    words = first.words() if first is not None else "—"
    parts_intro = f"Priced in {comp.currency}, {priced}; basis: {words}."
    warnings = tuple(w for pair in comp.pairs for w in pair.warnings)
    page: list[Section] = [
        Section(key="answer", title="Answer", answers=answers),
        Section(key="ratio", title="What the ratio is made of", intro=parts_intro,
                tables=(*_comparison_tables(comp, names)[:2], parts),
                figures=tuple(parts_figure(pair, names) for pair in comp.pairs)),
        Section(key="like_for_like", title="Like for like", tables=(likeness,),
                notes=tuple(_closest(pair, names) for pair in comp.pairs if pair.closest is not None)),
        Section(key="flip", title="What would flip it", tables=tuple(_comparison_tables(comp, names)[2:])),
        Section(key="warnings", title="Warnings",
                intro="About the runs' settings and measurements." if warnings else "None.", notes=warnings),
    ]
    if result.repricing:
        page.append(_repricing_section(result))
    a, b = (first.a.run.id, first.b.run.id) if first is not None else (params.a, params.b)
    title = f"Compare {names.get(a, a)} ÷ {names.get(b, b)}"
    return ReportData(title=title, generated_at=now, runs=refs, sections=tuple(page)), (
        first.ratio if first is not None else None)


def _closest(pair: PairComparison, names: Mapping[str, str]) -> str:
    """The closest like-for-like pair the store holds, for a pair that is not like for like (``compare``'s
    search), as a line."""
    search = pair.closest
    a, b = names.get(pair.a.run.id, pair.a.run.id), names.get(pair.b.run.id, pair.b.run.id)
    if search is None or search.found is None:
        return f"{a} vs {b}: no closer like-for-like pair in the {search.searched if search else 0} newest " \
               f"runs — {search.why if search else ''}"
    c = search.found
    still = "like for like" if c.likeness.like_for_like else c.likeness.summary
    return (f"{a} vs {b}: the closest like-for-like pair in this store is {c.label_a} ({c.a}) vs {c.label_b} "
            f"({c.b}), ratio {num(c.throughput_ratio_per_gpu)}x ({c.rate_unit}, A / B; {still}) — "
            f"/compare?a={c.a}&b={c.b}")


def params_profile(comp: object) -> str | None:
    """The one profile every run of the comparison was priced with, if it is one."""
    costs = getattr(comp, "costs", ())
    names = {c.profile.name for c in costs}
    return names.pop() if len(names) == 1 else None


def _repricing_section(result: StoredComparison) -> Section:
    tables = []
    notes = []
    for i, r in enumerate(result.repricing):
        a, b = r.pair.a.run.id, r.pair.b.run.id
        rows = [("publisher's tiers", f"{r.publisher_a.profile.name}, {r.publisher_b.profile.name}",
                 "", f"{num(r.published_ratio)}x"),
                *((s.part, s.what, f"x{num(s.factor)}", f"{num(s.ratio)}x") for s in r.steps)]
        tables.append(Table(
            key=f"repricing_{i}", title=f"{a} vs {b}: the publisher's pricing → yours, one part at a time",
            columns=("part", "publisher → you", "factor", "ratio after"), rows=tuple(rows),
            provenance=r.steps_note))
        notes.append(f"{a} vs {b}: your profiles give {num(r.user_ratio)}x = {num(r.change)} x the published "
                     "ratio")
    return Section(key="repricing", title="Published comparison re-priced", tables=tuple(tables),
                   notes=tuple(notes))


def matrix_view(report: MatrixReport) -> ReportData:
    """``report --matrix ID``'s page."""
    return matrix_page(report)


def trend_view(trend: Trend, capped: bool) -> ReportData:
    """``report --trend``'s page (a note when only the newest runs were followed)."""
    page = trend_report(trend)
    if not capped or not page.sections:
        return page
    first = page.sections[0]
    note = f"only the newest {TREND_MAX_RUNS:,} runs are followed here (gpuledger report --trend follows all)"
    noted = first.model_copy(update={"notes": (*first.notes, note)})
    return page.model_copy(update={"sections": (noted, *page.sections[1:])})
