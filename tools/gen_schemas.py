#!/usr/bin/env python3
"""Generate etwkit's built-in schema tables from the shared schema facts.

Reads  ../shared/schemas/{winsock-afd.json, heap.json, kernel-mof.json}  (path overridable with --shared)
and    tools/kernel-mof-extra.json  (kernel classes the shared file does not list; see its "about")
writes crates/etwkit/src/schema/builtin/{winsock_afd.rs, heap.rs, kernel_mof.rs}.

The generated files are committed so the crate builds without ../shared. Re-run after the JSON changes:
    python3 tools/gen_schemas.py && cargo fmt
Every table entry becomes an `EventDef` (see builtin/mod.rs): a SchemaKey, names, and `FieldDef`s whose
in/out types are TDH numbers (schema/types.rs).
"""

import argparse
import hashlib
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "crates", "etwkit", "src", "schema", "builtin")

# ---- TDH numbers (tdh.h) ------------------------------------------------------------------------
IN = {
    "win:UnicodeString": 1, "win:AnsiString": 2, "win:Int8": 3, "win:UInt8": 4, "win:Int16": 5,
    "win:UInt16": 6, "win:Int32": 7, "win:UInt32": 8, "win:Int64": 9, "win:UInt64": 10,
    "win:Float": 11, "win:Double": 12, "win:Boolean": 13, "win:Binary": 14, "win:GUID": 15,
    "win:Pointer": 16, "win:FILETIME": 17, "win:SYSTEMTIME": 18, "win:SID": 310, "win:HexInt32": 20,
    "win:HexInt64": 21, "win:SizeT": 308,
}
# kernel MOF "sid" (object + extension("Sid")) is a TOKEN_USER-prefixed SID: TDH WBEMSID (310).
OUT = {
    None: 0, "xs:string": 1, "xs:dateTime": 2, "xs:byte": 3, "xs:unsignedByte": 4, "xs:short": 5,
    "xs:unsignedShort": 6, "xs:int": 7, "xs:unsignedInt": 8, "xs:long": 9, "xs:unsignedLong": 10,
    "xs:float": 11, "xs:double": 12, "xs:boolean": 13, "xs:GUID": 14, "xs:hexBinary": 15,
    "win:HexInt8": 16, "win:HexInt16": 17, "win:HexInt32": 18, "win:HexInt64": 19, "win:PID": 20,
    "win:TID": 21, "win:Port": 22, "win:IPv4": 23, "win:IPv6": 24, "win:SocketAddress": 25,
    "win:CIMDateTime": 26, "win:ETWTIME": 27, "win:Xml": 28, "win:ErrorCode": 29, "win:Win32Error": 30,
    "win:NTStatus": 31, "win:HResult": 32,
}
# compact tokens used by tools/kernel-mof-extra.json
TOKENS = {
    "u8": (4, 0), "i8": (3, 0), "u16": (6, 0), "i16": (5, 0), "u32": (8, 0), "i32": (7, 0),
    "u64": (10, 0), "i64": (9, 0), "x16": (6, 17), "x32": (8, 18), "x64": (10, 19), "ptr": (16, 0),
    "sizet": (308, 0), "wstr": (1, 0), "astr": (2, 0), "guid": (15, 0), "wsid": (310, 0),
    "filetime": (17, 0), "ipv4": (8, 23), "ipv6": (14, 24), "port": (6, 22), "bool32": (13, 0),
    # etwkit's own in-types (schema::types::in_type::LZNT1_*): the rest of the payload is
    # LZNT1-compressed text, UTF-16 or 8-bit; out-type win:Xml (TDH_OUTTYPE_XML)
    "lznt1wstr": (0x7F01, 28), "lznt1astr": (0x7F02, 28),
}


def field(name, in_type, out_type=0, count=("one",), length=("natural",), map_name=None, members=None):
    return {"name": name, "in": in_type, "out": out_type, "count": count, "length": length,
            "map": map_name, "members": members or []}


