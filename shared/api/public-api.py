#!/usr/bin/env python3
"""The public API of lambda-idempotency, from rustdoc's JSON, against its committed listing.

Reads the JSON that

    RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="-Z unstable-options --output-format json" \\
        cargo rustdoc -p lambda-idempotency --all-features

(as `make api-check` runs it) wrote (JSON_FILE, default: the workspace's
target/doc/lambda_idempotency.json) and prints one line per public item, with its whole signature: every module, type, function, constant, re-export,
struct field and enum variant; every trait with its bounds and each of its items (methods with
their signatures, associated types and constants, `{ .. }` after a provided one); every method and
associated item of an inherent impl; every trait impl of a public type (blanket impls left out;
of the auto traits, `Send` and `Sync`). Generics, bounds and where clauses are rendered (those of
an impl on each of its methods), and types by their full path, so that removing a method or
changing a trait method's signature changes a line.

    public-api.py check    fails, naming each line added or removed, when the listing is not
                           public-api.txt
    public-api.py update   writes public-api.txt
    public-api.py count    prints the number of modules and of other lines (items)
    public-api.py print    prints the listing

The walker's own tests: `python3 -m unittest discover -s shared/api` (test_public_api.py, on a
small JSON fixture); `check` runs them first.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LISTING = os.path.join(HERE, "public-api.txt")
ROOT = os.path.dirname(os.path.dirname(HERE))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
JSON_FILE = os.environ.get("JSON_FILE") or os.path.join(TARGET, "doc", "lambda_idempotency.json")

# The rustdoc JSON format versions this walker was written against (rustc 1.95 writes 57). Another
# version may have changed a shape the walker reads: it fails naming the version rather than print
# a listing that silently lost something.
FORMATS = {57}

# Types and traits of the standard library's prelude, written by name; every other external path
# is written in full.
PRELUDE = {
    "core::option::Option", "core::result::Result", "alloc::string::String", "alloc::vec::Vec",
    "alloc::boxed::Box", "core::marker::Send", "core::marker::Sync", "core::marker::Sized",
    "core::marker::Copy", "core::marker::Unpin", "core::clone::Clone", "core::default::Default",
    "core::fmt::Debug", "core::cmp::PartialEq", "core::cmp::Eq", "core::cmp::PartialOrd",
    "core::cmp::Ord", "core::hash::Hash", "core::ops::function::Fn", "core::ops::function::FnMut",
    "core::ops::function::FnOnce", "core::convert::From", "core::convert::Into",
    "core::convert::AsRef", "core::future::future::Future", "core::iter::traits::collect::IntoIterator",
    "core::iter::traits::iterator::Iterator", "core::ops::drop::Drop",
}
AUTO_TRAITS = {"Send", "Sync"}
# Impls that say nothing a user can name: `derive(PartialEq)`'s unstable marker.
UNLISTED_TRAITS = {"core::marker::StructuralPartialEq"}


class UnknownShape(Exception):
    """A JSON shape the walker does not know (a newer format)."""


def one(obj):
    """The single (key, value) of a rustdoc JSON enum written as an object, or (name, None) of
    one written as a string."""
    if isinstance(obj, str):
        return obj, None
    if isinstance(obj, dict) and len(obj) == 1:
        return next(iter(obj.items()))
    raise UnknownShape(f"not a rustdoc enum: {json.dumps(obj)[:200]}")


class Api:
    def __init__(self, doc):
        version = doc.get("format_version")
        if version not in FORMATS:
            raise UnknownShape(
                f"rustdoc JSON format {version}; this walker knows {sorted(FORMATS)}: check what "
                "changed (rustdoc-types' changelog) and update shared/api/public-api.py")
        self.index = doc["index"]
        self.paths = doc["paths"]
        self.crate_name = self.index[str(doc["root"])]["name"]
        self.root = doc["root"]
        self.public = {}  # local item id -> the first public path it is reachable at
        self.lines = []   # (sort key, line)

    # --- paths ---------------------------------------------------------------

    def item(self, id_):
        return self.index.get(str(id_))

    def path_of(self, id_, written):
        """The path a type or trait is written with: its public path when it is this crate's,
        the prelude name of a prelude item, else the full path of the crate that defines it."""
        if id_ in self.public:
            return self.public[id_]
        summary = self.paths.get(str(id_))
        if summary is None:
            return written
        full = "::".join(summary["path"])
        if full in PRELUDE:
            return summary["path"][-1]
        return full

    # --- types -----------------------------------------------------------------

    def ty(self, t):
        kind, v = one(t)
        if kind == "resolved_path":
            return self.path(v)
        if kind == "dyn_trait":
            parts = [self.poly_trait(p) for p in v["traits"]]
            if v.get("lifetime"):
                parts.append(v["lifetime"])
            return "dyn " + " + ".join(parts)
        if kind in ("generic", "primitive"):
            return v
        if kind == "function_pointer":
            header = self.header(v["header"])
            hrtb = self.hrtb(v["generic_params"])
            return f"{hrtb}{header}fn{self.sig(v['sig'])}"
        if kind == "tuple":
            inner = ", ".join(self.ty(x) for x in v)
            return f"({inner},)" if len(v) == 1 else f"({inner})"
        if kind == "slice":
            return f"[{self.ty(v)}]"
        if kind == "array":
            return f"[{self.ty(v['type'])}; {v['len']}]"
        if kind == "pat":
            return f"{self.ty(v['type'])} is {v['__pat_unstable_do_not_use']}"
        if kind == "impl_trait":
            return "impl " + self.bounds(v)
        if kind == "infer":
            return "_"
        if kind == "raw_pointer":
            return ("*mut " if v["is_mutable"] else "*const ") + self.ty(v["type"])
        if kind == "borrowed_ref":
            lifetime = f"{v['lifetime']} " if v.get("lifetime") else ""
            mutable = "mut " if v["is_mutable"] else ""
            return f"&{lifetime}{mutable}{self.ty(v['type'])}"
        if kind == "qualified_path":
            args = self.generic_args(v.get("args"))
            self_type = self.ty(v["self_type"])
            trait = v.get("trait")
            if trait is None or trait["path"] == "":
                return f"{self_type}::{v['name']}{args}"
            return f"<{self_type} as {self.path(trait)}>::{v['name']}{args}"
        raise UnknownShape(f"type {kind}")

    def path(self, p):
        return self.path_of(p["id"], p["path"]) + self.generic_args(p.get("args"))

    def generic_args(self, args):
        if not args:
            return ""
        kind, v = one(args)
        if kind == "angle_bracketed":
            parts = [self.generic_arg(a) for a in v["args"]]
            parts += [self.constraint(c) for c in v["constraints"]]
            return f"<{', '.join(parts)}>" if parts else ""
        if kind == "parenthesized":
            inputs = ", ".join(self.ty(x) for x in v["inputs"])
            output = f" -> {self.ty(v['output'])}" if v.get("output") else ""
            return f"({inputs}){output}"
        if kind == "return_type_notation":
            return "(..)"
        raise UnknownShape(f"generic args {kind}")

    def generic_arg(self, a):
        kind, v = one(a)
        if kind == "lifetime":
            return v
        if kind == "type":
            return self.ty(v)
        if kind == "const":
            return v.get("value") or v["expr"]
        if kind == "infer":
            return "_"
        raise UnknownShape(f"generic arg {kind}")

    def constraint(self, c):
        name = c["name"] + self.generic_args(c.get("args"))
        kind, v = one(c["binding"])
        if kind == "equality":
            term_kind, term = one(v)
            value = self.ty(term) if term_kind == "type" else (term.get("value") or term["expr"])
            return f"{name} = {value}"
        if kind == "constraint":
            return f"{name}: {self.bounds(v)}"
        raise UnknownShape(f"constraint {kind}")

    def poly_trait(self, p):
        return self.hrtb(p["generic_params"]) + self.path(p["trait"])

    def bounds(self, bounds):
        out = []
        for b in bounds:
            kind, v = one(b)
            if kind == "trait_bound":
                modifier = {"none": "", "maybe": "?", "maybe_const": "~const "}[v["modifier"]]
                out.append(modifier + self.hrtb(v["generic_params"]) + self.path(v["trait"]))
            elif kind == "outlives":
                out.append(v)
            elif kind == "use":
                out.append("use<" + ", ".join(one(x)[1] for x in v) + ">")
            else:
                raise UnknownShape(f"bound {kind}")
        return " + ".join(out)

    def hrtb(self, params):
        return f"for<{', '.join(self.param(p) for p in params)}> " if params else ""

    # --- generics and signatures -------------------------------------------------

    def param(self, p):
        kind, v = one(p["kind"])
        if kind == "lifetime":
            return p["name"] + (": " + " + ".join(v["outlives"]) if v["outlives"] else "")
        if kind == "type":
            text = p["name"] + (": " + self.bounds(v["bounds"]) if v["bounds"] else "")
            return text + (" = " + self.ty(v["default"]) if v.get("default") else "")
        if kind == "const":
            text = f"const {p['name']}: {self.ty(v['type'])}"
            return text + (" = " + v["default"] if v.get("default") else "")
        raise UnknownShape(f"generic param {kind}")

    def params(self, generics):
        """`<...>` of the explicit generic parameters (`impl Trait` arguments are synthetic)."""
        shown = [self.param(p) for p in generics["params"]
                 if not one(p["kind"])[1] or not one(p["kind"])[1].get("is_synthetic")]
        return f"<{', '.join(shown)}>" if shown else ""

    def predicates(self, generics):
        out = []
        for w in generics["where_predicates"]:
            kind, v = one(w)
            if kind == "bound_predicate":
                out.append(f"{self.hrtb(v['generic_params'])}{self.ty(v['type'])}: {self.bounds(v['bounds'])}")
            elif kind == "lifetime_predicate":
                out.append(f"{v['lifetime']}: {' + '.join(v['outlives'])}")
            elif kind == "eq_predicate":
                rhs_kind, rhs = one(v["rhs"])
                rhs = self.ty(rhs) if rhs_kind == "type" else (rhs.get("value") or rhs["expr"])
                out.append(f"{self.ty(v['lhs'])} = {rhs}")
            else:
                raise UnknownShape(f"where predicate {kind}")
        return out

    @staticmethod
    def where(predicates):
        return " where " + ", ".join(predicates) if predicates else ""

    def bounds_as_predicates(self, generics):
        """An impl's `impl<T: Bound>` bounds written as where predicates, so that each method of
        the impl carries them."""
        out = []
        for p in generics["params"]:
            kind, v = one(p["kind"])
            if kind == "type" and v["bounds"]:
                out.append(f"{p['name']}: {self.bounds(v['bounds'])}")
            elif kind == "lifetime" and v["outlives"]:
                out.append(f"{p['name']}: {' + '.join(v['outlives'])}")
        return out

    @staticmethod
    def header(h):
        text = "const " if h["is_const"] else ""
        text += "async " if h["is_async"] else ""
        text += "unsafe " if h["is_unsafe"] else ""
        abi = h["abi"]
        if abi != "Rust":
            text += f'extern "{abi if isinstance(abi, str) else one(abi)[0]}" '
        return text

    def sig(self, sig):
        inputs = []
        for name, t in sig["inputs"]:
            if name == "self":
                rendered = self.ty(t)
                inputs.append({"Self": "self", "&Self": "&self", "&mut Self": "&mut self"}.get(
                    rendered, f"self: {rendered}"))
            else:
                inputs.append(f"{name}: {self.ty(t)}")
        if sig.get("is_c_variadic"):
            inputs.append("...")
        output = f" -> {self.ty(sig['output'])}" if sig.get("output") else ""
        return f"({', '.join(inputs)}){output}"

    def function(self, path, f, extra_predicates=(), prefix="pub "):
        predicates = list(extra_predicates) + self.predicates(f["generics"])
        return (f"{prefix}{self.header(f['header'])}fn {path}{self.params(f['generics'])}"
                f"{self.sig(f['sig'])}{self.where(predicates)}")

    # --- the walk ------------------------------------------------------------------

    def add(self, key, line):
        self.lines.append((key, line))

    def reachable(self, module_id, path):
        """Records the public path of every item reachable from `module_id`, breadth first, so
        that each item gets its shortest path."""
        queue, deferred = [(module_id, path)], []
        seen = set()
        while queue or deferred:
            module_id, path = queue.pop(0) if queue else deferred.pop(0)
            if module_id in seen:
                continue
            seen.add(module_id)
            for child_id in self.item(module_id)["inner"]["module"]["items"]:
                for target_id, name in self.targets(child_id):
                    target = self.item(target_id)
                    child_path = f"{path}::{name}"
                    self.public.setdefault(target_id, child_path)
                    if target and one(target["inner"])[0] == "module":
                        # The prelude re-exports items that have a home module: listed there.
                        (deferred if name == "prelude" else queue).append((target_id, child_path))

    def targets(self, child_id):
        """(item id, name) of what a module's child makes public: the item, or what a re-export
        names (each item of a glob re-export of this crate's module)."""
        child = self.item(child_id)
        if child is None or child["visibility"] != "public":
            return []
        kind, v = one(child["inner"])
        if kind != "use":
            return [(child_id, child["name"])]
        target = self.item(v["id"]) if v["id"] is not None else None
        if target is None or target["crate_id"] != 0:
            return []  # an external item: listed as a re-export
        if v["is_glob"]:
            return [t for c in target["inner"]["module"]["items"] for t in self.targets(c)]
        return [(v["id"], v["name"])]

    def walk(self):
        self.public[self.root] = self.crate_name
        self.reachable(self.root, self.crate_name)
        self.done = set()
        self.module(self.root, self.crate_name)
        return self.lines

    def module(self, module_id, path):
        if module_id != self.root:
            self.add((path, 0), f"pub mod {path}")
        for child_id in self.item(module_id)["inner"]["module"]["items"]:
            child = self.item(child_id)
            if child is None or child["visibility"] != "public":
                continue
            kind, v = one(child["inner"])
            if kind == "use":
                target = self.item(v["id"]) if v["id"] is not None else None
                if target is None or target["crate_id"] != 0:
                    name = "*" if v["is_glob"] else v["name"]
                    self.add((f"{path}::{name}", 0), f"pub use {path}::{name} = {v['source']}")
                    continue
            for target_id, name in self.targets(child_id):
                here = f"{path}::{name}"
                if self.public.get(target_id) == here:
                    self.entry(target_id, here)
                else:
                    # Also public at another path, where it is listed: this path as a re-export.
                    self.add((here, 0), f"pub use {here} = {self.public[target_id]}")

    def entry(self, id_, path):
        """One public item at `path`: its line, then its fields, variants, items and impls. An
        item re-exported at several paths is listed once, at its shortest."""
        if self.public.get(id_) != path or id_ in self.done:
            return
        self.done.add(id_)
        item = self.item(id_)
        kind, v = one(item["inner"])
        attrs = "".join(f"#[{a}] " for a in item["attrs"] if a == "non_exhaustive")
        key = (path, 0)
        if kind == "module":
            self.module(id_, path)
        elif kind == "struct":
            generics = self.params(v["generics"])
            where = self.where(self.predicates(v["generics"]))
            shape, fields = one(v["kind"])
            if shape == "unit":
                self.add(key, f"{attrs}pub struct {path}{generics}{where};")
            elif shape == "tuple":
                shown = [f"pub {self.ty(self.item(f)['inner']['struct_field'])}" if f is not None else "_"
                         for f in fields]
                self.add(key, f"{attrs}pub struct {path}{generics}({', '.join(shown)}){where};")
            else:
                hidden = " { .. }" if fields["has_stripped_fields"] else ""
                self.add(key, f"{attrs}pub struct {path}{generics}{where}{hidden}")
                self.fields(path, fields["fields"])
            self.impls(id_, path, v["impls"])
        elif kind == "union":
            self.add(key, f"{attrs}pub union {path}{self.params(v['generics'])}{self.where(self.predicates(v['generics']))}")
            self.fields(path, v["fields"])
            self.impls(id_, path, v["impls"])
        elif kind == "enum":
            hidden = " { .. }" if v["has_stripped_variants"] else ""
            self.add(key, f"{attrs}pub enum {path}{self.params(v['generics'])}"
                          f"{self.where(self.predicates(v['generics']))}{hidden}")
            for variant_id in v["variants"]:
                self.variant(path, variant_id)
            self.impls(id_, path, v["impls"])
        elif kind == "function":
            self.add(key, attrs + self.function(path, v))
        elif kind == "trait":
            self.trait(path, v, attrs)
        elif kind == "trait_alias":
            self.add(key, f"pub trait {path}{self.params(v['generics'])} = {self.bounds(v['params'])}")
        elif kind == "type_alias":
            self.add(key, f"pub type {path}{self.params(v['generics'])}"
                          f"{self.where(self.predicates(v['generics']))} = {self.ty(v['type'])}")
        elif kind == "constant":
            const = v["const"]
            value = const["expr"] if const["is_literal"] or not const.get("value") else const["value"]
            self.add(key, f"pub const {path}: {self.ty(v['type'])} = {value}")
        elif kind == "static":
            mutable = "mut " if v["is_mutable"] else ""
            self.add(key, f"pub static {mutable}{path}: {self.ty(v['type'])}")
        elif kind == "macro":
            self.add(key, f"pub macro {path}!")
        elif kind == "proc_macro":
            self.add(key, f"pub proc_macro {path} ({v['kind']})")
        else:
            raise UnknownShape(f"item {kind} at {path}")

    def fields(self, path, field_ids):
        for field_id in field_ids:
            field = self.item(field_id)
            if field["visibility"] == "public":
                self.add((path, 1, field["name"]),
                         f"pub {path}::{field['name']}: {self.ty(field['inner']['struct_field'])}")

    def variant(self, path, variant_id):
        variant = self.item(variant_id)
        v = variant["inner"]["variant"]
        name = f"{path}::{variant['name']}"
        shape, fields = one(v["kind"])
        key = (path, 1, variant["name"])
        if shape == "plain":
            value = f" = {v['discriminant']['expr']}" if v.get("discriminant") else ""
            self.add(key, f"pub {name}{value}")
        elif shape == "tuple":
            shown = [self.ty(self.item(f)["inner"]["struct_field"]) if f is not None else "_"
                     for f in fields]
            self.add(key, f"pub {name}({', '.join(shown)})")
        else:
            hidden = " { .. }" if fields["has_stripped_fields"] else ""
            self.add(key, f"pub {name}{hidden}")
            for field_id in fields["fields"]:
                field = self.item(field_id)
                self.add((path, 1, variant["name"], field["name"]),
                         f"pub {name}::{field['name']}: {self.ty(field['inner']['struct_field'])}")

    def trait(self, path, v, attrs):
        unsafe = "unsafe " if v["is_unsafe"] else ""
        auto = "auto " if v["is_auto"] else ""
        supertraits = ": " + self.bounds(v["bounds"]) if v["bounds"] else ""
        self.add((path, 0), f"{attrs}pub {unsafe}{auto}trait {path}{self.params(v['generics'])}"
                            f"{supertraits}{self.where(self.predicates(v['generics']))}")
        for item_id in v["items"]:
            item = self.item(item_id)
            kind, iv = one(item["inner"])
            name = f"{path}::{item['name']}"
            key = (path, 1, item["name"])
            if kind == "function":
                body = " { .. }" if iv["has_body"] else ""
                self.add(key, self.function(name, iv) + body)
            elif kind == "assoc_type":
                bounds = ": " + self.bounds(iv["bounds"]) if iv["bounds"] else ""
                default = " = " + self.ty(iv["type"]) if iv.get("type") else ""
                self.add(key, f"pub type {name}{self.params(iv['generics'])}{bounds}"
                              f"{self.where(self.predicates(iv['generics']))}{default}")
            elif kind == "assoc_const":
                default = f" = {iv['value']}" if iv.get("value") else ""
                self.add(key, f"pub const {name}: {self.ty(iv['type'])}{default}")
            else:
                raise UnknownShape(f"trait item {kind} in {path}")
        for impl_id in v["implementations"]:
            impl = self.item(impl_id)["inner"]["impl"]
            for_id = one(impl["for"])[1].get("id") if one(impl["for"])[0] == "resolved_path" else None
            # An impl for one of this crate's public types is listed with the type.
            if for_id is None or for_id not in self.public:
                self.impl(path, impl)

    def impls(self, type_id, path, impl_ids):
        for impl_id in impl_ids:
            self.impl(path, self.item(impl_id)["inner"]["impl"], impl_id)

    def impl(self, path, impl, impl_id=None):
        if impl["blanket_impl"] is not None:
            return
        trait = impl["trait"]
        if impl["is_synthetic"] and (trait is None or trait["path"] not in AUTO_TRAITS):
            return
        if trait is not None and self.path_of(trait["id"], trait["path"]) in UNLISTED_TRAITS:
            return
        generics = self.params(impl["generics"])
        predicates = self.predicates(impl["generics"])
        for_type = self.ty(impl["for"])
        if trait is None:
            # An inherent impl: each public item, with the impl's bounds.
            impl_predicates = self.bounds_as_predicates(impl["generics"]) + predicates
            for item_id in impl["items"]:
                item = self.item(item_id)
                if item["visibility"] != "public":
                    continue
                kind, iv = one(item["inner"])
                name = f"{for_type}::{item['name']}"
                key = (path, 2, item["name"], name)
                if kind == "function":
                    self.add(key, self.function(name, iv, impl_predicates))
                elif kind == "assoc_const":
                    self.add(key, f"pub const {name}: {self.ty(iv['type'])}{self.where(impl_predicates)}")
                elif kind == "assoc_type":
                    self.add(key, f"pub type {name} = {self.ty(iv['type'])}{self.where(impl_predicates)}")
                else:
                    raise UnknownShape(f"impl item {kind} of {path}")
            return
        negative = "!" if impl["is_negative"] else ""
        unsafe = "unsafe " if impl["is_unsafe"] else ""
        assoc = []
        for item_id in impl["items"]:
            item = self.item(item_id)
            kind, iv = one(item["inner"])
            if kind == "assoc_type":
                assoc.append(f"type {item['name']}{self.params(iv['generics'])} = {self.ty(iv['type'])};")
            elif kind == "assoc_const":
                assoc.append(f"const {item['name']}: {self.ty(iv['type'])} = {iv.get('value')};")
        body = " { " + " ".join(assoc) + " }" if assoc else ""
        line = (f"{unsafe}impl{generics} {negative}{self.path(trait)} for {for_type}"
                f"{self.where(predicates)}{body}")
        self.add((path, 3, line), line)


def listing(doc):
    lines = Api(doc).walk()
    seen, out = set(), []
    for _, line in sorted(lines, key=lambda kl: (kl[0], kl[1])):
        if line not in seen:
            seen.add(line)
            out.append(line)
    return out


def load():
    if not os.path.isfile(JSON_FILE):
        sys.exit(f"public-api: no rustdoc JSON at {JSON_FILE}: run `make api-check` (it writes "
                 "it with `cargo rustdoc`, see the Makefile's API_JSON)")
    with open(JSON_FILE, encoding="utf-8") as f:
        doc = json.load(f)
    try:
        return listing(doc)
    except UnknownShape as e:
        sys.exit(f"public-api: {JSON_FILE}: {e}")


def diff(committed, found):
    """(added, removed): the lines of `found` not in `committed`, and the other way round."""
    committed_set, found_set = set(committed), set(found)
    return ([line for line in found if line not in committed_set],
            [line for line in committed if line not in found_set])


def self_test():
    import unittest
    suite = unittest.defaultTestLoader.discover(HERE, pattern="test_public_api.py")
    result = unittest.TextTestRunner(stream=open(os.devnull, "w")).run(suite)
    if not result.wasSuccessful():
        for _, trace in result.failures + result.errors:
            print(trace, file=sys.stderr)
        sys.exit("public-api: the walker's own tests failed (shared/api/test_public_api.py)")


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else "check"
    if command not in ("check", "update", "count", "print"):
        sys.exit(__doc__)
    if command == "check":
        self_test()
    found = load()
    if command == "update":
        with open(LISTING, "w") as f:
            f.write("".join(line + "\n" for line in found))
        print(f"public-api: wrote {len(found)} lines to {LISTING}")
    elif command == "print":
        print("\n".join(found))
    elif command == "count":
        modules = sum(1 for line in found if line.startswith("pub mod "))
        print(f"{modules} public modules, {len(found) - modules} other public items "
              f"(methods, fields, variants, impls and trait items included)")
    else:
        with open(LISTING) as f:
            committed = [line.rstrip("\n") for line in f if line.strip()]
        added, removed = diff(committed, found)
        if added or removed:
            for line in added:
                print(f"public-api: + {line}   (new, not in public-api.txt)")
            for line in removed:
                print(f"public-api: - {line}   (in public-api.txt, gone)")
            sys.exit(f"public-api: the public API changed ({len(added)} lines added, "
                     f"{len(removed)} removed); if on purpose, run `make api-update` and commit "
                     "shared/api/public-api.txt")
        print(f"public-api: {len(found)} lines, as listed")


if __name__ == "__main__":
    main()
