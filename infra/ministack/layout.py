"""Lay out the workspace's binaries as `sam build` would, for `sam deploy` on MiniStack.

`sam build` (cargo-lambda, zig) cross-compiles each function for the template's architecture:
18 minutes from clean on 2 cores. MiniStack runs a function's `bootstrap` as a local process, so
the workspace's own build serves: each `AWS::Serverless::Function` gets a directory named by its
logical id holding its binary (its `Metadata.BuildProperties.Binary`) as `bootstrap`, and the
template is written beside them as JSON (cfn-lint's reader keeps every intrinsic) with each
function's `CodeUri` pointing at its directory. Nothing else of the template changes, except the
resources named with --drop (what MiniStack refuses to create; each printed with its reason), which
the dashboards' alarm widgets leave out too.

Usage (in the tools venv, which has cfn-lint):
  python layout.py TEMPLATE BIN_DIR OUT_DIR [--drop LOGICAL_ID=REASON ...]
"""

import json
import os
import shutil
import sys

from cfnlint.decode import decode


def references(value, name: str) -> bool:
    """Whether `value` names the resource `name` (Ref, GetAtt, Sub, DependsOn)."""
    text = json.dumps(value)
    return (f'"Ref": "{name}"' in text or f'"{name}.' in text or f'["{name}"' in text
            or f"${{{name}}}" in text or f"${{{name}." in text or f'"DependsOn": "{name}"' in text)


def leave_out_of_dashboards(resources, name: str) -> None:
    """Takes the alarm `name` out of every dashboard's alarm widgets (a `DashboardBody` is a
    `!Sub` of the body's JSON, which names each alarm `${Id.Arn}`)."""
    for resource in resources.values():
        if resource.get("Type") != "AWS::CloudWatch::Dashboard":
            continue
        body = resource["Properties"]["DashboardBody"]
        if not isinstance(body, dict) or not isinstance(body.get("Fn::Sub"), str):
            continue
        dashboard = json.loads(body["Fn::Sub"])
        for widget in dashboard.get("widgets", []):
            properties = widget.get("properties", {})
            if "alarms" in properties:
                properties["alarms"] = [a for a in properties["alarms"] if a != f"${{{name}.Arn}}"]
        body["Fn::Sub"] = json.dumps(dashboard, indent=1)


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    template_path, bin_dir, out_dir = args[:3]
    drops = {}
    rest = args[3:]
    while rest:
        flag, spec, *rest = rest
        if flag != "--drop" or "=" not in spec:
            sys.exit(f"layout: unexpected {flag} {spec}")
        logical, reason = spec.split("=", 1)
        drops[logical] = reason

    template, errors = decode(template_path)
    if errors:
        sys.exit(f"layout: {template_path}: {errors}")
    resources = template["Resources"]
    for logical, reason in drops.items():
        if logical not in resources:
            sys.exit(f"layout: --drop {logical}: no such resource in {template_path}")
        del resources[logical]
        leave_out_of_dashboards(resources, logical)
        for other, resource in resources.items():
            if references(resource, logical):
                sys.exit(f"layout: cannot drop {logical}: {other} refers to it")
        print(f"layout: left out {logical}: {reason}", file=sys.stderr)

    os.makedirs(out_dir, exist_ok=True)
    for logical, resource in resources.items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        binary = ((resource.get("Metadata") or {}).get("BuildProperties") or {}).get("Binary")
        if not binary:
            sys.exit(f"layout: {logical} has no Metadata.BuildProperties.Binary")
        source = os.path.join(bin_dir, binary)
        if not os.access(source, os.X_OK):
            sys.exit(f"layout: {source} is not built (cargo build --workspace --bins)")
        function_dir = os.path.join(out_dir, logical)
        os.makedirs(function_dir, exist_ok=True)
        # A hard link when the build is on the same file system: no copy of ~45 MB per function.
        target = os.path.join(function_dir, "bootstrap")
        if os.path.exists(target):
            os.remove(target)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
        resource["Properties"]["CodeUri"] = logical
        print(f"layout: {logical}: {binary} -> {target}", file=sys.stderr)
    with open(os.path.join(out_dir, "template.json"), "w") as f:
        json.dump(template, f, indent=1)


if __name__ == "__main__":
    main()
