#!/usr/bin/env python3
"""Point every citation in the repository at a document inside it.

Comments, tests and docs once cited documents a clone does not have: the design
page ("DESIGN §5"), the requirements ("seed 001 R6.3"), the event excerpt design
("seed 000"), the behaviour specs of the original the-loop ("ingress-dispatch
§2.5", "channels-ledger §3.3", bare "§2.8" in files that cite them), their list
of open questions ("AMB-25") and the original's own decision and issue numbers
("decision-051"). This script rewrites each to the repository's own document:
docs/requirements.md (R…, N…, A…, E…, K… ids), docs/architecture.md (by
heading), docs/configuration.md, README.md or a decision record
("decision 023").

Run from the repository root:

    python3 scripts/cite-repo.py           rewrite, print counts per kind
    python3 scripts/cite-repo.py --check   write nothing; list what is left

Either way it exits 1, listing file:line, when an outside citation remains.
It reads the files `git ls-files` lists, except test data, go.sum files,
generated *.pb.go and itself. Running it again changes nothing.
"""

import os
import re
import subprocess
import sys

LIMIT = 100  # the widest a rewritten line may become before it is wrapped
SELF = {"scripts/cite-repo.py", "scripts/check-citations.sh"}

# ---------------------------------------------------------------------------
# Where each outside section now lives. A target is (document, anchor).

REQ, ARCH, CONF, README, DEC = "req", "arch", "conf", "readme", "dec"

DESIGN = {  # the design page, by section
    "1": (ARCH, "The ledger"),
    "2": (ARCH, "The flow"),
    "3": (README, "Repository map"),
    "4": (CONF, "Catalog event types"),
    "5": (ARCH, "Streams and state"),
    "6": (ARCH, "The ledger"),
    "7": (ARCH, "Exactly once"),
    "8": (ARCH, "Trust boundaries"),
    "9": (REQ, "R8"),
    "10": (DEC, "054"),
}

INGRESS_DISPATCH = {  # the original's GitHub intake and dispatcher
    "0": (REQ, "K1"),
    "1.4": (REQ, "K2"),
    "2.1": (REQ, "K3"),
    "2.2": (REQ, "K4"),
    "2.5": (REQ, "K5"),
    "2.6": (REQ, "K6"),
    "2.7": (REQ, "K7"),
    "2.8": (REQ, "K8"),
    "2.9": (REQ, "K9"),
    "2.10": (REQ, "K10"),
    "2.11": (REQ, "K6"),
    "2.12": (REQ, "K6"),
    "3": (REQ, "E1–E7"),
    "3.1": (REQ, "E1"),
    "3.3": (REQ, "E4"),
    "3.4": (REQ, "E1–E7"),
    "4": (REQ, "K11"),
    "4.1": (REQ, "K11"),
    "4.3": (REQ, "K11"),
    "4.4": (REQ, "K11"),
    "5": (REQ, "K12"),
    "5.2": (REQ, "K12"),
    "5.3": (REQ, "K12"),
    "5.4": (REQ, "K12"),
    "5.5": (REQ, "K13"),
    "5.6": (REQ, "K14"),
    "5.9": (REQ, "K15"),
    "6.2": (REQ, "K16"),
    "7": (REQ, "R8"),
    "7.3": (REQ, "K15"),
    "8.1": (REQ, "K3"),
}

CHANNELS_LEDGER = {  # the original's Slack channel, gates and config
    "1.3": (REQ, "K17"),
    "1.5": (REQ, "K18"),
    "1.6": (REQ, "K18"),
    "1.7": (REQ, "K19"),
    "2": (REQ, "R4.4"),
    "3": (REQ, "K20"),
    "3.2": (REQ, "K20"),
    "3.3": (REQ, "K20"),
    "3.4": (REQ, "K20"),
    "4": (REQ, "K7"),
    "5.5": (DEC, "001"),
    "6": (REQ, None),
    "7.2": (REQ, "K17"),
    "7.3": (REQ, "K18"),
}

