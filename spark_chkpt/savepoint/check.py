"""``savepoint check``: will a savepoint restore into a new version of its job?

More: docs/concepts/savepoints.md (spark_chkpt/savepoint/check.py).
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass, field
from enum import IntEnum
from typing import Any, Literal

from spark_chkpt.savepoint.manifest import CHECKPOINT, Savepoint, SavepointError
from spark_chkpt.savepoint.plan import JobPlan
from spark_chkpt.state.schema import Field, StoreSchema, store_schemas

Verdict = Literal["restored", "dropped", "incompatible"]
ALLOW_FLAG = "--allow-non-restored-state"


class CheckStatus(IntEnum):
    """The outcome, worst first wins; the values are the command's exit codes."""

    RESTORABLE = 0
    DROPS_STATE = 1
    INCOMPATIBLE = 2


@dataclass(frozen=True)
class OperatorCheck:
    """One operator id's verdict, why, and notes that do not change it."""

    operator_id: int
    name: str | None
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.verdict == "dropped":
            text = f"dropped (needs {ALLOW_FLAG})"
        elif self.verdict == "incompatible":
            text = "incompatible: " + "; ".join(self.reasons)
        else:
            text = "restored"
        if self.notes:
            text += " (" + "; ".join(self.notes) + ")"
        return f"operator {self.operator_id} ({self.name or '?'}): {text}"


@dataclass(frozen=True)
class CheckReport:
    """What ``savepoint check`` prints."""

    savepoint: str
    job: str
    operators: list[OperatorCheck]
    sources: list[str]
    sink: str
    output_mode: str
    problems: list[str]  # incompatible, outside the operators (sources, output mode)

    @property
    def status(self) -> CheckStatus:
        if self.problems or any(o.verdict == "incompatible" for o in self.operators):
            return CheckStatus.INCOMPATIBLE
        if any(o.verdict == "dropped" for o in self.operators):
            return CheckStatus.DROPS_STATE
        return CheckStatus.RESTORABLE

    def lines(self) -> list[str]:
        out = [f"savepoint   {self.savepoint}", f"job         {self.job}"]
        out += [f"source      {s}" for s in self.sources]
        out.append(f"sink        {self.sink}")
        out.append(f"output mode {self.output_mode}")
        out += [o.describe() for o in self.operators] or ["no stateful operator on either side"]
        out += [f"incompatible: {p}" for p in self.problems]
        verdict = {
            CheckStatus.RESTORABLE: "every operator's state restores",
            CheckStatus.DROPS_STATE: f"some state would be dropped: restore with {ALLOW_FLAG}",
            CheckStatus.INCOMPATIBLE: "the savepoint cannot be restored into this job",
        }[self.status]
        out.append(f"result      {int(self.status)}: {verdict}")
        return out

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["status"] = int(self.status)
        return doc


def check_savepoint(*, savepoint: Savepoint, plan: JobPlan) -> CheckReport:
    """Compare ``savepoint`` with the plan of the job it is to be restored into."""
    manifest = savepoint.manifest
    saved = store_schemas(state_dir=posixpath.join(savepoint.location, CHECKPOINT, "state"))
    names = {op.operator_id: op.name for op in manifest.operators}
    operators = []
    for op in sorted(set(saved) | set(plan.operators) | set(names)):
        old_name = names.get(op) or next((s.operator_name for s in saved.get(op, [])), None)
        new_name = plan.operator_names.get(op)
        if op not in plan.operators:
            operators.append(OperatorCheck(op, old_name, "dropped"))
        elif op not in saved and op not in names:
            operators.append(
                OperatorCheck(
                    op,
                    new_name,
                    "incompatible",
                    [
                        "the savepoint has no state for it (a stateful operator added: Spark "
                        f"loads state version {manifest.batch_id + 1} of every operator)"
                    ],
                )
            )
        elif old_name and new_name and old_name != new_name:
            operators.append(
                OperatorCheck(
                    op,
                    new_name,
                    "incompatible",
                    [f"operator changed ({old_name} → {new_name})"],
                )
            )
        else:
            operators.append(_compare_stores(op, new_name or old_name, saved.get(op, []), plan))
    problems: list[str] = []
    sources = _sources(manifest.source_offsets, plan, problems)
    if plan.mode_error:
        problems.append(f"output mode {plan.output_mode}: {plan.mode_error}")
    sink = manifest.sink
    saved_mode = sink.mode if sink is not None else None
    mode = plan.output_mode + (
        f" (savepoint: {saved_mode})"
        if saved_mode and saved_mode != plan.output_mode
        else " (as the savepoint's)"
        if saved_mode
        else ""
    )
    return CheckReport(
        savepoint=savepoint.location,
        job=plan.job,
        operators=operators,
        sources=sources,
        sink=_sink(savepoint, plan),
        output_mode=mode,
        problems=problems,
    )


def _compare_stores(
    op: int, name: str | None, saved: list[StoreSchema], plan: JobPlan
) -> OperatorCheck:
    new = {s.store_name: s for s in plan.operators.get(op, [])}
    old = {s.store_name: s for s in saved}
    reasons: list[str] = []
    notes: list[str] = []
    if not old:
        notes.append("the savepoint holds no schema file for it: not compared")
    for store in sorted(set(old) | set(new)):
        where = "" if store == "default" else f" of store {store}"
        if store not in new:
            reasons.append(f"store {store} is not in the job")
            continue
        if store not in old:
            if old:
                reasons.append(f"store {store} is not in the savepoint")
            continue
        for part in ("key", "value"):
            before = getattr(old[store], part)
            after = getattr(new[store], part)
            reason, renamed = compare_fields(before, after)
            if reason:
                reasons.append(f"{part} schema{where} changed ({reason})")
            notes += [f"{part} field{where} renamed {r} (matched by position)" for r in renamed]
    return OperatorCheck(op, name, "incompatible" if reasons else "restored", reasons, notes)


