"""`mesos-gpu image variants IMAGE`: the variants of an image in its registry,
and which known nodes each would run on.

The image is read as the framework reads it (framework.images.image_index: the index
and each entry's config, the registry's authentication from --registry_config
or the Docker client config). Nodes are the Mesos master's agents (--master,
their `platform_features` attribute) and any `--node NAME=FEATURES` given by
hand; each is put under the entry the framework would choose for it
(framework.images.variant_selection), or listed as running none, with what it lacks.
"""
import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Dict, List, Optional

from common.errors import UserError
from framework.images import image_index, image_ref
from framework.images.registry_client import (RegistryClient, docker_config_path, load_credentials)
from framework.images.variant_selection import choose, lacks, node_of
from isolator.discovery.platform_features import ATTRIBUTE, FeatureError, NodePlatform, parse_feature


def register(sub) -> None:
    p = sub.add_parser("image", help="image variants: what an image index holds and where "
                                     "each variant runs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("variants",), help="variants: list them")
    p.add_argument("image", help="the image, e.g. registry.local:5000/cv/tf:1.12")
    p.add_argument("--master", metavar="HOST:PORT",
                   help="a Mesos master: its agents are the nodes placed under each variant")
    p.add_argument("--node", action="append", default=[], metavar="NAME=FEATURES",
                   help="a node by hand: its platform_features, '/'-joined as the agent "
                        "attribute (e.g. gpu7=nvidia-535-54/cuda-12-2/nv-compute-8-0/x86-64-v4)")
    p.add_argument("--registry_config", metavar="FILE",
                   help="Docker client config.json with the registry's credentials "
                        "(default: $DOCKER_CONFIG/config.json or ~/.docker/config.json)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="how long to wait for the registry and the master (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def master_nodes(master: str, timeout: float) -> Dict[str, Optional[str]]:
    """hostname -> platform_features of the master's active agents."""
    from framework.scheduling.mesos_driver import check_master, master_address
    check_master(master)
    if master.startswith(("zk://", "zoo://")):
        raise UserError(f"--master {master}: give the leading master's host:port here "
                        f"(ZooKeeper is not read by this command)")
    url = f"http://{master_address(master)}/master/slaves"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            agents = json.load(r).get("slaves", [])
    except (OSError, ValueError) as e:
        raise UserError(f"--master {master}: cannot list its agents ({url}: "
                        f"{getattr(e, 'reason', None) or e})") from None
    out: Dict[str, Optional[str]] = {}
    for agent in agents:
        if agent.get("active", True):
            value = (agent.get("attributes") or {}).get(ATTRIBUTE)
            name = agent.get("hostname") or agent.get("id", "?")
            if name in out:
                name = f"{name} ({agent.get('id', '?')})"
            out[name] = value if isinstance(value, str) else None
    return out


def hand_nodes(specs: List[str]) -> Dict[str, str]:
    out = {}
    for spec in specs:
        name, sep, features = spec.partition("=")
        if not sep or not name:
            raise UserError(f"--node {spec!r}: expected NAME=FEATURES")
        for feature in filter(None, features.split("/")):
            try:
                parse_feature(feature)
            except FeatureError as e:
                raise UserError(f"--node {spec!r}: {e}") from None
        out[name] = features
    return out


def run(args: argparse.Namespace) -> int:
    ref = image_ref.parse(args.image)
    config = args.registry_config or docker_config_path()
    client = RegistryClient(load_credentials(config, required=bool(args.registry_config)),
                            timeout=args.timeout)
    index = image_index.read(client, ref, args.image)
    nodes: Dict[str, Optional[str]] = {}
    if args.master:
        nodes.update(master_nodes(args.master, args.timeout))
    nodes.update(hand_nodes(args.node))
    platforms: Dict[str, NodePlatform] = {name: node_of(value) for name, value in nodes.items()}
    placed: Dict[str, List[str]] = {v.digest: [] for v in index.variants}
    none: Dict[str, NodePlatform] = {}
    for name, platform in sorted(platforms.items()):
        chosen = choose(index, platform)
        if chosen is None:
            none[name] = platform
        else:
            placed[chosen.digest].append(name)
    if args.json:
        print(json.dumps({
            "image": args.image, "digest": index.digest, "mediaType": index.media_type,
            "index": index.is_index, "otherPlatforms": list(index.skipped),
            "variants": [{**v.to_json(), "image": ref.pinned(v.digest), "nodes": placed[v.digest]}
                         for v in index.variants],
            "nodesWithoutVariant": {n: {"features": p.features(),
                                        "lacks": {v.digest: lacks(v, p) for v in index.variants}}
                                    for n, p in none.items()}}, indent=2))
        return 0
    kind = "image index" if index.is_index else "single manifest (runs anywhere)"
    print(f"{args.image}: {kind} {index.digest} ({index.media_type})")
    if index.skipped:
        print(f"  entries for other platforms, skipped: {', '.join(index.skipped)}")
    width = max((len(", ".join(v.features)) for v in index.variants), default=0)
    width = max(width, len("features"))
    print(f"  {'#':>2}  {'digest':<12}  {'features':<{width}}  {'CUDA':<5}  runs on")
    for v in index.variants:
        features = ", ".join(v.features) or "(fallback)"
        where = ", ".join(placed[v.digest]) if nodes else "-"
        print(f"  {v.position:>2}  {v.short:<12}  {features:<{width}}  {v.cuda or '-':<5}  "
              f"{where or 'no known node'}")
    if not nodes:
        print("  (give --master HOST:PORT or --node NAME=FEATURES to see where each runs)")
    for name, platform in none.items():
        closest = min(index.variants, key=lambda v: len(lacks(v, platform)))
        print(f"  {name} runs no variant: closest is entry {closest.position}, it lacks "
              f"{', '.join(lacks(closest, platform))} (node: "
              f"{' '.join(platform.features()) or 'no platform_features'})")
    sys.stdout.flush()
    return 0