AMB = {  # the open questions, by the record or requirement that settles them
    1: (DEC, "015"),
    2: (REQ, "R6.3"),
    3: (DEC, "014"),
    4: (DEC, "015"),
    5: (REQ, "R3.5"),
    7: (REQ, "R6.1"),
    9: (DEC, "010"),
    10: (DEC, "001"),
    12: (DEC, "004"),
    13: (DEC, "002"),
    14: (DEC, "014"),
    15: (DEC, "014"),
    16: (DEC, "018"),
    18: (REQ, "R3.4"),
    19: (DEC, "017"),
    20: (DEC, "015"),
    21: (DEC, "061"),
    22: (DEC, "015"),
    23: (DEC, "006"),
    24: (REQ, "R1.1"),
    25: (DEC, "023"),
    26: (DEC, "017"),
    27: (DEC, "004"),
}

ORIGINAL = {  # the original's decision and issue numbers
    "issue-243": (REQ, "E1–E7"),
    "decision-086": (REQ, "E1–E7"),
    "issue-246": (REQ, "E1"),
    "decision-039": (REQ, "K6"),
    "decision-040": (REQ, "K8"),
    "decision-051": (REQ, "K11"),
    "decision-055": (REQ, "K12"),
    "decision-097": (REQ, "K10"),
    "issue-240": (REQ, "K12"),
    "issue-183": (REQ, "K5"),
    "decision-095": (REQ, "K5"),
    "issue-269": (REQ, "K16"),
}

# Files whose bare "§n" cites the original's specs.
BARE_SECTIONS = [
    ("services/dispatcher/", INGRESS_DISPATCH),
    ("services/ingress-github/", INGRESS_DISPATCH),
    ("pkg/excerpt/", INGRESS_DISPATCH),
    ("pkg/graph/", CHANNELS_LEDGER),
    ("services/ledger-writer/", CHANNELS_LEDGER),
    ("services/ingress-slack/", CHANNELS_LEDGER),
    ("pkg/slackmsg/", CHANNELS_LEDGER),
]

# ---------------------------------------------------------------------------
# Rendering targets as text.


PAGES = {ARCH: "docs/architecture.md", CONF: "docs/configuration.md", README: "README.md"}


def slug(heading):
    """GitHub's anchor for a heading."""
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")


def join_and(items):
    if len(items) < 2:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def render(targets, path):
    """The citation text for targets, or "" when all cite the file itself."""
    own = re.match(r"docs/decisions/(\d{3})-", path)
    seen, out = [], {}
    for doc, anchor in targets:
        if doc == DEC and own and anchor == own.group(1):
            continue
        if (doc, anchor) in seen:
            continue
        seen.append((doc, anchor))
        out.setdefault(doc, []).append(anchor)
    parts = []
    for doc in out:  # in order of first appearance
        anchors = [a for a in out[doc] if a]
        if doc == REQ:
            parts.append("docs/requirements.md" + (" " + ", ".join(anchors) if anchors else ""))
        elif doc in PAGES:
            parts.extend(PAGES[doc] + "#" + slug(a) for a in anchors)
        elif doc == DEC:
            parts.append(("decisions " if len(anchors) > 1 else "decision ") + join_and(anchors))
    return "; ".join(parts)


# ---------------------------------------------------------------------------
# Patterns. W is white space that may cross into the next comment line.

W = r"(?:[ \t]*\n[ \t]*(?:(?://|#)[ \t]*)?|[ \t]*)"
W1 = r"(?:[ \t]*\n[ \t]*(?:(?://|#)[ \t]*)?|[ \t]+)"
SEC = r"§\d+(?:\.\d+)*(?:[ \t]+step[ \t]+\d+)?"
SECS = rf"{SEC}(?:(?:,{W}|{W1}and{W1}|–){SEC})*"
RID = r"R\d+(?:\.\d+)?(?:[–-]R?\d+(?:\.\d+)?)?"

MARK = "\x00"  # marks a rewritten spot until the lines are wrapped
NBSP = "\x01"  # a space the wrapping must not break at (inside a citation)