def parse_token_fields(specs):
    out, names = [], []
    for spec in specs:
        parts = spec.split(" ")
        f = parse_token_field(" ".join(parts[:2]))
        if len(parts) == 3 and parts[2].startswith("*"):
            f["count"] = ("field", index_of(parts[2][1:], names, spec))
        elif len(parts) == 3 and parts[2] == "?":
            f["count"] = ("ifroom",)
        elif len(parts) == 3 and parts[2].startswith("%") and parts[1].startswith("lznt1"):
            # the inflated size in bytes, stated by an earlier field
            f["length"] = ("field", index_of(parts[2][1:], names, spec))
        elif len(parts) != 2:
            sys.exit(f"kernel-mof-extra.json: bad field {spec!r}")
        out.append(f)
        names.append(f["name"])
    return out


def parse_token_field(spec):
    name, ty = spec.split(" ", 1)
    m = re.fullmatch(r"(wchar|bin)\[(\d+)\]", ty)
    if m:
        in_type = 1 if m.group(1) == "wchar" else 14
        return field(name, in_type, 0, length=("fixed", int(m.group(2))))
    if ty not in TOKENS:
        sys.exit(f"kernel-mof-extra.json: unknown type {ty!r} in {spec!r}")
    i, o = TOKENS[ty]
    f = field(name, i, o)
    if ty == "ipv6":
        f["length"] = ("fixed", 16)
    return f


def json_field(f, names_so_far, where):
    """A field from the shared JSON files (inType/outType/length/count/map) -> field dict."""
    in_name = f["inType"]
    if in_name == "win:Array":
        members = [json_field(m, [], where) for m in f["element"]]
        idx = index_of(f["count"], names_so_far, where)
        return field(f["name"], 0, 0, count=("field", idx), members=members)
    if in_name not in IN:
        sys.exit(f"{where}: unknown inType {in_name}")
    in_type = IN[in_name]
    out_type = OUT.get(f.get("outType"))
    if out_type is None:
        sys.exit(f"{where}: unknown outType {f.get('outType')}")
    if f.get("format") == "x":
        out_type = {8: 18, 10: 19, 6: 17, 4: 16}.get(in_type, out_type)
    if "FILETIME" in (f.get("notes") or "") and in_type == 10:
        in_type = 17
    length = ("natural",)
    if "length" in f:
        if isinstance(f["length"], int):
            length = ("fixed", f["length"])
        else:
            length = ("field", index_of(f["length"], names_so_far, where))
    count = ("one",)
    if "count" in f and isinstance(f["count"], int):
        count = ("fixed", f["count"])
    elif "count" in f:
        # "(EventDataLength - 16) / PointerSize": frames to the end of the payload (StackWalk).
        if "EventDataLength" not in f["count"]:
            sys.exit(f"{where}: field {f['name']} has a count expression {f['count']!r}")
        count = ("toend",)
        name = "Stack" if f["name"].startswith("Stack1..") else f["name"].removesuffix("[]")
        return field(name, in_type, out_type, count=count, length=length, map_name=f.get("map"))
    return field(f["name"], in_type, out_type, count=count, length=length, map_name=f.get("map"))


def index_of(name, names, where):
    if name not in names:
        sys.exit(f"{where}: length/count field {name} not found before use")
    return names.index(name)


def fields_from_json(flist, where):
    out, names = [], []
    for f in flist:
        jf = json_field(f, names, where)
        if jf is not None:
            out.append(jf)
        names.append(f["name"])
    return out


# ---- Rust emission ------------------------------------------------------------------------------

def rs_str(s):
    return json.dumps(s, ensure_ascii=False)


def rs_opt(s):
    return "None" if s is None else f"Some({rs_str(s)})"


