"""The advisor's section (``gpuledger advise``, docs/advise.md): the answer, the ranking with every figure's
origin, each GPU's why, the essay's criteria and how each moved the ranking, the questions left unanswered —
one model for the terminal and the HTML report (``advise --html``)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuledger.cost.advise.advise import BASIS_SHORT, Advice, Row
from gpuledger.report import fmt
from gpuledger.report.model import Answer, Figure, ReportData, Section, Series, Table

SETUP_WORDS = {"essay example": "(essay)", "doctor ledger": "(ledger)", "stated": "(stated)",
               "team answer": "(team)", "profile": "(profile)"}


def workload_text(advice: Advice) -> str:
    rq = advice.request
    want = []
    if rq.interactivity is not None:
        want.append(f"≥ {fmt.num(rq.interactivity)} tok/s per user")
    if rq.ttft_ms is not None:
        want.append(f"TTFT ≤ {fmt.num(rq.ttft_ms)} ms")
    if rq.concurrency is not None:
        want.append(f"{rq.concurrency} in flight")
    return f"{rq.input_len} in / {rq.output_len} out tokens, {', '.join(want)}, {rq.kind}"


def basis_fact(advice: Advice) -> str:
    """How the ranking is priced: one basis for every GPU, or (your profiles of another) each row's own."""
    text = advice.basis_text()
    if advice.mixed_basis:
        text += "; some GPUs are priced with your own profile on another basis: each row says its own"
    return text


def _origin(row: Row) -> str:
    best = row.best
    return best.option.origin if best is not None else fmt.MISSING


def advice_answer(advice: Advice) -> Answer:
    """The best-ranked GPU first, with what its price rests on."""
    title = f"Advice: {advice.request.arch.name}"
    ranked = advice.ranked
    cur = advice.currency
    if not ranked or ranked[0].best is None:
        return Answer(title=title, headline="no catalog GPU serves this workload — see why below",
                      facts=(("workload", workload_text(advice)),),
                      why=tuple(r.status for r in advice.rows[:5]))
    top = ranked[0]
    best = top.best
    assert best is not None and best.cost is not None
    o = best.option
    priced = "estimate" if o.origin == "estimate" else f"{o.origin} rate, priced here"
    headline = (f"{o.devices} x {top.spec.name}: {fmt.num(best.per_1m)} {cur} per 1M output tokens "
                f"({priced}; {top.basis.short})")
    sub = ""
    if len(ranked) > 1 and ranked[1].best is not None:
        nxt = ranked[1].best
        basis = f"; {ranked[1].basis.short}" if advice.mixed_basis else ""
        sub = (f"next: {nxt.option.devices} x {ranked[1].spec.name} at {fmt.num(nxt.per_1m)} {cur} "
               f"({fmt.num(nxt.per_1m / best.per_1m)}x{basis})")
    facts = [
        ("workload", workload_text(advice)),
        ("throughput", f"{fmt.num(o.output_tokens_per_s)} output tok/s on {o.devices} GPU(s), "
                       f"{fmt.num(o.tokens_per_s_per_user)} tok/s per user ({o.origin}) — {o.how}"),
        ("setup labour", f"{fmt.num(best.setup.hours)} h ({best.setup.origin}) — {best.setup.source}"),
        ("priced as", basis_fact(advice)),
        ("profile", f"{best.cost.profile.name or '(unnamed)'} ({best.cost.profile.mode}, {cur})"),
        ("criteria", ", ".join(f"{e.key}={e.answer}" for e in advice.effects) or
         f"none answered ({len(advice.unanswered)} questions below)"),
    ]
    why = [*top.why[:3], *(e.text() for e in advice.effects if e.moved)]
    return Answer(title=title, headline=headline, subline=sub, facts=tuple(facts), why=tuple(why[:5]))


def ranking_table(advice: Advice) -> Table:
    """The ranked GPUs. One pricing basis for all is said in the title; when your profiles put some on
    another, a "priced as" column says each row's."""
    cur = advice.currency
    mixed = advice.mixed_basis
    rows = []
    for r in advice.rows:
        b = r.best
        if b is None or r.rank is None:
            continue
        o = b.option
        rows.append((
            str(r.rank), r.spec.name, str(o.devices), fmt.num(o.tokens_per_s_per_user),
            fmt.num((o.output_tokens_per_s or 0.0) / o.devices), fmt.num(b.per_1m),
            *((r.basis.short,) if mixed else ()), o.origin,
            f"{fmt.num(b.setup.hours)} {SETUP_WORDS.get(b.setup.origin, b.setup.origin)}",
        ))
    basis = BASIS_SHORT[advice.request.tier]
    title = (f"Ranking by {cur} per 1M output tokens, "
             + ("each GPU priced as its row says" if mixed else f"every GPU priced {basis}")
             + " (each GPU's smallest deployment that serves it)")
    return Table(
        key="advice-ranking",
        title=title,
        columns=("#", "GPU", "GPUs", "tok/s per user", "output tok/s per GPU", f"{cur} per 1M output",
                 *(("priced as",) if mixed else ()), "throughput from", "setup h"),
        rows=tuple(rows),
        provenance="throughput: estimate (roofline at the stated efficiency), published (a publisher's "
                   "point as published) or derived from published (between a publisher's points, "
                   f"interpolated); cost: {advice.basis_text()}, with the setup labour shown",
    )


