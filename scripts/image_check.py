"""Checks that scripts/image_test.sh runs against a built image: its configuration and its health.

image_check.py config INSPECT_JSON     the image runs `actonce serve` as a non-root user,
                                       on loopback, with its data directory a volume
image_check.py health HOST:PORT        grpc.health.v1 answers SERVING within --timeout
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

DATA_DIR = "/var/lib/actonce"


def check_config(inspect_json: str) -> list[str]:
    """What is wrong with the image's OCI configuration, as `buildah inspect` prints it."""
    config = json.loads(inspect_json)["OCIv1"]["config"]
    problems = []
    if config.get("Entrypoint") != ["actonce", "serve"]:
        problems.append(f"entrypoint is {config.get('Entrypoint')}, not ['actonce', 'serve']")
    user = str(config.get("User", ""))
    if user.split(":")[0] in ("", "0", "root"):
        problems.append(f"runs as {user or 'root (no USER)'}")
    if not user.split(":")[0].isdigit():
        # Kubernetes can only verify runAsNonRoot for a numeric user.
        problems.append(f"user {user!r} is not numeric")
    if DATA_DIR not in (config.get("Volumes") or {}):
        problems.append(f"{DATA_DIR} is not a volume")
    env = dict(item.split("=", 1) for item in config.get("Env", []))
    if env.get("ACTONCE_DATA_DIR") != DATA_DIR:
        problems.append(f"ACTONCE_DATA_DIR is {env.get('ACTONCE_DATA_DIR')!r}")
    if not env.get("ACTONCE_LISTEN", "").startswith("127.0.0.1:"):
        problems.append(f"ACTONCE_LISTEN is {env.get('ACTONCE_LISTEN')!r}, not loopback")
    return problems


def wait_serving(target: str, timeout: float) -> str:
    """Ask Check("") until SERVING or the timeout; return the last status seen."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                last = str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return last
            except grpc.RpcError as error:
                last = f"{error.code().name}"
            time.sleep(0.5)
    return last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    config = commands.add_parser("config")
    config.add_argument("inspect_json")
    health = commands.add_parser("health")
    health.add_argument("target")
    health.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    if args.command == "config":
        problems = check_config(args.inspect_json)
        for problem in problems:
            print(f"image-check: {problem}", file=sys.stderr)
        return 1 if problems else 0
    status = wait_serving(args.target, args.timeout)
    print(f"image-check: grpc.health.v1 at {args.target}: {status}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
