"""A local OpenID Connect issuer for `make up-ministack`: what MiniStack's JWT authorizer needs.

MiniStack checks a token as API Gateway does: the signature against the keys its issuer
publishes (`{issuer}/.well-known/openid-configuration` -> `jwks_uri`), then `iss`, `exp`, `aud`
and the route's scopes. This serves one RS256 key, made at start and never written anywhere,
on 127.0.0.1:

    GET /.well-known/openid-configuration   {"issuer", "jwks_uri"}
    GET /.well-known/jwks.json              the public key
    GET /token?sub=alice&scope=a%20b&aud=payments-api&ttl=3600
                                            a signed token (local only: anyone who can reach
                                            the port can mint one)

Usage: python issuer.py PORT_FILE   (binds a free port, writes it to PORT_FILE, serves until
killed; the issuer URL is http://127.0.0.1:PORT/).
"""

import base64
import json
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

KID = "ministack-local"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def uint(n: int) -> str:
    return b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


def sign(claims: dict) -> str:
    header = {"alg": "RS256", "typ": "JWT", "kid": KID}
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = KEY.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64url(signature)}"


class Handler(BaseHTTPRequestHandler):
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def reply(self, status: int, body, content_type: str = "application/json") -> None:
        data = (json.dumps(body) if content_type == "application/json" else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        if url.path == "/.well-known/openid-configuration":
            self.reply(200, {
                "issuer": self.issuer(),
                "jwks_uri": f"{self.issuer()}.well-known/jwks.json",
                "id_token_signing_alg_values_supported": ["RS256"],
            })
        elif url.path == "/.well-known/jwks.json":
            public = KEY.public_key().public_numbers()
            self.reply(200, {"keys": [{
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": KID,
                "n": uint(public.n), "e": uint(public.e),
            }]})
        elif url.path == "/token":
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            now = int(time.time())
            claims = {
                "iss": self.issuer(),
                "sub": query.get("sub", "alice"),
                "aud": query.get("aud", "payments-api"),
                "iat": now,
                "exp": now + int(query.get("ttl", "43200")),
                "jti": str(uuid.uuid4()),
            }
            if query.get("scope"):
                claims["scope"] = query["scope"]
            self.reply(200, sign(claims), "text/plain")
        else:
            self.reply(404, {"message": "not found"})

    def log_message(self, format, *args) -> None:  # quiet: MiniStack's own log says enough
        pass


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: issuer.py PORT_FILE")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as f:
        f.write(f"{server.server_address[1]}\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