# Rewrites whose wording a generic rule would spoil: (kind, pattern, text).
# They run first; \x00 in the text is added by the code, not here.
PHRASES = [
    # The design page, where a sentence leans on it.
    ("DESIGN", r"DESIGN §5's `posted` bucket keeps no TTL\.",
     "The `posted` bucket keeps no TTL (docs/architecture.md#streams-and-state)."),
    ("DESIGN", r"\(default 2h; DESIGN asks for at least 1h\)", "(default 2h; at least 1h)"),
    ("DESIGN", rf"\(DESIGN §7:{W1}404, 410, 422\)", "(decision 017: 404, 410, 422)"),
    ("DESIGN", rf"\(DESIGN §8:{W1}secrets never appear",
     "(SECURITY.md: secrets never appear"),
    ("DESIGN", rf"event-log records{W1}\(DESIGN §8\)", "event-log records (SECURITY.md)"),
    ("DESIGN", rf"without a restart{W1}\(DESIGN §8\)", "without a restart (README.md#configuration)"),
    ("DESIGN", rf"\(DESIGN §8\)(?=:\n)", "(README.md#configuration)"),
    ("DESIGN", rf"its handler's errors must never carry a secret{W1}\(DESIGN §8\)",
     "its handler's errors must never carry a secret (SECURITY.md)"),
    ("DESIGN", rf"handler's errors must never carry a secret{W1}\(DESIGN §8\)",
     "handler's errors must never carry a secret (SECURITY.md)"),
    ("DESIGN", rf"fixed path of the webhook{W1}\(DESIGN §8\)",
     "fixed path of the webhook (README.md#configuration)"),
    ("DESIGN", rf"fixed HTTP surface of read mode events{W1}\(DESIGN §8\)",
     "fixed HTTP surface of read mode events (README.md#configuration)"),
    ("DESIGN", rf"Prometheus series{W1}\(DESIGN §9\)", "Prometheus series (decision 053)"),
    ("DESIGN", rf"loopv1\.Event as the body{W1}\(DESIGN §6\)", "loopv1.Event as the body (decision 009)"),
    ("DESIGN", rf"\(DESIGN §9, seed 001 R8\.1\)", "(docs/requirements.md R8.1)"),
    ("DESIGN", rf"\(seed 001 R8, DESIGN §9\)", "(docs/requirements.md R8; decision 062)"),
    ("DESIGN", r"types, DESIGN §4 has 15", "types, want 15"),
    ("DESIGN", r"DefaultTopology is DESIGN §5 for a single node\.",
     "DefaultTopology is the topology of docs/architecture.md#streams-and-state for a single node."),
    ("DESIGN", r"the flags DESIGN §4 fixes", "the flags docs/configuration.md#catalog-event-types lists"),
    ("DESIGN", r"Enforces the dependency direction of DESIGN §3:",
     "Enforces the dependency direction of README.md#repository-map:"),
    # Decision records that cite the design page in their context.
    ("DESIGN", rf"\(DESIGN §5\)\. A ref such as", "(docs/architecture.md#streams-and-state). A ref such as"),
    ("DESIGN", r"\*\*Context\.\*\* DESIGN §6 puts a signed envelope",
     "**Context.** The architecture puts a signed envelope"),
    ("DESIGN", r"\*\*Context\.\*\* DESIGN §6 gave Slack events",
     "**Context.** The first design gave Slack events"),
    ("DESIGN", r"DESIGN §6's Slack id is superseded", "The first design's Slack id is superseded"),
    ("DESIGN", r"\*\*Context\.\*\* DESIGN §7 sends transient",
     "**Context.** The first design sent transient"),
    # The requirements, where they are named without an id.
    ("seed 001", r"the story of seed 001 played", "the story of docs/requirements.md played"),
    ("seed 001", rf"\(seed 001,{W1}\"Actors &{W1}trust\"\)",
     "(docs/requirements.md, \"Actors and trust\")"),
    ("seed 001", r"deletes are out of scope \(seed 001\)",
     "deletes are out of scope (docs/requirements.md, Out of scope)"),
    ("seed 001", r"loudly \(seed 001\)", "loudly (docs/requirements.md, Fail closed)"),
    ("seed 001", r"The ten abuse cases of seed 001", "The ten abuse cases of docs/requirements.md (A1–A10)"),
    ("seed 000", r"want seed 000's 203", "want the 203 of docs/requirements.md E5"),
    # The original's specs, where a sentence leans on them.
    ("channels-ledger", rf"\(Slack's documentation; channels-ledger §7\.2\)",
     "(Slack's documentation; docs/requirements.md K17)"),
    ("channels-ledger", rf"channels-ledger §3\.3 specifies it, for one comment\.",
     "docs/requirements.md K20 specifies it, for one comment."),
    ("channels-ledger", rf"This is AMB-10 \(channels-ledger §5\.5\)\.", "This was an open question."),
    ("channels-ledger", rf"\(seed 001 R4\.4, R6\.3, R6\.4; channels-ledger §2,{W1}§3 and AMB-2, -3, -4, -14, -15, -16;"
     rf"{W1}ingress-dispatch §4\.4\)",
     "(docs/requirements.md R4.4, R6.3, R6.4, K20, K11; decisions 014, 015 and 018)"),
    ("channels-ledger", rf"per seed 001 R3\.3–R3\.6 \(channels-ledger{W1}§1\.7, §6\)",
     "per docs/requirements.md R3.3–R3.6 and K19"),
    ("ingress-dispatch", r"semantics \(ingress-dispatch §4\.1\), the interaction directive of the mode in\n(\s*//)"
     r"\s*force \(§4\.3\) and the graph context block \(§4\.4\)\.",
     r"semantics, the interaction directive of the mode in\n\1 force and the graph context block (docs/requirements.md K11)."),
    ("ingress-dispatch", r"every boundary example of ingress-dispatch §2\.7 and\n(\s*//)\s*channels-ledger §4, plus",
     r"every boundary example of docs/requirements.md K7,\n\1 plus"),
    ("reference", r"\(reference §3\.4, negative\)", "(docs/requirements.md E3)"),
    ("reference", r"the reference's tests assert \(§3\.4, positive\)",
     "the original's tests assert (docs/requirements.md E1, E2)"),
    ("reference", r"the individual claims of reference §3\.4 on the fixtures",
     "the individual claims of docs/requirements.md E1–E7 on the fixtures"),
    ("reference", r" \(style §3\.8\)", ""),
    ("original", rf"port of the-loop's cli/the_loop/webhook/excerpt\.py{W1}\(issue-243, decision-086\)",
     "port of the original the-loop's excerpt (docs/requirements.md E1–E7)"),
    ("reference", r" \(nats-jetstream\.md §7\)", ""),
    # The open questions, where a decision record would cite itself or reads
    # better reworded.
    ("AMB", r"R2\.5 says \"silence is no\" and \"a malformed list resolves to the\ndefault, loudly\"; "
     r"AMB-13 asks what a literal empty list means for each list\.",
     "R2.5 says \"silence is no\" and \"a malformed list resolves to the\ndefault, loudly\"; "
     "neither says what a literal empty list means for each list."),
    ("AMB", r"with a message naming `/the-loop:upgrade-the-loop` \(AMB-12\)\.",
     "with a message naming `/the-loop:upgrade-the-loop`."),
    ("AMB", r"R3\.1 wants an unknown ledger refused\n\(AMB-27\), while",
     "R3.1 wants an unknown ledger refused,\nwhile"),
    ("AMB", r"the asymmetry AMB-27 worried\nabout disappears",
     "the asymmetry between a\nrefused ledger and disabled channels disappears"),
    ("AMB", r"configuration reference to print \*the\* catalog from one definition \(AMB-23\)\.",
     "configuration reference to print *the* catalog from one definition."),
    ("AMB", r"and by polling \(AMB-9\),", "and by polling,"),
    ("AMB", r"flips `approved` to `approved-with-comments` \(AMB-3\)\.",
     "flips `approved` to `approved-with-comments`."),
    ("AMB", r"mode change \(poll ↔ socket ↔ events\) re-reads messages under none\. AMB-1, -3, -4, -20, -21 and\n"
     r"-22 leave classification and drops open\.",
     "mode change (poll ↔ socket ↔ events) re-reads messages under none. The requirements leave\n"
     "classification and drops open."),
    ("AMB", r"Classification \(AMB-1\): a control", "Classification: a control"),
    ("AMB", r"The precedence is AMB-1 as settled:", "The precedence is the one decision 015 settled:"),
    ("AMB", r"\(AMB-10, docs/decisions\)", "(decision 001)"),
    ("AMB", r"\(AMB-4: `unauthorized-actor`\)", "(`unauthorized-actor`)"),
    ("AMB", r"Drop precedence \(AMB-21\):", "Drop precedence:"),
    ("AMB", r"free text \(AMB-22\);", "free text (A9);"),
    ("AMB", r"all three modes \(AMB-20\);", "all three modes;"),
    ("AMB", r"\(AMB-3\), and a\nkickoff body becomes a session prompt \(AMB-19\)\.",
     "(decision 014), and a\nkickoff body becomes a session prompt."),
    ("AMB", r"\(AMB-25, as the original\)", "(as in the original; decision 023 adds a notice)"),
    ("AMB", r"\(AMB-2's \"at a human gate\"\)", "(\"at a human gate\", R6.3)"),
    ("AMB", r"paused \(018, AMB-25\)\.", "paused (decision 018)."),
    ("AMB", r"failed record \(AMB-26\) told to", "failed record (decision 017) told to"),
    ("AMB", r"re-attributed person for a relayed record, AMB-4\)",
     "re-attributed person for a relayed record, decision 018)"),
    ("AMB", r"the re-attributed person's login \(AMB-4\)", "the re-attributed person's login (decision 018)"),
    ("AMB", r"number, r := w\.start\(\"AMB-25\"\)", "number, r := w.start(\"paused gate\")"),
]

