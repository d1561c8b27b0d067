#!/usr/bin/env python3
"""Makes a one-layer OCI image archive from a directory, by hand.

    oci-image.py --rootfs DIR --name REF [--entrypoint ARG]... [--cmd ARG]...
                 [--env K=V]... [--user U] -o OUT.tar

OUT.tar is an OCI image layout (oci-layout, index.json, blobs/sha256/...) as
`ctr images import` reads it: one gzip'd layer of DIR (owners root, times 0,
names sorted: the same DIR gives the same digests), an image config for
linux/amd64 and a manifest, named REF in index.json (the containerd name
annotation and the OCI ref name). No registry, no container engine: the real
node of the e2e harness (e2e/node.sh) imports its busybox and pause images
this way.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile


def layer_tar(rootfs):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for top, dirs, files in os.walk(rootfs):
            dirs.sort()
            for name in sorted(dirs + files):
                path = os.path.join(top, name)
                info = tar.gettarinfo(path, arcname=os.path.relpath(path, rootfs))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if info.isfile():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buf.getvalue()


def gzip_bytes(data):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as g:
        g.write(data)
    return buf.getvalue()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rootfs", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--entrypoint", action="append", default=[])
    p.add_argument("--cmd", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--user", default="")
    p.add_argument("-o", "--out", required=True)
    a = p.parse_args()

    blobs = {}

    def blob(data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    raw = layer_tar(a.rootfs)
    layer = gzip_bytes(raw)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {k: v for k, v in {
            "Env": a.env, "Entrypoint": a.entrypoint, "Cmd": a.cmd, "User": a.user,
        }.items() if v},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        "history": [{"created_by": f"e2e/tools/oci-image.py --rootfs {os.path.basename(a.rootfs)}"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": blob(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": blob(layer), "size": len(layer)}],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": manifest["mediaType"],
            "digest": blob(manifest_bytes), "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": a.name,
                            "org.opencontainers.image.ref.name": a.name.rsplit(":", 1)[-1]},
        }],
    }
    files = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
             "index.json": json.dumps(index, sort_keys=True).encode()}
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data
    with tarfile.open(a.out, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(files[name]), 0o644
            tar.addfile(info, io.BytesIO(files[name]))
    print(f"{a.out}: {a.name} {manifest_bytes and blob(manifest_bytes)}")


main()
