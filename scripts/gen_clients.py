"""Generate the client stubs for Go and TypeScript from protos/actonce/v1.

The one way these clients' generated code is made. Every tool is pinned, and
comes from its own ecosystem's registry:

    Go          protoc-gen-go, protoc-gen-go-grpc (clients/go/tools/go.mod),
                run by the grpcio-tools protoc
    TypeScript  ts-proto (clients/typescript/package-lock.json), likewise

The Python client's stubs are the sidecar's own, one package (actonce_api) made by
scripts/gen_protos.py (`make gen`, checked by `make check-gen`). The Java client's
stubs are not committed: Maven generates them at build time (protobuf-maven-plugin
in clients/java/pom.xml, as grpc-java's examples do).

    gen_clients.py             regenerate the committed stubs in place
    gen_clients.py --check     fail, naming the files, when regenerating would change them
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from google.rpc import status_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
WELL_KNOWN = Path(protoc.__file__).parent / "_proto"
# google.rpc.Status and its details, as the googleapis-common-protos wheel
# ships them: the TypeScript client decodes ErrorInfo with them.
GOOGLEAPIS = Path(status_pb2.__file__).parent.parent.parent
CLIENTS = Path("clients")

# Where each language's generated code lives, relative to the repository.
OUTPUTS = {
    "go": CLIENTS / "go" / "gen",
    "typescript": CLIENTS / "typescript" / "src" / "gen",
}

TS_OPTIONS = ",".join(
    [
        "outputServices=grpc-js",
        "env=node",
        "esModuleInterop=true",
        # The package is ESM under "moduleResolution": "nodenext", where a
        # relative import names the emitted .js file.
        "importSuffix=.js",
        "forceLong=number",
        "outputJsonMethods=false",
    ]
)


def _run(cmd: Sequence[str | Path], cwd: Path = ROOT) -> None:
    subprocess.run([str(c) for c in cmd], cwd=cwd, check=True)


def _cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "actonce" / "protoc-plugins"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _go_plugins(bin_dir: Path) -> dict[str, Path]:
    # Built from the versions clients/go/tools/go.mod pins; the Go build cache
    # makes this quick after the first time.
    tools = ROOT / CLIENTS / "go" / "tools"
    _run(
        [
            "go",
            "build",
            "-o",
            f"{bin_dir}/",
            "google.golang.org/protobuf/cmd/protoc-gen-go",
            "google.golang.org/grpc/cmd/protoc-gen-go-grpc",
        ],
        cwd=tools,
    )
    return {name: bin_dir / name for name in ("protoc-gen-go", "protoc-gen-go-grpc")}


def _ts_plugin() -> Path:
    package = ROOT / CLIENTS / "typescript"
    plugin = package / "node_modules" / ".bin" / "protoc-gen-ts_proto"
    if not plugin.exists():
        _run(["npm", "ci", "--silent", "--no-audit", "--no-fund"], cwd=package)
    return plugin


def _protoc(args: Sequence[str | Path], protos: Sequence[str]) -> None:
    code = protoc.main(["protoc", f"-I{PROTOS}", f"-I{WELL_KNOWN}", *map(str, args), *protos])
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")


def _go(out: Path, protos: Sequence[str], plugins: dict[str, Path]) -> None:
    module = "github.com/actonce/actonce/clients/go/gen"
    out.mkdir(parents=True)
    _protoc(
        [
            f"--plugin=protoc-gen-go={plugins['protoc-gen-go']}",
            f"--plugin=protoc-gen-go-grpc={plugins['protoc-gen-go-grpc']}",
            f"--go_out={out}",
            f"--go_opt=module={module}",
            f"--go-grpc_out={out}",
            f"--go-grpc_opt=module={module}",
        ],
        protos,
    )


def _typescript(out: Path, protos: Sequence[str], plugin: Path) -> None:
    out.mkdir(parents=True)
    _protoc(
        [
            f"-I{GOOGLEAPIS}",
            f"--plugin=protoc-gen-ts_proto={plugin}",
            f"--ts_proto_out={out}",
            f"--ts_proto_opt={TS_OPTIONS}",
        ],
        [*protos, "google/rpc/status.proto", "google/rpc/error_details.proto"],
    )


def generate(root: Path) -> None:
    """Write every language's stubs below ``root``, laid out as in the repository."""
    protos = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / "actonce" / "v1").glob("*.proto"))
    bin_dir = _cache()
    go_plugins = _go_plugins(bin_dir)
    ts_plugin = _ts_plugin()
    for out in OUTPUTS.values():
        if (root / out).exists():
            shutil.rmtree(root / out)
    _go(root / OUTPUTS["go"], protos, go_plugins)
    _typescript(root / OUTPUTS["typescript"], protos, ts_plugin)


def _contents(folder: Path) -> dict[Path, bytes]:
    return {
        path.relative_to(folder): path.read_bytes()
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def check() -> int:
    """Generate into a temporary folder and compare with what is committed."""
    with tempfile.TemporaryDirectory() as fresh_dir:
        fresh = Path(fresh_dir)
        generate(fresh)
        stale: list[str] = []
        for out in OUTPUTS.values():
            committed, made = _contents(ROOT / out), _contents(fresh / out)
            for name in sorted(committed.keys() | made.keys()):
                if committed.get(name) != made.get(name):
                    stale.append(str(out / name))
    if stale:
        print("client stubs differ from protos/: run 'make gen-clients'", file=sys.stderr)
        print("\n".join(f"  {name}" for name in stale), file=sys.stderr)
        return 1
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if regenerating changes a file")
    args = parser.parse_args()
    if args.check:
        raise SystemExit(check())
    generate(ROOT)


if __name__ == "__main__":
    main()