GENERIC = [
    ("DESIGN", re.compile(rf"\bDESIGN{W1}(?P<secs>{SECS})"), DESIGN),
    ("ingress-dispatch", re.compile(rf"\bingress-dispatch{W1}(?P<secs>{SECS})"), INGRESS_DISPATCH),
    ("channels-ledger", re.compile(rf"\bchannels-ledger{W1}(?P<secs>{SECS})"), CHANNELS_LEDGER),
]
AMB_RE = re.compile(rf"\bAMB-(?P<n>\d+)(?P<more>(?:,[ \t]*-\d+)*(?:,?{W1}and{W1}-\d+)?)")
SEED1_RE = re.compile(rf"\bseed 001(?P<rs>{W1}{RID}(?:,{W}{RID})*)?")
SEED0_RE = re.compile(r"\bseed 000\b")
ORIG_RE = re.compile(r"\b(?:issue|decision)-\d{3}\b(?:,\s*(?:issue|decision)-\d{3}\b)*")
BARE_RE = re.compile(rf"(?<![\w-])(?P<secs>{SECS})")

# What must not remain, with the name a leftover is listed under.
LEFT = [
    ("DESIGN", re.compile(r"\bDESIGN\b")),
    ("ingress-dispatch", re.compile(r"\bingress-dispatch\b")),
    ("channels-ledger", re.compile(r"\bchannels-ledger\b")),
    ("AMB", re.compile(r"\bAMB-\d")),
    ("seed", re.compile(r"\bseeds?[ _/]00\d|\b00[01]_[0-9a-f]{8}")),
    ("reference", re.compile(r"nats-jetstream\.md|anchors\.md|\bstyle §|\breference §|original-cli-config\.")),
    ("original", re.compile(r"\b(?:issue|decision)-\d{3}\b")),
    ("outside path", re.compile(r"shared/(?:reference|seeds)|\.\./shared/(?!testdata)|cli/the_loop/")),
]
COMMENT_SECTION = re.compile(r"^\s*(?://|#).*§\d")