class Emitter:
    def __init__(self):
        self.templates = {}  # key -> const name
        self.template_src = []
        self.maps = {}

    def fields_const(self, fields):
        key = json.dumps(fields, sort_keys=True)
        if key in self.templates:
            return self.templates[key]
        body = self.fields_src(fields)
        name = "T" + hashlib.sha1(key.encode()).hexdigest()[:8].upper()
        self.templates[key] = name
        self.template_src.append(f"const {name}: &[FieldDef] = &[\n{body}];\n")
        return name

    def fields_src(self, fields):
        out = []
        for f in fields:
            count = {"one": "CountDef::One", "fixed": "CountDef::Fixed({})", "field": "CountDef::Field({})",
                     "toend": "CountDef::ToEnd", "ifroom": "CountDef::IfRoom"}[
                f["count"][0]].format(*f["count"][1:])
            length = {"natural": "LengthDef::Natural", "fixed": "LengthDef::Fixed({})",
                      "field": "LengthDef::Field({})"}[f["length"][0]].format(*f["length"][1:])
            mp = "None" if not f["map"] else f"Some(&{map_ident(f['map'])})"
            members = "&[]" if not f["members"] else self.fields_const(f["members"])
            out.append(f"    FieldDef {{ name: {rs_str(f['name'])}, in_type: {f['in']}, out_type: {f['out']}, "
                       f"count: {count}, length: {length}, map: {mp}, members: {members} }},\n")
        return "".join(out)


def map_ident(name):
    return "MAP_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def emit_maps(maps):
    src = []
    for name, (is_bitmap, entries) in maps.items():
        ent = ", ".join(f"({v}, {rs_str(s)})" for v, s in entries)
        src.append(f"pub(crate) static {map_ident(name)}: MapDef = MapDef {{ name: {rs_str(name)}, is_bitmap: "
                   f"{'true' if is_bitmap else 'false'}, entries: &[{ent}] }};\n")
    return "".join(src)


def map_entries(m):
    out = []
    for k, v in m.items():
        if k.startswith("_"):
            continue
        out.append((int(k, 0), v))
    out.sort()
    return out


def guid_const(g):
    return f'Guid::from_str_const("{g}")'


def key_src(ev):
    k = ev["key"]
    if k[0] == "manifest":
        return f"SchemaKey::Manifest {{ provider: {k[1]}, id: {k[2]}, version: {k[3]} }}"
    return f"SchemaKey::Mof {{ class: {k[1]}, opcode: {k[2]}, version: {k[3]} }}"


def emit_events(em, events, const_name):
    out = [f"pub(crate) static {const_name}: &[EventDef] = &[\n"]
    for ev in events:
        t = em.fields_const(ev["fields"]) if ev["fields"] else "&[]"
        out.append(
            f"    EventDef {{ key: {key_src(ev)}, provider: {ev['provider']}, provider_name: {rs_str(ev['provider_name'])}, "
            f"event_name: {rs_opt(ev['event_name'])}, task_name: {rs_opt(ev['task_name'])}, "
            f"opcode_name: {rs_opt(ev['opcode_name'])}, keywords_name: {rs_opt(ev['keywords_name'])}, fields: {t} }},\n")
    out.append("];\n")
    return "".join(out)


def header(sources, extra=""):
    return ("// @generated by tools/gen_schemas.py — do not edit by hand.\n"
            f"// Source: {', '.join(sources)}\n"
            "// (facts gathered in ../shared/schemas; re-run the script after they change).\n"
            f"{extra}"
            "\n#![allow(clippy::all)]\n\n"
            "use super::{CountDef, EventDef, FieldDef, LengthDef, MapDef};\n"
            "use crate::guid::Guid;\n"
            "use crate::schema::SchemaKey;\n\n")


def check_unique(events, what):
    seen = {}
    for ev in events:
        k = ev["key"]
        if k in seen:
            sys.exit(f"{what}: duplicate key {k}")
        seen[k] = ev


