#!/usr/bin/env python3
"""Generate etwkit's built-in provider manifests (crates/etwkit/src/schema/builtin/manifests/*.xml).

Windows ships an instrumentation manifest for each of its providers (`wevtutil gp NAME /ge /gm`
prints it). The facts in them (provider name and GUID, event id / version / level / task / opcode /
keywords, template field names, in/out types, length/count references, value and bit maps, task /
opcode / keyword names) are what a decoder needs. This script reads a dump of those manifests and
re-serialises the facts of a curated provider list in etwkit's own compact XML subset, which
`schema::manifest::parse_manifest` reads (`schema::builtin::manifests`). Its result is kept,
parsed ahead of time, in manifests/compiled.bin: after running this script, regenerate that with
`ETWKIT_WRITE_COMPILED_MANIFESTS=1 cargo test -p etwkit --lib compiled_manifests`.

Input: a directory of `{GUID}.xml` manifest dumps (one provider each). Without an argument the
script fetches the PyPI package dissect-etl (which carries such dumps) into target/ with
`pip download` and reads them from there; nothing of that package is committed.

The dumps lose some facts: out-types (IPv4/IPv6/Port) and Binary lengths are missing, and a few
in-types carry non-standard names. They are restored here:
  * non-standard in-type names are mapped to the winmeta names (SInt32 -> Int32, WString ->
    UnicodeString, String -> AnsiString, IPAddrV4 -> UInt32 + outType IPv4, IPAddrV6 -> 16-byte
    Binary + outType IPv6, WChar with max=N -> UnicodeString of N characters, max=N -> count/length);
  * OUT_TYPE_FIXES / COUNT_FIXES below restore the out-types, widths and counts the providers'
    manifests declare for a few fields (Kernel-Network addresses, ports and connection id;
    ClrStackWalk's frame array, as declared: etwkit mends its count at run time), each checked
    against the byte sizes of real records;
  * LOSSY_TEMPLATES lists templates the dump flattens beyond repair; they are left out.
  * The CLR providers (Microsoft-Windows-DotNETRuntime and -Rundown) get the facts of
    tools/clr_facts.py merged in (written from the CLR's own public manifest, ClrEtwAll.man): all
    their value/bit maps with the current entries, the map= of every field that uses one (the
    dumps keep a map= only on the first template naming a map), and the event versions newer
    than the dumps (GCHeapStats v2, GCAllocationTick v4, GCGlobalHeapHistory v4, GCLOHCompact,
    GCFitBucketInfo, GCPerHeapHistory v3 with its struct array, GCSettingsRundown,
    TieredCompilationSettingsDCStart), with the alignment padding the runtime writes inside two
    struct arrays that the manifest does not list (clr_facts.STRUCT_PADDING, checked against
    real records).
  * Microsoft-Windows-DotNETRuntimePrivate, which no dump carries, is written whole from
    tools/clr_private.py (the private provider of the same ClrEtwAll.man).
Events whose layout cannot be known from the dump (an unknown in-type, or a Binary of unknown
length that is not the last field) are left out and listed on stderr, never guessed.

Usage: python3 tools/gen_manifests.py [DIR_WITH_XML]
"""

import glob
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from xml.sax.saxutils import quoteattr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clr_facts  # noqa: E402
import clr_private  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "etwkit", "src", "schema", "builtin", "manifests")
NS = "{http://schemas.microsoft.com/win/2004/08/events}"

# Curated providers, in the order they are registered.
PROVIDERS = [
    "Microsoft-Windows-PowerShell",
    "Microsoft-Windows-DotNETRuntime",
    "Microsoft-Windows-DotNETRuntimeRundown",
    "Microsoft-Windows-DotNETRuntimePrivate",
    "Microsoft-Windows-Diagnostics-Networking",
    "Microsoft-Windows-WinRM",
    "Microsoft-Windows-HttpService",
    "Microsoft-Windows-Kernel-Network",
    "Microsoft-Windows-Kernel-Process",
    "Microsoft-Windows-Kernel-File",
    "Microsoft-Windows-Kernel-Registry",
    "Microsoft-Windows-DNS-Client",
    "Microsoft-Windows-TCPIP",
    "Microsoft-Windows-Winsock-NameResolution",
    "Microsoft-Windows-Security-Auditing",
]

