"""Package signatures: who made a package, not only whether it is intact.

The checksums in ``metadata.json`` catch a package damaged after ``conch package``, but whoever can
rewrite the package can rewrite ``metadata.json`` too. A signature closes that: ``conch package --sign
KEY`` signs the exact bytes of the packaged ``metadata.json`` with an Ed25519 private key, and that
file holds the model's name, its SemVer and every member's ``sha256:`` checksum, so the signature
covers every byte ``conch install`` will write. ``conch install --verify KEY`` checks it with the
public key before any checksum is trusted; a changed metadata byte, a changed member (its checksum no
longer matches the signed one), a wrong key or a missing signature is refused.

Ed25519 because its signatures are deterministic (a signed package stays reproducible), small, and
have no parameters to get wrong. Keys are PEM files, as ``openssl genpkey -algorithm ed25519`` writes
them. The signed message starts with a fixed context line, so a signature made for a package cannot
be passed off as a signature of anything else made with the same key.

The signature travels in the package as ``<name>/signature.json``; it is read, never installed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from conch.packaging.archive import SIGNATURE_FILENAME, PackageError

SIGNATURE_FORMAT = "conch.package-signature/1"
_ALGORITHM = "ed25519"
_CONTEXT = b"conch package metadata.json, signed with Ed25519\n"
_KEYGEN = "`openssl genpkey -algorithm ed25519 -out signing-key.pem` (see docs/packaging.md)"


@dataclass(frozen=True)
class PackageSignature:
    """``signature.json``: the algorithm, the signing key's id and the signature over metadata.json."""

    key_id: str
    signature: bytes

    def to_json(self) -> bytes:
        body = {
            "format": SIGNATURE_FORMAT,
            "algorithm": _ALGORITHM,
            "key_id": self.key_id,
            "signature": base64.b64encode(self.signature).decode("ascii"),
        }
        return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, text: bytes) -> PackageSignature:
        try:
            body = json.loads(text)
            if body["format"] != SIGNATURE_FORMAT or body["algorithm"] != _ALGORITHM:
                raise ValueError(f"not a {SIGNATURE_FORMAT} {_ALGORITHM} signature")
            return cls(str(body["key_id"]), base64.b64decode(body["signature"], validate=True))
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise PackageError(f"the package's {SIGNATURE_FILENAME} cannot be read ({exc})") from None


def key_id(public_key: Ed25519PublicKey) -> str:
    """``sha256:<hex>`` of the raw public key: names the key in messages, never trusted by itself."""
    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return f"sha256:{hashlib.sha256(raw).hexdigest()}"


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file at ``path`` (unencrypted)."""
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except TypeError:
        raise PackageError(
            f"signing key {path} is encrypted: conch reads unencrypted PEM keys; keep the key file "
            "readable by its owner only instead"
        ) from None
    except (OSError, ValueError, UnsupportedAlgorithm) as exc:
        raise PackageError(f"cannot read signing key {path} as a PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise PackageError(f"signing key {path} is not an Ed25519 key: make one with {_KEYGEN}")
    return key


def load_verify_key(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key in the PEM file at ``path``."""
    try:
        key = load_pem_public_key(path.read_bytes())
    except (OSError, ValueError, UnsupportedAlgorithm) as exc:
        raise PackageError(f"cannot read verify key {path} as a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise PackageError(f"verify key {path} is not an Ed25519 public key: see {_KEYGEN}")
    return key


def sign_metadata(metadata: bytes, key: Ed25519PrivateKey) -> PackageSignature:
    """The signature of the packaged ``metadata.json`` bytes."""
    return PackageSignature(key_id(key.public_key()), key.sign(_CONTEXT + metadata))


def verify_metadata(metadata: bytes, signature: bytes | None, key: Ed25519PublicKey, package: str) -> None:
    """Refuse the package unless ``signature`` (``signature.json``'s bytes) is ``key``'s over ``metadata``."""
    if signature is None:
        raise PackageError(
            f"{package} is not signed, and --verify asks for a signature: ask its maker for a package "
            "made with `conch package --sign`"
        )
    parsed = PackageSignature.from_json(signature)
    expected = key_id(key)
    if parsed.key_id != expected:
        raise PackageError(f"{package} is signed by key {parsed.key_id}, not by the key given ({expected})")
    try:
        key.verify(parsed.signature, _CONTEXT + metadata)
    except InvalidSignature:
        raise PackageError(
            f"{package}'s signature does not match its metadata.json: the package was changed after it "
            "was signed"
        ) from None