# ---- Winsock-AFD ----------------------------------------------------------------------------------

def gen_afd(shared):
    path = os.path.join(shared, "schemas", "winsock-afd.json")
    d = json.load(open(path, encoding="utf-8"))
    prov = d["provider"]
    pguid = guid_const(prov["guid"])
    maps = {}
    for name, m in d["valueMaps"].items():
        if "NOT a manifest map" in name:
            continue
        maps[name] = (False, map_entries(m))
    kw = [(int(k["mask"], 16), k["name"]) for k in prov["keywords"]]
    events = []
    for e in d["events"]:
        where = f"winsock-afd.json event {e['id']}"
        fields = fields_from_json(e["fields"], where)
        # value maps: the field's own map, or any build's map (mapByBuild) — a map only names values.
        assert len(fields) == len(e["fields"])
        for jf, f in zip(e["fields"], fields):
            if not f["map"] and jf.get("mapByBuild"):
                names = [m for m in jf["mapByBuild"].values() if m]
                if names:
                    f["map"] = names[0]
            if f["map"] and f["map"] not in maps:
                sys.exit(f"{where}: unknown map {f['map']}")
        mask = int(e["keywords"], 16)
        kwn = " | ".join(n for m, n in kw if mask & m) or None
        opn = e["opcodeName"]
        opn = "Info" if opn == "win:Info" else opn
        events.append({
            "key": ("manifest", pguid, e["id"], e["version"]), "provider": pguid,
            "provider_name": prov["name"], "event_name": e["title"], "task_name": e["taskName"],
            "opcode_name": opn, "keywords_name": kwn, "fields": fields,
        })
    check_unique(events, "winsock-afd")
    em = Emitter()
    body = emit_events(em, events, "EVENTS")
    src = header(["../shared/schemas/winsock-afd.json"],
                 "// All 96 events (1-41, 1000-1037, 3000-3007, 4000-4020), version 0, keyed (provider, id, version).\n"
                 "// Value maps attached wherever any build's manifest attaches them (a map only names values).\n")
    src += f"/// Microsoft-Windows-Winsock-AFD\npub const PROVIDER: Guid = {pguid};\n"
    src += f"pub const PROVIDER_NAME: &str = {rs_str(prov['name'])};\n\n"
    src += "/// Keyword bits of the provider.\npub const KEYWORDS: &[(u64, &str)] = &[" + ", ".join(
        f"(0x{m:x}, {rs_str(n)})" for m, n in kw) + "];\n"
    src += "/// Level names of the provider.\npub const LEVELS: &[(u8, &str)] = &[" + ", ".join(
        f"({k}, {rs_str(v)})" for k, v in sorted(prov["levels"].items(), key=lambda x: int(x[0]))) + "];\n\n"
    src += emit_maps(maps) + "\n" + "".join(em.template_src) + "\n" + body
    return src, len(events)


# ---- heap -----------------------------------------------------------------------------------------

def heap_versions(v):
    if isinstance(v, int):
        return [v]
    if v.startswith("<=2"):
        return [0, 1, 2]
    if v == "Vista MOF":
        return [0, 1]
    sys.exit(f"heap.json: unknown version {v!r}")