# In-type names in the dumps -> (winmeta inType, outType or None, length or None).
IN_TYPES = {
    "SInt8": ("win:Int8", None, None),
    "SInt16": ("win:Int16", None, None),
    "SInt32": ("win:Int32", None, None),
    "SInt64": ("win:Int64", None, None),
    "String": ("win:AnsiString", None, None),
    "WString": ("win:UnicodeString", None, None),
    "WChar": ("win:UnicodeChar", None, None),
    "IPAddrV4": ("win:UInt32", "win:IPv4", None),
    "IPAddrV6": ("win:Binary", "win:IPv6", "16"),
    "CountedUtf16String": ("win:CountedUnicodeString", None, None),
    "CountedMbcsString": ("win:CountedAnsiString", None, None),
}
STANDARD = {
    "Int8", "UInt8", "Int16", "UInt16", "Int32", "UInt32", "Int64", "UInt64", "Float", "Double",
    "Boolean", "Binary", "GUID", "Pointer", "FILETIME", "SYSTEMTIME", "SID", "HexInt32",
    "HexInt64", "AnsiString", "UnicodeString", "SizeT",
}

# (provider, field name, dump inType) -> (inType, outType, length): out-types and lengths the
# provider's manifest declares but the dumps drop.
OUT_TYPE_FIXES = {
    ("Microsoft-Windows-Kernel-Network", "daddr", "UInt32"): ("win:UInt32", "win:IPv4", None),
    ("Microsoft-Windows-Kernel-Network", "saddr", "UInt32"): ("win:UInt32", "win:IPv4", None),
    ("Microsoft-Windows-Kernel-Network", "daddr", "Binary"): ("win:Binary", "win:IPv6", "16"),
    ("Microsoft-Windows-Kernel-Network", "saddr", "Binary"): ("win:Binary", "win:IPv6", "16"),
    ("Microsoft-Windows-Kernel-Network", "dport", "UInt16"): ("win:UInt16", "win:Port", None),
    ("Microsoft-Windows-Kernel-Network", "sport", "UInt16"): ("win:UInt16", "win:Port", None),
    # Connection id: a pointer-sized handle (the dump prints the 32-bit width; 64-bit records hold
    # 8 bytes, which every Kernel-Network record of tx_KernelNetwork.etl confirms to the byte).
    ("Microsoft-Windows-Kernel-Network", "connid", "UInt32"): ("win:Pointer", None, None),
}

# (provider, template, field) -> count attribute the dump drops: ClrStackWalk's Stack, declared
# count="2" in the CLR's manifest. The runtime writes FrameCount pointers; etwkit mends that at
# run time for every source of the layout (crates/etwkit/src/schema/mend.rs), this one included.
COUNT_FIXES = {
    ("Microsoft-Windows-DotNETRuntime", "ClrStackWalkArgs", "Stack"): "2",
    ("Microsoft-Windows-DotNETRuntimeRundown", "ClrStackWalkArgs", "Stack"): "2",
}

# Providers no dump carries, written whole from facts (tools/clr_private.py: the CLR's private
# provider, from ClrEtwAll.man).
FACTS_ONLY = {clr_private.PRIVATE["name"]: clr_private.PRIVATE}

# Templates the dump flattens beyond repair: left out rather than decoded wrongly.
# (GCPerHeapHistoryArgs_V3 of DotNETRuntime, whose struct array the dump flattens, is replaced by
# the layout in tools/clr_facts.py.)
LOSSY_TEMPLATES = {}


def fetch():
    d = os.path.join(ROOT, "target", "dissect")
    xml_dir = os.path.join(d, "dissect", "etl", "manifests", "xml")
    if os.path.isdir(xml_dir):
        return xml_dir
    os.makedirs(d, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "dissect-etl", "-d", d], check=True
    )
    whl = sorted(glob.glob(os.path.join(d, "dissect_etl-*.whl")))[-1]
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if n.startswith("dissect/etl/manifests/xml/"):
                z.extract(n, d)
    return xml_dir


