"""Wire a deployed stack's HTTP APIs on MiniStack: what MiniStack leaves out of `sam deploy`.

SAM writes an HTTP API's routes, integrations and JWT authorizers into the API's OpenAPI `Body`
(`AWS::ApiGatewayV2::Api`); AWS imports that body, MiniStack creates the API without them (every
request answers 404). This reads the body from the stack's processed template (SAM's own
expansion of template.yaml, as MiniStack ran it), resolves its intrinsics against the stack, and
creates the same authorizers, integrations and routes with the API Gateway v2 calls. What it does
not model (another integration or authorizer type, CORS, a non-`$default` stage, ...) is refused
by name: nothing is wired half.

Usage: python wire_api.py STACK_NAME   (AWS_ENDPOINT_URL and the region from the environment;
prints `API_URL=...` for the first API, path-style, since *.localhost need not resolve).
"""

import json
import os
import re
import sys

import boto3

# Keys of the OpenAPI body this wiring understands; any other is refused.
KNOWN_BODY_KEYS = {"openapi", "info", "paths", "components", "tags"}
KNOWN_OPERATION_KEYS = {"x-amazon-apigateway-integration", "security", "responses", "parameters"}
METHODS = {"get", "put", "post", "delete", "patch", "head", "options",
           "x-amazon-apigateway-any-method"}


def fail(message: str) -> None:
    sys.exit(f"wire_api: {message}")


class Resolver:
    """The intrinsics SAM leaves in an HTTP API's body: Ref, Fn::Sub, Fn::GetAtt (.Arn)."""

    def __init__(self, stack: str, cfn, lam):
        described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
        self.parameters = {p["ParameterKey"]: p["ParameterValue"]
                           for p in described.get("Parameters", [])}
        self.physical = {r["LogicalResourceId"]: r.get("PhysicalResourceId", "")
                         for r in cfn.describe_stack_resources(StackName=stack)["StackResources"]}
        self.region = cfn.meta.region_name
        self.account = described["StackId"].split(":")[4]
        self.stack = stack
        self.lam = lam
        self.list_parameters = set()

    def ref(self, name: str):
        pseudo = {"AWS::StackName": self.stack, "AWS::Region": self.region,
                  "AWS::AccountId": self.account, "AWS::Partition": "aws",
                  "AWS::URLSuffix": "amazonaws.com"}
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            value = self.parameters[name]
            return [v.strip() for v in value.split(",")] if name in self.list_parameters else value
        if name in self.physical:
            return self.physical[name]
        fail(f"cannot resolve Ref {name}")

    def get_att(self, logical: str, attribute: str) -> str:
        if attribute != "Arn":
            fail(f"cannot resolve Fn::GetAtt {logical}.{attribute}")
        name = self.physical.get(logical) or fail(f"no resource {logical} in the stack")
        return self.lam.get_function(FunctionName=name)["Configuration"]["FunctionArn"]

    def resolve(self, value):
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if list(value) == ["Ref"]:
            return self.ref(value["Ref"])
        if list(value) == ["Fn::GetAtt"]:
            target = value["Fn::GetAtt"]
            logical, attribute = target.split(".", 1) if isinstance(target, str) else target
            return self.get_att(logical, attribute)
        if list(value) == ["Fn::Sub"]:
            text = value["Fn::Sub"]
            if not isinstance(text, str):
                fail("Fn::Sub with a variable map is not modelled")

            def one(m):
                name = m.group(1)
                if "." in name:
                    return self.get_att(*name.split(".", 1))
                return str(self.ref(name))

            return re.sub(r"\$\{([^}!]+)\}", one, text)
        if any(k.startswith("Fn::") for k in value):
            fail(f"intrinsic {next(iter(value))} in the API's body is not modelled")
        return {k: self.resolve(v) for k, v in value.items()}


def lambda_arn(uri: str) -> str:
    """The function ARN inside an `arn:aws:apigateway:...:lambda:path/.../functions/ARN/invocations`."""
    m = re.search(r"/functions/(arn:[^/]+)/invocations$", uri)
    return m.group(1) if m else uri


