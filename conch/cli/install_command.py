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
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from conch.packaging.archive import PackageError
    from conch.packaging.install import install_package

    usage_error = _usage_error(args)
    if usage_error:
        print(f"conch install: {usage_error}", file=sys.stderr)
        return 2
    try:
        installed = install_package(args.package, args.repository, args.version)
    except PackageError as exc:
        print(f"conch install: refused {args.package}: {exc}", file=sys.stderr)
        return 1
    print(
        f"installed {installed.name} {installed.package_version} as version {installed.version} "
        f"in {installed.version_dir}"
    )
    if installed.model_files_replaced:
        print(f"config.pbtxt and warm-up files of '{installed.name}' now come from the package")
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
    return ""