def tag(e):
    return e.tag[len(NS):] if e.tag.startswith(NS) else e.tag


def kids(e, name):
    return [c for c in e if tag(c) == name]


def attrs(pairs):
    return "".join(f" {k}={quoteattr(str(v))}" for k, v in pairs if v is not None)


class Skip(Exception):
    pass


def convert_field(provider, tid, d, last, map_name=None):
    """One <data> element -> our <data> line, or raises Skip(reason). `map_name` (from the CLR
    facts) sets the field's map; a different map in the dump is an error."""
    name = d.get("name")
    raw = d.get("inType", "").split(":")[-1]
    length = d.get("length")
    count = d.get("count") or COUNT_FIXES.get((provider, tid, name))
    mx = d.get("max")
    out = d.get("outType")
    fix = OUT_TYPE_FIXES.get((provider, name, raw))
    if fix:
        it, out, flen = fix
        length = length or flen
    elif raw in IN_TYPES:
        it, o, flen = IN_TYPES[raw]
        out = out or o
        length = length or flen
    elif raw in STANDARD:
        it = "win:" + raw
    else:
        raise Skip(f"field {name!r}: in-type {d.get('inType')!r} has no known meaning")
    if mx is not None:
        if it == "win:UnicodeChar":
            it, length = "win:UnicodeString", mx
        elif it == "win:Binary":
            length = mx
        else:
            count = mx
    if it == "win:Binary" and length is None and not last:
        raise Skip(f"field {name!r}: Binary of unknown length before other fields")
    m = d.get("map")
    if map_name is not None:
        if m is not None and m != map_name:
            sys.exit(f"{provider} {tid}.{name}: the dump says map {m!r}, the CLR facts {map_name!r}")
        m = map_name
    return "<data" + attrs(
        [("name", name), ("inType", it), ("outType", out), ("length", length),
         ("count", count), ("map", m)]
    ) + "/>"


def facts_field(provider, tid, f, padding=None):
    """One field of a clr_facts template -> our <data>/<struct> text."""
    if f[0] == "struct":
        _, name, a, members = f
        pads = (padding or {}).get((provider, tid, name), [])
        body = []
        for m in members:
            body.append(facts_field(provider, tid, m))
            body += ["<data" + attrs([("name", pn), ("inType", pt)]) + "/>"
                     for after, pn, pt in pads if after == m[0]]
        return f"<struct name={quoteattr(name)}" + attrs([("count", a.get("count"))]) + ">" + \
            "".join(body) + "</struct>"
    name, it, a = f
    return "<data" + attrs(
        [("name", name), ("inType", it), ("outType", a.get("outType")),
         ("length", a.get("length")), ("count", a.get("count")), ("map", a.get("map"))]
    ) + "/>"


def clr_template_maps(provider_name, p, facts):
    """({tid: {field: map}}, {tid: [event id, ...]}) from the facts' per-event field maps, over
    every event (the dump's and the facts' own) that uses the template; conflicting maps for one
    template field are an error."""
    uses = [(int(e.get("value")), e.get("template")) for group in kids(p, "events")
            for e in kids(group, "event")]
    uses += [(e[0], e[7]) for e in facts["events"]]
    out, ids = {}, {}
    for value, tid in uses:
        if tid is None:
            continue
        ids.setdefault(tid, []).append(value)
        for field, m in facts["field_maps"].get(value, {}).items():
            seen = out.setdefault(tid, {}).setdefault(field, m)
            if seen != m:
                sys.exit(f"{provider_name} template {tid}.{field}: events want maps {seen!r} and {m!r}")
    return out, ids


def task_lines(name, value, ops):
    """A <task> with its opcodes [(name, value)] (self-closing without any)."""
    head = "<task" + attrs([("name", name), ("value", str(value))])
    if not ops:
        return [head + "/>"]
    return [head + "><opcodes>"] + \
        ["<opcode" + attrs([("name", o), ("value", str(v))]) + "/>" for o, v in ops] + \
        ["</opcodes></task>"]


