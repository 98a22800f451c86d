"""``conch package MODEL_DIR --version X.Y.Z``: one validated model version as a reproducible package."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from conch.cli.reference_flag import add_reference_argument, record_reference
from conch.packaging.semver import SemVer, SemVerError, parse_semver


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "package",
        help="package one validated model version as <name>-v<version>.tar.gz",
        description="Validate a model folder made by `conch export` and write one of its versions, with "
        "its config.pbtxt and warm-up files, as a reproducible .tar.gz for `conch install`.",
    )
    parser.add_argument("model_dir", type=Path, metavar="MODEL_DIR", help="the model folder to package")
    parser.add_argument(
        "--version",
        type=_semver,
        required=True,
        metavar="X.Y.Z",
        help="the package's SemVer 2.0.0 version; raise MAJOR when callers must change",
    )
    parser.add_argument(
        "-o", "--output", type=Path, help="package file to write (default: ./<name>-v<version>.tar.gz)"
    )
    parser.add_argument(
        "--model-version",
        type=int,
        metavar="N",
        help="numeric version folder to package (default: the highest)",
    )
    add_reference_argument(parser)
    parser.add_argument(
        "--sign",
        type=Path,
        metavar="KEY",
        help="sign the package with this Ed25519 private key (PEM), for `conch install --verify`",
    )
    parser.set_defaults(run=run)


def _semver(text: str) -> SemVer:
    # argparse shows an ArgumentTypeError's message as-is, and exits 2: a bad version is a usage error.
    try:
        return parse_semver(text)
    except SemVerError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from conch.packaging.archive import PackageError
    from conch.packaging.package import package_model
    from conch.packaging.signing import load_signing_key

    if not args.model_dir.is_dir():
        print(f"conch package: '{args.model_dir}' is not a model folder", file=sys.stderr)
        return 2
    if args.sign is not None and not args.sign.is_file():
        print(f"conch package: signing key '{args.sign}' is not a file", file=sys.stderr)
        return 2
    from conch.cli.progress import Steps, print_summary

    if args.reference is not None:
        from conch.validation.agreement_interval import ReferenceError

        try:
            print(record_reference(args.model_dir, args.model_version, args.reference))
        except ReferenceError as exc:
            print(f"conch package: --reference: {exc}", file=sys.stderr)
            return 1
    try:
        key = load_signing_key(args.sign) if args.sign is not None else None
        with Steps(prefix="conch package: ", label=f"conch package {args.model_dir}") as steps:
            written = package_model(
                args.model_dir, args.version, args.output, args.model_version, key, steps.step
            )
    except PackageError as exc:
        print(f"conch package: {exc}", file=sys.stderr)
        return 1
    name = args.model_dir.resolve().name
    lines = [f"packaged {name} {args.version} as {written}"]
    rows = [("model", name), ("version", str(args.version)), ("file", str(written))]
    rows.append(("bytes", f"{written.stat().st_size:,}"))
    if key is not None:
        from conch.packaging.signing import key_id

        lines.append(f"signed with key {key_id(key.public_key())}")
        rows.append(("signed with key", key_id(key.public_key())))
    print_summary(lines, ["package", ""], rows)
    return 0