# ---------------------------------------------------------------------------


def sections(secs):
    return re.findall(r"§(\d+(?:\.\d+)*)", secs)


def lookup(table, sec):
    while True:
        if sec in table:
            return table[sec]
        if "." not in sec:
            return None
        sec = sec.rsplit(".", 1)[0]


def is_comment_at(text, pos):
    start = text.rfind("\n", 0, pos) + 1
    line = text[start:pos]
    return bool(re.match(r"\s*(?://|#)", line))


def rewrite(text, path, counts):
    def bump(kind):
        counts[kind] = counts.get(kind, 0) + 1

    for kind, pat, repl in PHRASES:
        def sub(m, kind=kind, repl=repl):
            bump(kind)
            return MARK + m.expand(repl).replace("\n", "\n" + MARK)
        text = re.sub(pat, sub, text)

    for kind, rx, table in GENERIC:
        def sub(m, kind=kind, table=table):
            targets = [lookup(table, s) for s in sections(m.group("secs"))]
            if None in targets:
                return m.group(0)  # an unknown section: left for the check to list
            bump(kind)
            return MARK + render(targets, path)
        text = rx.sub(sub, text)

    def amb(m):
        nums = [int(m.group("n"))] + [int(x) for x in re.findall(r"-(\d+)", m.group("more"))]
        if any(n not in AMB for n in nums):
            return m.group(0)
        bump("AMB")
        return MARK + render([AMB[n] for n in nums], path)
    text = AMB_RE.sub(amb, text)

    def seed1(m):
        bump("seed 001")
        return MARK + "docs/requirements.md" + (m.group("rs") or "")
    text = SEED1_RE.sub(seed1, text)

    def seed0(m):
        bump("seed 000")
        return MARK + "docs/requirements.md E5"
    text = SEED0_RE.sub(seed0, text)

    def orig(m):
        ids = re.findall(r"(?:issue|decision)-\d{3}", m.group(0))
        if any(i not in ORIGINAL for i in ids):
            return m.group(0)
        bump("original")
        return MARK + render([ORIGINAL[i] for i in ids], path)
    text = ORIG_RE.sub(orig, text)

    table = next((t for prefix, t in BARE_SECTIONS if path.startswith(prefix)), None)
    if table is not None and path.endswith(".go"):
        def bare(m):
            if not is_comment_at(text, m.start()):
                return m.group(0)
            targets = [lookup(table, s) for s in sections(m.group("secs"))]
            if None in targets:
                return m.group(0)
            bump("bare §")
            return MARK + render(targets, path)
        text = BARE_RE.sub(bare, text)

    # Two requirement citations side by side become one.
    def merge(m):
        ids = re.findall(r"[A-Z][0-9.–-]*", m.group("a"))
        b = "" if m.group("b") in ids else ", " + m.group("b")
        return MARK + "docs/requirements.md " + m.group("a") + b

    req = MARK + r"docs/requirements\.md (?P<a>[A-Z][0-9.–-]*(?:,\s*(?://\s*)?[A-Z][0-9.–-]*)*)"
    while True:
        new = re.sub(req + r"(?P<sep>[,;] )" + MARK + r"docs/requirements\.md (?P<b>[A-Z][0-9.–-]*)",
                     merge, text)
        if new == text:
            break
        text = new

    # Keep a citation's words on one line.
    text = re.sub(r"docs/requirements\.md (?=[A-Z]\d)", "docs/requirements.md" + NBSP, text)
    text = re.sub(r"docs/requirements\.md, (Fail|Out of|\"Actors and) (closed|scope|trust\")",
                  lambda m: ("docs/requirements.md, " + m.group(1) + " " + m.group(2)).replace(" ", NBSP), text)
    text = re.sub(r"decisions? \d{3}", lambda m: m.group(0).replace(" ", NBSP), text)

    # A citation that named only the file itself leaves "()" behind.
    text = re.sub(r"[ \t]*\(" + MARK + r"\)", MARK, text)
    return text


