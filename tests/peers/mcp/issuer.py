"""An OAuth authorization server's signing half, for `sandpipe serve --jwks` (tests/tests/serve.rs):
keys made with `cryptography`, tokens signed with PyJWT (both pinned in requirements.txt: PyJWT
is what the MCP SDK itself signs and checks tokens with). Nothing here knows about sandpipe.

    python issuer.py keys DIR
        an RSA key (kid `rsa-1`, RS256) and a P-256 key (kid `ec-1`, ES256) in DIR/*.pem, their
        public halves as DIR/jwks.json; and a second RSA key with the same kid `rsa-1` in
        DIR/impostor.pem, which the JWKS does not hold
    python issuer.py rotate DIR
        a new P-256 key, kid `ec-2`, and DIR/jwks.next.json: the JWKS with it beside the
        others, to be moved over jwks.json (a key rotation)
    python issuer.py token DIR KEY ISS AUD SUB [exp=SECONDS] [nbf=SECONDS] [drop=CLAIM]...
        a token signed with DIR/KEY.pem (`rsa-1`, `ec-1`, `impostor`), `exp` SECONDS from now
        (default 300; negative: expired), `nbf` likewise when given, claims dropped by name
    python issuer.py forge DIR ATTACK ISS AUD SUB
        an attacker's token: `none` (alg none, no signature) or `hs256` (HMAC keyed with the
        RSA public key's PEM: the algorithm confusion attack), both naming kid `rsa-1`
"""

import base64
import hashlib
import hmac
import json
import sys
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

KEYS = {
    "rsa-1": ("RS256", "rsa-1"),
    "ec-1": ("ES256", "ec-1"),
    "ec-2": ("ES256", "ec-2"),
    "impostor": ("RS256", "rsa-1"),
}


def pem(key):
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def keys(out):
    out.mkdir(parents=True, exist_ok=True)
    made = {
        "rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec-1": ec.generate_private_key(ec.SECP256R1()),
        "impostor": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    }
    for name, key in made.items():
        (out / f"{name}.pem").write_bytes(pem(key))
    public = []
    for name in ("rsa-1", "ec-1"):
        alg, kid = KEYS[name]
        algorithm = jwt.get_algorithm_by_name(alg)
        jwk = algorithm.to_jwk(made[name].public_key(), as_dict=True)
        jwk.update({"kid": kid, "use": "sig", "alg": alg})
        public.append(jwk)
    (out / "jwks.json").write_text(json.dumps({"keys": public}, indent=2))
    (out / "rsa-1.pub.pem").write_bytes(
        made["rsa-1"].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def rotate(out):
    key = ec.generate_private_key(ec.SECP256R1())
    (out / "ec-2.pem").write_bytes(pem(key))
    jwk = jwt.get_algorithm_by_name("ES256").to_jwk(key.public_key(), as_dict=True)
    jwk.update({"kid": "ec-2", "use": "sig", "alg": "ES256"})
    jwks = json.loads((out / "jwks.json").read_text())
    jwks["keys"].append(jwk)
    (out / "jwks.next.json").write_text(json.dumps(jwks, indent=2))


def claims(iss, aud, sub, extra):
    now = int(time.time())
    c = {"iss": iss, "aud": aud, "sub": sub, "iat": now, "exp": now + 300}
    for word in extra:
        name, value = word.split("=", 1)
        if name == "drop":
            c.pop(value, None)
        else:
            c[name] = now + int(value)
    return c


def token(out, name, iss, aud, sub, extra):
    alg, kid = KEYS[name]
    key = serialization.load_pem_private_key((out / f"{name}.pem").read_bytes(), password=None)
    return jwt.encode(claims(iss, aud, sub, extra), key, algorithm=alg, headers={"kid": kid})


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(out, attack, iss, aud, sub):
    body = b64(json.dumps(claims(iss, aud, sub, [])).encode())
    if attack == "none":
        return f"{b64(json.dumps({'alg': 'none', 'typ': 'JWT', 'kid': 'rsa-1'}).encode())}.{body}."
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    secret = (out / "rsa-1.pub.pem").read_bytes()
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


if __name__ == "__main__":
    verb, out, *rest = sys.argv[1:]
    out = Path(out)
    if verb == "keys":
        keys(out)
    elif verb == "rotate":
        rotate(out)
    elif verb == "token":
        print(token(out, rest[0], rest[1], rest[2], rest[3], rest[4:]))
    elif verb == "forge":
        print(forge(out, rest[0], rest[1], rest[2], rest[3]))
    else:
        sys.exit(f"unknown verb {verb}")