def compare_fields(
    before: tuple[Field, ...], after: tuple[Field, ...]
) -> tuple[str | None, list[str]]:
    """Spark's rule for a state schema: ``(why not compatible or None, renamed fields)``."""
    renamed = []
    for old, new in zip(before, after, strict=False):
        if old.type != new.type or (new.nullable and not old.nullable):
            return f"field {_describe(old)} → {_describe(new, old)}", []
        if old.name != new.name:
            renamed.append(f"{old.name} → {new.name}")
    if len(before) != len(after):
        longer, verb = (after, "added") if len(after) > len(before) else (before, "removed")
        extra = ", ".join(_describe(f) for f in longer[min(len(before), len(after)) :])
        return f"fields {verb}: {extra}", []
    return None, renamed


def _describe(f: Field, old: Field | None = None) -> str:
    """``name: type`` (and ``not null``); the name only if it differs from ``old``'s."""
    kind = f.type + ("" if f.nullable else " not null")
    if old is not None and old.nullable != f.nullable and f.nullable:
        kind += " (nullable)"
    return kind if old is not None and old.name == f.name else f"{f.name}: {kind}"


def _sources(offsets: list[Any], plan: JobPlan, problems: list[str]) -> list[str]:
    lines = []
    if len(offsets) != len(plan.sources):
        problems.append(
            f"the job reads {len(plan.sources)} source(s), the savepoint has offsets of "
            f"{len(offsets)} (Spark resumes each source from its line of offsets/N)"
        )
    for i in range(max(len(offsets), len(plan.sources))):
        saved = offsets[i] if i < len(offsets) else None
        source = plan.sources[i] if i < len(plan.sources) else None
        held = _saved_topics(saved)
        text = f"{i}: {source.describe() if source else '(none in the job)'}"
        if held:
            text += " (savepoint: " + "; ".join(
                f"{t} partitions {','.join(str(p) for p in ps)}" for t, ps in held.items()
            )
            text += ")"
        elif saved is None:
            text += " (no offsets in the savepoint)"
        if source is not None and source.topics is not None and held:
            added = sorted(set(source.topics) - set(held))
            gone = sorted(set(held) - set(source.topics))
            if added or gone:
                text += ": topics changed" + (f", added {', '.join(added)}" if added else "")
                text += f", no longer read {', '.join(gone)}" if gone else ""
            else:
                text += ": the same topics"
        lines.append(text)
    return lines


def _saved_topics(offsets: Any) -> dict[str, list[int]]:
    """A Kafka source's offsets (``{topic: {partition: offset}}``) as topic → partitions."""
    if not isinstance(offsets, dict):
        return {}
    found = {}
    for topic, parts in offsets.items():
        if isinstance(parts, dict) and all(str(p).lstrip("-").isdigit() for p in parts):
            found[str(topic)] = sorted(int(p) for p in parts)
    return dict(sorted(found.items()))


def _sink(savepoint: Savepoint, plan: JobPlan) -> str:
    sink = savepoint.manifest.sink
    target = plan.sink_target or plan.sink_options.get("table")
    text = f"{plan.sink_format or '?'} {target or '-'}"
    if sink is None or not sink.target:
        return text + " (the savepoint does not name its sink)"
    if sink.kind and plan.sink_format and sink.kind != plan.sink_format:
        text += f" (savepoint: {sink.kind} {sink.target})"
    elif target and _same(target, sink.target):
        text += " (the savepoint's: restore with --mode rewind)"
    else:
        text += f" (savepoint: {sink.target}; another one: restore with --mode fork)"
    return text


def _same(a: str, b: str) -> bool:
    from spark_chkpt.fs import qualify

    return qualify(a).rstrip("/") == qualify(b).rstrip("/")


def restorable_operators(
    *, savepoint: Savepoint, plan: JobPlan, allow_non_restored_state: bool
) -> tuple[int, ...]:
    """Restore's step 1 with a job: the operators whose state is left out (dropped, and
    allowed); :class:`SavepointError` for an incompatible job, or drops not allowed.
    Nothing is written either way."""
    report = check_savepoint(savepoint=savepoint, plan=plan)
    if report.status == CheckStatus.INCOMPATIBLE:
        why = [o.describe() for o in report.operators if o.verdict == "incompatible"]
        why += report.problems
        raise SavepointError(
            f"savepoint {savepoint.manifest.savepoint_id} cannot be restored into job "
            f"{plan.job}: {'; '.join(why)}. Nothing was written (spark-chkpt savepoint "
            "check prints the whole comparison)."
        )
    dropped = tuple(o.operator_id for o in report.operators if o.verdict == "dropped")
    if dropped and not allow_non_restored_state:
        names = ", ".join(
            o.describe().split(":")[0] for o in report.operators if o.verdict == "dropped"
        )
        raise SavepointError(
            f"job {plan.job} no longer has {names} of savepoint "
            f"{savepoint.manifest.savepoint_id}: its state would not be restored. Restore "
            f"with {ALLOW_FLAG} to leave it out (Flink's allowNonRestoredState). Nothing "
            "was written."
        )
    return dropped
