#!/usr/bin/env python3
"""The public API of lambda-idempotency, as rustdoc renders it, against its committed listing.

Reads the HTML that `cargo doc -p lambda-idempotency --no-deps --all-features` wrote under
DOC_DIR (default: the workspace's target/doc/lambda_idempotency) and lists every public module
and item, one per line, as `kind path` (`mod consumer`, `struct consumer::Consumer`, ...).

    public-api.py check    fails, naming each item, when the listing is not public-api.txt
    public-api.py update   writes public-api.txt
    public-api.py count    prints the number of modules and items
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LISTING = os.path.join(HERE, "public-api.txt")
ROOT = os.path.dirname(os.path.dirname(HERE))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
DOC_DIR = os.environ.get("DOC_DIR") or os.path.join(TARGET, "doc", "lambda_idempotency")
ITEM = re.compile(r"^(struct|enum|trait|fn|type|constant|static|macro|union|derive|attr)\.(.+)\.html$")


def redirect(page):
    """True for the page rustdoc leaves where a private module's item was: a redirect to where
    it is re-exported, which is the same item."""
    with open(page, encoding="utf-8", errors="replace") as f:
        return 'http-equiv="refresh"' in f.read(600)


def listing():
    if not os.path.isfile(os.path.join(DOC_DIR, "index.html")):
        sys.exit(f"public-api: no documentation at {DOC_DIR}: run "
                 "`cargo doc -p lambda-idempotency --no-deps --all-features` first")
    items = []
    for directory, _, files in os.walk(DOC_DIR):
        module = os.path.relpath(directory, DOC_DIR)
        path = [] if module == "." else module.split(os.sep)
        if path and "index.html" in files:
            items.append("mod " + "::".join(path))
        for name in files:
            match = ITEM.match(name)
            if match and not redirect(os.path.join(directory, name)):
                items.append(f"{match.group(1)} " + "::".join(path + [match.group(2)]))
    return sorted(items)


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else "check"
    found = listing()
    if command == "update":
        with open(LISTING, "w") as f:
            f.write("".join(line + "\n" for line in found))
        print(f"public-api: wrote {len(found)} lines to {LISTING}")
    elif command == "count":
        modules = sum(1 for line in found if line.startswith("mod "))
        print(f"{modules} public modules, {len(found) - modules} public items")
    elif command == "check":
        with open(LISTING) as f:
            committed = [line.rstrip("\n") for line in f if line.strip()]
        added = sorted(set(found) - set(committed))
        removed = sorted(set(committed) - set(found))
        if added or removed:
            for line in added:
                print(f"public-api: new, not in public-api.txt: {line}")
            for line in removed:
                print(f"public-api: in public-api.txt, gone: {line}")
            sys.exit("public-api: the public API changed; if on purpose, run "
                     "`make api-update` and commit shared/api/public-api.txt")
        print(f"public-api: {len(found)} modules and items, as listed")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