def not_ranked_lines(advice: Advice) -> list[str]:
    return [f"{r.spec.name}: {r.status}" + (f" ({r.why[-1]})" if r.why else "")
            for r in advice.rows if r.rank is None]


def why_lines(advice: Advice) -> list[tuple[str, str]]:
    """Every ranked GPU's why, whole (the HTML report and --json)."""
    return [(f"#{r.rank} {r.spec.name}", line) for r in advice.ranked for line in r.why]


def short_why(row: Row) -> str:
    """One line per ranked GPU (the terminal): fit, what throughput rests on, setup labour."""
    best = row.best
    if best is None:
        return row.status
    o = best.option
    parts = [f"{o.devices} GPU(s) hold {fmt.num(o.memory.weights_bytes / 1e9)} GB of weights + "
             f"{fmt.num(o.memory.kv_bytes / 1e9)} GB of KV cache for {fmt.num(o.concurrency)} sequences"]
    smaller = [p for p in row.options if p.option.devices < o.devices and p.option.problem]
    if smaller:
        parts.append(f"fewer GPUs: {smaller[-1].option.problem}")
    parts.append(f"throughput {o.origin}: {o.how}")
    parts.append(f"setup {fmt.num(best.setup.hours)} h: {best.setup.source}")
    return "; ".join(parts)


def criteria_table(advice: Advice) -> Table:
    rows = []
    for e in advice.effects:
        d = e.document()
        moved = "; ".join(f"{n}: {_r(b)} → {_r(a)}" for n, b, a in e.moved) or "order unchanged"
        rows.append((d.question, e.answer, e.effect, moved, d.essay))
    return Table(
        key="advice-criteria",
        title="The essay's criteria (§7.1, §7.2): your answers and how each moved the ranking",
        columns=("question", "answer", "what it did", "how the ranking moved", "from the essay"),
        rows=tuple(rows),
        align_numbers=False,
    )


def _r(rank: int | None) -> str:
    return f"#{rank}" if rank is not None else "not ranked"


def unanswered_lines(advice: Advice) -> list[str]:
    from gpuledger.cost.advise.advise_criteria import QUESTIONS

    return [f"{QUESTIONS[k][0]} (--{k.replace('_', '-')} {QUESTIONS[k][2]}; {QUESTIONS[k][1]})"
            for k in advice.unanswered]


def advice_section(advice: Advice) -> Section:
    """The advisor section of an HTML/Markdown report."""
    cur = advice.currency
    ranked = [r for r in advice.ranked if r.best is not None]
    figure = Figure(
        key="advice-cost",
        title=f"{cur} per 1M output tokens by GPU (lower is better)",
        kind="bar",
        x_title="GPU",
        y_title=f"{cur} per 1M output tokens",
        series=(Series(name="cost", x=tuple(r.spec.name for r in ranked),
                       y=tuple(r.best.per_1m for r in ranked if r.best is not None)),),
        provenance="each GPU's smallest deployment that serves the workload; origins in the table",
    )
    why = Table(key="advice-why", title="Why, per GPU", columns=("GPU", "why"),
                rows=tuple(why_lines(advice)), align_numbers=False)
    tables = [ranking_table(advice), why]
    if advice.effects:
        tables.append(criteria_table(advice))
    return Section(
        key="advice",
        title="Advisor: which GPU for this workload",
        intro=f"{advice.request.arch.name}: {workload_text(advice)}",
        tables=tuple(tables),
        figures=(figure,) if ranked else (),
        not_measured=tuple(not_ranked_lines(advice)),
        notes=(*advice.assumptions, *(f"unanswered: {q}" for q in unanswered_lines(advice))),
        answers=(advice_answer(advice),),
    )


def advice_report(advice: Advice) -> ReportData:
    """A self-contained report of one advice (``advise --html``)."""
    return ReportData(
        title=f"gpuledger advisor: {advice.request.arch.name}",
        generated_at=datetime.now(UTC),
        runs=(),
        sections=(advice_section(advice),),
    )