def gen_heap(shared):
    path = os.path.join(shared, "schemas", "heap.json")
    d = json.load(open(path, encoding="utf-8"))
    prov = d["provider"]
    pguid = guid_const(prov["guid"])
    maps = {}
    for name, m in d["valueMaps"].items():
        entries = map_entries(m)
        is_bitmap = name == "HeapFlags"
        maps[name] = (is_bitmap, entries)
    events, consts, fnames = [], [], set()
    for e in d["events"]:
        consts.append((e["name"], e["opcode"], e["hookId"]))
        for v in e["versions"]:
            where = f"heap.json opcode {e['opcode']}"
            fields = fields_from_json(v["fields"], where)
            for f in fields:
                fnames.add(f["name"])
            for ver in heap_versions(v["version"]):
                events.append({
                    "key": ("mof", pguid, e["opcode"], ver), "provider": pguid,
                    "provider_name": "HeapTraceProvider", "event_name": None, "task_name": "Heap",
                    "opcode_name": e["name"], "keywords_name": None, "fields": fields,
                })
    rr = d["heapRangeEvents"]
    rguid = guid_const(rr["classGuid"])
    for e in rr["events"]:
        fields = fields_from_json(e["fields"], f"heap.json heapRange {e['opcode']}")
        for f in fields:
            fnames.add(f["name"])
        events.append({
            "key": ("mof", rguid, e["opcode"], 2), "provider": rguid, "provider_name": "Windows Kernel",
            "event_name": None, "task_name": "PageFault", "opcode_name": e["name"], "keywords_name": None,
            "fields": fields,
        })
    check_unique(events, "heap")
    em = Emitter()
    body = emit_events(em, events, "EVENTS")
    src = header(["../shared/schemas/heap.json"],
                 "// Classic MOF heap events keyed (class GUID == provider GUID, opcode = event type, header version).\n"
                 "// Versions given as prose in heap.json: '<=2 (Vista MOF)' -> 0, 1, 2; 'Vista MOF' -> 0, 1.\n"
                 "// Heap-range events live in the kernel PageFault class (opcodes 100-104, version 2).\n")
    src += f"/// HeapTraceProvider: classic provider whose event class GUID is the provider GUID (kernel group 0x10).\n"
    src += f"pub const PROVIDER: Guid = {pguid};\n"
    src += f"/// Heap range provider (enables the PageFault HeapRange* events).\npub const HEAP_RANGE_PROVIDER: Guid = {guid_const(d['relatedProviders'][0]['guid'])};\n"
    src += f"/// Class of the HeapRange* events (the kernel PageFault class).\npub const HEAP_RANGE_CLASS: Guid = {rguid};\n\n"
    src += "/// Event types (opcodes) of the heap provider; the hook id is `0x1000 | opcode`.\npub mod opcode {\n"
    for name, op, hook in consts:
        ident = re.sub(r"[^A-Za-z0-9]+", "_", re.sub(r"\(.*\)", "", name)).strip("_")
        ident = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", ident).upper()
        ident = {"RE_ALLOC": "REALLOC", "SNAP_SHOT": "SNAPSHOT"}.get(ident, ident)
        src += f"    /// {name} (hook {hook})\n    pub const {ident}: u8 = {op};\n"
    src += "}\n\n/// Field names used by the heap events.\npub mod field {\n"
    for n in sorted(fnames):
        ident = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", n).upper()
        src += f"    pub const {ident}: &str = {rs_str(n)};\n"
    src += "}\n\n"
    src += emit_maps(maps) + "\n" + "".join(em.template_src) + "\n" + body
    return src, len(events)


# ---- kernel MOF -----------------------------------------------------------------------------------

PROVIDER_NAME = "Windows Kernel"


