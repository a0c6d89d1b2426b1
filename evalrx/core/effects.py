"""Whether a tool call changes the world, and whether it hands the conversation to a person.

The diagnosis reads reference calls as people do: look-ups may come in any order, repeat or be
extra; what must match is what changed state. Where that comes from, strongest first:

1. a person's mark (the app's "What the tools do", `evalrx.store.mark_tool`);
2. the tool's own word: MCP annotations (`readOnlyHint`, `destructiveHint`, kept as
   `read_only_hint` / `destructive_hint`), or a function document's `x-effect` field
   (`"read"` / `"write"`) in a case's or an import's tools;
3. the name's verb (`get_`, `list_`, `find_`, `search_` read; `cancel_`, `update_`, `send_` write):
   the weakest default, and `ToolEffect.why` says so; a name with no verb known here is unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

READ = "read"
WRITE = "write"
EFFECT_FIELD = "x-effect"

# English verbs that name a look-up or a computation (no state changes).
READ_VERBS = frozenset(
    "get list find search lookup look read fetch query show view describe count check retrieve "
    "calculate compute evaluate convert estimate think browse inspect peek stat whoami ls cat grep".split()
)
# English verbs that name an action on the world.
WRITE_VERBS = frozenset(
    "cancel modify update set create add delete remove return exchange book send post put write transfer pay "
    "place submit make change edit move insert reset register apply purchase buy sell refund assign close "
    "open start stop approve reject archive upload rename mkdir rm cp mv touch echo sort append reserve "
    "schedule escalate handoff notify email message reply publish save store drop grant revoke renew extend "
    "upgrade downgrade enable disable activate deactivate subscribe unsubscribe invite block unblock lock unlock "
    "pause resume execute deploy install uninstall claim redeem charge withdraw deposit issue cancel rebook "
    "checkout checkin borrow lend replace restore revert merge push commit tag".split()
)
# Verbs and words that name handing the conversation to a person.
_HANDOFF_VERBS = frozenset({"transfer", "escalate", "handoff", "hand"})
_PERSON_WORDS = frozenset({"human", "humans", "person", "agent", "agents", "operator", "representative", "staff"})
_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


@dataclass(frozen=True)
class ToolEffect:
    """What a call does to the world: `READ`, `WRITE` or None (unknown), and why the rule thinks so."""

    effect: Optional[str]
    why: str

    @property
    def reads_only(self) -> bool:
        return self.effect == READ

    @property
    def changes_state(self) -> bool:
        return self.effect == WRITE


def name_words(name: str) -> "list[str]":
    """A tool name's words, lower-cased (`find_user_id`, `findUserId`, `math.factorial` alike)."""
    return [w.lower() for w in _SPLIT.split(str(name or "")) if w]


def _hint(annotations: dict, *names: str) -> Optional[bool]:
    for n in names:
        value = annotations.get(n)
        if isinstance(value, bool):
            return value
    return None


def tool_effect(name: str, document: Optional[dict] = None, mark: Optional[str] = None) -> ToolEffect:
    """The effect of calling `name`: a person's `mark` ("read" / "write") first, then its function document
    (`{"name", "annotations"?, "x-effect"?}`, as `Tool.describe()` writes it, or an import's tool schema)
    where that says, else the name's verb."""
    if mark in (READ, WRITE):
        return ToolEffect(mark, f"a person marked it {mark}")
    doc = document if isinstance(document, dict) else {}
    if isinstance(doc.get("function"), dict):  # OpenAI's {"type": "function", "function": {...}}
        doc = {**doc, **doc["function"]}
    marked = doc.get(EFFECT_FIELD)
    if marked in (READ, WRITE):
        return ToolEffect(marked, f"its tool document marks it {marked}")
    raw = doc.get("annotations")
    ann: dict = raw if isinstance(raw, dict) else {}
    read_only = _hint(ann, "read_only_hint", "readOnlyHint")
    if read_only is True:
        return ToolEffect(READ, "its annotations say read-only")
    destructive = _hint(ann, "destructive_hint", "destructiveHint")
    if read_only is False or destructive is True:
        return ToolEffect(WRITE, "its annotations say it changes state")
    words = name_words(name)
    verb = words[0] if words else ""
    if verb in READ_VERBS:
        return ToolEffect(READ, f"its name begins with {verb!r} (a guess from the verb: no tool document says)")
    if verb in WRITE_VERBS:
        return ToolEffect(WRITE, f"its name begins with {verb!r} (a guess from the verb: no tool document says)")
    return ToolEffect(None, f"unknown: neither a tool document nor the verb of {name!r} says whether it changes state")


def is_handoff(name: str) -> bool:
    """Whether a tool of this name hands the conversation to a person (`transfer_to_human_agents`,
    `escalate_to_human`, `handoff`): a run that ends with it ended normally."""
    words = name_words(name)
    if not words or words[0] not in _HANDOFF_VERBS:
        return False
    return words[0] in {"escalate", "handoff"} or bool(_PERSON_WORDS.intersection(words[1:]))


def tool_documents(offered: Any) -> "dict[str, dict]":
    """A trajectory's offered tools (`Trajectory.offered_tools`, or `Tool` objects) by name."""
    out: dict = {}
    for item in offered or []:
        doc = item.describe() if hasattr(item, "describe") else item
        if isinstance(doc, dict) and isinstance(doc.get("function"), dict):
            doc = {**doc, **doc["function"]}
        if isinstance(doc, dict) and doc.get("name"):
            out[str(doc["name"])] = doc
    return out


__all__ = [
    "EFFECT_FIELD",
    "READ",
    "READ_VERBS",
    "ToolEffect",
    "WRITE",
    "WRITE_VERBS",
    "is_handoff",
    "name_words",
    "tool_documents",
    "tool_effect",
]