def map_lines(name, kind, entries):
    """A value or bit map from [(value, text)]."""
    return [f"<{kind} name={quoteattr(name)}>"] + \
        ["<map" + attrs([("value", f"0x{v:x}"), ("message", t)]) + "/>" for v, t in entries] + \
        [f"</{kind}>"]


def event_line(value, version, symbol, level, task, opcode, keywords, template):
    return "<event" + attrs(
        [("value", value), ("version", version), ("symbol", symbol), ("level", level),
         ("task", task), ("opcode", opcode), ("keywords", keywords), ("template", template)]) + "/>"


def convert(path, provider_name):
    root = ET.parse(path).getroot()
    strings = {s.get("id"): s.get("value") for s in root.iter(NS + "string")}

    def resolve(s):
        if s and s.startswith("$(string.") and s.endswith(")"):
            return strings.get(s[9:-1], s)
        return s

    p = next(e for e in root.iter(NS + "provider") if e.get("name") == provider_name)
    facts = clr_facts.PROVIDERS.get(provider_name)
    guid = p.get("guid").strip("{}").lower()
    lines = [
        "<!-- generated by tools/gen_manifests.py; facts from the public provider manifest of "
        f"{provider_name} (re-serialised in etwkit's compact form). Do not edit. -->",
        "<instrumentationManifest><instrumentation><events>",
        f"<provider name={quoteattr(provider_name)} guid={quoteattr(guid)}>",
    ]
    skipped = []
    for group in kids(p, "keywords"):
        lines.append("<keywords>")
        names = set()
        for k in kids(group, "keyword"):
            names.add(k.get("name"))
            lines.append("<keyword" + attrs([("name", k.get("name")), ("mask", k.get("mask"))]) + "/>")
        for name, mask in (facts or {}).get("keywords", []):
            if name not in names:
                lines.append("<keyword" + attrs([("name", name), ("mask", mask)]) + "/>")
        lines.append("</keywords>")
    for group in kids(p, "tasks"):
        lines.append("<tasks>")
        for t in kids(group, "task"):
            ops = [(o.get("name"), o.get("value"))
                   for os_ in kids(t, "opcodes") for o in kids(os_, "opcode")]
            ops += [(n, str(v)) for n, v in (facts or {}).get("opcodes", {}).get(t.get("name"), [])]
            lines += task_lines(t.get("name"), t.get("value"), ops)
        for name, value, ops in (facts or {}).get("tasks", []):
            lines += task_lines(name, value, ops)
        lines.append("</tasks>")
    for group in kids(p, "opcodes"):
        lines.append("<opcodes>")
        for o in kids(group, "opcode"):
            lines.append("<opcode" + attrs([("name", o.get("name")), ("value", o.get("value"))]) + "/>")
        lines.append("</opcodes>")
    map_names = set()
    for group in kids(p, "maps"):
        lines.append("<maps>")
        for m in group:
            kind = tag(m)
            if kind not in ("valueMap", "bitMap"):
                continue
            if facts and m.get("name") in facts["maps"]:
                continue  # the facts' current version of the map is written below
            map_names.add(m.get("name"))
            lines.append(f"<{kind} name={quoteattr(m.get('name'))}>")
            for e in kids(m, "map"):
                text = resolve(e.get("message"))
                lines.append("<map" + attrs([("value", e.get("value")), ("message", text)]) + "/>")
            lines.append(f"</{kind}>")
        if facts:
            for name, (kind, entries) in facts["maps"].items():
                map_names.add(name)
                lines += map_lines(name, kind, entries)
        lines.append("</maps>")
    field_maps, template_ids = clr_template_maps(provider_name, p, facts) if facts else ({}, {})
    applied = set()
    good_templates = set()
    for group in kids(p, "templates"):
        lines.append("<templates>")
        for t in kids(group, "template"):
            tid = t.get("tid")
            if facts and tid in facts["templates"]:
                continue  # replaced by the facts' layout, written below
            fields = [c for c in t if tag(c) == "data"]
            if any(tag(c) == "struct" for c in t):
                skipped.append(f"template {tid}: <struct> in a dump is not expected")
                continue
            if (provider_name, tid) in LOSSY_TEMPLATES:
                skipped.append(f"template {tid}: {LOSSY_TEMPLATES[(provider_name, tid)]}")
                continue
            fm = field_maps.get(tid, {})
            try:
                body = [convert_field(provider_name, tid, d, i == len(fields) - 1,
                                      fm.get(d.get("name")))
                        for i, d in enumerate(fields)]
            except Skip as e:
                skipped.append(f"template {tid}: {e}")
                continue
            applied.update((tid, d.get("name")) for d in fields if d.get("name") in fm)
            good_templates.add(tid)
            lines.append(f"<template tid={quoteattr(tid)}>" + "".join(body) + "</template>")
        if facts:
            for tid, fields in facts["templates"].items():
                for f in fields:
                    want = field_maps.get(tid, {}).get(f[1] if f[0] == "struct" else f[0])
                    if want is not None:
                        if f[0] == "struct" or f[2].get("map") != want:
                            sys.exit(f"{provider_name} {tid}.{f[0]}: facts template and field "
                                     f"maps disagree ({want!r})")
                        applied.add((tid, f[0]))
                good_templates.add(tid)
                lines.append(f"<template tid={quoteattr(tid)}>" + "".join(
                    facts_field(provider_name, tid, f, clr_facts.STRUCT_PADDING)
                    for f in fields) + "</template>")
        lines.append("</templates>")
    if facts:
        # Every (event, field) of the facts must reach a field of one of the event's templates
        # (events absent from the dump and the facts are not checked).
        reached = {(i, f) for tid, f in applied for i in template_ids.get(tid, [])}
        present = {i for ids in template_ids.values() for i in ids}
        unused = sorted(f"event {i}.{f}" for i, fm in facts["field_maps"].items() for f in fm
                        if i in present and (i, f) not in reached)
        if unused:
            sys.exit(f"{provider_name}: CLR field maps name fields no template has: {unused}")
    n_events = 0
    for group in kids(p, "events"):
        lines.append("<events>")
        have = set()
        for e in kids(group, "event"):
            t = e.get("template")
            have.add((int(e.get("value")), int(e.get("version", "0"))))
            if t is not None and t not in good_templates:
                skipped.append(f"event {e.get('value')} v{e.get('version', '0')}: template {t} left out")
                continue
            n_events += 1
            lines.append(event_line(*(e.get(k) for k in ("value", "version", "symbol", "level",
                                                          "task", "opcode", "keywords")), t))
        for ev in (facts or {}).get("events", []):
            if (ev[0], ev[1]) in have:
                sys.exit(f"{provider_name}: event {ev[0]} v{ev[1]} is in the dump and the CLR facts")
            n_events += 1
            lines.append(event_line(*ev))
        lines.append("</events>")
    lines.append("</provider></events></instrumentation></instrumentationManifest>")
    for line in lines:
        for m in re.findall(r' map="([^"]+)"', line):
            if m not in map_names:
                sys.exit(f"{provider_name}: map {m!r} is used but not defined")
    return guid, "\n".join(lines) + "\n", n_events, skipped