def gen_kernel(shared):
    path = os.path.join(shared, "schemas", "kernel-mof.json")
    d = json.load(open(path, encoding="utf-8"))
    extra = json.load(open(os.path.join(ROOT, "tools", "kernel-mof-extra.json"), encoding="utf-8"))
    gmap = d["systemHeader"]["groupGuidMap"]
    groups = []
    for k, v in gmap.items():
        g, name = v.split(" ", 1)
        groups.append((int(k, 16), g, name))
    groups.sort()
    maps = {}
    events = []
    class_guid = {}

    def add(task, guid, opcode, opname, versions, fields, provider_name=PROVIDER_NAME):
        for ver in versions:
            events.append({
                "key": ("mof", guid_const(guid), opcode, ver), "provider": guid_const(guid),
                "provider_name": provider_name, "event_name": None, "task_name": task,
                "opcode_name": opname, "keywords_name": None, "fields": fields,
            })

    overrides = {(o["task"], o["type"]): parse_token_fields(o["fields"]) for o in extra["overrides"]}

    for cname, cl in d["classes"].items():
        guid = cl["guid"]
        class_guid[cname] = guid
        for mname, m in cl.get("valueMaps", {}).items():
            maps[mname] = (mname.endswith("Flags"), map_entries(m))
        if "events" in cl:
            by_type = {}
            for e in cl["events"]:
                where = f"kernel-mof.json {cname} type {e['type']}"
                if "fields" in e:
                    fields = fields_from_json(e["fields"], where)
                else:
                    # "same layout as X"
                    ref = re.search(r"same layout as (\w+)", e.get("notes", ""))
                    if not ref or ref.group(1) not in by_type:
                        sys.exit(f"{where}: no fields and no usable 'same layout as'")
                    fields = by_type[ref.group(1)]
                by_type[e["name"]] = fields
                fields = overrides.get((cname, e["type"]), fields)
                versions = e.get("versions") or ([e["version"]] if "version" in e else [2])
                add(cname, guid, e["type"], e["name"], versions, fields)
        for tg in ("typeGroup1", "typeGroup"):
            if tg in cl:
                grp = cl[tg]
                names = cl["eventTypes"]
                for v in grp["versions"]:
                    fields = fields_from_json(v["fields"], f"kernel-mof.json {cname} v{v['version']}")
                    applies = grp["appliesTo"]
                    if "Defunct (39) only" in (v.get("notes") or ""):
                        applies = [39]
                    # Image v0/v1 are documented as Load-only classes, but syzygy_* traces carry the same
                    # layout under UnLoad/DCStart/DCEnd too: register them for every Image type.
                    # "End v1 carries only ProcessId, TThreadId" (Thread): End gets that prefix only
                    only = re.search(r"End v%d carries only ([\w, ]+)" % v["version"], v.get("notes") or "")
                    for t in applies:
                        fl = fields
                        if only and names[str(t)] == "End":
                            keep = [n.strip() for n in only.group(1).split(",")]
                            fl = [f for f in fields if f["name"] in keep]
                        add(cname, guid, t, names[str(t)], [v["version"]], fl)
        for e in cl.get("other", []):
            types = e["type"] if isinstance(e["type"], list) else [e["type"]]
            names = e["name"].split("/")
            fields = fields_from_json(e["fields"], f"kernel-mof.json {cname} {e['name']}")
            for t, n in zip(types, names if len(names) == len(types) else names * len(types)):
                add(cname, guid, t, n, [e["version"]], fields)
        for vk in ("v2", "v1", "v0"):
            for e in cl.get(vk, []):
                fields = fields_from_json(e["fields"], f"kernel-mof.json {cname} {e['class']}")
                for t, n in e["types"].items():
                    add(cname, guid, int(t), n, [int(vk[1])], fields)

    for cl in extra["classes"]:
        class_guid[cl["task"]] = cl["guid"]
        for e in cl["events"]:
            fields = parse_token_fields(e["fields"])
            for t, n in e["types"].items():
                add(cl["task"], cl["guid"], int(t), n, e["versions"], fields, cl["provider"])
    for a in extra["additions"]:
        fields = parse_token_fields(a["fields"])
        for t, n in a["types"].items():
            add(a["task"], class_guid[a["task"]], int(t), n, a["versions"], fields)
    # Last fields that later builds append to a version's layout, read while the payload holds them.
    for a in extra["appended"]:
        fields = parse_token_fields(a["fields"])
        keys = {("mof", guid_const(class_guid[a["task"]]), t, v) for t in a["types"] for v in a["versions"]}
        found = [ev for ev in events if ev["key"] in keys]
        if len(found) != len(keys):
            sys.exit(f"kernel-mof-extra.json appended: {len(found)} of the {len(keys)} layouts of {a['task']} exist")
        for ev in found:
            ev["fields"] = ev["fields"] + fields

    # HookId 0x030A (Process group, type 10) is Image/Load: register Image Load layouts under the Process
    # class key too, so a reader that maps the group literally still finds them.
    img = guid_const(class_guid["Image"])
    proc = guid_const(class_guid["Process"])
    for ev in list(events):
        if ev["key"][1] == img and ev["key"][2] == 10:
            dup = dict(ev)
            dup["key"] = ("mof", proc, 10, ev["key"][3])
            events.append(dup)

    # Kernel bit fields named as TraceEvent names them and enumerations by their documented constants
    # (kernel-mof-extra.json "maps", "valueMaps", "fieldMaps").
    for name, m in extra.get("maps", {}).items():
        maps[name] = (True, map_entries(m))
    for name, m in extra.get("valueMaps", {}).items():
        if name in maps:
            sys.exit(f"kernel-mof-extra.json: map {name} is both a bit map and a value map")
        maps[name] = (False, map_entries(m))
    field_maps = {(fm["task"], fm["field"]): fm["map"] for fm in extra.get("fieldMaps", [])}
    used = set()
    for ev in events:
        if any((ev["task_name"], f["name"]) in field_maps for f in ev["fields"]):
            fields = []
            for f in ev["fields"]:
                k = (ev["task_name"], f["name"])
                if k in field_maps:
                    f = dict(f, map=field_maps[k])
                    used.add(k)
                fields.append(f)
            ev["fields"] = fields
    for k in field_maps:
        if k not in used:
            sys.exit(f"kernel-mof-extra.json fieldMaps: no field {k[1]} in any {k[0]} event")

    check_unique(events, "kernel")
    em = Emitter()
    body = emit_events(em, events, "EVENTS")
    src = header(["../shared/schemas/kernel-mof.json", "tools/kernel-mof-extra.json"],
                 "// Kernel MOF classes keyed (group/class GUID, event type, header version), plus KernelTraceControl's\n"
                 "// classic ImageID/DbgID/FileVersion and SysConfig events. StackWalk frame arrays (Stack1..StackN,\n"
                 "// KeyCreate frames) run to the end of the payload: one array property (`Stack`, `StackFrame`)\n"
                 "// counted to the end (CountDef::ToEnd).\n")
    src += "/// Kernel trace group (high byte of a HookId) -> (class GUID, group name).\n"
    src += "pub const GROUPS: &[(u8, Guid, &str)] = &[\n"
    for n, g, name in groups:
        src += f"    (0x{n:02x}, {guid_const(g)}, {rs_str(name)}),\n"
    src += "];\n\n"
    src += "/// The MSNT_SystemTrace (NT Kernel Logger) provider GUID.\n"
    src += 'pub const SYSTEM_TRACE_PROVIDER: Guid = Guid::from_str_const("9e814aad-3204-11d2-9a82-006008a86939");\n'
    for cl in extra["classes"]:
        if cl["provider"] == "KernelTraceControl":
            ident = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", cl["task"]).upper()
            src += f"/// KernelTraceControl {cl['task']} event class.\npub const KTC_{ident}: Guid = {guid_const(cl['guid'])};\n"
    src += "\n" + emit_maps(maps) + "\n" + "".join(em.template_src) + "\n" + body
    return src, len(events)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"), help="the shared folder")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(args.shared, "schemas")):
        sys.exit(f"no schemas folder under {args.shared}")
    os.makedirs(OUT_DIR, exist_ok=True)
    for fname, gen in (("winsock_afd.rs", gen_afd), ("heap.rs", gen_heap), ("kernel_mof.rs", gen_kernel)):
        src, n = gen(args.shared)
        with open(os.path.join(OUT_DIR, fname), "w", encoding="utf-8") as fh:
            fh.write(src)
        print(f"{fname}: {n} event layouts")


if __name__ == "__main__":
    main()