def wire(api_id: str, body: dict, v2) -> list[str]:
    unknown = set(body) - KNOWN_BODY_KEYS
    if unknown:
        fail(f"API {api_id}: body keys not modelled: {sorted(unknown)}")
    if v2.get_routes(ApiId=api_id)["Items"]:
        return [f"API {api_id} already has routes: left as it is"]
    done = []
    authorizers = {}
    schemes = (body.get("components") or {}).get("securitySchemes") or {}
    for name, scheme in schemes.items():
        auth = scheme.get("x-amazon-apigateway-authorizer") or fail(f"security scheme {name}: no authorizer")
        if auth.get("type") != "jwt":
            fail(f"authorizer {name}: type {auth.get('type')} is not modelled (only jwt)")
        jwt = auth["jwtConfiguration"]
        audience = jwt.get("audience") or []
        created = v2.create_authorizer(
            ApiId=api_id, Name=name, AuthorizerType="JWT",
            IdentitySource=[auth["identitySource"]],
            JwtConfiguration={"Issuer": jwt["issuer"],
                              "Audience": audience if isinstance(audience, list) else [audience]},
        )
        authorizers[name] = created["AuthorizerId"]
        done.append(f"authorizer {name} (JWT, issuer {jwt['issuer']}, audience {audience})")
    integrations = {}
    for path, item in (body.get("paths") or {}).items():
        for method, op in item.items():
            if method not in METHODS:
                fail(f"{path}: {method} is not modelled")
            unknown = set(op) - KNOWN_OPERATION_KEYS
            if unknown:
                fail(f"{method} {path}: keys not modelled: {sorted(unknown)}")
            integration = op["x-amazon-apigateway-integration"]
            if integration.get("type") != "aws_proxy":
                fail(f"{method} {path}: integration type {integration.get('type')} is not modelled")
            key = (integration["uri"], integration.get("payloadFormatVersion", "2.0"))
            if key not in integrations:
                integrations[key] = v2.create_integration(
                    ApiId=api_id, IntegrationType="AWS_PROXY", IntegrationMethod="POST",
                    IntegrationUri=lambda_arn(key[0]), PayloadFormatVersion=key[1],
                )["IntegrationId"]
                done.append(f"integration {lambda_arn(key[0])} (payload {key[1]})")
            verb = "ANY" if method == "x-amazon-apigateway-any-method" else method.upper()
            route = {"ApiId": api_id, "RouteKey": f"{verb} {path}",
                     "Target": f"integrations/{integrations[key]}"}
            security = op.get("security") or []
            if len(security) > 1 or any(len(s) != 1 for s in security):
                fail(f"{verb} {path}: more than one security requirement is not modelled")
            for requirement in security:
                (name, scopes), = requirement.items()
                route.update(AuthorizationType="JWT", AuthorizerId=authorizers[name],
                             AuthorizationScopes=scopes)
            v2.create_route(**route)
            done.append(f"route {verb} {path}" + (f" (scopes {route.get('AuthorizationScopes')})"
                                                  if security else ""))
    return done


def main() -> None:
    if len(sys.argv) != 2:
        fail("usage: wire_api.py STACK_NAME")
    stack = sys.argv[1]
    cfn, v2, lam = boto3.client("cloudformation"), boto3.client("apigatewayv2"), boto3.client("lambda")
    processed = cfn.get_template(StackName=stack, TemplateStage="Processed")["TemplateBody"]
    if isinstance(processed, str):
        processed = json.loads(processed)
    resolver = Resolver(stack, cfn, lam)
    resolver.list_parameters = {name for name, p in (processed.get("Parameters") or {}).items()
                                if p.get("Type") == "CommaDelimitedList"}
    api_url = None
    for logical, resource in processed["Resources"].items():
        if resource.get("Type") != "AWS::ApiGatewayV2::Api" or "Body" not in resource.get("Properties", {}):
            continue
        api_id = resolver.physical.get(logical) or fail(f"{logical} is not in the stack")
        stages = [s["StageName"] for s in v2.get_stages(ApiId=api_id)["Items"]]
        if stages != ["$default"]:
            fail(f"{logical}: stages {stages} are not modelled (only $default)")
        for line in wire(api_id, resolver.resolve(resource["Properties"]["Body"]), v2):
            print(f"wire_api: {logical}: {line}", file=sys.stderr)
        if api_url is None:
            api_url = f"{os.environ['AWS_ENDPOINT_URL'].rstrip('/')}/_aws/execute-api/{api_id}"
    if api_url is None:
        fail(f"stack {stack} has no HTTP API with an OpenAPI body")
    print(f"API_URL={api_url}")


if __name__ == "__main__":
    main()