# ---------------------------------------------------------------------------
# Wrapping the lines a rewrite made too long.

LIST_MD = re.compile(r"^(\s*)([-*]|\d+\.)\s+")
COMMENT = re.compile(r"^(\s*(?://|#)[ \t]*)")


def prefix_of(line, markdown):
    """The prefix a continuation of line carries, or None if it is not prose."""
    if markdown:
        s = line.lstrip()
        if not s or s[0] in "|#>" or s.startswith("```"):
            return None
        m = LIST_MD.match(line)
        if m:
            return " " * len(m.group(0))
        return line[: len(line) - len(s)]
    m = COMMENT.match(line)
    if not m or len(m.group(1)) == len(line):
        return None
    return m.group(1)


def continues(line, prefix, markdown):
    if not line.startswith(prefix) or len(line) == len(prefix):
        return False
    rest = line[len(prefix):]
    if rest[0] in " \t":
        return False
    if markdown and (LIST_MD.match(rest) or rest[0] in "|#>" or rest.startswith("```")):
        return False
    if not markdown and re.match(r"([-*]|\d+\.)\s", rest):
        return False
    return True


def wrap(text, markdown):
    """Wraps each rewritten line longer than LIMIT, pushing the overflow into
    the rest of its paragraph (or a new line), so untouched lines stay put."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if MARK not in lines[i]:
            i += 1
            continue
        lines[i] = lines[i].replace(MARK, "")
        first = lines[i]
        prefix = prefix_of(first, markdown)
        if prefix is None or (not markdown and not COMMENT.match(first)):
            i += 1
            continue
        m = LIST_MD.match(first) if markdown else None
        cont = " " * len(m.group(0)) if m else prefix
        near = [l for k, l in enumerate(lines[max(0, i - 8): i + 8], max(0, i - 8))
                if k != i and l.startswith(cont) and MARK not in l and len(l) <= LIMIT]
        width = min(LIMIT, max([80] + [len(l) for l in near]))
        j = i
        while j < len(lines) and len(lines[j].replace(MARK, "")) > width:
            lines[j] = lines[j].replace(MARK, "")
            line = lines[j]
            lead = len(prefix if j == i else cont)
            cut = line.rfind(" ", lead + 1, width + 1)
            if cut < 0:
                cut = line.find(" ", width)
                if cut < 0:
                    break
            lines[j], rest = line[:cut].rstrip(), line[cut + 1:].lstrip()
            if j + 1 < len(lines) and continues(lines[j + 1], cont, markdown):
                lines[j + 1] = cont + rest + " " + lines[j + 1][len(cont):].replace(MARK, "")
            else:
                lines.insert(j + 1, cont + rest)
            j += 1
        i += 1
    return "\n".join(l.replace(MARK, "") for l in lines).replace(NBSP, " ")


# ---------------------------------------------------------------------------


def tracked():
    out = subprocess.run(["git", "ls-files", "-z"], check=True, capture_output=True).stdout
    for path in out.decode().split("\0"):
        if not path or path in SELF:
            continue
        if "/testdata/" in "/" + path or path.endswith((".sum", ".pb.go")):
            continue
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                yield path, f.read()
        except (UnicodeDecodeError, OSError):
            continue


def leftovers(path, text):
    found = []
    markdown = path.endswith(".md")
    for n, line in enumerate(text.split("\n"), 1):
        for kind, rx in LEFT:
            if rx.search(line):
                found.append((path, n, kind, line.strip()))
        if (markdown and "§" in line) or COMMENT_SECTION.match(line):
            if not any(f[:2] == (path, n) for f in found):
                found.append((path, n, "section", line.strip()))
    return found


def main(argv):
    check = "--check" in argv[1:]
    if any(a not in ("--check",) for a in argv[1:]):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    counts, files, left = {}, 0, []
    for path, text in tracked():
        new = text if check else rewrite(text, path, counts)
        if new != text:
            new = wrap(new, path.endswith(".md"))
            if new != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
                files += 1
        left.extend(leftovers(path, new))
    if not check:
        for kind in sorted(counts):
            print(f"{counts[kind]:5d}  {kind}")
        print(f"{sum(counts.values()):5d}  citations rewritten in {files} files")
    if left:
        print(f"{len(left)} outside citation(s) remain:", file=sys.stderr)
        for path, n, kind, line in left:
            print(f"{path}:{n}: [{kind}] {line}", file=sys.stderr)
        return 1
    if check:
        print("no outside citations")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