def convert_facts(f):
    """A provider written whole from facts (the shape of clr_private.PRIVATE) -> compact XML."""
    name, guid = f["name"], f["guid"]
    lines = [
        "<!-- generated by tools/gen_manifests.py; facts from the public provider manifest of "
        f"{name} (re-serialised in etwkit's compact form). Do not edit. -->",
        "<instrumentationManifest><instrumentation><events>",
        f"<provider name={quoteattr(name)} guid={quoteattr(guid)}>",
        "<keywords>",
    ]
    lines += ["<keyword" + attrs([("name", k), ("mask", m)]) + "/>" for k, m in f["keywords"]]
    lines.append("</keywords>")
    lines.append("<tasks>")
    opcodes = {}
    for tname, value, ops in f["tasks"]:
        opcodes[tname] = {o for o, _ in ops}
        lines += task_lines(tname, value, ops)
    lines.append("</tasks>")
    if f["opcodes"]:
        lines.append("<opcodes>")
        lines += ["<opcode" + attrs([("name", o), ("value", str(v))]) + "/>" for o, v in f["opcodes"]]
        lines.append("</opcodes>")
    global_ops = {o for o, _ in f["opcodes"]}
    lines.append("<maps>")
    for mname, (kind, entries) in f["maps"].items():
        lines += map_lines(mname, kind, entries)
    lines.append("</maps>")
    lines.append("<templates>")
    for tid, fields in f["templates"].items():
        lines.append(f"<template tid={quoteattr(tid)}>" + "".join(
            facts_field(name, tid, x, clr_facts.STRUCT_PADDING) for x in fields) + "</template>")
    lines.append("</templates>")
    lines.append("<events>")
    seen = set()
    for value, version, symbol, level, task, opcode, keywords, t in f["events"]:
        if (value, version) in seen:
            sys.exit(f"{name}: event {value} v{version} twice in the facts")
        seen.add((value, version))
        if t is not None and t not in f["templates"]:
            sys.exit(f"{name}: event {value} v{version}: no template {t}")
        if task is not None and task not in opcodes:
            sys.exit(f"{name}: event {value} v{version}: no task {task}")
        if opcode is not None and not opcode.startswith("win:") and opcode not in global_ops \
                and opcode not in opcodes.get(task, set()):
            sys.exit(f"{name}: event {value} v{version}: no opcode {opcode} in task {task}")
        lines.append(event_line(value, version, symbol, level, task, opcode, keywords, t))
    lines.append("</events>")
    lines.append("</provider></events></instrumentation></instrumentationManifest>")
    for line in lines:
        for m in re.findall(r' map="([^"]+)"', line):
            if m not in f["maps"]:
                sys.exit(f"{name}: map {m!r} is used but not defined")
    return guid, "\n".join(lines) + "\n", len(seen), []


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else fetch()
    by_name = {}
    for f in sorted(glob.glob(os.path.join(src, "*.xml"))):
        try:
            root = ET.parse(f).getroot()
        except ET.ParseError as e:
            print(f"warning: {os.path.basename(f)}: {e}", file=sys.stderr)
            continue
        for p in root.iter(NS + "provider"):
            by_name.setdefault(p.get("name"), f)
    os.makedirs(OUT, exist_ok=True)
    for old in glob.glob(os.path.join(OUT, "*.xml")):
        os.remove(old)
    written = []
    for name in PROVIDERS:
        if name in FACTS_ONLY:
            guid, text, n, skipped = convert_facts(FACTS_ONLY[name])
        elif name not in by_name:
            print(f"absent: {name} (no manifest in {src}); skipped", file=sys.stderr)
            continue
        else:
            guid, text, n, skipped = convert(by_name[name], name)
        fname = name.replace("Microsoft-Windows-", "").lower() + ".xml"
        with open(os.path.join(OUT, fname), "w") as fh:
            fh.write(text)
        written.append((fname, name, guid))
        print(f"{fname}: {guid}, {n} events, {len(skipped)} left out", file=sys.stderr)
        for s in skipped:
            print(f"  left out: {s}", file=sys.stderr)
    with open(os.path.join(OUT, "list.rs"), "w") as fh:
        fh.write("// generated by tools/gen_manifests.py; do not edit.\n")
        fh.write("use crate::guid::Guid;\n\n")
        fh.write("/// (file name, provider name, provider GUID, compact manifest XML) of every built-in\n")
        fh.write("/// provider manifest.\n")
        fh.write("pub(crate) const MANIFESTS: &[(&str, &str, Guid, &str)] = &[\n")
        for f, name, guid in written:
            fh.write(f'    (\n        "{f}",\n        "{name}",\n'
                     f'        Guid::from_str_const("{guid}"),\n        include_str!("{f}"),\n    ),\n')
        fh.write("];\n")

if __name__ == "__main__":
    main()
