"""``conch install PACKAGE --repository DIR``: verify a package and add it as the model's next version."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "install",
        help="verify a package and install it as the next version of its model",
        description="Verify a package made by `conch package` (member paths, checksums, the MAJOR rule) and "
        "install it atomically as the next numeric version; a refused package changes nothing.",
    )
    parser.add_argument(
        "package", type=Path, metavar="PACKAGE", help="the .tar.gz written by `conch package`"
    )
    parser.add_argument(
        "--repository", type=Path, required=True, metavar="DIR", help="the model repository to install into"
    )
    parser.add_argument(
        "--version", type=int, metavar="N", help="numeric version to install as (default: the next free one)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="install a copy even when the same package is installed already (by default that is "
        "reported and nothing changes)",
    )
    parser.add_argument(
        "--verify",
        type=Path,
        metavar="KEY",
        help="refuse the package unless it is signed by this Ed25519 public key (PEM)",
    )
    parser.add_argument(
        "--max-unpacked-bytes",
        type=_byte_count,
        metavar="BYTES",
        help="refuse a package whose files unpack to more than this; K, M, G suffixes are powers of "
        "1024 (default: 16G)",
    )
    parser.add_argument(
        "--max-members",
        type=_positive,
        metavar="N",
        help="refuse a package of more than N files and folders (default: 10000)",
    )
    parser.set_defaults(run=run)


_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _byte_count(text: str) -> int:
    """``1048576``, ``512M``, ``16G``: a size in bytes (suffixes are powers of 1024, ``B``/``iB`` allowed)."""
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    number, suffix = (cleaned[:-1], cleaned[-1]) if cleaned[-1:] in _SUFFIXES else (cleaned, "")
    if not number.isdigit() or int(number) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size: use bytes, or 512M, 16G")
    return int(number) * _SUFFIXES[suffix]


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive whole number")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from conch.packaging.archive import PackageError, UnpackLimits
    from conch.packaging.install import install_package
    from conch.packaging.signing import load_verify_key

    usage_error = _usage_error(args)
    if usage_error:
        print(f"conch install: {usage_error}", file=sys.stderr)
        return 2
    try:
        key = load_verify_key(args.verify) if args.verify is not None else None
    except PackageError as exc:
        print(f"conch install: {exc}", file=sys.stderr)
        return 2
    # The defaults live in UnpackLimits; importing them here would import the packaging code (and
    # tritonclient) whenever any conch command's flags are parsed.
    chosen = {"max_unpacked_bytes": args.max_unpacked_bytes, "max_members": args.max_members}
    limits = UnpackLimits(**{name: value for name, value in chosen.items() if value is not None})
    from conch.cli.progress import Steps, print_summary

    try:
        with Steps(prefix="conch install: ", label=f"conch install {args.package}") as steps:
            installed = install_package(
                args.package, args.repository, args.version, limits, key, steps.step, args.force
            )
    except PackageError as exc:
        print(f"conch install: refused {args.package}: {exc}", file=sys.stderr)
        return 1
    if installed.already_installed:
        print(
            f"{installed.name} {installed.package_version} is already installed as version "
            f"{installed.version} in {installed.version_dir}; nothing changed (--force installs a copy)"
        )
        return 0
    lines = [
        f"installed {installed.name} {installed.package_version} as version {installed.version} "
        f"in {installed.version_dir}"
    ]
    rows = [
        ("model", installed.name),
        ("package version", installed.package_version),
        ("installed as version", str(installed.version)),
        ("folder", str(installed.version_dir)),
    ]
    if installed.verified_by is not None:
        lines.append(f"signature verified: signed by key {installed.verified_by}")
        rows.append(("signed by key", installed.verified_by))
    if installed.model_files_replaced:
        lines.append(f"config.pbtxt and warm-up files of '{installed.name}' now come from the package")
        rows.append(("config.pbtxt and warm-up", "from the package"))
    print_summary(lines, ["installed", ""], rows)
    return 0


def _usage_error(args: argparse.Namespace) -> str:
    if not args.package.is_file():
        return f"package '{args.package}' is not a file"
    if args.repository.exists() and not args.repository.is_dir():
        return f"repository '{args.repository}' is not a folder"
    if not args.repository.exists() and not args.repository.absolute().parent.is_dir():
        return f"repository '{args.repository}': its parent folder does not exist"
    if args.version is not None and args.version < 1:
        return f"--version {args.version} is not a version number: use 1 or more"
    if args.verify is not None and not args.verify.is_file():
        return f"verify key '{args.verify}' is not a file"
    return ""
