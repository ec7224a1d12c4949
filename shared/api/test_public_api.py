"""Tests of public-api.py's walker on a small rustdoc JSON document (format 57), written here as
rustdoc writes it for:

    pub mod store {
        pub trait Backend: Send {
            type Write;
            fn put(&self, key: &str) -> Result<(), Error>;
            fn name(&self) -> &str { "" }
        }
        pub struct Memory { .. }
        impl Memory {
            pub fn new<T: Into<String>>(name: T) -> Self;
        }
        impl Backend for Memory { type Write = (); ... }
    }
    pub use store::Memory;

Run: python3 -m unittest discover -s shared/api
"""

import copy
import importlib.util
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("public_api", os.path.join(HERE, "public-api.py"))
public_api = importlib.util.module_from_spec(spec)
spec.loader.exec_module(public_api)


def item(id_, name, inner, visibility="public"):
    return {"id": id_, "crate_id": 0, "name": name, "visibility": visibility, "attrs": [],
            "inner": inner}


def path(name, id_, args=None):
    return {"resolved_path": {"path": name, "id": id_, "args": args}}


def ref(t):
    return {"borrowed_ref": {"lifetime": None, "is_mutable": False, "type": t}}


def trait_bound(name, id_):
    return {"trait_bound": {"trait": {"path": name, "id": id_, "args": None},
                            "generic_params": [], "modifier": "none"}}


NO_GENERICS = {"params": [], "where_predicates": []}
HEADER = {"is_const": False, "is_unsafe": False, "is_async": False, "abi": "Rust"}
SELF = ["self", ref({"generic": "Self"})]


def function(inputs, output, generics=NO_GENERICS, has_body=True):
    return {"function": {"sig": {"inputs": inputs, "output": output, "is_c_variadic": False},
                         "generics": generics, "header": HEADER, "has_body": has_body}}


def document():
    result = path("Result", 90, {"angle_bracketed": {"args": [
        {"type": {"tuple": []}}, {"type": path("Error", 91)}], "constraints": []}})
    index = [
        item(0, "demo", {"module": {"is_crate": True, "items": [1, 30], "is_stripped": False}}),
        item(1, "store", {"module": {"is_crate": False, "items": [2, 10], "is_stripped": False}}),
        item(2, "Backend", {"trait": {
            "is_auto": False, "is_unsafe": False, "is_dyn_compatible": True, "items": [3, 4, 5],
            "generics": NO_GENERICS, "bounds": [trait_bound("Send", 92)], "implementations": [20]}}),
        item(3, "Write", {"assoc_type": {"generics": NO_GENERICS, "bounds": [], "type": None}},
             visibility="default"),
        item(4, "put", function([SELF, ["key", ref({"primitive": "str"})]], result, has_body=False),
             visibility="default"),
        item(5, "name", function([SELF], ref({"primitive": "str"})), visibility="default"),
        item(10, "Memory", {"struct": {
            "kind": {"plain": {"fields": [], "has_stripped_fields": True}},
            "generics": NO_GENERICS, "impls": [11, 20]}}),
        item(11, None, {"impl": {
            "is_unsafe": False, "generics": NO_GENERICS, "provided_trait_methods": [],
            "trait": None, "for": path("Memory", 10), "items": [12], "is_negative": False,
            "is_synthetic": False, "blanket_impl": None}}, visibility="default"),
        item(12, "new", function(
            [["name", {"generic": "T"}]], {"generic": "Self"},
            {"params": [{"name": "T", "kind": {"type": {
                "bounds": [{"trait_bound": {
                    "trait": {"path": "Into", "id": 93, "args": {"angle_bracketed": {
                        "args": [{"type": path("String", 94)}], "constraints": []}}},
                    "generic_params": [], "modifier": "none"}}],
                "default": None, "is_synthetic": False}}}],
             "where_predicates": []})),
        item(20, None, {"impl": {
            "is_unsafe": False, "generics": NO_GENERICS, "provided_trait_methods": ["name"],
            "trait": {"path": "Backend", "id": 2, "args": None}, "for": path("Memory", 10),
            "items": [21], "is_negative": False, "is_synthetic": False, "blanket_impl": None}},
             visibility="default"),
        item(21, "Write", {"assoc_type": {"generics": NO_GENERICS, "bounds": [],
                                          "type": {"tuple": []}}}, visibility="default"),
        item(30, None, {"use": {"source": "store::Memory", "name": "Memory", "id": 10,
                                "is_glob": False}}),
    ]
    paths = {
        "90": {"crate_id": 1, "path": ["core", "result", "Result"], "kind": "enum"},
        "91": {"crate_id": 2, "path": ["other", "Error"], "kind": "struct"},
        "92": {"crate_id": 1, "path": ["core", "marker", "Send"], "kind": "trait"},
        "93": {"crate_id": 1, "path": ["core", "convert", "Into"], "kind": "trait"},
        "94": {"crate_id": 3, "path": ["alloc", "string", "String"], "kind": "struct"},
    }
    return {"root": 0, "format_version": 57, "index": {str(i["id"]): i for i in index},
            "paths": paths}


class Listing(unittest.TestCase):
    def test_every_item_with_its_signature(self):
        self.assertEqual(public_api.listing(document()), [
            "pub struct demo::Memory { .. }",
            "pub fn demo::Memory::new<T: Into<String>>(name: T) -> Self",
            "impl demo::store::Backend for demo::Memory { type Write = (); }",
            "pub mod demo::store",
            "pub trait demo::store::Backend: Send",
            "pub type demo::store::Backend::Write",
            "pub fn demo::store::Backend::name(&self) -> &str { .. }",
            "pub fn demo::store::Backend::put(&self, key: &str) -> Result<(), other::Error>",
            "pub use demo::store::Memory = demo::Memory",
        ])

    def test_a_removed_method_is_a_removed_line(self):
        doc = document()
        doc["index"]["11"]["inner"]["impl"]["items"] = []
        added, removed = public_api.diff(public_api.listing(document()), public_api.listing(doc))
        self.assertEqual((added, removed),
                         ([], ["pub fn demo::Memory::new<T: Into<String>>(name: T) -> Self"]))

    def test_a_changed_trait_method_signature_changes_its_line(self):
        doc = copy.deepcopy(document())
        doc["index"]["4"]["inner"]["function"]["sig"]["inputs"][1][1] = {"primitive": "u64"}
        added, removed = public_api.diff(public_api.listing(document()), public_api.listing(doc))
        self.assertEqual(added, ["pub fn demo::store::Backend::put(&self, key: u64) -> Result<(), other::Error>"])
        self.assertEqual(removed, ["pub fn demo::store::Backend::put(&self, key: &str) -> Result<(), other::Error>"])

    def test_a_private_item_is_not_listed(self):
        doc = document()
        doc["index"]["12"]["visibility"] = "crate"
        self.assertNotIn("new", " ".join(public_api.listing(doc)))

    def test_an_unknown_format_is_refused_by_name(self):
        doc = document()
        doc["format_version"] = 99
        with self.assertRaisesRegex(public_api.UnknownShape, "format 99"):
            public_api.listing(doc)


if __name__ == "__main__":
    unittest.main()
